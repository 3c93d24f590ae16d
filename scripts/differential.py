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
import ctypes
import json
import sys
import threading
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
        self.ctx = ok(self.d.cuCtxCreate(None, 0, ok(self.d.cuDeviceGet(0))))
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
    ctx = ok(d.cuCtxCreate(None, 0, ok(d.cuDeviceGet(0))))
    current = int(ok(d.cuCtxGetCurrent())) == int(ctx)
    first = name(d.cuCtxDestroy(ctx)[0])
    return [current, first, int(ok(d.cuCtxGetCurrent()))]


@scenario
def destroying_current_context_pops_it(d: Any) -> Obs:
    dev = ok(d.cuDeviceGet(0))
    a = ok(d.cuCtxCreate(None, 0, dev))
    b = ok(d.cuCtxCreate(None, 0, dev))
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
        name(d.cuGraphAddDependencies(g, [a], [b], None, 1)[0]),
        name(d.cuGraphAddDependencies(g, [a], [b], None, 1)[0]),
        name(d.cuGraphRemoveDependencies(g, [b], [c], None, 1)[0]),
        name(d.cuGraphAddDependencies(g, [a], [x], None, 1)[0]),
        name(d.cuGraphAddDependencies(g, [a], [a], None, 1)[0]),
        name(d.cuGraphAddDependencies(g, [b], [a], None, 1)[0]),
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
    d.cuGraphAddDependencies(g, [a], [c], None, 1)
    before = _edges(d, g)
    added = name(d.cuGraphAddDependencies(g, [a, a, b], [b, c, e], None, 3)[0])
    after_add = _edges(d, g)
    removed = name(d.cuGraphRemoveDependencies(g, [a, b], [b, c], None, 2)[0])
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
        d.cuGraphAddDependencies(g, [a], [b], None, 1)
        params = B.CUDA_MEM_ALLOC_NODE_PARAMS()
        params.poolProps.allocType = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        params.poolProps.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        params.poolProps.location.id = 0
        params.bytesize = 256
        err, _ = d.cuGraphAddMemAllocNode(g, [b], 1, params)
        out = [name(err)]
        out.append(name(d.cuGraphRemoveDependencies(g, [a], [b], None, 1)[0]))
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
                d.cuGraphAddDependencies(child, [nodes[0]], [nodes[1]], None, 1)
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
        d.cuGraphAddDependencies(g, [nodes[0]], [nodes[1]], None, 1)
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
        self.ctx = ok(self.d.cuCtxCreate(None, 0, ok(self.d.cuDeviceGet(1))))
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


def run_all(driver: Any, devices: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for key, fn in SCENARIOS.items():
        if key in TWO_DEVICE and devices < 2:
            results[key] = "skipped: needs two devices"
            continue
        try:
            results[key] = fn(driver)
        except Exception as exc:  # noqa: BLE001 - reported as a broken scenario
            results[key] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default=None)
    parser.add_argument("--sim-only", action="store_true")
    args = parser.parse_args()

    # The simulator gets as many devices as the real machine has (two without one).
    devices = 2
    if not args.sim_only:
        B.cuInit(0)
        devices = int(ok(B.cuDeviceGetCount()))
    sim = SimulatedDriver(devices=devices)
    sim.cuInit(0)
    sim_results = run_all(sim, devices)
    real_results: dict[str, Any] | None = None
    if not args.sim_only:
        real_results = run_all(B, devices)
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
