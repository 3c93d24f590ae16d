"""The simulated driver's virtual memory management and managed-memory hints.

scripts/differential.py runs the same edge cases on a real GPU (scenarios vmm_granularity,
vmm_without_context, vmm_unaligned_sizes, vmm_access_before_map, vmm_unmapped_copy,
vmm_partial_unmap, vmm_release_while_mapped, vmm_adjacent_ranges, managed_prefetch_advise).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._bindings import BINDINGS_MAJOR
from cuguard.testing._sim import SimulatedDriver, simulated_driver
from cuguard.testing._sim.vmm import GRANULARITY

pytestmark = pytest.mark.contract("B2")

R = cb.CUresult
OK = R.CUDA_SUCCESS
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
NOT_SUPPORTED = R.CUDA_ERROR_NOT_SUPPORTED
G = GRANULARITY


@pytest.fixture
def sim() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=2) as drv:
        assert drv.cuInit(0) == (OK,)
        err, ctx = drv.cuDevicePrimaryCtxRetain(0)
        assert err == OK
        assert drv.cuCtxSetCurrent(ctx) == (OK,)
        yield drv
        drv.cuCtxSetCurrent(cb.CUcontext(0))
        drv.cuDevicePrimaryCtxRelease(0)


def _prop(device: int = 0) -> Any:
    prop = cb.CUmemAllocationProp()
    prop.type = cb.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    return prop


def _desc(device: int = 0, flags: int = 3) -> Any:
    desc = cb.CUmemAccessDesc()
    desc.location.type = cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = device
    desc.flags = cb.CUmemAccess_flags(flags)
    return desc


def _loc(kind: str, ident: int = 0) -> Any:
    loc = cb.CUmemLocation()
    loc.type = getattr(cb.CUmemLocationType, "CU_MEM_LOCATION_TYPE_" + kind)
    loc.id = ident
    return loc


def _mapped(sim: SimulatedDriver, size: int = G) -> tuple[int, Any]:
    err, va = sim.cuMemAddressReserve(size, 0, 0, 0)
    assert err == OK
    err, handle = sim.cuMemCreate(size, _prop(), 0)
    assert err == OK
    assert sim.cuMemMap(va, size, 0, handle, 0) == (OK,)
    assert sim.cuMemSetAccess(va, size, [_desc()], 1) == (OK,)
    return int(va), handle


def _unmapped_all(sim: SimulatedDriver, va: int, handle: Any, size: int = G) -> None:
    assert sim.cuMemUnmap(va, size) == (OK,)
    assert sim.cuMemRelease(handle) == (OK,)
    assert sim.cuMemAddressFree(va, size) == (OK,)


def _kinds(sim: SimulatedDriver) -> list[str]:
    return sorted(o.kind for o in sim.live_objects() if o.kind != "context")


def test_granularity_is_two_mib_and_needs_a_valid_property(sim: SimulatedDriver) -> None:
    for option in (0, 1):
        assert sim.cuMemGetAllocationGranularity(_prop(), cb.CUmemAllocationGranularity_flags(option)) == (OK, G)
    assert sim.cuMemGetAllocationGranularity(_prop(5), 0) == (OK, G)  # the ordinal is not checked (as on an H200)
    assert sim.cuMemGetAllocationGranularity(None, 0)[0] == INVALID_VALUE


def test_unaligned_sizes_and_flags_are_refused(sim: SimulatedDriver) -> None:
    assert sim.cuMemAddressReserve(G + 1, 0, 0, 0) == (INVALID_VALUE, None)
    assert sim.cuMemAddressReserve(G, 3, 0, 0) == (INVALID_VALUE, None)  # alignment not a power of two
    assert sim.cuMemCreate(1000, _prop(), 0) == (INVALID_VALUE, None)
    assert sim.cuMemCreate(G, _prop(), 1) == (INVALID_VALUE, None)
    err, va = sim.cuMemAddressReserve(2 * G, 0, 0, 0)
    err2, handle = sim.cuMemCreate(2 * G, _prop(), 0)
    assert err == err2 == OK
    # An unaligned mapping, or one past its range, is not supported (as on an H200); bad flags are invalid.
    assert sim.cuMemMap(va, G + 4096, 0, handle, 0) == (NOT_SUPPORTED,)
    assert sim.cuMemMap(int(va) + 4096, G, 0, handle, 0) == (NOT_SUPPORTED,)
    assert sim.cuMemMap(va, G, 4096, handle, 0) == (NOT_SUPPORTED,)
    assert sim.cuMemMap(va, 4 * G, 0, handle, 0) == (NOT_SUPPORTED,)  # past the range and the allocation
    assert sim.cuMemMap(va, G, 0, handle, 1) == (INVALID_VALUE,)
    assert _kinds(sim) == ["address_range", "physical_memory"]  # the refusals made nothing
    assert sim.cuMemRelease(handle) == (OK,)
    assert sim.cuMemAddressFree(va, 2 * G) == (OK,)
    assert _kinds(sim) == []


def test_mapped_memory_reaches_copies_and_memsets_once_accessible(sim: SimulatedDriver) -> None:
    _err, va = sim.cuMemAddressReserve(G, 0, 0, 0)
    _, handle = sim.cuMemCreate(G, _prop(), 0)
    # set access before map: the range is not mapped
    assert sim.cuMemSetAccess(va, G, [_desc()], 1) == (INVALID_VALUE,)
    assert sim.cuMemsetD8(va, 1, 16) == (INVALID_VALUE,)  # reserved, nothing mapped
    assert sim.cuMemMap(va, G, 0, handle, 0) == (OK,)
    assert sim.cuMemsetD8(va, 1, 16) == (INVALID_VALUE,)  # mapped, no access yet
    assert sim.cuMemGetAccess(_loc("DEVICE", 0), va) == (OK, 0)
    assert sim.cuMemSetAccess(va, G, [_desc()], 1) == (OK,)
    assert sim.cuMemGetAccess(_loc("DEVICE", 0), va) == (OK, 3)
    assert sim.cuMemGetAccess(_loc("DEVICE", 0), int(va) + G) == (OK, 0)  # nothing mapped there (as on an H200)
    assert sim.cuMemsetD8(va, 9, 16) == (OK,)
    out = bytearray(16)
    assert sim.cuMemcpyDtoH(out, va, 16) == (OK,)
    assert out == b"\x09" * 16
    assert sim.read(va, 4) == b"\x09" * 4  # kernels see it too
    _unmapped_all(sim, int(va), handle)


def test_one_physical_allocation_mapped_twice_shows_the_same_bytes(sim: SimulatedDriver) -> None:
    va, handle = _mapped(sim)
    _, va2 = sim.cuMemAddressReserve(G, 0, 0, 0)
    assert sim.cuMemMap(va2, G, 0, handle, 0) == (OK,)
    assert sim.cuMemSetAccess(va2, G, [_desc()], 1) == (OK,)
    assert sim.cuMemcpyHtoD(va, b"shared", 6) == (OK,)
    out = bytearray(6)
    assert sim.cuMemcpyDtoH(out, va2, 6) == (OK,)
    assert out == b"shared"
    assert sim.cuMemUnmap(va2, G) == (OK,)
    assert sim.cuMemAddressFree(va2, G) == (OK,)
    _unmapped_all(sim, va, handle)


def test_the_address_hint_is_not_followed_by_default(sim: SimulatedDriver) -> None:
    """As on an H200: a range asked for right after another lands elsewhere."""
    va, handle = _mapped(sim)
    err, va2 = sim.cuMemAddressReserve(G, 0, va + G, 0)
    assert err == OK
    assert int(va2) != va + G
    assert sim.cuMemAddressFree(va2, G) == (OK,)
    _unmapped_all(sim, va, handle)


def test_adjacent_ranges_make_one_span(sim: SimulatedDriver) -> None:
    sim.follow_address_hints = True
    va, handle = _mapped(sim)
    err, va2 = sim.cuMemAddressReserve(G, 0, va + G, 0)  # the hint: right after the first range
    assert err == OK
    assert int(va2) == va + G
    _, handle2 = sim.cuMemCreate(G, _prop(), 0)
    assert sim.cuMemMap(va2, G, 0, handle2, 0) == (OK,)
    assert sim.cuMemSetAccess(va2, G, [_desc()], 1) == (OK,)
    assert sim.cuMemsetD8(va + G - 8, 5, 16) == (OK,)  # across the two ranges
    assert sim.read(va + G - 8, 16) == b"\x05" * 16
    _unmapped_all(sim, int(va2), handle2)
    _unmapped_all(sim, va, handle)


def test_unmap_of_part_of_a_mapping_is_refused(sim: SimulatedDriver) -> None:
    va, handle = _mapped(sim, 2 * G)
    assert sim.cuMemUnmap(va, G) == (INVALID_VALUE,)
    assert sim.cuMemUnmap(va + G, G) == (INVALID_VALUE,)
    assert sim.cuMemSetAccess(va, G, [_desc()], 1) == (INVALID_VALUE,)
    assert sim.cuMemAddressFree(va, 2 * G) == (INVALID_VALUE,)  # still mapped
    _unmapped_all(sim, va, handle, 2 * G)


def test_released_physical_memory_lasts_until_its_last_mapping_goes(sim: SimulatedDriver) -> None:
    _, free0, _ = sim.cuMemGetInfo()
    va, handle = _mapped(sim)
    assert sim.cuMemRelease(handle) == (OK,)
    assert _kinds(sim) == ["address_range", "memory_mapping"]
    assert sim.cuMemGetInfo()[1] == free0 - G
    assert sim.cuMemsetD8(va, 3, 4) == (OK,)  # still usable through the mapping
    assert sim.cuMemMap(va, G, 0, handle, 0) == (INVALID_VALUE,)
    assert len(sim.use_after_release) == 1
    assert sim.cuMemRelease(handle) == (INVALID_VALUE,)
    assert len(sim.double_release) == 1
    assert sim.cuMemUnmap(va, G) == (OK,)
    assert sim.cuMemGetInfo()[1] == free0
    assert sim.cuMemAddressFree(va, G) == (OK,)
    assert sim.cuMemAddressFree(va, G) == (INVALID_VALUE,)
    assert len(sim.double_release) == 2
    assert _kinds(sim) == []


def test_cumemfree_refuses_an_address_range(sim: SimulatedDriver) -> None:
    va, handle = _mapped(sim)
    assert sim.cuMemFree(va) == (INVALID_VALUE,)
    assert sim.mappings() == [(va, G, int(handle))]
    _unmapped_all(sim, va, handle)


def test_unmap_while_a_stream_uses_the_memory_is_dangling(sim: SimulatedDriver) -> None:
    va, handle = _mapped(sim)
    _, stream = sim.cuStreamCreate(0)
    assert sim.cuMemsetD8Async(va, 1, 16, stream) == (OK,)
    assert sim.cuMemUnmap(va, G) == (OK,)
    assert len(sim.dangling) == 1
    assert sim.cuStreamDestroy(stream) == (OK,)
    assert sim.cuMemRelease(handle) == (OK,)
    assert sim.cuMemAddressFree(va, G) == (OK,)


def _prefetch(sim: SimulatedDriver, ptr: Any, n: int, loc: Any, stream: Any) -> Any:
    if BINDINGS_MAJOR >= 13:
        return sim.cuMemPrefetchAsync(ptr, n, loc, 0, stream)
    return sim.cuMemPrefetchAsync_v2(ptr, n, loc, 0, stream)


def _advise(sim: SimulatedDriver, ptr: Any, n: int, advice: int, loc: Any) -> Any:
    if BINDINGS_MAJOR >= 13:
        return sim.cuMemAdvise(ptr, n, advice, loc)
    return sim.cuMemAdvise_v2(ptr, n, advice, loc)


def test_prefetch_and_advice_of_managed_memory(sim: SimulatedDriver) -> None:
    err, ptr = sim.cuMemAllocManaged(4096, 1)
    assert err == OK
    _, stream = sim.cuStreamCreate(0)
    assert _prefetch(sim, ptr, 4096, _loc("DEVICE", 1), stream) == (OK,)
    assert sim.managed_state(ptr)["prefetched_to"] == (1, 1)
    assert _prefetch(sim, ptr, 4096, _loc("HOST"), stream) == (OK,)
    assert sim.managed_state(ptr)["prefetched_to"] == (2, 0)
    assert _prefetch(sim, ptr, 4096, _loc("DEVICE", 7), stream) == (R.CUDA_ERROR_INVALID_DEVICE,)
    assert _prefetch(sim, ptr, 8192, _loc("DEVICE", 0), stream) == (INVALID_VALUE,)  # past the allocation
    assert _advise(sim, ptr, 4096, 1, _loc("DEVICE", 0)) == (OK,)
    assert _advise(sim, ptr, 4096, 3, _loc("DEVICE", 0)) == (OK,)
    assert _advise(sim, ptr, 4096, 5, _loc("DEVICE", 1)) == (OK,)
    state = sim.managed_state(ptr)
    assert state["read_mostly"]
    assert state["preferred_location"] == (1, 0)
    assert state["accessed_by"] == {(1, 1)}
    assert _advise(sim, ptr, 4096, 9, _loc("DEVICE", 0)) == (INVALID_VALUE,)
    assert sim.cuStreamSynchronize(stream) == (OK,)
    assert sim.cuMemFree(ptr) == (OK,)
    assert _prefetch(sim, ptr, 4096, _loc("DEVICE", 0), stream) == (INVALID_VALUE,)
    assert len(sim.use_after_release) == 1
    assert sim.cuStreamDestroy(stream) == (OK,)


def test_prefetch_and_advice_of_memory_that_is_not_managed_are_refused(sim: SimulatedDriver) -> None:
    _, ptr = sim.cuMemAlloc(4096)
    _, stream = sim.cuStreamCreate(0)
    assert _prefetch(sim, ptr, 4096, _loc("DEVICE", 0), stream) == (INVALID_VALUE,)
    assert _advise(sim, ptr, 4096, 1, _loc("DEVICE", 0)) == (INVALID_VALUE,)
    with pytest.raises(ValueError, match="not the start of managed memory"):
        sim.managed_state(ptr)
    assert sim.cuStreamDestroy(stream) == (OK,)
    assert sim.cuMemFree(ptr) == (OK,)


@pytest.mark.contract("B3")
def test_leak_check_counts_ranges_physical_memory_and_mappings(sim: SimulatedDriver) -> None:
    from cuguard.errors import driver
    from cuguard.testing import leak_check

    with pytest.raises(AssertionError) as info, leak_check():
        va, handle = _mapped(driver)
    for kind in ("address_range", "physical_memory", "memory_mapping"):
        assert kind in str(info.value)
    _unmapped_all(driver, va, handle)
    with leak_check():  # made and released inside: nothing to report
        va, handle = _mapped(driver)
        _unmapped_all(driver, va, handle)
