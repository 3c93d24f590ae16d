"""Streams, events and host callbacks."""

from __future__ import annotations

import atexit
import ctypes
import itertools
import sys
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cuguard.context import Context, call_in
from cuguard.errors import CUDAError, call_unraisable, driver, raise_status, report
from cuguard.errors.lowlevel import (
    deferring_lock,
    enter_driver_callback,
    exit_driver_callback,
    in_driver_callback,
    source_new,
    wrong_kind,
)
from cuguard.resources import _captures, _race
from cuguard.resources._base import Resource, driver_types
from cuguard.resources._fast import follow_compiled

if TYPE_CHECKING:
    from cuguard.resources._ipc import IPCEventDescriptor

__all__ = ["Event", "Stream", "as_stream", "refuse_capturing_allocation"]


# --- host callbacks ------------------------------------------------------------------
#
# One C thunk serves every host callback; ``userData`` is a token that finds the
# Python callable, which stays referenced until the driver has called it.

_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_pending: dict[int, tuple[Callable[[], object], Stream]] = {}
_pending_lock = deferring_lock()
_tokens = itertools.count(1)


def _host_trampoline(user_data: int | None, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
    # Runs on a driver thread, where CUDA forbids API calls: a release that
    # becomes due here (the entry held the last reference to the stream, or the
    # callable held a resource) is handed to the release thread (O5). Once the
    # interpreter is finalizing (module globals may be gone), nothing runs (S1).
    if _finalizing():
        return
    enter_driver_callback()
    try:
        with _pending_lock:
            entry = _pending.pop(user_data or 0, None)
        if entry is not None:
            call_unraisable(entry[0], what="host callback")
        del entry
    finally:
        exit_driver_callback()


_HOST_THUNK = _HOST_FN_TYPE(_host_trampoline)
_HOST_FN_ADDRESS: int = ctypes.cast(_HOST_THUNK, ctypes.c_void_p).value or 0


@atexit.register
def _drain_host_callbacks() -> None:
    """Before the interpreter finalizes, let pending host callbacks run (S1)."""
    with _pending_lock:
        streams = {id(s): s for _, s in _pending.values()}
    for stream in streams.values():
        if not stream._closed and not stream._context._closed:
            (err,) = driver.cuStreamSynchronize(stream._handle)
            if err:
                report(
                    err,
                    "cuStreamSynchronize",
                    stream._handle,
                    "its pending host callbacks may never run",
                    context=stream._context,
                )


# The compiled build's driver calls while in use and the seam routes to the real bindings, else None (_fast).
_fp: Any = None


def _compiled_changed(ops: Any) -> None:
    global _fp
    _fp = ops


follow_compiled(_compiled_changed)


# Whether the race checker is on, kept current by _race.follow: read on every operation as a global of
# this module (in the compiled build a C flag) instead of an attribute of _race.
_racing = False


def _racing_changed(on: bool) -> None:
    global _racing
    _racing = on


_race.follow(_racing_changed)


# --- streams -----------------------------------------------------------------------


class Stream(Resource):
    """A CUDA stream: an ordered queue of work on one device.

    Create with :meth:`Device.create_stream`; wrap a foreign stream (anything
    with ``__cuda_stream__`` or a raw handle) with :meth:`Stream.wrap`, which
    never destroys it. Every method raises :class:`~cuguard.errors.CUDAError`
    when the driver refuses and :class:`~cuguard.errors.ResourceClosedError`
    once the stream is closed; none changes the current context.
    """

    # _release_deferred: always False, a slot for the same reason as Event's.
    __slots__ = ("_borrowers", "_device", "_lender", "_may_capture", "_release_deferred")
    _what = "stream"
    _handle_type = "CUstream"
    _factory = "Device.create_stream() (or Stream.wrap() for a stream made elsewhere)"
    _device: int
    # A wrapper keeps what it wraps alive (_lender); a cuguard Stream that is wrapped closes its
    # wrappers when it closes (_borrowers), so none of them reaches a destroyed stream (S2).
    _lender: object
    _borrowers: list[weakref.ref[Stream]] | None
    # Whether someone else may be capturing it (a foreign stream, its handle handed out, it waited on an
    # event, cuguard captured on it): only then does a stream-ordered allocation or free ask the driver.
    _may_capture: bool

    @classmethod
    def _make(cls, handle: Any, context: Context, device: int, owned: bool = True, lender: object = None) -> Stream:
        self = new_stream(handle, context, device)
        self._owned = owned
        self._lender = lender
        if not owned:
            _captures.may_capture(self)  # made elsewhere: someone else may capture it
        if type(lender) is Stream:
            if lender._borrowers is None:
                lender._borrowers = []
            lender._borrowers.append(weakref.ref(self))
        return self

    def _close_borrowers(self) -> None:
        for ref in self._borrowers or ():
            borrower = ref()
            if borrower is not None:
                borrower._closed = True

    def close(self) -> None:
        """Destroy the stream now (see :meth:`Resource.close`). Idempotent.

        Work already queued still completes. If the driver refuses, raises
        :class:`~cuguard.errors.CUDAError` and the stream is leaked, never
        destroyed twice.
        """
        if self._closed:
            return
        if self._borrowers:
            self._close_borrowers()
        if self._context._closed:
            self._context_gone()
            return
        self._closed = True
        if not self._owned:
            return
        fp = _fp
        try:
            if fp is not None:
                err = fp.stream_destroy(self._handle)  # compiled: the status back, raised here
            else:
                (err,) = driver.cuStreamDestroy(self._handle)
        except CUDAError:
            if not in_driver_callback():
                raise
            _captures._undestroyed.add(self)  # until the release thread destroyed it
            self._close_in_callback()  # refused inside a host function: the release thread destroys it (O5)
            return
        if err:
            _captures._undestroyed.add(self)  # leaked: a capture on it goes on in the driver
            self._release_failed(err, "cuStreamDestroy")
        elif self._may_capture and _captures._began and _captures.stream_destroyed(self):
            _captures.release_waiting()  # a capture that could not be ended went with its stream

    @classmethod
    def wrap(cls, obj: Any, context: Context) -> Stream:
        """Wrap a stream made elsewhere, without owning it.

        ``obj`` has ``__cuda_stream__`` (returning ``(version, handle)``) or is
        a ``CUstream``/int handle; ``context`` is the context it belongs to.
        Closing the wrapper never destroys the stream; the wrapper keeps
        ``obj`` alive. Wrapping a cuguard :class:`Stream` (open:
        ``ResourceClosedError`` otherwise) gives a wrapper that is closed when
        that stream is closed: it refuses use from then on.
        Anything else raises ``TypeError``, a ``context`` that refuses use
        ``ResourceClosedError``; asking a wrapped context for its device may
        raise :class:`~cuguard.errors.CUDAError`.
        """
        from cuguard.context import Context

        if not isinstance(context, Context):
            raise wrong_kind("context", "a Context", context)
        if context._closed:
            raise context._refusal()
        if isinstance(obj, Stream):
            obj._check_open()
            return cls._make(obj._handle, context, obj._device, owned=False, lender=obj)
        protocol = getattr(type(obj), "__cuda_stream__", None)
        if protocol is None and (isinstance(obj, bool) or not isinstance(obj, int | driver_types().CUstream)):
            raise wrong_kind("obj", _WRAP_KIND, obj)
        if protocol is not None:
            handle = driver_types().CUstream(_stream_address(obj, "obj", _WRAP_KIND))
        else:
            handle = obj if isinstance(obj, driver_types().CUstream) else driver_types().CUstream(int(obj))
        return cls._make(handle, context, context.device, owned=False, lender=obj)

    @property
    def device(self) -> int:
        """The ordinal of the stream's device."""
        return self._device

    def _release(self, raising: bool) -> tuple[Any, str]:
        # The driver destroys a stream whatever context is current.
        (err,) = driver.cuStreamDestroy(self._handle)
        if err:
            _captures._undestroyed.add(self)  # leaked: a capture on it goes on in the driver
            return err, "cuStreamDestroy"
        if _captures._undestroyed:
            _captures._undestroyed.discard(self)  # destroyed at last (by the release thread)
        if self._may_capture and _captures._began:
            _captures.stream_destroyed(self)  # the waiting releases run at the end of the collection
        return err, "cuStreamDestroy"

    @property
    def flags(self) -> int:
        """The stream's creation flags (``CU_STREAM_NON_BLOCKING`` = 1).

        Raises ``ResourceClosedError`` once closed and :class:`~cuguard.errors.CUDAError` if the driver refuses.
        """
        handle = self.handle  # checked before the driver is looked up (O3)
        err, flags = driver.cuStreamGetFlags(handle)
        if err:
            raise_status(err, "cuStreamGetFlags")
        return int(flags)

    @property
    def priority(self) -> int:
        """The stream's priority (lower numbers are higher priorities).

        Raises ``ResourceClosedError`` once closed and :class:`~cuguard.errors.CUDAError` if the driver refuses.
        """
        handle = self.handle
        err, priority = driver.cuStreamGetPriority(handle)
        if err:
            raise_status(err, "cuStreamGetPriority")
        return int(priority)

    def sync(self) -> None:
        """Wait until all work queued on the stream has finished.

        A kernel fault surfaces here as a sticky :class:`~cuguard.errors.CUDAError`.
        """
        if self._closed or self._context._closed:
            self._check_open()  # raises
        handle = self._handle
        fp = _fp
        if fp is not None:
            err = fp.stream_synchronize(handle)  # compiled (the GIL released): the status back, raised here
        else:
            (err,) = driver.cuStreamSynchronize(handle)
        if err:
            raise_status(err, "cuStreamSynchronize")
        if _racing:
            _race.stream_synced(self)
        if _captures._waiting:
            _captures.release_waiting()  # frees that waited for a capture begun elsewhere (G6)

    def query(self) -> bool:
        """Whether all queued work has finished (never blocks)."""
        handle = self.handle
        (err,) = driver.cuStreamQuery(handle)
        if not err:
            if _racing:
                _race.stream_synced(self)
            return True
        if int(err) == 600:  # CUDA_ERROR_NOT_READY
            return False
        raise_status(err, "cuStreamQuery")

    def wait(self, other: Event | Stream) -> None:
        """Make future work on this stream wait for ``other``.

        ``other`` is an :class:`Event` (waits for its last record) or a
        :class:`Stream` or any object with ``__cuda_stream__`` (waits for the
        work queued on it so far; a temporary event is recorded on it and
        released again, also on failure). Anything else raises ``TypeError``.
        """
        if isinstance(other, Event):
            handle = self.handle
            other._check_open()
            (err,) = driver.cuStreamWaitEvent(handle, other._handle, 0)
            if err:
                raise_status(err, "cuStreamWaitEvent")
            if _racing:
                _race.waited(self, other)
            return
        if not isinstance(other, Stream):
            if getattr(type(other), "__cuda_stream__", None) is None:
                raise wrong_kind("other", "an Event or a Stream (or an object with __cuda_stream__)", other)
            other = as_stream(other, "other", kind="an Event or a Stream (or an object with __cuda_stream__)")
        self._check_open()
        other._check_open()
        with Event._create(other._context, other._device, timing=False) as event:
            event.record(other)
            handle = self.handle
            (err,) = driver.cuStreamWaitEvent(handle, event._handle, 0)
            if err:
                raise_status(err, "cuStreamWaitEvent")
            if _racing:
                _race.waited(self, event)

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new timing event if ``None``) on this stream; return it.

        If recording a new event fails, the event is released before the
        error propagates (G1).
        """
        if event is not None:
            _event_arg(event, "event").record(self)
            return event
        self._check_open()
        new = Event._create(self._context, self._device, timing=True)
        try:
            new.record(self)
        except BaseException as exc:
            new._discard(exc)
            raise
        return new

    def launch_host_func(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a driver thread once the work queued so far has finished.

        An exception raised by ``fn`` goes to ``sys.unraisablehook`` and the
        stream carries on (W6). ``fn`` stays referenced until it has run. If the
        launch fails, ``fn`` is never called and
        :class:`~cuguard.errors.CUDAError` is raised.

        On a stream that is being captured into a graph it raises
        ``RuntimeError`` before anything is queued: cuda-bindings frees what a
        ``cuLaunchHostFunc`` callback needs after its first call, so a captured
        one would crash the process the second time the graph runs; capture a
        callback with ``cuguard.graphs.GraphBuilder.callback`` instead.
        """
        if not callable(fn):
            raise TypeError(f"a host function must be callable, not {type(fn).__name__}")
        handle = self.handle
        err, capturing = driver.cuStreamIsCapturing(handle)
        if err:
            raise_status(err, "cuStreamIsCapturing")
        if int(capturing) == _CAPTURE_ACTIVE:
            raise RuntimeError(
                f"{self!r} is being captured into a graph: a host function launched on it would run only once "
                "(cuda-bindings frees its data after the first call); use GraphBuilder.callback() instead"
            )
        if _racing:
            fn = _race.host_func(self, fn)  # runs as a step of this stream (B7)
        token = next(_tokens)
        with _pending_lock:
            _pending[token] = (fn, self)
        (err,) = driver.cuLaunchHostFunc(handle, driver_types().CUhostFn(_HOST_FN_ADDRESS), token)
        if err:
            with _pending_lock:
                _pending.pop(token, None)
            raise_status(err, "cuLaunchHostFunc")

    @property
    def handle(self) -> Any:
        """The driver handle (``CUstream``).

        Raises :class:`~cuguard.errors.ResourceClosedError` once closed, once
        its context was destroyed, or while its driver is not installed.
        Once handed out, the stream may be captured by code cuguard does not
        see: its stream-ordered allocations and frees then ask the driver
        whether it is capturing (G6).
        """
        handle = self._bindings_handle()
        if not self._may_capture:
            _captures.may_capture(self)
        return handle

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: ``(0, handle address)`` (hands the handle out, as :attr:`handle` does)."""
        return (0, int(self.handle))


#: ``CU_STREAM_CAPTURE_STATUS_ACTIVE``: the stream is being captured.
_CAPTURE_ACTIVE = 1
_CAPTURE_INVALIDATED = 901  # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED


def refuse_capturing_allocation(stream: Stream) -> None:
    """Refuse a stream-ordered allocation on ``stream`` while it is being captured into a graph.

    Such an allocation would be graph memory, which exists only while the
    graph runs, and a buffer freed outside the graph cannot reach it. One
    ``cuStreamIsCapturing``: ``RuntimeError`` when the capture is active (a
    refusal of the query itself is :class:`~cuguard.errors.CUDAError`);
    nothing reaches the allocator then. Shared by every allocation that takes
    a stream (``Device.allocate``, the memory pools). A stream no capture can
    be running on (``_may_capture`` unset: cuguard made it, never captured on
    it and never handed its handle out) is not asked.
    """
    if not stream._may_capture:
        return
    err, capturing = driver.cuStreamIsCapturing(stream._handle)
    if err:
        raise_status(err, "cuStreamIsCapturing")
    if int(capturing) == _CAPTURE_ACTIVE:
        raise capturing_refusal(stream)


def capturing_refusal(stream: Stream) -> RuntimeError:
    """The error for an allocation refused because ``stream`` is being captured (both builds raise it)."""
    return RuntimeError(
        f"{stream!r} is being captured into a graph: an allocation there would be graph memory, "
        "which exists only while the graph runs; allocate before the capture begins, or use "
        "GraphDefinition.allocate()"
    )


# --- events ------------------------------------------------------------------------


class Event(Resource):
    """A CUDA event: a marker in a stream that can be waited on and timed.

    Create with :meth:`Device.create_event` or :meth:`Stream.record`. Methods
    raise :class:`~cuguard.errors.CUDAError` when the driver refuses and
    :class:`~cuguard.errors.ResourceClosedError` once closed.
    """

    # _release_deferred: always False (only memory defers a release, W5); a slot rather than the base's
    # class attribute, so that __del__ of a closed event reads it as a slot, the cheap read on CPython 3.12.
    __slots__ = ("_device", "_release_deferred", "_timing")
    _what = "event"
    _handle_type = "CUevent"
    _factory = "Device.create_event() or Stream.record()"
    _device: int
    _timing: bool

    @property
    def is_ipc_enabled(self) -> bool:
        """Whether the event can be shared with other processes (``Device.create_event(ipc_enabled=True)``)."""
        from cuguard.resources._ipc import is_ipc_event

        return is_ipc_event(self)

    def get_ipc_descriptor(self) -> IPCEventDescriptor:
        """An :class:`~cuguard.resources.IPCEventDescriptor` with which another process opens this event.

        ``ValueError`` for an event not created IPC-enabled (before the driver
        is asked); :class:`~cuguard.errors.CUDAError` if the driver refuses;
        ``ResourceClosedError`` once closed. The driver asks for a current
        context: the call runs in the event's context, and the caller's
        current context is restored after it (C1). Each process destroys its own
        event; using the other process's copy after this one is destroyed is
        undefined (the driver's rule).
        """
        from cuguard.resources._ipc import event_descriptor

        return event_descriptor(self)

    @classmethod
    def from_ipc_descriptor(cls, descriptor: IPCEventDescriptor, device: Any = None) -> Event:
        """Open an event another process shared (:meth:`get_ipc_descriptor`), in ``device``'s context.

        ``device`` is a :class:`Device` or ordinal (default: ``Device()``).
        The opened event is this process's own (closed like any event); it
        cannot time. Opening it in the process that created it is refused by
        the driver. Raises ``TypeError`` for another kind of descriptor and
        :class:`~cuguard.errors.CUDAError` if the driver refuses (nothing is
        opened then).
        """
        from cuguard.resources._ipc import open_event

        return open_event(descriptor, device)

    @classmethod
    def _create(cls, context: Context, device: int, timing: bool) -> Event:
        flags = 0 if timing else 2  # CU_EVENT_DISABLE_TIMING
        handle = None
        if not context._closed:
            # Fast path: the event's context is current already, so no switch (C1).
            err, current = driver.cuCtxGetCurrent()
            if err:  # never swallowed: the slow path would ask again, a retry (C4)
                raise_status(err, "cuCtxGetCurrent")
            if current == context._handle:
                err, handle = driver.cuEventCreate(flags)
                if err:
                    raise_status(err, "cuEventCreate")
        if handle is None:
            handle = call_in(context, _event_create, _event_destroy, flags)
        return new_event(handle, context, device, timing)

    def close(self) -> None:
        """Destroy the event now (see :meth:`Resource.close`). Idempotent.

        If the driver refuses, raises :class:`~cuguard.errors.CUDAError` and
        the event is leaked, never destroyed twice.
        """
        if self._closed:
            return
        if self._context._closed:
            self._context_gone()
            return
        self._closed = True
        fp = _fp
        try:
            if fp is not None:
                err = fp.event_destroy(self._handle)  # compiled: the status back, raised here
            else:
                (err,) = driver.cuEventDestroy(self._handle)
        except CUDAError:
            if not in_driver_callback():
                raise
            self._close_in_callback()  # refused inside a host function: the release thread destroys it (O5)
            return
        if err:
            self._release_failed(err, "cuEventDestroy")

    @property
    def handle(self) -> Any:
        """The driver handle (a ``CUevent``).

        Raises :class:`~cuguard.errors.ResourceClosedError` once closed, once
        its context was destroyed, or while its driver is not installed.
        """
        return self._bindings_handle()

    @property
    def timing(self) -> bool:
        """Whether the event records time (``elapsed_since`` needs it)."""
        return self._timing

    @property
    def device(self) -> int:
        """The ordinal of the event's device."""
        return self._device

    def _release(self, raising: bool) -> tuple[Any, str]:
        (err,) = driver.cuEventDestroy(self._handle)
        return err, "cuEventDestroy"

    def record(self, stream: Stream) -> None:
        """Record the event at the current end of ``stream``'s queue.

        Raises :class:`~cuguard.errors.CUDAError` if the driver refuses (for
        example a stream of another context: ``CUDA_ERROR_INVALID_HANDLE``).
        """
        s = stream if type(stream) is Stream else as_stream(stream, "stream")  # compiled: s is a typed Stream
        if self._closed or s._closed or self._context._closed or s._context._closed:
            self._check_open()
            s._check_open()
        fp = _fp
        if fp is not None:
            err = fp.event_record(self._handle, s._handle)  # compiled: the status back, raised here
        else:
            (err,) = driver.cuEventRecord(self._handle, s._handle)
        if err:
            raise_status(err, "cuEventRecord")
        if _racing:
            _race.recorded(self, s)

    def sync(self) -> None:
        """Wait until the work before the last record has finished.

        Raises ``ResourceClosedError`` once closed and :class:`~cuguard.errors.CUDAError`
        if the driver refuses; a kernel fault surfaces here as a sticky ``CUDAError``.
        """
        if self._closed or self._context._closed:
            self._check_open()
        (err,) = driver.cuEventSynchronize(self._handle)
        if err:
            raise_status(err, "cuEventSynchronize")
        if _racing:
            _race.event_synced(self)

    def query(self) -> bool:
        """Whether the work before the last record has finished (a never-recorded event is done)."""
        if self._closed or self._context._closed:
            self._check_open()
        fp = _fp
        if fp is not None:
            err = fp.event_query(self._handle)  # compiled: the status back, raised here
        else:
            (err,) = driver.cuEventQuery(self._handle)
        if not err:
            if _racing:
                _race.event_synced(self)
            return True
        if int(err) == 600:  # CUDA_ERROR_NOT_READY
            return False
        raise_status(err, "cuEventQuery")

    def elapsed_since(self, start: Event) -> float:
        """Milliseconds between ``start`` and this event; both must be recorded timing events.

        The driver answers ``CUDA_ERROR_INVALID_HANDLE`` (raised as
        :class:`~cuguard.errors.CUDAError`) for unrecorded or non-timing events.
        """
        start = _event_arg(start, "start")
        start._check_open()
        self._check_open()
        err, ms = driver.cuEventElapsedTime(start._handle, self._handle)
        if err:
            raise_status(err, "cuEventElapsedTime")
        return float(ms)


# How new_event and new_stream make their objects without __init__ (source_new: None in the compiled build).
_new_event = source_new(__file__, Event)
_new_stream = source_new(__file__, Stream)


def new_event(handle: Any, context: Context, device: int, timing: bool) -> Event:
    """A new open, owned :class:`Event` for ``handle`` (just created in ``context``): the hot paths' factory.

    In the compiled build its fields are set as C slots (``_stream.pxd``).
    """
    event = Event.__new__(Event) if _new_event is None else _new_event(Event)
    event._handle = handle
    event._context = context
    event._owned = True
    event._device = device
    event._timing = timing
    event._release_deferred = False
    event._closed = False
    return event


def new_stream(handle: Any, context: Context, device: int) -> Stream:
    """A new open, owned :class:`Stream` for ``handle`` (just created in ``context``): the hot paths' factory.

    Nobody else may capture it yet (``_may_capture`` unset). In the compiled build its fields are
    set as C slots (``_stream.pxd``).
    """
    stream = Stream.__new__(Stream) if _new_stream is None else _new_stream(Stream)
    stream._handle = handle
    stream._context = context
    stream._owned = True
    stream._device = device
    stream._closed = False
    stream._lender = None
    stream._borrowers = None
    stream._may_capture = False
    stream._release_deferred = False
    return stream


_STREAM_KIND = "a Stream (or an object with __cuda_stream__)"


def as_stream(value: Any, param: str = "stream", *, kind: str = _STREAM_KIND) -> Stream:
    """``value`` as a :class:`Stream`: a Stream itself, or any object with ``__cuda_stream__`` (E3).

    A stream-like object of cuguard's own (a class with a
    ``_as_cuguard_stream()`` method, such as ``cuguard.graphs.GraphBuilder``)
    gives its :class:`Stream` with no driver call; its refusal (a closed
    builder: ``ResourceClosedError``) propagates. A foreign stream (CuPy's,
    PyTorch's, cuda.core's...) is wrapped without being owned, in the context
    the driver says it belongs to (``cuStreamGetCtx``), so closing or
    collecting the wrapper never destroys it; the wrapper keeps ``value``
    alive. While the stream's capture is invalidated the driver names no
    context: a live wrapper of the same stream supplies it, or the refusal is
    raised. Anything else raises ``TypeError`` naming ``param`` and ``kind``
    (what the parameter takes); a malformed ``__cuda_stream__`` result raises
    ``TypeError`` too, and a driver refusal :class:`~cuguard.errors.CUDAError`.
    """
    if isinstance(value, Stream):
        return value
    own = getattr(type(value), "_as_cuguard_stream", None)
    if own is not None:  # a stream-like of a layer above (layering: never imported here)
        stream = own(value)
        if not isinstance(stream, Stream):
            raise RuntimeError(
                f"internal cuguard error, please report: {type(value).__name__}._as_cuguard_stream() "
                f"returned {type(stream).__name__}, not a Stream"
            )
        return stream
    if getattr(type(value), "__cuda_stream__", None) is None:
        raise wrong_kind(param, kind, value)
    handle = driver_types().CUstream(_stream_address(value, param, kind))
    err, ctx = driver.cuStreamGetCtx(handle)
    from cuguard.context import Context

    if err:
        # While the stream's capture is invalidated the driver will not name its context (an H200
        # answers CAPTURE_INVALIDATED); a wrapper cuguard already holds knows it (G6).
        known = _captures.known_context(int(handle)) if err == _CAPTURE_INVALIDATED else None
        if known is None:
            raise_status(err, "cuStreamGetCtx")
        context = known
    else:
        context = Context.wrap(ctx)
    return Stream._make(handle, context, context.device, owned=False, lender=value)


_WRAP_KIND = "a Stream, an object with __cuda_stream__, a CUstream or an int handle"


def _stream_address(value: Any, param: str, kind: str) -> int:
    """The handle ``value.__cuda_stream__()`` gives; ``TypeError`` naming ``param`` when it is malformed."""
    version_handle = value.__cuda_stream__()
    if (
        not isinstance(version_handle, tuple)
        or len(version_handle) != 2
        or isinstance(version_handle[1], bool)
        or not isinstance(version_handle[1], int)
    ):
        raise TypeError(
            f"{param} must be {kind}: {type(value).__name__}.__cuda_stream__() returned {version_handle!r}, "
            "not (version, handle as an int)"
        )
    return version_handle[1]


def _event_arg(value: Any, param: str) -> Event:
    if type(value) is not Event and not isinstance(value, Event):
        raise wrong_kind(param, "an Event", value)
    return value


def _event_create(flags: int) -> Any:
    err, handle = driver.cuEventCreate(flags)
    if err:
        raise_status(err, "cuEventCreate")
    return handle


def _event_destroy(handle: Any) -> None:
    (err,) = driver.cuEventDestroy(handle)
    if err:
        raise_status(err, "cuEventDestroy")
