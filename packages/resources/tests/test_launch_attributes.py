"""LaunchConfig's launch priority and programmatic stream serialization, with cuda.core's keywords.

Each is checked against the stream's device before the driver (ValueError saying why), then sent with
``cuLaunchKernelEx``. On the simulated driver by default and on a GPU with ``--cuguard-driver=real``.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from cuda.bindings.driver import CUdevice_attribute, CUlaunchAttributeID, CUresult

from cuguard.context import Context
from cuguard.errors import CUDAError, driver
from cuguard.resources import Device, Kernel, LaunchConfig, Module, launch
from cuguard.testing import SimulatedDriver, inject, record_calls

_ID = CUlaunchAttributeID


@pytest.fixture
def fill(module: Module) -> Kernel:
    return module.get_kernel("fill_u32")


def _priority_range(device: Device) -> tuple[int, int]:
    """``(greatest, least)``: the lowest and highest number a launch priority may take on ``device``."""
    with device:
        err, least, greatest = driver.cuCtxGetStreamPriorityRange()
    assert not err
    return int(greatest), int(least)


def _attributes(call: Any) -> dict[int, Any]:
    """The launch attributes of a recorded ``cuLaunchKernelEx`` call, by id."""
    config = call.args[0]
    return {int(a.id): a.value for a in list(config.attrs)[: int(config.numAttrs)]}


def _launch_and_read(device: Device, kernel: Kernel, config: LaunchConfig, n: int = 16) -> tuple[list[int], Any]:
    with device.create_stream() as stream, device.allocate(4 * n) as buf:
        with record_calls() as log:
            launch(stream, config, kernel, buf, np.uint32(7), n)
        out = bytearray(4 * n)
        buf.copy_to(out, stream)
        stream.sync()
    ex = [c for c in log if c.name == "cuLaunchKernelEx"]
    return np.frombuffer(bytes(out), np.uint32).tolist(), ex


@pytest.mark.contract("E3")
def test_keywords_values_and_identity() -> None:
    config = LaunchConfig(grid=2, block=32, priority=-1, programmatic_stream_serialization=True)
    assert config.priority == -1
    assert config.programmatic_stream_serialization is True
    assert LaunchConfig(grid=2, block=32).priority is None
    assert LaunchConfig(grid=2, block=32).programmatic_stream_serialization is False
    assert config == LaunchConfig(grid=2, block=32, priority=np.int32(-1), programmatic_stream_serialization=True)
    assert config != LaunchConfig(grid=2, block=32, priority=-1)
    assert config != LaunchConfig(grid=2, block=32, programmatic_stream_serialization=True)
    assert LaunchConfig(priority=0) == LaunchConfig()  # 0 leaves the stream's priority, as None does
    assert hash(LaunchConfig(priority=0)) == hash(LaunchConfig())
    assert pickle.loads(pickle.dumps(config)) == config
    assert "priority=-1" in repr(config)
    assert "programmatic_stream_serialization=True" in repr(config)
    assert type(LaunchConfig(priority=np.int64(-2)).priority) is int


@pytest.mark.contract("E3")
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"priority": True}, TypeError, "priority"),
        ({"priority": -1.0}, TypeError, "priority"),
        ({"priority": "high"}, TypeError, "priority"),
        ({"priority": 2**31}, ValueError, "priority"),
        ({"priority": -(2**31) - 1}, ValueError, "priority"),
        ({"programmatic_stream_serialization": 1}, TypeError, "programmatic_stream_serialization"),
        ({"programmatic_stream_serialization": None}, TypeError, "programmatic_stream_serialization"),
    ],
)
def test_bad_kinds_and_ranges_are_refused_at_construction(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        LaunchConfig(grid=1, block=1, **kwargs)


def test_priority_in_range_is_sent_as_a_launch_attribute(device: Device, fill: Kernel) -> None:
    greatest, least = _priority_range(device)
    values, ex = _launch_and_read(device, fill, LaunchConfig(grid=2, block=8, priority=greatest))
    assert values == [7] * 16
    assert len(ex) == 1
    if greatest == least:  # a device without stream priorities: nothing but 0 is in range
        return
    attributes = _attributes(ex[0])
    assert int(attributes[int(_ID.CU_LAUNCH_ATTRIBUTE_PRIORITY)].priority) == greatest
    assert int(_ID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) not in attributes


def test_priority_zero_is_a_plain_launch(device: Device, fill: Kernel) -> None:
    values, ex = _launch_and_read(device, fill, LaunchConfig(grid=2, block=8, priority=0))
    assert values == [7] * 16
    assert ex == []  # nothing to say with attributes: cuLaunchKernel


@pytest.mark.contract("E3", "G2")
@pytest.mark.parametrize("beyond", ["higher", "lower"])
def test_priority_outside_the_devices_range_is_refused_before_the_launch(
    device: Device, fill: Kernel, other_context: Context, beyond: str
) -> None:
    greatest, least = _priority_range(device)
    priority = greatest - 1 if beyond == "higher" else least + 1
    with device.create_stream() as stream, device.allocate(64) as buf:
        with record_calls() as log, pytest.raises(ValueError, match="stream priority range") as info:
            launch(stream, LaunchConfig(grid=1, block=8, priority=priority), fill, buf, 7, 16)
        assert f"[{greatest}, {least}]" in str(info.value)
        assert "cuLaunchKernelEx" not in [c.name for c in log]
        assert Context.current() == other_context  # the range was asked in the stream's context, then restored
        stream.sync()


@pytest.mark.contract("E1", "G2")
def test_a_refused_priority_range_query_raises_and_launches_nothing(
    device: Device, fill: Kernel, other_context: Context
) -> None:
    with device.create_stream() as stream, device.allocate(64) as buf:
        refused = CUresult.CUDA_ERROR_INVALID_CONTEXT
        with (
            record_calls() as log,
            inject("cuCtxGetStreamPriorityRange", refused, nth=1),
            pytest.raises(CUDAError) as info,
        ):
            launch(stream, LaunchConfig(grid=1, block=8, priority=-1), fill, buf, 7, 16)
        assert info.value.call == "cuCtxGetStreamPriorityRange"
        assert "cuLaunchKernelEx" not in [c.name for c in log]
        assert Context.current() == other_context
        stream.sync()


def test_programmatic_stream_serialization_is_sent_and_runs_in_order(device: Device, fill: Kernel) -> None:
    n = 16
    config = LaunchConfig(grid=2, block=8, programmatic_stream_serialization=True)
    with device.create_stream() as stream, device.allocate(4 * n) as buf:
        with record_calls() as log:
            launch(stream, LaunchConfig(grid=2, block=8), fill, buf, np.uint32(3), n)
            launch(stream, config, fill, buf, np.uint32(9), n)
        out = bytearray(4 * n)
        buf.copy_to(out, stream)
        stream.sync()
    # the second kernel may start early only where the first lets it: here it does not, so its values win
    assert np.frombuffer(bytes(out), np.uint32).tolist() == [9] * n
    ex = [c for c in log if c.name == "cuLaunchKernelEx"]
    assert len(ex) == 1
    value = _attributes(ex[0])[int(_ID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)]
    assert int(value.programmaticStreamSerializationAllowed) == 1


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
def test_programmatic_stream_serialization_needs_compute_capability_9(
    device: Device, fill: Kernel, compute_8: None
) -> None:
    config = LaunchConfig(grid=1, block=8, programmatic_stream_serialization=True)
    with device.create_stream() as stream, device.allocate(64) as buf:
        with record_calls() as log, pytest.raises(ValueError, match=r"compute capability 9\.0"):
            launch(stream, config, fill, buf, 7, 16)
        assert "cuLaunchKernelEx" not in [c.name for c in log]
        stream.sync()


@pytest.mark.contract("E1")
def test_a_refused_launch_with_attributes_raises_naming_the_call(device: Device, fill: Kernel) -> None:
    greatest, _ = _priority_range(device)
    config = LaunchConfig(grid=1, block=8, priority=greatest, programmatic_stream_serialization=True)
    with device.create_stream() as stream, device.allocate(64) as buf:
        with inject("cuLaunchKernelEx", CUresult.CUDA_ERROR_INVALID_VALUE, nth=1), pytest.raises(CUDAError) as info:
            launch(stream, config, fill, buf, 7, 16)
        assert info.value.call == "cuLaunchKernelEx"
        stream.sync()


def test_both_attributes_together_and_with_a_cluster(device: Device, fill: Kernel) -> None:
    greatest, _ = _priority_range(device)
    config = LaunchConfig(grid=2, cluster=2, block=8, priority=greatest, programmatic_stream_serialization=True)
    values, ex = _launch_and_read(device, fill, config, n=32)
    assert values == [7] * 32
    ids = set(_attributes(ex[0]))
    assert int(_ID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) in ids
    assert int(_ID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) in ids
