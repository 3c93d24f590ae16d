"""Memory pools.

The edge cases DeviceMemoryResource and PinnedMemoryResource depend on, and those the simulator
assumes (tests/test_sim_pools.py in packages/testing names them). Sizes the driver rounds
(reserved memory) are compared as relations, not numbers.

Freeing pool and managed memory from each context situation, and pools destroyed early: the
first failure-point sweep of the pools on an H200 reported refused frees of pool and managed
memory (CUDA_ERROR_INVALID_HANDLE) with no context or another context current; those scenarios
record what the driver itself answers in each situation. The ``_then_new_pool`` scenarios probe a
crash (SIGFPE in cuMemAllocFromPoolAsync on the legacy stream) seen after a pool had been
destroyed while its buffers were allocated: each runs in a process of its own on the GPU, so a
crash is recorded against the one order that causes it.
"""

from __future__ import annotations

import ctypes
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import ctx_create
from differential.common import (
    Obs,
    Setup,
    access_descs,
    device_location,
    must,
    name,
    ok,
    scenario,
)

POOL_FD = B.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


_PA = B.CUmemPool_attribute


def pool_props(*, shareable: bool = False, max_size: int = 0, location: str = "DEVICE", ident: int = 0) -> Any:
    props = B.CUmemPoolProps()
    props.allocType = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = getattr(B.CUmemLocationType, "CU_MEM_LOCATION_TYPE_" + location)
    props.location.id = ident
    props.handleTypes = POOL_FD if shareable else B.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    props.maxSize = max_size
    return props


def _pool_attr(d: Any, pool: Any, attr: str) -> int:
    return int(ok(d.cuMemPoolGetAttribute(pool, getattr(_PA, "CU_MEMPOOL_ATTR_" + attr))))


def _pool_set(d: Any, pool: Any, attr: str, value: int, *, wide: bool = True) -> str:
    given = B.cuuint64_t(value) if wide else value
    return name(d.cuMemPoolSetAttribute(pool, getattr(_PA, "CU_MEMPOOL_ATTR_" + attr), given)[0])


@scenario
def pool_default_and_current(d: Any) -> Obs:
    with Setup(d):
        default = ok(d.cuDeviceGetDefaultMemPool(0))
        out: Obs = [int(ok(d.cuDeviceGetMemPool(0))) == int(default), name(d.cuMemPoolDestroy(default)[0])]
        pool = ok(d.cuMemPoolCreate(pool_props()))
        out.append(name(d.cuDeviceSetMemPool(0, pool)[0]))
        out.append(int(ok(d.cuDeviceGetMemPool(0))) == int(pool))
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
        out.append(int(ok(d.cuDeviceGetMemPool(0))) == int(default))  # the default pool is current again
        out.append(name(d.cuMemPoolCreate(pool_props(location="DEVICE", ident=99))[0]))
    return out


