"""The simulated driver counts destroying a memory pool with allocations outstanding as misuse.

The driver accepts the call (the pool goes once its last allocation is freed), but an H200 process
died later in a pool allocation after it, so cuguard destroys a pool only after its buffers and the
sweeps must see any call that does otherwise. scripts/differential.py probes the orders on a GPU
(pool_freed_then_destroyed_then_new_pool, pool_destroyed_then_freed_then_new_pool,
pool_destroyed_with_buffers_leaked_then_new_pool).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._sim import SimulatedDriver, simulated_driver

pytestmark = pytest.mark.contract("B2", "S2")

OK = cb.CUresult.CUDA_SUCCESS


@pytest.fixture
def sim() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=1) as drv:
        assert drv.cuInit(0) == (OK,)
        err, ctx = drv.cuDevicePrimaryCtxRetain(0)
        assert err == OK
        assert drv.cuCtxSetCurrent(ctx) == (OK,)
        yield drv
        drv.cuCtxSetCurrent(cb.CUcontext(0))
        drv.cuDevicePrimaryCtxRelease(0)


def _pool_and_stream(sim: SimulatedDriver) -> tuple[Any, Any]:
    props = cb.CUmemPoolProps()
    props.allocType = cb.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = 0
    props.handleTypes = cb.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    err, pool = sim.cuMemPoolCreate(props)
    assert err == OK
    err, stream = sim.cuStreamCreate(0)
    assert err == OK
    return pool, stream


def test_destroying_a_pool_with_an_allocation_outstanding_is_misuse(sim: SimulatedDriver) -> None:
    pool, stream = _pool_and_stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(512, pool, stream)
    assert err == OK
    assert sim.cuMemPoolDestroy(pool) == (OK,)  # accepted, as by the real driver
    assert [(i.call, i.handle) for i in sim.misuse] == [("cuMemPoolDestroy", int(pool))]
    assert "1 allocation(s) outstanding" in sim.misuse[0].description
    assert sim.cuMemFree(ptr) == (OK,)  # the memory stays valid until freed
    assert sim.cuStreamDestroy(stream) == (OK,)


def test_destroying_a_pool_after_its_frees_is_not(sim: SimulatedDriver) -> None:
    pool, stream = _pool_and_stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(512, pool, stream)
    assert err == OK
    assert sim.cuMemFreeAsync(ptr, stream) == (OK,)  # queued: the order cuguard uses
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.misuse == []
    assert sim.cuStreamSynchronize(stream) == (OK,)
    assert sim.cuStreamDestroy(stream) == (OK,)
