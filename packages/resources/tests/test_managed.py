"""ManagedMemoryResource (prefetch, advice) and LegacyPinnedMemoryResource; on the simulator and
(``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError
from cuguard.resources import Device, LegacyPinnedMemoryResource, ManagedMemoryResource, PinnedBuffer, Stream
from cuguard.resources._compat import ADVISE_CALL, PREFETCH_CALL
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls

OUT_OF_MEMORY = 2
INVALID_VALUE = 1


@pytest.fixture
def stream(device: Device) -> Any:
    s = device.create_stream()
    yield s
    s.close()


def _roundtrip(buf: Any) -> None:
    data = bytes(range(buf.size % 256)) * (buf.size // max(buf.size % 256, 1))
    data = (data + bytes(buf.size))[: buf.size]
    buf.copy_from(data)
    out = bytearray(buf.size)
    buf.copy_to(out)
    assert bytes(out) == data


def test_managed_allocate_and_free(device: Device) -> None:
    mr = ManagedMemoryResource(device)
    assert mr.device_id == device.ordinal
    assert mr.is_device_accessible
    assert mr.is_host_accessible
    with leak_check():
        buf = mr.allocate(4096)
        assert buf.memory_resource is mr
        assert mr.held == 4096
        _roundtrip(buf)
        mr.deallocate(buf)
    assert mr.held == 0
    host = ManagedMemoryResource(device.ordinal, attach="host")
    with host.allocate(64) as buf:
        buf.fill(5)


@pytest.mark.contract("G1", "G2")
@pytest.mark.parametrize("caller", ["none", "other"])
def test_a_failed_managed_allocation_creates_nothing(
    device: Device, caller: str, request: pytest.FixtureRequest
) -> None:
    if caller == "other":
        request.getfixturevalue("other_context")
    mr = ManagedMemoryResource(device)
    before = Context.current()
    with leak_check(), inject("cuMemAllocManaged", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        mr.allocate(64)
    assert info.value.call == "cuMemAllocManaged"
    assert Context.current() == before
    assert mr.held == 0


def test_prefetch_and_advice(device: Device, stream: Stream, cuguard_driver: Any) -> None:
    mr = ManagedMemoryResource(device)
    with mr.allocate(1 << 16) as buf:
        mr.prefetch(buf, device, stream)
        mr.prefetch(buf, "host", stream)
        mr.prefetch(buf, device.ordinal, stream)
        mr.advise(buf, "set_read_mostly")
        mr.advise(buf, "set_preferred_location", device)
        mr.advise(buf, "set_accessed_by", device.ordinal)
        stream.sync()
        if isinstance(cuguard_driver, SimulatedDriver):
            state = cuguard_driver.managed_state(buf.ptr)
            assert state["prefetched_to"] == (1, device.ordinal)
            assert state["read_mostly"]
            assert state["preferred_location"] == (1, device.ordinal)
            assert state["accessed_by"] == {(1, device.ordinal)}
        mr.advise(buf, "unset_read_mostly")
        mr.advise(buf, "unset_preferred_location")
        mr.advise(buf, "unset_accessed_by", device)
        mr.advise(buf, "set_preferred_location", "host")
        _roundtrip(buf)


@pytest.mark.contract("E1", "G3")
def test_refused_prefetch_and_advice_raise_naming_the_call(device: Device, stream: Stream) -> None:
    mr = ManagedMemoryResource(device)
    with mr.allocate(4096) as buf:
        with inject(PREFETCH_CALL, INVALID_VALUE), pytest.raises(CUDAError) as info:
            mr.prefetch(buf, device, stream)
        assert info.value.call == PREFETCH_CALL
        with inject(ADVISE_CALL, INVALID_VALUE), pytest.raises(CUDAError) as info:
            mr.advise(buf, "set_read_mostly")
        assert info.value.call == ADVISE_CALL
        mr.prefetch(buf, device, stream)  # G3: still usable
        stream.sync()


@pytest.mark.contract("E3")
def test_wrong_arguments_are_refused_before_the_driver(device: Device, stream: Stream) -> None:
    mr = ManagedMemoryResource(device)
    buf = mr.allocate(64)
    plain = device.allocate(64)
    with record_calls() as log:
        with pytest.raises(TypeError, match="device"):
            ManagedMemoryResource(None)
        with pytest.raises(ValueError, match="attach"):
            ManagedMemoryResource(device, attach="single")
        with pytest.raises(ValueError, match="size must be 1 or more"):
            mr.allocate(0)
        with pytest.raises(ValueError, match="not allocated by"):
            mr.prefetch(plain, device, stream)
        with pytest.raises(TypeError, match="buffer"):
            mr.prefetch(object(), device, stream)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="location"):
            mr.prefetch(buf, 1.5, stream)
        with pytest.raises(ValueError, match="location"):
            mr.prefetch(buf, "gpu", stream)
        with pytest.raises(TypeError, match="stream"):
            mr.prefetch(buf, device, None)
        with pytest.raises(ValueError, match="advice"):
            mr.advise(buf, "prefer_fast")
        with pytest.raises(ValueError, match="needs a location"):
            mr.advise(buf, "set_accessed_by")
        with pytest.raises(TypeError, match="advice"):
            mr.advise(buf, 3)  # type: ignore[arg-type]
    assert log == []
    buf.close()
    with pytest.raises(ResourceClosedError):
        mr.prefetch(buf, device, stream)
    plain.close()


def test_legacy_pinned_allocate_and_free(device: Device) -> None:
    mr = LegacyPinnedMemoryResource(device)
    assert mr.device_id is None
    assert mr.is_host_accessible
    assert mr.is_device_accessible
    with leak_check():
        pinned = mr.allocate(256)
        assert isinstance(pinned, PinnedBuffer)
        assert pinned.memory_resource is mr
        assert mr.held == 256
        view = pinned.numpy()
        view[:] = 7
        dev_buf = device.allocate(256)
        dev_buf.copy_from(pinned)
        out = bytearray(256)
        dev_buf.copy_to(out)
        assert out == b"\x07" * 256
        dev_buf.close()
        del view
        mr.deallocate(pinned)
    assert mr.held == 0
    with LegacyPinnedMemoryResource(portable=True, write_combined=True).allocate(16):
        pass


@pytest.mark.contract("G1", "E3")
def test_legacy_pinned_failures(device: Device) -> None:
    mr = LegacyPinnedMemoryResource(device)
    with leak_check(), inject("cuMemHostAlloc", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        mr.allocate(64)
    assert info.value.call == "cuMemHostAlloc"
    with pytest.raises(TypeError, match="portable"):
        LegacyPinnedMemoryResource(device, portable=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="buffer"):
        mr.deallocate(device)  # type: ignore[arg-type]


@pytest.mark.contract("W1", "W5")
def test_a_failed_release_on_collection_warns_and_counts_the_leak(device: Device) -> None:
    mr = ManagedMemoryResource(device)
    buf = mr.allocate(128)
    with inject("cuMemFree", INVALID_VALUE), pytest.warns(CUDAWarning, match="cuMemFree"):  # noqa: PT031
        del buf
        gc.collect()
    assert mr.held == 0
    assert mr.leaked == 128


@pytest.mark.contract("O1")
def test_memory_resources_refuse_copies(device: Device) -> None:
    import copy
    import pickle

    from cuguard.resources import VirtualMemoryResource

    for mr in (ManagedMemoryResource(device), LegacyPinnedMemoryResource(device), VirtualMemoryResource(device)):
        for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match=type(mr).__name__):
                attempt(mr)
