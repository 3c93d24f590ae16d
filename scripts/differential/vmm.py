"""Virtual memory management and managed memory.

The edge cases VirtualMemoryResource and ManagedMemoryResource depend on, and those the simulator
assumes (tests/test_sim_vmm.py in packages/testing names them).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import BINDINGS_MAJOR
from differential.common import (
    A,
    Obs,
    Setup,
    device_location,
    mem_location,
    must,
    name,
    ok,
    scenario,
    status_or_raise,
)

_GRAN = 2 << 20  # what the simulator reports; the scenarios ask the driver and compare


def _vmm_prop(device: int = 0) -> Any:
    prop = B.CUmemAllocationProp()
    prop.type = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    return prop


def _vmm_access(device: int = 0) -> list[Any]:
    desc = B.CUmemAccessDesc()
    desc.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = device
    desc.flags = B.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    return [desc]


def _prefetch(d: Any, ptr: Any, n: int, loc: Any, stream: Any, *, flags: int = 0) -> Any:
    if BINDINGS_MAJOR >= 13:
        return d.cuMemPrefetchAsync(ptr, n, loc, flags, stream)
    return d.cuMemPrefetchAsync_v2(ptr, n, loc, flags, stream)


def _advise(d: Any, ptr: Any, n: int, advice: Any, loc: Any) -> Any:
    if BINDINGS_MAJOR >= 13:
        return d.cuMemAdvise(ptr, n, advice, loc)
    return d.cuMemAdvise_v2(ptr, n, advice, loc)


def _mapped_range(d: Any, size: int) -> tuple[Any, Any]:
    va = ok(d.cuMemAddressReserve(size, 0, 0, 0))
    handle = ok(d.cuMemCreate(size, _vmm_prop(), 0))
    must(d.cuMemMap(va, size, 0, handle, 0))
    must(d.cuMemSetAccess(va, size, _vmm_access(), 1))
    return va, handle


def _drop_range(d: Any, va: Any, handle: Any, size: int) -> list[str]:
    return [name(d.cuMemUnmap(va, size)[0]), name(d.cuMemRelease(handle)[0]), name(d.cuMemAddressFree(va, size)[0])]


@scenario
def vmm_granularity(d: Any) -> Obs:
    with Setup(d):
        flags = B.CUmemAllocationGranularity_flags
        minimum = d.cuMemGetAllocationGranularity(_vmm_prop(), flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        recommended = d.cuMemGetAllocationGranularity(_vmm_prop(), flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return [
            name(minimum[0]),
            int(minimum[1] or 0),
            name(recommended[0]),
            int(recommended[1] or 0),
            status_or_raise(lambda: d.cuMemGetAllocationGranularity(_vmm_prop(99), 0)),
            status_or_raise(lambda: d.cuMemGetAllocationGranularity(None, 0)),
            int(ok(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0))),
        ]


@scenario
def vmm_without_context(d: Any) -> Obs:
    """Whether address ranges and physical memory need a current context."""
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [status_or_raise(lambda: d.cuMemGetAllocationGranularity(_vmm_prop(), 0))]
    err, va = d.cuMemAddressReserve(_GRAN, 0, 0, 0)
    out.append(name(err))
    if not err:
        d.cuMemAddressFree(va, _GRAN)
    err, handle = d.cuMemCreate(_GRAN, _vmm_prop(), 0)
    out.append(name(err))
    if not err:
        d.cuMemRelease(handle)
    return out


@scenario
def vmm_unaligned_sizes(d: Any) -> Obs:
    with Setup(d):
        g = int(ok(d.cuMemGetAllocationGranularity(_vmm_prop(), 0)))
        err, odd = d.cuMemAddressReserve(g + 1, 0, 0, 0)
        if not err:
            d.cuMemAddressFree(odd, g + 1)
        out: Obs = [
            name(err),
            name(d.cuMemAddressReserve(g, 3, 0, 0)[0]),
            name(d.cuMemAddressReserve(g, 0, 0, 1)[0]),
            name(d.cuMemCreate(1000, _vmm_prop(), 0)[0]),
            name(d.cuMemCreate(g, _vmm_prop(), 1)[0]),
        ]
        va = ok(d.cuMemAddressReserve(2 * g, 0, 0, 0))
        handle = ok(d.cuMemCreate(2 * g, _vmm_prop(), 0))
        out += [
            name(d.cuMemMap(va, g + 4096, 0, handle, 0)[0]),
            name(d.cuMemMap(int(va) + 4096, g, 0, handle, 0)[0]),
            name(d.cuMemMap(va, g, 4096, handle, 0)[0]),
            name(d.cuMemMap(va, 4 * g, 0, handle, 0)[0]),
            name(d.cuMemMap(va, g, 0, handle, 1)[0]),
        ]
        out += [name(d.cuMemRelease(handle)[0]), name(d.cuMemAddressFree(va, 2 * g)[0])]
    return out


@scenario
def vmm_access_before_map(d: Any) -> Obs:
    with Setup(d):
        va = ok(d.cuMemAddressReserve(_GRAN, 0, 0, 0))
        handle = ok(d.cuMemCreate(_GRAN, _vmm_prop(), 0))
        out: Obs = [name(d.cuMemSetAccess(va, _GRAN, _vmm_access(), 1)[0])]
        out.append(name(d.cuMemMap(va, _GRAN, 0, handle, 0)[0]))
        err, flags = d.cuMemGetAccess(device_location(0), va)
        out += [name(err), int(flags or 0)]
        out.append(name(d.cuMemSetAccess(va, _GRAN, _vmm_access(), 1)[0]))
        err, flags = d.cuMemGetAccess(device_location(0), va)
        out += [name(err), int(flags or 0)]
        out.append(name(d.cuMemsetD8(va, 9, 16)[0]))
        back = bytearray(16)
        out += [name(d.cuMemcpyDtoH(back, va, 16)[0]), bytes(back).hex()]
        out.append(name(d.cuMemGetAccess(device_location(0), int(va) + _GRAN)[0]))  # past the mapping
        out += _drop_range(d, va, handle, _GRAN)
    return out


@scenario
def vmm_unmapped_copy(d: Any) -> Obs:
    """Copies into a reserved range with nothing mapped, and into a mapping with no access set."""
    with Setup(d):
        va = ok(d.cuMemAddressReserve(_GRAN, 0, 0, 0))
        out: Obs = [name(d.cuMemcpyHtoD(va, bytes(16), 16)[0]), name(d.cuMemsetD8(va, 1, 16)[0])]
        handle = ok(d.cuMemCreate(_GRAN, _vmm_prop(), 0))
        out.append(name(d.cuMemMap(va, _GRAN, 0, handle, 0)[0]))
        out += [name(d.cuMemcpyHtoD(va, bytes(16), 16)[0]), name(d.cuMemsetD8(va, 1, 16)[0])]
        out.append(name(d.cuCtxSynchronize()[0]))
        out += _drop_range(d, va, handle, _GRAN)
    return out


@scenario
def vmm_partial_unmap(d: Any) -> Obs:
    with Setup(d):
        size = 2 * _GRAN
        va, handle = _mapped_range(d, size)
        out: Obs = [
            name(d.cuMemUnmap(va, _GRAN)[0]),
            name(d.cuMemUnmap(int(va) + _GRAN, _GRAN)[0]),
            name(d.cuMemSetAccess(va, _GRAN, _vmm_access(), 1)[0]),
            name(d.cuMemAddressFree(va, size)[0]),  # still mapped
        ]
        out.append(name(d.cuMemsetD8(va, 4, size)[0]))  # the whole mapping is still there
        out += _drop_range(d, va, handle, size)
    return out


@scenario
def vmm_release_while_mapped(d: Any) -> Obs:
    with Setup(d):
        va, handle = _mapped_range(d, _GRAN)
        out: Obs = [name(d.cuMemRelease(handle)[0])]
        out.append(name(d.cuMemsetD8(va, 6, 16)[0]))
        back = bytearray(4)
        out += [name(d.cuMemcpyDtoH(back, va, 4)[0]), bytes(back).hex()]
        out.append(name(d.cuMemFree(va)[0]))  # an address range is not cuMemAlloc memory
        out += [name(d.cuMemUnmap(va, _GRAN)[0]), name(d.cuMemAddressFree(va, _GRAN)[0])]
        out.append(name(d.cuMemAddressFree(va, _GRAN)[0]))  # twice
    return out


@scenario
def vmm_adjacent_ranges(d: Any) -> Obs:
    """A reservation at the hint right after another, and a copy across the two."""
    with Setup(d):
        va, handle = _mapped_range(d, _GRAN)
        err, va2 = d.cuMemAddressReserve(_GRAN, 0, int(va) + _GRAN, 0)
        out: Obs = [name(err), int(va2 or 0) == int(va) + _GRAN]
        if not err and int(va2) == int(va) + _GRAN:
            handle2 = ok(d.cuMemCreate(_GRAN, _vmm_prop(), 0))
            out.append(name(d.cuMemMap(va2, _GRAN, 0, handle2, 0)[0]))
            out.append(name(d.cuMemSetAccess(va2, _GRAN, _vmm_access(), 1)[0]))
            out.append(name(d.cuMemsetD8(int(va) + _GRAN - 8, 5, 16)[0]))
            back = bytearray(16)
            out += [name(d.cuMemcpyDtoH(back, int(va) + _GRAN - 8, 16)[0]), bytes(back).hex()]
            out += _drop_range(d, va2, handle2, _GRAN)
        elif not err:
            d.cuMemAddressFree(va2, _GRAN)
        out += _drop_range(d, va, handle, _GRAN)
    return out


@scenario
def managed_prefetch_advise(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        ptr = ok(d.cuMemAllocManaged(4096, 1))
        adv = B.CUmem_advise
        out: Obs = [
            name(_prefetch(d, ptr, 4096, device_location(0), s)[0]),
            name(_prefetch(d, ptr, 4096, mem_location("HOST"), s)[0]),
            name(_prefetch(d, ptr, 4096, device_location(99), s)[0]),
            name(_prefetch(d, ptr, 4096, device_location(0), s, flags=1)[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_SET_READ_MOSTLY, device_location(0))[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device_location(0))[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_SET_ACCESSED_BY, device_location(0))[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, device_location(0))[0]),
        ]
        out.append(name(d.cuStreamSynchronize(s)[0]))
        plain = ok(d.cuMemAlloc(4096))  # prefetch and advice of memory that is not managed
        out += [
            name(_prefetch(d, plain, 4096, device_location(0), s)[0]),
            name(_advise(d, plain, 4096, adv.CU_MEM_ADVISE_SET_READ_MOSTLY, device_location(0))[0]),
        ]
        out.append(name(d.cuStreamSynchronize(s)[0]))
        out += [name(d.cuMemFree(plain)[0]), name(d.cuMemFree(ptr)[0])]
    return out
