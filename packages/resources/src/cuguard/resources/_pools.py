"""Memory pools: :class:`DeviceMemoryResource` (device memory) and :class:`PinnedMemoryResource` (host memory).

Both allocate stream-ordered (``cuMemAllocFromPoolAsync``) from a CUDA memory
pool: the device's current pool (by default, not owned) or one they create
(``cuMemPoolCreate``) and destroy on :meth:`close` or collection. Creating a
pool is all or nothing: when setting an option fails, the new pool is
destroyed again before the error propagates (G1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cuguard.context import Context, call_in
from cuguard.errors import CUDAError, add_failure_note, driver, format_handle, raise_status, report
from cuguard.errors.lowlevel import INT_LIMIT, SIZE_LIMIT, int_argument, is_integer, wrong_kind
from cuguard.resources._base import Resource, _unprohibited, driver_types
from cuguard.resources._ipc import IPCAllocationHandle, SharedImport
from cuguard.resources._memory import Buffer, PinnedBuffer, _sync_then_free
from cuguard.resources._memres import MemoryResource, stream_argument
from cuguard.resources._relaxed import on_own_behalf
from cuguard.resources._stream import Stream, refuse_capturing_allocation

__all__ = [
    "DeviceMemoryResource",
    "DeviceMemoryResourceOptions",
    "MemoryPoolAttributes",
    "PinnedMemoryResource",
    "PinnedMemoryResourceOptions",
]


@dataclass(frozen=True)
class DeviceMemoryResourceOptions:
    """Options of a new device memory pool (:class:`DeviceMemoryResource`).

    ``max_size``: the most bytes the pool may hold (0: no limit but the
    device's memory); the driver may round it up (an H200 let a pool of
    4 MiB hold more than 4 MiB, and kept a pool of 32 MiB to 32 MiB).
    ``ipc_enabled``: the pool can be shared with other
    processes through a POSIX file descriptor
    (:meth:`DeviceMemoryResource.get_allocation_handle`). ``release_threshold``:
    bytes of freed memory the pool keeps reserved instead of giving them back
    to the device at synchronization points (``None``: the driver's default,
    0). The three ``reuse_*`` policies say when freed memory may be handed out
    again to another stream (``None``: the driver's default, enabled).
    """

    max_size: int = 0
    ipc_enabled: bool = False
    release_threshold: int | None = None
    reuse_follow_event_dependencies: bool | None = None
    reuse_allow_opportunistic: bool | None = None
    reuse_allow_internal_dependencies: bool | None = None


@dataclass(frozen=True)
class PinnedMemoryResourceOptions:
    """Options of a new pinned host memory pool (:class:`PinnedMemoryResource`); see
    :class:`DeviceMemoryResourceOptions` for their meaning (``ipc_enabled`` is not offered for host pools)."""

    max_size: int = 0
    release_threshold: int | None = None
    reuse_follow_event_dependencies: bool | None = None
    reuse_allow_opportunistic: bool | None = None
    reuse_allow_internal_dependencies: bool | None = None
    numa_id: int = 0  # the host NUMA node the memory lives on


def _attr(name: str) -> Any:
    return getattr(driver_types().CUmemPool_attribute, "CU_MEMPOOL_ATTR_" + name)


def _get_attribute(pool: Any, name: str) -> int:
    err, value = driver.cuMemPoolGetAttribute(pool, _attr(name))
    if err:
        raise_status(err, "cuMemPoolGetAttribute")
    return int(value)


def _set_attribute(pool: Any, name: str, value: int) -> None:
    types = driver_types()
    wide = name in ("RELEASE_THRESHOLD", "RESERVED_MEM_HIGH", "USED_MEM_HIGH")
    (err,) = driver.cuMemPoolSetAttribute(pool, _attr(name), types.cuuint64_t(value) if wide else int(value))
    if err:
        raise_status(err, "cuMemPoolSetAttribute")


def _flag(value: object, param: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise wrong_kind(param, "a bool or None", value)
    return value


_SETTINGS = (
    ("reuse_follow_event_dependencies", "REUSE_FOLLOW_EVENT_DEPENDENCIES"),
    ("reuse_allow_opportunistic", "REUSE_ALLOW_OPPORTUNISTIC"),
    ("reuse_allow_internal_dependencies", "REUSE_ALLOW_INTERNAL_DEPENDENCIES"),
)


class MemoryPoolAttributes:
    """The live attributes of a memory pool (``mr.attributes``): each read asks the driver.

    ``release_threshold`` and the three ``reuse_*`` policies can be set; the
    ``*_mem_current``/``*_mem_high`` counters (bytes reserved from the device,
    bytes handed out) are read-only, and :meth:`reset_high_watermarks` resets
    the two high-water marks to the current values. A refused read or write
    raises :class:`~cuguard.errors.CUDAError` and changes nothing;
    ``ResourceClosedError`` once the pool was closed.
    """

    __slots__ = ("_mr",)

    def __init__(self, mr: _PoolResource) -> None:
        self._mr = mr

    def _get(self, name: str) -> int:
        return _get_attribute(self._mr.handle, name)

    def _set(self, name: str, value: int) -> None:
        _set_attribute(self._mr.handle, name, value)

    @property
    def release_threshold(self) -> int:
        """Bytes of freed memory the pool keeps instead of giving them back at synchronization points."""
        return self._get("RELEASE_THRESHOLD")

    @release_threshold.setter
    def release_threshold(self, value: int) -> None:
        self._set("RELEASE_THRESHOLD", int_argument("release_threshold", value))

    @property
    def reuse_follow_event_dependencies(self) -> bool:
        """Whether memory freed on one stream is reused on another once an event orders them."""
        return bool(self._get("REUSE_FOLLOW_EVENT_DEPENDENCIES"))

    @reuse_follow_event_dependencies.setter
    def reuse_follow_event_dependencies(self, value: bool) -> None:
        self._set("REUSE_FOLLOW_EVENT_DEPENDENCIES", int(bool(_flag(value, "reuse_follow_event_dependencies"))))

    @property
    def reuse_allow_opportunistic(self) -> bool:
        """Whether memory whose free has completed on the GPU is reused on any stream."""
        return bool(self._get("REUSE_ALLOW_OPPORTUNISTIC"))

    @reuse_allow_opportunistic.setter
    def reuse_allow_opportunistic(self, value: bool) -> None:
        self._set("REUSE_ALLOW_OPPORTUNISTIC", int(bool(_flag(value, "reuse_allow_opportunistic"))))

    @property
    def reuse_allow_internal_dependencies(self) -> bool:
        """Whether the driver may insert dependencies between streams to reuse memory."""
        return bool(self._get("REUSE_ALLOW_INTERNAL_DEPENDENCIES"))

    @reuse_allow_internal_dependencies.setter
    def reuse_allow_internal_dependencies(self, value: bool) -> None:
        self._set("REUSE_ALLOW_INTERNAL_DEPENDENCIES", int(bool(_flag(value, "reuse_allow_internal_dependencies"))))

    @property
    def reserved_mem_current(self) -> int:
        """Bytes the pool has reserved from the device (or host) now."""
        return self._get("RESERVED_MEM_CURRENT")

    @property
    def reserved_mem_high(self) -> int:
        """The most bytes the pool had reserved since creation or the last reset."""
        return self._get("RESERVED_MEM_HIGH")

    @property
    def used_mem_current(self) -> int:
        """Bytes of the pool handed out and not freed now."""
        return self._get("USED_MEM_CURRENT")

    @property
    def used_mem_high(self) -> int:
        """The most bytes handed out at once since creation or the last reset."""
        return self._get("USED_MEM_HIGH")

    def reset_high_watermarks(self) -> None:
        """Reset ``reserved_mem_high`` and ``used_mem_high`` to the current values."""
        self._set("RESERVED_MEM_HIGH", 0)
        self._set("USED_MEM_HIGH", 0)

    def __repr__(self) -> str:
        return f"<MemoryPoolAttributes of {self._mr!r}>"


def _pool_destroy(pool: Any) -> None:
    (err,) = driver.cuMemPoolDestroy(pool)
    if err:
        raise_status(err, "cuMemPoolDestroy")


def _destroy_status(pool: Any) -> tuple[Any, str]:
    (err,) = driver.cuMemPoolDestroy(pool)
    return err, "cuMemPoolDestroy"


def _grant_access(pool: Any, devices: Sequence[int]) -> None:
    """Read-write access to ``pool`` for each of ``devices``, in one ``cuMemPoolSetAccess``."""
    types = driver_types()
    descs = []
    for device in devices:
        desc = types.CUmemAccessDesc()
        desc.location.type = types.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = device
        desc.flags = types.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        descs.append(desc)
    (err,) = driver.cuMemPoolSetAccess(pool, descs, len(descs))
    if err:
        raise_status(err, "cuMemPoolSetAccess")


def _create_pool(props: Any, settings: list[tuple[str, int]], access: Sequence[int] = ()) -> Any:
    """``cuMemPoolCreate``, each attribute, then ``access`` for those devices; a failed step destroys the pool (G1)."""
    err, pool = driver.cuMemPoolCreate(props)
    if err:
        raise_status(err, "cuMemPoolCreate")
    try:
        for name, value in settings:
            _set_attribute(pool, name, value)
        if access:
            _grant_access(pool, access)
    except CUDAError as exc:
        try:
            _pool_destroy(pool)
        except CUDAError as undo:
            add_failure_note(exc, undo, handle=pool)
        raise
    return pool


def _settings(options: Any) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    if options.release_threshold is not None:
        out.append(("RELEASE_THRESHOLD", int_argument("release_threshold", options.release_threshold)))
    for field_name, attr in _SETTINGS:
        value = _flag(getattr(options, field_name), field_name)
        if value is not None:
            out.append((attr, int(value)))
    return out


def _device_of(device: Any) -> Any:
    from cuguard.resources._device import Device

    if isinstance(device, Device):
        return device
    if not is_integer(device):
        raise wrong_kind("device", "a Device or a device ordinal", device)
    return Device(int_argument("device", device, 0, INT_LIMIT))


def _alloc_from_pool(size: int, pool: Any, stream: Any) -> Any:
    err, ptr = driver.cuMemAllocFromPoolAsync(size, pool, stream)
    if err:
        raise_status(err, "cuMemAllocFromPoolAsync")
    return ptr


def _alloc_sync(size: int, pool: Any, leaks: list[int]) -> Any:
    """Allocate on the legacy default stream and wait for it: usable from every stream at once.

    A failed wait frees the allocation again; when that free is refused too, ``size`` is added
    to ``leaks`` (the pool then holds memory no buffer owns).
    """
    null = driver_types().CUstream(0)
    ptr = _alloc_from_pool(size, pool, null)
    (err,) = driver.cuStreamSynchronize(null)
    if err:
        (undo,) = driver.cuMemFree(ptr)
        exc = CUDAError(err, "cuStreamSynchronize")
        if undo:
            leaks.append(size)
            add_failure_note(exc, CUDAError(undo, "cuMemFree", "the new allocation was leaked"), handle=ptr)
        raise exc
    return ptr


def _free_undo(ptr: Any) -> None:
    (err,) = driver.cuMemFree(ptr)
    if err:
        raise_status(err, "cuMemFree")


class _PoolResource(MemoryResource[Any], Resource):
    """What device and pinned memory pools share: the pool handle, its ownership, allocation and free."""

    __slots__ = ()
    _what = "memory pool"
    _factory = "DeviceMemoryResource(device, options) or PinnedMemoryResource(device, options)"
    _device_ordinal: int
    _ipc: bool
    _imported: bool
    _exported: bool  # get_allocation_handle has succeeded: its buffers can be exported

    def _check_usable(self) -> None:
        if self._closed or self._context._closed:
            self._check_open()

    def _setup(
        self,
        handle: Any,
        context: Context,
        device: int,
        *,
        owned: bool,
        ipc: bool,
        imported: bool,
        shared: SharedImport | None = None,
    ) -> None:
        MemoryResource.__init__(self)
        self._init(handle, context, owned)
        self._device_ordinal = device
        self._ipc = ipc
        self._imported = imported
        self._exported = False
        self._destroy_pending = False  # closed while buffers were allocated: destroyed after the last
        self._shared = shared  # an imported pool: the holders of that import in this process (O1)

    def _destroy_pool(self, raising: bool) -> tuple[Any, str]:
        """Destroy the pool (``cuMemPoolDestroy``): ``(status, call)``.

        An imported pool is destroyed only by the last resource of this
        process that holds it (:class:`~cuguard.resources._ipc.SharedImport`);
        the others only let go (O1, S2). A collection's destroy (not
        ``raising``) is cuguard's own release and runs in relaxed capture
        mode (G6).
        """
        shared = self._shared
        if shared is not None and not shared.let_go():
            return 0, ""
        if raising:
            return _destroy_status(self._handle)
        return _unprohibited(_destroy_status, self._handle)

    @property
    def attributes(self) -> MemoryPoolAttributes:
        """The pool's live attributes (release threshold, reuse policies, reserved and used memory)."""
        return MemoryPoolAttributes(self)

    @property
    def owned(self) -> bool:
        """Whether this resource created the pool (and destroys it on :meth:`close`)."""
        return self._owned

    @property
    def is_ipc_enabled(self) -> bool:
        """Whether the pool can be shared with other processes."""
        return self._ipc

    @property
    def is_imported(self) -> bool:
        """Whether the pool was imported from another process (it then only maps that process's buffers)."""
        return self._imported

    def trim(self, keep: int = 0) -> None:
        """Give memory the pool holds but does not use back to the device, keeping at least ``keep`` bytes.

        A bad ``keep`` raises ``TypeError``/``ValueError``; a refusal
        :class:`~cuguard.errors.CUDAError` (nothing was trimmed then).
        """
        keep = int_argument("keep", keep)
        (err,) = driver.cuMemPoolTrimTo(self.handle, keep)
        if err:
            raise_status(err, "cuMemPoolTrimTo")

    def _check_allocate(self, size: int, stream: Any) -> tuple[int, Stream | None]:
        if type(size) is not int or not 0 <= size < SIZE_LIMIT:
            size = int_argument("size", size)  # a 64-bit byte count (E3)
        stream = stream_argument(stream)
        if self._imported:
            raise ValueError(
                f"{self!r} was imported from another process: it maps that process's buffers "
                "(Buffer.from_ipc_descriptor) and allocates none of its own"
            )
        handle = self.handle  # ResourceClosedError once closed
        del handle
        if stream is not None:
            stream._check_open()
            refuse_capturing_allocation(stream)
        return size, stream

    def _allocate_ptr(self, size: int, stream: Stream | None) -> Any:
        if stream is not None:
            return _alloc_from_pool(size, self._handle, stream._handle)
        # Bytes that may stay allocated if this call raises: a refused free of a failed wait,
        # or the new memory until a failed restore of the caller's context has freed it.
        leaks: list[int] = []

        def alloc(n: int, pool: Any) -> Any:
            ptr = _alloc_sync(n, pool, leaks)
            leaks.append(n)
            return ptr

        def undo(ptr: Any) -> None:
            _free_undo(ptr)  # a refusal raises: the memory stays counted
            leaks.remove(size)

        try:
            return call_in(self._context, alloc, undo, size, self._handle)
        except BaseException:
            # Memory no buffer owns is the pool's: counted as leaked, so that the pool is
            # leaked with it, never destroyed under it (W5).
            self._leaked += sum(leaks)
            raise

    def _free_syncs_context(self, buffer: Any) -> bool:
        stream = buffer._stream if isinstance(buffer, Buffer) else buffer._mr_data
        return stream is None or bool(stream._closed)

    def _free_stream(self, buffer: Any) -> Stream | None:
        return buffer._stream if isinstance(buffer, Buffer) else buffer._mr_data

    def _free(self, buffer: Any, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        if stream is None:
            stream = self._free_stream(buffer)
        if stream is not None and not stream._closed:
            (err,) = driver.cuMemFreeAsync(buffer._handle, stream._handle)
            return err, "cuMemFreeAsync"
        # No stream (or it was closed): wait for the context's work, then free synchronously.
        return buffer._release_in_context(raising, _sync_then_free)  # type: ignore[no-any-return]

    def _release(self, raising: bool) -> tuple[Any, str]:
        if self.leaked:
            # A buffer whose free was refused may still hold memory of the pool: the pool is
            # leaked with it (W5), never destroyed under it.
            return 0, ""
        if self._outstanding:
            # Never ask the driver to destroy a pool with allocations outstanding: the pool is
            # destroyed right after its last buffer is freed (_release_buffer), in the order a
            # program that frees first and destroys last uses.
            self._destroy_pending = True
            return 0, ""
        return self._destroy_pool(raising)

    def _release_buffer(self, buffer: Any, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        status, call = super()._release_buffer(buffer, stream, raising)
        if status or not self._destroy_pending or self._outstanding or self.leaked:
            return status, call  # after a refused free the pool is leaked with that buffer (W5)
        self._destroy_pending = False
        err, _ = self._destroy_pool(raising)
        if err:
            if raising:
                raise CUDAError(
                    err,
                    "cuMemPoolDestroy",
                    f"the buffer was freed; memory pool {format_handle(self._handle)} was leaked",
                )
            report(err, "cuMemPoolDestroy", self._handle, "the memory pool was leaked", context=self._context)
        return status, call

    def __repr__(self) -> str:
        where = "host" if self.device_id is None else f"device {self._device_ordinal}"
        kind = " imported" if self._imported else "" if self._owned else " current"
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__}{kind} {format_handle(self._handle)} {where}{state}>"

    def close(self) -> None:
        """Destroy the pool if this resource created (or imported) it; idempotent.

        Buffers allocated from it stay valid until they are freed: closing
        the resource does not free them, and while any is allocated the pool
        is only closed for use (no driver call); it is destroyed right after
        the last of them is freed, by that buffer's release (a refused
        destroy then raises :class:`~cuguard.errors.CUDAError` from that
        buffer's ``close()`` saying the pool was leaked, or warns when the
        buffer was collected; a buffer whose free was refused keeps the pool,
        leaked with it). A pool one of whose buffers was leaked (its free
        was refused) is never destroyed: it is leaked with that buffer's
        memory (W5). A pool this resource does not own (a device's
        current pool) is left alone. An imported pool that another resource
        of this process imported too is only let go: the last of them
        destroys it. A refused destroy raises
        :class:`~cuguard.errors.CUDAError`; the pool is then leaked, never
        destroyed twice.
        """
        super().close()


class DeviceMemoryResource(_PoolResource):
    """Stream-ordered device memory from a CUDA memory pool (``cuda.core``'s ``DeviceMemoryResource``).

    ``DeviceMemoryResource(device)`` uses the device's current memory pool
    (the default pool unless someone set another), which it does not own;
    ``DeviceMemoryResource(device, DeviceMemoryResourceOptions(...))`` creates
    a pool with those options, owned: :meth:`close` (or collection, which
    reports failures as ``CUDAWarning``) destroys it. An IPC-enabled pool is
    shared with other processes by :meth:`get_allocation_handle`; the other
    process imports it with :meth:`from_allocation_handle`, and buffers move
    by :meth:`Buffer.get_ipc_descriptor` and :meth:`Buffer.from_ipc_descriptor`.

    Creating a pool (its options included) is cuguard's own set-up: it runs
    with the thread in relaxed capture mode, so a stream capture in progress
    in any thread neither refuses it nor is invalidated by it (G6).
    Raises :class:`~cuguard.errors.CUDAError` if the driver refuses (no pool
    exists then: a pool created before a failing option is destroyed again),
    ``TypeError``/``ValueError`` for bad arguments before any driver call.
    """

    __slots__ = ()
    _factory = "DeviceMemoryResource(device, options)"

    def __init__(self, device: Any, options: DeviceMemoryResourceOptions | None = None) -> None:
        dev = _device_of(device)
        if options is not None and not isinstance(options, DeviceMemoryResourceOptions):
            raise wrong_kind("options", "a DeviceMemoryResourceOptions or None", options)
        context = dev.context
        if options is None:
            err, pool = driver.cuDeviceGetMemPool(dev.ordinal)
            if err:
                raise_status(err, "cuDeviceGetMemPool")
            self._setup(pool, context, dev.ordinal, owned=False, ipc=False, imported=False)
            return
        max_size = int_argument("max_size", options.max_size)
        if not isinstance(options.ipc_enabled, bool):
            raise wrong_kind("ipc_enabled", "a bool", options.ipc_enabled)
        settings = _settings(options)
        types = driver_types()
        props = types.CUmemPoolProps()
        props.allocType = types.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = types.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = dev.ordinal
        props.handleTypes = (
            types.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            if options.ipc_enabled
            else types.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        )
        props.maxSize = max_size
        pool = on_own_behalf(_create_pool, _pool_destroy, props, settings)  # set-up never meets a capture (G6)
        self._setup(pool, context, dev.ordinal, owned=True, ipc=options.ipc_enabled, imported=False)

    @classmethod
    def _imported_pool(
        cls, handle: Any, context: Context, device: int, shared: SharedImport | None
    ) -> DeviceMemoryResource:
        self = cls.__new__(cls)
        self._setup(handle, context, device, owned=True, ipc=True, imported=True, shared=shared)
        return self

    @classmethod
    def from_allocation_handle(cls, device: Any, alloc_handle: IPCAllocationHandle | int) -> DeviceMemoryResource:
        """Import the pool another process shared (:meth:`get_allocation_handle`) on ``device``.

        ``alloc_handle`` is an :class:`IPCAllocationHandle` (received through
        ``multiprocessing``) or a POSIX file descriptor (an int); the
        descriptor stays the caller's (close it when done). The imported
        resource owns the import (closing it releases the import) and only
        maps buffers the exporter describes (:meth:`Buffer.from_ipc_descriptor`).
        Importing a pool this process holds already (the driver then gives
        the same pool again) makes another resource sharing that import: the
        pool is destroyed by the last of them to let go, never under another.
        The import runs with the thread in relaxed capture mode, so a capture
        in progress anywhere neither refuses it nor is invalidated by it (G6).
        Raises :class:`~cuguard.errors.CUDAError` if the driver refuses
        (nothing was imported then).
        """
        from cuguard.resources._ipc import import_pool

        result: DeviceMemoryResource = import_pool(cls, _device_of(device), alloc_handle)
        return result

    def get_allocation_handle(self) -> IPCAllocationHandle:
        """A new :class:`IPCAllocationHandle` (a POSIX file descriptor) that shares this pool with other processes.

        The handle owns the descriptor: close it (or let it be collected)
        once sent. The pool's buffers can be shared
        (:meth:`Buffer.get_ipc_descriptor`) once this has succeeded.
        ``ValueError`` when the pool is not IPC-enabled or is itself
        imported; :class:`~cuguard.errors.CUDAError` if the driver refuses.
        """
        from cuguard.resources._ipc import export_pool

        return export_pool(self)

    @property
    def device_id(self) -> int:
        """The ordinal of the pool's device."""
        return self._device_ordinal

    @property
    def is_device_accessible(self) -> bool:
        """True: device memory."""
        return True

    @property
    def is_host_accessible(self) -> bool:
        """False: the host cannot read device memory directly."""
        return False

    def allocate(self, size: int, stream: Stream | None = None) -> Buffer:
        """Allocate ``size`` bytes from the pool.

        With ``stream`` (a :class:`Stream` or ``__cuda_stream__`` object) the
        allocation is ordered on it and the buffer is freed on it (after the
        work queued there, W5) unless ``close(stream)`` names another. Without,
        it is allocated on the legacy default stream and waited for, so any
        stream may use it at once; it is freed synchronously. ``size`` 0 on a
        stream gives a buffer at address 0 (the driver allocates nothing).
        Raises :class:`~cuguard.errors.CUDAError` if the driver refuses
        (``CUDA_ERROR_OUT_OF_MEMORY`` past ``max_size``...): nothing is allocated
        then, except when the wait of an allocation without ``stream`` fails and
        freeing it again is refused too: a note says so, its bytes count in
        :attr:`leaked` and the pool is leaked with them. ``ValueError`` for an
        imported pool, ``ResourceClosedError`` once closed, ``RuntimeError``
        for a ``stream`` being captured into a graph (an allocation there would
        be graph memory; checked with ``cuStreamIsCapturing``).
        """
        size, stream = self._check_allocate(size, stream)
        ptr = self._allocate_ptr(size, stream)
        buf = Buffer._made(ptr, self._context, self._device_ordinal, size)
        buf._stream = stream
        result: Buffer = self._adopt(buf)
        return result


class PinnedMemoryResource(_PoolResource):
    """Stream-ordered page-locked host memory from a host memory pool (``cuda.core``'s ``PinnedMemoryResource``).

    The pool lives on host NUMA node ``options.numa_id`` (0 by default), and
    every device of the process is given read-write access to it, so its
    memory works in copies and kernels of any device (a pool that only one
    device may use faults or blocks when another device touches it).
    ``device`` (a :class:`Device` or ordinal) is the device whose primary
    context the resource belongs to. Creation is ``cuDeviceGetCount``,
    ``cuMemPoolCreate``, the options, then one ``cuMemPoolSetAccess`` for
    every device, all or nothing (a failed step destroys the new pool before
    the error propagates, G1), with the thread in relaxed capture mode (a
    capture in progress in any thread neither refuses nor is invalidated by
    it, G6). A driver whose memory pools cannot live on the host, or a
    device that may not use them, refuses with
    :class:`~cuguard.errors.CUDAError` (``CUDA_ERROR_NOT_SUPPORTED`` or
    ``CUDA_ERROR_INVALID_VALUE``), nothing created. Buffers are
    :class:`PinnedBuffer` objects, readable by the host (``buf.numpy()``) and
    usable in copies (:meth:`PinnedBuffer.copy_to`) of every device.
    ``close()`` destroys the pool; its buffers stay valid until freed.
    """

    __slots__ = ()
    _factory = "PinnedMemoryResource(device, options)"

    def __init__(self, device: Any = 0, options: PinnedMemoryResourceOptions | None = None) -> None:
        dev = _device_of(device)
        if options is None:
            options = PinnedMemoryResourceOptions()
        elif not isinstance(options, PinnedMemoryResourceOptions):
            raise wrong_kind("options", "a PinnedMemoryResourceOptions or None", options)
        max_size = int_argument("max_size", options.max_size)
        settings = _settings(options)
        numa_id = int_argument("numa_id", options.numa_id, 0, INT_LIMIT)
        context = dev.context
        devices = range(dev.count())  # every device of the process may use pinned memory
        types = driver_types()
        props = types.CUmemPoolProps()
        props.allocType = types.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = types.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST_NUMA
        props.location.id = numa_id
        props.handleTypes = types.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.maxSize = max_size
        pool = on_own_behalf(_create_pool, _pool_destroy, props, settings, devices)  # never meets a capture (G6)
        self._setup(pool, context, dev.ordinal, owned=True, ipc=False, imported=False)

    @property
    def device_id(self) -> None:
        """None: host memory."""
        return None

    @property
    def is_device_accessible(self) -> bool:
        """True: devices copy to and from it directly."""
        return True

    @property
    def is_host_accessible(self) -> bool:
        """True: the host reads and writes it (``PinnedBuffer.numpy()``)."""
        return True

    def allocate(self, size: int, stream: Stream | None = None) -> PinnedBuffer:
        """Allocate ``size`` bytes of pinned host memory from the pool.

        Same rules as :meth:`DeviceMemoryResource.allocate`: ordered on
        ``stream`` and freed on it, or allocated and freed synchronously
        without. Write to it from the host only once the stream reached the
        allocation (synchronize it). Raises :class:`~cuguard.errors.CUDAError`
        if the driver refuses: nothing is allocated then.
        """
        size, stream = self._check_allocate(size, stream)
        ptr = self._allocate_ptr(size, stream)
        buf = PinnedBuffer._made(int(ptr), self._context, size)
        result: PinnedBuffer = self._adopt(buf, stream)
        return result
