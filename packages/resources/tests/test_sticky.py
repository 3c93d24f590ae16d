"""Sticky faults that name their cause (contract E5), on the simulated driver.

A simulated kernel fault surfaces at the next synchronizing call, as on a GPU.
The real-GPU counterpart, with faulting kernels in their own processes, is
``scripts/gpu-sticky.py``.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import KERNELS_PTX, _emulate

from cuguard.context import Context
from cuguard.errors import CUDAError, StickyCUDAError, attribute_faults, first_sticky_fault
from cuguard.errors.lowlevel import attributing
from cuguard.resources import Device, LaunchConfig, Module, launch
from cuguard.testing import SimulatedDriver, inject, sticky


@pytest.fixture
def faulting(sim: SimulatedDriver) -> Iterator[tuple[Device, Module]]:
    _emulate(sim)
    dev = Device(0)
    yield dev, dev.load_module(KERNELS_PTX)
    sim.poison(None)  # a test convenience only: a real driver never recovers


@pytest.mark.contract("E5", "E4")
def test_a_sticky_status_is_a_sticky_error_that_pickles(sim: SimulatedDriver) -> None:
    error = CUDAError(700, "cuStreamSynchronize")
    assert type(error) is StickyCUDAError
    assert isinstance(error, CUDAError)
    assert error.is_sticky
    assert type(CUDAError(2, "cuMemAlloc")) is CUDAError
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is StickyCUDAError
    assert (str(again), again.launch, again.first_fault) == (str(error), error.launch, error.first_fault)


@pytest.mark.contract("E5")
def test_every_error_after_a_kernel_fault_names_the_first_fault(
    sim: SimulatedDriver, faulting: tuple[Device, Module]
) -> None:
    dev, module = faulting
    stream = dev.create_stream()
    launch(stream, LaunchConfig(), module.get_kernel("poke"), 8)  # writes outside any allocation
    assert first_sticky_fault() is None  # not surfaced yet: the launch itself succeeds
    with pytest.raises(StickyCUDAError) as first:
        stream.sync()
    assert first.value.first_fault is None
    assert first.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert first_sticky_fault() == "cuStreamSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS"
    for action in (lambda: dev.allocate(16), dev.create_stream, dev.sync, stream.sync):
        with pytest.raises(StickyCUDAError) as later:
            action()
        assert later.value.first_fault == first_sticky_fault()
        assert "since the first fault: cuStreamSynchronize failed" in str(later.value)
    previous = Context.primary(0).set_current()  # the driver is still asked: calls it answers still work
    assert Context.current() == Context.primary(0)
    assert previous is None
    sim.poison(None)  # a test convenience only, so that the stream can be released
    stream.close()


@pytest.mark.contract("E5")
def test_attribution_names_the_launch_that_faulted(sim: SimulatedDriver, faulting: tuple[Device, Module]) -> None:
    dev, module = faulting
    stream = dev.create_stream()
    buf = dev.allocate(64)
    with attribute_faults():
        assert attributing()
        launch(stream, LaunchConfig(block=4), module.get_kernel("fill_u32"), buf, 7, 4)  # a good launch
        with pytest.raises(StickyCUDAError) as info:
            launch(stream, LaunchConfig(grid=2), module.get_kernel("poke"), 8)
    assert not attributing()
    assert info.value.launch is not None
    assert "'poke'" in info.value.launch
    assert "grid (2, 1, 1)" in info.value.launch
    with pytest.raises(StickyCUDAError) as later:
        dev.allocate(16)
    assert later.value.first_fault is not None
    assert "'poke'" in later.value.first_fault
    sim.poison(None)  # a test convenience only, so that what the test made can be released
    buf.close()
    stream.close()


@pytest.mark.contract("E5", "B1")
def test_an_injected_sticky_status_is_not_the_drivers_first_fault(
    sim: SimulatedDriver, faulting: tuple[Device, Module]
) -> None:
    dev, _ = faulting
    with sticky(700), pytest.raises(StickyCUDAError):
        dev.allocate(16)
    with inject("cuMemAlloc", 719), pytest.raises(StickyCUDAError):
        dev.allocate(16)
    assert first_sticky_fault() is None
    dev.allocate(16).close()  # the driver itself was never sticky


@pytest.mark.contract("E5")
def test_the_environment_variable_turns_attribution_on() -> None:
    env = {**os.environ, "CUGUARD_ATTRIBUTE_FAULTS": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    code = "from cuguard.errors import attributing; print(attributing())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    env["CUGUARD_ATTRIBUTE_FAULTS"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.contract("E3")
def test_the_attribution_helpers_refuse_wrong_arguments_before_the_driver(sim: SimulatedDriver) -> None:
    from cuguard.errors import ResourceClosedError
    from cuguard.resources import describe_launch, wait_attributed
    from cuguard.testing import record_calls

    stream = Device(0).create_stream()
    stream.close()
    with record_calls() as log:
        with pytest.raises(TypeError, match="stream must be a Stream"):
            wait_attributed(None, lambda: "x")  # type: ignore[arg-type]
        with pytest.raises(ResourceClosedError):
            wait_attributed(stream, lambda: "x")
        with pytest.raises(TypeError, match="config must be a LaunchConfig"):
            describe_launch("k", None, ())  # type: ignore[arg-type]
    assert log == []
