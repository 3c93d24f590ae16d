"""LaunchConfig with cuda.core's keywords, cluster and cooperative launches, kernel attributes and occupancy."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from cuda.bindings.driver import CUdevice_attribute, CUresult

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.resources import (
    Device,
    Kernel,
    LaunchConfig,
    MaxPotentialBlockSizeOccupancyResult,
    Module,
    launch,
)
from cuguard.testing import SimulatedDriver, inject


@pytest.fixture
def fill(module: Module) -> Kernel:
    return module.get_kernel("fill_u32")


def _run_fill(device: Device, kernel: Kernel, config: LaunchConfig, n: int) -> list[int]:
    with device.create_stream() as stream, device.allocate(4 * n) as buf:
        launch(stream, config, kernel, buf, np.uint32(7), n)
        out = bytearray(4 * n)
        buf.copy_to(out, stream)
        stream.sync()
    return np.frombuffer(bytes(out), np.uint32).tolist()


@pytest.mark.contract("E3")
def test_launch_config_takes_cuda_core_keywords() -> None:
    config = LaunchConfig(grid=(2, 1), block=32, shmem_size=128)
    assert config.shmem_size == config.shared_mem == 128
    assert config == LaunchConfig(grid=(2, 1), block=32, shared_mem=128)
    assert hash(config) == hash(LaunchConfig(grid=(2, 1), block=32, shared_mem=128))
    assert config.dims() == (2, 1, 1, 32, 1, 1)
    clustered = LaunchConfig(grid=(3, 2), cluster=(2, 1), block=64)
    assert clustered.dims() == (6, 2, 1, 64, 1, 1)  # grid counts clusters, as in cuda.core
    assert clustered != LaunchConfig(grid=(6, 2), block=64)
    coop = LaunchConfig(grid=4, block=32, is_cooperative=True)
    assert coop.cooperative_launch
    assert coop.is_cooperative
    assert pickle.loads(pickle.dumps(clustered)) == clustered
    assert LaunchConfig(1, 32).dims() == (1, 1, 1, 32, 1, 1)  # grid and block by position still work
    with pytest.raises(TypeError):
        LaunchConfig(1, 2, 32)  # type: ignore[misc]  # cuda.core's positional (grid, cluster, block)
    with pytest.raises(ValueError, match="cluster"):
        LaunchConfig(cluster=0)
    with pytest.raises(ValueError, match="shmem_size"):
        LaunchConfig(shmem_size=-1)
    with pytest.raises(ValueError, match="shmem_size"):
        LaunchConfig(shmem_size=8, shared_mem=16)
    with pytest.raises(TypeError, match="cooperative_launch"):
        LaunchConfig(cooperative_launch=1)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        config.grid = 4  # type: ignore[misc]


def test_cluster_launch_runs(device: Device, fill: Kernel) -> None:
    assert _run_fill(device, fill, LaunchConfig(grid=2, cluster=2, block=8), 32) == [7] * 32


def test_cooperative_launch_runs(device: Device, fill: Kernel) -> None:
    assert _run_fill(device, fill, LaunchConfig(grid=2, block=16, cooperative_launch=True), 32) == [7] * 32


@pytest.mark.contract("E3")
def test_cooperative_grid_that_does_not_fit_is_refused_before_the_launch(device: Device, fill: Kernel) -> None:
    per_sm = fill.occupancy.max_active_blocks_per_multiprocessor(32, 0)
    sms = device.attribute(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    config = LaunchConfig(grid=per_sm * sms + 1, block=32, cooperative_launch=True)
    with device.create_stream() as stream, device.allocate(4) as buf:
        # reaching the launch would fail: the refusal comes first
        with inject("cuLaunchKernelEx", CUresult.CUDA_ERROR_UNKNOWN, nth=1), pytest.raises(ValueError, match="coop"):
            launch(stream, config, fill, buf, 7, 1)
        stream.sync()


@pytest.fixture
def compute_8(cuguard_driver: Any) -> Iterator[None]:
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("changes the simulated device's compute capability")
    key = int(CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    table = cuguard_driver._attributes
    saved = table[key]
    table[key] = 8
    yield
    table[key] = saved


@pytest.mark.contract("E3")
def test_cluster_launch_needs_compute_capability_9(device: Device, fill: Kernel, compute_8: None) -> None:
    with device.create_stream() as stream, device.allocate(64) as buf:
        with pytest.raises(ValueError, match=r"compute capability 9\.0"):
            launch(stream, LaunchConfig(grid=1, cluster=2, block=8), fill, buf, 7, 16)
        launch(stream, LaunchConfig(grid=2, block=8), fill, buf, 7, 16)  # a plain launch still works
        stream.sync()


@pytest.mark.contract("E1")
def test_refused_extended_launch_raises_cuda_error(device: Device, fill: Kernel) -> None:
    with device.create_stream() as stream, device.allocate(64) as buf:
        refused = CUresult.CUDA_ERROR_INVALID_CLUSTER_SIZE
        with inject("cuLaunchKernelEx", refused, nth=1), pytest.raises(CUDAError) as info:
            launch(stream, LaunchConfig(grid=1, cluster=2, block=8), fill, buf, 7, 16)
        assert info.value.call == "cuLaunchKernelEx"
        assert info.value.name == "CUDA_ERROR_INVALID_CLUSTER_SIZE"
        stream.sync()


def test_kernel_attributes(device: Device, fill: Kernel) -> None:
    attributes = fill.attributes
    assert 0 < attributes.max_threads_per_block() <= 1024
    assert attributes.num_regs() >= 0
    assert attributes.shared_size_bytes() == 0
    assert attributes.local_size_bytes() >= 0
    assert attributes.max_dynamic_shared_size_bytes() >= 0
    assert attributes.cluster_size_must_be_set() is False
    assert attributes.required_cluster_width() == 0
    assert attributes.max_threads_per_block(device) == attributes.max_threads_per_block(0)


@pytest.mark.contract("E3")
def test_kernel_attributes_refuse_another_device_and_a_closed_module(device: Device, module: Module) -> None:
    kernel = module.get_kernel("fill_u32")
    with pytest.raises(ValueError, match="device"):
        kernel.attributes.num_regs(1)
    with pytest.raises(TypeError, match="device_id"):
        kernel.attributes.num_regs("0")
    module.close()
    with pytest.raises(ResourceClosedError):
        kernel.attributes.num_regs()
    with pytest.raises(ResourceClosedError):
        kernel.occupancy.max_active_blocks_per_multiprocessor(32)


def test_occupancy(device: Device, fill: Kernel) -> None:
    occupancy = fill.occupancy
    assert occupancy.max_active_blocks_per_multiprocessor(64, 0) >= 1
    result = occupancy.max_potential_block_size(0, 0)
    assert isinstance(result, MaxPotentialBlockSizeOccupancyResult)
    assert 0 < result.max_block_size <= 1024
    assert result.max_block_size % 32 == 0
    assert result.min_grid_size >= 1
    assert occupancy.max_potential_block_size(0, 128).max_block_size <= 128
    clusters = occupancy.max_active_clusters(LaunchConfig(grid=1, cluster=2, block=64))
    assert clusters >= 1
    with device.create_stream() as stream:
        assert occupancy.max_active_clusters(LaunchConfig(grid=1, cluster=2, block=64), stream) == clusters
    assert occupancy.max_potential_cluster_size(LaunchConfig(grid=8, block=64)) >= 8
    one = occupancy.available_dynamic_shared_memory_per_block(1, 64)
    assert one >= occupancy.available_dynamic_shared_memory_per_block(8, 64) >= 0


@pytest.mark.contract("E3")
def test_occupancy_checks_its_arguments(device: Device, fill: Kernel) -> None:
    with pytest.raises(TypeError, match="block_size"):
        fill.occupancy.max_active_blocks_per_multiprocessor(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block_size"):
        fill.occupancy.max_active_blocks_per_multiprocessor(0)
    with pytest.raises(ValueError, match="dynamic_shared_memory_size"):
        fill.occupancy.max_active_blocks_per_multiprocessor(32, -1)
    with pytest.raises(TypeError, match="block_size_limit"):
        fill.occupancy.max_potential_block_size(0, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cluster"):
        fill.occupancy.max_active_clusters(LaunchConfig(grid=1, block=32))
    with pytest.raises(TypeError, match="config"):
        fill.occupancy.max_active_clusters(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="stream"):
        fill.occupancy.max_active_clusters(LaunchConfig(cluster=2), 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_blocks_per_multiprocessor"):
        fill.occupancy.available_dynamic_shared_memory_per_block(0, 32)
