#!/usr/bin/env python3
"""Differential check: the simulated driver against the real one.

Each scenario is a short script of driver-level calls, including failing ones,
written against the ``cuda.bindings.driver`` interface. It runs once on a fresh
simulated driver and once on the real driver, and returns its observations
(status names, handle relations, bytes read back). The two lists must be equal;
a disagreement is a bug in the simulator.

Usage: differential.py [--json FILE] [--sim-only]
With --sim-only (no GPU) the scenarios only run on the simulator, which checks
that they run at all. Exit status 1 when any scenario disagrees or breaks.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for src in sorted((ROOT / "packages").glob("*/src")):
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))

from cuda.bindings import driver as B  # noqa: E402

from cuguard.testing import SimulatedDriver  # noqa: E402
from cuguard.testing._bindings import (  # noqa: E402
    BINDINGS_MAJOR,
    add_dependencies,
    ctx_create,
    remove_dependencies,
)

R = B.CUresult
Obs = list[Any]
SCENARIOS: dict[str, Callable[[Any], Obs]] = {}
TWO_DEVICE: set[str] = set()  # scenarios that need two devices on both drivers

PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty() { ret; }
\x00"""


def scenario(fn: Callable[[Any], Obs]) -> Callable[[Any], Obs]:
    SCENARIOS[fn.__name__] = fn
    return fn


def name(status: Any) -> str:
    return R(int(status)).name


def ok(result: Any) -> Any:
    """The value of a successful call (raises on failure so the scenario stops)."""
    if int(result[0]):
        raise RuntimeError(f"unexpected {name(result[0])}")
    return result[1] if len(result) == 2 else result[1:]


class Ctx:
    """A created context on device 0, destroyed on exit; the thread ends with none current."""

    def __init__(self, d: Any) -> None:
        self.d = d

    def __enter__(self) -> Any:
        self.ctx = ok(ctx_create(self.d, 0, ok(self.d.cuDeviceGet(0))))
        return self.ctx

    def __exit__(self, *exc: object) -> None:
        self.d.cuCtxSetCurrent(B.CUcontext(0))
        self.d.cuCtxDestroy(self.ctx)
        self.d.cuCtxSetCurrent(B.CUcontext(0))


@scenario
def fresh_thread_has_no_context(d: Any) -> Obs:
    out: Obs = []

    def body() -> None:
        err, ctx = d.cuCtxGetCurrent()
        out.extend([name(err), int(ctx)])

    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out


@scenario
def set_null_and_pop_empty(d: Any) -> Obs:
    return [name(d.cuCtxSetCurrent(B.CUcontext(0))[0]), name(d.cuCtxPopCurrent()[0]), int(ok(d.cuCtxGetCurrent()))]


