"""Devices: attributes and names, error strings, what cuda-bindings refuses before the driver, two devices.

What user code asks around cuguard's calls. Relations stand in for values that differ between the
machines (free memory, total memory, names); values fixed by the architecture (sm_90) are compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import ctx_create
from differential.common import (
    A,
    Obs,
    R,
    Setup,
    name,
    ok,
    scenario,
    status_or_raise,
    two_devices,
)

_ARCH_ATTRIBUTES = (
    "WARP_SIZE",
    "MAX_THREADS_PER_BLOCK",
    "MAX_BLOCK_DIM_X",
    "MAX_BLOCK_DIM_Y",
    "MAX_BLOCK_DIM_Z",
    "MAX_GRID_DIM_X",
    "MAX_GRID_DIM_Y",
    "MAX_GRID_DIM_Z",
    "MAX_SHARED_MEMORY_PER_BLOCK",
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "RESERVED_SHARED_MEMORY_PER_BLOCK",
    "MAX_REGISTERS_PER_BLOCK",
    "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "MAX_THREADS_PER_MULTIPROCESSOR",
    "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "TOTAL_CONSTANT_MEMORY",
    "COMPUTE_CAPABILITY_MAJOR",
    "COMPUTE_CAPABILITY_MINOR",
    "MULTIPROCESSOR_COUNT",
    "L2_CACHE_SIZE",
    "GLOBAL_MEMORY_BUS_WIDTH",
    "MAX_PITCH",
    "TEXTURE_ALIGNMENT",
    "TEXTURE_PITCH_ALIGNMENT",
    "INTEGRATED",
    "CAN_MAP_HOST_MEMORY",
    "UNIFIED_ADDRESSING",
    "MANAGED_MEMORY",
    "CONCURRENT_MANAGED_ACCESS",
    "PAGEABLE_MEMORY_ACCESS",
    "HOST_NATIVE_ATOMIC_SUPPORTED",
    "MEMORY_POOLS_SUPPORTED",
    "STREAM_PRIORITIES_SUPPORTED",
    "CONCURRENT_KERNELS",
    "COOPERATIVE_LAUNCH",
    "CLUSTER_LAUNCH",
    "VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED",
    "TENSOR_MAP_ACCESS_SUPPORTED",
)


@scenario
def devices_and_errors(d: Any) -> Obs:
    dev = ok(d.cuDeviceGet(0))
    major = int(ok(d.cuDeviceGetAttribute(B.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)))
    err, text = d.cuGetErrorString(R.CUDA_ERROR_OUT_OF_MEMORY)
    err2, ename = d.cuGetErrorName(R.CUDA_ERROR_INVALID_CONTEXT)
    bad = name(d.cuDeviceGet(4096)[0])
    return [
        major >= 9,
        name(err),
        bytes(text).decode() if not isinstance(text, str) else text,
        name(err2),
        bytes(ename).decode() if not isinstance(ename, str) else ename,
        bad,
    ]


@scenario
def device_queries(d: Any) -> Obs:
    dev = ok(d.cuDeviceGet(0))
    out: Obs = [
        [key, int(ok(d.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + key), dev)))]
        for key in _ARCH_ATTRIBUTES
    ]
    out.append(name(d.cuDeviceGetAttribute(99999, dev)[0]))  # not an attribute
    out.append(name(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MAX, dev)[0]))
    raw = bytes(ok(d.cuDeviceGetName(64, dev)))
    out.append(raw.split(b"\0")[0].startswith(b"NVIDIA H200"))
    # cuDeviceGetName(0, dev) is not asked: the H200's driver dies of SIGSEGV there (the simulator
    # raises SimulatedCrash; test_sim_facts checks it, and cuguard always asks with 256 bytes).
    out.append(int(ok(d.cuDeviceTotalMem(dev))) > 0)
    uuids = {bytes(ok(d.cuDeviceGetUuid(ok(d.cuDeviceGet(i)))).bytes) for i in range(int(ok(d.cuDeviceGetCount())))}
    out += [bytes(16) not in uuids, len(uuids) == int(ok(d.cuDeviceGetCount()))]
    text = bytes(ok(d.cuDeviceGetPCIBusId(64, dev))).split(b"\0")[0].decode()
    parts = text.replace(".", ":").split(":")
    where = [
        int(ok(d.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + key), dev)))
        for key in ("PCI_DOMAIN_ID", "PCI_BUS_ID", "PCI_DEVICE_ID")
    ]
    out += [[len(p) for p in parts], [int(p, 16) for p in parts[:3]] == where, text == text.upper()]
    calls: list[Callable[[], Any]] = [
        lambda: d.cuDeviceGet(4096),
        lambda: d.cuDeviceGet(-1),
        lambda: d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 4096),
        lambda: d.cuDeviceTotalMem(4096),
        lambda: d.cuDeviceGetName(64, 4096),
        lambda: d.cuDeviceGetUuid(4096),
        lambda: d.cuDeviceGetPCIBusId(64, 4096),
        lambda: d.cuDevicePrimaryCtxGetState(4096),
    ]
    for call in calls:
        out.append(name(call()[0]))
    return out


@scenario
def binding_refusals(d: Any) -> Obs:
    # Values cuda-bindings refuses before it calls the driver: the exception types.
    warp = A.CU_DEVICE_ATTRIBUTE_WARP_SIZE
    calls: list[Callable[[], Any]] = [
        lambda: d.cuMemAlloc(-1),
        lambda: d.cuMemAlloc(None),
        lambda: d.cuMemAlloc("64"),
        lambda: d.cuMemAlloc(1 << 64),
        lambda: d.cuMemAllocAsync(-1, 0),
        lambda: d.cuMemAllocAsync(64, -1),
        lambda: d.cuMemAllocAsync(64, "stream"),
        lambda: d.cuMemAllocHost(-1),
        lambda: d.cuMemHostAlloc(None, 0),
        lambda: d.cuMemHostAlloc(64, -1),
        lambda: d.cuMemHostAlloc(64, 1 << 32),
        lambda: d.cuMemAllocManaged(-1, 1),
        lambda: d.cuMemAllocManaged(64, None),
        lambda: d.cuMemAllocPitch(None, 1, 4),
        lambda: d.cuMemAllocPitch(64, 1, -4),
        lambda: d.cuStreamCreate(-1),
        lambda: d.cuStreamCreate(None),
        lambda: d.cuStreamCreate(1 << 32),
        lambda: d.cuStreamCreateWithPriority(-1, 0),
        lambda: d.cuStreamCreateWithPriority(0, None),
        lambda: d.cuStreamCreateWithPriority(0, 1 << 31),
        lambda: d.cuStreamCreateWithPriority(0, -(1 << 31) - 1),
        lambda: d.cuEventCreate(-1),
        lambda: d.cuEventCreate(None),
        lambda: d.cuEventCreate(1 << 32),
        lambda: ctx_create(d, -1, 0),
        lambda: d.cuDevicePrimaryCtxSetFlags(0, -1),
        lambda: d.cuDevicePrimaryCtxSetFlags(0, None),
        lambda: d.cuDeviceGet(None),
        lambda: d.cuDeviceGet(1 << 31),
        lambda: d.cuDeviceGetAttribute(None, 0),
        lambda: d.cuDeviceGetAttribute(1 << 40, 0),
        lambda: d.cuDeviceGetAttribute("x", 0),
        lambda: d.cuDeviceGetAttribute(warp, 1 << 31),
        lambda: d.cuDeviceGetAttribute(warp, "x"),
        lambda: d.cuFuncGetAttribute(None, 0),
        lambda: d.cuFuncGetAttribute(0, -1),
        lambda: d.cuFuncSetAttribute(0, None, 0),
        lambda: d.cuFuncSetAttribute(0, 0, 1 << 31),
        lambda: d.cuMemsetD8(0, 256, 1),
        lambda: d.cuMemsetD8(0, 1, -1),
        lambda: d.cuMemsetD16(0, 1 << 16, 1),
        lambda: d.cuMemsetD32(0, -1, 1),
        lambda: d.cuMemFree(-1),
        lambda: d.cuMemFree("p"),
        lambda: d.cuMemcpyHtoD(0, b"", -1),
        lambda: d.cuCtxSetCurrent(-1),
        lambda: d.cuStreamDestroy(-1),
    ]
    return [status_or_raise(call) for call in calls]


@two_devices
def two_devices_primary_contexts_differ(d: Any) -> Obs:
    d0, d1 = ok(d.cuDeviceGet(0)), ok(d.cuDeviceGet(1))
    p0, p1 = ok(d.cuDevicePrimaryCtxRetain(d0)), ok(d.cuDevicePrimaryCtxRetain(d1))
    d.cuCtxSetCurrent(p1)
    dev = int(ok(d.cuCtxGetDevice()))
    d.cuCtxSetCurrent(B.CUcontext(0))
    out = [int(p0) != int(p1), dev]
    d.cuDevicePrimaryCtxRelease(d0)
    d.cuDevicePrimaryCtxRelease(d1)
    return out


@two_devices
def two_devices_copy_and_cross_wait(d: Any) -> Obs:
    with Setup(d) as env:
        s0 = env.stream()
        a = env.alloc(32)
        d.cuMemcpyHtoD(a, bytes(range(32)), 32)
        ev = env.event(2)
        d.cuEventRecord(ev, s0)
        with Setup(d, device=1) as env1:
            s1 = env1.stream()
            b = env1.alloc(32)
            waited = name(d.cuStreamWaitEvent(s1, ev, 0)[0])
            copied = name(d.cuMemcpyDtoDAsync(b, a, 32, s1)[0])
            synced = name(d.cuStreamSynchronize(s1)[0])
            back = bytearray(32)
            d.cuMemcpyDtoH(back, b, 32)
            wrong = name(d.cuEventRecord(ev, s1)[0])  # an event of device 0 on a stream of device 1
        d.cuCtxSetCurrent(env.ctx)
    return [waited, copied, synced, bytes(back) == bytes(range(32)), wrong]
