"""Sharing memory pools, buffers and events with other processes (CUDA IPC).

Ownership rules:

- The exporting process owns its pool and its buffers. It shares the pool
  once (:meth:`DeviceMemoryResource.get_allocation_handle`, a POSIX file
  descriptor held by an :class:`IPCAllocationHandle`) and each buffer by a
  descriptor (:meth:`Buffer.get_ipc_descriptor`, an
  :class:`IPCBufferDescriptor`: 64 bytes of plain data). The pool is shared
  first: the driver exports buffers of a shared pool only, so a buffer of a
  pool never shared is refused with ``ValueError``.
- The importing process owns what it imported: the imported pool
  (:meth:`DeviceMemoryResource.from_allocation_handle`) and each imported
  buffer (:meth:`Buffer.from_ipc_descriptor`); it frees them itself
  (``close()`` or collection). Importing the same pool again in the same
  process gives the same driver pool (the driver returns the same handle,
  and one ``cuMemPoolDestroy`` ends it for every import): the resources made
  by the imports share it (:class:`SharedImport`), and the pool is destroyed
  with the last of them, once each has let go (closed or collected, its
  buffers freed); never under a resource still holding it, never twice.
  An imported buffer must be freed before the exporter frees its own buffer
  (order it, e.g., with an IPC event or a message): the driver leaves
  freeing it afterwards undefined. A release the
  driver refuses (an exporter that went away first...) leaks the imported
  buffer and reports it, as every release does; nothing is freed twice.
- IPC events (``Device.create_event(ipc_enabled=True)``) are shared by an
  :class:`IPCEventDescriptor` and opened in the other process with
  :meth:`Event.from_ipc_descriptor`; each process destroys its own event.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import weakref
from dataclasses import dataclass
from typing import Any

from cuguard.context import call_in
from cuguard.errors import driver, raise_status, report
from cuguard.errors.lowlevel import INT_LIMIT, deferring_lock, driver_state, int_argument, is_integer, wrong_kind
from cuguard.resources._base import driver_types
from cuguard.resources._memory import Buffer
from cuguard.resources._relaxed import on_own_behalf
from cuguard.resources._stream import Event, Stream, _event_destroy, as_stream, new_event

__all__ = ["IPCAllocationHandle", "IPCBufferDescriptor", "IPCEventDescriptor"]

_EXPORT_BYTES = 64  # CUmemPoolPtrExportData and CUipcEventHandle are 64 opaque bytes each


def _struct_bytes(obj: Any) -> bytes:
    return ctypes.string_at(int(obj.getPtr()), _EXPORT_BYTES)


def _struct_from(cls: Any, payload: bytes) -> Any:
    obj = cls()
    ctypes.memmove(int(obj.getPtr()), payload, _EXPORT_BYTES)
    return obj


def _fd_handle_type() -> Any:
    return driver_types().CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


class IPCAllocationHandle:
    """A POSIX file descriptor that shares a memory pool with other processes; it owns the descriptor.

    Send it to another process with ``multiprocessing`` (as an argument of a
    spawned ``Process``, or through a ``Queue``/``Pipe``: the descriptor is
    duplicated into the receiver, which gets its own handle), or send
    :attr:`fd` yourself over a Unix socket (``socket.send_fds``). Plain
    ``pickle`` refuses (a descriptor number means nothing in another
    process). :meth:`close` (or collection) closes the descriptor; the pool
    itself is unaffected.
    """

    __slots__ = ("__weakref__", "_fd")
    _fd: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "IPCAllocationHandle objects come from DeviceMemoryResource.get_allocation_handle() "
            "or IPCAllocationHandle.from_fd()"
        )

    @classmethod
    def from_fd(cls, fd: int) -> IPCAllocationHandle:
        """Take ownership of ``fd`` (e.g., received with ``socket.recv_fds``): the handle closes it."""
        if not is_integer(fd):
            raise wrong_kind("fd", "an int file descriptor", fd)
        fd = int_argument("fd", fd, 0, INT_LIMIT)
        self = cls.__new__(cls)
        self._fd = fd
        return self

    @property
    def fd(self) -> int:
        """The descriptor; ``ValueError`` once closed."""
        if self._fd < 0:
            raise ValueError(f"{self!r} is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        """Whether the descriptor was closed."""
        return self._fd < 0

    def close(self) -> None:
        """Close the descriptor now; idempotent. An ``OSError`` from the system propagates."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> IPCAllocationHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            fd = self._fd
        except AttributeError:
            return
        if fd >= 0:
            self._fd = -1
            with contextlib.suppress(OSError):  # closed behind our back: nothing left to release
                os.close(fd)

    def __reduce__(self) -> Any:
        raise TypeError(
            "an IPCAllocationHandle is sent with multiprocessing (Process arguments, Queue, Pipe) "
            "or by its fd over a Unix socket (socket.send_fds), not with plain pickle"
        )

    def __repr__(self) -> str:
        return f"<IPCAllocationHandle fd={self._fd}>" if self._fd >= 0 else "<IPCAllocationHandle closed>"


