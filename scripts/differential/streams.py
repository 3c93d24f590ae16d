"""Streams, events and host functions: creation flags and priorities, contexts, timing, host functions."""

from __future__ import annotations

import threading
from typing import Any

from cuda.bindings import driver as B

from differential.common import (
    HostFunction,
    Obs,
    R,
    Setup,
    name,
    ok,
    release_if,
    scenario,
)


@scenario
def stream_without_context(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    return [name(d.cuStreamCreate(0)[0])]


@scenario
def stream_destroy_from_elsewhere(d: Any) -> Obs:
    with Setup(d) as env:
        s1 = ok(d.cuStreamCreate(0))
        s2 = ok(d.cuStreamCreate(1))
        flags = int(ok(d.cuStreamGetFlags(s2)))
        same = int(ok(d.cuStreamGetCtx(s1))) == int(env.ctx)
        with Setup(d):
            other = name(d.cuStreamDestroy(s1)[0])
        d.cuCtxSetCurrent(B.CUcontext(0))
        none = name(d.cuStreamDestroy(s2)[0])
    return [flags, same, other, none]


@scenario
def event_record_cross_context(d: Any) -> Obs:
    with Setup(d) as env:
        ev = env.event()
        with Setup(d) as other:
            status = name(d.cuEventRecord(ev, other.stream())[0])
        d.cuCtxSetCurrent(env.ctx)
    return [status]


@scenario
def event_elapsed_cases(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        e1, e2 = env.event(), env.event()
        quiet = env.event(2)
        out = [name(d.cuEventElapsedTime(e1, e2)[0]), name(d.cuEventQuery(e1)[0])]
        d.cuEventRecord(e1, s)
        d.cuEventRecord(e2, s)
        d.cuEventRecord(quiet, s)
        d.cuEventSynchronize(e2)
        out += [name(d.cuEventElapsedTime(e1, e2)[0]), name(d.cuEventElapsedTime(e1, quiet)[0])]
    return out


@scenario
def stream_flags_and_priorities(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    out: Obs = [name(d.cuCtxGetStreamPriorityRange()[0])]  # no current context
    with Setup(d):
        out.append(list(ok(d.cuCtxGetStreamPriorityRange())))
        for flags in (2, 3, 0x80000000):
            out.append(release_if(d, d.cuStreamCreate(flags), "cuStreamDestroy"))
            out.append(release_if(d, d.cuStreamCreateWithPriority(flags, 0), "cuStreamDestroy"))
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
    out: Obs = [release_if(d, d.cuEventCreate(0), "cuEventDestroy")]  # no current context
    with Setup(d):
        for flags in (0, 1, 2, 3, 4, 5, 6, 7, 8, 0x10, 0x100, 0x80000000):
            out.append(release_if(d, d.cuEventCreate(flags), "cuEventDestroy"))
    return out


@scenario
def host_func_runs_on_another_thread(d: Any) -> Obs:
    seen: list[bool] = []
    me = threading.get_ident()
    fn = HostFunction(lambda _p: seen.append(threading.get_ident() != me))
    with Setup(d) as env:
        s = env.stream()
        status = name(d.cuLaunchHostFunc(s, fn.handle, 0)[0])
        d.cuStreamSynchronize(s)
    return [status, seen]


@scenario
def driver_calls_inside_a_host_function_are_refused(d: Any) -> Obs:
    # Why cuguard hands releases that become due in a host function to its own thread (O5).
    seen: list[str] = []

    def inside(_p: Any) -> None:
        seen.append(name(d.cuCtxGetCurrent()[0]))
        seen.append(name(d.cuStreamQuery(B.CUstream(0))[0]))
        seen.append(name(d.cuGetErrorName(R.CUDA_ERROR_INVALID_VALUE)[0]))

    fn = HostFunction(inside)
    with Setup(d) as env:
        s = env.stream()
        status = name(d.cuLaunchHostFunc(s, fn.handle, 0)[0])
        d.cuStreamSynchronize(s)
    return [status, seen]
