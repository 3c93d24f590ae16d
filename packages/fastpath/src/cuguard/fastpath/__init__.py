"""cuguard.fastpath: an optional compiled fast path for cuguard's hot operations.

Every cuguard layer works as pure Python; installing this package makes the
driver calls of the hottest operations (the current-context check, creating,
recording, querying, launching, copying to and from the host, synchronizing a
stream, releasing, adding an empty graph node, instantiating, launching and
destroying an executable graph) go from C
straight to the driver's entry points instead of through cuda-bindings'
Python layer. Failure handling stays in Python: the compiled functions return
statuses and the layers raise, exactly as on the Python path.

When it is used
---------------
- Only while the driver behind cuguard's seam is the real ``cuda.bindings.driver``
  itself: the seam tells the layers when that changes (its ``on_route_change``),
  and they read one flag per call. Under the simulated driver, a fault
  plan, ``record_calls`` or any other installed driver, and inside CUDA
  callbacks (where the seam refuses calls, O5), every call takes the Python
  path, so those see every driver call exactly as without this package.
- Only when the extension imports and finds every entry point it needs, with
  the C signature it was written for, among those that
  ``cuda.bindings.cydriver`` exports (``__pyx_capi__``). Otherwise it stays
  off and :func:`status` says why.
- Never when the environment variable ``CUGUARD_FASTPATH`` is ``0`` (or
  ``off``/``no``/``false``) at import, or after :func:`disable`.

Public surface: :func:`enabled`, :func:`status`, :func:`enable`, :func:`disable`;
:func:`attach` is for the layers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["FastOps", "attach", "disable", "enable", "enabled", "status"]

__version__ = "0.1.0"

#: The environment variable that turns the fast path off (``0``, ``off``, ``no``, ``false``).
VARIABLE = "CUGUARD_FASTPATH"

# The names of the real bindings' functions whose calls the compiled functions replace.
REPLACED = (
    "cuCtxGetCurrent",
    "cuEventCreate",
    "cuEventDestroy",
    "cuEventRecord",
    "cuEventQuery",
    "cuStreamCreate",
    "cuStreamDestroy",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuLaunchKernel",
    "cuGraphAddEmptyNode",
    "cuGraphInstantiate",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuStreamSynchronize",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuMemcpyHtoD",
    "cuMemcpyDtoH",
)
#: The compiled functions (see ``_native.pyi``).
COMPILED = (
    "event_create",
    "event_destroy",
    "event_record",
    "event_query",
    "stream_create",
    "stream_destroy",
    "stream_synchronize",
    "mem_alloc_async",
    "mem_free_async",
    "memcpy_htod_async",
    "memcpy_dtoh_async",
    "memcpy_htod",
    "memcpy_dtoh",
    "launch",
    "graph_add_empty",
    "graph_instantiate",
    "graph_launch",
    "graph_exec_destroy",
)


class FastOps:
    """What a layer gets while the fast path is on: the compiled functions and the real bindings' functions.

    A layer uses a compiled function only while the seam routes every call
    straight to the real bindings (no wrapper installed, no callback running):
    then the call would have gone to the real driver anyway. ``event_create``
    gives the event's address as an int (the layers make the ``CUevent`` on demand).
    """

    # The real cuda-bindings functions (identity checks against the seam).
    cuCtxGetCurrent: Any
    cuEventCreate: Any
    cuEventDestroy: Any
    cuEventRecord: Any
    cuEventQuery: Any
    cuStreamCreate: Any
    cuStreamDestroy: Any
    cuMemAllocAsync: Any
    cuMemFreeAsync: Any
    cuLaunchKernel: Any
    cuGraphAddEmptyNode: Any
    cuGraphInstantiate: Any
    cuGraphLaunch: Any
    cuGraphExecDestroy: Any
    cuStreamSynchronize: Any
    cuMemcpyHtoDAsync: Any
    cuMemcpyDtoHAsync: Any
    cuMemcpyHtoD: Any
    cuMemcpyDtoH: Any
    # The compiled functions (see _native.pyi).
    event_create: Callable[[int, int], tuple[int, Any]]
    event_destroy: Callable[[Any], int]
    event_record: Callable[[Any, Any], int]
    event_query: Callable[[Any], int]
    stream_create: Callable[[int, int], tuple[int, Any]]
    stream_destroy: Callable[[Any], int]
    mem_alloc_async: Callable[[int, Any], tuple[int, Any]]
    mem_free_async: Callable[[Any, Any], int]
    launch: Callable[..., int]
    graph_add_empty: Callable[[Any, Any], tuple[int, Any]]
    stream_synchronize: Callable[[Any], int]
    memcpy_htod_async: Callable[[Any, Any, int, Any], int]
    memcpy_dtoh_async: Callable[[Any, Any, int, Any], int]
    memcpy_htod: Callable[[int, Any, Any, int], int | tuple[int, str]]
    memcpy_dtoh: Callable[[int, Any, Any, int], int | tuple[int, str]]
    graph_instantiate: Callable[[int | None, Any, int], tuple[int, Any]]
    graph_launch: Callable[[Any, Any], int]
    graph_exec_destroy: Callable[[Any], int]

    def __init__(self, native: Any, real: Any) -> None:
        for name in REPLACED:
            setattr(self, name, getattr(real, name))
        for name in COMPILED:
            setattr(self, name, getattr(native, name))


_lock = threading.Lock()
_listeners: list[Callable[[FastOps | None], None]] = []
_ops: FastOps | None = None
_reason = "not loaded yet"
_loaded = False
_wanted = os.environ.get(VARIABLE, "").strip().lower() not in ("0", "off", "no", "false")


def _load() -> FastOps | None:
    """Import the extension and resolve its entry points; ``None`` (with the reason kept) when it cannot."""
    global _reason
    try:
        from cuguard.fastpath import _native
    except ImportError as exc:
        _reason = f"the compiled extension is not built or not importable ({exc})"
        return None
    try:
        from cuda.bindings import cydriver
        from cuda.bindings import driver as real
    except ImportError as exc:
        _reason = f"cuda-bindings is not importable ({exc})"
        return None
    capi = getattr(cydriver, "__pyx_capi__", None)
    if not isinstance(capi, dict):
        _reason = "cuda.bindings.cydriver exports no C entry points (__pyx_capi__)"
        return None
    missing = [name for name in REPLACED if not hasattr(real, name)]
    if missing:
        _reason = f"cuda.bindings.driver lacks {', '.join(missing)}"
        return None
    stale = [name for name in COMPILED if not hasattr(_native, name)]
    if stale:  # an extension built from an older _native.c than this package's Python side
        _reason = f"the compiled extension lacks {', '.join(stale)}: rebuild it from this version's _native.c"
        return None
    problems = _native.setup(capi, real.CUstream, real.CUevent, real.CUdeviceptr, real.CUgraphNode)
    if problems:
        _reason = "entry points of cuda.bindings.cydriver do not fit: " + "; ".join(problems)
        return None
    _reason = "on"
    return FastOps(_native, real)


def _ensure_loaded() -> None:
    global _loaded, _ops
    if _loaded:
        return
    _loaded = True
    ops = _load()
    if _wanted:
        _ops = ops
    elif ops is not None:
        _reason_off(f"turned off by {VARIABLE}")
    _stash[0] = ops


def _reason_off(text: str) -> None:
    global _reason
    _reason = text


# The loaded operations, also while turned off (so that enable() can turn them on again).
_stash: list[FastOps | None] = [None]


def attach(listener: Callable[[FastOps | None], None]) -> None:
    """Call ``listener(ops)`` now and whenever the fast path is turned on or off (``None``: off).

    For the layers: each keeps the operations in a module global that its hot
    paths read. The first call loads the extension (never the driver).
    """
    with _lock:
        _ensure_loaded()
        _listeners.append(listener)
        ops = _ops
    listener(ops)


def _notify() -> None:
    with _lock:
        listeners = list(_listeners)
        ops = _ops
    for listener in listeners:
        listener(ops)


def enabled() -> bool:
    """Whether the compiled fast path is on (it is still used only under the real driver)."""
    with _lock:
        _ensure_loaded()
    return _ops is not None


def status() -> str:
    """``"on"``, or why the fast path is off."""
    with _lock:
        _ensure_loaded()
    return _reason


def disable() -> None:
    """Turn the fast path off: every hot operation takes the Python path from now on. Never raises."""
    global _ops
    with _lock:
        _ensure_loaded()
        if _stash[0] is not None:
            _reason_off("turned off by cuguard.fastpath.disable()")
        _ops = None
    _notify()


def enable() -> bool:
    """Turn the fast path on again if it could load; return whether it is on. Never raises."""
    global _ops, _reason
    with _lock:
        _ensure_loaded()
        _ops = _stash[0]
        if _ops is not None:
            _reason = "on"
    _notify()
    return _ops is not None
