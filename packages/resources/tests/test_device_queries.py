"""Device queries and conveniences: properties, uuid, arch, memory info, default stream, Device(), wrapping."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, ResourceClosedError, driver
from cuguard.resources import Buffer, Device, DeviceProperties, MemoryInfo, Stream
from cuguard.testing import inject, leak_check, record_calls

INVALID_VALUE = 1
OUT_OF_MEMORY = 2


class _Foreign:
    """Another library's stream: only ``__cuda_stream__``."""

    def __init__(self, stream: Stream) -> None:
        self.address = int(stream.handle)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.address)


@pytest.fixture
def stream(device: Device) -> Iterator[Stream]:
    s = device.create_stream()
    yield s
    s.close()


@pytest.fixture
def uncached(device: Device) -> Iterator[None]:
    """The device's properties as if never read (the Device object is process-wide: on a GPU, other tests read them)."""
    kept = device._properties
    device._properties = None
    yield
    device._properties = kept


@pytest.mark.contract("O2", "E1")
def test_properties_are_cached_per_device_under_cuda_core_names(device: Device, uncached: None) -> None:
    props = device.properties
    assert isinstance(props, DeviceProperties)
    assert device.properties is props
    assert copy.copy(props) is props
    with record_calls() as calls:
        count = props.multiprocessor_count
        warp = props.warp_size
    assert count > 0
    assert warp == 32
    assert [c.name for c in calls] == ["cuDeviceGetAttribute", "cuDeviceGetAttribute"]
    with record_calls() as calls:
        assert props.multiprocessor_count == count  # cached: no driver call
    assert calls == []
    assert isinstance(props.integrated, bool)
    assert isinstance(props.max_threads_per_block, int)
    assert "l2_cache_size" in dir(props)
    with pytest.raises(AttributeError):
        _ = props.no_such_property
    with pytest.raises(TypeError, match=r"Device\.properties"):
        DeviceProperties()


@pytest.mark.contract("E1", "G3")
def test_refused_property_read_raises_and_caches_nothing(device: Device, uncached: None) -> None:
    props = device.properties
    with inject("cuDeviceGetAttribute", INVALID_VALUE), pytest.raises(CUDAError) as info:
        _ = props.max_block_dim_x
    assert info.value.call == "cuDeviceGetAttribute"
    assert props.max_block_dim_x > 0  # read again once the driver answers


@pytest.mark.contract("E1")
def test_arch_and_compute_capability_agree(device: Device) -> None:
    major, minor = device.compute_capability
    assert device.arch == f"{major}{minor}"
    assert (device.properties.compute_capability_major, device.properties.compute_capability_minor) == (major, minor)


@pytest.mark.contract("E1")
def test_uuid_is_formatted_and_stable(device: Device) -> None:
    uuid = device.uuid
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid)
    assert device.uuid == uuid
    if Device.count() > 1:
        assert Device(1).uuid != uuid
    with inject("cuDeviceGetUuid", INVALID_VALUE), pytest.raises(CUDAError) as info:
        _ = device.uuid
    assert info.value.call == "cuDeviceGetUuid"


@pytest.mark.contract("G2", "E1")
def test_memory_info_leaves_the_context_as_it_was(device: Device) -> None:
    assert Context.current() is None
    info = device.memory_info
    assert isinstance(info, MemoryInfo)
    assert 0 < info.free <= info.total
    assert Context.current() is None
    with inject("cuMemGetInfo", INVALID_VALUE), pytest.raises(CUDAError) as err:
        _ = device.memory_info
    assert err.value.call == "cuMemGetInfo"
    assert Context.current() is None


@pytest.mark.contract("W5")
def test_memory_info_sees_allocations_on_the_simulator(device: Device, cuguard_driver: Any) -> None:
    from cuguard.testing import SimulatedDriver

    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("other processes change free memory on a real GPU")
    before = device.memory_info.free
    with device.allocate(1 << 20):
        assert device.memory_info.free == before - (1 << 20)
    assert device.memory_info.free == before


