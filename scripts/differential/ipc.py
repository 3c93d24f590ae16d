"""Interprocess sharing of pools, pool memory and events."""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing._bindings import ctx_create
from differential.common import (
    HOSTFN,
    Ctx,
    Obs,
    must,
    name,
    ok,
    scenario,
)
from differential.pools import POOL_FD, pool_props


@scenario
def pool_export_refusals(d: Any) -> Obs:
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        plain = ok(d.cuMemPoolCreate(pool_props()))
        out: Obs = [name(d.cuMemPoolExportToShareableHandle(plain, POOL_FD, 0)[0])]
        p = ok(d.cuMemAllocFromPoolAsync(64, plain, s))
        out.append(name(d.cuMemPoolExportPointer(p)[0]))
        q = ok(d.cuMemAlloc(64))
        out.append(name(d.cuMemPoolExportPointer(q)[0]))
        d.cuMemFree(q)
        d.cuMemFreeAsync(p, s)
        d.cuStreamSynchronize(s)
        d.cuMemPoolDestroy(plain)
        shared = ok(d.cuMemPoolCreate(pool_props(shareable=True)))
        err, fd = d.cuMemPoolExportToShareableHandle(shared, POOL_FD, 0)
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
        shared = ok(d.cuMemPoolCreate(pool_props(shareable=True)))
        p = ok(d.cuMemAllocFromPoolAsync(64, shared, s))
        d.cuMemsetD8Async(p, 0x5C, 64, s)
        d.cuStreamSynchronize(s)
        fd = int(ok(d.cuMemPoolExportToShareableHandle(shared, POOL_FD, 0)))
        data = ok(d.cuMemPoolExportPointer(p))
        err, imported = d.cuMemPoolImportFromShareableHandle(fd, POOL_FD, 0)
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
def ipc_event_handle_context(d: Any) -> Obs:
    """cuIpcGetEventHandle with the event's own context current, after another context was made.

    With no context current, and with another context current, it is not asked: the H200's
    process died of SIGSEGV in both (the simulator raises SimulatedCrash, test_sim_pools checks
    it; cuguard always asks in the event's context).
    """
    dev = ok(d.cuDeviceGet(0))
    primary = ok(d.cuDevicePrimaryCtxRetain(dev))
    must(d.cuCtxSetCurrent(primary))
    ev = ok(d.cuEventCreate(2 | 4))
    must(d.cuCtxSetCurrent(B.CUcontext(0)))
    out: Obs = []
    other = ok(ctx_create(d, 0, dev))  # current now; the event's context is made current before asking
    must(d.cuCtxSetCurrent(primary))
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
    must(d.cuCtxSetCurrent(primary))
    s = ok(d.cuStreamCreate(0))
    pool = ok(d.cuMemPoolCreate(pool_props(shareable=True)))
    p = ok(d.cuMemAllocFromPoolAsync(4096, pool, s))
    must(d.cuStreamSynchronize(s))
    must(d.cuCtxSetCurrent(B.CUcontext(0)))
    err, fd = d.cuMemPoolExportToShareableHandle(pool, POOL_FD, 0)
    out: Obs = [name(err)]
    err, data = d.cuMemPoolExportPointer(p)
    out.append(name(err))
    imported = None
    if out[0] == "CUDA_SUCCESS":
        err, imported = d.cuMemPoolImportFromShareableHandle(int(fd), POOL_FD, 0)
        out.append(name(err))
        os.close(int(fd))
        if not err and data is not None:
            err, q = d.cuMemPoolImportPointer(imported, data)
            out.append(name(err))
            if not err:
                must(d.cuCtxSetCurrent(primary))
                out.append(name(d.cuMemFree(q)[0]))
    must(d.cuCtxSetCurrent(primary))
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
    blocker = HOSTFN(lambda _p: gate.wait(10) and None)
    blocker_fn = B.CUhostFn(ctypes.cast(blocker, ctypes.c_void_p).value)
    dev = ok(d.cuDeviceGet(0))
    primary = ok(d.cuDevicePrimaryCtxRetain(dev))
    must(d.cuCtxSetCurrent(primary))
    s = ok(d.cuStreamCreate(0))
    pool = ok(d.cuMemPoolCreate(pool_props(shareable=True)))
    out: Obs = []

    def export(p: Any, current: bool) -> str:
        must(d.cuCtxSetCurrent(primary if current else B.CUcontext(0)))
        status = name(d.cuMemPoolExportPointer(p)[0])
        must(d.cuCtxSetCurrent(primary))
        return status

    for size in (128, 2 << 20):
        for current in (True, False):
            p = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
            out.append(export(p, current))
            must(d.cuStreamSynchronize(s))
            out.append(export(p, current))
            gate.clear()
            must(d.cuLaunchHostFunc(s, blocker_fn, 0))
            q = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
            out.append(export(q, current))
            gate.set()
            must(d.cuStreamSynchronize(s))
            out.append(export(q, current))
            for r in (p, q):
                d.cuMemFreeAsync(r, s)
            must(d.cuStreamSynchronize(s))
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
    blocker = HOSTFN(lambda _p: gate.wait(10) and None)
    blocker_fn = B.CUhostFn(ctypes.cast(blocker, ctypes.c_void_p).value)
    out: Obs = []
    with Ctx(d):
        s = ok(d.cuStreamCreate(0))
        pool = ok(d.cuMemPoolCreate(pool_props(shareable=True)))
        err, fd = d.cuMemPoolExportToShareableHandle(pool, POOL_FD, 0)
        out.append(name(err))
        if not err:
            os.close(int(fd))
        for size in (128, 2 << 20):
            gate.clear()
            must(d.cuLaunchHostFunc(s, blocker_fn, 0))
            p = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
            out.append(name(d.cuMemPoolExportPointer(p)[0]))
            gate.set()
            must(d.cuStreamSynchronize(s))
            out.append(name(d.cuMemPoolExportPointer(p)[0]))
            q = ok(d.cuMemAllocFromPoolAsync(size, pool, B.CUstream(0)))
            out.append(name(d.cuMemPoolExportPointer(q)[0]))
            for r in (p, q):
                d.cuMemFreeAsync(r, s)
            must(d.cuStreamSynchronize(s))
            must(d.cuCtxSynchronize())
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
        d.cuStreamDestroy(s)
    return out
