"""DeviceMemoryResource and PinnedMemoryResource (memory pools) and the memory accounting; on the
simulator and (``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError
from cuguard.resources import (
    Buffer,
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    MemoryResource,
    PinnedBuffer,
    PinnedMemoryResource,
    PinnedMemoryResourceOptions,
    Stream,
    memory_in_use,
)
from cuguard.testing import inject, leak_check, record_calls

OUT_OF_MEMORY = 2
INVALID_VALUE = 1
SIZE = 4096


@pytest.fixture
def stream(device: Device) -> Any:
    with device.create_stream() as st:
        yield st


@pytest.fixture
def mr(device: Device) -> Any:
    with DeviceMemoryResource(device, DeviceMemoryResourceOptions()) as pool:
        yield pool


def _bytes(buf: Buffer, stream: Stream) -> bytes:
    out = bytearray(buf.size)
    buf.copy_to(out, stream)
    stream.sync()
    return bytes(out)


@pytest.mark.contract("S3", "W5")
def test_pool_memory_works_and_is_accounted(device: Device, mr: DeviceMemoryResource, stream: Stream) -> None:
    assert isinstance(mr, MemoryResource)
    assert (mr.device_id, mr.is_device_accessible, mr.is_host_accessible, mr.owned) == (
        device.ordinal,
        True,
        False,
        True,
    )
    buf = mr.allocate(SIZE, stream)
    sync_buf = mr.allocate(100)
    assert buf.memory_resource is mr
    assert buf.stream is stream
    assert sync_buf.stream is None
    assert mr.held == SIZE + 100
    assert set(mr.buffers) == {buf, sync_buf}
    buf.fill(9, stream)
    assert _bytes(buf, stream) == b"\x09" * SIZE
    assert mr.attributes.used_mem_current >= SIZE + 100
    mr.deallocate(buf, stream)
    assert buf.closed
    assert mr.held == 100
    assert mr.buffers == (sync_buf,)
    del sync_buf
    gc.collect()
    assert mr.held == 0
    assert not mr.buffers
    assert mr.leaked == 0


@pytest.mark.contract("E3")
def test_wrong_arguments_are_refused_before_the_driver(device: Device, mr: DeviceMemoryResource) -> None:
    other = device.allocate(16)
    with record_calls() as calls:
        with pytest.raises(TypeError, match="device"):
            DeviceMemoryResource("0")
        with pytest.raises(TypeError, match="options"):
            DeviceMemoryResource(device, {"max_size": 1})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="release_threshold"):
            DeviceMemoryResource(device, DeviceMemoryResourceOptions(release_threshold="1"))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_size"):
            DeviceMemoryResource(device, DeviceMemoryResourceOptions(max_size=-1))
        with pytest.raises(TypeError, match="size"):
            mr.allocate(1.5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="size"):
            mr.allocate(1 << 64)
        with pytest.raises(TypeError, match="stream"):
            mr.allocate(16, stream=object())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="buffer"):
            mr.deallocate(b"x")
        with pytest.raises(ValueError, match="was not allocated by"):
            mr.deallocate(other)
        with pytest.raises(TypeError, match="keep"):
            mr.trim("all")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="reuse_allow_opportunistic"):
            mr.attributes.reuse_allow_opportunistic = 1  # type: ignore[assignment]
    assert calls == []
    assert not other.closed
    other.close()


@pytest.mark.contract("G1", "G2")
@pytest.mark.parametrize("call", ["cuMemPoolCreate", "cuMemPoolSetAttribute"])
def test_failed_pool_creation_creates_nothing(device: Device, call: str) -> None:
    before = Context.current()
    options = DeviceMemoryResourceOptions(release_threshold=1 << 20, reuse_allow_opportunistic=False)
    with leak_check(), inject(call, OUT_OF_MEMORY, nth=1), pytest.raises(CUDAError) as info:
        DeviceMemoryResource(device, options)
    assert info.value.call == call
    assert Context.current() == before


@pytest.mark.contract("G1", "G4")
def test_failed_undo_of_a_pool_is_a_note(device: Device) -> None:
    options = DeviceMemoryResourceOptions(release_threshold=1)
    with (
        inject("cuMemPoolSetAttribute", INVALID_VALUE),
        inject("cuMemPoolDestroy", OUT_OF_MEMORY),
        pytest.raises(CUDAError) as info,
    ):
        DeviceMemoryResource(device, options)
    assert info.value.call == "cuMemPoolSetAttribute"
    assert any("cuMemPoolDestroy" in note for note in getattr(info.value, "__notes__", []))


@pytest.mark.contract("G1")
@pytest.mark.parametrize("with_stream", [True, False])
def test_failed_allocation_allocates_nothing(mr: DeviceMemoryResource, stream: Stream, with_stream: bool) -> None:
    with leak_check(), inject("cuMemAllocFromPoolAsync", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        mr.allocate(SIZE, stream if with_stream else None)
    assert info.value.call == "cuMemAllocFromPoolAsync"
    assert mr.held == 0
    assert mr.buffers == ()
    mr.allocate(SIZE, stream).close()  # G3: the pool still works


@pytest.mark.contract("G1")
def test_failed_wait_after_a_synchronous_allocation_frees_it(mr: DeviceMemoryResource) -> None:
    with leak_check(), inject("cuStreamSynchronize", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        mr.allocate(SIZE)
    assert info.value.call == "cuStreamSynchronize"
    assert mr.held == 0


@pytest.mark.contract("S3", "W5", "S2")
def test_refused_free_leaks_and_is_counted(mr: DeviceMemoryResource, stream: Stream) -> None:
    buf = mr.allocate(SIZE, stream)
    with inject("cuMemFreeAsync", INVALID_VALUE), pytest.raises(CUDAError, match="leaked"):
        buf.close()
    assert buf.closed
    assert (mr.held, mr.leaked, mr.buffers) == (0, SIZE, ())
    with record_calls() as calls:
        buf.close()  # idempotent: never freed twice
    assert calls == []


@pytest.mark.contract("W1", "W5")
def test_refused_free_on_collection_is_a_warning(mr: DeviceMemoryResource, stream: Stream) -> None:
    buf = mr.allocate(SIZE, stream)
    with inject("cuMemFreeAsync", INVALID_VALUE), pytest.warns(CUDAWarning, match="leaked"):  # noqa: PT031
        del buf
        gc.collect()
    assert (mr.held, mr.leaked) == (0, SIZE)


@pytest.mark.contract("W5")
def test_closing_the_pool_keeps_its_buffers_usable(device: Device, stream: Stream) -> None:
    mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    buf = mr.allocate(SIZE, stream)
    mr.close()
    assert mr.closed
    buf.fill(3, stream)
    assert _bytes(buf, stream) == b"\x03" * SIZE
    with pytest.raises(ResourceClosedError):
        mr.allocate(16, stream)
    buf.close()
    assert mr.held == 0


def test_the_current_pool_is_not_owned(device: Device, stream: Stream) -> None:
    mr = DeviceMemoryResource(device)
    assert not mr.owned
    assert not mr.is_ipc_enabled
    buf = mr.allocate(SIZE, stream)
    buf.close()
    with record_calls() as calls:
        mr.close()
    assert [c.name for c in calls] == []  # the device's pool is not destroyed
    with pytest.raises(ValueError, match="not IPC-enabled"):
        DeviceMemoryResource(device).get_allocation_handle()


def test_max_size_limits_the_pool(device: Device, stream: Stream) -> None:
    limit = 32 << 20
    with DeviceMemoryResource(device, DeviceMemoryResourceOptions(max_size=limit)) as mr:
        first = mr.allocate(limit // 2, stream)
        with pytest.raises(CUDAError) as info:
            mr.allocate(limit, stream)
        assert info.value.call == "cuMemAllocFromPoolAsync"
        assert mr.held == limit // 2
        first.close()


def test_attributes_and_trim(device: Device, stream: Stream) -> None:
    with DeviceMemoryResource(device, DeviceMemoryResourceOptions(release_threshold=8 << 20)) as mr:
        attrs = mr.attributes
        assert attrs.release_threshold == 8 << 20
        attrs.release_threshold = 0
        attrs.reuse_allow_opportunistic = False
        assert attrs.release_threshold == 0
        assert attrs.reuse_allow_opportunistic is False
        buf = mr.allocate(1 << 20, stream)
        assert attrs.used_mem_current >= 1 << 20
        assert attrs.reserved_mem_current >= attrs.used_mem_current
        buf.close()
        stream.sync()
        mr.trim(0)
        assert attrs.used_mem_current == 0
        attrs.reset_high_watermarks()
        assert attrs.used_mem_high == attrs.used_mem_current == 0


@pytest.mark.contract("S3")
def test_a_refused_destroy_leaks_the_pool(device: Device) -> None:
    mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    with inject("cuMemPoolDestroy", INVALID_VALUE), pytest.raises(CUDAError, match="leaked"):
        mr.close()
    with record_calls() as calls:
        mr.close()
    assert calls == []


@pytest.mark.contract("W1")
def test_a_collected_pool_is_destroyed_and_failures_warn(device: Device) -> None:
    with leak_check():
        mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
        del mr
        gc.collect()
    mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    with inject("cuMemPoolDestroy", INVALID_VALUE), pytest.warns(CUDAWarning, match="cuMemPoolDestroy"):  # noqa: PT031
        del mr
        gc.collect()


def test_pinned_pool_memory_is_host_memory(device: Device, stream: Stream) -> None:
    pmr = PinnedMemoryResource(device, PinnedMemoryResourceOptions(release_threshold=0))
    with pmr:
        assert (pmr.device_id, pmr.is_host_accessible, pmr.is_device_accessible) == (None, True, True)
        pbuf = pmr.allocate(SIZE, stream)
        assert isinstance(pbuf, PinnedBuffer)
        assert pbuf.memory_resource is pmr
        stream.sync()
        view = pbuf.numpy()
        view[:] = np.arange(SIZE, dtype=np.uint8)
        dbuf = device.allocate(SIZE)
        dbuf.copy_from(pbuf)
        out = bytearray(SIZE)
        dbuf.copy_to(out)
        assert bytes(out) == bytes(np.arange(SIZE, dtype=np.uint8))
        assert pmr.held == SIZE
        with pytest.raises(BufferError):
            pbuf.close()  # a NumPy view is alive
        del view
        pbuf.close(stream)
        assert pmr.held == 0
        sync_buf = pmr.allocate(64)
        sync_buf.close()
        dbuf.close()


@pytest.mark.contract("G1")
def test_failed_pinned_pool_access_destroys_the_pool(device: Device) -> None:
    with leak_check(), inject("cuMemPoolSetAccess", INVALID_VALUE), pytest.raises(CUDAError) as info:
        PinnedMemoryResource(device)
    assert info.value.call == "cuMemPoolSetAccess"


def test_memory_in_use_reports_every_live_allocation(device: Device, mr: DeviceMemoryResource, stream: Stream) -> None:
    base = memory_in_use()
    plain = device.allocate(256)
    pooled = mr.allocate(512, stream)
    pinned = device.allocate_pinned(128)
    report = memory_in_use()
    new = [r for r in report if r not in set(base)]
    assert sorted((r.kind, r.size) for r in new) == [("device", 256), ("device", 512), ("pinned", 128)]
    assert report.total == base.total + 896
    assert report.by_source[repr(mr)] == 512
    assert report.by_device[device.ordinal] >= 768
    for obj in (plain, pooled, pinned):
        obj.close()
    assert memory_in_use().total == base.total


@pytest.mark.usefixtures("no_memory_leaks")
def test_the_no_memory_leaks_fixture_passes_a_clean_test(device: Device, mr: DeviceMemoryResource) -> None:
    buf = mr.allocate(64)
    buf.close()
    device.allocate(32)  # dropped: collected and freed before the check