@scenario
def stream_without_context(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    return [name(d.cuStreamCreate(0)[0])]


@scenario
def create_is_current_destroy_leaves_null(d: Any) -> Obs:
    ctx = ok(ctx_create(d, 0, ok(d.cuDeviceGet(0))))
    current = int(ok(d.cuCtxGetCurrent())) == int(ctx)
    first = name(d.cuCtxDestroy(ctx)[0])
    return [current, first, int(ok(d.cuCtxGetCurrent()))]


@scenario
def destroying_current_context_pops_it(d: Any) -> Obs:
    dev = ok(d.cuDeviceGet(0))
    a = ok(ctx_create(d, 0, dev))
    b = ok(ctx_create(d, 0, dev))
    out = [name(d.cuCtxDestroy(b)[0]), int(ok(d.cuCtxGetCurrent())) == int(a)]
    out.append(name(d.cuCtxDestroy(a)[0]))
    out.append(int(ok(d.cuCtxGetCurrent())))
    return out


@scenario
def primary_retain_twice(d: Any) -> Obs:
    dev = ok(d.cuDeviceGet(0))
    a = ok(d.cuDevicePrimaryCtxRetain(dev))
    b = ok(d.cuDevicePrimaryCtxRetain(dev))
    out = [int(a) == int(b), name(d.cuDevicePrimaryCtxRelease(dev)[0]), name(d.cuDevicePrimaryCtxRelease(dev)[0])]
    return out


@scenario
def stream_destroy_from_elsewhere(d: Any) -> Obs:
    with Ctx(d) as a:
        s1 = ok(d.cuStreamCreate(0))
        s2 = ok(d.cuStreamCreate(1))
        flags = int(ok(d.cuStreamGetFlags(s2)))
        same = int(ok(d.cuStreamGetCtx(s1))) == int(a)
        with Ctx(d):
            other = name(d.cuStreamDestroy(s1)[0])
        d.cuCtxSetCurrent(B.CUcontext(0))
        none = name(d.cuStreamDestroy(s2)[0])
    return [flags, same, other, none]


@scenario
def event_record_cross_context(d: Any) -> Obs:
    with Ctx(d) as a:
        ev = ok(d.cuEventCreate(0))
        with Ctx(d):
            s = ok(d.cuStreamCreate(0))
            status = name(d.cuEventRecord(ev, s)[0])
            d.cuStreamDestroy(s)
        d.cuCtxSetCurrent(a)
        d.cuEventDestroy(ev)
    return [status]


@scenario
def event_elapsed_cases(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        e1, e2 = ok(d.cuEventCreate(0)), ok(d.cuEventCreate(0))
        quiet = ok(d.cuEventCreate(2))
        out = [name(d.cuEventElapsedTime(e1, e2)[0]), name(d.cuEventQuery(e1)[0])]
        d.cuEventRecord(e1, s)
        d.cuEventRecord(e2, s)
        d.cuEventRecord(quiet, s)
        d.cuEventSynchronize(e2)
        out += [name(d.cuEventElapsedTime(e1, e2)[0]), name(d.cuEventElapsedTime(e1, quiet)[0])]
        for e in (e1, e2, quiet):
            d.cuEventDestroy(e)
        d.cuStreamDestroy(s)
    return out


@scenario
def mem_alloc_cases(d: Any) -> Obs:
    with Ctx(d):
        out = [name(d.cuMemAlloc(0)[0]), name(d.cuMemAlloc(1 << 50)[0])]
        p = ok(d.cuMemAlloc(64))
        out += [name(d.cuMemFree(p)[0]), name(d.cuMemFree(p)[0])]
    return out


@scenario
def mem_async_cases(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        err0, _ = d.cuMemAllocAsync(0, s)
        out = [name(err0), name(d.cuMemAllocAsync(1 << 50, s)[0])]
        p = ok(d.cuMemAllocAsync(64, s))
        with Ctx(d):
            s2 = ok(d.cuStreamCreate(0))
            out.append(name(d.cuMemFreeAsync(p, s2)[0]))
            d.cuStreamSynchronize(s2)
            d.cuStreamDestroy(s2)
        d.cuStreamSynchronize(s)
        d.cuStreamDestroy(s)
    return out


@scenario
def alloc_async_needs_only_the_stream(d: Any) -> Obs:
    out: Obs = []
    with Ctx(d) as a:
        s = ok(d.cuStreamCreate(0))
        with Ctx(d):
            p = ok(d.cuMemAllocAsync(64, s))  # another context is current
            out.append(name(d.cuMemsetD8Async(p, 5, 64, s)[0]))
            out.append(name(d.cuMemFreeAsync(p, s)[0]))
        d.cuCtxSetCurrent(B.CUcontext(0))
        err, p2 = d.cuMemAllocAsync(64, s)  # no context is current
        out.append(name(err))
        if not err:
            out.append(name(d.cuMemFreeAsync(p2, s)[0]))
        d.cuCtxSetCurrent(a)
        out.append(name(d.cuStreamSynchronize(s)[0]))
        d.cuStreamDestroy(s)
    return out


@scenario
def memcpy_round_trip_and_freed(d: Any) -> Obs:
    with Ctx(d):
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
    with Ctx(d):
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


# --- virtual memory management and managed memory --------------------------------------------
# The edge cases VirtualMemoryResource and ManagedMemoryResource depend on, and those the
# simulator assumes (tests/test_sim_vmm.py in packages/testing names them).

_GRAN = 2 << 20  # what the simulator reports; the scenarios ask the driver and compare


def _vmm_prop(device: int = 0) -> Any:
    prop = B.CUmemAllocationProp()
    prop.type = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    return prop


def _vmm_access(device: int = 0) -> list[Any]:
    desc = B.CUmemAccessDesc()
    desc.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = device
    desc.flags = B.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    return [desc]


def _mem_location(kind: str, ident: int = 0) -> Any:
    loc = B.CUmemLocation()
    loc.type = getattr(B.CUmemLocationType, "CU_MEM_LOCATION_TYPE_" + kind)
    loc.id = ident
    return loc


def _device_location(ident: int = 0) -> Any:
    return _mem_location("DEVICE", ident)


def _prefetch(d: Any, ptr: Any, n: int, loc: Any, stream: Any, *, flags: int = 0) -> Any:
    if BINDINGS_MAJOR >= 13:
        return d.cuMemPrefetchAsync(ptr, n, loc, flags, stream)
    return d.cuMemPrefetchAsync_v2(ptr, n, loc, flags, stream)


def _advise(d: Any, ptr: Any, n: int, advice: Any, loc: Any) -> Any:
    if BINDINGS_MAJOR >= 13:
        return d.cuMemAdvise(ptr, n, advice, loc)
    return d.cuMemAdvise_v2(ptr, n, advice, loc)


def _must(result: Any) -> None:
    """Stop the scenario when a call that returns only a status fails."""
    if int(result[0]):
        raise RuntimeError(f"unexpected {name(result[0])}")


def _mapped_range(d: Any, size: int) -> tuple[Any, Any]:
    va = ok(d.cuMemAddressReserve(size, 0, 0, 0))
    handle = ok(d.cuMemCreate(size, _vmm_prop(), 0))
    _must(d.cuMemMap(va, size, 0, handle, 0))
    _must(d.cuMemSetAccess(va, size, _vmm_access(), 1))
    return va, handle


def _drop_range(d: Any, va: Any, handle: Any, size: int) -> list[str]:
    return [name(d.cuMemUnmap(va, size)[0]), name(d.cuMemRelease(handle)[0]), name(d.cuMemAddressFree(va, size)[0])]


@scenario
def vmm_granularity(d: Any) -> Obs:
    with Ctx(d):
        flags = B.CUmemAllocationGranularity_flags
        minimum = d.cuMemGetAllocationGranularity(_vmm_prop(), flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        recommended = d.cuMemGetAllocationGranularity(_vmm_prop(), flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return [
            name(minimum[0]),
            int(minimum[1] or 0),
            name(recommended[0]),
            int(recommended[1] or 0),
            _status_or_raise(lambda: d.cuMemGetAllocationGranularity(_vmm_prop(99), 0)),
            _status_or_raise(lambda: d.cuMemGetAllocationGranularity(None, 0)),
            int(ok(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0))),
        ]


@scenario
def vmm_without_context(d: Any) -> Obs:
    """Whether address ranges and physical memory need a current context."""
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [_status_or_raise(lambda: d.cuMemGetAllocationGranularity(_vmm_prop(), 0))]
    err, va = d.cuMemAddressReserve(_GRAN, 0, 0, 0)
    out.append(name(err))
    if not err:
        d.cuMemAddressFree(va, _GRAN)
    err, handle = d.cuMemCreate(_GRAN, _vmm_prop(), 0)
    out.append(name(err))
    if not err:
        d.cuMemRelease(handle)
    return out


@scenario
def vmm_unaligned_sizes(d: Any) -> Obs:
    with Ctx(d):
        g = int(ok(d.cuMemGetAllocationGranularity(_vmm_prop(), 0)))
        err, odd = d.cuMemAddressReserve(g + 1, 0, 0, 0)
        if not err:
            d.cuMemAddressFree(odd, g + 1)
        out: Obs = [
            name(err),
            name(d.cuMemAddressReserve(g, 3, 0, 0)[0]),
            name(d.cuMemAddressReserve(g, 0, 0, 1)[0]),
            name(d.cuMemCreate(1000, _vmm_prop(), 0)[0]),
            name(d.cuMemCreate(g, _vmm_prop(), 1)[0]),
        ]
        va = ok(d.cuMemAddressReserve(2 * g, 0, 0, 0))
        handle = ok(d.cuMemCreate(2 * g, _vmm_prop(), 0))
        out += [
            name(d.cuMemMap(va, g + 4096, 0, handle, 0)[0]),
            name(d.cuMemMap(int(va) + 4096, g, 0, handle, 0)[0]),
            name(d.cuMemMap(va, g, 4096, handle, 0)[0]),
            name(d.cuMemMap(va, 4 * g, 0, handle, 0)[0]),
            name(d.cuMemMap(va, g, 0, handle, 1)[0]),
        ]
        out += [name(d.cuMemRelease(handle)[0]), name(d.cuMemAddressFree(va, 2 * g)[0])]
    return out


@scenario
def vmm_access_before_map(d: Any) -> Obs:
    with Ctx(d):
        va = ok(d.cuMemAddressReserve(_GRAN, 0, 0, 0))
        handle = ok(d.cuMemCreate(_GRAN, _vmm_prop(), 0))
        out: Obs = [name(d.cuMemSetAccess(va, _GRAN, _vmm_access(), 1)[0])]
        out.append(name(d.cuMemMap(va, _GRAN, 0, handle, 0)[0]))
        err, flags = d.cuMemGetAccess(_device_location(0), va)
        out += [name(err), int(flags or 0)]
        out.append(name(d.cuMemSetAccess(va, _GRAN, _vmm_access(), 1)[0]))
        err, flags = d.cuMemGetAccess(_device_location(0), va)
        out += [name(err), int(flags or 0)]
        out.append(name(d.cuMemsetD8(va, 9, 16)[0]))
        back = bytearray(16)
        out += [name(d.cuMemcpyDtoH(back, va, 16)[0]), bytes(back).hex()]
        out.append(name(d.cuMemGetAccess(_device_location(0), int(va) + _GRAN)[0]))  # past the mapping
        out += _drop_range(d, va, handle, _GRAN)
    return out


@scenario
def vmm_unmapped_copy(d: Any) -> Obs:
    """Copies into a reserved range with nothing mapped, and into a mapping with no access set."""
    with Ctx(d):
        va = ok(d.cuMemAddressReserve(_GRAN, 0, 0, 0))
        out: Obs = [name(d.cuMemcpyHtoD(va, bytes(16), 16)[0]), name(d.cuMemsetD8(va, 1, 16)[0])]
        handle = ok(d.cuMemCreate(_GRAN, _vmm_prop(), 0))
        out.append(name(d.cuMemMap(va, _GRAN, 0, handle, 0)[0]))
        out += [name(d.cuMemcpyHtoD(va, bytes(16), 16)[0]), name(d.cuMemsetD8(va, 1, 16)[0])]
        out.append(name(d.cuCtxSynchronize()[0]))
        out += _drop_range(d, va, handle, _GRAN)
    return out


@scenario
def vmm_partial_unmap(d: Any) -> Obs:
    with Ctx(d):
        size = 2 * _GRAN
        va, handle = _mapped_range(d, size)
        out: Obs = [
            name(d.cuMemUnmap(va, _GRAN)[0]),
            name(d.cuMemUnmap(int(va) + _GRAN, _GRAN)[0]),
            name(d.cuMemSetAccess(va, _GRAN, _vmm_access(), 1)[0]),
            name(d.cuMemAddressFree(va, size)[0]),  # still mapped
        ]
        out.append(name(d.cuMemsetD8(va, 4, size)[0]))  # the whole mapping is still there
        out += _drop_range(d, va, handle, size)
    return out


@scenario
def vmm_release_while_mapped(d: Any) -> Obs:
    with Ctx(d):
        va, handle = _mapped_range(d, _GRAN)
        out: Obs = [name(d.cuMemRelease(handle)[0])]
        out.append(name(d.cuMemsetD8(va, 6, 16)[0]))
        back = bytearray(4)
        out += [name(d.cuMemcpyDtoH(back, va, 4)[0]), bytes(back).hex()]
        out.append(name(d.cuMemFree(va)[0]))  # an address range is not cuMemAlloc memory
        out += [name(d.cuMemUnmap(va, _GRAN)[0]), name(d.cuMemAddressFree(va, _GRAN)[0])]
        out.append(name(d.cuMemAddressFree(va, _GRAN)[0]))  # twice
    return out


@scenario
def vmm_adjacent_ranges(d: Any) -> Obs:
    """A reservation at the hint right after another, and a copy across the two."""
    with Ctx(d):
        va, handle = _mapped_range(d, _GRAN)
        err, va2 = d.cuMemAddressReserve(_GRAN, 0, int(va) + _GRAN, 0)
        out: Obs = [name(err), int(va2 or 0) == int(va) + _GRAN]
        if not err and int(va2) == int(va) + _GRAN:
            handle2 = ok(d.cuMemCreate(_GRAN, _vmm_prop(), 0))
            out.append(name(d.cuMemMap(va2, _GRAN, 0, handle2, 0)[0]))
            out.append(name(d.cuMemSetAccess(va2, _GRAN, _vmm_access(), 1)[0]))
            out.append(name(d.cuMemsetD8(int(va) + _GRAN - 8, 5, 16)[0]))
            back = bytearray(16)
            out += [name(d.cuMemcpyDtoH(back, int(va) + _GRAN - 8, 16)[0]), bytes(back).hex()]
            out += _drop_range(d, va2, handle2, _GRAN)
        elif not err:
            d.cuMemAddressFree(va2, _GRAN)
        out += _drop_range(d, va, handle, _GRAN)
    return out


@scenario
def managed_prefetch_advise(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        ptr = ok(d.cuMemAllocManaged(4096, 1))
        adv = B.CUmem_advise
        out: Obs = [
            name(_prefetch(d, ptr, 4096, _device_location(0), s)[0]),
            name(_prefetch(d, ptr, 4096, _mem_location("HOST"), s)[0]),
            name(_prefetch(d, ptr, 4096, _device_location(99), s)[0]),
            name(_prefetch(d, ptr, 4096, _device_location(0), s, flags=1)[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_SET_READ_MOSTLY, _device_location(0))[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, _device_location(0))[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_SET_ACCESSED_BY, _device_location(0))[0]),
            name(_advise(d, ptr, 4096, adv.CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, _device_location(0))[0]),
        ]
        out.append(name(d.cuStreamSynchronize(s)[0]))
        plain = ok(d.cuMemAlloc(4096))  # prefetch and advice of memory that is not managed
        out += [
            name(_prefetch(d, plain, 4096, _device_location(0), s)[0]),
            name(_advise(d, plain, 4096, adv.CU_MEM_ADVISE_SET_READ_MOSTLY, _device_location(0))[0]),
        ]
        out.append(name(d.cuStreamSynchronize(s)[0]))
        out += [name(d.cuMemFree(plain)[0]), name(d.cuMemFree(ptr)[0])]
        d.cuStreamDestroy(s)
    return out


# --- memory pools and IPC ----------------------------------------------------------------------
# The edge cases DeviceMemoryResource, PinnedMemoryResource and the IPC objects depend on, and
# those the simulator assumes (tests/test_sim_pools.py in packages/testing names them). Sizes the
# driver rounds (reserved memory) are compared as relations, not numbers.

_POOL_FD = B.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PA = B.CUmemPool_attribute


def _pool_props(*, shareable: bool = False, max_size: int = 0, location: str = "DEVICE", ident: int = 0) -> Any:
    props = B.CUmemPoolProps()
    props.allocType = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = getattr(B.CUmemLocationType, "CU_MEM_LOCATION_TYPE_" + location)
    props.location.id = ident
    props.handleTypes = _POOL_FD if shareable else B.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    props.maxSize = max_size
    return props


def _pool_attr(d: Any, pool: Any, attr: str) -> int:
    return int(ok(d.cuMemPoolGetAttribute(pool, getattr(_PA, "CU_MEMPOOL_ATTR_" + attr))))


def _pool_set(d: Any, pool: Any, attr: str, value: int, *, wide: bool = True) -> str:
    given = B.cuuint64_t(value) if wide else value
    return name(d.cuMemPoolSetAttribute(pool, getattr(_PA, "CU_MEMPOOL_ATTR_" + attr), given)[0])


@scenario
def pool_default_and_current(d: Any) -> Obs:
    with Ctx(d):
        default = ok(d.cuDeviceGetDefaultMemPool(0))
        out: Obs = [int(ok(d.cuDeviceGetMemPool(0))) == int(default), name(d.cuMemPoolDestroy(default)[0])]
        pool = ok(d.cuMemPoolCreate(_pool_props()))
        out.append(name(d.cuDeviceSetMemPool(0, pool)[0]))
        out.append(int(ok(d.cuDeviceGetMemPool(0))) == int(pool))
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
        out.append(int(ok(d.cuDeviceGetMemPool(0))) == int(default))  # the default pool is current again
        out.append(name(d.cuMemPoolCreate(_pool_props(location="DEVICE", ident=99))[0]))
    return out


@scenario
def pool_attributes(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        pool = ok(d.cuMemPoolCreate(_pool_props()))
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
        d.cuStreamDestroy(s)
    return out


@scenario
def pool_max_size(d: Any) -> Obs:
    limit = 32 << 20
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        pool = ok(d.cuMemPoolCreate(_pool_props(max_size=limit)))
        out: Obs = [name(d.cuMemAllocFromPoolAsync(2 * limit, pool, s)[0])]
        err0, null = d.cuMemAllocFromPoolAsync(0, pool, s)
        out += [name(err0), int(null) if not err0 else None]
        p = ok(d.cuMemAllocFromPoolAsync(limit // 2, pool, s))
        out.append(name(d.cuMemAllocFromPoolAsync(limit, pool, s)[0]))
        out.append(name(d.cuMemFreeAsync(p, s)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
        d.cuStreamDestroy(s)
    return out


@scenario
def pool_destroy_with_outstanding(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        pool = ok(d.cuMemPoolCreate(_pool_props()))
        p = ok(d.cuMemAllocFromPoolAsync(64, pool, s))
        d.cuStreamSynchronize(s)
        out: Obs = [name(d.cuMemPoolDestroy(pool)[0])]
        out.append(name(d.cuMemsetD8(p, 0x33, 64)[0]))
        back = bytearray(64)
        out.append(name(d.cuMemcpyDtoH(back, p, 64)[0]))
        out.append(bytes(back[:4]).hex())
        out.append(name(d.cuMemFree(p)[0]))
        d.cuStreamDestroy(s)
    return out


@scenario
def pool_access_own_device(d: Any) -> Obs:
    with Ctx(d):
        pool = ok(d.cuMemPoolCreate(_pool_props()))
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
def pool_export_refusals(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        plain = ok(d.cuMemPoolCreate(_pool_props()))
        out: Obs = [name(d.cuMemPoolExportToShareableHandle(plain, _POOL_FD, 0)[0])]
        p = ok(d.cuMemAllocFromPoolAsync(64, plain, s))
        out.append(name(d.cuMemPoolExportPointer(p)[0]))
        q = ok(d.cuMemAlloc(64))
        out.append(name(d.cuMemPoolExportPointer(q)[0]))
        d.cuMemFree(q)
        d.cuMemFreeAsync(p, s)
        d.cuStreamSynchronize(s)
        d.cuMemPoolDestroy(plain)
        shared = ok(d.cuMemPoolCreate(_pool_props(shareable=True)))
        err, fd = d.cuMemPoolExportToShareableHandle(shared, _POOL_FD, 0)
        out += [name(err), int(fd) >= 0 if not err else None]
        if not err:
            os.close(int(fd))
        r = ok(d.cuMemAllocFromPoolAsync(64, shared, s))
        d.cuStreamSynchronize(s)
        out.append(name(d.cuMemPoolExportPointer(r)[0]))
        d.cuMemFreeAsync(r, s)
        d.cuStreamSynchronize(s)
        out.append(name(d.cuMemPoolDestroy(shared)[0]))
        d.cuStreamDestroy(s)
    return out


@scenario
def pool_ipc_same_process(d: Any) -> Obs:
    """A shareable pool imported by the process that exported it (the simulator allows it)."""
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        shared = ok(d.cuMemPoolCreate(_pool_props(shareable=True)))
        p = ok(d.cuMemAllocFromPoolAsync(64, shared, s))
        d.cuMemsetD8Async(p, 0x5C, 64, s)
        d.cuStreamSynchronize(s)
        fd = int(ok(d.cuMemPoolExportToShareableHandle(shared, _POOL_FD, 0)))
        data = ok(d.cuMemPoolExportPointer(p))
        err, imported = d.cuMemPoolImportFromShareableHandle(fd, _POOL_FD, 0)
        os.close(fd)
        out: Obs = [name(err)]
        if not err:
            err2, q = d.cuMemPoolImportPointer(imported, data)
            out.append(name(err2))
            if not err2:
                back = bytearray(4)
                d.cuMemcpyDtoH(back, q, 4)
                out += [bytes(back).hex(), int(q) == int(p), name(d.cuMemFree(q)[0])]
            out.append(name(d.cuMemPoolDestroy(imported)[0]))
        d.cuMemFreeAsync(p, s)
        d.cuStreamSynchronize(s)
        out.append(name(d.cuMemPoolDestroy(shared)[0]))
        d.cuStreamDestroy(s)
    return out


@scenario
def ipc_event_refusals(d: Any) -> Obs:
    with Ctx(d):
        plain = ok(d.cuEventCreate(2))
        out: Obs = [name(d.cuIpcGetEventHandle(plain)[0]), name(d.cuEventCreate(4)[0])]
        shared = ok(d.cuEventCreate(2 | 4))
        err, handle = d.cuIpcGetEventHandle(shared)
        out.append(name(err))
        if not err:
            err2, opened = d.cuIpcOpenEventHandle(handle)
            out.append(name(err2))  # opened in the process that exported it
            if not err2:
                d.cuEventDestroy(opened)
        d.cuEventDestroy(shared)
        d.cuEventDestroy(plain)
    return out


@scenario
def pool_host_numa(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        out: Obs = []
        for location in ("HOST_NUMA", "HOST"):
            err, pool = d.cuMemPoolCreate(_pool_props(location=location))
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
        d.cuStreamDestroy(s)
    return out


def _access_descs(devices: list[int]) -> list[Any]:
    descs = []
    for ordinal in devices:
        desc = B.CUmemAccessDesc()
        desc.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = ordinal
        desc.flags = B.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        descs.append(desc)
    return descs


@scenario
def pool_host_access_every_device(d: Any) -> Obs:
    """A pinned (host NUMA) pool: its access before any grant, then one grant naming every device (as
    PinnedMemoryResource makes it), a grant naming a device that does not exist, and memory of the
    pool allocated on each device's stream."""
    count = int(ok(d.cuDeviceGetCount()))
    everyone = list(range(count))
    out: Obs = []
    with Ctx(d):
        pool = ok(d.cuMemPoolCreate(_pool_props(location="HOST_NUMA")))
        out.append([ok(d.cuMemPoolGetAccess(pool, _device_location(n))).name for n in everyone])
        out.append(name(d.cuMemPoolSetAccess(pool, _access_descs([*everyone, count]), count + 1)[0]))
        out.append([ok(d.cuMemPoolGetAccess(pool, _device_location(n))).name for n in everyone])
        out.append(name(d.cuMemPoolSetAccess(pool, _access_descs(everyone), count)[0]))
        out.append([ok(d.cuMemPoolGetAccess(pool, _device_location(n))).name for n in everyone])
        out.append(name(d.cuMemPoolGetAccess(pool, _device_location(count))[0]))
        for ordinal in everyone:
            primary = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(ordinal))))
            _must(d.cuCtxSetCurrent(primary))
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
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        pool = ok(d.cuMemPoolCreate(_pool_props(location="HOST_NUMA")))
        _must(d.cuMemPoolSetAccess(pool, _access_descs([0]), 1))
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
        d.cuStreamDestroy(s)
    return out


@scenario
def ipc_event_handle_context(d: Any) -> Obs:
    """cuIpcGetEventHandle with the event's own context current, after another context was made.

    With no context current, and with another context current, it is not asked: the H200's
    process died of SIGSEGV in both (the simulator raises SimulatedCrash, test_sim_pools checks
    it; cuguard always asks in the event's context).
    """
    dev = ok(d.cuDeviceGet(0))
    primary = ok(d.cuDevicePrimaryCtxRetain(dev))
    _must(d.cuCtxSetCurrent(primary))
    ev = ok(d.cuEventCreate(2 | 4))
    _must(d.cuCtxSetCurrent(B.CUcontext(0)))
    out: Obs = []
    other = ok(ctx_create(d, 0, dev))  # current now; the event's context is made current before asking
    _must(d.cuCtxSetCurrent(primary))
    out.append(name(d.cuIpcGetEventHandle(ev)[0]))
    out.append(name(d.cuEventDestroy(ev)[0]))
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuCtxDestroy(other)
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuDevicePrimaryCtxRelease(dev)
    return out


@scenario
def pool_ipc_without_context(d: Any) -> Obs:
    """The pool IPC calls with no context current: export of the pool and of a pointer, the imports."""
    dev = ok(d.cuDeviceGet(0))
    primary = ok(d.cuDevicePrimaryCtxRetain(dev))
    _must(d.cuCtxSetCurrent(primary))
    s = ok(d.cuStreamCreate(0))
    pool = ok(d.cuMemPoolCreate(_pool_props(shareable=True)))
    p = ok(d.cuMemAllocFromPoolAsync(4096, pool, s))
    _must(d.cuStreamSynchronize(s))
    _must(d.cuCtxSetCurrent(B.CUcontext(0)))
    err, fd = d.cuMemPoolExportToShareableHandle(pool, _POOL_FD, 0)
    out: Obs = [name(err)]
    err, data = d.cuMemPoolExportPointer(p)
    out.append(name(err))
    imported = None
    if out[0] == "CUDA_SUCCESS":
        err, imported = d.cuMemPoolImportFromShareableHandle(int(fd), _POOL_FD, 0)
        out.append(name(err))
        os.close(int(fd))
        if not err and data is not None:
            err, q = d.cuMemPoolImportPointer(imported, data)
            out.append(name(err))
            if not err:
                _must(d.cuCtxSetCurrent(primary))
                out.append(name(d.cuMemFree(q)[0]))
    _must(d.cuCtxSetCurrent(primary))
    if imported is not None and int(imported):
        out.append(name(d.cuMemPoolDestroy(imported)[0]))
    d.cuMemFreeAsync(p, s)
    d.cuStreamSynchronize(s)
    out.append(name(d.cuMemPoolDestroy(pool)[0]))
    d.cuStreamDestroy(s)
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuDevicePrimaryCtxRelease(dev)
    return out


@scenario
def pool_export_pointer_readiness(d: Any) -> Obs:
    """When cuMemPoolExportPointer accepts a stream-ordered allocation of a shareable pool.

    For 128 bytes and 2 MiB, with the pool's context current and with none: exported at once
    after cuMemAllocFromPoolAsync, then after the stream is synchronized; and exported while
    a host function (waiting on a gate) holds the stream back before the allocation, then
    after the gate opens and the stream is synchronized.
    """
    gate = threading.Event()
    blocker = _HOSTFN(lambda _p: gate.wait(10) and None)
    blocker_fn = B.CUhostFn(ctypes.cast(blocker, ctypes.c_void_p).value)
    dev = ok(d.cuDeviceGet(0))
    primary = ok(d.cuDevicePrimaryCtxRetain(dev))
    _must(d.cuCtxSetCurrent(primary))
    s = ok(d.cuStreamCreate(0))
    pool = ok(d.cuMemPoolCreate(_pool_props(shareable=True)))
    out: Obs = []

    def export(p: Any, current: bool) -> str:
        _must(d.cuCtxSetCurrent(primary if current else B.CUcontext(0)))
        status = name(d.cuMemPoolExportPointer(p)[0])
        _must(d.cuCtxSetCurrent(primary))
        return status

    for size in (128, 2 << 20):
        for current in (True, False):
            p = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
            out.append(export(p, current))
            _must(d.cuStreamSynchronize(s))
            out.append(export(p, current))
            gate.clear()
            _must(d.cuLaunchHostFunc(s, blocker_fn, 0))
            q = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
            out.append(export(q, current))
            gate.set()
            _must(d.cuStreamSynchronize(s))
            out.append(export(q, current))
            for r in (p, q):
                d.cuMemFreeAsync(r, s)
            _must(d.cuStreamSynchronize(s))
    out.append(name(d.cuMemPoolDestroy(pool)[0]))
    d.cuStreamDestroy(s)
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuDevicePrimaryCtxRelease(dev)
    return out


@scenario
def pool_export_pointer_after_pool_export(d: Any) -> Obs:
    """cuMemPoolExportPointer once the shareable pool itself was exported (its descriptor closed again).

    The pool export's status, then for 128 bytes and 2 MiB: a pointer exported at once after
    cuMemAllocFromPoolAsync on a stream a host function (waiting on a gate) holds back, then after
    the gate opens and the stream is synchronized; then one allocated on the legacy stream without
    a wait, exported at once.
    """
    gate = threading.Event()
    blocker = _HOSTFN(lambda _p: gate.wait(10) and None)
    blocker_fn = B.CUhostFn(ctypes.cast(blocker, ctypes.c_void_p).value)
    out: Obs = []
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        pool = ok(d.cuMemPoolCreate(_pool_props(shareable=True)))
        err, fd = d.cuMemPoolExportToShareableHandle(pool, _POOL_FD, 0)
        out.append(name(err))
        if not err:
            os.close(int(fd))
        for size in (128, 2 << 20):
            gate.clear()
            _must(d.cuLaunchHostFunc(s, blocker_fn, 0))
            p = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
            out.append(name(d.cuMemPoolExportPointer(p)[0]))
            gate.set()
            _must(d.cuStreamSynchronize(s))
            out.append(name(d.cuMemPoolExportPointer(p)[0]))
            q = ok(d.cuMemAllocFromPoolAsync(size, pool, B.CUstream(0)))
            out.append(name(d.cuMemPoolExportPointer(q)[0]))
            for r in (p, q):
                d.cuMemFreeAsync(r, s)
            _must(d.cuStreamSynchronize(s))
            _must(d.cuCtxSynchronize())
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
        d.cuStreamDestroy(s)
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
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        for limit in (4 << 20, 34 << 20, 48 << 20):
            pool = ok(d.cuMemPoolCreate(_pool_props(max_size=limit)))
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
            _must(d.cuStreamSynchronize(s))
            out.append(name(d.cuMemPoolDestroy(pool)[0]))
        d.cuStreamDestroy(s)
    return out


# --- freeing pool and managed memory from each context situation; pools destroyed early ------------
#
# The first failure-point sweep of the pools on an H200 reported refused frees of pool and managed
# memory (CUDA_ERROR_INVALID_HANDLE) with no context or another context current; these scenarios
# record what the driver itself answers in each situation. The _then_new_pool scenarios probe a
# crash (SIGFPE in cuMemAllocFromPoolAsync on the legacy stream) seen after a pool had been
# destroyed while its buffers were allocated: each runs in a process of its own on the GPU, so a
# crash is recorded against the one order that causes it.


def _primary(d: Any) -> tuple[Any, Any]:
    dev = ok(d.cuDeviceGet(0))
    primary = ok(d.cuDevicePrimaryCtxRetain(dev))
    _must(d.cuCtxSetCurrent(primary))
    return dev, primary


def _switch(d: Any, where: str, primary: Any, other: Any) -> None:
    target = {"primary": primary, "other": other, "none": B.CUcontext(0)}[where]
    _must(d.cuCtxSetCurrent(target))


@scenario
def pool_memory_free_context(d: Any) -> Obs:
    """The status of each free of created-pool memory with the stream's context, another one or none current.

    A pool allocation on a stream of the primary context is freed (cuMemFreeAsync on that stream,
    or cuMemFree once the stream is synchronized) with each context situation current; then
    allocations on the legacy stream (handle 0, of the primary context) freed on handle 0 with
    another context current (its own legacy stream) and with none. A refused free is done again
    in the primary context, so that the pool can be destroyed.
    """
    dev, primary = _primary(d)
    s = ok(d.cuStreamCreate(0))
    pool = ok(d.cuMemPoolCreate(_pool_props()))
    other = ok(ctx_create(d, 0, dev))
    out: Obs = []
    cases = [(w, f, s) for f in ("async", "sync") for w in ("primary", "other", "none")]
    cases += [("other", "async", B.CUstream(0)), ("none", "async", B.CUstream(0))]
    for where, how, stream in cases:
        _switch(d, "primary", primary, other)
        p = ok(d.cuMemAllocFromPoolAsync(512, pool, stream))
        _must(d.cuStreamSynchronize(stream))
        _switch(d, where, primary, other)
        err = (d.cuMemFreeAsync(p, stream) if how == "async" else d.cuMemFree(p))[0]
        out.append(name(err))
        _switch(d, "primary", primary, other)
        if err:
            _must(d.cuMemFree(p))
        _must(d.cuStreamSynchronize(stream))
    out.append(name(d.cuMemPoolDestroy(pool)[0]))
    d.cuStreamDestroy(s)
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuCtxDestroy(other)
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuDevicePrimaryCtxRelease(dev)
    return out


@scenario
def managed_memory_free_context(d: Any) -> Obs:
    """The status of cuMemFree of managed memory allocated in the primary context, with it, another or none current."""
    dev, primary = _primary(d)
    other = ok(ctx_create(d, 0, dev))
    out: Obs = []
    for where in ("primary", "other", "none"):
        _switch(d, "primary", primary, other)
        p = ok(d.cuMemAllocManaged(512, 1))
        _switch(d, where, primary, other)
        (err,) = d.cuMemFree(p)
        out.append(name(err))
        if err:
            _switch(d, "primary", primary, other)
            _must(d.cuMemFree(p))
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuCtxDestroy(other)
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuDevicePrimaryCtxRelease(dev)
    return out


def _new_pool_after(d: Any, order: str) -> Obs:
    """A pool with a stream and a legacy-stream allocation, released in ``order``; then a new pool allocates.

    ``order``: "free_then_destroy" (the buffers freed, then the pool destroyed), "destroy_then_free"
    (the pool destroyed while both are allocated, then they are freed: cuMemFree of the legacy
    one, cuMemFreeAsync of the other on its stream, which is then destroyed at once) or
    "destroy_leaked" (destroyed while both are allocated, which are freed only at the end). Then
    a new pool allocates on a new stream and on the legacy stream (what crashed), and is released.
    """
    dev, _ = _primary(d)
    s = ok(d.cuStreamCreate(0))
    legacy = B.CUstream(0)
    first = ok(d.cuMemPoolCreate(_pool_props()))
    a = ok(d.cuMemAllocFromPoolAsync(4096, first, s))
    b = ok(d.cuMemAllocFromPoolAsync(4096, first, legacy))
    _must(d.cuStreamSynchronize(legacy))
    out: Obs = []
    if order == "free_then_destroy":
        out += [name(d.cuMemFree(b)[0]), name(d.cuMemFreeAsync(a, s)[0]), name(d.cuMemPoolDestroy(first)[0])]
    else:
        out.append(name(d.cuMemPoolDestroy(first)[0]))
        if order == "destroy_then_free":
            out += [name(d.cuCtxSynchronize()[0]), name(d.cuMemFree(b)[0]), name(d.cuMemFreeAsync(a, s)[0])]
    out.append(name(d.cuStreamDestroy(s)[0]))
    s2 = ok(d.cuStreamCreate(0))
    second = ok(d.cuMemPoolCreate(_pool_props()))
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
    d.cuStreamDestroy(s2)
    d.cuCtxSetCurrent(B.CUcontext(0))
    d.cuDevicePrimaryCtxRelease(dev)
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


def _graph_with(d: Any, n: int) -> tuple[Any, list[Any]]:
    g = ok(d.cuGraphCreate(0))
    return g, [ok(d.cuGraphAddEmptyNode(g, None, 0)) for _ in range(n)]


def _edges(d: Any, g: Any) -> int:
    return int(d.cuGraphGetEdges(g, 0)[-1])


@scenario
def graph_edge_cases(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    g, (a, b, c) = _graph_with(d, 3)
    h, (x,) = _graph_with(d, 1)
    out = [
        name(add_dependencies(d, g, [a], [b], 1)[0]),
        name(add_dependencies(d, g, [a], [b], 1)[0]),
        name(remove_dependencies(d, g, [b], [c], 1)[0]),
        name(add_dependencies(d, g, [a], [x], 1)[0]),
        name(add_dependencies(d, g, [a], [a], 1)[0]),
        name(add_dependencies(d, g, [b], [a], 1)[0]),
        _edges(d, g),
    ]
    with Ctx(d):
        err, _ = d.cuGraphInstantiate(g, 0)
        out.append(name(err))
    out += [name(d.cuGraphDestroy(g)[0]), name(d.cuGraphDestroy(h)[0])]
    return out


@scenario
def graph_bulk_edges_are_not_atomic(d: Any) -> Obs:
    g, (a, b, c, e) = _graph_with(d, 4)
    add_dependencies(d, g, [a], [c], 1)
    before = _edges(d, g)
    added = name(add_dependencies(d, g, [a, a, b], [b, c, e], 3)[0])
    after_add = _edges(d, g)
    removed = name(remove_dependencies(d, g, [a, b], [b, c], 2)[0])
    after_remove = _edges(d, g)
    nodes = int(d.cuGraphGetNodes(g, 0)[-1])
    roots = int(d.cuGraphGetRootNodes(g, 0)[-1])
    d.cuGraphDestroy(g)
    return [before, added, after_add, removed, after_remove, nodes, roots]


@scenario
def add_node_with_a_bad_dependency_creates_nothing(d: Any) -> Obs:
    g, (a,) = _graph_with(d, 1)
    h, (x,) = _graph_with(d, 1)
    err, _ = d.cuGraphAddEmptyNode(g, [a, x], 2)  # x belongs to another graph
    dup, _ = d.cuGraphAddEmptyNode(g, [a, a], 2)  # the same dependency twice
    out = [name(err), name(dup), int(d.cuGraphGetNodes(g, 0)[-1]), _edges(d, g)]
    d.cuGraphDestroy(g)
    d.cuGraphDestroy(h)
    return out


@scenario
def graph_with_memory_nodes_is_frozen(d: Any) -> Obs:
    with Ctx(d):
        g, (a, b) = _graph_with(d, 2)
        add_dependencies(d, g, [a], [b], 1)
        params = B.CUDA_MEM_ALLOC_NODE_PARAMS()
        params.poolProps.allocType = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        params.poolProps.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        params.poolProps.location.id = 0
        params.bytesize = 256
        err, _ = d.cuGraphAddMemAllocNode(g, [b], 1, params)
        out = [name(err)]
        out.append(name(remove_dependencies(d, g, [a], [b], 1)[0]))
        out.append(name(d.cuGraphDestroyNode(a)[0]))
        out.append(name(d.cuGraphClone(g)[0]))
        out += [int(d.cuGraphGetNodes(g, 0)[-1]), _edges(d, g)]
        d.cuGraphDestroy(g)
    return out


def _alloc_params(size: int) -> Any:
    params = B.CUDA_MEM_ALLOC_NODE_PARAMS()
    params.poolProps.allocType = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    params.poolProps.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    params.poolProps.location.id = 0
    params.bytesize = size
    return params


@scenario
def child_graph_with_memory_nodes(d: Any) -> Obs:
    # May a graph holding memory nodes be embedded as a child graph?
    with Ctx(d):
        child = ok(d.cuGraphCreate(0))
        params = _alloc_params(256)
        alloc = ok(d.cuGraphAddMemAllocNode(child, None, 0, params))
        ok(d.cuGraphAddMemFreeNode(child, [alloc], 1, params.dptr))
        parent = ok(d.cuGraphCreate(0))
        err = d.cuGraphAddChildGraphNode(parent, None, 0, child)[0]
        out = [name(err), int(d.cuGraphGetNodes(parent, 0)[-1])]
        d.cuGraphDestroy(parent)
        d.cuGraphDestroy(child)
    return out


@scenario
def update_with_a_changed_child_graph_layout(d: Any) -> Obs:
    # An executable graph whose child graph gains a node: is the update refused, and how?
    with Ctx(d):
        outs: list[Any] = []
        parents = []
        for n in (1, 2):
            child, nodes = _graph_with(d, n)
            if n == 2:
                add_dependencies(d, child, [nodes[0]], [nodes[1]], 1)
            parent = ok(d.cuGraphCreate(0))
            ok(d.cuGraphAddChildGraphNode(parent, None, 0, child))
            d.cuGraphDestroy(child)
            parents.append(parent)
        exe = ok(d.cuGraphInstantiate(parents[0], 0))
        result = d.cuGraphExecUpdate(exe, parents[1])
        outs.append(name(result[0]))
        info = result[1] if len(result) > 1 else None
        outs.append(None if info is None else B.CUgraphExecUpdateResult(int(info.result)).name)
        d.cuGraphExecDestroy(exe)
        for parent in parents:
            d.cuGraphDestroy(parent)
    return outs


@scenario
def graph_exec_outlives_graph(d: Any) -> Obs:
    with Ctx(d):
        g, nodes = _graph_with(d, 2)
        add_dependencies(d, g, [nodes[0]], [nodes[1]], 1)
        clone = ok(d.cuGraphClone(g))
        exe = ok(d.cuGraphInstantiate(g, 0))
        s = ok(d.cuStreamCreate(0))
        out = [name(d.cuGraphDestroy(g)[0]), name(d.cuGraphLaunch(exe, s)[0]), name(d.cuStreamSynchronize(s)[0])]
        out.append(int(d.cuGraphGetNodes(clone, 0)[-1]))
        out.append(name(d.cuGraphExecDestroy(exe)[0]))
        d.cuGraphDestroy(clone)
        d.cuStreamDestroy(s)
    return out


_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@scenario
def host_func_runs_on_another_thread(d: Any) -> Obs:
    seen: list[bool] = []
    me = threading.get_ident()
    thunk = _HOSTFN(lambda _p: seen.append(threading.get_ident() != me))
    address = ctypes.cast(thunk, ctypes.c_void_p).value
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        status = name(d.cuLaunchHostFunc(s, B.CUhostFn(address), 0)[0])
        d.cuStreamSynchronize(s)
        d.cuStreamDestroy(s)
    return [status, seen]


@scenario
def driver_calls_inside_a_host_function_are_refused(d: Any) -> Obs:
    # Why cuguard hands releases that become due in a host function to its own thread (O5).
    seen: list[str] = []

    def inside(_p: Any) -> None:
        seen.append(name(d.cuCtxGetCurrent()[0]))
        seen.append(name(d.cuStreamQuery(B.CUstream(0))[0]))
        seen.append(name(d.cuGetErrorName(R.CUDA_ERROR_INVALID_VALUE)[0]))

    thunk = _HOSTFN(inside)
    address = ctypes.cast(thunk, ctypes.c_void_p).value
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        status = name(d.cuLaunchHostFunc(s, B.CUhostFn(address), 0)[0])
        d.cuStreamSynchronize(s)
        d.cuStreamDestroy(s)
    return [status, seen]


@scenario
def released_primary_context_left_current(d: Any) -> Obs:
    # Why cuguard holds each primary context for good (O2): the last release while it is current
    # leaves the thread with a destroyed context that every library then fails in.
    dev = ok(d.cuDeviceGet(0))
    ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
    ok(d.cuCtxSetCurrent(ctx))
    release = name(d.cuDevicePrimaryCtxRelease(dev)[0])
    current_same = int(ok(d.cuCtxGetCurrent())) == int(ctx)
    alloc = d.cuMemAlloc(256)
    if not int(alloc[0]):
        d.cuMemFree(alloc[1])
    d.cuCtxSetCurrent(B.CUcontext(0))
    return [release, current_same, name(alloc[0])]


@scenario
def user_object_destructor_timing(d: Any) -> Obs:
    calls: list[str] = []
    thunk = _HOSTFN(lambda _p: calls.append("destroyed"))
    address = ctypes.cast(thunk, ctypes.c_void_p).value
    with Ctx(d):
        obj = ok(d.cuUserObjectCreate(0, B.CUhostFn(address), 1, 1))
        g, _ = _graph_with(d, 1)
        d.cuGraphRetainUserObject(g, obj, 1, 1)  # move our reference into the graph
        exe = ok(d.cuGraphInstantiate(g, 0))
        d.cuGraphDestroy(g)
        after_graph = len(calls)
        d.cuGraphExecDestroy(exe)
        d.cuCtxSynchronize()
        after_exec = len(calls)
    return [after_graph, after_exec]


def _user_object_in_flight(d: Any, host_node: bool) -> Obs:
    """Whether an executable graph destroyed while a launch of it has not run yet keeps its user objects.

    W5: what a graph uses must outlive every launch of it. A host function waiting on a gate
    holds the launch back: queued before the launch on the same stream (``host_node=False``)
    or a host node of the graph itself. It looks, once let go, at how many destructors had
    run by then; the last figure is how many ran once the launch was done (the H200 runs the
    destructor on a thread of its own some time after the synchronization returns, so this
    waits up to 5 s for it).
    """
    calls: list[str] = []
    gate = threading.Event()
    seen: list[int] = []
    thunk = _HOSTFN(lambda _p: calls.append("destroyed"))

    def wait_then_look(_p: Any) -> None:
        gate.wait(10)
        seen.append(len(calls))

    blocker = _HOSTFN(wait_then_look)
    blocker_fn = B.CUhostFn(ctypes.cast(blocker, ctypes.c_void_p).value)
    out: Obs = []
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        obj = ok(d.cuUserObjectCreate(0, B.CUhostFn(ctypes.cast(thunk, ctypes.c_void_p).value), 1, 1))
        g = ok(d.cuGraphCreate(0))
        if host_node:
            params = B.CUDA_HOST_NODE_PARAMS()
            params.fn = blocker_fn
            params.userData = 0
            ok(d.cuGraphAddHostNode(g, None, 0, params))
        else:
            ok(d.cuGraphAddEmptyNode(g, None, 0))
            out.append(name(d.cuLaunchHostFunc(s, blocker_fn, 0)[0]))
        d.cuGraphRetainUserObject(g, obj, 1, 1)  # move our reference into the graph
        exe = ok(d.cuGraphInstantiate(g, 0))
        d.cuGraphDestroy(g)
        out += [name(d.cuGraphLaunch(exe, s)[0]), name(d.cuGraphExecDestroy(exe)[0]), len(calls)]
        time.sleep(0.2)  # a destructor the driver runs on its own thread has had time to run
        out.append(len(calls))
        gate.set()
        out += [name(d.cuStreamSynchronize(s)[0]), seen]
        d.cuCtxSynchronize()
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        out.append(len(calls))
        d.cuStreamDestroy(s)
    return out


@scenario
def user_object_held_by_a_launch_in_flight(d: Any) -> Obs:
    return _user_object_in_flight(d, host_node=False)


@scenario
def user_object_held_while_its_host_node_runs(d: Any) -> Obs:
    return _user_object_in_flight(d, host_node=True)


@scenario
def module_cases(d: Any) -> Obs:
    with Ctx(d):
        garbage = name(d.cuModuleLoadData(b"\x7fELF garbage\x00")[0])
        mod = ok(d.cuModuleLoadData(PTX))
        missing = name(d.cuModuleGetFunction(mod, b"nope")[0])
        fn = ok(d.cuModuleGetFunction(mod, b"empty"))
        s = ok(d.cuStreamCreate(0))
        launched = name(d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, 0, 0)[0])
        synced = name(d.cuStreamSynchronize(s)[0])
        d.cuStreamDestroy(s)
        unloaded = name(d.cuModuleUnload(mod)[0])
    return [garbage, missing, launched, synced, unloaded]


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
def graph_without_context(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    err, g = d.cuGraphCreate(0)
    out = [name(err)]
    out.append(name(d.cuGraphDestroy(g)[0]))
    return out


def two_devices(fn: Callable[[Any], Obs]) -> Callable[[Any], Obs]:
    TWO_DEVICE.add(fn.__name__)
    return scenario(fn)


class Dev1Ctx(Ctx):
    """A created context on device 1."""

    def __enter__(self) -> Any:
        self.ctx = ok(ctx_create(self.d, 0, ok(self.d.cuDeviceGet(1))))
        return self.ctx


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
    with Ctx(d) as c0:
        s0 = ok(d.cuStreamCreate(0))
        a = ok(d.cuMemAlloc(32))
        d.cuMemcpyHtoD(a, bytes(range(32)), 32)
        ev = ok(d.cuEventCreate(2))
        d.cuEventRecord(ev, s0)
        with Dev1Ctx(d):
            s1 = ok(d.cuStreamCreate(0))
            b = ok(d.cuMemAlloc(32))
            waited = name(d.cuStreamWaitEvent(s1, ev, 0)[0])
            copied = name(d.cuMemcpyDtoDAsync(b, a, 32, s1)[0])
            synced = name(d.cuStreamSynchronize(s1)[0])
            back = bytearray(32)
            d.cuMemcpyDtoH(back, b, 32)
            wrong = name(d.cuEventRecord(ev, s1)[0])  # an event of device 0 on a stream of device 1
            d.cuMemFree(b)
            d.cuStreamDestroy(s1)
        d.cuCtxSetCurrent(c0)
        d.cuEventDestroy(ev)
        d.cuMemFree(a)
        d.cuStreamDestroy(s0)
    return [waited, copied, synced, bytes(back) == bytes(range(32)), wrong]


# --- user-facing queries and argument edge cases ----------------------------------------------
# What user code asks around cuguard's calls, and what each allocation, flags and priority
# argument does at its edges. Relations stand in for values that differ between the machines
# (free memory, total memory, names); values fixed by the architecture (sm_90) are compared.

A = B.CUdevice_attribute
FA = B.CUfunction_attribute


def _status_or_raise(call: Callable[[], Any]) -> Any:
    """The status name of a call, or the name of the exception cuda-bindings raised before the driver."""
    try:
        result = call()
    except (TypeError, ValueError, OverflowError) as exc:
        return type(exc).__name__
    return name(result[0])


def _release_if(d: Any, result: Any, free: str) -> str:
    """The status name of an allocation; what it allocated is freed with ``free``."""
    status = name(result[0])
    if not int(result[0]) and int(result[1]):
        getattr(d, free)(result[1])
    return status


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
    for call in (
        lambda: d.cuDeviceGet(4096),
        lambda: d.cuDeviceGet(-1),
        lambda: d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE, 4096),
        lambda: d.cuDeviceTotalMem(4096),
        lambda: d.cuDeviceGetName(64, 4096),
        lambda: d.cuDeviceGetUuid(4096),
        lambda: d.cuDeviceGetPCIBusId(64, 4096),
        lambda: d.cuDevicePrimaryCtxGetState(4096),
    ):
        out.append(name(call()[0]))
    return out


@scenario
def memory_info_relations(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [name(d.cuMemGetInfo()[0])]  # no current context
    with Ctx(d):
        free, total = ok(d.cuMemGetInfo())
        out += [0 < int(free) <= int(total), int(total) == int(ok(d.cuDeviceTotalMem(ok(d.cuDeviceGet(0)))))]
        p = ok(d.cuMemAlloc(64 << 20))
        after, _ = ok(d.cuMemGetInfo())
        out.append(int(after) < int(free))
        d.cuMemFree(p)
    return out


@scenario
def primary_context_state_and_flags(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    dev = ok(d.cuDeviceGet(0))
    out: Obs = [list(ok(d.cuDevicePrimaryCtxGetState(dev)))]
    out += [name(d.cuDevicePrimaryCtxSetFlags(dev, flags)[0]) for flags in (3, 5, 6, 7, 0x100, 0x80000000)]
    out.append(name(d.cuDevicePrimaryCtxSetFlags(dev, 4)[0]))  # CU_CTX_SCHED_BLOCKING_SYNC
    out.append(list(ok(d.cuDevicePrimaryCtxGetState(dev))))
    ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
    d.cuCtxSetCurrent(ctx)
    out += [list(ok(d.cuDevicePrimaryCtxGetState(dev))), int(ok(d.cuCtxGetFlags()))]
    out.append(name(d.cuDevicePrimaryCtxSetFlags(dev, 1)[0]))  # while active
    out += [list(ok(d.cuDevicePrimaryCtxGetState(dev))), int(ok(d.cuCtxGetFlags()))]
    d.cuCtxSetCurrent(B.CUcontext(0))
    out.append(name(d.cuDevicePrimaryCtxRelease(dev)[0]))
    out.append(list(ok(d.cuDevicePrimaryCtxGetState(dev))))  # the flags outlive the release
    out.append(name(d.cuDevicePrimaryCtxSetFlags(dev, 0)[0]))
    out.append(name(d.cuCtxGetFlags()[0]))  # no current context
    return out


@scenario
def primary_context_reset(d: Any) -> Obs:
    # What cuDevicePrimaryCtxReset does to a retained primary context and what it owned.
    # Nothing made before the reset is touched after it (that may crash the real driver).
    d.cuCtxSetCurrent(B.CUcontext(0))
    dev = ok(d.cuDeviceGet(0))
    out: Obs = [name(d.cuDevicePrimaryCtxReset(dev)[0])]  # not retained
    ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
    d.cuCtxSetCurrent(ctx)
    ok(d.cuMemAlloc(256 << 20))
    ok(d.cuStreamCreate(0))
    ok(d.cuEventCreate(0))
    free, _ = ok(d.cuMemGetInfo())
    d.cuCtxSetCurrent(B.CUcontext(0))
    out.append(name(d.cuDevicePrimaryCtxReset(dev)[0]))
    out.append(list(ok(d.cuDevicePrimaryCtxGetState(dev))))
    again = ok(d.cuDevicePrimaryCtxRetain(dev))
    out.append(int(again) == int(ctx))
    d.cuCtxSetCurrent(again)
    after, _ = ok(d.cuMemGetInfo())
    out.append(int(after) > int(free))  # the reset freed the allocation
    err, p = d.cuMemAlloc(64)
    out.append(name(err))
    if not int(err):
        d.cuMemFree(p)
    err, s = d.cuStreamCreate(0)
    out.append(name(err))
    if not int(err):
        d.cuStreamDestroy(s)
    d.cuCtxSetCurrent(B.CUcontext(0))
    out += [name(d.cuDevicePrimaryCtxRelease(dev)[0]), name(d.cuDevicePrimaryCtxRelease(dev)[0])]
    out.append(list(ok(d.cuDevicePrimaryCtxGetState(dev))))
    return out


@scenario
def device_allocation_edges(d: Any) -> Obs:
    with Ctx(d):
        total = int(ok(d.cuDeviceTotalMem(ok(d.cuDeviceGet(0)))))
        out: Obs = [
            _release_if(d, d.cuMemAlloc(0), "cuMemFree"),
            _release_if(d, d.cuMemAlloc(total + 1), "cuMemFree"),
            _release_if(d, d.cuMemAlloc(1 << 50), "cuMemFree"),
            name(d.cuMemFree(B.CUdeviceptr(0))[0]),
        ]
        for size, flags in ((0, 1), (64, 0), (64, 3), (64, 4), (1 << 50, 1), (64, 1), (64, 2)):
            out.append(_release_if(d, d.cuMemAllocManaged(size, flags), "cuMemFree"))
        for width, height, element in (
            (100, 3, 4),
            (100, 3, 3),
            (100, 3, 32),
            (0, 3, 4),
            (100, 0, 4),
            (1 << 20, 1 << 30, 4),
        ):
            result = d.cuMemAllocPitch(width, height, element)
            out.append([_release_if(d, result[:2], "cuMemFree"), None if result[2] is None else int(result[2])])
    return out


@scenario
def stream_ordered_allocation_edges(d: Any) -> Obs:
    with Ctx(d):
        total = int(ok(d.cuDeviceTotalMem(ok(d.cuDeviceGet(0)))))
        s = ok(d.cuStreamCreate(0))
        err, zero = d.cuMemAllocAsync(0, s)
        out: Obs = [name(err), int(zero) == 0]
        out.append(name(d.cuMemFreeAsync(zero, s)[0]))
        out.append(_release_if(d, d.cuMemAllocAsync(total + 1, s), "cuMemFree"))
        out.append(name(d.cuMemFreeAsync(B.CUdeviceptr(0), s)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
        d.cuStreamDestroy(s)
    return out


@scenario
def host_allocation_edges(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [_release_if(d, d.cuMemAllocHost(64), "cuMemFreeHost")]  # no current context
    with Ctx(d):
        for result in (d.cuMemAllocHost(0), d.cuMemHostAlloc(0, 0)):
            out += [name(result[0]), result[1] is not None and int(result[1]) == 0]
            _release_if(d, result, "cuMemFreeHost")
        out.append(_release_if(d, d.cuMemAllocHost(1 << 50), "cuMemFreeHost"))
        out.append(_release_if(d, d.cuMemHostAlloc(1 << 50, 0), "cuMemFreeHost"))
        for flags in (1, 2, 4, 7, 8, 0x10, 0x80000000):
            out.append(_release_if(d, d.cuMemHostAlloc(64, flags), "cuMemFreeHost"))
        out.append(name(d.cuMemFreeHost(0)[0]))
    return out


@scenario
def zero_byte_memset_and_copy(d: Any) -> Obs:
    with Ctx(d):
        p = ok(d.cuMemAlloc(64))
        s = ok(d.cuStreamCreate(0))
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
        d.cuStreamDestroy(s)
        d.cuMemFree(p)
    return out


@scenario
def stream_flags_and_priorities(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [name(d.cuCtxGetStreamPriorityRange()[0])]  # no current context
    with Ctx(d):
        out.append(list(ok(d.cuCtxGetStreamPriorityRange())))
        for flags in (2, 3, 0x80000000):
            out.append(_release_if(d, d.cuStreamCreate(flags), "cuStreamDestroy"))
            out.append(_release_if(d, d.cuStreamCreateWithPriority(flags, 0), "cuStreamDestroy"))
        for priority in (-(1 << 31), -100, -6, -5, -3, 0, 1, 100, (1 << 31) - 1):
            s = ok(d.cuStreamCreateWithPriority(1, priority))
            out.append([priority, int(ok(d.cuStreamGetPriority(s))), int(ok(d.cuStreamGetFlags(s)))])
            d.cuStreamDestroy(s)
        s = ok(d.cuStreamCreate(1))
        out += [int(ok(d.cuStreamGetPriority(s))), int(ok(d.cuStreamGetFlags(s)))]
        d.cuStreamDestroy(s)
        out += [int(ok(d.cuStreamGetPriority(B.CUstream(0)))), int(ok(d.cuStreamGetFlags(B.CUstream(0))))]
    return out


@scenario
def event_flags(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [_release_if(d, d.cuEventCreate(0), "cuEventDestroy")]  # no current context
    with Ctx(d):
        for flags in (0, 1, 2, 3, 4, 5, 6, 7, 8, 0x10, 0x100, 0x80000000):
            out.append(_release_if(d, d.cuEventCreate(flags), "cuEventDestroy"))
    return out


@scenario
def context_flags(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    dev = ok(d.cuDeviceGet(0))
    out: Obs = []
    for flags in (0, 1, 2, 4, 3, 5, 6, 7, 8, 0x10, 0x80, 4 | 8, 0x100, 0x80000000):
        err, ctx = ctx_create(d, flags, dev)
        if int(err):
            out.append([flags, name(err)])
            continue
        out.append([flags, name(err), int(ok(d.cuCtxGetFlags()))])
        d.cuCtxDestroy(ctx)
    d.cuCtxSetCurrent(B.CUcontext(0))
    return out


@scenario
def function_attributes(d: Any) -> Obs:
    keys = [
        "MAX_THREADS_PER_BLOCK",
        "SHARED_SIZE_BYTES",
        "CONST_SIZE_BYTES",
        "LOCAL_SIZE_BYTES",
        "NUM_REGS",
        "PTX_VERSION",
        "BINARY_VERSION",
        "CACHE_MODE_CA",
        "MAX_DYNAMIC_SHARED_SIZE_BYTES",
        "PREFERRED_SHARED_MEMORY_CARVEOUT",
        "CLUSTER_SIZE_MUST_BE_SET",
        "REQUIRED_CLUSTER_WIDTH",
        "NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
        "CLUSTER_SCHEDULING_POLICY_PREFERENCE",
    ]

    def attribute(key: str) -> Any:
        return getattr(FA, "CU_FUNC_ATTRIBUTE_" + key)

    with Ctx(d) as ctx:
        mod = ok(d.cuModuleLoadData(PTX))
        fn = ok(d.cuModuleGetFunction(mod, b"empty"))
        out: Obs = [[key, int(ok(d.cuFuncGetAttribute(attribute(key), fn)))] for key in keys]
        out.append(name(d.cuFuncGetAttribute(999, fn)[0]))
        for key, value in (
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", 100000),
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", 232448),
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", 232449),
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", -1),
            ("PREFERRED_SHARED_MEMORY_CARVEOUT", 50),
            ("PREFERRED_SHARED_MEMORY_CARVEOUT", 101),
            ("PREFERRED_SHARED_MEMORY_CARVEOUT", -2),
            ("REQUIRED_CLUSTER_WIDTH", 2),
            ("NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1),
            ("MAX_THREADS_PER_BLOCK", 512),
            ("NUM_REGS", 8),
            ("SHARED_SIZE_BYTES", 16),
        ):
            status = name(d.cuFuncSetAttribute(fn, attribute(key), value)[0])
            out.append([key, value, status, int(ok(d.cuFuncGetAttribute(attribute(key), fn)))])
        out.append(name(d.cuFuncSetAttribute(fn, 999, 0)[0]))
        d.cuCtxSetCurrent(B.CUcontext(0))
        out.append(name(d.cuFuncGetAttribute(attribute("MAX_THREADS_PER_BLOCK"), fn)[0]))  # no current context
        d.cuCtxSetCurrent(ctx)
        d.cuModuleUnload(mod)
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
    return [_status_or_raise(call) for call in calls]


# --- stream capture ---------------------------------------------------------------------------

_CAP = B.CUstreamCaptureMode
_T = B.CUgraphNodeType


def _capturing(d: Any, stream: Any) -> str:
    err, status = d.cuStreamIsCapturing(stream)
    return name(err) if int(err) else B.CUstreamCaptureStatus(int(status)).name


def _end_quietly(d: Any, *streams: Any) -> None:
    """End any capture still in progress on ``streams`` (a failed scenario must not leave one)."""
    for stream in streams:
        err, status = d.cuStreamIsCapturing(stream)
        if not int(err) and int(status):
            err, graph = d.cuStreamEndCapture(stream)
            if not int(err) and graph is not None and int(graph):
                d.cuGraphDestroy(graph)


def _ended(d: Any, stream: Any) -> tuple[str, Any]:
    """``cuStreamEndCapture``: (status name, graph or None); a graph returned beside an error is destroyed."""
    err, graph = d.cuStreamEndCapture(stream)
    has = graph is not None and int(graph) != 0
    if int(err):
        if has:
            d.cuGraphDestroy(graph)
        return name(err), None
    return name(err), graph


def _run_graph(d: Any, graph: Any, stream: Any) -> list[str]:
    """Instantiate, launch and wait: the statuses (the instantiate's refusal alone when it refuses)."""
    if graph is None:
        return ["no graph"]
    err, exe = d.cuGraphInstantiate(graph, 0)
    if int(err):
        return [f"instantiate: {name(err)}"]
    out = [name(d.cuGraphLaunch(exe, stream)[0]), name(d.cuStreamSynchronize(stream)[0])]
    d.cuGraphExecDestroy(exe)
    return out


def _node_kinds(d: Any, graph: Any) -> list[str] | str:
    """The sorted node types of ``graph``; ``"no graph"`` or the refusal's name when there are none to list."""
    if graph is None:
        return "no graph"
    err, _, count = d.cuGraphGetNodes(graph, 0)
    if int(err):
        return name(err)
    nodes = list(d.cuGraphGetNodes(graph, int(count))[1] or [])[: int(count)] if int(count) else []
    return sorted(_T(int(ok(d.cuGraphNodeGetType(n)))).name for n in nodes)


def _edge_count(d: Any, graph: Any) -> int | str:
    """The number of edges of ``graph``; ``"no graph"`` or the refusal's name when it cannot be listed."""
    if graph is None:
        return "no graph"
    result = d.cuGraphGetEdges(graph, 0)
    return name(result[0]) if int(result[0]) else int(result[-1])


@scenario
def capture_becomes_nodes_and_runs_at_launch(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(8))
        ok(d.cuMemsetD8(p, 0, 8))
        out: Obs = [name(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]), _capturing(d, s)]
        try:
            out.append(name(d.cuMemsetD8Async(p, 7, 4, s)[0]))
            out.append(name(d.cuMemsetD8Async(B.CUdeviceptr(int(p) + 4), 9, 4, s)[0]))
            status, graph = _ended(d, s)
        finally:
            _end_quietly(d, s)
        host = bytearray(8)
        ok(d.cuMemcpyDtoH(host, p, 8))
        out += [status, _capturing(d, s), bytes(host).hex(), _node_kinds(d, graph), _edge_count(d, graph)]
        out += _run_graph(d, graph, s)
        ok(d.cuMemcpyDtoH(host, p, 8))
        out.append(bytes(host).hex())
        d.cuGraphDestroy(graph)
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_begin_and_end_refusals(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        out: Obs = [
            name(d.cuStreamBeginCapture(B.CUstream(0), _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]),
            _ended(d, s)[0],
            name(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]),
        ]
        try:
            out.append(name(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]))
            status, graph = _ended(d, s)
        finally:
            _end_quietly(d, s)
        out += [status, _node_kinds(d, graph)]
        d.cuGraphDestroy(graph)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_invalidated_by_sync_or_query(d: Any) -> Obs:
    out: Obs = []
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(8))
        for forbidden in ("cuStreamSynchronize", "cuStreamQuery"):
            ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            try:
                d.cuMemsetD8Async(p, 1, 8, s)
                out.append(name(getattr(d, forbidden)(s)[0]))
                out.append(_capturing(d, s))
                out.append(name(d.cuMemsetD8Async(p, 1, 8, s)[0]))
                out.append(_ended(d, s)[0])
            finally:
                _end_quietly(d, s)
            out += [_capturing(d, s), name(d.cuStreamSynchronize(s)[0])]
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_and_the_legacy_stream(d: Any) -> Obs:
    with Ctx(d):
        blocking, non_blocking = ok(d.cuStreamCreate(0)), ok(d.cuStreamCreate(1))
        p = ok(d.cuMemAlloc(8))
        out: Obs = []
        ok(d.cuStreamBeginCapture(non_blocking, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out += [name(d.cuMemsetD8Async(p, 1, 8, B.CUstream(0))[0]), _capturing(d, B.CUstream(0))]
            status, graph = _ended(d, non_blocking)
        finally:
            _end_quietly(d, non_blocking)
        out.append(status)
        if graph is not None:
            d.cuGraphDestroy(graph)
        d.cuStreamSynchronize(B.CUstream(0))
        ok(d.cuStreamBeginCapture(blocking, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out += [_capturing(d, B.CUstream(0)), name(d.cuMemsetD8Async(p, 1, 8, B.CUstream(0))[0])]
            out += [_capturing(d, blocking), _ended(d, blocking)[0]]
        finally:
            _end_quietly(d, blocking)
        d.cuStreamSynchronize(B.CUstream(0))
        d.cuMemFree(p)
        d.cuStreamDestroy(blocking)
        d.cuStreamDestroy(non_blocking)
    return out


@scenario
def capture_fork_and_join_through_events(d: Any) -> Obs:
    with Ctx(d):
        main, side = ok(d.cuStreamCreate(0)), ok(d.cuStreamCreate(0))
        fork, join = ok(d.cuEventCreate(2)), ok(d.cuEventCreate(2))
        p = ok(d.cuMemAlloc(8))
        ok(d.cuMemsetD8(p, 0, 8))
        out: Obs = []
        ok(d.cuStreamBeginCapture(main, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuMemsetD8Async(p, 1, 4, main)
            out.append(name(d.cuEventRecord(fork, main)[0]))
            out.append(name(d.cuEventQuery(fork)[0]))
            out.append(name(d.cuStreamWaitEvent(side, fork, 0)[0]))
            out.append(_capturing(d, side))
            out.append(name(d.cuMemsetD8Async(B.CUdeviceptr(int(p) + 4), 2, 4, side)[0]))
            out.append(_ended(d, side)[0])  # not the origin stream
            out.append(name(d.cuEventRecord(join, side)[0]))
            out.append(name(d.cuStreamWaitEvent(main, join, 0)[0]))
            status, graph = _ended(d, main)
        finally:
            _end_quietly(d, main, side)
        out += [status, _capturing(d, side), _node_kinds(d, graph), _edge_count(d, graph)]
        out += _run_graph(d, graph, main)
        host = bytearray(8)
        ok(d.cuMemcpyDtoH(host, p, 8))
        out.append(bytes(host).hex())
        if graph is not None:
            d.cuGraphDestroy(graph)
        for ev in (fork, join):
            d.cuEventDestroy(ev)
        d.cuMemFree(p)
        d.cuStreamDestroy(main)
        d.cuStreamDestroy(side)
    return out


@scenario
def capture_fork_by_stream_flags(d: Any) -> Obs:
    # Forking a capture onto another stream through an event, for each pairing of blocking (0) and
    # non-blocking (1) streams, and once after a query of the captured event: the wait's status and
    # whether the other stream joined the capture.
    out: Obs = []
    with Ctx(d):
        p = ok(d.cuMemAlloc(4))
        for main_flags, side_flags, query in ((0, 0, False), (0, 1, False), (1, 0, False), (1, 1, False), (1, 1, True)):
            main, side = ok(d.cuStreamCreate(main_flags)), ok(d.cuStreamCreate(side_flags))
            fork = ok(d.cuEventCreate(2))
            ok(d.cuStreamBeginCapture(main, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            try:
                d.cuMemsetD8Async(p, 1, 4, main)
                row: Obs = [main_flags, side_flags, name(d.cuEventRecord(fork, main)[0])]
                if query:  # a query of the captured event before the wait
                    row += [name(d.cuEventQuery(fork)[0]), _capturing(d, main)]
                row += [name(d.cuStreamWaitEvent(side, fork, 0)[0]), _capturing(d, side), _capturing(d, main)]
            finally:
                _end_quietly(d, main, side)
            out.append(row)
            d.cuEventDestroy(fork)
            d.cuStreamDestroy(main)
            d.cuStreamDestroy(side)
        d.cuMemFree(p)
    return out


@scenario
def capture_with_an_unjoined_fork(d: Any) -> Obs:
    with Ctx(d):
        main, side = ok(d.cuStreamCreate(0)), ok(d.cuStreamCreate(0))
        fork = ok(d.cuEventCreate(2))
        p = ok(d.cuMemAlloc(8))
        out: Obs = []
        ok(d.cuStreamBeginCapture(main, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuEventRecord(fork, main)
            d.cuStreamWaitEvent(side, fork, 0)
            d.cuMemsetD8Async(p, 2, 4, side)
            out.append(_ended(d, main)[0])
        finally:
            _end_quietly(d, main, side)
        out += [_capturing(d, main), _capturing(d, side), name(d.cuStreamSynchronize(side)[0])]
        d.cuEventDestroy(fork)
        d.cuMemFree(p)
        d.cuStreamDestroy(main)
        d.cuStreamDestroy(side)
    return out


@scenario
def capture_waits_on_outside_work_or_another_capture(d: Any) -> Obs:
    with Ctx(d):
        a, b, other = ok(d.cuStreamCreate(0)), ok(d.cuStreamCreate(0)), ok(d.cuStreamCreate(0))
        outside, mark = ok(d.cuEventCreate(2)), ok(d.cuEventCreate(2))
        d.cuEventRecord(outside, other)
        out: Obs = []
        ok(d.cuStreamBeginCapture(a, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out += [name(d.cuStreamWaitEvent(a, outside, 0)[0]), _capturing(d, a), _ended(d, a)[0]]
        finally:
            _end_quietly(d, a)
        ok(d.cuStreamBeginCapture(a, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        ok(d.cuStreamBeginCapture(b, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuEventRecord(mark, a)
            out += [name(d.cuStreamWaitEvent(b, mark, 0)[0]), _capturing(d, a), _capturing(d, b)]
            out += [_ended(d, b)[0]]
            status, graph = _ended(d, a)
            out.append(status)
            if graph is not None:
                d.cuGraphDestroy(graph)
        finally:
            _end_quietly(d, a, b)
        for ev in (outside, mark):
            d.cuEventDestroy(ev)
        for st in (a, b, other):
            d.cuStreamSynchronize(st)
            d.cuStreamDestroy(st)
    return out


@scenario
def capture_modes_and_unsafe_calls(d: Any) -> Obs:
    out: Obs = []
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, ptr = d.cuMemAlloc(8)
            out += [name(err), _capturing(d, s), _ended(d, s)[0]]
            if not int(err):
                d.cuMemFree(ptr)
        finally:
            _end_quietly(d, s)
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, host = d.cuMemAllocHost(64)
            out += [name(err), _ended(d, s)[0]]
            if not int(err):
                d.cuMemFreeHost(host)
        finally:
            _end_quietly(d, s)
        old = d.cuThreadExchangeStreamCaptureMode(_CAP.CU_STREAM_CAPTURE_MODE_RELAXED)
        out.append([name(old[0]), _CAP(int(old[1])).name])
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, ptr = d.cuMemAlloc(8)
            out.append(name(err))
            status, graph = _ended(d, s)
            out.append(status)
            if graph is not None:
                d.cuGraphDestroy(graph)
            if not int(err):
                d.cuMemFree(ptr)
        finally:
            _end_quietly(d, s)
        back = d.cuThreadExchangeStreamCaptureMode(_CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)
        out.append([name(back[0]), _CAP(int(back[1])).name])
        out.append(name(d.cuThreadExchangeStreamCaptureMode(7)[0]))
        with contextlib.suppress(ValueError):  # the bindings cannot name a mode 7 returned as the old one
            d.cuThreadExchangeStreamCaptureMode(_CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)  # whatever 7 did, undo it
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_in_another_thread_follows_its_mode(d: Any) -> Obs:
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(0))
        for mode in (_CAP.CU_STREAM_CAPTURE_MODE_GLOBAL, _CAP.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL):
            ok(d.cuStreamBeginCapture(s, mode))
            seen: list[str] = []

            def other(seen: list[str] = seen) -> None:
                d.cuCtxSetCurrent(ctx)
                err, ptr = d.cuMemAlloc(8)
                seen.append(name(err))
                if not int(err):
                    d.cuMemFree(ptr)
                d.cuCtxSetCurrent(B.CUcontext(0))

            try:
                thread = threading.Thread(target=other)
                thread.start()
                thread.join()
                status, graph = _ended(d, s)
                out += [mode.name, *seen, status]
                if graph is not None:
                    d.cuGraphDestroy(graph)
            finally:
                _end_quietly(d, s)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_relaxed_thread_frees_during_a_capture(d: Any) -> Obs:
    """A thread in relaxed mode frees (cuMemFree of cuMemAlloc and of cuMemAllocAsync memory after
    cuCtxSynchronize, cuMemFreeHost) while a global-mode capture of its own runs on a stream of the
    same context: what a collection of cuguard memory does during a capture. Each call's status, then
    the capture's status and how it ends."""
    out: Obs = []
    with Ctx(d):
        s = ok(d.cuStreamCreate(1))  # non-blocking: the legacy stream's rules stay out of it
        other = ok(d.cuStreamCreate(1))
        plain = ok(d.cuMemAlloc(64))
        ordered = ok(d.cuMemAllocAsync(64, other))
        ok(d.cuStreamSynchronize(other))
        host = ok(d.cuMemHostAlloc(64, 0))
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            old = d.cuThreadExchangeStreamCaptureMode(_CAP.CU_STREAM_CAPTURE_MODE_RELAXED)
            out.append(name(old[0]))
            out.append(name(d.cuMemFree(plain)[0]))
            out.append(name(d.cuCtxSynchronize()[0]))
            out.append(name(d.cuMemFree(ordered)[0]))
            out.append(name(d.cuMemFreeHost(host)[0]))
            back = d.cuThreadExchangeStreamCaptureMode(_CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)
            out.append([name(back[0]), _CAP(int(back[1])).name])
            out.append(_capturing(d, s))
            status, graph = _ended(d, s)
            out.append(status)
            if graph is not None:
                d.cuGraphDestroy(graph)
        finally:
            _end_quietly(d, s)
        d.cuStreamDestroy(other)
        d.cuStreamDestroy(s)
    return out


@scenario
def graph_teardown_during_a_capture(d: Any) -> Obs:
    """Destroying a graph and an executable graph while a global-mode capture of the same thread runs
    (what a collection does), in global mode then in relaxed mode: each call's status, and whether the
    capture survived it."""
    out: Obs = []
    with Ctx(d):
        s = ok(d.cuStreamCreate(1))
        for relaxed in (False, True):
            graph = ok(d.cuGraphCreate(0))
            ok(d.cuGraphAddEmptyNode(graph, None, 0))
            exe = ok(d.cuGraphInstantiate(graph, 0))
            spare = ok(d.cuGraphCreate(0))
            ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            try:
                if relaxed:
                    old = d.cuThreadExchangeStreamCaptureMode(_CAP.CU_STREAM_CAPTURE_MODE_RELAXED)
                    out.append(name(old[0]))
                destroyed = d.cuGraphExecDestroy(exe)[0]
                out.append(["cuGraphExecDestroy", name(destroyed)])
                out.append(["cuGraphDestroy", name(d.cuGraphDestroy(spare)[0])])
                if relaxed:
                    back = d.cuThreadExchangeStreamCaptureMode(_CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)
                    out.append(name(back[0]))
                status, captured = _ended(d, s)
                out.append(status)
                if captured is not None:
                    d.cuGraphDestroy(captured)
            finally:
                _end_quietly(d, s)
            if int(destroyed):
                d.cuGraphExecDestroy(exe)  # refused during the capture: destroyed now
            d.cuGraphDestroy(graph)
        d.cuStreamDestroy(s)
    return out


@scenario
def stream_queries_during_an_invalidated_capture(d: Any) -> Obs:
    """cuStreamGetCtx of a stream while its capture runs, once it is invalidated (a synchronization of the
    capturing stream), and after the capture ended: each status, and whether the context named is right."""
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(1))
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, named = d.cuStreamGetCtx(s)
            out.append([name(err), not int(err) and int(named) == int(ctx)])
            out.append(name(d.cuStreamSynchronize(s)[0]))
            out.append(_capturing(d, s))
            err, named = d.cuStreamGetCtx(s)
            out.append([name(err), not int(err) and int(named) == int(ctx)])
            out.append(_ended(d, s)[0])
        finally:
            _end_quietly(d, s)
        err, named = d.cuStreamGetCtx(s)
        out.append([name(err), not int(err) and int(named) == int(ctx)])
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_sync_by_mode_and_destroyed_stream(d: Any) -> Obs:
    # cuCtxSynchronize while a capture begun in each mode runs on a stream of the context (the thread
    # in the same mode), and what destroying a capturing stream does: its status, then a sync.
    out: Obs = []
    with Ctx(d):
        for mode in (_CAP.CU_STREAM_CAPTURE_MODE_RELAXED, _CAP.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL):
            s = ok(d.cuStreamCreate(1))
            old = d.cuThreadExchangeStreamCaptureMode(mode)[1]
            ok(d.cuStreamBeginCapture(s, mode))
            try:
                out.append([mode.name, name(d.cuCtxSynchronize()[0]), _capturing(d, s), _ended(d, s)[0]])
            finally:
                _end_quietly(d, s)
                d.cuThreadExchangeStreamCaptureMode(old)
            d.cuStreamDestroy(s)
        s = ok(d.cuStreamCreate(1))
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        out.append(["destroy while capturing", name(d.cuStreamDestroy(s)[0])])
        out.append(["sync after", name(d.cuCtxSynchronize()[0])])
        p = d.cuMemAlloc(4)
        out.append(["alloc after", name(p[0])])
        if not int(p[0]):
            d.cuMemFree(p[1])
    return out


@scenario
def capture_ended_from_another_thread(d: Any) -> Obs:
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(0))
        for mode in (_CAP.CU_STREAM_CAPTURE_MODE_GLOBAL, _CAP.CU_STREAM_CAPTURE_MODE_RELAXED):
            ok(d.cuStreamBeginCapture(s, mode))
            ended: list[Any] = []

            def other(ended: list[Any] = ended) -> None:
                d.cuCtxSetCurrent(ctx)
                ended.append(_ended(d, s))
                d.cuCtxSetCurrent(B.CUcontext(0))

            try:
                thread = threading.Thread(target=other)
                thread.start()
                thread.join()
                status, graph = ended[0]
                out += [mode.name, status, _capturing(d, s)]
                if graph is not None:
                    d.cuGraphDestroy(graph)
            finally:
                _end_quietly(d, s)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_info_and_dependency_updates(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(8))
        idle = d.cuStreamGetCaptureInfo(s)
        out: Obs = [name(idle[0]), B.CUstreamCaptureStatus(int(idle[1])).name]
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuMemsetD8Async(p, 1, 8, s)
            info = d.cuStreamGetCaptureInfo(s)
            out += [name(info[0]), B.CUstreamCaptureStatus(int(info[1])).name, int(info[2]) > 0, int(info[-1])]
            graph, deps = info[3], list(info[4])
            empty = ok(d.cuGraphAddEmptyNode(graph, deps, len(deps)))
            if BINDINGS_MAJOR >= 13:
                upd = d.cuStreamUpdateCaptureDependencies(s, [empty], None, 1, 1)
            else:
                upd = d.cuStreamUpdateCaptureDependencies(s, [empty], 1, 1)
            out.append(name(upd[0]))
            after = d.cuStreamGetCaptureInfo(s)
            out.append([int(n) == int(empty) for n in list(after[4])[: int(after[-1])]])
            d.cuMemsetD8Async(p, 2, 8, s)
            status, ended = _ended(d, s)
        finally:
            _end_quietly(d, s)
        out += [status, int(ended) == int(graph), _node_kinds(d, ended), _edge_count(d, ended)]
        d.cuGraphDestroy(ended)
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_into_an_existing_graph(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(8))
        graph = ok(d.cuGraphCreate(0))
        root = ok(d.cuGraphAddEmptyNode(graph, None, 0))
        out: Obs = [
            name(d.cuStreamBeginCaptureToGraph(s, graph, [root], None, 1, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0])
        ]
        try:
            d.cuMemsetD8Async(p, 3, 8, s)
            status, same = _ended(d, s)
            out += [status, same is not None and int(same) == int(graph), _edge_count(d, graph)]
            ok(d.cuStreamBeginCaptureToGraph(s, graph, None, None, 0, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            d.cuStreamSynchronize(s)
            out.append(_ended(d, s)[0])
        finally:
            _end_quietly(d, s)
        out += [_node_kinds(d, graph), name(d.cuGraphDestroy(graph)[0])]
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_graph_launch_kernel_and_memory(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(8))
        mod = ok(d.cuModuleLoadData(PTX))
        fn = ok(d.cuModuleGetFunction(mod, b"empty"))
        inner = ok(d.cuGraphCreate(0))
        ok(d.cuGraphAddEmptyNode(inner, None, 0))
        exe = ok(d.cuGraphInstantiate(inner, 0))
        out: Obs = []
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out.append(name(d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, 0, 0)[0]))
            out.append(name(d.cuGraphLaunch(exe, s)[0]))
            err, scratch = d.cuMemAllocAsync(64, s)
            out.append(name(err))
            out.append(name(d.cuMemFreeAsync(p, s)[0]))  # not allocated by the capture
            out.append(_capturing(d, s))
            if not int(err):
                out.append(name(d.cuMemFreeAsync(scratch, s)[0]))
            status, graph = _ended(d, s)
        finally:
            _end_quietly(d, s)
        out.append(status)
        if graph is not None:
            out.append(_node_kinds(d, graph))
            out += _run_graph(d, graph, s)
            d.cuGraphDestroy(graph)
        d.cuGraphExecDestroy(exe)
        d.cuGraphDestroy(inner)
        d.cuModuleUnload(mod)
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


@scenario
def capture_host_function_node(d: Any) -> Obs:
    ran: list[int] = []
    thunk = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: ran.append(1))
    address = ctypes.cast(thunk, ctypes.c_void_p).value
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out: Obs = [name(d.cuLaunchHostFunc(s, B.CUhostFn(address), 0)[0])]
            status, graph = _ended(d, s)
        finally:
            _end_quietly(d, s)
        out += [status, len(ran), _node_kinds(d, graph)]
        # One launch only: cuda-bindings frees a cuLaunchHostFunc callback's data after its first call.
        out += _run_graph(d, graph, s)
        out.append(len(ran))
        d.cuGraphDestroy(graph)
        d.cuStreamDestroy(s)
    return out


# --- conditional nodes and per-node updates of executable graphs ------------------------------

_COND = B.CUgraphConditionalNodeType
_ASSIGN_DEFAULT = 1  # CU_GRAPH_COND_ASSIGN_DEFAULT


def _add_node(d: Any, graph: Any, deps: list[Any], params: Any) -> Any:
    """cuGraphAddNode with default edges (13.x takes edge data, 12.x does not)."""
    if BINDINGS_MAJOR >= 13:
        return d.cuGraphAddNode(graph, deps or None, None, len(deps), params)
    return d.cuGraphAddNode(graph, deps or None, len(deps), params)


def _conditional(  # noqa: PLR0917 - the node parameters' fields
    d: Any, graph: Any, handle: Any, kind: Any, size: int, ctx: Any, deps: list[Any]
) -> tuple[str, Any, list[Any]]:
    """(status, node, bodies) of a conditional node; bodies only on success (phGraph_out is unset otherwise)."""
    params = B.CUgraphNodeParams()
    params.type = B.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = kind
    params.conditional.size = size
    params.conditional.ctx = ctx
    err, node = _add_node(d, graph, deps, params)
    if int(err):
        return name(err), None, []
    return name(err), node, list(params.conditional.phGraph_out)[:size]


def _memset_node(d: Any, graph: Any, deps: list[Any], ptr: Any, value: int, n: int, ctx: Any) -> Any:  # noqa: PLR0917
    p = B.CUDA_MEMSET_NODE_PARAMS()
    p.dst, p.value, p.elementSize, p.width, p.height, p.pitch = ptr, value, 1, n, 1, 0
    return ok(d.cuGraphAddMemsetNode(graph, deps or None, len(deps), p, ctx))


def _read(d: Any, ptr: Any, n: int) -> str:
    host = bytearray(n)
    ok(d.cuMemcpyDtoH(host, ptr, n))
    return bytes(host).hex()


@scenario
def conditional_branches_by_default_value(d: Any) -> Obs:
    # Which body runs, decided by the handle's default (assigned at each launch): if, if-else,
    # switch (in range and past the last body) and a while node whose value is 0.
    cases = [
        ("if", _COND.CU_GRAPH_COND_TYPE_IF, 1, 1),
        ("if0", _COND.CU_GRAPH_COND_TYPE_IF, 1, 0),
        ("if_else", _COND.CU_GRAPH_COND_TYPE_IF, 2, 0),
        ("switch", _COND.CU_GRAPH_COND_TYPE_SWITCH, 3, 2),
        ("switch_past", _COND.CU_GRAPH_COND_TYPE_SWITCH, 3, 5),
        ("while0", _COND.CU_GRAPH_COND_TYPE_WHILE, 1, 0),
    ]
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(8))
        for label, kind, size, default in cases:
            g = ok(d.cuGraphCreate(0))
            handle = ok(d.cuGraphConditionalHandleCreate(g, ctx, default, _ASSIGN_DEFAULT))
            first = _memset_node(d, g, [], p, 0xEE, 8, ctx)
            status, _, bodies = _conditional(d, g, handle, kind, size, ctx, [first])
            for i, body in enumerate(bodies):
                _memset_node(d, body, [], p, 0x10 + i, 8, ctx)
            out.append([label, status, len(bodies), *_run_graph(d, g, s), _read(d, p, 8)])
            d.cuGraphDestroy(g)
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


@scenario
def conditional_refusals(d: Any) -> Obs:
    # CUDA's sizes per type, a handle of another graph, handle flags, and a handle no node uses.
    out: Obs = []
    with Ctx(d) as ctx:
        g = ok(d.cuGraphCreate(0))
        other = ok(d.cuGraphCreate(0))
        handle = ok(d.cuGraphConditionalHandleCreate(g, ctx, 0, 0))
        theirs = ok(d.cuGraphConditionalHandleCreate(other, ctx, 0, 0))
        for kind, size in ((_COND.CU_GRAPH_COND_TYPE_IF, 3), (_COND.CU_GRAPH_COND_TYPE_WHILE, 2)):
            out.append(_conditional(d, g, handle, kind, size, ctx, [])[0])
        out.append(_conditional(d, g, theirs, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])[0])
        out.append(name(d.cuGraphConditionalHandleCreate(g, ctx, 0, 2)[0]))
        out.append(int(d.cuGraphGetNodes(g, 0)[-1]))
        unused = ok(d.cuGraphCreate(0))
        ok(d.cuGraphConditionalHandleCreate(unused, ctx, 1, _ASSIGN_DEFAULT))
        err, exe = d.cuGraphInstantiate(unused, 0)
        out.append(["unused handle, instantiate", name(err)])
        if not int(err):
            d.cuGraphExecDestroy(exe)
        for graph in (g, other, unused):
            d.cuGraphDestroy(graph)
    return out


@scenario
def conditional_graph_clone_and_nested_bodies(d: Any) -> Obs:
    # An if node whose body holds a switch node (a handle of the outer graph), cloned (CUDA does not
    # clone graphs with conditional nodes) and run.
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(4))
        g = ok(d.cuGraphCreate(0))
        outer = ok(d.cuGraphConditionalHandleCreate(g, ctx, 1, _ASSIGN_DEFAULT))
        inner = ok(d.cuGraphConditionalHandleCreate(g, ctx, 1, _ASSIGN_DEFAULT))
        _memset_node(d, g, [], p, 0, 4, ctx)
        status, _, bodies = _conditional(d, g, outer, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])
        status2, cases = "no body", []
        if bodies:
            status2, _, cases = _conditional(d, bodies[0], inner, _COND.CU_GRAPH_COND_TYPE_SWITCH, 2, ctx, [])
        for i, case in enumerate(cases):
            _memset_node(d, case, [], p, 0x30 + i, 4, ctx)
        out += [status, status2]
        roots = int(d.cuGraphGetRootNodes(g, 0)[-1])
        err, copy = d.cuGraphClone(g)
        out += [roots, name(err)]
        if not int(err):
            out.append(_node_kinds(d, copy))
            d.cuGraphDestroy(copy)
        err, exe = d.cuGraphInstantiate(g, 0)
        out.append(name(err))
        if not int(err):
            out += [name(d.cuGraphLaunch(exe, s)[0]), name(d.cuStreamSynchronize(s)[0]), _read(d, p, 4)]
            d.cuGraphExecDestroy(exe)
        d.cuGraphDestroy(g)
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


def _instantiate_status(d: Any, graph: Any) -> str:
    err, exe = d.cuGraphInstantiate(graph, 0)
    if not int(err):
        d.cuGraphExecDestroy(exe)
    return name(err)


@scenario
def conditional_nested_handle_by_graph(d: Any) -> Obs:
    # A conditional node inside a body, with its handle made on the body graph, on the outer graph and
    # on an unrelated graph; each graph instantiated and run (only the first two handles are used).
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(0))
        p = ok(d.cuMemAlloc(4))
        for where in ("body", "outer", "unrelated"):
            g = ok(d.cuGraphCreate(0))
            other = ok(d.cuGraphCreate(0))
            outer = ok(d.cuGraphConditionalHandleCreate(g, ctx, 1, _ASSIGN_DEFAULT))
            ok(d.cuMemsetD8(p, 0, 4))
            status, _, bodies = _conditional(d, g, outer, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])
            row: Obs = [where, status]
            if bodies:
                owner = {"body": bodies[0], "outer": g, "unrelated": other}[where]
                inner = ok(d.cuGraphConditionalHandleCreate(owner, ctx, 1, _ASSIGN_DEFAULT))
                status2, _, cases = _conditional(d, bodies[0], inner, _COND.CU_GRAPH_COND_TYPE_SWITCH, 2, ctx, [])
                for i, case in enumerate(cases):
                    _memset_node(d, case, [], p, 0x40 + i, 4, ctx)
                row.append(status2)
                if where == "outer" and int(d.cuGraphGetNodes(bodies[0], 0)[-1]) == 0:
                    _memset_node(d, bodies[0], [], p, 0x50, 4, ctx)  # the unused inner handle stays
                err, exe = d.cuGraphInstantiate(g, 0)
                row.append(name(err))
                if not int(err):
                    row += _run_graph_exec(d, exe, s)
                    row.append(_read(d, p, 4))
                    d.cuGraphExecDestroy(exe)
            out.append(row)
            d.cuGraphDestroy(g)
            d.cuGraphDestroy(other)
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
    return out


@scenario
def conditional_instantiate_shapes(d: Any) -> Obs:
    # Which graphs with conditional nodes instantiate: an empty body, a node after empty nodes, two
    # conditional nodes, a handle with no node, and a handle used by a node that was destroyed.
    out: Obs = []
    with Ctx(d) as ctx:
        p = ok(d.cuMemAlloc(4))

        def build(shape: str) -> Obs:
            g = ok(d.cuGraphCreate(0))
            try:
                a = ok(d.cuGraphAddEmptyNode(g, None, 0))
                h1 = ok(d.cuGraphConditionalHandleCreate(g, ctx, 1, _ASSIGN_DEFAULT))
                deps = [a] if shape != "at_root" else []
                status, node, bodies = _conditional(d, g, h1, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, deps)
                if bodies and shape != "empty_body":
                    _memset_node(d, bodies[0], [], p, 3, 4, ctx)
                if shape == "two_nodes":
                    h2 = ok(d.cuGraphConditionalHandleCreate(g, ctx, 0, _ASSIGN_DEFAULT))
                    _, _, more = _conditional(d, g, h2, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])
                    if more:
                        _memset_node(d, more[0], [], p, 4, 4, ctx)
                if shape == "two_nodes_one_empty":
                    h2 = ok(d.cuGraphConditionalHandleCreate(g, ctx, 0, _ASSIGN_DEFAULT))
                    _conditional(d, g, h2, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])
                if shape == "spare_handle":
                    ok(d.cuGraphConditionalHandleCreate(g, ctx, 0, _ASSIGN_DEFAULT))
                if shape == "destroyed_node" and node is not None:
                    h3 = ok(d.cuGraphConditionalHandleCreate(g, ctx, 0, _ASSIGN_DEFAULT))
                    _, gone, _ = _conditional(d, g, h3, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])
                    if gone is not None:
                        ok(d.cuGraphDestroyNode(gone))
                return [shape, status, _instantiate_status(d, g)]
            finally:
                d.cuGraphDestroy(g)

        for shape in (
            "at_root",
            "after_empty",
            "empty_body",
            "two_nodes",
            "two_nodes_one_empty",
            "spare_handle",
            "destroyed_node",
        ):
            out.append(build(shape))
        d.cuMemFree(p)
    return out


@scenario
def conditional_handle_needs_no_current_context(d: Any) -> Obs:
    # cuGraphConditionalHandleCreate takes its context as an argument: asked with none current, and
    # with another context current.
    out: Obs = []
    with Ctx(d) as ctx:
        g = ok(d.cuGraphCreate(0))
        d.cuCtxSetCurrent(B.CUcontext(0))
        err, _ = d.cuGraphConditionalHandleCreate(g, ctx, 0, 0)
        out.append(["none current", name(err)])
        other = ok(ctx_create(d, 0, ok(d.cuDeviceGet(0))))
        err, _ = d.cuGraphConditionalHandleCreate(g, ctx, 0, 0)
        out.append(["another current", name(err)])
        d.cuCtxSetCurrent(B.CUcontext(0))
        d.cuCtxDestroy(other)
        d.cuCtxSetCurrent(ctx)
        d.cuGraphDestroy(g)
    return out


@scenario
def conditional_instantiate_by_current_context(d: Any) -> Obs:
    # A graph with a conditional node (context A) instantiated with A current, with none current,
    # with another context current, and with A made current just before (from none, from another);
    # once with created contexts and once with A the device's primary context.
    out: Obs = []
    dev = ok(d.cuDeviceGet(0))
    for kind in ("created", "primary"):
        a = ok(ctx_create(d, 0, dev)) if kind == "created" else ok(d.cuDevicePrimaryCtxRetain(dev))
        d.cuCtxSetCurrent(a)
        b = ok(ctx_create(d, 0, dev))
        d.cuCtxSetCurrent(a)
        p = ok(d.cuMemAlloc(4))
        g = ok(d.cuGraphCreate(0))
        handle = ok(d.cuGraphConditionalHandleCreate(g, a, 1, _ASSIGN_DEFAULT))
        _, _, bodies = _conditional(d, g, handle, _COND.CU_GRAPH_COND_TYPE_IF, 1, a, [])
        for body in bodies:
            _memset_node(d, body, [], p, 7, 4, a)
        row: Obs = [kind]
        for label, first, then in (
            ("A", a, None),
            ("none", B.CUcontext(0), None),
            ("other", b, None),
            ("none then A", B.CUcontext(0), a),
            ("other then A", b, a),
        ):
            d.cuCtxSetCurrent(first)
            if then is not None:
                d.cuCtxSetCurrent(then)
            err, exe = d.cuGraphInstantiate(g, 0)
            row.append([label, name(err)])
            if not int(err):
                d.cuGraphExecDestroy(exe)
        out.append(row)
        d.cuCtxSetCurrent(a)
        d.cuGraphDestroy(g)
        d.cuMemFree(p)
        d.cuCtxSetCurrent(B.CUcontext(0))
        d.cuCtxDestroy(b)
        if kind == "created":
            d.cuCtxDestroy(a)
        else:
            d.cuDevicePrimaryCtxRelease(dev)
        d.cuCtxSetCurrent(B.CUcontext(0))
    return out


@scenario
def conditional_nested_outer_handle_shapes(d: Any) -> Obs:
    # An if node in a body with a handle of the outer graph: the handle made before or after the outer
    # node, the body empty or holding a node already, the inner handle's default 0 or 1.
    out: Obs = []
    with Ctx(d) as ctx:
        p = ok(d.cuMemAlloc(4))
        for early in (True, False):
            for filled in (False, True):
                for default in (0, 1):
                    g = ok(d.cuGraphCreate(0))
                    inner = ok(d.cuGraphConditionalHandleCreate(g, ctx, default, _ASSIGN_DEFAULT)) if early else None
                    outer = ok(d.cuGraphConditionalHandleCreate(g, ctx, 1, _ASSIGN_DEFAULT))
                    _, _, bodies = _conditional(d, g, outer, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])
                    if inner is None:
                        inner = ok(d.cuGraphConditionalHandleCreate(g, ctx, default, _ASSIGN_DEFAULT))
                    if filled:
                        _memset_node(d, bodies[0], [], p, 3, 4, ctx)
                    status = _conditional(d, bodies[0], inner, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])[0]
                    out.append([early, filled, default, status, _instantiate_status(d, g)])
                    d.cuGraphDestroy(g)
        d.cuMemFree(p)
    return out


@scenario
def conditional_instantiate_twice_and_handle_reuse(d: Any) -> Obs:
    # A graph with a conditional node instantiated a second time while the first executable graph
    # lives, and again after it is destroyed; a node added and destroyed in between; one handle given
    # to a second conditional node (at the top level and in the node's own body).
    out: Obs = []
    with Ctx(d) as ctx:
        p = ok(d.cuMemAlloc(4))
        g = ok(d.cuGraphCreate(0))
        handle = ok(d.cuGraphConditionalHandleCreate(g, ctx, 1, _ASSIGN_DEFAULT))
        _, _, bodies = _conditional(d, g, handle, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])
        _memset_node(d, bodies[0], [], p, 1, 4, ctx)
        first = ok(d.cuGraphInstantiate(g, 0))
        out.append(["second while the first lives", _instantiate_status(d, g)])
        extra = ok(d.cuGraphAddEmptyNode(g, None, 0))
        ok(d.cuGraphDestroyNode(extra))
        out.append(["after a node came and went", _instantiate_status(d, g)])
        d.cuGraphExecDestroy(first)
        out.append(["after the first was destroyed", _instantiate_status(d, g)])
        out.append(["handle again, top level", _conditional(d, g, handle, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])[0]])
        out.append(
            [
                "handle again, in its body",
                _conditional(d, bodies[0], handle, _COND.CU_GRAPH_COND_TYPE_IF, 1, ctx, [])[0],
            ]
        )
        out.append(["nodes", int(d.cuGraphGetNodes(g, 0)[-1]), int(d.cuGraphGetNodes(bodies[0], 0)[-1])])
        plain = ok(d.cuGraphCreate(0))
        _memset_node(d, plain, [], p, 2, 4, ctx)
        exe = ok(d.cuGraphInstantiate(plain, 0))
        out.append(["plain graph, second", _instantiate_status(d, plain)])
        d.cuGraphExecDestroy(exe)
        d.cuGraphDestroy(plain)
        d.cuGraphDestroy(g)
        d.cuMemFree(p)
    return out


def _add_conditional_at_tail(  # noqa: PLR0917 - the node parameters' fields
    d: Any, s: Any, kind: Any, size: int, default: int, ctx: Any
) -> tuple[Obs, list[Any]]:
    """A conditional node after the capture's tail on ``s``; the capture continues from it."""
    info = d.cuStreamGetCaptureInfo(s)
    graph, deps, count = info[3], list(info[4] or []), int(info[-1])
    handle = ok(d.cuGraphConditionalHandleCreate(graph, ctx, default, _ASSIGN_DEFAULT))
    status, node, bodies = _conditional(d, graph, handle, kind, size, ctx, deps[:count])
    out: Obs = [status]
    if node is not None:
        if BINDINGS_MAJOR >= 13:
            upd = d.cuStreamUpdateCaptureDependencies(s, [node], None, 1, 1)
        else:
            upd = d.cuStreamUpdateCaptureDependencies(s, [node], 1, 1)
        out.append(name(upd[0]))
    return out, bodies


@scenario
def capture_conditional_bodies_captured(d: Any) -> Obs:
    # Conditional nodes added during a capture (the handle made on the capture's graph), their bodies
    # captured on other streams with cuStreamBeginCaptureToGraph; then the graph runs.
    out: Obs = []
    with Ctx(d) as ctx:
        s, side = ok(d.cuStreamCreate(1)), ok(d.cuStreamCreate(1))
        p = ok(d.cuMemAlloc(8))
        ok(d.cuMemsetD8(p, 0, 8))
        ok(d.cuStreamBeginCapture(s, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        graph = None
        try:
            d.cuMemsetD8Async(p, 1, 8, s)
            for kind, size, default, offset in (
                (_COND.CU_GRAPH_COND_TYPE_IF, 2, 0, 0),
                (_COND.CU_GRAPH_COND_TYPE_SWITCH, 3, 1, 4),
            ):
                row, bodies = _add_conditional_at_tail(d, s, kind, size, default, ctx)
                for i, body in enumerate(bodies):
                    err = d.cuStreamBeginCaptureToGraph(side, body, None, None, 0, _CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[
                        0
                    ]
                    row.append(name(err))
                    d.cuMemsetD8Async(B.CUdeviceptr(int(p) + offset), 0x20 + 0x10 * size + i, 4, side)
                    status, same = _ended(d, side)
                    row += [status, same is not None and int(same) == int(body)]
                    row.append(_node_kinds(d, body))
                out.append(row)
            d.cuMemsetD8Async(B.CUdeviceptr(int(p) + 7), 9, 1, s)
            status, graph = _ended(d, s)
        finally:
            _end_quietly(d, s, side)
        out += [status, _node_kinds(d, graph)]
        if graph is not None:
            err, exe = d.cuGraphInstantiate(graph, 0)
            out.append(name(err))
            if not int(err):
                out += _run_graph_exec(d, exe, s)
                d.cuGraphExecDestroy(exe)
            d.cuGraphDestroy(graph)
        out.append(_read(d, p, 8))
        d.cuMemFree(p)
        d.cuStreamDestroy(s)
        d.cuStreamDestroy(side)
    return out


@scenario
def exec_node_updates_and_enabling(d: Any) -> Obs:
    # Per-node updates of an executable graph and their refusals, then disabling a node and a
    # whole-graph update from a clone while it is disabled.
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(0))
        a, b = ok(d.cuMemAlloc(8)), ok(d.cuMemAlloc(8))
        ok(d.cuMemsetD8(a, 0, 8))
        ok(d.cuMemsetD8(b, 0, 8))
        g = ok(d.cuGraphCreate(0))
        m = _memset_node(d, g, [], a, 1, 8, ctx)
        e = ok(d.cuGraphAddEmptyNode(g, [m], 1))
        other = ok(d.cuGraphCreate(0))
        foreign = _memset_node(d, other, [], b, 1, 8, ctx)
        exe = ok(d.cuGraphInstantiate(g, 0))
        p = B.CUDA_MEMSET_NODE_PARAMS()
        p.dst, p.value, p.elementSize, p.width, p.height, p.pitch = b, 5, 1, 8, 1, 0
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, m, p, ctx)[0]))
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, foreign, p, ctx)[0]))
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, e, p, ctx)[0]))
        p2 = B.CUDA_MEMSET_NODE_PARAMS()
        p2.dst, p2.value, p2.elementSize, p2.width, p2.height, p2.pitch = b, 6, 1, 4, 2, 4
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, m, p2, ctx)[0]))  # two-dimensional
        out += [name(d.cuGraphLaunch(exe, s)[0]), name(d.cuStreamSynchronize(s)[0]), _read(d, a, 8), _read(d, b, 8)]
        out.append(name(d.cuGraphNodeSetEnabled(exe, e, 0)[0]))  # an empty node
        out.append(name(d.cuGraphNodeSetEnabled(exe, m, 0)[0]))
        err, enabled = d.cuGraphNodeGetEnabled(exe, m)
        out.append([name(err), int(enabled or 0)])
        ok(d.cuMemsetD8(b, 0, 8))
        d.cuGraphLaunch(exe, s)
        d.cuStreamSynchronize(s)
        out.append(_read(d, b, 8))
        copy = ok(d.cuGraphClone(g))
        err = d.cuGraphExecUpdate(exe, copy)[0]
        out.append(name(err))
        err, enabled = d.cuGraphNodeGetEnabled(exe, m)
        out.append(["after update", name(err), int(enabled or 0)])
        ok(d.cuMemsetD8(a, 0, 8))
        ok(d.cuMemsetD8(b, 0, 8))
        d.cuGraphLaunch(exe, s)
        d.cuStreamSynchronize(s)
        out += [_read(d, a, 8), _read(d, b, 8)]
        d.cuGraphExecDestroy(exe)
        for graph in (copy, g, other):
            d.cuGraphDestroy(graph)
        d.cuMemFree(a)
        d.cuMemFree(b)
        d.cuStreamDestroy(s)
    return out


@scenario
def exec_copy_and_child_updates(d: Any) -> Obs:
    # A memcpy update that changes a memory type, and child-graph updates of another topology
    # and of the same one.
    out: Obs = []
    with Ctx(d) as ctx:
        s = ok(d.cuStreamCreate(0))
        a, b = ok(d.cuMemAlloc(8)), ok(d.cuMemAlloc(8))
        ok(d.cuMemsetD8(a, 3, 8))
        ok(d.cuMemsetD8(b, 0, 8))
        g = ok(d.cuGraphCreate(0))
        cp = B.CUDA_MEMCPY3D()
        cp.srcMemoryType = cp.dstMemoryType = B.CUmemorytype.CU_MEMORYTYPE_DEVICE
        cp.srcDevice, cp.dstDevice = a, b
        cp.WidthInBytes, cp.Height, cp.Depth = 8, 1, 1
        copy_node = ok(d.cuGraphAddMemcpyNode(g, None, 0, cp, ctx))
        child = ok(d.cuGraphCreate(0))
        _memset_node(d, child, [], a, 1, 8, ctx)
        child_node = ok(d.cuGraphAddChildGraphNode(g, [copy_node], 1, child))
        exe = ok(d.cuGraphInstantiate(g, 0))
        host = (ctypes.c_char * 8)()
        to_host = B.CUDA_MEMCPY3D()
        to_host.srcMemoryType = B.CUmemorytype.CU_MEMORYTYPE_DEVICE
        to_host.dstMemoryType = B.CUmemorytype.CU_MEMORYTYPE_HOST
        to_host.srcDevice = a
        to_host.dstHost = ctypes.addressof(host)
        to_host.WidthInBytes, to_host.Height, to_host.Depth = 8, 1, 1
        out.append(name(d.cuGraphExecMemcpyNodeSetParams(exe, copy_node, to_host, ctx)[0]))
        bigger = ok(d.cuGraphCreate(0))
        first = _memset_node(d, bigger, [], a, 2, 8, ctx)
        _memset_node(d, bigger, [first], a, 2, 8, ctx)
        out.append(name(d.cuGraphExecChildGraphNodeSetParams(exe, child_node, bigger)[0]))
        same = ok(d.cuGraphCreate(0))
        _memset_node(d, same, [], a, 9, 8, ctx)
        out.append(name(d.cuGraphExecChildGraphNodeSetParams(exe, child_node, same)[0]))
        out += _run_graph_exec(d, exe, s)
        out += [_read(d, a, 8), _read(d, b, 8)]
        d.cuGraphExecDestroy(exe)
        for graph in (g, child, bigger, same):
            d.cuGraphDestroy(graph)
        d.cuMemFree(a)
        d.cuMemFree(b)
        d.cuStreamDestroy(s)
    return out


def _ex_config(stream: Any, attributes: list[tuple[str, int]]) -> Any:
    """A one-block ``CUlaunchConfig`` on ``stream`` with launch attributes ``(name, value)``."""
    attrs = []
    for which, value in attributes:
        attr = B.CUlaunchAttribute()
        attr.id = getattr(B.CUlaunchAttributeID, f"CU_LAUNCH_ATTRIBUTE_{which}")
        if which == "PRIORITY":
            attr.value.priority = value
        else:
            attr.value.programmaticStreamSerializationAllowed = value
        attrs.append(attr)
    cfg = B.CUlaunchConfig()
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1
    cfg.sharedMemBytes = 0
    cfg.hStream = stream
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


@scenario
def launch_priority_and_programmatic_serialization(d: Any) -> Obs:
    """Launch attributes of cuLaunchKernelEx: priorities in and out of the stream priority range, PDL."""
    out: Obs = []
    with Ctx(d):
        least, greatest = ok(d.cuCtxGetStreamPriorityRange())
        out.append([int(least), int(greatest)])
        mod = ok(d.cuModuleLoadData(PTX))
        fn = ok(d.cuModuleGetFunction(mod, b"empty"))
        s = ok(d.cuStreamCreate(0))
        for attributes in (
            [("PRIORITY", int(greatest))],
            [("PRIORITY", int(least))],
            [("PRIORITY", int(greatest) - 1)],
            [("PRIORITY", int(least) + 1)],
            [("PRIORITY", -1000)],
            [("PROGRAMMATIC_STREAM_SERIALIZATION", 1)],
            [("PROGRAMMATIC_STREAM_SERIALIZATION", 0)],
            [("PROGRAMMATIC_STREAM_SERIALIZATION", 1), ("PRIORITY", int(greatest))],
        ):
            out.append(name(d.cuLaunchKernelEx(_ex_config(s, attributes), fn, 0, 0)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
        d.cuStreamDestroy(s)
        d.cuModuleUnload(mod)
    return out


def _run_graph_exec(d: Any, exe: Any, stream: Any) -> list[str]:
    return [name(d.cuGraphLaunch(exe, stream)[0]), name(d.cuStreamSynchronize(stream)[0])]


def run_all(driver: Any, devices: int, only: str | None = None) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for key, fn in SCENARIOS.items():
        if only is not None and key != only:
            continue
        if key in TWO_DEVICE and devices < 2:
            results[key] = "skipped: needs two devices"
            continue
        try:
            results[key] = fn(driver)
        except Exception as exc:  # noqa: BLE001 - reported as a broken scenario
            results[key] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)}
    return results


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists), so both sides compare alike."""
    return json.loads(json.dumps(value, default=str))


def run_real_isolated(devices: int) -> dict[str, Any]:
    """Each scenario on the real driver in a process of its own: a crash is counted, not fatal."""
    results: dict[str, Any] = {}
    for key in SCENARIOS:
        if key in TWO_DEVICE and devices < 2:
            results[key] = "skipped: needs two devices"
            continue
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--real-one", key], capture_output=True, text=True, timeout=120, check=False
            )
        except subprocess.TimeoutExpired:
            results[key] = {"error": "timed out after 120 s"}
            continue
        if done.returncode != 0:
            how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
            results[key] = {"error": f"the scenario's process ended: {how}", "stderr": done.stderr[-2000:]}
            continue
        results[key] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"ran {key}", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default=None)
    parser.add_argument("--sim-only", action="store_true")
    parser.add_argument("--real-one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.real_one is not None:  # one scenario on the real driver, its result as JSON on stdout
        B.cuInit(0)
        one = run_all(B, int(ok(B.cuDeviceGetCount())), only=args.real_one)[args.real_one]
        print(json.dumps(_plain(one)))
        return 0

    # The simulator gets as many devices as the real machine has (two without one).
    devices = 2
    if not args.sim_only:
        B.cuInit(0)
        devices = int(ok(B.cuDeviceGetCount()))
    sim = SimulatedDriver(devices=devices)
    sim.cuInit(0)
    sim_results = {key: _plain(value) for key, value in run_all(sim, devices).items()}
    real_results: dict[str, Any] | None = None
    if not args.sim_only:
        real_results = run_real_isolated(devices)
    rows = []
    agree = 0
    skipped = 0
    for key in SCENARIOS:
        s = sim_results[key]
        r = real_results[key] if real_results is not None else s
        if isinstance(s, str) and s.startswith("skipped"):
            skipped += 1
            rows.append({"scenario": key, "sim": s, "real": r, "agree": None})
            continue
        same = s == r and not (isinstance(s, dict) and "error" in s)
        agree += same
        rows.append({"scenario": key, "sim": s, "real": r, "agree": same})
        if not same:
            print(f"DISAGREE {key}\n  sim:  {s}\n  real: {r}")
    mode = "simulator only" if args.sim_only else "simulator vs real driver"
    ran = len(SCENARIOS) - skipped
    print(
        f"differential ({mode}, {devices} device(s)): {ran} scenarios ran, {agree} agreed, "
        f"{ran - agree} disagreed, {skipped} skipped (need two devices)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0 if agree == ran else 1


if __name__ == "__main__":
    raise SystemExit(main())
