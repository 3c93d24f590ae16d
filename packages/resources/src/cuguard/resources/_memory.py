"""Device memory (:class:`Buffer`) and pinned host memory (:class:`PinnedBuffer`)."""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cuguard.context import call_in
from cuguard.context.contexts import Context  # from its defining module: the compiled build types contexts with it
from cuguard.errors import CUDAError, driver, raise_status
from cuguard.errors.lowlevel import in_driver_callback, int_argument, is_integer, wrong_kind
from cuguard.resources import _captures, _dlpack, _race
from cuguard.resources._base import Resource, driver_types
from cuguard.resources._captures import _tables as _capture_tables  # never rebound: read on each operation
from cuguard.resources._dlpack import _owners as _dlpack_owners  # never rebound: read on each close
from cuguard.resources._fast import follow_compiled
from cuguard.resources._stream import Stream, as_stream

if TYPE_CHECKING:
    from cuguard.resources._ipc import IPCBufferDescriptor
    from cuguard.resources._memres import MemoryResource
    from cuguard.resources._pools import DeviceMemoryResource

__all__ = ["Buffer", "PinnedBuffer"]

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


# --- driver steps (run inside the owning context) ----------------------------------------


def _alloc(size: int) -> Any:
    err, ptr = driver.cuMemAlloc(size)
    if err:
        raise_status(err, "cuMemAlloc")
    return ptr


def _free(ptr: Any) -> None:
    (err,) = driver.cuMemFree(ptr)
    if err:
        raise_status(err, "cuMemFree")


def _sync_then_free(ptr: Any) -> tuple[Any, str]:
    (err,) = driver.cuCtxSynchronize()
    if err:
        return err, "cuCtxSynchronize"
    (err,) = driver.cuMemFree(ptr)
    return err, "cuMemFree"


def _host_alloc(size: int) -> Any:
    err, address = driver.cuMemHostAlloc(size, 0)
    if err:
        raise_status(err, "cuMemHostAlloc")
    return address


def _host_free(address: Any) -> None:
    (err,) = driver.cuMemFreeHost(address)
    if err:
        raise_status(err, "cuMemFreeHost")


def _host_free_status(address: Any) -> tuple[Any, str]:
    (err,) = driver.cuMemFreeHost(address)
    return err, "cuMemFreeHost"


def _free_status(ptr: Any) -> tuple[Any, str]:
    (err,) = driver.cuMemFree(ptr)
    return err, "cuMemFree"


# --- host-side views ---------------------------------------------------------------------


def _host_view(obj: Any, param: str) -> memoryview:
    """A contiguous byte view of a host object (NumPy array, bytes, bytearray...)."""
    try:
        view = memoryview(obj)
    except TypeError:
        raise wrong_kind(
            param, "a Buffer, a PinnedBuffer or a host object with the buffer protocol (a NumPy array...)", obj
        ) from None
    if not view.c_contiguous:
        raise ValueError("host buffers must be C-contiguous")
    return view


#: Checks run by an explicit close() of memory that a graph node ever used (``_graph_used``, set
#: by the graphs layer): each returns why the memory must not be freed now (a CUDA graph that
#: may still run uses it), or None. The graphs layer registers one.
_close_guards: list[Callable[[Any], str | None]] = []


def _in_use(buffer: Any) -> bool:
    """Whether a graph may still run on ``buffer``: a capture in progress uses it, or a guard says so (W5, G6)."""
    return _captures.used_by_capture(buffer) or any(guard(buffer) for guard in _close_guards)


# The stream an explicit close(stream) asked for, kept while that free waits for a capture to end (G6)
# or for the release thread (O5); by id of the buffer, which the waiting queue keeps alive meanwhile.
_free_streams: dict[int, Stream] = {}


def _capture_wait(buffer: Any, stream: Stream | None) -> bool:
    """Whether freeing ``buffer`` now would meet a capture: queued into one, or ``cuCtxSynchronize`` during one (G6)."""
    if stream is None or stream._closed:
        mr = buffer._mr
        stream = mr._free_stream(buffer) if mr is not None else getattr(buffer, "_stream", None)
    if stream is not None and not stream._closed and _captures.stream_capturing(stream):
        return True
    if not (_captures._counts or _captures._watched):
        return False  # no capture cuguard counts or could ask about, in any context
    # A free that synchronizes the context first (virtual memory's, whatever stream was named) meets
    # every capture of that context, not only one on the stream.
    return bool(buffer._frees_after_context_sync()) and _captures.context_capturing(buffer._context)


def graph_let_go(objects: list[object]) -> None:
    """A graph or capture let go of ``objects``: memory closed while in use is freed now, if nothing else uses it.

    Called by the graphs layer when CUDA dropped a graph's resources or a
    capture ended without a graph. Memory still used by another graph or
    capture waits for that one (W5). Failures are ``CUDAWarning`` (W1).
    """
    for obj in objects:
        if getattr(obj, "_release_deferred", False) and obj._closed and not _in_use(obj):  # type: ignore[attr-defined]
            obj._release_deferred = False  # type: ignore[attr-defined]
            obj._release_collected()  # type: ignore[attr-defined]


