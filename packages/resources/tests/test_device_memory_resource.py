"""``Device.memory_resource`` (cuda.core 1.2's property and setter) and ``Device.allocate`` through it;
on the simulator and (``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cuguard.errors import CUDAError, ResourceClosedError, driver
from cuguard.resources import (
    Buffer,
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    MemoryResource,
    PinnedBuffer,
    PinnedMemoryResource,
    Stream,
    VirtualMemoryResource,
)
from cuguard.testing import inject, record_calls, simulated_driver

SIZE = 4096
INVALID_VALUE = 1


@pytest.fixture
def stream(device: Device) -> Iterator[Stream]:
    with device.create_stream() as st:
        yield st


@pytest.fixture
def restore(device: Device) -> Iterator[None]:
    """Put the device's default resource back after the test (the Device object is process-wide).

    Whatever the test did to the resource it set (closed it, say), the device's own allocation is back.
    """
    yield
    device._memory_resource = None


class _Counting(MemoryResource[Buffer]):
    """A program's own resource: hands out the buffers of another one and counts its allocations."""

    def __init__(self, inner: DeviceMemoryResource) -> None:
        super().__init__()
        self.inner = inner
        self.calls: list[tuple[int, Stream | None]] = []

    def allocate(self, size: int, stream: Stream | None = None) -> Buffer:
        self.calls.append((size, stream))
        return self.inner.allocate(size, stream)

    @property
    def device_id(self) -> int:
        return self.inner.device_id

    @property
    def is_device_accessible(self) -> bool:
        return True

    @property
    def is_host_accessible(self) -> bool:
        return False

    def _free(self, buffer: Buffer, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        raise AssertionError("the inner resource frees its own buffers")


@pytest.mark.contract("O2")
def test_the_default_is_the_devices_current_pool_made_once(device: Device) -> None:
    default = device.memory_resource
    assert isinstance(default, DeviceMemoryResource)
    assert device.memory_resource is default
    assert Device(device.ordinal).memory_resource is default
    assert (default.device_id, default.owned, default.is_device_accessible) == (device.ordinal, False, True)
    err, pool = driver.cuDeviceGetMemPool(device.ordinal)
    assert not err
    assert int(default.handle) == int(pool)
    default.close()  # owns nothing: closing it destroys no pool
    err, still = driver.cuDeviceGetMemPool(device.ordinal)
    assert not err
    assert int(still) == int(pool)
    fresh = device.memory_resource  # a closed default is never handed out: the next read makes a new one
    assert fresh is not default
    assert not fresh.closed
    assert int(fresh.handle) == int(pool)
    buf = device.allocate(SIZE)  # and the device's allocation is unaffected
    buf.close()


@pytest.mark.contract("O2")
def test_threads_reading_the_default_at_once_get_one_object(device: Device) -> None:
    seen: list[MemoryResource[Any]] = []
    threads = [threading.Thread(target=lambda: seen.append(device.memory_resource)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4
    assert all(mr is seen[0] for mr in seen)


@pytest.mark.contract("G1", "E1")
def test_a_refused_default_raises_and_keeps_nothing() -> None:
    with simulated_driver(devices=1):  # a fresh device, whose default was never read
        device = Device(0)
        with inject("cuDeviceGetMemPool", INVALID_VALUE, nth=1), pytest.raises(CUDAError) as info:
            _ = device.memory_resource
        assert info.value.call == "cuDeviceGetMemPool"
        with record_calls() as log:
            default = device.memory_resource  # asked again, and made this time
        assert [c.name for c in log].count("cuDeviceGetMemPool") == 1
        assert isinstance(default, DeviceMemoryResource)
        assert device.memory_resource is default


@pytest.mark.contract("E1")
@pytest.mark.parametrize("ordered", [False, True])
def test_with_the_default_allocate_keeps_its_own_allocation(device: Device, stream: Stream, ordered: bool) -> None:
    default = device.memory_resource
    with record_calls() as log:
        buf = device.allocate(SIZE, stream if ordered else None)
    names = [c.name for c in log]
    assert ("cuMemAllocAsync" if ordered else "cuMemAlloc") in names
    assert "cuMemAllocFromPoolAsync" not in names
    assert isinstance(buf, Buffer)
    assert buf.memory_resource is None
    assert default.held == 0
    buf.close()


@pytest.mark.contract("S3", "W5")
def test_a_pinned_resource_set_makes_allocate_hand_out_its_buffers(
    device: Device, stream: Stream, restore: None
) -> None:
    default = device.memory_resource
    dev_buf = device.allocate(SIZE)
    with PinnedMemoryResource(device) as pinned:
        device.memory_resource = pinned
        assert device.memory_resource is pinned
        buf = device.allocate(SIZE, stream)
        assert isinstance(buf, PinnedBuffer)
        assert buf.memory_resource is pinned
        assert pinned.held == SIZE
        stream.sync()
        buf.numpy()[:] = 3
        buf.copy_to(dev_buf, stream=stream)
        out = bytearray(SIZE)
        dev_buf.copy_to(out, stream=stream)
        stream.sync()
        assert out == b"\x03" * SIZE
        dev_buf.close()
        buf.close(stream)
        assert pinned.held == 0
        device.memory_resource = default  # the default again: allocate's own allocation
        again = device.allocate(SIZE)
        assert type(again) is Buffer
        assert again.memory_resource is None
        again.close()


@pytest.mark.contract("S3")
@pytest.mark.parametrize("kind", ["pool", "managed", "virtual", "legacy", "own"])
def test_every_kind_of_resource_can_be_the_devices(device: Device, stream: Stream, kind: str, restore: None) -> None:
    made: dict[str, Any] = {
        "pool": lambda: DeviceMemoryResource(device, DeviceMemoryResourceOptions()),
        "managed": lambda: ManagedMemoryResource(device),
        "virtual": lambda: VirtualMemoryResource(device),
        "legacy": lambda: LegacyPinnedMemoryResource(device),
        "own": lambda: _Counting(DeviceMemoryResource(device)),
    }
    mr = made[kind]()
    device.memory_resource = mr
    buf = device.allocate(SIZE, stream)
    counted = mr.inner if isinstance(mr, _Counting) else mr
    assert buf.memory_resource is counted
    assert counted.held == SIZE
    if isinstance(mr, _Counting):
        assert mr.calls == [(SIZE, stream)]
    data = bytes(range(256)) * (SIZE // 256)
    if isinstance(buf, Buffer):
        buf.copy_from(data, stream=stream)
        stream.sync()
    else:
        stream.sync()
        buf.numpy()[:] = list(data)
    buf.close(stream)
    stream.sync()
    assert counted.held == 0
    pool = mr.inner if isinstance(mr, _Counting) else mr
    if isinstance(pool, DeviceMemoryResource):
        pool.close()


@pytest.mark.contract("E3")
@pytest.mark.parametrize("wrong", [None, 5, "pool", object()])
def test_a_wrong_kind_is_refused_and_changes_nothing(device: Device, wrong: Any, restore: None) -> None:
    before = device.memory_resource
    with record_calls() as log, pytest.raises(TypeError, match="memory_resource") as info:
        device.memory_resource = wrong
    assert "MemoryResource" in str(info.value)
    assert ("None" if wrong is None else type(wrong).__name__) in str(info.value)
    assert log == []
    assert device.memory_resource is before


@pytest.mark.contract("E3")
def test_a_buffer_or_a_device_is_not_a_resource(device: Device, restore: None) -> None:
    before = device.memory_resource
    with device.allocate(64) as buf:
        for wrong in (buf, device):
            with pytest.raises(TypeError, match="memory_resource"):
                device.memory_resource = wrong  # type: ignore[assignment]
    assert device.memory_resource is before


@pytest.mark.contract("E3")
def test_a_resource_of_another_device_is_refused(device: Device, restore: None) -> None:
    if Device.count() < 2:
        pytest.skip("needs two CUDA devices")
    before = device.memory_resource
    other = Device(1).memory_resource
    with pytest.raises(ValueError, match="device 1"):
        device.memory_resource = other
    assert device.memory_resource is before


@pytest.mark.contract("E3")
def test_a_closed_resource_is_refused(device: Device, restore: None) -> None:
    before = device.memory_resource
    pool = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    pool.close()
    with record_calls() as log, pytest.raises(ResourceClosedError):
        device.memory_resource = pool
    assert log == []
    assert device.memory_resource is before


@pytest.mark.contract("E3")
def test_a_resource_closed_after_it_was_set_refuses_allocate(device: Device, restore: None) -> None:
    pool = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    device.memory_resource = pool
    pool.close()
    with record_calls() as log, pytest.raises(ResourceClosedError):
        device.allocate(64)
    assert log == []


@pytest.mark.contract("O3")
def test_a_resource_of_a_driver_no_longer_installed_is_refused(device: Device, restore: None) -> None:
    with simulated_driver(devices=1):
        old = ManagedMemoryResource(Device(0))
    with record_calls() as log, pytest.raises(ResourceClosedError, match="no longer installed"):
        device.memory_resource = old
    assert log == []