@pytest.mark.contract("O1", "W5")
def test_default_stream_is_not_owned(device: Device) -> None:
    previous = device.set_current()
    try:
        default = device.default_stream
        assert isinstance(default, Stream)
        assert int(default.handle) in (1, 2)
        with leak_check():
            buf = device.allocate(64, default)
            buf.fill(3, default)
            default.sync()
            buf.close()
            default.close()  # closing the wrapper destroys nothing
            assert default.closed
            with pytest.raises(ResourceClosedError):
                default.sync()
            device.default_stream.sync()
    finally:
        if previous is not None:
            previous.set_current()
        else:
            from cuda.bindings.driver import CUcontext

            driver.cuCtxSetCurrent(CUcontext(0))


@pytest.mark.contract("O2", "G2")
def test_device_without_ordinal_is_the_current_device(device: Device) -> None:
    assert Context.current() is None
    assert Device() is Device(0)
    if Device.count() < 2:
        return
    other = Device(1)
    previous = other.set_current()
    try:
        assert Device() is other
        assert Context.current() is other.context  # unchanged by the question
    finally:
        from cuda.bindings.driver import CUcontext

        driver.cuCtxSetCurrent(CUcontext(0) if previous is None else previous.handle)


@pytest.mark.contract("O1", "E3")
def test_create_stream_wraps_a_foreign_stream_without_owning_it(device: Device, stream: Stream) -> None:
    foreign = _Foreign(stream)
    with leak_check():
        wrapped = device.create_stream(foreign)
        assert int(wrapped.handle) == foreign.address
        wrapped.sync()
        wrapped.close()
    stream.sync()  # still there
    again = device.create_stream(stream)
    assert again is not stream
    assert again.handle == stream.handle
    again.close()
    stream.sync()
    with pytest.raises(ValueError, match="non_blocking"):
        device.create_stream(foreign, non_blocking=True)
    with pytest.raises(ValueError, match="priority"):
        device.create_stream(foreign, priority=0)
    with pytest.raises(TypeError, match=r"obj must be .*Stream.*, not int"):
        device.create_stream(5)
    if Device.count() > 1:
        with pytest.raises(ValueError, match="device"):
            Device(1).create_stream(stream)


@pytest.mark.contract("E1")
def test_events_do_not_time_unless_asked(device: Device, stream: Stream) -> None:
    plain = device.create_event()
    timed = device.create_event(timing=True)
    assert not plain.timing
    assert timed.timing
    start = device.create_event(timing=True)
    start.record(stream)
    plain.record(stream)
    timed.record(stream)
    timed.sync()
    assert timed.elapsed_since(start) >= 0.0
    with pytest.raises(CUDAError) as info:
        plain.elapsed_since(start)
    assert info.value.name == "CUDA_ERROR_INVALID_HANDLE"
    for event in (plain, timed, start):
        event.close()


@pytest.mark.contract("W5", "S3", "E3")
def test_close_on_a_given_stream_frees_there(device: Device, stream: Stream) -> None:
    with leak_check():
        buf = device.allocate(64)
        with record_calls() as calls:
            buf.close(stream)
        assert [c.name for c in calls] == ["cuMemFreeAsync"]
        assert buf.closed
        buf.close(stream)  # idempotent
        stream.sync()
    other = device.create_stream()
    buf = device.allocate(64, stream)
    other.close()
    with pytest.raises(ResourceClosedError):
        buf.close(other)
    assert not buf.closed  # nothing freed: still usable
    buf.fill(1)
    with pytest.raises(TypeError, match="stream must be"):
        buf.close(5)
    with inject("cuMemFreeAsync", INVALID_VALUE), pytest.raises(CUDAError, match="leaked"):
        buf.close(stream)
    assert buf.closed


@pytest.mark.contract("E3")
def test_close_on_another_devices_stream_is_refused(device: Device) -> None:
    if Device.count() < 2:
        pytest.skip("needs two devices")
    theirs = Device(1).create_stream()
    buf = device.allocate(16)
    with pytest.raises(ValueError, match="device"):
        buf.close(theirs)
    assert not buf.closed
    buf.close()
    theirs.close()


@pytest.mark.contract("G1")
def test_failed_foreign_wrap_creates_nothing(device: Device, stream: Stream) -> None:
    with leak_check(), inject("cuStreamGetCtx", INVALID_VALUE), pytest.raises(CUDAError):
        device.create_stream(_Foreign(stream))
    assert isinstance(Buffer.from_handle(0, 0, device=device), Buffer)
