"""Memory resources handed what the misuse sweep hands them: copies (O1), closed and wrong arguments (E3)."""

from __future__ import annotations

import copy
import gc
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.resources import (
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    MemoryResource,
    PinnedMemoryResource,
    VirtualMemoryResource,
)
from cuguard.testing import record_calls, simulated_driver

COPIERS: dict[str, Callable[[Any], object]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
}

MAKERS: dict[str, Callable[[Device], MemoryResource[Any]]] = {
    "DeviceMemoryResource-current": DeviceMemoryResource,
    "DeviceMemoryResource-created": lambda d: DeviceMemoryResource(d, DeviceMemoryResourceOptions()),
    "PinnedMemoryResource": PinnedMemoryResource,
    "ManagedMemoryResource": ManagedMemoryResource,
    "VirtualMemoryResource": VirtualMemoryResource,
    "LegacyPinnedMemoryResource": LegacyPinnedMemoryResource,
}


@pytest.mark.contract("O1")
@pytest.mark.parametrize("how", sorted(COPIERS))
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_memory_resources_cannot_be_copied_or_pickled(device: Device, kind: str, how: str) -> None:
    try:
        mr = MAKERS[kind](device)
    except CUDAError as exc:  # a driver without host memory pools refuses PinnedMemoryResource
        pytest.skip(f"{kind}: {exc}")
    stream = device.create_stream()
    buf = mr.allocate(64, stream)
    name = type(mr).__name__
    with record_calls() as log, pytest.raises(TypeError, match=rf"\b{name}\b") as info:
        COPIERS[how](mr)
    assert "cannot be copied or pickled" in str(info.value)
    assert log == []  # refused before anything reached the driver
    # The original still holds its buffer, and frees it exactly once.
    assert mr.buffers == (buf,)
    assert mr.held == 64
    with record_calls() as log:
        mr.deallocate(buf, stream)
        buf.close()
        stream.sync()
        gc.collect()
    frees = [c.name for c in log if c.name.startswith(("cuMemFree", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree"))]
    assert frees
    assert len(frees) == len(set(frees)), frees
    assert mr.held == 0
    assert not mr.buffers
    assert mr.leaked == 0
    close = getattr(mr, "close", None)
    if close is not None:
        close()
    stream.close()


def _resource(kind: str, device: Device) -> MemoryResource[Any]:
    try:
        return MAKERS[kind](device)
    except CUDAError as exc:  # a driver without host memory pools refuses PinnedMemoryResource
        pytest.skip(f"{kind}: {exc}")


@pytest.mark.contract("E3", "G1")
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_allocate_refuses_a_closed_stream_before_the_driver(device: Device, kind: str) -> None:
    mr = _resource(kind, device)
    stream = device.create_stream()
    stream.close()
    with record_calls() as log, pytest.raises(ResourceClosedError, match="closed"):
        mr.allocate(64, stream)
    assert log == []
    assert mr.held == 0
    with pytest.raises(TypeError, match="stream"):
        mr.allocate(64, object())  # type: ignore[arg-type]
    close = getattr(mr, "close", None)
    if close is not None:
        close()


@pytest.mark.contract("E3")
def test_prefetch_checks_the_kind_of_every_argument_before_their_values(device: Device) -> None:
    # A wrong kind of stream is a TypeError even when the buffer is also refused (another resource's).
    managed = ManagedMemoryResource(device)
    legacy = LegacyPinnedMemoryResource(device)
    other = device.allocate(64)
    with record_calls() as log:
        with pytest.raises(TypeError, match="stream"):
            managed.prefetch(other, "host", object())
        with pytest.raises(ValueError, match="was not allocated by"):
            managed.prefetch(other, "host", device.default_stream)
        with pytest.raises(TypeError, match="buffer"):
            legacy.deallocate(object(), object())  # type: ignore[arg-type]
    assert log == []
    other.close()


@pytest.mark.contract("O3")
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_device_of_an_uninstalled_driver_is_refused_at_construction(kind: str) -> None:
    with simulated_driver(devices=1):
        stale = Device(0)
    with simulated_driver(devices=1) as sim, record_calls() as log:
        before = {o.handle for o in sim.live_objects()}
        with pytest.raises(ResourceClosedError, match="no longer installed"):
            MAKERS[kind](stale)
        assert {o.handle for o in sim.live_objects()} == before
    assert log == []


@pytest.mark.contract("E3", "G3")
@pytest.mark.parametrize("value", [-1, 1 << 64, 1 << 70])
def test_a_byte_count_out_of_range_is_a_value_error_before_the_driver(device: Device, value: int) -> None:
    with DeviceMemoryResource(device, DeviceMemoryResourceOptions()) as mr:
        before = mr.attributes.release_threshold
        with record_calls() as log, pytest.raises(ValueError, match="release_threshold"):
            mr.attributes.release_threshold = value
        assert log == []
        assert mr.attributes.release_threshold == before
    with record_calls() as log, pytest.raises(ValueError, match="max_size"):
        DeviceMemoryResource(device, DeviceMemoryResourceOptions(max_size=value))
    assert log == []


@pytest.mark.contract("E1", "G1")
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_more_memory_than_there_is_is_a_cuda_error(device: Device, kind: str) -> None:
    # 4 PiB: more than any device or host has; the driver refuses, and nothing is allocated.
    mr = _resource(kind, device)
    stream = device.create_stream()
    with pytest.raises(CUDAError, match=r"OUT_OF_MEMORY|INVALID_VALUE"):
        mr.allocate(1 << 52, stream)
    assert mr.held == 0
    stream.sync()
    stream.close()
    close = getattr(mr, "close", None)
    if close is not None:
        close()


@pytest.mark.contract("O3", "E3")
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_deallocate_through_a_resource_of_an_uninstalled_driver_is_refused_naming_it(kind: str) -> None:
    with simulated_driver(devices=1):
        mr = MAKERS[kind](Device(0))
        buf = mr.allocate(64)
        with simulated_driver(devices=1), record_calls() as log:
            with pytest.raises(ResourceClosedError, match=type(mr).__name__):
                mr.deallocate(buf)
            assert log == []
        assert mr.buffers == (buf,)  # still held: nothing was freed
        mr.deallocate(buf)
        assert mr.held == 0
        close = getattr(mr, "close", None)
        if close is not None:
            close()


@pytest.mark.contract("O6", "W5")
@pytest.mark.parametrize("kind", ["DeviceMemoryResource-created", "PinnedMemoryResource"])
def test_a_pool_collected_in_a_cycle_with_its_buffer_is_destroyed_after_it(kind: str) -> None:
    # Collection clears the weak references of a cycle before it runs any release: the pool must
    # still know that its buffer is allocated, and be destroyed only once the buffer was freed.
    with simulated_driver(devices=1) as sim:
        device = Device(0)
        try:
            mr = MAKERS[kind](device)
        except CUDAError as exc:
            pytest.skip(f"{kind}: {exc}")
        buf = mr.allocate(64)
        holder: dict[str, Any] = {"mr": mr, "buf": buf}
        holder["self"] = holder  # a cycle holding both
        del mr, buf, holder
        with record_calls() as log:
            gc.collect()
        names = [c.name for c in log if c.name in ("cuMemPoolDestroy", "cuMemFree", "cuMemFreeAsync")]
        assert names[-1] == "cuMemPoolDestroy", names
        assert names.count("cuMemPoolDestroy") == 1
        assert sim.misuse == []
        assert not [o for o in sim.live_objects() if o.kind == "memory_pool"]
