"""A memory pool closed while its buffers are allocated is destroyed after the last of them is freed.

cuguard never asks the driver to destroy a pool with allocations outstanding (an H200 process
died in a later pool allocation after that order); on the simulator and (``--cuguard-driver=real``)
a GPU.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from cuguard.errors import CUDAError, CUDAWarning
from cuguard.resources import (
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    PinnedMemoryResource,
    PinnedMemoryResourceOptions,
    Stream,
)
from cuguard.testing import inject, leak_check, record_calls

INVALID_VALUE = 1
SIZE = 4096


@pytest.fixture
def stream(device: Device) -> Any:
    with device.create_stream() as st:
        yield st


def _pool(device: Device, kind: str) -> Any:
    if kind == "device":
        return DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    return PinnedMemoryResource(device, PinnedMemoryResourceOptions())


def _names(calls: Any) -> list[str]:
    return [c.name for c in calls]


@pytest.mark.contract("W5", "S2")
@pytest.mark.parametrize("kind", ["device", "pinned"])
def test_the_pool_is_destroyed_after_its_last_buffer(device: Device, stream: Stream, kind: str) -> None:
    with leak_check():
        mr = _pool(device, kind)
        on_stream = mr.allocate(SIZE, stream)
        synchronous = mr.allocate(SIZE)
        with record_calls() as calls:
            mr.close()
        assert mr.closed
        assert "cuMemPoolDestroy" not in _names(calls)  # two allocations are outstanding
        with record_calls() as calls:
            on_stream.close()
        assert "cuMemPoolDestroy" not in _names(calls)  # one still is
        with record_calls() as calls:
            synchronous.close()
        names = _names(calls)
        assert names[-1] == "cuMemPoolDestroy"
        assert names.count("cuMemPoolDestroy") == 1
        assert names.index("cuMemFree") < names.index("cuMemPoolDestroy")  # freed first, destroyed last
        assert mr.held == 0
        with record_calls() as calls:
            mr.close()
            synchronous.close()
        assert _names(calls) == []  # destroyed once, never twice
        stream.sync()


@pytest.mark.contract("S3", "W5")
def test_a_refused_deferred_destroy_raises_from_the_last_buffer(device: Device, stream: Stream) -> None:
    mr = _pool(device, "device")
    buf = mr.allocate(SIZE, stream)
    mr.close()
    with inject("cuMemPoolDestroy", INVALID_VALUE), pytest.raises(CUDAError) as info:
        buf.close()
    assert info.value.call == "cuMemPoolDestroy"
    assert "the buffer was freed" in str(info.value)
    assert "was leaked" in str(info.value)
    assert buf.closed
    assert mr.held == 0
    assert mr.leaked == 0  # the buffer's memory was freed: only the pool was leaked
    with record_calls() as calls:
        buf.close()
        mr.close()
    assert _names(calls) == []  # the pool is leaked, never destroyed a second time
    stream.sync()


@pytest.mark.contract("W1", "W5")
def test_a_collected_last_buffer_destroys_the_pool_and_a_refusal_warns(device: Device, stream: Stream) -> None:
    with leak_check():
        mr = _pool(device, "device")
        buf = mr.allocate(SIZE, stream)
        mr.close()
        with record_calls() as calls:
            del buf
            gc.collect()
        # cuguard's own release: relaxed capture mode around it (G6), the thread's mode given back
        exchange = "cuThreadExchangeStreamCaptureMode"
        assert _names(calls)[-3:] == [exchange, "cuMemPoolDestroy", exchange]
        stream.sync()
    other = _pool(device, "device")
    buf = other.allocate(SIZE, stream)
    other.close()
    with inject("cuMemPoolDestroy", INVALID_VALUE), pytest.warns(CUDAWarning, match="cuMemPoolDestroy"):  # noqa: PT031
        del buf
        gc.collect()
    stream.sync()


@pytest.mark.contract("W5")
def test_a_refused_free_keeps_the_pool(device: Device, stream: Stream) -> None:
    mr = _pool(device, "device")
    buf = mr.allocate(SIZE, stream)
    mr.close()
    with (
        record_calls() as calls,
        inject("cuMemFreeAsync", INVALID_VALUE),
        pytest.raises(CUDAError, match="cuMemFreeAsync"),
    ):
        buf.close()
    assert "cuMemPoolDestroy" not in _names(calls)  # its allocation may be outstanding: leak the pool with it
    assert mr.leaked == SIZE


@pytest.mark.contract("W5")
def test_a_pool_with_a_leaked_buffer_is_leaked_with_it(device: Device, stream: Stream) -> None:
    mr = _pool(device, "device")
    leaked = mr.allocate(SIZE, stream)
    freed = mr.allocate(SIZE, stream)
    with inject("cuMemFreeAsync", INVALID_VALUE), pytest.raises(CUDAError, match="cuMemFreeAsync"):
        leaked.close()
    with record_calls() as calls:
        freed.close()
        mr.close()
    assert _names(calls) == ["cuMemFreeAsync"]  # the pool is never destroyed under the leaked memory
    assert mr.closed
    assert (mr.held, mr.leaked) == (0, SIZE)
    stream.sync()


@pytest.mark.contract("W5", "G4")
def test_memory_a_failed_allocation_could_not_free_keeps_the_pool(device: Device) -> None:
    mr = _pool(device, "device")
    with (
        inject("cuStreamSynchronize", INVALID_VALUE),
        inject("cuMemFree", INVALID_VALUE),
        pytest.raises(CUDAError, match="cuStreamSynchronize") as info,
    ):
        mr.allocate(SIZE)  # the wait fails, and freeing the new memory again is refused too
    assert any("cuMemFree" in note and "leaked" in note for note in info.value.__notes__)
    assert (mr.held, mr.leaked) == (0, SIZE)
    with record_calls() as calls:
        mr.close()
    assert _names(calls) == []  # the pool still holds that memory: leaked with it, never destroyed under it
