"""Kernels on the simulated driver: stand-ins, and no silent success without one (B2)."""

from __future__ import annotations

import ctypes
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from cuda.bindings import driver as cb

from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, LaunchConfig, Module, launch
from cuguard.testing import (
    DevicePointer,
    KernelLaunch,
    MissingStandInError,
    SimulatedCrash,
    SimulatedDriver,
    register_stand_in,
    remove_stand_in,
    stand_in,
)

PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry nothing(.param .u64 p) { ret; }
.visible .entry saxpy(.param .u64 y, .param .u64 x, .param .f32 a, .param .u32 n)
{
    ld.param.u64 %rd1, [y];
    ret;
}
.visible .entry unregistered(.param .u64 p)
{
    ld.param.u64 %rd1, [p];
    ret;
}
"""

SEEN: list[KernelLaunch] = []


@stand_in("saxpy")
def saxpy(launch: KernelLaunch, y: DevicePointer, x: DevicePointer, a: float, n: int) -> None:
    SEEN.append(launch)
    ys = y.array(np.float32, n)
    ys += a * x.array(np.float32, n)


@pytest.fixture
def module(sim: SimulatedDriver) -> Iterator[Module]:
    SEEN.clear()
    dev = Device(0)
    mod = dev.load_module(PTX)
    yield mod
    mod.close()


def _upload(dev: Device, values: list[float]) -> Any:
    buf = dev.allocate(4 * len(values))
    buf.copy_from(np.array(values, dtype=np.float32).tobytes())
    return buf


def _download(buf: Any, n: int) -> list[float]:
    host = bytearray(4 * n)
    buf.copy_to(host)
    return [float(v) for v in np.frombuffer(host, dtype=np.float32)]


@pytest.mark.contract("B2")
def test_a_stand_in_gets_the_launch_and_the_arguments_as_the_kernel_declares_them(module: Module) -> None:
    dev = Device(0)
    y, x = _upload(dev, [1, 2, 3, 4]), _upload(dev, [10, 20, 30, 40])
    with dev.create_stream() as stream:
        launch(stream, LaunchConfig(grid=(2, 1), block=(2, 1, 1)), module.get_kernel("saxpy"), y, x, 0.5, 4)
        stream.sync()
    assert _download(y, 4) == [6, 12, 18, 24]
    (seen,) = SEEN
    assert (seen.kernel, seen.grid, seen.block, seen.shared_mem, seen.threads) == ("saxpy", (2, 1, 1), (2, 1, 1), 0, 4)
    assert isinstance(seen.driver, SimulatedDriver)
    y.close()
    x.close()


@pytest.mark.contract("B2")
def test_a_kernel_without_a_stand_in_raises_at_the_launch_and_queues_nothing(
    sim: SimulatedDriver, module: Module
) -> None:
    dev = Device(0)
    with dev.create_stream() as stream, dev.allocate(16) as buf:
        with pytest.raises(MissingStandInError, match=r"'unregistered'.*stand_in\('unregistered'\)") as info:
            launch(stream, LaunchConfig(1, 1), module.get_kernel("unregistered"), buf)
        assert info.value.kernel == "unregistered"
        assert isinstance(info.value, NotImplementedError)
        assert pickle.loads(pickle.dumps(info.value)).kernel == "unregistered"
        # A kernel whose body is only `ret;` does nothing on a GPU either: no stand-in needed.
        launch(stream, LaunchConfig(1, 1), module.get_kernel("nothing"), buf)
        stream.sync()


@pytest.mark.contract("B2")
def test_a_graph_with_such_a_kernel_node_raises_at_its_launch(sim: SimulatedDriver, module: Module) -> None:
    dev = Device(0)
    with dev.create_stream() as stream, dev.allocate(16) as buf:
        definition = GraphDefinition(dev)
        definition.launch(LaunchConfig(1, 1), module.get_kernel("unregistered"), buf)
        graph = definition.instantiate()
        with pytest.raises(MissingStandInError):
            graph.launch(stream)
        register_stand_in("unregistered", lambda launch, p: DevicePointer(p, sim).write(b"\x07"))
        try:
            graph.launch(stream)
            stream.sync()
        finally:
            assert remove_stand_in("unregistered")
        host = bytearray(16)
        buf.copy_to(host)
        assert host[0] == 7
        graph.close()
        definition.close()


@pytest.mark.contract("B2")
def test_a_driver_s_own_emulation_wins_and_registration_checks_its_arguments(
    sim: SimulatedDriver, module: Module
) -> None:
    dev = Device(0)
    calls: list[tuple[Any, ...]] = []
    sim.register_kernel("saxpy", lambda s, *args: calls.append(args))
    with dev.create_stream() as stream, dev.allocate(16) as y:
        launch(stream, LaunchConfig(1, 1), module.get_kernel("saxpy"), y, y, 1.0, 4)
        stream.sync()
    assert len(calls) == 1
    assert SEEN == []
    with pytest.raises(TypeError, match="non-empty str"):
        stand_in("")
    with pytest.raises(TypeError, match="callable"):
        register_stand_in("k", 3)  # type: ignore[arg-type]
    assert remove_stand_in("never-registered") is False


@pytest.mark.contract("B2")
def test_a_stand_in_that_touches_memory_outside_any_allocation_faults_the_launch(sim: SimulatedDriver) -> None:
    from cuguard.errors import StickyCUDAError

    dev = Device(0)
    register_stand_in("unregistered", lambda launch, p: p.write(b"\x01", offset=1 << 20))
    try:
        module = dev.load_module(PTX)
        stream, buf = dev.create_stream(), dev.allocate(16)
        launch(stream, LaunchConfig(1, 1), module.get_kernel("unregistered"), buf)
        with pytest.raises(StickyCUDAError, match="ILLEGAL_ADDRESS"):
            stream.sync()
        for obj in (buf, stream, module):  # the driver refuses all work now: each is leaked, and says so
            with pytest.raises(StickyCUDAError, match="leaked"):
                obj.close()
    finally:
        remove_stand_in("unregistered")


@pytest.mark.contract("B2")
def test_the_simulator_reports_parameter_offsets_and_sizes_from_ptx(sim: SimulatedDriver) -> None:
    sim.cuInit(0)
    _, dev = sim.cuDeviceGet(0)
    _, ctx = sim.cuCtxCreate(None, 0, dev) if _major() >= 13 else sim.cuCtxCreate(0, dev)
    _, mod = sim.cuModuleLoadData(PTX)
    _, fn = sim.cuModuleGetFunction(mod, b"saxpy")
    layout = [sim.cuFuncGetParamInfo(fn, i) for i in range(4)]
    assert [(int(err), off, size) for err, off, size in layout] == [(0, 0, 8), (0, 8, 8), (0, 16, 4), (0, 20, 4)]
    assert sim.cuFuncGetParamInfo(fn, 4)[0] == cb.CUresult.CUDA_ERROR_INVALID_VALUE
    # Too few arguments: the real driver reads past the argument array (a crash), never a launch.
    _, stream = sim.cuStreamCreate(0)
    register_stand_in("saxpy", lambda *a: None)
    with pytest.raises(SimulatedCrash):
        sim.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, ((1, 2), (ctypes.c_uint64, ctypes.c_uint64)), 0)
    register_stand_in("saxpy", saxpy)
    sim.cuStreamDestroy(stream)
    sim.cuModuleUnload(mod)
    sim.cuCtxDestroy(ctx)


def _major() -> int:
    import cuda.bindings

    return int(str(cuda.bindings.__version__).split(".")[0])