def _note_captured(stream: Stream, written: object, *read: object) -> None:
    """Work writing ``written`` and reading ``read`` was queued on ``stream``: a cuguard capture keeps them (G6)."""
    owners = _captures.captured_into(stream)
    if owners is not None:
        _captures.retain(owners, (written,), read)


def _release_later(buffer: Any, stream: Stream | None) -> None:
    """Close ``buffer`` for use now and free it later (G6, O5).

    Later is after the capture in the way ends, or on the release thread when
    called inside a CUDA host function. ``stream`` is the one an explicit
    ``close(stream)`` asked for: the free is queued on it if it is still open
    then.
    """
    if stream is not None:
        _free_streams[id(buffer)] = stream
    if in_driver_callback():
        buffer._close_in_callback()
    else:
        buffer._closed = True
        _captures.wait_for_capture(buffer)


class Buffer(Resource):
    """Device memory of one device.

    Allocated with :meth:`Device.allocate`. Stream-ordered buffers (allocated
    with a stream) are freed on that same stream, after the work queued on it
    (W5); if that stream was closed first, the buffer's context is
    synchronized and the memory freed synchronously. Methods raise
    :class:`~cuguard.errors.CUDAError` when the driver refuses and
    :class:`~cuguard.errors.ResourceClosedError` once closed.

    Memory made elsewhere is wrapped without being owned (:meth:`from_handle`,
    :meth:`from_dlpack`, :meth:`from_cuda_array_interface`): closing or
    collecting such a buffer never frees it.

    ``__cuda_array_interface__`` exports the bytes (``|u1``); that consumer must
    not outlive the buffer. ``__dlpack__`` exports them as a 1-D ``uint8``
    DLPack tensor; while the export is live the buffer stays alive and
    :meth:`close` refuses.
    """

    __slots__ = ("_device", "_graph_used", "_lender", "_mr", "_mr_data", "_release_deferred", "_size", "_stream")
    _graph_used: bool  # a graph node used it once: close() asks the graphs layer first (W5)
    _what = "device memory"
    _handle_type = "CUdeviceptr"
    _capture_unsafe_release = True  # a collection frees it in relaxed capture mode (O6, _base)
    _factory = "Device.allocate()"
    _device: int
    _size: int
    _stream: Stream | None
    _lender: object  # what keeps memory made elsewhere alive (its owner, a producer, a consumed tensor)
    _mr: Any  # the MemoryResource it came from (which frees it), or None (_memres)
    _mr_data: object  # what that resource needs to free it; set only when _mr is set

    @classmethod
    def _allocate(cls, context: Context, device: int, size: int) -> Buffer:
        """Synchronous allocation in ``context`` (stream-ordered ones are made by ``Device.allocate``)."""
        size = int_argument("size", size)
        handle = call_in(context, _alloc, _free, size)
        if _fp is not None:
            handle = int(handle)  # the compiled build keeps the address: its calls take it as it is
        return cls._made(handle, context, device, size)

    @classmethod
    def _made(
        cls, handle: Any, context: Context, device: int, size: int, *, owned: bool = True, lender: object = None
    ) -> Buffer:
        """The object for memory that exists already (allocated here, or made elsewhere when not ``owned``)."""
        self = cls.__new__(cls)
        self._init(handle, context, owned)
        self._device = device
        self._size = size
        self._stream = None
        self._graph_used = False
        self._release_deferred = False
        self._lender = lender
        self._mr = None
        if _racing and owned:
            _race.allocated(self, None)  # new memory: what the checker knew of these addresses is gone (B7)
        return self

    @classmethod
    def _foreign(cls, ptr: int, size: int, device: Any, lender: object) -> Buffer:
        from cuguard.resources._device import Device

        if device is None:
            device = Device()
        elif not isinstance(device, Device):
            if not is_integer(device):
                raise wrong_kind("device", "a Device or a device ordinal", device)
            device = Device(int_argument("device", device, 0, 1 << 31))
        # Held through a Lent: another library's object may call CUDA as it goes, never on a driver's thread (O5).
        held = None if lender is None else _dlpack.Lent(lender)
        return cls._made(
            driver_types().CUdeviceptr(ptr), device.context, device.ordinal, size, owned=False, lender=held
        )

    @classmethod
    def from_handle(cls, ptr: Any, size: int, *, device: Any = None, owner: object = None) -> Buffer:
        """Wrap ``size`` bytes of device memory at ``ptr`` made elsewhere, without owning them.

        ``ptr`` is an int address or a ``CUdeviceptr``; ``device`` a
        :class:`Device` or ordinal (default: the device of the current
        context, or device 0, as ``Device()``); ``owner`` is kept alive as long
        as the buffer. ``close()`` and collection never free the memory: it
        must outlive the buffer. A bad ``ptr`` or ``size`` raises
        ``TypeError``/``ValueError``; retaining the device's primary context
        may raise :class:`~cuguard.errors.CUDAError`. The driver is not asked
        whether ``ptr`` is device memory.
        """
        if isinstance(ptr, driver_types().CUdeviceptr):
            ptr = int(ptr)
        elif not is_integer(ptr):
            raise wrong_kind("ptr", "an int address or a CUdeviceptr", ptr)
        ptr = int_argument("ptr", ptr)
        return cls._foreign(ptr, int_argument("size", size), device, owner)

    @classmethod
    def from_dlpack(cls, obj: Any, *, stream: Any = None) -> Buffer:
        """Import the device memory of a DLPack producer (CuPy, PyTorch, JAX...) without owning it.

        ``obj.__dlpack__`` is asked for a versioned capsule (``max_version``
        ``(1, 0)``), or a legacy one from producers that do not know the
        keyword. With ``stream`` (a :class:`Stream` or any ``__cuda_stream__``
        object), the producer is asked to order its work before that stream;
        without, before the legacy default stream. The buffer covers the
        tensor's bytes and keeps the consumed tensor, which keeps the producer's
        memory, alive; the producer's deleter is called once the buffer is
        collected. ``close()`` never frees the memory. A producer whose memory
        is not on a CUDA device (``__dlpack_device__``), a tensor that is not
        C-contiguous or whose elements are not whole bytes raise
        ``BufferError`` (the capsule is then left to its producer); an object
        without ``__dlpack__`` raises ``TypeError``.
        """
        if getattr(type(obj), "__dlpack__", None) is None or getattr(type(obj), "__dlpack_device__", None) is None:
            raise wrong_kind("obj", "an object with __dlpack__ and __dlpack_device__", obj)
        if stream is not None and type(stream) is not Stream:
            stream = as_stream(stream, "stream")
        device_type = obj.__dlpack_device__()[0]
        if int(device_type) != _dlpack.KDL_CUDA:
            raise BufferError(f"{type(obj).__name__} is not on a CUDA device (DLPack device type {device_type})")
        handle = int(stream.handle) if stream is not None else None
        try:
            capsule = obj.__dlpack__(stream=handle, max_version=(1, 0))
        except TypeError:  # a producer of the DLPack 0.x protocol
            capsule = obj.__dlpack__(stream=handle)
        address, size, capsule_type, capsule_device, keeper = _dlpack.import_capsule(capsule)
        lender = (keeper, obj)
        if capsule_type != _dlpack.KDL_CUDA:
            raise BufferError(f"{type(obj).__name__}.__dlpack__() gave a tensor on DLPack device type {capsule_type}")
        return cls._foreign(address, size, int(capsule_device), lender)

    @classmethod
    def from_cuda_array_interface(cls, obj: Any, *, stream: Any = None, device: Any = None) -> Buffer:
        """Import the device memory of a ``__cuda_array_interface__`` producer (Numba, CuPy...) without owning it.

        The buffer covers the array's bytes and keeps ``obj`` alive;
        ``close()`` never frees the memory. ``device`` is the device holding
        it (default: the device of the current context, or device 0). When
        the interface names a producer stream, ``stream`` (a :class:`Stream` or
        ``__cuda_stream__`` object) is made to wait for it; without ``stream``
        the producer's stream is synchronized. An object without the
        interface raises ``TypeError``; a malformed interface, an array that
        is not C-contiguous, or one with a mask raises ``BufferError``; a
        failed wait or synchronization raises
        :class:`~cuguard.errors.CUDAError` (no buffer is made then). A
        read-only array (``data[1]``) is not made read-only: do not write
        into it.
        """
        try:
            interface = _dlpack.read_cuda_array_interface(obj, "a Buffer")
        except AttributeError:
            raise wrong_kind("obj", "an object with __cuda_array_interface__", obj) from None
        if stream is not None and type(stream) is not Stream:
            stream = as_stream(stream, "stream")
        if not _dlpack.c_contiguous(interface.shape, interface.strides, interface.itemsize):
            raise BufferError("only C-contiguous arrays can be imported as a Buffer")
        buf = cls._foreign(interface.ptr, interface.count * interface.itemsize, device, obj)
        producer = interface.stream
        if producer is not None:
            theirs = Stream._make(driver_types().CUstream(producer), buf._context, buf._device, owned=False)
            if stream is not None:
                stream.wait(theirs)
            else:
                call_in(buf._context, _stream_sync, None, theirs._handle)
        return buf

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self._size

    @property
    def owned(self) -> bool:
        """Whether cuguard frees the memory (``False`` for memory made elsewhere)."""
        return self._owned

    @property
    def device(self) -> int:
        """The ordinal of the device holding the memory."""
        return self._device

    @property
    def stream(self) -> Stream | None:
        """The stream the memory was allocated on and will be freed on, if stream-ordered."""
        return self._stream

    @property
    def memory_resource(self) -> MemoryResource[Any] | None:
        """The :class:`~cuguard.resources.MemoryResource` that allocated the memory and frees it, or ``None``.

        ``None`` for :meth:`Device.allocate` memory and memory made elsewhere.
        """
        mr: MemoryResource[Any] | None = self._mr
        return mr

    def get_ipc_descriptor(self) -> IPCBufferDescriptor:
        """An :class:`~cuguard.resources.IPCBufferDescriptor` with which another process maps this buffer.

        Only buffers of an IPC-enabled :class:`~cuguard.resources.DeviceMemoryResource`
        of this process can be shared, once its pool was shared with
        :meth:`DeviceMemoryResource.get_allocation_handle` (``ValueError``
        otherwise, before the driver is asked: the driver exports pointers
        of shared pools only). This first waits for the stream the buffer was
        allocated on (for the buffer's context when that stream was closed);
        the export runs in the buffer's context, whatever is current. The
        other process maps it with :meth:`from_ipc_descriptor` and must free
        its mapping before this buffer is freed. Raises
        :class:`~cuguard.errors.CUDAError` naming the call if the wait or the
        driver's export fails (nothing is exported then; the buffer stays
        usable), ``ResourceClosedError`` once closed.
        """
        from cuguard.resources._ipc import buffer_descriptor

        return buffer_descriptor(self)

    @classmethod
    def from_ipc_descriptor(
        cls, mr: DeviceMemoryResource, descriptor: IPCBufferDescriptor, stream: Stream | None = None
    ) -> Buffer:
        """Map a buffer another process shared (:meth:`get_ipc_descriptor`) through its imported pool ``mr``.

        ``mr`` is the :class:`~cuguard.resources.DeviceMemoryResource` made
        by ``DeviceMemoryResource.from_allocation_handle`` from the exporter's
        pool. The new buffer is owned by this process: its ``close()`` (on
        ``stream`` if given, else synchronously) unmaps it, and must come
        before the exporter frees its own buffer. Do not use it before the
        exporter's allocation completed (wait on an IPC event the exporter
        recorded after allocating). Another kind of argument raises
        ``TypeError``, a pool that was not imported ``ValueError``, a refusal
        :class:`~cuguard.errors.CUDAError` (nothing is mapped then).
        """
        from cuguard.resources._ipc import import_buffer

        return import_buffer(mr, descriptor, stream)

    @property
    def ptr(self) -> int:
        """The device address as an int."""
        return self._address()

    def close(self, stream: Any = None) -> None:
        """Free the memory now (see :meth:`Resource.close`). Idempotent.

        With ``stream`` (a :class:`Stream` of the buffer's device, or any
        ``__cuda_stream__`` object) the memory is freed on it
        (``cuMemFreeAsync``), after the work queued on it: ordering it after
        other streams' use is the caller's part. Otherwise stream-ordered
        memory is freed on its own stream, after the work queued on it (W5),
        and other memory synchronously. Memory made elsewhere
        (:meth:`from_handle`, :meth:`from_dlpack`...) is never freed: the
        buffer is only closed and lets go of what it kept alive.

        While a DLPack export of the buffer is live (a capsule from
        :meth:`__dlpack__` that someone still holds unconsumed, or a tensor a
        consumer made from it and has not deleted yet), raises
        ``BufferError`` and changes nothing: the buffer stays open and
        usable; delete the consumer's tensor (or the capsule) and close again.
        While a CUDA graph that may still run uses the memory, the buffer is
        closed for use at once but the memory is freed only when CUDA lets go
        of that graph, on the stream it was allocated on (W5: never freed
        under a graph). A closed ``stream`` raises ``ResourceClosedError``, one
        of another device ``ValueError``, before anything is freed (also when
        the buffer is closed already). If the driver refuses, raises
        :class:`~cuguard.errors.CUDAError` and the memory is leaked, never
        freed twice.
        """
        if stream is not None:
            if type(stream) is not Stream:
                stream = as_stream(stream, "stream")
            stream._check_open()
            if stream._device != self._device:
                raise ValueError(f"{stream!r} belongs to device {stream._device}, not to device {self._device}")
        if self._closed:
            return
        if self._context._closed:
            self._context_gone()
            return
        if _dlpack_owners and _dlpack.exported(self):
            raise BufferError(f"{self!r} has a live DLPack export; delete the consumer's tensor before closing")
        if not self._owned:
            self._closed = True
            self._lender = None
            return
        if self._graph_used and _in_use(self):
            # A graph CUDA may still run uses the memory: never free it under the graph (W5).
            # The buffer is closed for use now; its memory is freed when the graph lets go of it.
            self._release_deferred = True
            self._closed = True
            return
        mr = self._mr
        if mr is None:
            free_on = stream if stream is not None else self._stream
            if free_on is not None and not free_on._closed:
                # The hot path: a stream-ordered free. On a stream a capture may run on (its handle was
                # handed out...), one cuStreamIsCapturing first: a free is never queued into a capture (G6).
                if free_on._may_capture:
                    try:
                        capturing = _captures.stream_capturing(free_on)
                    except CUDAError:  # asked inside a host function, where CUDA forbids calls (O5)
                        if not in_driver_callback():
                            raise
                        capturing = True  # the release thread frees it
                    if capturing:
                        _release_later(self, stream)
                        return
                self._closed = True
                fp = _fp
                try:
                    if fp is not None:
                        err = fp.mem_free_async(self._handle, free_on._handle)  # compiled: the status back
                    else:
                        (err,) = driver.cuMemFreeAsync(self._handle, free_on._handle)
                except CUDAError:
                    if not in_driver_callback():
                        raise
                    _release_later(self, stream)  # refused inside a host function: the release thread frees it (O5)
                    return
                if err:
                    self._release_failed(err, "cuMemFreeAsync")
                if _racing:
                    _race.freed(self, free_on, "cuMemFreeAsync")  # a write on that stream (B7)
                return
        if in_driver_callback() or _capture_wait(self, stream):
            _release_later(self, stream)
            return
        self._closed = True
        if mr is not None:  # memory of a MemoryResource: it frees its own memory its own way
            status, call = mr._release_buffer(self, stream, True)
            if status:
                self._release_failed(status, call)
            if _racing:
                _race.freed(self, stream, call)
            return
        if stream is not None and not stream._closed:
            (err,) = driver.cuMemFreeAsync(self._handle, stream._handle)
            if err:
                self._release_failed(err, "cuMemFreeAsync")
            if _racing:
                _race.freed(self, stream, "cuMemFreeAsync")
            return
        status, call = self._release(True)
        if status:
            self._release_failed(status, call)

    def _capture_wait(self) -> bool:
        return _capture_wait(self, _free_streams.get(id(self)) if _free_streams else None)

    def _frees_after_context_sync(self) -> bool:
        mr = self._mr
        if mr is not None:
            return mr._free_syncs_context(self)  # type: ignore[no-any-return]
        stream = self._stream
        return stream is not None and stream._closed  # _sync_then_free

    def _release(self, raising: bool) -> tuple[Any, str]:
        if _racing:
            _race.freed(self, None, "")  # not checked here: the checker forgets the memory (B7)
        asked = _free_streams.pop(id(self), None) if _free_streams else None
        if asked is not None and asked._closed:
            asked = None
        mr = self._mr
        if mr is not None:
            return mr._release_buffer(self, asked, raising)  # type: ignore[no-any-return]
        stream = asked if asked is not None else self._stream
        if stream is not None and not stream._closed:
            (err,) = driver.cuMemFreeAsync(self._handle, stream._handle)
            return err, "cuMemFreeAsync"
        return self._release_in_context(raising, _sync_then_free if stream is not None else _free_status)

    def copy_from(self, src: Any, stream: Stream | None = None) -> None:
        """Copy all of ``src`` into this buffer.

        ``src`` is a :class:`Buffer`, a :class:`PinnedBuffer` or a host object
        with the buffer protocol (a NumPy array...), of exactly ``size`` bytes.
        With ``stream`` (a :class:`Stream`, any ``__cuda_stream__`` object, or
        a ``GraphBuilder``: its stream) the copy is queued on it (host memory
        must then stay unchanged until the stream reaches it); without, it
        completes before returning. Raises ``ValueError`` on a size mismatch
        and :class:`~cuguard.errors.CUDAError` when the driver refuses the copy
        (on a stream whose capture was invalidated:
        ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``); nothing is queued then.
        """
        if type(stream) is Stream and type(src) is not Buffer:
            s = stream  # compiled: a typed Stream (_memory.pxd), as are pinned below and self
            if not (self._closed or s._closed or self._context._closed or s._context._closed):
                # Fast path: a host object or pinned buffer, queued on a stream.
                if type(src) is PinnedBuffer:
                    pinned = src
                    if pinned._closed or pinned._context._closed:
                        pinned._check_open()
                    host: Any = pinned._handle
                    if type(host) is not int:
                        host = int(host)
                    size = pinned._size
                else:
                    host = _host_view(src, "src")
                    size = host.nbytes
                if size != self._size:
                    _check_size(size, self._size)
                fp = _fp
                if fp is not None:
                    err = fp.memcpy_htod_async(self._handle, host, size, s._handle)  # compiled: status, raised here
                else:
                    (err,) = driver.cuMemcpyHtoDAsync(self._handle, host, size, s._handle)
                if err:
                    raise_status(err, "cuMemcpyHtoDAsync")
                if _capture_tables:
                    _note_captured(s, self, src)
                if _racing:
                    _race.copied(self, src, s, "cuMemcpyHtoDAsync")
                return
        if stream is not None and type(stream) is not Stream:
            stream = as_stream(stream)
        dst = self.handle
        hstream = None if stream is None else stream.handle
        if hstream is None and not isinstance(src, Buffer):
            host = src.address if isinstance(src, PinnedBuffer) else _host_view(src, "src")
            _check_size(src.size if isinstance(src, PinnedBuffer) else host.nbytes, self._size)
            fp = _fp
            # Compiled: the context check and the copy in one call; -1: another context is current (nothing
            # done), switch in below; a failure comes back as (status, call), raised here.
            done: Any = fp.memcpy_htod(self._context._int, dst, host, self._size) if fp is not None else -1
            if done == -1:
                (err,) = call_in(self._context, driver.cuMemcpyHtoD, None, dst, host, self._size)
                done = (err, "cuMemcpyHtoD") if err else 0
            if done:
                raise_status(*done)
            if _racing:
                _race.copied(self, src, None, "cuMemcpyHtoD", self._context)
            return
        if isinstance(src, Buffer):
            _check_size(src._size, self._size)
            if hstream is None:
                hsrc = src.handle
                (err,) = call_in(self._context, driver.cuMemcpyDtoD, None, dst, hsrc, self._size)
                call = "cuMemcpyDtoD"
            else:
                hsrc = src.handle
                (err,) = driver.cuMemcpyDtoDAsync(dst, hsrc, self._size, hstream)
                call = "cuMemcpyDtoDAsync"
        else:  # a host object queued on a stream the fast path above did not take (a wrapped stream...)
            host = src.address if isinstance(src, PinnedBuffer) else _host_view(src, "src")
            _check_size(src.size if isinstance(src, PinnedBuffer) else host.nbytes, self._size)
            (err,) = driver.cuMemcpyHtoDAsync(dst, host, self._size, hstream)
            call = "cuMemcpyHtoDAsync"
        if err:
            raise_status(err, call)
        if stream is not None and _capture_tables:
            _note_captured(stream, self, src)
        if _racing:
            _race.copied(self, src, stream, call, self._context)

    def copy_to(self, dst: Any, stream: Stream | None = None) -> None:
        """Copy this buffer into ``dst`` (a :class:`Buffer`, :class:`PinnedBuffer` or writable host buffer).

        Same rules as :meth:`copy_from`; a read-only host object raises ``TypeError``.
        """
        if stream is not None and type(stream) is not Stream:
            stream = as_stream(stream)
        if isinstance(dst, Buffer):
            dst.copy_from(self, stream)
            return
        src = self.handle
        hstream = None if stream is None else stream.handle
        if isinstance(dst, PinnedBuffer):
            host: Any = dst.address
            _check_size(dst.size, self._size)
        else:
            host = _host_view(dst, "dst")
            if host.readonly:
                raise TypeError(f"cannot copy into a read-only {type(dst).__name__}")
            _check_size(host.nbytes, self._size)
        fp = _fp
        if hstream is None:
            # Compiled: the context check and the copy in one call; -1: another context is current (nothing
            # done), switch in with call_in; a failure comes back as (status, call), raised here.
            done: Any = fp.memcpy_dtoh(self._context._int, host, src, self._size) if fp is not None else -1
            if done != -1:
                if done:
                    raise_status(*done)
                if _racing:
                    _race.copied(dst, self, None, "cuMemcpyDtoH", self._context)
                return
            (err,) = call_in(self._context, driver.cuMemcpyDtoH, None, host, src, self._size)
            call = "cuMemcpyDtoH"
        elif fp is not None:
            err = fp.memcpy_dtoh_async(host, src, self._size, hstream)  # compiled: the status back, raised here
            call = "cuMemcpyDtoHAsync"
        else:
            (err,) = driver.cuMemcpyDtoHAsync(host, src, self._size, hstream)
            call = "cuMemcpyDtoHAsync"
        if err:
            raise_status(err, call)
        if stream is not None and _capture_tables:
            _note_captured(stream, dst, self)
        if _racing:
            _race.copied(dst, self, stream, call, self._context)

    def fill(self, value: int, stream: Stream | None = None) -> None:
        """Set every byte to ``value`` (0..255), queued on ``stream`` or synchronously.

        ``value`` may be any integer (NumPy's too). Raises ``ValueError`` for one outside
        0..255 and ``TypeError`` for a non-integer (a bool, a float), before any driver call;
        ``ResourceClosedError`` once closed and :class:`~cuguard.errors.CUDAError`
        if the driver refuses; nothing was queued then.
        """
        if type(value) is not int or not 0 <= value < 256:
            value = int_argument("value", value, 0, 256)
        if stream is not None and type(stream) is not Stream:
            stream = as_stream(stream)
        dst = self.handle
        if stream is None:
            (err,) = call_in(self._context, driver.cuMemsetD8, None, dst, value, self._size)
            call = "cuMemsetD8"
        else:
            (err,) = driver.cuMemsetD8Async(dst, value, self._size, stream.handle)
            call = "cuMemsetD8Async"
        if err:
            raise_status(err, call)
        if stream is not None and _capture_tables:
            _note_captured(stream, self)
        if _racing:
            _race.filled(self, stream, call)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (version 3) over the buffer's bytes."""
        interface: dict[str, Any] = {
            "shape": (self._size,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
        }
        if self._stream is not None and not self._stream._closed:
            interface["stream"] = int(self._stream._handle)
        return interface

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCUDA, device ordinal)``."""
        return (_dlpack.KDL_CUDA, self._device)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export the bytes as a DLPack tensor (1-D ``uint8`` on the buffer's device).

        Returns a versioned capsule (``dltensor_versioned``, DLPack 1.0) when
        ``max_version`` is ``(1, 0)`` or more, the legacy ``dltensor`` one
        otherwise. The export is live, keeping this buffer alive and making
        :meth:`close` refuse, while anyone holds the capsule unconsumed and,
        once a consumer consumed it, until the consumer deletes the tensor. A
        capsule that is dropped or refused unconsumed ends its export at the
        next export, close or garbage collection, with nothing printed. When
        ``stream`` names the consumer's stream (an int other than
        ``None``/-1) and the buffer is stream-ordered, the consumer's stream
        is made to wait for the work queued on the buffer's stream. Copies
        and other devices are refused with ``BufferError``; a closed buffer
        raises ``ResourceClosedError``.
        """
        handle = self.handle
        if copy:
            raise BufferError("cuguard buffers export without copying only")
        if dl_device is not None and tuple(dl_device) != (2, self._device):
            raise BufferError(f"cannot export to device {dl_device}; the buffer is on {(2, self._device)}")
        own = self._stream
        if (
            stream is not None
            and stream != -1
            and own is not None
            and not own._closed
            and int(stream) != int(own._handle)
        ):
            from cuda.bindings.driver import CUstream

            consumer = Stream._make(CUstream(int(stream)), self._context, self._device, owned=False)
            consumer.wait(own)
        versioned = max_version is not None and next(iter(max_version)) >= 1
        return _dlpack.export(self, int(handle), self._size, _dlpack.KDL_CUDA, self._device, versioned=versioned)