def _rebuild_handle(dup: Any) -> IPCAllocationHandle:
    return IPCAllocationHandle.from_fd(dup.detach())


def _reduce_handle(handle: IPCAllocationHandle) -> Any:
    from multiprocessing import reduction

    return _rebuild_handle, (reduction.DupFd(handle.fd),)


def _register_reduction() -> None:
    from multiprocessing import reduction

    reduction.register(IPCAllocationHandle, _reduce_handle)


_register_reduction()


@dataclass(frozen=True)
class IPCBufferDescriptor:
    """What another process needs to map one buffer of a shared pool: plain bytes, picklable.

    ``data`` is the driver's 64-byte export data, ``size`` the buffer's size
    in bytes. Made by :meth:`Buffer.get_ipc_descriptor`, used by
    :meth:`Buffer.from_ipc_descriptor`.
    """

    data: bytes
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes) or len(self.data) != _EXPORT_BYTES:
            raise ValueError(f"data must be {_EXPORT_BYTES} bytes")
        object.__setattr__(self, "size", int_argument("size", self.size))


@dataclass(frozen=True)
class IPCEventDescriptor:
    """What another process needs to open an IPC event: the driver's 64-byte handle, picklable.

    Made by :meth:`Event.get_ipc_descriptor`, used by :meth:`Event.from_ipc_descriptor`.
    """

    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes) or len(self.data) != _EXPORT_BYTES:
            raise ValueError(f"data must be {_EXPORT_BYTES} bytes")


# --- pools ---------------------------------------------------------------------------------


def export_pool(mr: Any) -> IPCAllocationHandle:
    """``DeviceMemoryResource.get_allocation_handle``."""
    if not mr._ipc or mr._imported:
        what = "imported" if mr._imported else "not IPC-enabled (DeviceMemoryResourceOptions(ipc_enabled=True))"
        raise ValueError(f"{mr!r} cannot be shared: it is {what}")
    err, fd = driver.cuMemPoolExportToShareableHandle(mr.handle, _fd_handle_type(), 0)
    if err:
        raise_status(err, "cuMemPoolExportToShareableHandle")
    handle = IPCAllocationHandle.from_fd(int(fd))
    mr._exported = True  # the driver exports the pool's pointers from now on
    return handle


def _pool_destroy(pool: Any) -> None:
    (err,) = driver.cuMemPoolDestroy(pool)
    if err:
        raise_status(err, "cuMemPoolDestroy")


def _import_pool(fd: int) -> Any:
    err, pool = driver.cuMemPoolImportFromShareableHandle(fd, _fd_handle_type(), 0)
    if err:
        raise_status(err, "cuMemPoolImportFromShareableHandle")
    return pool


class _Imports:
    """The pools this process imported under one driver, and how many imports are in progress."""

    __slots__ = ("importing", "orphaned", "pools")

    def __init__(self) -> None:
        self.pools: dict[int, SharedImport] = {}
        self.importing = 0
        self.orphaned: list[SharedImport] = []  # let go of by every holder while an import was in progress


class SharedImport:
    """One imported driver pool and the number of :class:`DeviceMemoryResource` objects holding it (O1, S2).

    The driver answers a second import of the same pool in a process with
    the same handle, and a single ``cuMemPoolDestroy`` ends the pool for
    every import. So the resources made by such imports hold one
    ``SharedImport`` between them; each lets go once (:meth:`let_go`, when
    it would have destroyed the pool), and only the last destroys it.
    """

    __slots__ = ("handle", "holders", "imports")

    def __init__(self, handle: int, imports: _Imports) -> None:
        self.handle = handle
        self.holders = 1
        self.imports = imports

    def let_go(self) -> bool:
        """One holder lets go: whether it was the last and must destroy the pool now.

        While another import is in progress (which may be getting this very
        handle from the driver) the pool is kept; that import either holds
        it or destroys it when it ends.
        """
        with _imports_lock:
            self.holders -= 1
            if self.holders > 0:
                return False
            if self.imports.importing:
                self.imports.orphaned.append(self)
                return False
            if self.imports.pools.get(self.handle) is self:
                del self.imports.pools[self.handle]
            return True


