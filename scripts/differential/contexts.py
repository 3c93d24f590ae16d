"""Contexts: the current context of a thread, created and primary contexts, their flags and reset."""

from __future__ import annotations

import threading
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import ctx_create
from differential.common import (
    Obs,
    name,
    ok,
    scenario,
)


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
def context_destroyed_on_another_thread_stays_current_here(d: Any) -> Obs:
    # Why cuguard never restores a caller's context it destroyed (S2): a created context destroyed
    # on another thread is popped off that thread's stack only; here it stays current, and work in
    # it is refused. Nothing switches to it afterwards (that crashes the real driver).
    ctx = ok(ctx_create(d, 0, ok(d.cuDeviceGet(0))))
    destroyed: Obs = []
    worker = threading.Thread(target=lambda: destroyed.append(name(d.cuCtxDestroy(ctx)[0])))
    worker.start()
    worker.join()
    err, current = d.cuCtxGetCurrent()
    out: Obs = [*destroyed, name(err), int(current) == int(ctx)]
    alloc = d.cuMemAlloc(256)
    out.append(name(alloc[0]))
    if not int(alloc[0]):
        d.cuMemFree(alloc[1])
    out.append(name(d.cuCtxSetCurrent(B.CUcontext(0))[0]))
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
