"""What every resource shares: handle, context, close(), ``with``, release on collection.

A resource records at creation its handle and its context. Release is
deterministic with :meth:`Resource.close` (an ordinary call, which raises on
failure, contract S3) or implicit when the object is garbage-collected (which
reports a ``CUDAWarning`` instead, W1). Either way the handle is marked
released *before* the driver is asked, so it is never released twice (S2);
a failed release leaks the object rather than risking a dangling one (W5).
Once the interpreter is finalizing, collection does nothing at all (S1).

Ownership (O1-O6): a resource is the one Python owner of its handle (no
copies, no pickles, no direct construction); it refuses use once its context
refuses use (destroyed by cuguard, or of a driver that is no longer installed);
a collection that happens inside a CUDA host function is carried out on
cuguard's release thread.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, ClassVar

from cuguard.context import call_in, cleanup_in
from cuguard.context.contexts import Context  # from its defining module: the compiled Resource types its context
from cuguard.errors import CUDAError, ResourceClosedError, add_failure_note, format_handle, report, report_error
from cuguard.errors.lowlevel import defer, in_driver_callback, refuse_construction
from cuguard.errors.owners import Owned  # from its defining module: the compiled Resource derives from it
from cuguard.resources import _captures
from cuguard.resources._relaxed import relax, restore

__all__ = ["Resource", "driver_types"]


def _unprohibited(step: Callable[[Any], tuple[Any, str]], handle: Any) -> tuple[Any, str]:
    """``step(handle)`` with the calling thread in relaxed capture mode; its own mode restored after.

    A collection may run while some thread captures a stream into a graph: in
    the thread's default (global) mode the free's potentially unsafe calls
    (``cuMemFree``, ``cuMemFreeHost``, ``cuCtxSynchronize``) would fail with
    ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidate that capture, a
    live object the collection must not disturb (O6). A thread in relaxed
    mode is never prohibited (``cuThreadExchangeStreamCaptureMode``, one call
    each way, thread-local) for ``cuMemFree`` and ``cuMemFreeHost``, but
    ``cuCtxSynchronize`` is refused during any capture of its context, relaxed
    mode or not, and invalidates it: a collection that needs it waits for the
    captures cuguard began (:mod:`cuguard.resources._captures`); during a capture begun
    outside cuguard (the bindings themselves) it is refused, that capture is
    invalidated and the memory leaked with a ``CUDAWarning`` (W5). If the
    exchange is refused, ``step`` is not run and the refusal is returned (the
    caller leaks and reports, W5); if restoring the mode is refused, that is
    reported and the thread keeps relaxed mode (as C3 keeps the cleanup's
    context).
    """
    err, old = relax()  # the one mechanism of cuguard's own calls during captures (_relaxed)
    if err:
        return err, "cuThreadExchangeStreamCaptureMode"
    try:
        return step(handle)
    finally:
        err = restore(old)
        if err:
            report(err, "cuThreadExchangeStreamCaptureMode", handle, "the thread stays in relaxed capture mode")


_types: list[Any] = []  # cuda.bindings.driver, once imported (no import statement per call)


def driver_types() -> Any:
    """The cuda-bindings module whose types (``CUstream``...) handles are made of."""
    if not _types:
        from cuda.bindings import driver as types

        _types.append(types)
    return _types[0]


class Resource(Owned):
    """Base of every cuguard resource (streams, events, buffers, modules...).

    Resources come from factories (:class:`~cuguard.resources.Device` methods);
    constructing one directly raises ``TypeError`` naming the factory, and
    copying or pickling one raises ``TypeError`` (O1).
    """

    __slots__ = ("__weakref__", "_closed", "_context", "_handle", "_owned")

    _what: ClassVar[str] = "resource"
    # Memory whose close() waits for a graph to let go has a slot of this name (W5), and events and
    # streams one that stays False (read as a slot by __del__ of the many closed ones); for every other
    # resource this class attribute answers, with no per-object cost.
    _release_deferred: bool = False
    _factory: ClassVar[str] = "the methods of Device (create_stream, create_event, allocate, ...)"
    # Memory's release may make calls that a stream capture prohibits (cuMemFree, cuMemFreeHost,
    # cuCtxSynchronize): a collection of it runs them with the thread in relaxed capture mode, so
    # that it never invalidates a capture in progress (O6). Explicit close() makes them as asked.
    _capture_unsafe_release: ClassVar[bool] = False
    # Whether an explicit close() runs relaxed as well (memory: a free never breaks a capture, G6).
    _explicit_release_relaxed: ClassVar[bool] = True
    # The cuda-bindings type of the handle ("CUstream"...): the compiled build keeps the handles it makes as
    # ints (addresses) and :attr:`handle` gives them out as this type.
    _handle_type: ClassVar[str | None] = None
    _handle: Any
    _context: Context
    _closed: bool
    _owned: bool

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(type(self), self._factory)

    def _init(self, handle: Any, context: Context, owned: bool = True) -> None:
        self._handle = handle
        self._context = context
        self._owned = owned
        self._closed = False

    @property
    def handle(self) -> Any:
        """The driver handle.

        Raises :class:`~cuguard.errors.ResourceClosedError` once closed, once
        its context was destroyed, or while its driver is not installed.
        """
        return self._bindings_handle()

    def _address(self) -> int:
        """The handle as an int (open checked): for what needs only the address, with no conversion to the
        bindings' type."""
        if self._closed or self._context._closed:
            self._check_open()
        return int(self._handle)

    def _bindings_handle(self) -> Any:
        """The handle (open checked), as the bindings' type when the compiled build kept it as an int."""
        if self._closed or self._context._closed:
            self._check_open()
        handle = self._handle
        if type(handle) is int and self._handle_type is not None:
            return getattr(driver_types(), self._handle_type)(handle)
        return handle

    @property
    def context(self) -> Context:
        """The context the resource belongs to."""
        return self._context

    @property
    def closed(self) -> bool:
        """Whether the resource was closed (or released, or leaked after a failed release)."""
        return self._closed

    def _check_open(self) -> None:
        """Raise :class:`~cuguard.errors.ResourceClosedError` saying why, if this resource refuses use."""
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")
        context = self._context
        if context._closed:
            if context._released:
                raise ResourceClosedError(f"{self!r} cannot be used: its context {context!r} was closed")
            raise ResourceClosedError(
                f"{self!r} belongs to a CUDA driver that is no longer installed; its handle cannot reach the driver "
                "installed now"
            )

    def _release(self, raising: bool) -> tuple[Any, str]:
        """Release the driver object; return ``(status, call)``. Subclasses implement it.

        ``raising`` tells whether this is an explicit close (switch with
        ``call_in``) or a collection (switch with ``cleanup_in``).
        """
        raise NotImplementedError

    def _frees_after_context_sync(self) -> bool:
        """Whether releasing it calls ``cuCtxSynchronize`` (memory only): its collection then waits for captures."""
        return False

    def _release_in_context(self, raising: bool, step: Callable[[Any], tuple[Any, str]]) -> tuple[Any, str]:
        """Run the release ``step(handle) -> (status, call)`` in this resource's context.

        Explicit close (``raising``): a refused release raises its own
        :class:`~cuguard.errors.CUDAError` (saying the object was leaked) from
        inside the switch, so that a failed restore of the caller's context
        afterwards becomes a note on it instead of hiding it (C2, G4).
        Collection: the switch reports instead of raising (C3); a failed switch
        leaks the object and says which one (W1, W2). For memory
        (``_capture_unsafe_release``) the step runs with the thread in relaxed
        capture mode either way (:func:`_unprohibited`): a free never fails
        because of, nor invalidates, a capture in progress (G6).
        """
        if raising:

            def release(handle: Any) -> tuple[Any, str]:
                status, call = step(handle)
                if status:
                    self._release_failed(status, call)
                return status, call

            if self._capture_unsafe_release and self._explicit_release_relaxed:
                # Memory's free runs relaxed too: an explicit close never breaks a capture (G6); a refused
                # exchange of the thread's mode raises as an ordinary call does (E1, G4).
                return call_in(self._context, self._release_relaxed, None, release)

            return call_in(self._context, release, None, self._handle)
        resource = (self._what, self._handle)
        if self._capture_unsafe_release:
            result = cleanup_in(self._context, _unprohibited, step, self._handle, resource=resource)
        else:
            result = cleanup_in(self._context, step, self._handle, resource=resource)
        return result if result is not None else (0, "")

    def _release_relaxed(self, release: Callable[[Any], tuple[Any, str]]) -> tuple[Any, str]:
        """``release(handle)`` of an explicit close with the thread in relaxed capture mode (G6).

        A refused switch to relaxed mode leaks the object and raises saying so
        (nothing was released); a refused restore is a note on the release's own
        error (G4), or raised after a successful release (E1): the thread stays
        in relaxed capture mode.
        """
        err, previous = relax()
        if err:
            self._release_failed(err, "cuThreadExchangeStreamCaptureMode")
        try:
            result = release(self._handle)
        except BaseException as exc:
            err = restore(previous)
            if err:
                add_failure_note(exc, CUDAError(err, "cuThreadExchangeStreamCaptureMode", "the thread stays relaxed"))
            raise
        err = restore(previous)
        if err:
            raise CUDAError(
                err,
                "cuThreadExchangeStreamCaptureMode",
                f"the {self._what} was released; the thread stays in relaxed capture mode",
            )
        return result

    def _context_gone(self) -> None:
        """Handle an explicit close while the context refuses use (O3, O4); raises for an owned resource.

        Of a driver that is no longer installed: raises and stays as it is
        (nothing reaches any driver). Of a context that was closed or destroyed:
        marked closed; an owned resource is leaked and reported by raising,
        while closing a wrapper (which owns nothing) is fine.
        """
        context = self._context
        if not context._released:
            raise ResourceClosedError(
                f"{self!r} belongs to a CUDA driver that is no longer installed; nothing was released"
            )
        self._closed = True
        if self._owned:
            raise ResourceClosedError(
                f"{self!r} cannot be released: its context {context!r} was closed first; it was leaked"
            )

    def _release_failed(self, status: Any, call: str) -> None:
        """Raise for an explicit release the driver refused: the object is leaked (S3, W5)."""
        raise CUDAError(status, call, f"{self._what} {format_handle(self._handle)} was leaked")

    def close(self) -> None:
        """Release the resource now. Idempotent.

        If the release fails, raises :class:`~cuguard.errors.CUDAError`; the
        object is then leaked on purpose (never released a second time). If
        its context was destroyed, nothing is released (that would crash the
        driver), and :class:`~cuguard.errors.ResourceClosedError` says the object
        was leaked (a wrapper, which owns nothing, is closed quietly). Inside a
        CUDA host function (``Stream.launch_host_func``), where CUDA forbids
        driver calls, the object is closed for use at once and released on
        cuguard's release thread; a refusal there is a ``CUDAWarning`` (O5, W1).
        """
        if self._closed:
            return
        if self._context._closed:
            self._context_gone()
            return
        if not self._owned:
            self._closed = True
            return
        if in_driver_callback():
            self._close_in_callback()
            return
        self._closed = True
        status, call = self._release(True)
        if status:
            self._release_failed(status, call)

    def _failure_handle(self) -> object:
        return self._handle

    # sys.is_finalizing, bound in the class: at the very end of finalization the sys module (and
    # this module's globals) may be cleared while a resource is still alive (S1).
    _finalizing = staticmethod(sys.is_finalizing)

    def __del__(self) -> None:
        try:
            if self._closed:
                if not self._release_deferred:
                    return
                # close() deferred the release until a graph let go of the object (W5): now.
                self._release_deferred = False  # type: ignore[misc]  # only memory, which has the slot, gets here
                self._closed = False
        except AttributeError:  # construction never finished: nothing to release
            return
        if self._finalizing():
            return
        context = self._context
        if not self._owned or (context._closed and not context._released):
            # Not ours to release, or of a driver that is no longer installed:
            # nothing is released and nothing is said (O3).
            return
        self._collected()

    def _collect(self) -> None:
        """Release a collected resource; failures become ``CUDAWarning`` (W1)."""
        if _captures._waiting:
            _captures.release_waiting()  # releases that waited for a capture now over (G6)
        if self._closed:
            return
        context = self._context
        if context._closed and not context._released:  # its driver went away meanwhile (O3)
            return
        self._closed = True
        self._release_collected()

    def _capture_wait(self) -> bool:
        """Whether releasing now would meet a stream capture (G6); then the release is queued for later.

        Only memory waits (``_capture_unsafe_release``): a stream-ordered free on
        a stream being captured would be queued into the capture, and a free
        that needs ``cuCtxSynchronize`` would be refused during a capture of its
        context and invalidate it.
        """
        return False

    def _release_collected(self) -> None:
        """Release a resource already closed for use, reporting instead of raising (W1).

        Used by collection, by a ``close()`` made inside a CUDA host function
        (carried out on the release thread, O5) and by releases that waited for
        a capture to end (G6): while one is still in the way, the release waits
        again (:mod:`cuguard.resources._captures`).
        """
        context = self._context
        if context._closed and not context._released:  # its driver went away meanwhile (O3)
            return
        if self._capture_unsafe_release:
            since = _captures.generation()
            if self._capture_wait():
                _captures.wait_for_capture(self, since)
                return
        if context._closed:
            report_error(
                ResourceClosedError(f"{self._what} not released: its context {context!r} was closed before it"),
                self._handle,
                "it was leaked",
            )
            return
        try:
            if self._capture_unsafe_release:
                # Memory: the whole release runs relaxed, a stream-ordered free too (an H200 refused one
                # during another thread's global capture): a collection never breaks a capture (G6).
                status, call = _unprohibited(lambda _handle: self._release(False), self._handle)
            else:
                status, call = self._release(False)
        except CUDAError as exc:  # the driver itself is gone
            report_error(exc, self._handle, f"the {self._what} was leaked", context=context)
            return
        if status:
            report(status, call, self._handle, f"the {self._what} was leaked", context=context)

    def _close_in_callback(self) -> None:
        """``close()`` inside a CUDA host function: closed for use now, released on the release thread (O5).

        CUDA forbids driver calls there; the release is carried out as a
        collection is (a refusal is a ``CUDAWarning``, the object leaked).
        """
        self._closed = True
        defer(self._release_collected)

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {format_handle(self._handle)}{state}>"
