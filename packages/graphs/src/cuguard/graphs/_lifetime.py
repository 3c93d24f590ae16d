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
it only hands the token to cuguard's release thread (the errors layer's
:func:`~cuguard.errors.lowlevel.defer`), which drops the payload; releasing the objects in it may fail, and such
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
import sys
import weakref
from collections.abc import Callable

from cuguard.errors import call_unraisable
from cuguard.errors import flush_deferred as _flush
from cuguard.errors.lowlevel import defer, enter_driver_callback, exit_driver_callback
from cuguard.resources.lowlevel import add_close_guard, graph_let_go

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


def _user_object_destructor(user_data: int | None, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
    """The C destructor of every cuguard user object: hand the token to the release thread, nothing else.

    Runs on a driver thread or inside a driver call; never calls CUDA, never
    blocks (the release thread's queue is reentrant and unbounded). Its
    finalization guard is bound at definition: module globals may be gone at
    the end of interpreter shutdown (S1).
    """
    if _finalizing():
        return
    enter_driver_callback()
    try:
        defer(_release_payload, user_data or 0)
    finally:
        exit_driver_callback()


_DESTROY_THUNK = _FN_TYPE(_user_object_destructor)
_DESTROY_ADDRESS: int = ctypes.cast(_DESTROY_THUNK, ctypes.c_void_p).value or 0


def destructor_address() -> int:
    """The address of the user-object destructor thunk (a ``CUhostFn``)."""
    return _DESTROY_ADDRESS


def _release_payload(token: int) -> None:
    """On the release thread: drop every reference in the payload of ``token``.

    The objects' own collection reports failures (W1).
    """
    payload = _payloads.pop(token, None)
    if payload:
        # Memory closed while this graph used it is freed now, unless another graph still uses it (W5).
        graph_let_go(list(payload.values()))
    while payload:
        _, owner = payload.popitem()
        del owner


def _used_by_a_graph(buffer: object) -> str | None:
    """Why ``buffer`` must not be freed now: a payload CUDA still holds uses it (W5); else None."""
    key = id(buffer)
    for payload in list(_payloads.values()):
        if payload.get(key) is buffer:
            return "a CUDA graph that may still run uses it"
    return None


# An explicit close() of memory asks this first (the resources layer cannot see graphs): memory a
# graph uses is freed only once CUDA lets go of that graph.
add_close_guard(_used_by_a_graph)


def register_payload(payload: dict[int, object]) -> int:
    """Register ``payload`` under a fresh token for a new user object; return the token."""
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
    destructor, which only hands the release to cuguard's release thread (the
    one that also carries out releases that became due inside host functions).
    This waits for what was handed over so far (useful in tests and before
    checking for leaks). Returns ``False`` if ``timeout`` seconds passed first,
    or at once when called from a host callback or the release thread (it
    would wait for itself).
    """
    return _flush(timeout)


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


def _host_trampoline(user_data: int | None, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
    """Run a host-callback node's callable; an exception goes to ``sys.unraisablehook`` (W6)."""
    if _finalizing():
        return
    enter_driver_callback()  # releases that become due here go to the release thread (O5)
    try:
        callback = _callbacks.get(user_data or 0)
        if callback is not None:
            call_unraisable(callback.fn, what="CUDA graph host callback")
        del callback
    finally:
        exit_driver_callback()


_HOST_THUNK = _FN_TYPE(_host_trampoline)
_HOST_ADDRESS: int = ctypes.cast(_HOST_THUNK, ctypes.c_void_p).value or 0


def host_thunk_address() -> int:
    """The address of the host-callback thunk (a ``CUhostFn``)."""
    return _HOST_ADDRESS
