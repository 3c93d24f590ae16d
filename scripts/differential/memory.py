"""Memory: device, pinned, host and stream-ordered allocations at their edges, copies and memsets.

What each allocation argument does at its edges; relations stand in for values that differ
between the machines (free and total memory).
"""

from __future__ import annotations

import ctypes
from typing import Any

from cuda.bindings import driver as B

from differential.common import (
    Obs,
    Setup,
    name,
    ok,
    release_if,
    scenario,
)


@scenario
def mem_alloc_cases(d: Any) -> Obs:
    with Setup(d):
        out = [name(d.cuMemAlloc(0)[0]), name(d.cuMemAlloc(1 << 50)[0])]
        p = ok(d.cuMemAlloc(64))
        out += [name(d.cuMemFree(p)[0]), name(d.cuMemFree(p)[0])]
    return out


@scenario
def mem_async_cases(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        err0, _ = d.cuMemAllocAsync(0, s)
        out = [name(err0), name(d.cuMemAllocAsync(1 << 50, s)[0])]
        p = ok(d.cuMemAllocAsync(64, s))
        with Setup(d) as other:
            s2 = other.stream()
            out.append(name(d.cuMemFreeAsync(p, s2)[0]))
            d.cuStreamSynchronize(s2)
        d.cuStreamSynchronize(s)
    return out


@scenario
def alloc_async_needs_only_the_stream(d: Any) -> Obs:
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        with Setup(d):
            p = ok(d.cuMemAllocAsync(64, s))  # another context is current
            out.append(name(d.cuMemsetD8Async(p, 5, 64, s)[0]))
            out.append(name(d.cuMemFreeAsync(p, s)[0]))
        d.cuCtxSetCurrent(B.CUcontext(0))
        err, p2 = d.cuMemAllocAsync(64, s)  # no context is current
        out.append(name(err))
        if not err:
            out.append(name(d.cuMemFreeAsync(p2, s)[0]))
        d.cuCtxSetCurrent(env.ctx)
        out.append(name(d.cuStreamSynchronize(s)[0]))
    return out


@scenario
def memcpy_round_trip_and_freed(d: Any) -> Obs:
    with Setup(d):
        p = ok(d.cuMemAlloc(16))
        src = bytes(range(16))
        d.cuMemcpyHtoD(p, src, 16)
        d.cuMemsetD8(p, 7, 4)
        back = bytearray(16)
        d.cuMemcpyDtoH(back, p, 16)
        d.cuMemFree(p)
        freed = name(d.cuMemcpyHtoD(p, src, 16)[0])
    return [bytes(back).hex(), freed]


@scenario
def pinned_memory_round_trip(d: Any) -> Obs:
    with Setup(d):
        host = ok(d.cuMemHostAlloc(32, 0))
        ctypes.memmove(int(host), bytes(range(32)), 32)
        p = ok(d.cuMemAlloc(32))
        s = ok(d.cuStreamCreate(0))
        d.cuMemcpyHtoDAsync(p, host, 32, s)
        back = bytearray(32)
        d.cuMemcpyDtoHAsync(back, p, 32, s)
        d.cuStreamSynchronize(s)
        out = [bytes(back) == bytes(range(32)), name(d.cuStreamQuery(s)[0])]
        d.cuStreamDestroy(s)
        d.cuMemFree(p)
        out.append(name(d.cuMemFreeHost(host)[0]))
    return out


@scenario
def memory_info_relations(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [name(d.cuMemGetInfo()[0])]  # no current context
    with Setup(d) as env:
        free, total = ok(d.cuMemGetInfo())
        out += [0 < int(free) <= int(total), int(total) == int(ok(d.cuDeviceTotalMem(ok(d.cuDeviceGet(0)))))]
        env.alloc(64 << 20)
        after, _ = ok(d.cuMemGetInfo())
        out.append(int(after) < int(free))
    return out


@scenario
def device_allocation_edges(d: Any) -> Obs:
    with Setup(d):
        total = int(ok(d.cuDeviceTotalMem(ok(d.cuDeviceGet(0)))))
        out: Obs = [
            release_if(d, d.cuMemAlloc(0), "cuMemFree"),
            release_if(d, d.cuMemAlloc(total + 1), "cuMemFree"),
            release_if(d, d.cuMemAlloc(1 << 50), "cuMemFree"),
            name(d.cuMemFree(B.CUdeviceptr(0))[0]),
        ]
        for size, flags in ((0, 1), (64, 0), (64, 3), (64, 4), (1 << 50, 1), (64, 1), (64, 2)):
            out.append(release_if(d, d.cuMemAllocManaged(size, flags), "cuMemFree"))
        for width, height, element in (
            (100, 3, 4),
            (100, 3, 3),
            (100, 3, 32),
            (0, 3, 4),
            (100, 0, 4),
            (1 << 20, 1 << 30, 4),
        ):
            result = d.cuMemAllocPitch(width, height, element)
            out.append([release_if(d, result[:2], "cuMemFree"), None if result[2] is None else int(result[2])])
    return out


@scenario
def stream_ordered_allocation_edges(d: Any) -> Obs:
    with Setup(d) as env:
        total = int(ok(d.cuDeviceTotalMem(ok(d.cuDeviceGet(0)))))
        s = env.stream()
        err, zero = d.cuMemAllocAsync(0, s)
        out: Obs = [name(err), int(zero) == 0]
        out.append(name(d.cuMemFreeAsync(zero, s)[0]))
        out.append(release_if(d, d.cuMemAllocAsync(total + 1, s), "cuMemFree"))
        out.append(name(d.cuMemFreeAsync(B.CUdeviceptr(0), s)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
    return out


@scenario
def host_allocation_edges(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [release_if(d, d.cuMemAllocHost(64), "cuMemFreeHost")]  # no current context
    with Setup(d):
        for result in (d.cuMemAllocHost(0), d.cuMemHostAlloc(0, 0)):
            out += [name(result[0]), result[1] is not None and int(result[1]) == 0]
            release_if(d, result, "cuMemFreeHost")
        out.append(release_if(d, d.cuMemAllocHost(1 << 50), "cuMemFreeHost"))
        out.append(release_if(d, d.cuMemHostAlloc(1 << 50, 0), "cuMemFreeHost"))
        for flags in (1, 2, 4, 7, 8, 0x10, 0x80000000):
            out.append(release_if(d, d.cuMemHostAlloc(64, flags), "cuMemFreeHost"))
        out.append(name(d.cuMemFreeHost(0)[0]))
    return out


@scenario
def zero_byte_memset_and_copy(d: Any) -> Obs:
    with Setup(d) as env:
        p = env.alloc(64)
        s = env.stream()
        out: Obs = [
            name(d.cuMemsetD8(p, 1, 0)[0]),
            name(d.cuMemsetD16(p, 1, 0)[0]),
            name(d.cuMemsetD32(p, 1, 0)[0]),
            name(d.cuMemsetD8Async(p, 1, 0, s)[0]),
            name(d.cuMemcpyHtoD(p, b"", 0)[0]),
            name(d.cuMemcpyDtoH(bytearray(1), p, 0)[0]),
            name(d.cuMemcpyDtoD(p, p, 0)[0]),
            name(d.cuMemcpyHtoDAsync(p, b"", 0, s)[0]),
        ]
        d.cuStreamSynchronize(s)
    return out
