"""A stand-in that raises names its kernel and chains its exception (E1); fault plans take only CUDA statuses (E3)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cuda.bindings import driver as cb

from cuguard.errors import StickyCUDAError, attribute_faults, first_sticky_fault
from cuguard.resources import Device, LaunchConfig, launch
from cuguard.testing import (
    KernelLaunch,
    SimulatedDriver,
    inject,
    record_calls,
    register_stand_in,
    remove_stand_in,
    restore_fault,
    sticky,
)

PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry divide(.param .u64 out, .param .u32 by)
{
    ld.param.u64 %rd1, [out];
    ret;
}
"""


class StandInBug(Exception):
    """What the stand-in under test raises."""


def _divide(launch: KernelLaunch, out: Any, by: int) -> None:
    if by == 0:
        raise StandInBug("the stand-in divided by zero")
    out.write(int(100 // by).to_bytes(4, "little"))


@pytest.fixture
def divide(sim: SimulatedDriver) -> Any:
    register_stand_in("divide", _divide)
    try:
        yield Device(0).load_module(PTX).get_kernel("divide")
    finally:
        remove_stand_in("divide")


@pytest.mark.contract("E1")
def test_a_stand_in_that_raises_fails_the_launch_naming_the_kernel_and_chaining_the_exception(
    sim: SimulatedDriver, divide: Any
) -> None:
    dev = Device(0)
    stream, buf = dev.create_stream(), dev.allocate(4)
    launch(stream, LaunchConfig(1, 1), divide, buf, np.uint32(5))
    stream.sync()  # a stand-in that works changes nothing
    assert sim.sticky_cause(cb.CUresult.CUDA_ERROR_LAUNCH_FAILED) is None
    launch(stream, LaunchConfig(1, 1), divide, buf, np.uint32(0))
    with pytest.raises(StickyCUDAError) as info:
        stream.sync()  # the fault surfaces at the next synchronization, as a GPU's would
    error = info.value
    assert error.name == "CUDA_ERROR_LAUNCH_FAILED"
    assert error.call == "cuStreamSynchronize"
    assert "kernel 'divide'" in str(error)
    assert "StandInBug: the stand-in divided by zero" in str(error)
    assert isinstance(error.__cause__, StandInBug)
    assert sim.kernel_errors == [error.__cause__]
    # Every later refusal still names the kernel and chains the same exception (E5).
    with pytest.raises(StickyCUDAError) as later:
        dev.allocate(4)
    assert "kernel 'divide'" in str(later.value)
    assert later.value.__cause__ is error.__cause__
    assert first_sticky_fault() is not None


@pytest.mark.contract("E1")
def test_with_attribution_the_launch_itself_raises_with_the_kernel_and_the_cause(
    sim: SimulatedDriver, divide: Any
) -> None:
    dev = Device(0)
    stream, buf = dev.create_stream(), dev.allocate(4)
    with attribute_faults(), pytest.raises(StickyCUDAError) as info:
        launch(stream, LaunchConfig(1, 1), divide, buf, 0)
    assert info.value.launch is not None
    assert "divide" in info.value.launch
    assert "its stand-in raised StandInBug" in str(info.value)
    assert isinstance(info.value.__cause__, StandInBug)


@pytest.mark.contract("E1")
def test_a_fault_that_is_not_a_raising_stand_in_is_not_given_its_cause(sim: SimulatedDriver, divide: Any) -> None:
    dev = Device(0)
    stream, buf = dev.create_stream(), dev.allocate(4)
    launch(stream, LaunchConfig(1, 1), divide, buf, 0)
    sim.poison(None)  # the simulator's reset: the stand-in's fault is gone
    sim.poison(cb.CUresult.CUDA_ERROR_LAUNCH_FAILED)  # another fault with the same status
    with pytest.raises(StickyCUDAError) as info:
        stream.sync()
    assert "divide" not in str(info.value)
    assert info.value.__cause__ is None


NOT_STATUSES: list[Any] = [12345, -1, 0, cb.CUresult.CUDA_SUCCESS, np.int64(99999)]
NOT_INTEGERS: list[Any] = [True, 1.5, np.float64(2), "CUDA_ERROR_OUT_OF_MEMORY", None]


@pytest.mark.contract("E3")
@pytest.mark.parametrize("code", NOT_STATUSES, ids=repr)
def test_fault_plans_refuse_codes_that_are_not_failing_cuda_statuses_at_the_call(
    sim: SimulatedDriver, code: Any
) -> None:
    with record_calls() as log:
        for plan in (lambda: inject("cuMemAlloc", code), lambda: sticky(code), lambda: restore_fault(code)):
            with pytest.raises(ValueError, match=rf"code must be .*{int(code)}|CUDA_SUCCESS"):
                plan()
    assert log == []


@pytest.mark.contract("E3")
@pytest.mark.parametrize("code", NOT_INTEGERS, ids=repr)
def test_fault_plans_refuse_codes_that_are_not_integers(sim: SimulatedDriver, code: Any) -> None:
    for plan in (lambda: inject("cuMemAlloc", code), lambda: sticky(code), lambda: restore_fault(code)):
        with pytest.raises(TypeError, match="code must be a CUresult or an int"):
            plan()


@pytest.mark.contract("E3")
def test_fault_plans_take_a_cuda_status_as_a_curesult_an_int_or_a_numpy_integer(sim: SimulatedDriver) -> None:
    dev = Device(0)
    for code in (cb.CUresult.CUDA_ERROR_OUT_OF_MEMORY, 2, np.int32(2)):
        with inject("cuMemAlloc", code) as plan, pytest.raises(Exception, match="CUDA_ERROR_OUT_OF_MEMORY"):
            dev.allocate(16)
        assert plan.fired == 1
        assert type(plan.code) is int
    with pytest.raises(ValueError, match="nth must be 1 or more"):
        inject("cuMemAlloc", 2, nth=0)
    with pytest.raises(TypeError, match="nth must be an int"):
        inject("cuMemAlloc", 2, nth=1.0)  # type: ignore[arg-type]