@scenario
def pool_attributes(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        pool = ok(d.cuMemPoolCreate(pool_props()))
        out: Obs = [
            [_pool_attr(d, pool, a) for a in ("REUSE_FOLLOW_EVENT_DEPENDENCIES", "REUSE_ALLOW_OPPORTUNISTIC")],
            _pool_attr(d, pool, "REUSE_ALLOW_INTERNAL_DEPENDENCIES"),
            _pool_attr(d, pool, "RELEASE_THRESHOLD"),
            _pool_set(d, pool, "RELEASE_THRESHOLD", 1 << 20),
            _pool_attr(d, pool, "RELEASE_THRESHOLD"),
            _pool_set(d, pool, "REUSE_ALLOW_OPPORTUNISTIC", 0, wide=False),
            _pool_attr(d, pool, "REUSE_ALLOW_OPPORTUNISTIC"),
            _pool_set(d, pool, "RESERVED_MEM_CURRENT", 0),
            _pool_set(d, pool, "USED_MEM_HIGH", 5),
        ]
        p = ok(d.cuMemAllocFromPoolAsync(1 << 20, pool, s))
        used = _pool_attr(d, pool, "USED_MEM_CURRENT")
        reserved = _pool_attr(d, pool, "RESERVED_MEM_CURRENT")
        out += [used >= 1 << 20, reserved >= used, _pool_attr(d, pool, "USED_MEM_HIGH") >= used]
        out.append(name(d.cuMemFreeAsync(p, s)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
        out.append(_pool_attr(d, pool, "USED_MEM_CURRENT"))
        out.append(_pool_set(d, pool, "USED_MEM_HIGH", 0))
        out.append(_pool_attr(d, pool, "USED_MEM_HIGH"))
        out.append(name(d.cuMemPoolTrimTo(pool, 0)[0]))
        out.append(_pool_attr(d, pool, "RESERVED_MEM_CURRENT") <= reserved)
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
    return out


@scenario
def pool_max_size(d: Any) -> Obs:
    limit = 32 << 20
    with Setup(d) as env:
        s = env.stream()
        pool = ok(d.cuMemPoolCreate(pool_props(max_size=limit)))
        out: Obs = [name(d.cuMemAllocFromPoolAsync(2 * limit, pool, s)[0])]
        err0, null = d.cuMemAllocFromPoolAsync(0, pool, s)
        out += [name(err0), int(null) if not err0 else None]
        p = ok(d.cuMemAllocFromPoolAsync(limit // 2, pool, s))
        out.append(name(d.cuMemAllocFromPoolAsync(limit, pool, s)[0]))
        out.append(name(d.cuMemFreeAsync(p, s)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
    return out


@scenario
def pool_destroy_with_outstanding(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        pool = ok(d.cuMemPoolCreate(pool_props()))
        p = ok(d.cuMemAllocFromPoolAsync(64, pool, s))
        d.cuStreamSynchronize(s)
        out: Obs = [name(d.cuMemPoolDestroy(pool)[0])]
        out.append(name(d.cuMemsetD8(p, 0x33, 64)[0]))
        back = bytearray(64)
        out.append(name(d.cuMemcpyDtoH(back, p, 64)[0]))
        out.append(bytes(back[:4]).hex())
        out.append(name(d.cuMemFree(p)[0]))
    return out


@scenario
def pool_access_own_device(d: Any) -> Obs:
    with Setup(d):
        pool = ok(d.cuMemPoolCreate(pool_props()))
        here = B.CUmemLocation()
        here.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        here.id = 0
        out: Obs = [ok(d.cuMemPoolGetAccess(pool, here)).name]
        desc = B.CUmemAccessDesc()
        desc.location = here
        desc.flags = B.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE
        out.append(name(d.cuMemPoolSetAccess(pool, [desc], 1)[0]))
        desc.flags = B.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        out.append(name(d.cuMemPoolSetAccess(pool, [desc], 1)[0]))
        out.append(ok(d.cuMemPoolGetAccess(pool, here)).name)
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
    return out


@scenario
def pool_host_numa(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        out: Obs = []
        for location in ("HOST_NUMA", "HOST"):
            err, pool = d.cuMemPoolCreate(pool_props(location=location))
            out.append(name(err))
            if err:
                continue
            desc = B.CUmemAccessDesc()
            desc.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            desc.location.id = 0
            desc.flags = B.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            out.append(name(d.cuMemPoolSetAccess(pool, [desc], 1)[0]))
            err, p = d.cuMemAllocFromPoolAsync(64, pool, s)
            out.append(name(err))
            if not err:
                d.cuStreamSynchronize(s)
                ctypes.memmove(int(p), bytes(range(64)), 64)
                dev = ok(d.cuMemAlloc(64))
                out.append(name(d.cuMemcpyHtoD(dev, int(p), 64)[0]))
                back = bytearray(64)
                d.cuMemcpyDtoH(back, dev, 64)
                out.append(bytes(back) == bytes(range(64)))
                d.cuMemFree(dev)
                out.append(name(d.cuMemFreeAsync(p, s)[0]))
                d.cuStreamSynchronize(s)
            out.append(name(d.cuMemPoolDestroy(pool)[0]))
    return out


@scenario
def pool_host_access_every_device(d: Any) -> Obs:
    """A pinned (host NUMA) pool: its access before any grant, then one grant naming every device (as
    PinnedMemoryResource makes it), a grant naming a device that does not exist, and memory of the
    pool allocated on each device's stream."""
    count = int(ok(d.cuDeviceGetCount()))
    everyone = list(range(count))
    out: Obs = []
    with Setup(d):
        pool = ok(d.cuMemPoolCreate(pool_props(location="HOST_NUMA")))
        out.append([ok(d.cuMemPoolGetAccess(pool, device_location(n))).name for n in everyone])
        out.append(name(d.cuMemPoolSetAccess(pool, access_descs([*everyone, count]), count + 1)[0]))
        out.append([ok(d.cuMemPoolGetAccess(pool, device_location(n))).name for n in everyone])
        out.append(name(d.cuMemPoolSetAccess(pool, access_descs(everyone), count)[0]))
        out.append([ok(d.cuMemPoolGetAccess(pool, device_location(n))).name for n in everyone])
        out.append(name(d.cuMemPoolGetAccess(pool, device_location(count))[0]))
        for ordinal in everyone:
            primary = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(ordinal))))
            must(d.cuCtxSetCurrent(primary))
            s = ok(d.cuStreamCreate(0))
            err, p = d.cuMemAllocFromPoolAsync(64, pool, s)
            out.append(name(err))
            if not err:
                dev = ok(d.cuMemAlloc(64))
                d.cuMemsetD8Async(dev, 0x40 + ordinal, 64, s)
                out.append(name(d.cuMemcpyAsync(p, dev, 64, s)[0]))
                out.append(name(d.cuStreamSynchronize(s)[0]))
                out.append(ctypes.string_at(int(p), 4).hex())
                out.append(name(d.cuMemFreeAsync(p, s)[0]))
                d.cuStreamSynchronize(s)
                d.cuMemFree(dev)
            d.cuStreamDestroy(s)
            d.cuDevicePrimaryCtxRelease(ok(d.cuDeviceGet(ordinal)))
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
    return out


@scenario
def pinned_copies_between_kinds(d: Any) -> Obs:
    """Copies PinnedBuffer and Buffer make between pinned pool memory, cuMemHostAlloc memory and device memory:
    cuMemcpy/cuMemcpyAsync by unified address (pinned to pinned), cuMemcpyHtoD/DtoH with a pinned address."""
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        pool = ok(d.cuMemPoolCreate(pool_props(location="HOST_NUMA")))
        must(d.cuMemPoolSetAccess(pool, access_descs([0]), 1))
        pooled = ok(d.cuMemAllocFromPoolAsync(64, pool, s))
        d.cuStreamSynchronize(s)
        host = ok(d.cuMemHostAlloc(64, 0))
        dev = ok(d.cuMemAlloc(64))
        ctypes.memmove(int(host), bytes(range(64)), 64)
        ctypes.memset(int(pooled), 0, 64)
        out.append(name(d.cuMemcpy(int(pooled), int(host), 64)[0]))
        out.append(ctypes.string_at(int(pooled), 64) == bytes(range(64)))
        ctypes.memset(int(host), 0x11, 64)
        out.append(name(d.cuMemcpyAsync(int(pooled), int(host), 64, s)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
        out.append(ctypes.string_at(int(pooled), 4).hex())
        out.append(name(d.cuMemcpyHtoDAsync(dev, int(pooled), 64, s)[0]))
        ctypes.memset(int(host), 0, 64)
        out.append(name(d.cuMemcpyDtoHAsync(int(host), dev, 64, s)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
        out.append(ctypes.string_at(int(host), 4).hex())
        out.append(name(d.cuMemcpyAsync(int(host), int(host), 0, s)[0]))  # an empty copy
        d.cuStreamSynchronize(s)
        d.cuMemFree(dev)
        out.append(name(d.cuMemFreeHost(host)[0]))
        d.cuMemFreeAsync(pooled, s)
        d.cuStreamSynchronize(s)
        d.cuMemPoolDestroy(pool)
    return out


@scenario
def pool_max_size_rounding(d: Any) -> Obs:
    """How much a pool of a given maxSize holds: 2 MiB allocations until the first refusal.

    For each limit: the limit and the total allocated at the first refusal (in MiB). (The
    pool's own CU_MEMPOOL_ATTR_MAX_POOL_SIZE is not asked: cuda-bindings 13.3's
    cuMemPoolGetAttribute does not take it.)
    """
    step = 2 << 20
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        for limit in (4 << 20, 34 << 20, 48 << 20):
            pool = ok(d.cuMemPoolCreate(pool_props(max_size=limit)))
            held: list[Any] = []
            while len(held) < 64:
                err, p = d.cuMemAllocFromPoolAsync(step, pool, s)
                if err:
                    out += [limit >> 20, (len(held) * step) >> 20, name(err)]
                    break
                held.append(p)
            else:
                out += [limit >> 20, None, "no refusal up to 128 MiB"]
            for p in held:
                d.cuMemFreeAsync(p, s)
            must(d.cuStreamSynchronize(s))
            out.append(name(d.cuMemPoolDestroy(pool)[0]))
    return out


def _switch(d: Any, where: str, primary: Any, other: Any) -> None:
    target = {"primary": primary, "other": other, "none": B.CUcontext(0)}[where]
    must(d.cuCtxSetCurrent(target))


@scenario
def pool_memory_free_context(d: Any) -> Obs:
    """The status of each free of created-pool memory with the stream's context, another one or none current.

    A pool allocation on a stream of the primary context is freed (cuMemFreeAsync on that stream,
    or cuMemFree once the stream is synchronized) with each context situation current; then
    allocations on the legacy stream (handle 0, of the primary context) freed on handle 0 with
    another context current (its own legacy stream) and with none. A refused free is done again
    in the primary context, so that the pool can be destroyed.
    """
    out: Obs = []
    with Setup(d, primary=True) as env:
        s = ok(d.cuStreamCreate(0))
        pool = ok(d.cuMemPoolCreate(pool_props()))
        other = ok(ctx_create(d, 0, env.dev))
        cases = [(w, f, s) for f in ("async", "sync") for w in ("primary", "other", "none")]
        cases += [("other", "async", B.CUstream(0)), ("none", "async", B.CUstream(0))]
        for where, how, stream in cases:
            _switch(d, "primary", env.ctx, other)
            p = ok(d.cuMemAllocFromPoolAsync(512, pool, stream))
            must(d.cuStreamSynchronize(stream))
            _switch(d, where, env.ctx, other)
            err = (d.cuMemFreeAsync(p, stream) if how == "async" else d.cuMemFree(p))[0]
            out.append(name(err))
            _switch(d, "primary", env.ctx, other)
            if err:
                must(d.cuMemFree(p))
            must(d.cuStreamSynchronize(stream))
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
        d.cuStreamDestroy(s)
        d.cuCtxSetCurrent(B.CUcontext(0))
        d.cuCtxDestroy(other)
    return out


@scenario
def managed_memory_free_context(d: Any) -> Obs:
    """The status of cuMemFree of managed memory allocated in the primary context, with it, another or none current."""
    out: Obs = []
    with Setup(d, primary=True) as env:
        other = ok(ctx_create(d, 0, env.dev))
        for where in ("primary", "other", "none"):
            _switch(d, "primary", env.ctx, other)
            p = ok(d.cuMemAllocManaged(512, 1))
            _switch(d, where, env.ctx, other)
            (err,) = d.cuMemFree(p)
            out.append(name(err))
            if err:
                _switch(d, "primary", env.ctx, other)
                must(d.cuMemFree(p))
        d.cuCtxSetCurrent(B.CUcontext(0))
        d.cuCtxDestroy(other)
    return out


def _new_pool_after(d: Any, order: str) -> Obs:
    """A pool with a stream and a legacy-stream allocation, released in ``order``; then a new pool allocates.

    ``order``: "free_then_destroy" (the buffers freed, then the pool destroyed), "destroy_then_free"
    (the pool destroyed while both are allocated, then they are freed: cuMemFree of the legacy
    one, cuMemFreeAsync of the other on its stream, which is then destroyed at once) or
    "destroy_leaked" (destroyed while both are allocated, which are freed only at the end). Then
    a new pool allocates on a new stream and on the legacy stream (what crashed), and is released.
    """
    out: Obs = []
    with Setup(d, primary=True) as env:
        s = ok(d.cuStreamCreate(0))
        legacy = B.CUstream(0)
        first = ok(d.cuMemPoolCreate(pool_props()))
        a = ok(d.cuMemAllocFromPoolAsync(4096, first, s))
        b = ok(d.cuMemAllocFromPoolAsync(4096, first, legacy))
        must(d.cuStreamSynchronize(legacy))
        if order == "free_then_destroy":
            out += [name(d.cuMemFree(b)[0]), name(d.cuMemFreeAsync(a, s)[0]), name(d.cuMemPoolDestroy(first)[0])]
        else:
            out.append(name(d.cuMemPoolDestroy(first)[0]))
            if order == "destroy_then_free":
                out += [name(d.cuCtxSynchronize()[0]), name(d.cuMemFree(b)[0]), name(d.cuMemFreeAsync(a, s)[0])]
        out.append(name(d.cuStreamDestroy(s)[0]))
        s2 = env.stream()
        second = ok(d.cuMemPoolCreate(pool_props()))
        err, c = d.cuMemAllocFromPoolAsync(4096, second, s2)
        out.append(name(err))
        err2, e = d.cuMemAllocFromPoolAsync(4096, second, legacy)
        out.append(name(err2))
        out.append(name(d.cuStreamSynchronize(legacy)[0]))
        if not err:
            out.append(name(d.cuMemFreeAsync(c, s2)[0]))
        if not err2:
            out.append(name(d.cuMemFree(e)[0]))
        out.append(name(d.cuStreamSynchronize(s2)[0]))
        out.append(name(d.cuMemPoolDestroy(second)[0]))
        if order == "destroy_leaked":
            out += [name(d.cuMemFree(b)[0]), name(d.cuMemFree(a)[0])]
    return out


@scenario
def pool_freed_then_destroyed_then_new_pool(d: Any) -> Obs:
    return _new_pool_after(d, "free_then_destroy")


@scenario
def pool_destroyed_then_freed_then_new_pool(d: Any) -> Obs:
    return _new_pool_after(d, "destroy_then_free")


@scenario
def pool_destroyed_with_buffers_leaked_then_new_pool(d: Any) -> Obs:
    return _new_pool_after(d, "destroy_leaked")
