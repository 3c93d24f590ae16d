"""The optional compiled fast path (the ``cuguard-fastpath`` package), as the hot paths see it.

Without that package nothing changes: :func:`follow_fastpath` never calls its
listener and every hot path reads ``None``. With it, each hot module keeps the
fast path's operations (a :class:`cuguard.fastpath.FastOps`, or ``None`` while
it is off) in a module global, and uses a compiled function only while the
seam's function of the call it replaces is the real ``cuda.bindings.driver``
one (``driver.cuEventCreate is ops.cuEventCreate``), so that the simulator,
fault plans, ``record_calls`` and calls from CUDA callbacks see every driver
call as before. The compiled functions return statuses; the hot paths raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["follow_fastpath"]


def follow_fastpath(listener: Callable[[Any], None]) -> None:
    """Call ``listener(ops)`` whenever the compiled fast path is turned on or off, if it is installed."""
    try:
        from cuguard.fastpath import attach
    except ImportError:  # not installed: the pure-Python paths, always
        return
    attach(listener)
