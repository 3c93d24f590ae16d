"""What keeps the resources of graph nodes alive, and the deferred release of them (G5, W1, W5, S1).

Every graph definition owns a *payload*: a Python dict of the objects its nodes
use (buffers, kernels and their modules, events, host callbacks, the payloads of
embedded child graphs). A CUDA user object, created with one C destructor
(:data:`_DESTROY_THUNK`) and a token, is moved into the ``CUgraph``; executable
graphs instantiated from it inherit a reference. When CUDA drops the last
reference (the definition and every executable graph are gone, and their
launches have finished), the driver calls the destructor with the token.

The destructor runs on a driver thread, or synchronously inside the releasing
driver call (observed on an H200). It must not call CUDA and must not block, so
it only puts the token on a queue. A Python daemon thread takes tokens off the
queue and drops the payload; releasing the objects in it may fail, and such
failures surface as ``CUDAWarning`` (W1) through the objects' own collection
path, or through ``sys.unraisablehook`` when escalated (W3).

Once the interpreter is finalizing, the destructor does nothing and the
payloads still registered are leaked on purpose (S1).

Host-callback nodes use a second C thunk (:data:`_HOST_THUNK`): its user data is
a token that finds a :class:`HostCallback` in a weak table. The callback object
itself is an owner in the payload, so it lives exactly as long as CUDA may call
it.
"""

from __future__ import annotations

import ctypes
import itertools
import queue
import sys
import threading
import weakref
from collections.abc import Callable

from cuguard.errors import call_unraisable

__all__ = [
    "HostCallback",
    "destructor_address",
    "flush_deferred",
    "host_thunk_address",
    "pending_payloads",
    "register_payload",
    "unregister_payload",
]

_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# token -> payload (the objects a definition's nodes use), until CUDA drops the user object.
_payloads: dict[int, dict[int, object]] = {}
_tokens = itertools.count(1)
_queue: queue.SimpleQueue[object] = queue.SimpleQueue()
_thread_lock = threading.Lock()
_thread: list[threading.Thread] = []

# Bound once, so the destructor does as little as possible (no global lookups of modules).
_is_finalizing = sys.is_finalizing
_put = _queue.put


def _user_object_destructor(user_data: int | None) -> None:
    """The C destructor of every cuguard user object: enqueue the token, nothing else.

    Runs on a driver thread or inside a driver call; never calls CUDA, never
    blocks (``SimpleQueue.put`` is reentrant and unbounded).
    """
    if _is_finalizing():
        return
    _put(user_data or 0)


_DESTROY_THUNK = _FN_TYPE(_user_object_destructor)
_DESTROY_ADDRESS: int = ctypes.cast(_DESTROY_THUNK, ctypes.c_void_p).value or 0


def destructor_address() -> int:
    """The address of the user-object destructor thunk (a ``CUhostFn``)."""
    return _DESTROY_ADDRESS


def _release_loop() -> None:
    while True:
        item = _queue.get()
        if isinstance(item, threading.Event):
            item.set()
            continue
        if not isinstance(item, int):  # pragma: no cover - only ints and events are queued
            continue
        payload = _payloads.pop(item, None)
        if payload:
            call_unraisable(_drop, payload, what="deferred release of CUDA graph resources")
        del payload


def _drop(payload: dict[int, object]) -> None:
    """Drop every reference in ``payload``; the objects' own collection reports failures (W1)."""
    while payload:
        _, owner = payload.popitem()
        del owner


def _ensure_thread() -> None:
    if _thread:
        return
    with _thread_lock:
        if not _thread:
            thread = threading.Thread(target=_release_loop, name="cuguard-graph-release", daemon=True)
            thread.start()
            _thread.append(thread)


def register_payload(payload: dict[int, object]) -> int:
    """Register ``payload`` under a fresh token for a new user object; return the token."""
    _ensure_thread()
    token = next(_tokens)
    _payloads[token] = payload
    return token


def unregister_payload(token: int) -> None:
    """Forget a token whose user object was never created (its payload is dropped by the caller)."""
    _payloads.pop(token, None)


def pending_payloads() -> int:
    """How many payloads are registered (their user objects not yet destroyed by CUDA)."""
    return len(_payloads)


def flush_deferred(timeout: float | None = None) -> bool:
    """Wait until every release CUDA has delivered so far has been processed.

    CUDA tells cuguard that it dropped a graph's resources through a user-object
    destructor, which only queues the release; a daemon thread performs it.
    This waits for the queue as it is now (useful in tests and before checking
    for leaks). Returns ``False`` if ``timeout`` seconds passed first. Must not
    be called from a host callback or destructor (it would wait for itself).
    """
    _ensure_thread()
    done = threading.Event()
    _put(done)
    return done.wait(timeout)


# --- host callbacks ------------------------------------------------------------------------


class HostCallback:
    """The Python callable of one host-callback node, found by the C thunk through a token.

    It is an owner in its definition's payload, so it lives as long as CUDA may
    call it; the token table only holds it weakly.
    """

    __slots__ = ("__weakref__", "fn", "token")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.token = next(_tokens)
        _callbacks[self.token] = self

    def __repr__(self) -> str:
        return f"<HostCallback {self.token} {self.fn!r}>"


_callbacks: weakref.WeakValueDictionary[int, HostCallback] = weakref.WeakValueDictionary()


def _host_trampoline(user_data: int | None) -> None:
    """Run a host-callback node's callable; an exception goes to ``sys.unraisablehook`` (W6)."""
    if _is_finalizing():
        return
    callback = _callbacks.get(user_data or 0)
    if callback is not None:
        call_unraisable(callback.fn, what="CUDA graph host callback")


_HOST_THUNK = _FN_TYPE(_host_trampoline)
_HOST_ADDRESS: int = ctypes.cast(_HOST_THUNK, ctypes.c_void_p).value or 0


def host_thunk_address() -> int:
    """The address of the host-callback thunk (a ``CUhostFn``)."""
    return _HOST_ADDRESS
