"""The interface of ``cuguard.resources`` for the layers built on it: what they may use beyond the user API.

The graphs layer, the sweeps and libraries that add their own kind of graph
node or capture import these names from here and from nowhere else in this
package; the package's other underscore modules are private and may change in
any release. The names here change only in a minor release, never in a patch
release.

Captures (G6, W5): what a capture's work uses, and the releases that wait for it.

- :class:`OwnerTable`: what a graph or a capture keeps alive, with the write
  marks the race checker reads (B7); :func:`retain` keeps objects in one,
  :func:`split_written` splits one into what its work writes and reads.
- :func:`capture_began`, :func:`capture_joined`, :func:`capture_left`,
  :func:`capture_ended`: a capture cuguard runs starts on a stream, a fork's
  stream joins or leaves it, it ends (the releases that waited for it run).
- :func:`waiting_count`: how many releases wait for a capture to end;
  :func:`stream_undestroyed`: whether a closed stream's driver stream still exists (its destroy
  was refused or is still to come), so that a capture on it goes on.
- :func:`add_close_guard`: register a check that memory must not be freed
  now (a graph that may still run uses it); :func:`graph_let_go`: a graph or
  capture let go of objects (memory closed meanwhile is freed now).
- :func:`unprohibited` and :func:`on_own_behalf`: run a release, or one of
  cuguard's own set-up steps, with the thread in relaxed capture mode;
  :func:`relaxed_failed` raises on_own_behalf's failures from the statuses of a
  compiled call that makes the switch, the step and the restore itself.

Kernel arguments: :func:`check_read_only` (a launch's ``read_only``
positions) and :func:`memory_uses` (the memory of kernel arguments, split
into written and read).

Hooks: :data:`race`, the race checker's module (its flag ``race.ON``, which
the hot modules keep as a global of their own through ``race.follow``;
``race.graph_launched`` records a graph's launch); :func:`follow_compiled`, the compiled build's driver calls as they
come and go.

The compiled build (:data:`cuguard.resources.compiled`): :data:`compiled_build` says whether this
installation is the compiled build (for the compiled layers above, which need it), :func:`compiled_status`
says whether its driver calls are in use and why not; :func:`use_compiled`
turns them off and on for the whole process (to measure or to debug).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cuguard.resources import _memory
from cuguard.resources import _race as race
from cuguard.resources._base import _unprohibited as unprohibited
from cuguard.resources._buildcheck import built as compiled_build
from cuguard.resources._captures import (
    OwnerTable,
    capture_began,
    capture_ended,
    capture_joined,
    capture_left,
    retain,
    split_written,
    stream_undestroyed,
    waiting_count,
)
from cuguard.resources._fast import compiled_status, follow_compiled, use_compiled
from cuguard.resources._memory import graph_let_go
from cuguard.resources._relaxed import on_own_behalf, relaxed_failed
from cuguard.resources._view import check_read_only, memory_uses

__all__ = [
    "OwnerTable",
    "add_close_guard",
    "capture_began",
    "capture_ended",
    "capture_joined",
    "capture_left",
    "check_read_only",
    "compiled_build",
    "compiled_status",
    "follow_compiled",
    "graph_let_go",
    "memory_uses",
    "on_own_behalf",
    "relaxed_failed",
    "race",
    "retain",
    "split_written",
    "stream_undestroyed",
    "unprohibited",
    "use_compiled",
    "waiting_count",
]


def add_close_guard(guard: Callable[[Any], str | None]) -> None:
    """Register ``guard(buffer)``: why ``buffer``'s memory must not be freed now (a graph may still use it), or None.

    ``close()`` of device or pinned memory marked as used by a graph asks every
    guard; while one answers, the memory is closed for use and freed later
    (:func:`graph_let_go`) instead of now (W5). A guard must not raise or call
    the driver. Guards are kept for the life of the process. Never fails.
    """
    _memory._close_guards.append(guard)
