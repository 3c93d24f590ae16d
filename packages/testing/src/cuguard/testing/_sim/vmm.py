"""Virtual memory management and managed-memory hints of the simulated driver.

Virtual memory: ``cuMemAddressReserve``/``cuMemAddressFree`` (address ranges),
``cuMemCreate``/``cuMemRelease`` (physical allocations),
``cuMemMap``/``cuMemUnmap`` (mappings) and ``cuMemSetAccess``/``cuMemGetAccess``,
with ``cuMemGetAllocationGranularity``. Managed memory (allocated by
``cuMemAllocManaged``, in :mod:`~cuguard.testing._sim.queries`):
``cuMemPrefetchAsync`` and ``cuMemAdvise`` (cuda-bindings 13.x take a
``CUmemLocation``; 12.x take a device ordinal and have ``_v2`` variants that
take a location). :class:`SimVmm` builds on
:class:`~cuguard.testing._sim.core.SimCore`.

The model:

- An address range is a device allocation record (:class:`Reservation`) over
  the whole reserved range, so the simulator's copies, memsets and kernel
  emulations reach mapped memory through their usual paths. A copy or memset
  that touches a part of the range that is not mapped, or mapped with no
  access for the device, is ``CUDA_ERROR_INVALID_VALUE`` (assumed; see
  ``scripts/differential.py``); a kernel that touches one faults.
- A physical allocation holds the bytes; mapping it twice shows the same
  bytes at both addresses. Its memory counts as used on its device from
  ``cuMemCreate`` until it is released *and* no longer mapped (documented:
  the memory is freed when the last mapping goes).
- Every address range, physical allocation and mapping is a live object
  (``"address_range"``, ``"physical_memory"``, ``"memory_mapping"``): none is
  owned by a context, as in CUDA, where they are objects of the device.
- Sizes and addresses must be multiples of the granularity (2 MiB, as an
  H200 reports for both the minimum and the recommended granularity). A
  mapping whose address, size or offset is not a multiple of it, or that
  runs past its address range or its physical allocation, is
  ``CUDA_ERROR_NOT_SUPPORTED`` (as an H200 answered); other refusals are
  ``CUDA_ERROR_INVALID_VALUE``.
- ``cuMemGetAllocationGranularity`` does not check the device ordinal of the
  property (an H200 answered a device it does not have with the granularity).
- ``cuMemGetAccess`` of an address with nothing mapped there answers
  ``CUDA_SUCCESS`` with no access (as an H200 did).
- ``cuMemAddressReserve`` does not place a range at its ``addr`` hint (an
  H200 did not, for the addresses right after another range), unless
  :attr:`SimVmm.follow_address_hints` is set: then a hint whose range is free
  and aligned is followed, so tests can make a range adjacent to another.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._bindings import BINDINGS_MAJOR
from cuguard.testing._sim.accounting import LiveObject, SimulatedFault
from cuguard.testing._sim.base import (
    DEVICE_BASE,
    OK,
    SUCCESS,
    Status,
    _address_lock,
    _next_address,
    _reserve_addresses,
    api,
    h,
)
from cuguard.testing._sim.core import SimCore
from cuguard.testing._sim.state import Alloc, Stream

__all__ = ["GRANULARITY", "Mapping", "Physical", "Reservation", "SimVmm"]

R = cb.CUresult
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
INVALID_DEVICE = R.CUDA_ERROR_INVALID_DEVICE
NOT_SUPPORTED = R.CUDA_ERROR_NOT_SUPPORTED

#: ``cuMemGetAllocationGranularity`` of an H200 for pinned device memory (minimum and recommended).
GRANULARITY = 2 << 20

_PINNED = int(cb.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED)
_LOC_DEVICE = int(cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE)
_LOC_HOST = int(cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST)
_LOC_HOST_NUMA = int(cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST_NUMA)
_LOC_HOST_NUMA_CURRENT = int(cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
_ACCESS_FLAGS = frozenset({0, 1, 3})  # PROT_NONE, PROT_READ, PROT_READWRITE
_HANDLE_TYPES = 0x1 | 0x8  # POSIX file descriptor, fabric (Linux)
_ADVICE = frozenset(range(1, 7))
_ADVICE_WITH_LOCATION = frozenset({3, 5, 6})  # SET_PREFERRED_LOCATION, SET_/UNSET_ACCESSED_BY
_CPU = -1  # CU_DEVICE_CPU: the host, where 12.x bindings take a device ordinal


@dataclass(eq=False, slots=True)
class Physical:
    """A physical allocation made by ``cuMemCreate``."""

    handle: int
    device: int
    size: int
    handle_types: int
    data: bytearray
    released: bool = False
    mappings: int = 0
    freed: bool = False  # its memory went back to the device (released and unmapped)


@dataclass(eq=False, slots=True)
class Mapping:
    """``size`` bytes of a physical allocation at ``offset``, mapped at ``va``."""

    va: int
    size: int
    physical: Physical
    offset: int
    key: int  # the live-object key
    access: dict[int, int] = field(default_factory=dict)  # device ordinal -> CUmemAccess_flags


def _covering(space: list[Mapping], addr: int, n: int) -> list[tuple[Mapping, int, int]] | None:
    """``(mapping, offset in it, length)`` pieces of ``[addr, addr + n)``, or None if a part is unmapped.

    ``space`` is every mapping of the driver, by address: mappings of adjacent
    address ranges make one contiguous span, as on a GPU.
    """
    pieces: list[tuple[Mapping, int, int]] = []
    end = addr + n
    i = max(bisect.bisect_right([m.va for m in space], addr) - 1, 0)
    for m in space[i:]:
        if addr >= end:
            break
        if m.va + m.size <= addr:
            continue
        if m.va > addr:
            return None
        length = min(end, m.va + m.size) - addr
        pieces.append((m, addr - m.va, length))
        addr += length
    return pieces if addr >= end else None


@dataclass(eq=False, slots=True)
class Reservation(Alloc):
    """An address range reserved by ``cuMemAddressReserve``; bytes come from the mappings at its addresses."""

    maps: list[Mapping] = field(default_factory=list)  # the mappings inside this range
    space: list[Mapping] = field(default_factory=list)  # every mapping of the driver, by address

    def covering(self, offset: int, n: int) -> list[tuple[Mapping, int, int]] | None:
        """The pieces of ``[base + offset, base + offset + n)`` (which may run into adjacent ranges)."""
        return _covering(self.space, self.base + offset, n)

    def read(self, offset: int, n: int) -> bytes:
        pieces = self.covering(offset, n)
        if pieces is None or any(not m.access for m, _, _ in pieces):
            raise SimulatedFault(
                int(R.CUDA_ERROR_ILLEGAL_ADDRESS), f"read of unmapped memory at {self.base + offset:#x}"
            )
        out = bytearray()
        for m, off, length in pieces:
            start = m.offset + off
            out += m.physical.data[start : start + length]
        return bytes(out)

    def write(self, offset: int, payload: bytes | bytearray | memoryview) -> None:
        data = memoryview(bytes(payload))
        pieces = self.covering(offset, len(data))
        if pieces is None or any(not m.access for m, _, _ in pieces):
            raise SimulatedFault(
                int(R.CUDA_ERROR_ILLEGAL_ADDRESS), f"write to unmapped memory at {self.base + offset:#x}"
            )
        done = 0
        for m, off, length in pieces:
            start = m.offset + off
            m.physical.data[start : start + length] = data[done : done + length]
            done += length


@dataclass(eq=False, slots=True)
class _Managed:
    """What was asked of a managed allocation: its last prefetch and its advice."""

    prefetched_to: tuple[int, int] | None = None  # (location type, id)
    read_mostly: bool = False
    preferred: tuple[int, int] | None = None
    accessed_by: set[tuple[int, int]] = field(default_factory=set)


def _aligned(value: int) -> bool:
    return value % GRANULARITY == 0


class SimVmm(SimCore):
    """Virtual memory (reserve, create, map, set access) and managed-memory hints."""

    #: Whether ``cuMemAddressReserve`` follows its ``addr`` hint when that range is free and aligned.
    #: False (the default) as an H200, which gave another address; set it on an instance to make a
    #: range adjacent to another on purpose (e.g., to grow a buffer in place).
    follow_address_hints: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # entries stay after release, to detect double release and use after release
        self._physicals: dict[int, Physical] = {}
        self._managed: dict[int, _Managed] = {}
        self._space: list[Mapping] = []  # every live mapping, by address

    def _vmm(self) -> dict[int, Physical]:
        return self._physicals

    def _managed_info(self, base: int) -> _Managed:
        info = self._managed.get(base)
        if info is None:
            info = self._managed[base] = _Managed()
        return info

    # --- simulator API ---------------------------------------------------------------------

    def managed_state(self, ptr: Any) -> dict[str, Any]:
        """What was asked of the managed allocation at ``ptr``: ``prefetched_to``, ``read_mostly``,
        ``preferred_location`` and ``accessed_by`` (locations as ``(CUmemLocationType, id)``).

        Raises ``ValueError`` when ``ptr`` is not the start of managed memory.
        """
        with self._lock:
            alloc = self._dev_find(h(ptr))
            if alloc is None or alloc.base != h(ptr) or alloc.call != "cuMemAllocManaged":
                raise ValueError(f"{h(ptr):#x} is not the start of managed memory")
            info = self._managed_info(alloc.base)
            return {
                "prefetched_to": info.prefetched_to,
                "read_mostly": info.read_mostly,
                "preferred_location": info.preferred,
                "accessed_by": frozenset(info.accessed_by),
            }

    def mappings(self) -> list[tuple[int, int, int]]:
        """Every live mapping as ``(address, size, physical allocation handle)``, by address."""
        with self._lock:
            out = [
                (m.va, m.size, m.physical.handle)
                for alloc in self._dev_allocs
                if isinstance(alloc, Reservation) and not alloc.freed
                for m in alloc.maps
            ]
            return sorted(out)

    # --- plumbing ---------------------------------------------------------------------------

    def _prop(self, prop: Any, *, check_device: bool = True) -> tuple[int, int]:
        """``(device, requested handle types)`` of a ``CUmemAllocationProp``; ``INVALID_VALUE`` when refused.

        With ``check_device=False`` a device ordinal the driver does not have is let through.
        """
        if prop is None or int(prop.type) != _PINNED or int(prop.location.type) != _LOC_DEVICE:
            raise Status(INVALID_VALUE)
        device = int(prop.location.id)
        if check_device and not 0 <= device < self._devices:
            raise Status(INVALID_DEVICE)
        handle_types = int(prop.requestedHandleTypes)
        if handle_types & ~_HANDLE_TYPES:
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
        return device, handle_types

    def _reservation_at(self, addr: int) -> Reservation | None:
        alloc = self._dev_find(addr)
        return alloc if isinstance(alloc, Reservation) and not alloc.freed else None

    def _add_object(self, kind: str, handle: int, call: str, key: int | None = None) -> None:
        self._live[handle if key is None else key] = LiveObject(kind, handle, None, call)

    def _location(self, location: Any, *, host_ok: bool = True) -> tuple[int, int]:
        if location is None:
            raise Status(INVALID_VALUE)
        kind, ident = int(location.type), int(location.id)
        if kind == _LOC_DEVICE:
            if not 0 <= ident < self._devices:
                raise Status(INVALID_DEVICE)
            return kind, ident
        if host_ok and kind in (_LOC_HOST, _LOC_HOST_NUMA, _LOC_HOST_NUMA_CURRENT):
            return kind, (0 if kind == _LOC_HOST else ident)
        raise Status(INVALID_VALUE)

    def _device_location(self, dev: Any) -> tuple[int, int]:
        ordinal = h(dev)
        if ordinal == _CPU:
            return _LOC_HOST, 0
        if not 0 <= ordinal < self._devices:
            raise Status(INVALID_DEVICE)
        return _LOC_DEVICE, ordinal

    def _managed_range(self, dptr: Any, count: int, call: str) -> Alloc:
        addr, n = h(dptr), int(count)
        alloc = self._dev_find(addr)
        if alloc is None or n == 0 or addr + n > alloc.base + alloc.size:
            raise Status(INVALID_VALUE)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash(call, f"memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.use_after_release, call, f"device memory {addr:#x} used after it was freed", addr)
            raise Status(INVALID_VALUE)
        if alloc.call != "cuMemAllocManaged":
            raise Status(INVALID_VALUE)  # not managed memory (assumed; see differential.py)
        return alloc

    # --- the copy paths see mapped memory -------------------------------------------------

    def _dev_side(self, addr: int, n: int, call: str) -> tuple[Alloc, int]:
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
        if not isinstance(alloc, Reservation):
            return super()._dev_side(addr, n, call)
        if alloc.freed:
            self._note(self.use_after_release, call, f"address range {alloc.base:#x} used after it was freed", addr)
            raise Status(INVALID_VALUE)
        pieces = _covering(self._space, addr, n)
        if pieces is None or any(not m.access.get(m.physical.device) for m, _, _ in pieces):
            raise Status(INVALID_VALUE)  # not mapped, or no access (assumed; see differential.py)
        return alloc, addr - alloc.base

    def _access(self, addr: int, n: int, what: str) -> tuple[Alloc | None, int]:
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
        if not isinstance(alloc, Reservation) or alloc.freed:
            return super()._access(addr, n, what)
        pieces = _covering(self._space, addr, n)
        if pieces is None or any(not m.access for m, _, _ in pieces):
            raise SimulatedFault(int(R.CUDA_ERROR_ILLEGAL_ADDRESS), f"{what} of {n} bytes at {addr:#x} is not mapped")
        return alloc, addr - alloc.base

    def _alloc_for_free(self, dptr: Any, call: str) -> Alloc:
        alloc = self._dev_find(h(dptr))
        if isinstance(alloc, Reservation):
            raise Status(INVALID_VALUE)  # an address range is freed with cuMemAddressFree
        return super()._alloc_for_free(dptr, call)

    # --- granularity -------------------------------------------------------------------------

    @api(1)
    def cuMemGetAllocationGranularity(self, prop: Any, option: Any) -> tuple[Any, ...]:
        """The granularity; the property's device ordinal is not checked (as an H200 answered)."""
        self._prop(prop, check_device=False)
        if int(option) not in (0, 1):
            raise Status(INVALID_VALUE)
        return (SUCCESS, GRANULARITY)

    # --- address ranges -----------------------------------------------------------------------

    @api(1)
    def cuMemAddressReserve(self, size: int, alignment: int, addr: Any, flags: int) -> tuple[Any, ...]:
        """Reserve ``size`` bytes of addresses; the ``addr`` hint is followed only with :attr:`follow_address_hints`."""
        size, alignment = int(size), int(alignment)
        if size == 0 or not _aligned(size) or int(flags) != 0:
            raise Status(INVALID_VALUE)
        if alignment and (alignment & (alignment - 1)):
            raise Status(INVALID_VALUE)
        align = max(alignment, GRANULARITY)
        base = self._free_at(h(addr), size, align) if self.follow_address_hints else None
        if base is None:
            raw = _reserve_addresses(size + align)
            base = (raw + align - 1) // align * align
        res = Reservation(base, size, False, None, 0, "cuMemAddressReserve", space=self._space)
        i = bisect.bisect_left(self._dev_bases, base)
        self._dev_bases.insert(i, base)
        self._dev_allocs.insert(i, res)
        self._add_object("address_range", base, "cuMemAddressReserve")
        return (SUCCESS, cb.CUdeviceptr(base))

    @api(0)
    def cuMemAddressFree(self, ptr: Any, size: int) -> tuple[Any, ...]:
        addr = h(ptr)
        alloc = self._dev_find(addr)
        if not isinstance(alloc, Reservation) or alloc.base != addr:
            raise Status(INVALID_VALUE)
        if alloc.freed:
            self._note(self.double_release, "cuMemAddressFree", f"address range {addr:#x} freed twice", addr)
            raise Status(INVALID_VALUE)
        if int(size) != alloc.size or alloc.maps:
            raise Status(INVALID_VALUE)  # another size, or mappings left (assumed; see differential.py)
        self._check_free(alloc, "cuMemAddressFree", None)
        alloc.freed = True
        self._live.pop(addr, None)
        return OK

    def _free_at(self, addr: int, size: int, align: int) -> int | None:
        """``addr`` if ``[addr, addr + size)`` is free here and aligned (the hint is followed), else None."""
        if addr < DEVICE_BASE or addr % align:
            return None
        i = bisect.bisect_left(self._dev_bases, addr + size) - 1
        if i >= 0 and self._dev_allocs[i].base + max(self._dev_allocs[i].size, 1) > addr:
            return None
        with _address_lock:  # addresses handed out later never fall inside this range
            _next_address[0] = max(_next_address[0], (addr + size + 1024 + 511) & ~511)
        return addr

    # --- physical allocations ------------------------------------------------------------------

    @api(1)
    def cuMemCreate(self, size: int, prop: Any, flags: int) -> tuple[Any, ...]:
        size = int(size)
        device, handle_types = self._prop(prop)
        if size == 0 or not _aligned(size) or int(flags) != 0:
            raise Status(INVALID_VALUE)
        if self._used[device] + size > self._memory_per_device:
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        handle = self._handle()
        self._used[device] += size
        self._vmm()[handle] = Physical(handle, device, size, handle_types, bytearray(size))
        self._add_object("physical_memory", handle, "cuMemCreate")
        return (SUCCESS, cb.CUmemGenericAllocationHandle(handle))

    def _physical(self, handle: Any, call: str) -> Physical:
        phys = self._vmm().get(h(handle))
        if phys is None:
            raise Status(INVALID_VALUE)
        if phys.released:
            self._note(self.use_after_release, call, f"physical allocation {phys.handle:#x} used after release")
            raise Status(INVALID_VALUE)
        return phys

    def _free_physical(self, phys: Physical) -> None:
        if phys.released and phys.mappings == 0 and not phys.freed:
            phys.freed = True
            self._used[phys.device] -= phys.size
            phys.data = bytearray()

    @api(0)
    def cuMemRelease(self, handle: Any) -> tuple[Any, ...]:
        """Release a physical allocation; its memory goes when its last mapping does (documented)."""
        phys = self._vmm().get(h(handle))
        if phys is None:
            raise Status(INVALID_VALUE)
        if phys.released:
            self._note(self.double_release, "cuMemRelease", f"physical allocation {phys.handle:#x} released twice")
            raise Status(INVALID_VALUE)
        phys.released = True
        self._live.pop(phys.handle, None)
        self._free_physical(phys)
        return OK

    # --- mappings -------------------------------------------------------------------------------

    @api(0)
    def cuMemMap(self, ptr: Any, size: int, offset: int, handle: Any, flags: int) -> tuple[Any, ...]:
        addr, size, offset = h(ptr), int(size), int(offset)
        phys = self._physical(handle, "cuMemMap")
        res = self._reservation_at(addr)
        if res is None or size == 0 or int(flags) != 0:
            raise Status(INVALID_VALUE)
        if (
            not (_aligned(addr) and _aligned(size) and _aligned(offset))
            or addr + size > res.base + res.size
            or offset + size > phys.size
        ):
            raise Status(NOT_SUPPORTED)  # as an H200 answered (differential.py, vmm_unaligned_sizes)
        if any(m.va < addr + size and addr < m.va + m.size for m in res.maps):
            raise Status(INVALID_VALUE)  # overlaps a mapping (assumed; see differential.py)
        key = self._handle()
        mapping = Mapping(addr, size, phys, offset, key)
        res.maps.append(mapping)
        self._space.insert(bisect.bisect_left([m.va for m in self._space], addr), mapping)
        phys.mappings += 1
        self._add_object("memory_mapping", addr, "cuMemMap", key)
        return OK

    @api(0)
    def cuMemUnmap(self, ptr: Any, size: int) -> tuple[Any, ...]:
        """Unmap whole mappings; a range that is not exactly whole mappings is refused (documented)."""
        addr, size = h(ptr), int(size)
        res = self._reservation_at(addr)
        if res is None or size == 0 or addr + size > res.base + res.size:
            raise Status(INVALID_VALUE)
        pieces = res.covering(addr - res.base, size)
        if pieces is None or any(off != 0 or length != m.size for m, off, length in pieces):
            raise Status(INVALID_VALUE)
        self._check_free(res, "cuMemUnmap", None)
        for m, _, _ in pieces:
            res.maps.remove(m)
            self._space.remove(m)
            self._live.pop(m.key, None)
            m.physical.mappings -= 1
            self._free_physical(m.physical)
        return OK

    @api(0)
    def cuMemSetAccess(self, ptr: Any, size: int, desc: Any, count: int) -> tuple[Any, ...]:
        """Set access of whole mappings; a range with an unmapped part is refused (documented)."""
        addr, size, count = h(ptr), int(size), int(count)
        descs = list(desc or ())
        if count == 0 or count > len(descs):
            raise Status(INVALID_VALUE)
        res = self._reservation_at(addr)
        if res is None or size == 0 or addr + size > res.base + res.size:
            raise Status(INVALID_VALUE)
        pieces = res.covering(addr - res.base, size)
        if pieces is None or any(off != 0 or length != m.size for m, off, length in pieces):
            raise Status(INVALID_VALUE)  # part of a mapping (assumed; see differential.py)
        changes: list[tuple[int, int]] = []
        for d in descs[:count]:
            kind, device = self._location(d.location, host_ok=False)
            flags = int(d.flags)
            if kind != _LOC_DEVICE or flags not in _ACCESS_FLAGS:
                raise Status(INVALID_VALUE)
            changes.append((device, flags))
        for m, _, _ in pieces:
            for device, flags in changes:
                if flags:
                    m.access[device] = flags
                else:
                    m.access.pop(device, None)
        return OK

    @api(1)
    def cuMemGetAccess(self, location: Any, ptr: Any) -> tuple[Any, ...]:
        kind, device = self._location(location, host_ok=False)
        addr = h(ptr)
        res = self._reservation_at(addr)
        pieces = None if res is None else res.covering(addr - res.base, 1)
        if kind != _LOC_DEVICE:
            raise Status(INVALID_VALUE)
        if not pieces:
            return (SUCCESS, 0)  # nothing mapped there: no access (as an H200 answered)
        return (SUCCESS, pieces[0][0].access.get(device, 0))

    # --- managed memory: prefetch and advice --------------------------------------------------

    def _prefetch(self, dptr: Any, count: int, where: tuple[int, int], flags: int, hStream: Any) -> tuple[Any, ...]:
        st: Stream = self._stream(hStream, "cuMemPrefetchAsync")
        if int(flags) != 0:
            raise Status(INVALID_VALUE)
        alloc = self._managed_range(dptr, count, "cuMemPrefetchAsync")
        self._enqueue(st, "cuMemPrefetchAsync", None, frozenset({alloc.base}))
        self._managed_info(alloc.base).prefetched_to = where
        return OK

    def _advise(self, dptr: Any, count: int, advice: Any, where: tuple[int, int] | None) -> tuple[Any, ...]:
        code = int(advice)
        if code not in _ADVICE:
            raise Status(INVALID_VALUE)
        alloc = self._managed_range(dptr, count, "cuMemAdvise")
        info = self._managed_info(alloc.base)
        if code == 1:
            info.read_mostly = True
        elif code == 2:
            info.read_mostly = False
        elif code == 3:
            info.preferred = where
        elif code == 4:
            info.preferred = None
        elif code == 5 and where is not None:
            info.accessed_by.add(where)
        elif where is not None:
            info.accessed_by.discard(where)
        return OK

    if BINDINGS_MAJOR >= 13:

        @api(0)
        def cuMemPrefetchAsync(
            self, devPtr: Any, count: int, location: Any, flags: int, hStream: Any
        ) -> tuple[Any, ...]:
            return self._prefetch(devPtr, count, self._location(location), flags, hStream)

        @api(0)
        def cuMemAdvise(self, devPtr: Any, count: int, advice: Any, location: Any) -> tuple[Any, ...]:
            where = self._location(location) if int(advice) in _ADVICE_WITH_LOCATION else None
            return self._advise(devPtr, count, advice, where)

    else:  # 12.x: a device ordinal (CU_DEVICE_CPU for the host), and _v2 variants with a location

        @api(0)
        def cuMemPrefetchAsync(self, devPtr: Any, count: int, dstDevice: Any, hStream: Any) -> tuple[Any, ...]:  # type: ignore[misc]
            return self._prefetch(devPtr, count, self._device_location(dstDevice), 0, hStream)

        @api(0)
        def cuMemPrefetchAsync_v2(
            self, devPtr: Any, count: int, location: Any, flags: int, hStream: Any
        ) -> tuple[Any, ...]:
            return self._prefetch(devPtr, count, self._location(location), flags, hStream)

        @api(0)
        def cuMemAdvise(self, devPtr: Any, count: int, advice: Any, device: Any) -> tuple[Any, ...]:  # type: ignore[misc]
            where = self._device_location(device) if int(advice) in _ADVICE_WITH_LOCATION else None
            return self._advise(devPtr, count, advice, where)

        @api(0)
        def cuMemAdvise_v2(self, devPtr: Any, count: int, advice: Any, location: Any) -> tuple[Any, ...]:
            where = self._location(location) if int(advice) in _ADVICE_WITH_LOCATION else None
            return self._advise(devPtr, count, advice, where)
