"""Interprocess sharing: shareable pools, exported pool memory and IPC events.

The edge cases the IPC objects depend on, and those the simulator assumes (tests/test_sim_pools.py
in packages/testing names them).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import ctx_create
from differential.common import (
    HostFunction,
    Obs,
    Setup,
    must,
    name,
    ok,
    scenario,
)
from differential.pools import POOL_FD, pool_props


@scenario
def pool_export_refusals(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
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
    return out


@scenario
def pool_ipc_same_process(d: Any) -> Obs:
    """A shareable pool imported by the process that exported it (the simulator allows it)."""
    with Setup(d) as env:
        s = env.stream()
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
    return out


@scenario
def ipc_event_refusals(d: Any) -> Obs:
    with Setup(d) as env:
        plain = env.event(2)
        out: Obs = [name(d.cuIpcGetEventHandle(plain)[0]), name(d.cuEventCreate(4)[0])]
        shared = env.event(2 | 4)
        err, handle = d.cuIpcGetEventHandle(shared)
        out.append(name(err))
        if not err:
            err2, opened = d.cuIpcOpenEventHandle(handle)
            out.append(name(err2))  # opened in the process that exported it
            if not err2:
                d.cuEventDestroy(opened)
    return out


@scenario
def ipc_event_handle_context(d: Any) -> Obs:
    """cuIpcGetEventHandle with the event's own context current, after another context was made.

    With no context current, and with another context current, it is not asked: the H200's
    process died of SIGSEGV in both (the simulator raises SimulatedCrash, test_sim_pools checks
    it; cuguard always asks in the event's context).
    """
    out: Obs = []
    with Setup(d, primary=True) as env:
        ev = ok(d.cuEventCreate(2 | 4))
        must(d.cuCtxSetCurrent(B.CUcontext(0)))
        other = ok(ctx_create(d, 0, env.dev))  # current now; the event's context is made current before asking
        must(d.cuCtxSetCurrent(env.ctx))
        out.append(name(d.cuIpcGetEventHandle(ev)[0]))
        out.append(name(d.cuEventDestroy(ev)[0]))
        d.cuCtxSetCurrent(B.CUcontext(0))
        d.cuCtxDestroy(other)
    return out


@scenario
def pool_ipc_without_context(d: Any) -> Obs:
    """The pool IPC calls with no context current: export of the pool and of a pointer, the imports."""
    with Setup(d, primary=True) as env:
        s = env.stream()
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
                    must(d.cuCtxSetCurrent(env.ctx))
                    out.append(name(d.cuMemFree(q)[0]))
        must(d.cuCtxSetCurrent(env.ctx))
        if imported is not None and int(imported):
            out.append(name(d.cuMemPoolDestroy(imported)[0]))
        d.cuMemFreeAsync(p, s)
        d.cuStreamSynchronize(s)
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
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
    blocker = HostFunction(lambda _p: gate.wait(10) and None)
    out: Obs = []
    with Setup(d, primary=True) as env:
        s = env.stream()
        pool = ok(d.cuMemPoolCreate(pool_props(shareable=True)))

        def export(p: Any, current: bool) -> str:
            must(d.cuCtxSetCurrent(env.ctx if current else B.CUcontext(0)))
            status = name(d.cuMemPoolExportPointer(p)[0])
            must(d.cuCtxSetCurrent(env.ctx))
            return status

        for size in (128, 2 << 20):
            for current in (True, False):
                p = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
                out.append(export(p, current))
                must(d.cuStreamSynchronize(s))
                out.append(export(p, current))
                gate.clear()
                must(d.cuLaunchHostFunc(s, blocker.handle, 0))
                q = ok(d.cuMemAllocFromPoolAsync(size, pool, s))
                out.append(export(q, current))
                gate.set()
                must(d.cuStreamSynchronize(s))
                out.append(export(q, current))
                for r in (p, q):
                    d.cuMemFreeAsync(r, s)
                must(d.cuStreamSynchronize(s))
        out.append(name(d.cuMemPoolDestroy(pool)[0]))
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
    blocker = HostFunction(lambda _p: gate.wait(10) and None)
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        pool = ok(d.cuMemPoolCreate(pool_props(shareable=True)))
        err, fd = d.cuMemPoolExportToShareableHandle(pool, POOL_FD, 0)
        out.append(name(err))
        if not err:
            os.close(int(fd))
        for size in (128, 2 << 20):
            gate.clear()
            must(d.cuLaunchHostFunc(s, blocker.handle, 0))
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
    return out
