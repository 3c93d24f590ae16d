"""The simulated driver's cuLaunchKernelEx (cluster and cooperative attributes) and occupancy calculator."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from cuda.bindings import driver as cb

from cuguard.testing._sim import SimulatedDriver, simulated_driver

R = cb.CUresult
OK = R.CUDA_SUCCESS
PTX = b".version 8.0\n.target sm_90\n.visible .entry fill(.param .u64 p, .param .u32 v, .param .u32 n)\n{ ret; }\n"


@pytest.fixture
def drv() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=1) as sim:
        sim.cuInit(0)
        _, ctx = sim.cuDevicePrimaryCtxRetain(0)
        sim.cuCtxSetCurrent(ctx)
        yield sim


@pytest.fixture
def fn(drv: SimulatedDriver) -> Iterator[Any]:
    def fill(sim: SimulatedDriver, ptr: int, value: int, n: int) -> None:
        sim.write(ptr, np.full(n, value, dtype=np.uint32).tobytes())

    drv.register_kernel("fill", fill)
    _, module = drv.cuModuleLoadData(PTX)
    _, function = drv.cuModuleGetFunction(module, b"fill")
    yield function
    drv.cuModuleUnload(module)


def _config(grid: tuple[int, int, int], block: int, *, cluster: Any = None, cooperative: bool = False) -> Any:
    config = cb.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes = 0
    config.hStream = cb.CUstream(0)
    attrs = []
    if cluster is not None:
        attr = cb.CUlaunchAttribute()
        attr.id = cb.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        attrs.append(attr)
    if cooperative:
        attr = cb.CUlaunchAttribute()
        attr.id = cb.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attrs.append(attr)
    config.attrs = attrs
    config.numAttrs = len(attrs)
    return config


def test_launch_ex_runs_the_kernel(drv: SimulatedDriver, fn: Any) -> None:
    _, ptr = drv.cuMemAlloc(16)
    params = ((ptr, 9, 4), (None, ctypes.c_uint32, ctypes.c_uint32))
    assert drv.cuLaunchKernelEx(_config((2, 1, 1), 32, cluster=(2, 1, 1)), fn, params, 0) == (OK,)
    assert np.frombuffer(drv.read(ptr, 16), np.uint32).tolist() == [9] * 4
    drv.cuMemFree(ptr)


def test_cluster_rules(drv: SimulatedDriver, fn: Any) -> None:
    params = ((0, 0, 0), (None, ctypes.c_uint32, ctypes.c_uint32))
    bad = R.CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert drv.cuLaunchKernelEx(_config((3, 1, 1), 32, cluster=(2, 1, 1)), fn, params, 0) == (bad,)
    assert drv.cuLaunchKernelEx(_config((16, 1, 1), 32, cluster=(16, 1, 1)), fn, params, 0) == (bad,)
    assert drv.cuLaunchKernelEx(None, fn, params, 0) == (R.CUDA_ERROR_INVALID_VALUE,)
    key = int(cb.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)
    drv._attributes[key] = 0
    try:
        assert drv.cuLaunchKernelEx(_config((2, 1, 1), 32, cluster=(2, 1, 1)), fn, params, 0) == (
            R.CUDA_ERROR_NOT_SUPPORTED,
        )
    finally:
        drv._attributes[key] = 1


def test_cooperative_grid_must_fit(drv: SimulatedDriver, fn: Any) -> None:
    params = ((0, 0, 0), (None, ctypes.c_uint32, ctypes.c_uint32))
    err, per_sm = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, 32, 0)
    assert err == OK
    assert per_sm == 32
    fits = _config((per_sm * 132, 1, 1), 32, cooperative=True)
    assert drv.cuLaunchKernelEx(fits, fn, params, 0) == (OK,)
    too_large = _config((per_sm * 132 + 1, 1, 1), 32, cooperative=True)
    assert drv.cuLaunchKernelEx(too_large, fn, params, 0) == (R.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,)
    drv.cuCtxSynchronize()


def test_occupancy(drv: SimulatedDriver, fn: Any) -> None:
    assert drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, 1024, 0) == (OK, 2)
    assert drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, 2048, 0) == (OK, 0)
    assert drv.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(fn, 256, 0, 1) == (OK, 8)
    assert drv.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(fn, 256, 0, 7)[0] == R.CUDA_ERROR_INVALID_VALUE
    err, min_grid, block = drv.cuOccupancyMaxPotentialBlockSize(fn, None, 0, 0)
    assert err == OK
    assert block == 1024
    assert min_grid == 2 * 132
    assert drv.cuOccupancyMaxPotentialBlockSize(fn, None, 0, 100)[2] == 64  # 32 blocks of 64: full
    assert drv.cuOccupancyAvailableDynamicSMemPerBlock(fn, 1, 256) == (OK, 49152)
    assert drv.cuOccupancyAvailableDynamicSMemPerBlock(fn, 8, 256) == (OK, 233472 // 8 - 1024)
    assert drv.cuOccupancyAvailableDynamicSMemPerBlock(fn, 3, 1024) == (OK, 0)
    assert drv.cuOccupancyMaxPotentialClusterSize(fn, _config((8, 1, 1), 256)) == (OK, 8)
    assert drv.cuOccupancyMaxActiveClusters(fn, _config((2, 1, 1), 256, cluster=(2, 1, 1))) == (OK, 8 * 132 // 2)
    assert drv.cuOccupancyMaxActiveClusters(fn, _config((2, 1, 1), 256))[0] == R.CUDA_ERROR_INVALID_CLUSTER_SIZE
