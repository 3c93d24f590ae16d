"""The optional compiled fast path (the ``cuguard-fastpath`` package), as the hot paths see it.

Without that package nothing changes: :func:`follow_fastpath` never calls its
listener and every hot path reads ``None``. With it, each hot module keeps the
fast path's operations (a :class:`cuguard.fastpath.FastOps`) in a module
global, which is ``None`` unless the fast path is on *and* the seam routes
every call straight to the real ``cuda.bindings.driver`` (the seam's
:func:`~cuguard.errors.lowlevel.on_route_change`): under the simulator, a fault
plan, ``record_calls`` or any other installed driver, and while a CUDA
callback runs, the global is ``None`` and every call takes the Python path, so
those see every driver call as before. One global read per hot call, no
per-call comparison of the seam's functions. The compiled functions return
statuses; the hot paths raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cuguard.errors.lowlevel import on_route_change

__all__ = ["follow_fastpath"]


def follow_fastpath(listener: Callable[[Any], None]) -> None:
    """Call ``listener(ops or None)`` whenever the fast path or the seam's routing changes, if it is installed.

    ``ops`` (the fast path's operations) is given only while the fast path is
    on and calls go straight to the real bindings; ``None`` otherwise.
    """
    try:
        from cuguard.fastpath import attach
    except ImportError:  # not installed: the pure-Python paths, always
        return
    # [ops while on (else None), calls go straight to the real bindings]
    state: list[Any] = [None, False]

    def fast_changed(ops: Any) -> None:
        state[0] = ops
        listener(ops if state[1] else None)

    def route_changed(direct: bool) -> None:
        state[1] = direct
        listener(state[0] if direct else None)

    attach(fast_changed)
    on_route_change(route_changed)