# Re-entrant: a garbage collection inside a locked section may let go of an imported pool.
_imports_lock = deferring_lock(reentrant=True)
_IMPORTS = "imported memory pools"


def _imports() -> _Imports:
    state = driver_state()
    imports: _Imports | None = state.get(_IMPORTS)
    if imports is None:
        imports = state.setdefault(_IMPORTS, _Imports())
    return imports


def _undo_import(imports: _Imports) -> Any:
    """The undo of an import: destroy the pool unless this process holds it already (then nothing was made)."""

    def undo(pool: Any) -> None:
        with _imports_lock:
            held = int(pool) in imports.pools
        if not held:
            _pool_destroy(pool)

    return undo


def _end_import(imports: _Imports, pool: Any | None, candidate: SharedImport) -> SharedImport | None:
    """An import ended (``pool``: what it got, or None when it failed): count its holder; destroy orphans."""
    orphans: list[SharedImport] = []
    entry: SharedImport | None = None
    with _imports_lock:
        imports.importing -= 1
        if pool is not None:
            entry = imports.pools.get(candidate.handle)
            if entry is None:
                entry = imports.pools[candidate.handle] = candidate
            elif entry.holders == 0:
                entry.holders = 1  # let go of meanwhile, kept for this import: held again
            else:
                entry.holders += 1
        if not imports.importing and imports.orphaned:
            orphans, imports.orphaned = imports.orphaned, orphans
            for orphan in orphans:
                if orphan.holders == 0 and imports.pools.get(orphan.handle) is orphan:
                    del imports.pools[orphan.handle]
    for orphan in orphans:
        if orphan.holders == 0:
            (err,) = driver.cuMemPoolDestroy(driver_types().CUmemoryPool(orphan.handle))
            if err:
                report(err, "cuMemPoolDestroy", orphan.handle, "the imported memory pool was leaked")
    return entry


def import_pool(cls: Any, device: Any, alloc_handle: Any) -> Any:
    """``DeviceMemoryResource.from_allocation_handle``.

    The import runs in relaxed capture mode (cuguard's own set-up, G6). A
    pool this process holds already (the driver returns its handle again)
    gives a new resource sharing it (:class:`SharedImport`).
    """
    if isinstance(alloc_handle, IPCAllocationHandle):
        fd = alloc_handle.fd
    elif is_integer(alloc_handle):
        fd = int_argument("alloc_handle", alloc_handle, 0, INT_LIMIT)
    else:
        raise wrong_kind("alloc_handle", "an IPCAllocationHandle or an int file descriptor", alloc_handle)
    context = device.context
    imports = _imports()
    undo = _undo_import(imports)
    with _imports_lock:
        imports.importing += 1
    pool = None
    try:
        pool = call_in(context, on_own_behalf, undo, _import_pool, undo, fd)
    finally:
        candidate = SharedImport(0 if pool is None else int(pool), imports)
        shared = _end_import(imports, pool, candidate)
    return cls._imported_pool(pool, context, device.ordinal, shared)


# --- buffers -------------------------------------------------------------------------------


def _export_pointer(ptr: Any) -> Any:
    err, data = driver.cuMemPoolExportPointer(ptr)
    if err:
        raise_status(err, "cuMemPoolExportPointer")
    return data


def _wait_allocated(handle: Any) -> None:
    (err,) = driver.cuStreamSynchronize(handle)
    if err:
        raise_status(err, "cuStreamSynchronize")


def _context_sync() -> None:
    (err,) = driver.cuCtxSynchronize()
    if err:
        raise_status(err, "cuCtxSynchronize")


def buffer_descriptor(buffer: Buffer) -> IPCBufferDescriptor:
    """``Buffer.get_ipc_descriptor``.

    The driver exports pointers only of a pool that was itself exported
    (it refuses the others with ``CUDA_ERROR_INVALID_VALUE``), so a buffer
    of a pool never exported is refused first with ``ValueError``. The
    stream the buffer was allocated on is waited for (the buffer's context,
    when that stream was closed since); the export runs in the buffer's
    context.
    """
    from cuguard.resources._pools import DeviceMemoryResource

    mr = buffer._mr
    handle = buffer.handle  # ResourceClosedError once closed
    if not isinstance(mr, DeviceMemoryResource) or not mr._ipc or mr._imported:
        raise ValueError(
            f"{buffer!r} cannot be shared: only buffers allocated from an IPC-enabled DeviceMemoryResource "
            "of this process can"
        )
    if not mr._exported:
        raise ValueError(
            f"{buffer!r} cannot be shared yet: its pool was never shared; call "
            "DeviceMemoryResource.get_allocation_handle() first (the driver exports pointers of shared pools only)"
        )
    stream = buffer._stream
    if stream is not None:
        if stream._closed:
            call_in(buffer._context, _context_sync, None)
        else:
            _wait_allocated(stream._handle)
    data = call_in(buffer._context, _export_pointer, None, handle)
    return IPCBufferDescriptor(_struct_bytes(data), buffer._size)


