"""cuguard.context: the thread's current CUDA context and switch-and-restore.

- :class:`Context`: primary (retained), created (owned) or foreign (wrapped)
  contexts; :meth:`Context.current`, :meth:`Context.set_current`, ``device``.
- :func:`call_in`: run driver work in a context for an ordinary call; restores
  the caller's context and, if that fails, undoes what the work created and
  raises (contract C1, C2, C4).
- :func:`cleanup_in`: the same for destructors and callbacks, which report a
  failed restore as a ``CUDAWarning`` and keep the cleanup's context (C3).
- :func:`init_driver`: initialize the active driver once.

The layer is built two ways from one source: pure Python, and compiled (the
context a compiled class whose fields the compiled layers above read as C
slots). :data:`compiled` says which one is running; both behave the same.
"""

from __future__ import annotations

from cuguard.context import _buildcheck  # noqa: F401 - first: refuses a mixed build before it loads
from cuguard.context import contexts as _contexts
from cuguard.context.contexts import Context as Context
from cuguard.context.contexts import call_in as call_in
from cuguard.context.contexts import cleanup_in as cleanup_in
from cuguard.context.contexts import init_driver as init_driver

__all__ = ["Context", "call_in", "cleanup_in", "compiled", "init_driver"]

__version__ = "0.1.0"

#: Whether this process runs the compiled build of this layer: ``True`` when
#: :mod:`cuguard.context.contexts` is the compiled module of this installation, ``False`` for the
#: pure-Python build (installed without a C compiler, or with ``CUGUARD_PURE_PYTHON=1`` at build
#: time). Both behave the same. Fixed at import.
compiled: bool = not (_contexts.__file__ or "").endswith(".py")