def _stream_sync(handle: Any) -> None:
    (err,) = driver.cuStreamSynchronize(handle)
    if err:
        raise_status(err, "cuStreamSynchronize")


def _check_size(got: int, want: int) -> None:
    if got != want:
        raise ValueError(f"size mismatch: {got} bytes against a buffer of {want} bytes")


def _copy_pinned(dst: PinnedBuffer, src: PinnedBuffer, stream: Any) -> None:
    """Copy pinned memory into pinned memory (the one case :class:`Buffer`'s copies do not cover).

    Queued with ``cuMemcpyAsync`` on ``stream``, else ``cuMemcpy`` in ``dst``'s context (its
    addresses are unified). Kinds, closed buffers and sizes are checked before the driver is
    asked (E3, O1); a refusal raises :class:`~cuguard.errors.CUDAError`.
    """
    if stream is not None and type(stream) is not Stream:
        stream = as_stream(stream)
    to, source = dst.address, src.address
    _check_size(src._size, dst._size)
    if stream is None:
        (err,) = call_in(dst._context, driver.cuMemcpy, None, to, source, dst._size)
        call = "cuMemcpy"
    else:
        (err,) = driver.cuMemcpyAsync(to, source, dst._size, stream.handle)
        call = "cuMemcpyAsync"
    if err:
        raise_status(err, call)
    if _racing:
        _race.copied(dst, src, stream, call, dst._context)  # B7
    if stream is not None and _capture_tables:
        _note_captured(stream, dst, src)


