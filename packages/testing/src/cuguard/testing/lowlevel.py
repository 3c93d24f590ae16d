"""The interface of ``cuguard.testing`` for the tools built on it: what they may use beyond the user API.

The sweeps (``cuguard.sweeps``), the differential scenarios and other tools
that drive the simulated driver or the fault proxy import these names from
here and from nowhere else in this package; its other underscore modules are
private and may change in any release. The names here change only in a minor
release, never in a patch release.

- Calls whose signature differs between the cuda-bindings majors:
  :data:`BINDINGS_MAJOR`, :func:`ctx_create`, :func:`add_dependencies`,
  :func:`remove_dependencies`, :func:`get_edges`, :func:`node_dependencies`,
  :func:`node_dependents`.
- The fault proxy: :func:`acquire_proxy` / :func:`release_proxy` (the proxy
  over the active driver, installed for the first user and removed after the
  last), :func:`known_function`, :func:`left_behind`.
- :class:`SafetyDriver`: a wrapper over the real driver that refuses the
  calls that would crash the process (a double destroy, a switch to a
  destroyed context) instead of making them.
- The simulated driver's facts: :data:`STICKY_EXEMPT` (the calls a real driver
  still answers after a sticky fault), :data:`DEVICE_BASE` (where simulated
  device addresses start) and :func:`handle_value` (a handle as an int).
"""

from __future__ import annotations

from cuguard.testing._bindings import (
    BINDINGS_MAJOR,
    add_dependencies,
    ctx_create,
    get_edges,
    node_dependencies,
    node_dependents,
    remove_dependencies,
)
from cuguard.testing._faults import _acquire as acquire_proxy
from cuguard.testing._faults import _release as release_proxy
from cuguard.testing._faults import known_function, left_behind
from cuguard.testing._guard import SafetyDriver
from cuguard.testing._sim.core import DEVICE_BASE
from cuguard.testing._sim.core import h as handle_value
from cuguard.testing._sim.facts import STICKY_EXEMPT

__all__ = [
    "BINDINGS_MAJOR",
    "DEVICE_BASE",
    "STICKY_EXEMPT",
    "SafetyDriver",
    "acquire_proxy",
    "add_dependencies",
    "ctx_create",
    "get_edges",
    "handle_value",
    "known_function",
    "left_behind",
    "node_dependencies",
    "node_dependents",
    "release_proxy",
    "remove_dependencies",
]
