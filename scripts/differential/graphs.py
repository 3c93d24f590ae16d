"""Graphs and executable graphs: edges, memory nodes, child graphs, user objects, per-node updates."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import add_dependencies, remove_dependencies
from differential.common import (
    HostFunction,
    Obs,
    Setup,
    name,
    ok,
    scenario,
)
from differential.graphtools import (
    launch_and_wait,
    memset_node,
    read_device,
)


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
    with Setup(d):
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
    with Setup(d):
        g, (a, b) = _graph_with(d, 2)
        add_dependencies(d, g, [a], [b], 1)
        params = B.CUDA_MEM_ALLOC_NODE_PARAMS()
        params.poolProps.allocType = B.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        params.poolProps.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        params.poolProps.location.id = 0
        params.bytesize = 256
        err, _ = d.cuGraphAddMemAllocNode(g, [b], 1, params)
        out: Obs = [name(err)]
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
    with Setup(d):
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
    with Setup(d):
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
    with Setup(d) as env:
        g, nodes = _graph_with(d, 2)
        add_dependencies(d, g, [nodes[0]], [nodes[1]], 1)
        clone = ok(d.cuGraphClone(g))
        exe = ok(d.cuGraphInstantiate(g, 0))
        s = env.stream()
        out: Obs = [name(d.cuGraphDestroy(g)[0]), name(d.cuGraphLaunch(exe, s)[0]), name(d.cuStreamSynchronize(s)[0])]
        out.append(int(d.cuGraphGetNodes(clone, 0)[-1]))
        out.append(name(d.cuGraphExecDestroy(exe)[0]))
        d.cuGraphDestroy(clone)
    return out


@scenario
def graph_without_context(d: Any) -> Obs:
    d.cuCtxSetCurrent(B.CUcontext(0))
    err, g = d.cuGraphCreate(0)
    out = [name(err)]
    out.append(name(d.cuGraphDestroy(g)[0]))
    return out


@scenario
def user_object_destructor_timing(d: Any) -> Obs:
    calls: list[str] = []
    destructor = HostFunction(lambda _p: calls.append("destroyed"))
    with Setup(d):
        obj = ok(d.cuUserObjectCreate(0, destructor.handle, 1, 1))
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
    destructor = HostFunction(lambda _p: calls.append("destroyed"))

    def wait_then_look(_p: Any) -> None:
        gate.wait(10)
        seen.append(len(calls))

    blocker = HostFunction(wait_then_look)
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        obj = ok(d.cuUserObjectCreate(0, destructor.handle, 1, 1))
        g = ok(d.cuGraphCreate(0))
        if host_node:
            params = B.CUDA_HOST_NODE_PARAMS()
            params.fn = blocker.handle
            params.userData = 0
            ok(d.cuGraphAddHostNode(g, None, 0, params))
        else:
            ok(d.cuGraphAddEmptyNode(g, None, 0))
            out.append(name(d.cuLaunchHostFunc(s, blocker.handle, 0)[0]))
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
    return out


@scenario
def user_object_held_by_a_launch_in_flight(d: Any) -> Obs:
    return _user_object_in_flight(d, host_node=False)


@scenario
def user_object_held_while_its_host_node_runs(d: Any) -> Obs:
    return _user_object_in_flight(d, host_node=True)


@scenario
def exec_node_updates_and_enabling(d: Any) -> Obs:
    # Per-node updates of an executable graph and their refusals, then disabling a node and a
    # whole-graph update from a clone while it is disabled.
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        a, b = env.alloc(8), env.alloc(8)
        ok(d.cuMemsetD8(a, 0, 8))
        ok(d.cuMemsetD8(b, 0, 8))
        g = ok(d.cuGraphCreate(0))
        m = memset_node(d, g, [], a, 1, 8, env.ctx)
        e = ok(d.cuGraphAddEmptyNode(g, [m], 1))
        other = ok(d.cuGraphCreate(0))
        foreign = memset_node(d, other, [], b, 1, 8, env.ctx)
        exe = ok(d.cuGraphInstantiate(g, 0))
        p = B.CUDA_MEMSET_NODE_PARAMS()
        p.dst, p.value, p.elementSize, p.width, p.height, p.pitch = b, 5, 1, 8, 1, 0
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, m, p, env.ctx)[0]))
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, foreign, p, env.ctx)[0]))
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, e, p, env.ctx)[0]))
        p2 = B.CUDA_MEMSET_NODE_PARAMS()
        p2.dst, p2.value, p2.elementSize, p2.width, p2.height, p2.pitch = b, 6, 1, 4, 2, 4
        out.append(name(d.cuGraphExecMemsetNodeSetParams(exe, m, p2, env.ctx)[0]))  # two-dimensional
        out += [
            name(d.cuGraphLaunch(exe, s)[0]),
            name(d.cuStreamSynchronize(s)[0]),
            read_device(d, a, 8),
            read_device(d, b, 8),
        ]
        out.append(name(d.cuGraphNodeSetEnabled(exe, e, 0)[0]))  # an empty node
        out.append(name(d.cuGraphNodeSetEnabled(exe, m, 0)[0]))
        err, enabled = d.cuGraphNodeGetEnabled(exe, m)
        out.append([name(err), int(enabled or 0)])
        ok(d.cuMemsetD8(b, 0, 8))
        d.cuGraphLaunch(exe, s)
        d.cuStreamSynchronize(s)
        out.append(read_device(d, b, 8))
        copy = ok(d.cuGraphClone(g))
        err = d.cuGraphExecUpdate(exe, copy)[0]
        out.append(name(err))
        err, enabled = d.cuGraphNodeGetEnabled(exe, m)
        out.append(["after update", name(err), int(enabled or 0)])
        ok(d.cuMemsetD8(a, 0, 8))
        ok(d.cuMemsetD8(b, 0, 8))
        d.cuGraphLaunch(exe, s)
        d.cuStreamSynchronize(s)
        out += [read_device(d, a, 8), read_device(d, b, 8)]
        d.cuGraphExecDestroy(exe)
        for graph in (copy, g, other):
            d.cuGraphDestroy(graph)
    return out


@scenario
def exec_copy_and_child_updates(d: Any) -> Obs:
    # A memcpy update that changes a memory type, and child-graph updates of another topology
    # and of the same one.
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        a, b = env.alloc(8), env.alloc(8)
        ok(d.cuMemsetD8(a, 3, 8))
        ok(d.cuMemsetD8(b, 0, 8))
        g = ok(d.cuGraphCreate(0))
        cp = B.CUDA_MEMCPY3D()
        cp.srcMemoryType = cp.dstMemoryType = B.CUmemorytype.CU_MEMORYTYPE_DEVICE
        cp.srcDevice, cp.dstDevice = a, b
        cp.WidthInBytes, cp.Height, cp.Depth = 8, 1, 1
        copy_node = ok(d.cuGraphAddMemcpyNode(g, None, 0, cp, env.ctx))
        child = ok(d.cuGraphCreate(0))
        memset_node(d, child, [], a, 1, 8, env.ctx)
        child_node = ok(d.cuGraphAddChildGraphNode(g, [copy_node], 1, child))
        exe = ok(d.cuGraphInstantiate(g, 0))
        host = (ctypes.c_char * 8)()
        to_host = B.CUDA_MEMCPY3D()
        to_host.srcMemoryType = B.CUmemorytype.CU_MEMORYTYPE_DEVICE
        to_host.dstMemoryType = B.CUmemorytype.CU_MEMORYTYPE_HOST
        to_host.srcDevice = a
        to_host.dstHost = ctypes.addressof(host)
        to_host.WidthInBytes, to_host.Height, to_host.Depth = 8, 1, 1
        out.append(name(d.cuGraphExecMemcpyNodeSetParams(exe, copy_node, to_host, env.ctx)[0]))
        bigger = ok(d.cuGraphCreate(0))
        first = memset_node(d, bigger, [], a, 2, 8, env.ctx)
        memset_node(d, bigger, [first], a, 2, 8, env.ctx)
        out.append(name(d.cuGraphExecChildGraphNodeSetParams(exe, child_node, bigger)[0]))
        same = ok(d.cuGraphCreate(0))
        memset_node(d, same, [], a, 9, 8, env.ctx)
        out.append(name(d.cuGraphExecChildGraphNodeSetParams(exe, child_node, same)[0]))
        out += launch_and_wait(d, exe, s)
        out += [read_device(d, a, 8), read_device(d, b, 8)]
        d.cuGraphExecDestroy(exe)
        for graph in (g, child, bigger, same):
            d.cuGraphDestroy(graph)
    return out
