"""The compiled build's driver calls (``_native``), as the hot paths see them.

cuguard-resources is built two ways from one source: pure Python, and with the
extension ``cuguard.resources._native`` compiled from ``_native.pyx`` (the
wheel's build hook, ``hatch_build.py``, compiles it when a C compiler is
there). The extension makes only the innermost driver call of the hottest
operations: it takes the driver's entry points from the capsules that
``cuda.bindings.cydriver`` exports and returns statuses. Everything else (the
checks, raising, rolling back, restoring the context, warnings, collection)
is the same Python code in both builds.

Each hot module keeps the compiled functions (a :class:`CompiledCalls`) in a
module global that :func:`follow_compiled` updates, and reads it once per hot
call. The global is ``None``, and every call takes the Python path through
the seam, unless the extension loaded *and* the seam routes every call
straight to the real ``cuda.bindings.driver`` (the seam's
:func:`~cuguard.errors.lowlevel.on_route_change`): under the simulated driver,
a fault plan, ``record_calls`` or any other installed driver, and while a
CUDA callback runs, the compiled functions are never used, so those see every
driver call in both builds.

The extension is used only when it imports, when it has every function this
Python side calls (one built from an older source stays off), and when every
entry point it needs is exported with the C signature it was written for. It
is never used when ``CUGUARD_PURE_PYTHON`` is ``1`` at import. The public
surface: :data:`cuguard.resources.compiled`, and in ``cuguard.resources.lowlevel``
:func:`compiled_status` and :func:`use_compiled`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

from cuguard.errors.lowlevel import on_route_change

__all__ = [
    "COMPILED_FUNCTIONS",
    "PURE_VARIABLE",
    "CompiledCalls",
    "compiled_status",
    "follow_compiled",
    "loaded",
    "stale",
    "use_compiled",
]

#: The environment variable that keeps the compiled calls off (``1``, ``yes``, ``on``, ``true``), read at import.
PURE_VARIABLE = "CUGUARD_PURE_PYTHON"

#: The extension's functions the hot paths call (see ``_native.pyi``).
COMPILED_FUNCTIONS = (
    "event_create",
    "event_create_switched",
    "event_destroy",
    "event_record",
    "event_query",
    "stream_create",
    "stream_create_switched",
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
    "graph_exec_destroy_relaxed",
)


class CompiledCalls(Protocol):
    """The compiled calls (``_native.Calls``, one instance), as a hot path gets them while they are in use.

    Each returns statuses (see ``_native.pyi``); the hot path raises. Handles these calls make are ints (the
    addresses). A compiled hot module declares its global as ``_native.Calls`` in its ``.pxd``, so its calls
    are C calls; a pure-Python module calls the same methods.
    """

    CAPTURING: int  # the status mem_alloc_async returns when the stream is being captured (nothing allocated)

    def event_create(self, context: int, flags: int, /) -> tuple[int, Any]: ...
    def event_create_switched(self, context: int, previous: Any, flags: int, /) -> tuple[Any, Any, Any, Any]: ...
    def event_destroy(self, event: Any, /) -> int: ...
    def event_record(self, event: Any, stream: Any, /) -> int: ...
    def event_query(self, event: Any, /) -> int: ...
    def stream_create(self, context: int, flags: int, /) -> tuple[int, Any]: ...
    def stream_create_switched(self, context: int, previous: Any, flags: int, /) -> tuple[Any, Any, Any, Any]: ...
    def stream_destroy(self, stream: Any, /) -> int: ...
    def stream_synchronize(self, stream: Any, /) -> int: ...
    def mem_alloc_async(self, size: int, stream: Any, ask_capture: bool, /) -> tuple[int, Any]: ...
    def mem_free_async(self, ptr: Any, stream: Any, /) -> int: ...
    def memcpy_htod_async(self, dst: Any, src: Any, size: int, stream: Any, /) -> int: ...
    def memcpy_dtoh_async(self, dst: Any, src: Any, size: int, stream: Any, /) -> int: ...
    def memcpy_htod(self, context: int, dst: Any, src: Any, size: int, /) -> int | tuple[int, str]: ...
    def memcpy_dtoh(self, context: int, dst: Any, src: Any, size: int, /) -> int | tuple[int, str]: ...
    def launch(self, *args: Any) -> int: ...
    def graph_add_empty(self, graph: Any, dependency: Any, /) -> tuple[int, Any]: ...
    def graph_instantiate(self, context: int | None, graph: Any, flags: int, /) -> tuple[int, Any]: ...
    def graph_launch(self, graph_exec: Any, stream: Any, /) -> int: ...
    def graph_exec_destroy_relaxed(self, graph_exec: Any, /) -> tuple[int, int, int]: ...


def stale(native: Any) -> list[str]:
    """What the Python side calls that the extension module ``native`` lacks (one built from an older source)."""
    calls = getattr(native, "Calls", None)
    missing = [name for name in ("CALLS", "setup") if not hasattr(native, name)]
    return missing + [name for name in COMPILED_FUNCTIONS if not hasattr(calls, name)]


def _load() -> tuple[CompiledCalls | None, str]:
    """Import the extension and resolve its entry points: ``(calls, "on")``, or ``(None, why not)``."""
    try:
        from cuguard.resources import _native  # type: ignore[attr-defined, unused-ignore]
    except ImportError as exc:
        return None, f"this is the pure-Python build (the compiled extension is not importable: {exc})"
    missing = stale(_native)
    if missing:
        return None, f"the compiled extension lacks {', '.join(missing)}: rebuild it from this version's _native.pyx"
    try:
        from cuda.bindings import cydriver
    except ImportError as exc:
        return None, f"cuda-bindings is not importable ({exc})"
    capi = getattr(cydriver, "__pyx_capi__", None)
    if not isinstance(capi, dict):
        return None, "cuda.bindings.cydriver exports no C entry points (__pyx_capi__)"
    problems = _native.setup(capi)
    if problems:
        return None, "entry points of cuda.bindings.cydriver do not fit: " + "; ".join(problems)
    calls: CompiledCalls = _native.CALLS
    return calls, "on"


def _wanted() -> bool:
    return os.environ.get(PURE_VARIABLE, "").strip().lower() not in ("1", "yes", "on", "true")


_lock = threading.Lock()
_listeners: list[Callable[[CompiledCalls | None], None]] = []
_calls, _reason = _load() if _wanted() else (None, f"turned off by {PURE_VARIABLE} at import")
#: Whether the compiled extension loaded (this process runs the compiled build); fixed at import.
loaded: bool = _calls is not None
# Whether the compiled calls are in use (use_compiled() turns them off and on again).
_on = loaded


def follow_compiled(listener: Callable[[CompiledCalls | None], None]) -> None:
    """Call ``listener(calls or None)`` now and whenever the compiled calls or the seam's routing change.

    ``calls`` is given only while the compiled calls are in use *and* calls go straight
    to the real bindings; ``None`` otherwise. For the layers' hot modules: each keeps
    it in a module global. Does nothing in the pure-Python build.
    """
    if not loaded:
        return
    # [the compiled calls while in use (else None), calls go straight to the real bindings]
    state: list[Any] = [None, False]

    def compiled_changed(calls: CompiledCalls | None) -> None:
        state[0] = calls
        listener(calls if state[1] else None)

    def route_changed(direct: bool) -> None:
        state[1] = direct
        listener(state[0] if direct else None)

    with _lock:
        _listeners.append(compiled_changed)
        calls = _calls if _on else None
    compiled_changed(calls)
    on_route_change(route_changed)


def compiled_status() -> str:
    """``"on"`` while the compiled calls are in use; otherwise why not (pure-Python build, turned off...)."""
    return _reason


def use_compiled(on: bool) -> bool:
    """Turn the compiled calls on or off for the whole process; return whether they are in use now.

    Off, every hot operation takes the Python path (as in the pure-Python build);
    on again, only if the compiled build loaded (``compiled_status()`` says why
    not otherwise). Never raises. For measuring and debugging: the two paths
    behave the same.
    """
    global _on, _reason
    with _lock:
        _on = bool(on) and loaded
        if loaded:
            _reason = "on" if _on else "turned off by cuguard.resources.lowlevel.use_compiled(False)"
        listeners = list(_listeners)
        calls = _calls if _on else None
    for listener in listeners:
        listener(calls)
    return calls is not None
