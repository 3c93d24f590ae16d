"""Memory pools and IPC of the simulated driver (stream-ordered allocation, shareable pools, IPC events).

Model:

- Each device has a default pool (which exists without being created and is
  never destroyed) and a current pool (``cuDeviceSetMemPool``). Pools made by
  ``cuMemPoolCreate`` are live objects (kind ``"memory_pool"``) until
  ``cuMemPoolDestroy``; a pool destroyed with allocations outstanding goes away
  once the last of them is freed, and those allocations stay usable meanwhile
  (as documented).
- A pool's ``maxSize`` is rounded up to a multiple of :data:`POOL_MAX_SIZE_STEP`
  (32 MiB): an H200 let a pool of 4 MiB hold 6 MiB, and refused past 32 MiB
  a pool of 32 MiB (assumed rule; ``pool_max_size_rounding`` in
  ``scripts/differential.py`` probes it). A device ordinal the driver does
  not have is ``CUDA_ERROR_INVALID_VALUE`` (as an H200 answered).
- A pool's reserved memory grows in steps of :data:`POOL_GRANULE` to cover what
  is allocated; memory freed above the release threshold is given back to the
  device at once (the real driver gives it back at the next synchronization);
  ``cuMemPoolTrimTo`` gives back what is not in use down to what it keeps.
- Pools on the host (``CU_MEM_LOCATION_TYPE_HOST``/``HOST_NUMA``) hand out
  page-locked host memory that the host reads directly.
- A pool created with ``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`` keeps its
  bytes in a memory file (``os.memfd_create``) mapped into this process: the
  exported file descriptor can be passed to another process (over a Unix
  socket, or by ``multiprocessing``), whose simulated driver imports the pool
  from it and each exported pointer from its 64 bytes of export data; both
  processes then see the same bytes, exactly as on a GPU. An allocation is
  exported (``cuMemPoolExportPointer``) only from a pool that was itself
  exported first (``cuMemPoolExportToShareableHandle``): an H200 refused
  every pointer of a shareable pool never exported with
  ``CUDA_ERROR_INVALID_VALUE``, however long its stream had been waited for,
  and exported those of an exported pool. An allocation still in flight on
  its stream is refused too (``CUDA_ERROR_INVALID_VALUE``; assumed, probed by
  ``pool_export_pointer_after_pool_export`` in ``scripts/differential.py``).
  ``cuMemPoolImportPointer`` needs no context current (as an H200); the
  mapping then belongs to the pool's device's primary context. Importing a
  pool this process has imported already (and not destroyed) returns the same
  handle and makes no second pool, as an H200 did; one ``cuMemPoolDestroy``
  then ends it for every import (a second is a destroy of a destroyed pool).
- IPC events (``CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING``) export a
  64-byte handle (``cuIpcGetEventHandle`` with no context current killed the
  real process with SIGSEGV on an H200: :class:`SimulatedCrash`); opening
  it in another process gives a local event (work completes at once in the
  simulator, so it is always complete there).
  Opening it in the process that exported it is refused with
  ``CUDA_ERROR_INVALID_CONTEXT`` (assumed, see the differential scenarios).
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import struct
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.base import DEVICE_BASE, OK, SUCCESS, R, Status, api, h
from cuguard.testing._sim.core import SimCore
from cuguard.testing._sim.state import Alloc, Ctx
from cuguard.testing._sim.state import Event as SimEvent

__all__ = ["POOL_GRANULE", "POOL_MAX_SIZE_STEP", "Pool", "SimPools"]

#: The step in which a simulated pool reserves device memory (2 MiB).
POOL_GRANULE = 2 << 20
#: A pool's ``maxSize`` is rounded up to a multiple of this (32 MiB; assumed, see the module's text).
POOL_MAX_SIZE_STEP = 32 << 20
_HEADER = 4096  # the first page of a pool's memory file: magic, pool identity, device
_MAGIC = b"CUGUARD-SIM-POOL"
_PTR_MAGIC = b"cgp1"
_EVENT_MAGIC = b"cge1"
_A = cb.CUmemPool_attribute
_INT_ATTRS = frozenset(
    {
        int(_A.CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES),
        int(_A.CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC),
        int(_A.CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES),
    }
)
_RELEASE_THRESHOLD = int(_A.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
_RESERVED_CURRENT = int(_A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
_RESERVED_HIGH = int(_A.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
_USED_CURRENT = int(_A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
_USED_HIGH = int(_A.CU_MEMPOOL_ATTR_USED_MEM_HIGH)
_LOCATION_DEVICE = int(cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE)
_LOCATION_HOST = int(cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST)
_LOCATION_HOST_NUMA = int(cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST_NUMA)
_HANDLE_NONE = int(cb.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE)
_HANDLE_FD = int(cb.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
_PINNED = int(cb.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED)
_ACCESS_NONE = int(cb.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE)
_ACCESS_RW = int(cb.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
_EVENT_INTERPROCESS = 0x4


@dataclass(eq=False)
class Pool:
    """One memory pool of the simulated driver."""

    handle: int
    device: int  # the device it lives on, or the one it was imported on (host pools: -1)
    location: int  # CUmemLocationType as an int
    handle_types: int
    max_size: int  # 0: no limit but the device's memory; else a multiple of POOL_MAX_SIZE_STEP
    default: bool = False
    imported: bool = False
    destroyed: bool = False
    identity: bytes = b""
    attrs: dict[int, int] = field(default_factory=dict)
    used: int = 0
    used_high: int = 0
    reserved: int = 0
    reserved_high: int = 0
    allocs: set[int] = field(default_factory=set)  # bases of its outstanding allocations
    access: dict[int, int] = field(default_factory=dict)  # device ordinal -> CUmemAccess_flags
    fd: int = -1  # the memory file of a shareable pool (its exporter's), or -1
    mapping: Any = None  # the mmap of that file
    file_end: int = _HEADER  # where the next allocation goes in the file
    exported: bool = False  # cuMemPoolExportToShareableHandle has succeeded on it

    @property
    def host(self) -> bool:
        return self.location in (_LOCATION_HOST, _LOCATION_HOST_NUMA)


def _struct_bytes(obj: Any, n: int = 64) -> bytes:
    return ctypes.string_at(int(obj.getPtr()), n)


def _fill_struct(obj: Any, payload: bytes) -> Any:
    ctypes.memmove(int(obj.getPtr()), payload, len(payload))
    return obj


class SimPools(SimCore):
    """Memory pools, stream-ordered allocation from them, shareable pools and IPC events."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pools: dict[int, Pool] = {}
        self._default_pools: list[Pool] = []
        for ordinal in range(self._devices):
            pool = Pool(self._handle(), ordinal, _LOCATION_DEVICE, _HANDLE_NONE, 0, default=True)
            self._pool_defaults(pool)
            self._pools[pool.handle] = pool
            self._default_pools.append(pool)
        self._current_pools: list[Pool] = list(self._default_pools)
        self._pool_of: dict[int, Pool] = {}  # allocation base -> the pool it came from
        self._imported: dict[int, Pool] = {}  # imported allocation base -> its imported pool
        self._host_pool_allocs: dict[int, Alloc] = {}
        self._ipc_events: dict[int, int] = {}  # exported event handle -> event handle (this process)
        self._process_tag = os.getpid()
        self._file_offsets: dict[int, int] = {}  # shareable pool allocation base -> its offset in the file

    # --- pools -------------------------------------------------------------------------------

    def _pool_defaults(self, pool: Pool) -> None:
        pool.attrs = {
            int(_A.CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES): 1,
            int(_A.CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC): 1,
            int(_A.CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES): 1,
            _RELEASE_THRESHOLD: 0,
        }
        if not pool.host:
            pool.access = {pool.device: _ACCESS_RW}

    def _pool(self, value: Any, call: str) -> Pool:
        handle = h(value)
        pool = self._pools.get(handle)
        if pool is None:
            if handle == 0:
                raise Status(R.CUDA_ERROR_INVALID_VALUE)
            raise self._crash(call, f"memory pool {handle:#x} was never created by this driver", handle)
        if pool.destroyed:
            raise self._crash(call, f"memory pool {handle:#x} used after cuMemPoolDestroy", handle)
        return pool

    @api(1)
    def cuDeviceGetDefaultMemPool(self, dev: Any) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUmemoryPool(self._default_pools[self._device(dev)].handle))

    @api(1)
    def cuDeviceGetMemPool(self, dev: Any) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUmemoryPool(self._current_pools[self._device(dev)].handle))

    @api(0)
    def cuDeviceSetMemPool(self, dev: Any, pool: Any) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        found = self._pool(pool, "cuDeviceSetMemPool")
        if found.host or found.imported or found.device != ordinal:
            raise Status(R.CUDA_ERROR_INVALID_DEVICE)
        self._current_pools[ordinal] = found
        return OK

    @api(1)
    def cuMemPoolCreate(self, poolProps: Any) -> tuple[Any, ...]:
        if poolProps is None:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        if int(poolProps.allocType) != _PINNED:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        location = int(poolProps.location.type)
        ident = int(poolProps.location.id)
        if location == _LOCATION_DEVICE:
            if not 0 <= ident < self._devices:
                raise Status(R.CUDA_ERROR_INVALID_VALUE)  # as an H200 answered (not INVALID_DEVICE)
            device = ident
        elif location in (_LOCATION_HOST, _LOCATION_HOST_NUMA):
            if location == _LOCATION_HOST_NUMA and ident != 0:
                raise Status(R.CUDA_ERROR_INVALID_VALUE)  # one NUMA node (0) on the simulated host
            device = -1
        else:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        handle_types = int(poolProps.handleTypes)
        if handle_types not in (_HANDLE_NONE, _HANDLE_FD):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
        max_size = int(poolProps.maxSize)
        if max_size < 0:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        max_size = -(-max_size // POOL_MAX_SIZE_STEP) * POOL_MAX_SIZE_STEP
        pool = Pool(self._handle(), device, location, handle_types, max_size)
        self._pool_defaults(pool)
        if handle_types == _HANDLE_FD:
            self._pool_file(pool)
        self._pools[pool.handle] = pool
        self._add_live("memory_pool", pool.handle, None, "cuMemPoolCreate")
        return (SUCCESS, cb.CUmemoryPool(pool.handle))

    def _pool_file(self, pool: Pool) -> None:
        """Give a shareable pool its memory file, with the header an importer reads."""
        pool.identity = uuid.uuid4().bytes
        fd = os.memfd_create(f"cuguard-sim-pool-{pool.handle:x}", os.MFD_CLOEXEC)
        limit = pool.max_size or self._memory_per_device
        try:
            os.ftruncate(fd, _HEADER + limit)
            mapping = mmap.mmap(fd, _HEADER + limit)
        except OSError:
            os.close(fd)
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY) from None
        mapping[: len(_MAGIC) + 24] = _MAGIC + pool.identity + struct.pack("<iI", pool.device, pool.location)
        pool.fd = fd
        pool.mapping = mapping

    @api(0)
    def cuMemPoolDestroy(self, pool: Any) -> tuple[Any, ...]:
        handle = h(pool)
        found = self._pools.get(handle)
        if found is not None and found.destroyed:
            self._note(self.double_release, "cuMemPoolDestroy", f"memory pool {handle:#x} destroyed twice", handle)
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        found = self._pool(pool, "cuMemPoolDestroy")
        if found.default:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)  # a device's default pool cannot be destroyed
        if found.allocs and not found.imported:
            # The driver accepts this (the pool goes once its last allocation is freed), but an H200
            # process that did it died (SIGFPE) in a later pool allocation on the legacy stream
            # (scripts/differential.py, pool_*_then_new_pool, probe the orders); cuguard destroys a
            # pool only after its buffers, so the sweeps count it as misuse.
            self._note(
                self.misuse,
                "cuMemPoolDestroy",
                f"memory pool {handle:#x} destroyed with {len(found.allocs)} allocation(s) outstanding",
                handle,
            )
        found.destroyed = True
        self._drop_live(found.handle)
        for ordinal, current in enumerate(self._current_pools):
            if current is found:
                self._current_pools[ordinal] = self._default_pools[ordinal]
        if not found.allocs:
            self._pool_gone(found)
        return OK

    def _pool_gone(self, pool: Pool) -> None:
        if pool.fd >= 0:
            os.close(pool.fd)
            pool.fd = -1
        pool.mapping = None  # the mapping goes when the last view of it does
        pool.reserved = 0

    _U64_ATTRS = frozenset({_RELEASE_THRESHOLD, _RESERVED_CURRENT, _RESERVED_HIGH, _USED_CURRENT, _USED_HIGH})

    @api(0)
    def cuMemPoolSetAttribute(self, pool: Any, attr: Any, value: Any) -> tuple[Any, ...]:
        found = self._pool(pool, "cuMemPoolSetAttribute")
        key = int(attr)
        number = int(value)
        if key in _INT_ATTRS:
            found.attrs[key] = 1 if number else 0
        elif key == _RELEASE_THRESHOLD:
            found.attrs[key] = number
            self._settle_pool(found)
        elif key == _RESERVED_HIGH:
            if number != 0:
                raise Status(R.CUDA_ERROR_INVALID_VALUE)  # only a reset to 0 (to the current value)
            found.reserved_high = found.reserved
        elif key == _USED_HIGH:
            if number != 0:
                raise Status(R.CUDA_ERROR_INVALID_VALUE)
            found.used_high = found.used
        else:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        return OK

    @api(1)
    def cuMemPoolGetAttribute(self, pool: Any, attr: Any) -> tuple[Any, ...]:
        found = self._pool(pool, "cuMemPoolGetAttribute")
        key = int(attr)
        if key in _INT_ATTRS:
            return (SUCCESS, found.attrs[key])
        values = {
            _RELEASE_THRESHOLD: found.attrs[_RELEASE_THRESHOLD],
            _RESERVED_CURRENT: found.reserved,
            _RESERVED_HIGH: found.reserved_high,
            _USED_CURRENT: found.used,
            _USED_HIGH: found.used_high,
        }
        if key not in values:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        return (SUCCESS, cb.cuuint64_t(values[key]))

    @api(0)
    def cuMemPoolTrimTo(self, pool: Any, minBytesToKeep: int) -> tuple[Any, ...]:
        found = self._pool(pool, "cuMemPoolTrimTo")
        keep = max(self._granules(found.used), self._granules(int(minBytesToKeep)))
        if keep < found.reserved:
            self._set_reserved(found, keep)
        return OK

    @staticmethod
    def _granules(size: int) -> int:
        return -(-size // POOL_GRANULE) * POOL_GRANULE

    def _set_reserved(self, pool: Pool, reserved: int) -> None:
        pool.reserved = reserved
        pool.reserved_high = max(pool.reserved_high, reserved)

    def _settle_pool(self, pool: Pool) -> None:
        """Give back what is reserved above both what is used and the release threshold."""
        keep = max(self._granules(pool.used), self._granules(pool.attrs[_RELEASE_THRESHOLD]))
        if pool.reserved > keep:
            self._set_reserved(pool, keep)

    @api(0)
    def cuMemPoolSetAccess(self, pool: Any, map: Any, count: int) -> tuple[Any, ...]:
        found = self._pool(pool, "cuMemPoolSetAccess")
        descs = list(map or ())
        if int(count) != len(descs):
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        updates: dict[int, int] = {}
        for desc in descs:
            if int(desc.location.type) != _LOCATION_DEVICE:
                raise Status(R.CUDA_ERROR_INVALID_VALUE)
            ordinal = int(desc.location.id)
            if not 0 <= ordinal < self._devices:
                raise Status(R.CUDA_ERROR_INVALID_DEVICE)
            flags = int(desc.flags)
            if flags not in (_ACCESS_NONE, _ACCESS_RW):
                raise Status(R.CUDA_ERROR_INVALID_VALUE)  # read-only access is not supported for pools
            if ordinal == found.device and flags != _ACCESS_RW and not found.host:
                raise Status(R.CUDA_ERROR_INVALID_DEVICE)  # the pool's own device keeps its access
            updates[ordinal] = flags
        found.access.update(updates)  # all or nothing: nothing changed if any descriptor was refused
        return OK

    @api(1)
    def cuMemPoolGetAccess(self, memPool: Any, location: Any) -> tuple[Any, ...]:
        found = self._pool(memPool, "cuMemPoolGetAccess")
        if location is None or int(location.type) != _LOCATION_DEVICE:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        ordinal = int(location.id)
        if not 0 <= ordinal < self._devices:
            # An H200 answers INVALID_VALUE here (a grant naming that device is INVALID_DEVICE):
            # differential scenario pool_host_access_every_device.
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        return (SUCCESS, cb.CUmemAccess_flags(found.access.get(ordinal, _ACCESS_NONE)))

    # --- allocation ------------------------------------------------------------------------------

    def allocation_pool(self, address: int) -> int | None:
        """The handle of the memory pool the live allocation at ``address`` came from, else ``None``.

        ``None`` too for memory of no pool (``cuMemAlloc``...) and for an address that is no
        allocation's base; ``TypeError`` for an ``address`` that is not an int. A query of the
        simulator's books: no driver call is made or recorded.
        """
        if isinstance(address, bool) or not isinstance(address, int):
            raise TypeError(f"address must be an int, not {type(address).__name__}")
        with self._lock:
            pool = self._pool_of.get(address)
            return None if pool is None or pool.destroyed else pool.handle

    @api(1)
    def cuMemAllocFromPoolAsync(self, bytesize: int, pool: Any, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuMemAllocFromPoolAsync")
        found = self._pool(pool, "cuMemAllocFromPoolAsync")
        size = int(bytesize)
        if found.imported:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)  # imported pools only import pointers
        if size == 0:
            return (SUCCESS, cb.CUdeviceptr(0))  # nothing allocated, NULL returned (as cuMemAllocAsync)
        if not found.host and found.access.get(st.ctx.device, _ACCESS_NONE) != _ACCESS_RW:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)  # a stream of a device without access to the pool
        if found.max_size and found.used + size > found.max_size:
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        growth = max(0, self._granules(found.used + size) - found.reserved)
        if found.host:
            alloc = self._pool_host_alloc(size, st.ctx)
        else:
            if self._used[found.device] + growth > self._memory_per_device:
                raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
            alloc = self._new_device_alloc(size, st.ctx, found.device, "cuMemAllocFromPoolAsync")
            if found.mapping is not None:
                start = found.file_end
                if start + size > len(found.mapping):
                    self._forget_alloc(alloc)
                    raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
                found.file_end = (start + size + 511) & ~511
                alloc.data = memoryview(found.mapping)[start : start + size]
                self._file_offsets[alloc.base] = start
        found.used += size
        found.used_high = max(found.used_high, found.used)
        if growth:
            self._set_reserved(found, found.reserved + growth)
        found.allocs.add(alloc.base)
        self._pool_of[alloc.base] = found
        try:
            self._enqueue(st, "cuMemAllocFromPoolAsync", None)
        except Status:
            self._release_alloc(alloc)  # the stream refused it (an invalidated capture...): nothing is left
            raise
        return (SUCCESS, cb.CUdeviceptr(alloc.base))

    def _forget_alloc(self, alloc: Alloc) -> None:
        """Undo a device allocation made a moment ago in this call (the call then fails)."""
        alloc.freed = True
        if alloc.ctx is not None:
            self._used[alloc.ctx.device] -= alloc.size
        self._drop_live(alloc.base, alloc.ctx)

    def _pool_host_alloc(self, size: int, ctx: Ctx) -> Alloc:
        if size > self._memory_per_device:  # as for cuMemHostAlloc: the simulated host is that large
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        buffer = (ctypes.c_char * size)()
        base = ctypes.addressof(buffer)
        alloc = Alloc(base, size, True, ctx, ctx.gen, "cuMemAllocFromPoolAsync", buffer=buffer)
        bisect.insort(self._host_bases, base)
        self._host_allocs[base] = alloc
        self._host_pool_allocs[base] = alloc
        self._add_live("host_memory", base, ctx, "cuMemAllocFromPoolAsync")
        return alloc

    def _alloc_for_free(self, dptr: Any, call: str) -> Alloc:
        addr = h(dptr)
        alloc = self._host_pool_allocs.get(addr) if addr < DEVICE_BASE else None
        if alloc is None:
            return super()._alloc_for_free(dptr, call)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash(call, f"memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.double_release, call, f"pool memory {addr:#x} freed twice", addr)
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        return alloc

    def _release_alloc(self, alloc: Alloc) -> None:
        super()._release_alloc(alloc)
        pool = self._pool_of.pop(alloc.base, None)
        if pool is not None:
            pool.used -= alloc.size
            pool.allocs.discard(alloc.base)
            self._settle_pool(pool)
            if pool.destroyed and not pool.allocs:
                self._pool_gone(pool)
        imported = self._imported.pop(alloc.base, None)
        if imported is not None:
            if alloc.ctx is not None:
                self._used[alloc.ctx.device] += alloc.size  # its bytes were never this device's to give back
            imported.allocs.discard(alloc.base)
            if imported.destroyed and not imported.allocs:
                self._pool_gone(imported)

    # --- shareable pools -------------------------------------------------------------------------

    @api(1)
    def cuMemPoolExportToShareableHandle(self, pool: Any, handleType: Any, flags: int) -> tuple[Any, ...]:
        found = self._pool(pool, "cuMemPoolExportToShareableHandle")
        if int(flags) != 0 or int(handleType) != _HANDLE_FD:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        if found.imported or found.fd < 0 or found.handle_types != _HANDLE_FD:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)  # not created shareable
        found.exported = True
        return (SUCCESS, os.dup(found.fd))  # a new descriptor: the caller closes it

    @api(1)
    def cuMemPoolImportFromShareableHandle(self, handle: Any, handleType: Any, flags: int) -> tuple[Any, ...]:
        if int(flags) != 0 or int(handleType) != _HANDLE_FD:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        fd = int(handle)
        try:
            size = os.fstat(fd).st_size
            mapping = mmap.mmap(fd, size) if size >= _HEADER else None
        except (OSError, ValueError):
            raise Status(R.CUDA_ERROR_INVALID_VALUE) from None
        if mapping is None or mapping[: len(_MAGIC)] != _MAGIC:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        start = len(_MAGIC)
        identity = bytes(mapping[start : start + 16])
        device, location = struct.unpack("<iI", mapping[start + 16 : start + 24])
        if device >= self._devices:
            raise Status(R.CUDA_ERROR_INVALID_DEVICE)
        for known in self._pools.values():
            if known.imported and not known.destroyed and known.identity == identity:
                mapping.close()
                return (SUCCESS, cb.CUmemoryPool(known.handle))  # the same pool again (as an H200)
        pool = Pool(self._handle(), device, location, _HANDLE_FD, 0, imported=True, identity=identity)
        pool.mapping = mapping
        self._pool_defaults(pool)
        self._pools[pool.handle] = pool
        self._add_live("memory_pool", pool.handle, None, "cuMemPoolImportFromShareableHandle")
        return (SUCCESS, cb.CUmemoryPool(pool.handle))

    @api(1)
    def cuMemPoolExportPointer(self, ptr: Any) -> tuple[Any, ...]:
        addr = h(ptr)
        pool = self._pool_of.get(addr)
        if pool is None or pool.mapping is None or pool.imported:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)  # not memory of a shareable pool (or not its start)
        alloc = self._dev_find(addr)
        if alloc is None or alloc.freed:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        if not pool.exported:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)  # the pool itself was never shared (as an H200)
        payload = _PTR_MAGIC + pool.identity + struct.pack("<QQ", self._file_offsets[addr], alloc.size)
        return (SUCCESS, _fill_struct(cb.CUmemPoolPtrExportData(), payload.ljust(64, b"\0")))

    @api(1)
    def cuMemPoolImportPointer(self, pool: Any, shareData: Any) -> tuple[Any, ...]:
        found = self._pool(pool, "cuMemPoolImportPointer")
        if shareData is None or not found.imported:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        raw = _struct_bytes(shareData)
        if raw[:4] != _PTR_MAGIC or raw[4:20] != found.identity:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)  # export data of another pool
        offset, size = struct.unpack("<QQ", raw[20:36])
        if offset < _HEADER or offset + size > len(found.mapping):
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        ctx = self._current() or self._primary[found.device]  # none current is fine (as an H200)
        if ctx.destroyed:
            ctx = self._require_ctx()  # the thread's context is gone: misuse, noted there
        alloc = self._new_device_alloc(size, ctx, found.device, "cuMemPoolImportPointer", live=False)
        alloc.data = memoryview(found.mapping)[offset : offset + size]
        self._add_live("device_memory", alloc.base, ctx, "cuMemPoolImportPointer")
        found.allocs.add(alloc.base)
        self._imported[alloc.base] = found
        return (SUCCESS, cb.CUdeviceptr(alloc.base))

    # --- IPC events ------------------------------------------------------------------------------

    @contextmanager
    def as_other_process(self) -> Iterator[None]:
        """IPC event handles exported inside the block look as if another process exported them.

        For tests in one process: an event exported inside the block can be
        opened with ``cuIpcOpenEventHandle`` after it, as if it came from
        another process (which the driver refuses for its own events).
        """
        with self._lock:
            saved = self._process_tag
            self._process_tag = -1 - saved
        try:
            yield
        finally:
            with self._lock:
                self._process_tag = saved

    @api(1)
    def cuIpcGetEventHandle(self, event: Any) -> tuple[Any, ...]:
        """The event's IPC handle; unless the event's own context is current the real process dies.

        An H200's process died with SIGSEGV both with no context current and with another
        context of the same device current.
        """
        current = self._current()
        ev = self._event(event, "cuIpcGetEventHandle")
        if current is None or current is not ev.ctx:
            what = "no context" if current is None else "another context than the event's"
            raise self._crash("cuIpcGetEventHandle", f"{what} current (the real process died with SIGSEGV)")
        if not ev.flags & _EVENT_INTERPROCESS:
            raise Status(R.CUDA_ERROR_INVALID_HANDLE)
        payload = _EVENT_MAGIC + struct.pack("<qQQ", self._process_tag, id(self), ev.handle)
        return (SUCCESS, _fill_struct(cb.CUipcEventHandle(), payload.ljust(64, b"\0")))

    @api(1)
    def cuIpcOpenEventHandle(self, handle: Any) -> tuple[Any, ...]:
        if handle is None:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        raw = _struct_bytes(handle)
        if raw[:4] != _EVENT_MAGIC:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        process, _driver, _event = struct.unpack("<qQQ", raw[4:28])
        ctx = self._require_ctx()
        if process == self._process_tag:
            raise Status(R.CUDA_ERROR_INVALID_CONTEXT)  # opened in the process that exported it
        new = self._handle()
        self._events[new] = SimEvent(new, ctx, ctx.gen, 0x2 | _EVENT_INTERPROCESS)
        self._add_live("event", new, ctx, "cuIpcOpenEventHandle")
        return (SUCCESS, cb.CUevent(new))