class PinnedBuffer(Resource):
    """Page-locked host memory, fast to copy to and from devices.

    Allocated with :meth:`Device.allocate_pinned`. :meth:`numpy` returns a
    NumPy view that keeps the buffer alive; ``__dlpack__`` exports the bytes
    as a 1-D ``uint8`` tensor on ``kDLCUDAHost`` (NumPy's ``from_dlpack``
    takes it). :meth:`close` refuses (with ``BufferError``) while such a view
    or a live export exists, so neither can outlive the memory.
    """

    __slots__ = ("_graph_used", "_mr", "_mr_data", "_release_deferred", "_size", "_views")
    _graph_used: bool  # a graph node used it once: close() asks the graphs layer first (W5)
    _what = "pinned host memory"
    _capture_unsafe_release = True  # a collection frees it in relaxed capture mode (O6, _base)
    _factory = "Device.allocate_pinned()"
    _size: int
    _views: list[weakref.ref[Any]]
    _mr: Any  # the MemoryResource it came from (which frees it), or None (_memres)
    _mr_data: object  # what that resource needs to free it; set only when _mr is set

    @classmethod
    def _allocate(cls, context: Context, size: int) -> PinnedBuffer:
        size = int_argument("size", size)
        address = call_in(context, _host_alloc, _host_free, size)
        self = cls.__new__(cls)
        self._init(address, context)
        self._size = size
        self._views = []
        self._graph_used = False
        self._release_deferred = False
        self._mr = None
        if _racing:
            _race.allocated(self, None)
        return self

    @classmethod
    def _made(cls, address: Any, context: Context, size: int) -> PinnedBuffer:
        """The object for pinned memory allocated already (by a memory resource, which then adopts it)."""
        self = cls.__new__(cls)
        self._init(address, context)
        self._size = size
        self._views = []
        self._graph_used = False
        self._release_deferred = False
        self._mr = None
        if _racing:
            _race.allocated(self, None)
        return self

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self._size

    @property
    def address(self) -> int:
        """The host address as an int."""
        return int(self.handle)

    @property
    def memory_resource(self) -> MemoryResource[Any] | None:
        """The :class:`~cuguard.resources.MemoryResource` that allocated the memory and frees it, or ``None``.

        ``None`` for :meth:`Device.allocate_pinned` memory.
        """
        mr: MemoryResource[Any] | None = self._mr
        return mr

    def numpy(self, dtype: Any = "uint8") -> Any:
        """A NumPy array over the memory (1-D, of ``dtype``); it keeps this buffer alive.

        Raises ``ResourceClosedError`` once closed, ``ImportError`` without NumPy,
        and NumPy's ``ValueError`` when the size is not a multiple of ``dtype``'s.
        """
        import numpy as np

        address = self.address
        raw: Any = (ctypes.c_ubyte * self._size).from_address(address)
        raw._cuguard_owner = self  # the view's base keeps this buffer alive
        self._views = [ref for ref in self._views if ref() is not None] + [weakref.ref(raw)]
        view = np.frombuffer(raw, dtype=dtype)
        if _racing:
            _race.host_view(self, "PinnedBuffer.numpy")  # a host access, made now (B7)
        return view

    def copy_from(self, src: Any, stream: Stream | None = None) -> None:
        """Copy all of ``src`` into this memory.

        ``src`` is a :class:`Buffer` or a :class:`PinnedBuffer` of any kind
        (:meth:`Device.allocate`, a memory pool, managed, virtual or legacy
        pinned memory), of exactly ``size`` bytes; host objects are read and
        written through :meth:`numpy` instead. With ``stream`` (a
        :class:`Stream`, any ``__cuda_stream__`` object, or a ``GraphBuilder``)
        the copy is queued on it; without, it completes before returning.
        Device memory is copied as :meth:`Buffer.copy_to` does, pinned memory
        with ``cuMemcpyAsync`` (``cuMemcpy`` without a stream, in this
        buffer's context). Another kind of ``src`` or ``stream`` raises
        ``TypeError``, a size mismatch ``ValueError``, a closed buffer or
        stream ``ResourceClosedError``, all before the driver is asked; a
        refusal raises :class:`~cuguard.errors.CUDAError` and nothing was
        queued. A copy queued on a stream being captured by a
        ``GraphBuilder`` keeps both buffers alive with the graph (G6, W5).
        """
        if isinstance(src, Buffer):
            src.copy_to(self, stream)
        elif isinstance(src, PinnedBuffer):
            _copy_pinned(self, src, stream)
        else:
            raise wrong_kind("src", "a Buffer or a PinnedBuffer (host objects: through numpy())", src)

    def copy_to(self, dst: Any, stream: Stream | None = None) -> None:
        """Copy this memory into ``dst``, a :class:`Buffer` or :class:`PinnedBuffer` of any kind.

        Same rules as :meth:`copy_from`.
        """
        if isinstance(dst, Buffer):
            dst.copy_from(self, stream)
        elif isinstance(dst, PinnedBuffer):
            _copy_pinned(dst, self, stream)
        else:
            raise wrong_kind("dst", "a Buffer or a PinnedBuffer (host objects: through numpy())", dst)

    def close(self, stream: Any = None) -> None:
        """Free the memory now (see :meth:`Resource.close`).

        Raises ``BufferError``, and changes nothing, while a NumPy view from
        :meth:`numpy` is alive or a DLPack export is live (a capsule held
        unconsumed, or a consumer's tensor not yet deleted).
        While a CUDA graph that may still run uses the memory, it is closed for
        use at once and freed when CUDA lets go of the graph (W5).

        ``stream`` (a :class:`Stream` or ``__cuda_stream__`` object) matters
        for memory of a stream-ordered memory resource (a pinned memory pool):
        it is freed on that stream, after the work queued on it. Other pinned
        memory is freed synchronously whatever ``stream`` says. A closed
        ``stream`` raises ``ResourceClosedError`` before anything is freed.
        """
        if stream is not None:
            if type(stream) is not Stream:
                stream = as_stream(stream, "stream")
            stream._check_open()
        if not self._closed:
            if any(ref() is not None for ref in self._views):
                raise BufferError(f"{self!r} still has live NumPy views; delete them before closing")
            if _dlpack_owners and _dlpack.exported(self):
                raise BufferError(f"{self!r} has a live DLPack export; delete the consumer's tensor before closing")
            if self._graph_used and not self._context._closed and _in_use(self):
                self._release_deferred = True  # freed when the graph lets go of it (W5)
                self._closed = True
                return
            mr = self._mr
            if mr is not None and not self._context._closed:
                if in_driver_callback() or _capture_wait(self, stream):
                    _release_later(self, stream)
                    return
                if stream is not None:
                    self._closed = True
                    status, call = mr._release_buffer(self, stream, True)
                    if status:
                        self._release_failed(status, call)
                    if _racing:
                        _race.freed(self, stream, call)
                    return
        super().close()

    def _capture_wait(self) -> bool:
        return self._mr is not None and _capture_wait(self, _free_streams.get(id(self)) if _free_streams else None)

    def _frees_after_context_sync(self) -> bool:
        mr = self._mr
        return mr is not None and mr._free_syncs_context(self)

    def _release(self, raising: bool) -> tuple[Any, str]:
        if _racing:
            _race.freed(self, None, "")
        mr = self._mr
        if mr is not None:
            asked = _free_streams.pop(id(self), None) if _free_streams else None
            return mr._release_buffer(self, None if asked is None or asked._closed else asked, raising)  # type: ignore[no-any-return]
        return self._release_in_context(raising, _host_free_status)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCUDAHost, 0)``."""
        return (_dlpack.KDL_CUDA_HOST, 0)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export the bytes as a DLPack tensor (1-D ``uint8`` on ``kDLCUDAHost``).

        Same capsules and lifetime rules as :meth:`Buffer.__dlpack__`; the
        consumer's ``stream`` is not waited on (host memory: order copies
        into it yourself). Copies and other devices than ``kDLCUDAHost`` or
        ``kDLCPU`` are refused with ``BufferError``; a closed buffer raises
        ``ResourceClosedError``.
        """
        address = self.address
        if copy:
            raise BufferError("cuguard buffers export without copying only")
        if dl_device is not None and tuple(dl_device) not in ((_dlpack.KDL_CUDA_HOST, 0), (_dlpack.KDL_CPU, 0)):
            raise BufferError(f"cannot export to device {dl_device}; pinned memory is on {(_dlpack.KDL_CUDA_HOST, 0)}")
        versioned = max_version is not None and next(iter(max_version)) >= 1
        capsule = _dlpack.export(self, address, self._size, _dlpack.KDL_CUDA_HOST, 0, versioned=versioned)
        if _racing:
            _race.host_view(self, "PinnedBuffer.__dlpack__")  # a host access, made now (B7)
        return capsule