def _free_now(ptr: Any) -> None:
    (err,) = driver.cuMemFree(ptr)
    if err:
        raise_status(err, "cuMemFree")


def _import_pointer(pool: Any, data: Any) -> Any:
    err, ptr = driver.cuMemPoolImportPointer(pool, data)
    if err:
        raise_status(err, "cuMemPoolImportPointer")
    return ptr


def import_buffer(mr: Any, descriptor: Any, stream: Any) -> Buffer:
    """``Buffer.from_ipc_descriptor``."""
    from cuguard.resources._pools import DeviceMemoryResource

    if not isinstance(mr, DeviceMemoryResource):
        raise wrong_kind("mr", "a DeviceMemoryResource", mr)
    if not isinstance(descriptor, IPCBufferDescriptor):
        raise wrong_kind("descriptor", "an IPCBufferDescriptor", descriptor)
    if stream is not None and type(stream) is not Stream:
        stream = as_stream(stream, "stream")
    if not mr._imported:
        raise ValueError(
            f"{mr!r} was not imported: buffers of another process are mapped through the pool imported "
            "with DeviceMemoryResource.from_allocation_handle"
        )
    pool = mr.handle  # ResourceClosedError once closed
    if stream is not None:
        stream._check_open()
    data = _struct_from(driver_types().CUmemPoolPtrExportData, descriptor.data)
    ptr = call_in(mr._context, _import_pointer, _free_now, pool, data)
    buf = Buffer._made(ptr, mr._context, mr._device_ordinal, descriptor.size)
    buf._stream = stream
    result: Buffer = mr._adopt(buf)
    return result


# --- events --------------------------------------------------------------------------------

#: Events created IPC-enabled (weakly held: accounting never keeps an event alive).
_ipc_events: weakref.WeakSet[Event] = weakref.WeakSet()
_IPC_FLAGS = 0x2 | 0x4  # CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS


def _event_create(flags: int) -> Any:
    err, handle = driver.cuEventCreate(flags)
    if err:
        raise_status(err, "cuEventCreate")
    return handle


def _made_event(handle: Any, context: Any, device: int) -> Event:
    event = new_event(handle, context, device, False)  # an IPC event cannot time
    _ipc_events.add(event)
    return event


def create_ipc_event(device: Any) -> Event:
    """``Device.create_event(ipc_enabled=True)``."""
    context = device.context
    handle = call_in(context, _event_create, _event_destroy, _IPC_FLAGS)
    return _made_event(handle, context, device.ordinal)


def is_ipc_event(event: Event) -> bool:
    return event in _ipc_events


def _event_handle(handle: Any) -> Any:
    err, ipc = driver.cuIpcGetEventHandle(handle)
    if err:
        raise_status(err, "cuIpcGetEventHandle")
    return ipc


def event_descriptor(event: Event) -> IPCEventDescriptor:
    """``Event.get_ipc_descriptor``: the driver needs a context current, so it runs in the event's."""
    handle = event.handle  # ResourceClosedError once closed
    if event not in _ipc_events:
        raise ValueError(f"{event!r} cannot be shared: create it with Device.create_event(ipc_enabled=True)")
    ipc = call_in(event._context, _event_handle, None, handle)
    return IPCEventDescriptor(_struct_bytes(ipc))


def _open_event(ipc: Any) -> Any:
    err, handle = driver.cuIpcOpenEventHandle(ipc)
    if err:
        raise_status(err, "cuIpcOpenEventHandle")
    return handle


def open_event(descriptor: Any, device: Any) -> Event:
    """``Event.from_ipc_descriptor``."""
    from cuguard.resources._pools import _device_of

    if not isinstance(descriptor, IPCEventDescriptor):
        raise wrong_kind("descriptor", "an IPCEventDescriptor", descriptor)
    if device is None:
        from cuguard.resources._device import Device

        dev = Device()
    else:
        dev = _device_of(device)
    context = dev.context
    ipc = _struct_from(driver_types().CUipcEventHandle, descriptor.data)
    handle = call_in(context, _open_event, _event_destroy, ipc)
    return _made_event(handle, context, dev.ordinal)
