"""cuguard.context: the thread's current CUDA context and switch-and-restore.

- :class:`Context`: primary (retained), created (owned) or foreign (wrapped)
  contexts; :meth:`Context.current`, :meth:`Context.set_current`, ``device``.
- :func:`call_in`: run driver work in a context for an ordinary call; restores
  the caller's context and, if that fails, undoes what the work created and
  raises (contract C1, C2, C4).
- :func:`cleanup_in`: the same for destructors and callbacks, which report a
  failed restore as a ``CUDAWarning`` and keep the cleanup's context (C3).
- :func:`init_driver`: initialize the active driver once.
"""

from __future__ import annotations

from cuguard.context._context import Context as Context
from cuguard.context._context import call_in as call_in
from cuguard.context._context import cleanup_in as cleanup_in
from cuguard.context._context import init_driver as init_driver

__all__ = ["Context", "call_in", "cleanup_in", "init_driver"]

__version__ = "0.1.0"
