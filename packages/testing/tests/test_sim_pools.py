"""The simulated driver's memory pools, shareable pools (memory files another process maps) and IPC events.

scripts/differential.py runs the same edge cases on a real GPU (scenarios pool_default_and_current,
pool_attributes, pool_max_size, pool_destroy_with_outstanding, pool_access_own_device, pool_export_refusals,
pool_ipc_same_process, ipc_event_refusals, pool_host_numa, pool_max_size_rounding,
pool_export_pointer_readiness, ipc_event_handle_context).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._bindings import ctx_create
from cuguard.testing._sim import SimulatedCrash, SimulatedDriver, simulated_driver
from cuguard.testing._sim.pools import POOL_GRANULE, POOL_MAX_SIZE_STEP

pytestmark = pytest.mark.contract("B2")

R = cb.CUresult
OK = R.CUDA_SUCCESS
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
FD = cb.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
A = cb.CUmemPool_attribute


@pytest.fixture
def sim() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=2) as drv:
        assert drv.cuInit(0) == (OK,)
        err, ctx = drv.cuDevicePrimaryCtxRetain(0)
        assert err == OK
        assert drv.cuCtxSetCurrent(ctx) == (OK,)
        yield drv
        drv.cuCtxSetCurrent(cb.CUcontext(0))
        drv.cuDevicePrimaryCtxRelease(0)


def _props(*, device: int = 0, shareable: bool = False, max_size: int = 0, host: bool = False) -> Any:
    props = cb.CUmemPoolProps()
    props.allocType = cb.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = (
        cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST_NUMA
        if host
        else cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    )
    props.location.id = 0 if host else device
    props.handleTypes = FD if shareable else cb.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    props.maxSize = max_size
    return props


def _pool(sim: SimulatedDriver, **kw: Any) -> Any:
    err, pool = sim.cuMemPoolCreate(_props(**kw))
    assert err == OK
    return pool


def _attr(sim: SimulatedDriver, pool: Any, name: str) -> int:
    err, value = sim.cuMemPoolGetAttribute(pool, getattr(A, "CU_MEMPOOL_ATTR_" + name))
    assert err == OK
    return int(value)


def _stream(sim: SimulatedDriver) -> Any:
    err, st = sim.cuStreamCreate(0)
    assert err == OK
    return st


def _kinds(sim: SimulatedDriver) -> list[str]:
    return sorted(obj.kind for obj in sim.live_objects() if obj.kind != "context")


def test_default_and_current_pools(sim: SimulatedDriver) -> None:
    err, default = sim.cuDeviceGetDefaultMemPool(0)
    assert err == OK
    assert sim.cuDeviceGetMemPool(0) == (OK, default)
    assert sim.cuMemPoolDestroy(default) == (INVALID_VALUE,)  # a device's default pool stays
    pool = _pool(sim)
    assert sim.cuDeviceSetMemPool(1, pool) == (R.CUDA_ERROR_INVALID_DEVICE,)  # not that device's
    assert sim.cuDeviceSetMemPool(0, pool) == (OK,)
    assert int(sim.cuDeviceGetMemPool(0)[1]) == int(pool)
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert int(sim.cuDeviceGetMemPool(0)[1]) == int(default)  # the default pool is current again


def test_pools_are_live_objects_and_a_second_destroy_is_recorded(sim: SimulatedDriver) -> None:
    pool = _pool(sim)
    assert _kinds(sim) == ["memory_pool"]
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert _kinds(sim) == []
    assert sim.cuMemPoolDestroy(pool) == (INVALID_VALUE,)
    assert [i.call for i in sim.double_release] == ["cuMemPoolDestroy"]


def test_allocation_pool_names_the_pool_of_a_live_allocation(sim: SimulatedDriver) -> None:
    pool, host = _pool(sim), _pool(sim, host=True)
    st = _stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(64, pool, st)
    assert err == OK
    err, pinned = sim.cuMemAllocFromPoolAsync(64, host, st)
    assert err == OK
    err, plain = sim.cuMemAlloc(64)
    assert err == OK
    assert sim.allocation_pool(int(ptr)) == int(pool)
    assert sim.allocation_pool(int(pinned)) == int(host)
    assert sim.allocation_pool(int(plain)) is None  # no pool's memory
    assert sim.allocation_pool(int(ptr) + 8) is None  # not an allocation's base
    for p in (ptr, pinned):
        assert sim.cuMemFreeAsync(p, st) == (OK,)
    assert sim.cuStreamSynchronize(st) == (OK,)
    assert sim.allocation_pool(int(ptr)) is None  # freed
    assert sim.cuMemFree(plain) == (OK,)
    for p in (pool, host):
        assert sim.cuMemPoolDestroy(p) == (OK,)
    assert sim.cuStreamDestroy(st) == (OK,)


def test_reserved_and_used_memory_follow_allocations(sim: SimulatedDriver) -> None:
    pool = _pool(sim)
    st = _stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(1000, pool, st)
    assert err == OK
    assert (_attr(sim, pool, "USED_MEM_CURRENT"), _attr(sim, pool, "RESERVED_MEM_CURRENT")) == (1000, POOL_GRANULE)
    value = cb.cuuint64_t(4 * POOL_GRANULE)
    assert sim.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, value) == (OK,)
    err, big = sim.cuMemAllocFromPoolAsync(3 * POOL_GRANULE, pool, st)
    assert err == OK
    assert sim.cuMemFreeAsync(big, st) == (OK,)
    assert _attr(sim, pool, "RESERVED_MEM_CURRENT") == 4 * POOL_GRANULE  # kept below the threshold
    assert sim.cuMemPoolTrimTo(pool, 0) == (OK,)
    assert _attr(sim, pool, "RESERVED_MEM_CURRENT") == POOL_GRANULE  # what is used stays reserved
    assert _attr(sim, pool, "USED_MEM_HIGH") == 1000 + 3 * POOL_GRANULE
    assert sim.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_USED_MEM_HIGH, cb.cuuint64_t(5)) == (INVALID_VALUE,)
    assert sim.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_USED_MEM_HIGH, cb.cuuint64_t(0)) == (OK,)
    assert _attr(sim, pool, "USED_MEM_HIGH") == 1000
    assert sim.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, cb.cuuint64_t(0)) == (INVALID_VALUE,)
    assert sim.cuMemFreeAsync(ptr, st) == (OK,)
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.cuStreamDestroy(st) == (OK,)


def test_max_size_and_size_zero(sim: SimulatedDriver) -> None:
    pool = _pool(sim, max_size=POOL_MAX_SIZE_STEP)
    st = _stream(sim)
    assert sim.cuMemAllocFromPoolAsync(POOL_MAX_SIZE_STEP + 1, pool, st) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    err, null = sim.cuMemAllocFromPoolAsync(0, pool, st)
    assert err == OK
    assert int(null) == 0
    sim.cuMemPoolDestroy(pool)
    sim.cuStreamDestroy(st)


def test_max_size_is_rounded_up_to_32_mib(sim: SimulatedDriver) -> None:
    """A pool of 4 MiB holds 6 MiB (as on an H200) and refuses past 32 MiB."""
    pool = _pool(sim, max_size=4 << 20)
    st = _stream(sim)
    err, first = sim.cuMemAllocFromPoolAsync(2 << 20, pool, st)
    assert err == OK
    err, second = sim.cuMemAllocFromPoolAsync(4 << 20, pool, st)
    assert err == OK
    assert sim.cuMemAllocFromPoolAsync(POOL_MAX_SIZE_STEP - (6 << 20) + 1, pool, st) == (
        R.CUDA_ERROR_OUT_OF_MEMORY,
        None,
    )
    err, last = sim.cuMemAllocFromPoolAsync(POOL_MAX_SIZE_STEP - (6 << 20), pool, st)
    assert err == OK  # exactly the rounded-up size
    for ptr in (first, second, last):
        assert sim.cuMemFreeAsync(ptr, st) == (OK,)
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.cuStreamDestroy(st) == (OK,)


def test_a_pool_on_a_device_the_driver_lacks_is_an_invalid_value(sim: SimulatedDriver) -> None:
    assert sim.cuMemPoolCreate(_props(device=99)) == (INVALID_VALUE, None)  # as on an H200
    assert _kinds(sim) == []


def test_destroyed_pool_keeps_its_allocations_until_freed(sim: SimulatedDriver) -> None:
    pool = _pool(sim, shareable=True)
    st = _stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(64, pool, st)
    assert err == OK
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.cuMemsetD8(ptr, 0x11, 64) == (OK,)  # still usable
    assert sim.read(ptr, 4) == b"\x11" * 4
    assert sim.cuMemFree(ptr) == (OK,)
    assert _kinds(sim) == ["stream"]
    sim.cuStreamDestroy(st)


def test_access_of_other_devices(sim: SimulatedDriver) -> None:
    pool = _pool(sim)
    location = cb.CUmemLocation()
    location.type = cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    location.id = 1
    none = cb.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE
    rw = cb.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    assert sim.cuMemPoolGetAccess(pool, location) == (OK, none)
    desc = cb.CUmemAccessDesc()
    desc.location = location
    desc.flags = rw
    own = cb.CUmemAccessDesc()
    own.location.type = cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    own.location.id = 0
    own.flags = none
    assert sim.cuMemPoolSetAccess(pool, [desc, own], 2) == (R.CUDA_ERROR_INVALID_DEVICE,)
    assert sim.cuMemPoolGetAccess(pool, location) == (OK, none)  # nothing changed
    assert sim.cuMemPoolSetAccess(pool, [desc], 1) == (OK,)
    assert sim.cuMemPoolGetAccess(pool, location) == (OK, rw)
    sim.cuMemPoolDestroy(pool)


def test_host_pool_memory_is_host_memory(sim: SimulatedDriver) -> None:
    pool = _pool(sim, host=True)
    st = _stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(16, pool, st)
    assert err == OK
    ctypes.memmove(int(ptr), b"hello host pool!", 16)
    assert ctypes.string_at(int(ptr), 16) == b"hello host pool!"
    assert sim.cuMemFreeAsync(ptr, st) == (OK,)
    assert sim.cuMemFreeAsync(ptr, st) == (INVALID_VALUE,)
    assert [i.call for i in sim.double_release] == ["cuMemFreeAsync"]
    sim.cuMemPoolDestroy(pool)
    sim.cuStreamDestroy(st)


def test_export_refusals(sim: SimulatedDriver) -> None:
    plain = _pool(sim)
    assert sim.cuMemPoolExportToShareableHandle(plain, FD, 0) == (INVALID_VALUE, None)
    st = _stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(64, plain, st)
    assert err == OK
    assert sim.cuMemPoolExportPointer(ptr) == (INVALID_VALUE, None)
    err, other = sim.cuMemAlloc(64)
    assert sim.cuMemPoolExportPointer(other) == (INVALID_VALUE, None)
    sim.cuMemFree(other)
    sim.cuMemFreeAsync(ptr, st)
    sim.cuMemPoolDestroy(plain)
    sim.cuStreamDestroy(st)


def test_shared_pool_round_trip_in_one_process(sim: SimulatedDriver) -> None:
    pool = _pool(sim, shareable=True)
    st = _stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(256, pool, st)
    assert err == OK
    assert sim.cuMemsetD8(ptr, 0x42, 256) == (OK,)
    assert sim.cuStreamSynchronize(st) == (OK,)  # exported once its stream reached the allocation
    err, fd = sim.cuMemPoolExportToShareableHandle(pool, FD, 0)
    assert err == OK
    err, data = sim.cuMemPoolExportPointer(ptr)
    assert err == OK
    err, imported = sim.cuMemPoolImportFromShareableHandle(fd, FD, 0)
    assert err == OK
    os.close(fd)  # the import does not need the descriptor any more
    other = _pool(sim, shareable=True)
    err, other_fd = sim.cuMemPoolExportToShareableHandle(other, FD, 0)
    err, other_imported = sim.cuMemPoolImportFromShareableHandle(other_fd, FD, 0)
    os.close(other_fd)
    assert sim.cuMemPoolImportPointer(other_imported, data) == (INVALID_VALUE, None)  # another pool's data
    err, mapped = sim.cuMemPoolImportPointer(imported, data)
    assert err == OK
    assert sim.read(mapped, 256) == b"\x42" * 256
    assert sim.cuMemsetD8(mapped, 0x24, 4) == (OK,)
    assert sim.read(ptr, 4) == b"\x24" * 4  # one memory
    assert sim.cuMemAllocFromPoolAsync(64, imported, st) == (INVALID_VALUE, None)
    assert sim.cuMemFree(mapped) == (OK,)
    assert sim.cuMemPoolDestroy(imported) == (OK,)
    assert sim.cuMemPoolDestroy(other_imported) == (OK,)
    assert sim.cuMemPoolDestroy(other) == (OK,)
    assert sim.cuMemFreeAsync(ptr, st) == (OK,)
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.cuStreamDestroy(st) == (OK,)
    assert _kinds(sim) == []
    err, free, total = sim.cuMemGetInfo()
    assert free == total  # the import's bytes were never counted as this device's


def test_export_pointer_needs_a_shared_pool(sim: SimulatedDriver) -> None:
    pool = _pool(sim, shareable=True)
    st = _stream(sim)
    err, ptr = sim.cuMemAllocFromPoolAsync(128, pool, st)
    assert err == OK
    assert sim.cuStreamSynchronize(st) == (OK,)
    assert sim.cuMemPoolExportPointer(ptr) == (INVALID_VALUE, None)  # the pool was never exported (as an H200)
    err, fd = sim.cuMemPoolExportToShareableHandle(pool, FD, 0)
    assert err == OK
    os.close(fd)  # the pool stays shared
    err, pending = sim.cuMemAllocFromPoolAsync(128, pool, st)
    assert err == OK
    assert sim.cuMemPoolExportPointer(pending)[0] == OK  # in flight on its stream: exported all the same (H200)
    assert sim.cuMemPoolExportPointer(ptr)[0] == OK
    assert sim.cuStreamSynchronize(st) == (OK,)
    assert sim.cuMemPoolExportPointer(pending)[0] == OK
    assert sim.cuMemFreeAsync(pending, st) == (OK,)
    assert sim.cuMemPoolExportPointer(ptr)[0] == OK  # again: it stays reached
    err, later = sim.cuMemAllocFromPoolAsync(2 << 20, pool, st)
    assert sim.cuStreamQuery(st) == (OK,)  # a query that finds the stream idle retires its work too
    assert sim.cuMemPoolExportPointer(later)[0] == OK
    for p in (ptr, later):
        assert sim.cuMemFreeAsync(p, st) == (OK,)
    assert sim.cuStreamSynchronize(st) == (OK,)
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.cuStreamDestroy(st) == (OK,)


def test_ipc_event_handle_with_no_context_current_crashes(sim: SimulatedDriver) -> None:
    """The real process died with SIGSEGV there (an H200): a SimulatedCrash, recorded as misuse."""
    err, shared = sim.cuEventCreate(2 | 4)
    assert err == OK
    err, ctx = sim.cuCtxGetCurrent()
    assert sim.cuCtxSetCurrent(cb.CUcontext(0)) == (OK,)
    with pytest.raises(SimulatedCrash) as info:
        sim.cuIpcGetEventHandle(shared)
    assert info.value.call == "cuIpcGetEventHandle"
    assert [i.call for i in sim.misuse] == ["cuIpcGetEventHandle"]
    sim.misuse.clear()
    err, other = ctx_create(sim, 0, 0)  # another context of the device, current now: the same crash
    assert err == OK
    with pytest.raises(SimulatedCrash):
        sim.cuIpcGetEventHandle(shared)
    assert [i.call for i in sim.misuse] == ["cuIpcGetEventHandle"]
    sim.misuse.clear()
    assert sim.cuCtxSetCurrent(ctx) == (OK,)
    assert sim.cuIpcGetEventHandle(shared)[0] == OK
    assert sim.cuEventDestroy(shared) == (OK,)
    assert sim.cuCtxDestroy(other) == (OK,)
    assert sim.cuCtxSetCurrent(ctx) == (OK,)


def _child_maps(fd_holder: Any, data: bytes, conn: Any) -> None:
    with simulated_driver(devices=1) as drv:
        drv.cuInit(0)
        err, ctx = drv.cuDevicePrimaryCtxRetain(0)
        drv.cuCtxSetCurrent(ctx)
        fd = fd_holder.detach()
        err, pool = drv.cuMemPoolImportFromShareableHandle(fd, FD, 0)
        os.close(fd)
        share = cb.CUmemPoolPtrExportData()
        ctypes.memmove(int(share.getPtr()), data, 64)
        err, ptr = drv.cuMemPoolImportPointer(pool, share)
        seen = drv.read(ptr, 8)
        drv.write(ptr, b"child!!!")
        drv.cuMemFree(ptr)
        drv.cuMemPoolDestroy(pool)
        conn.send((int(err), seen))


def test_shared_pool_between_two_processes(sim: SimulatedDriver) -> None:
    """The exported descriptor goes to another process, whose own simulator maps the same bytes."""
    from multiprocessing import reduction

    pool = _pool(sim, shareable=True)
    st = _stream(sim)
    _err, ptr = sim.cuMemAllocFromPoolAsync(64, pool, st)
    sim.write(ptr, b"parent!!")
    assert sim.cuStreamSynchronize(st) == (OK,)
    _err, fd = sim.cuMemPoolExportToShareableHandle(pool, FD, 0)
    _err, data = sim.cuMemPoolExportPointer(ptr)
    spawn = multiprocessing.get_context("spawn")
    here, there = spawn.Pipe()
    proc = spawn.Process(
        target=_child_maps, args=(reduction.DupFd(fd), ctypes.string_at(int(data.getPtr()), 64), there)
    )
    proc.start()
    os.close(fd)
    assert here.poll(120)
    status, seen = here.recv()
    proc.join(120)
    assert proc.exitcode == 0
    assert (status, seen) == (0, b"parent!!")
    assert sim.read(ptr, 8) == b"child!!!"
    sim.cuMemFreeAsync(ptr, st)
    sim.cuMemPoolDestroy(pool)
    sim.cuStreamDestroy(st)


def test_ipc_events(sim: SimulatedDriver) -> None:
    err, plain = sim.cuEventCreate(2)
    assert sim.cuIpcGetEventHandle(plain) == (R.CUDA_ERROR_INVALID_HANDLE, None)
    assert sim.cuEventCreate(4) == (INVALID_VALUE, None)  # interprocess needs timing off
    err, shared = sim.cuEventCreate(2 | 4)
    assert err == OK
    err, handle = sim.cuIpcGetEventHandle(shared)
    assert err == OK
    assert sim.cuIpcOpenEventHandle(handle) == (R.CUDA_ERROR_INVALID_CONTEXT, None)  # its own process
    with sim.as_other_process():
        err, foreign = sim.cuIpcGetEventHandle(shared)
    err, opened = sim.cuIpcOpenEventHandle(foreign)
    assert err == OK
    assert sorted(o.call for o in sim.live_objects() if o.kind == "event") == [
        "cuEventCreate",
        "cuEventCreate",
        "cuIpcOpenEventHandle",
    ]
    err, st = sim.cuStreamCreate(0)
    assert sim.cuEventRecord(opened, st) == (OK,)
    assert sim.cuStreamWaitEvent(st, opened, 0) == (OK,)
    assert sim.cuEventSynchronize(opened) == (OK,)
    for event in (opened, shared, plain):
        assert sim.cuEventDestroy(event) == (OK,)
    sim.cuStreamDestroy(st)


def test_import_pointer_needs_no_current_context(sim: SimulatedDriver) -> None:
    """As on an H200: the mapping is made with no context current and freed in the device's context."""
    pool = _pool(sim, shareable=True)
    st = _stream(sim)
    _err, ptr = sim.cuMemAllocFromPoolAsync(64, pool, st)
    assert sim.cuStreamSynchronize(st) == (OK,)
    _err, fd = sim.cuMemPoolExportToShareableHandle(pool, FD, 0)
    _err, data = sim.cuMemPoolExportPointer(ptr)
    err, imported = sim.cuMemPoolImportFromShareableHandle(fd, FD, 0)
    assert err == OK
    os.close(fd)
    err, ctx = sim.cuCtxGetCurrent()
    assert sim.cuCtxSetCurrent(cb.CUcontext(0)) == (OK,)
    err, mapped = sim.cuMemPoolImportPointer(imported, data)
    assert err == OK
    assert sim.cuCtxSetCurrent(ctx) == (OK,)
    assert sim.cuMemFree(mapped) == (OK,)
    assert sim.cuMemPoolDestroy(imported) == (OK,)
    assert sim.cuMemFreeAsync(ptr, st) == (OK,)
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.cuStreamDestroy(st) == (OK,)
    assert _kinds(sim) == []
    assert sim.misuse == []


@pytest.mark.parametrize("host", [False, True])
def test_an_allocation_the_stream_refuses_leaves_nothing(sim: SimulatedDriver, host: bool) -> None:
    """On a stream whose capture was invalidated the allocation fails and nothing of it is left."""
    pool = _pool(sim, host=host)
    st = _stream(sim)
    mode = cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    assert sim.cuStreamBeginCapture(st, mode) == (OK,)
    assert sim.cuStreamQuery(st)[0] == R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED  # invalidates the capture
    err, _ptr = sim.cuMemAllocFromPoolAsync(64, pool, st)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert _attr(sim, pool, "USED_MEM_CURRENT") == 0
    assert sim.cuStreamEndCapture(st)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert sim.cuMemPoolDestroy(pool) == (OK,)
    assert sim.cuStreamDestroy(st) == (OK,)
    assert _kinds(sim) == []
    assert sim.misuse == []
