"""Graphs, executable graphs and user objects of the simulated driver."""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._bindings import EDGE_DATA
from cuguard.testing._sim.base import DEVICE_BASE, OK, SUCCESS, Status, api, h
from cuguard.testing._sim.core import SimCore
from cuguard.testing._sim.state import Alloc, Ctx, Event, Function, Stream

__all__ = ["SimGraphs"]

R = cb.CUresult
T = cb.CUgraphNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE


@dataclass(eq=False, slots=True)
class Node:
    handle: int
    graph: Graph
    type: Any
    spec: Any
    deps: list[Node] = field(default_factory=list)
    outs: list[Node] = field(default_factory=list)
    destroyed: bool = False


@dataclass(eq=False, slots=True)
class Graph:
    handle: int
    call: str
    nodes: dict[int, Node] = field(default_factory=dict)
    edges: dict[tuple[int, int], None] = field(default_factory=dict)
    user_refs: dict[int, int] = field(default_factory=dict)
    destroyed: bool = False
    child: bool = False
    # cuGraphClone: original node handle -> node of this clone (cuGraphNodeFindInClone).
    origin: dict[int, int] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class KernelSpec:
    fn: Function
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    args: tuple[Any, ...]
    params: Any
    # A captured cuLaunchKernelEx's cluster dimensions and cooperative flag (its node's launch attributes).
    cluster: tuple[int, int, int] | None = None
    cooperative: bool = False


@dataclass(eq=False, slots=True)
class MemsetSpec:
    dst: int
    value: int
    element: int
    width: int
    height: int
    pitch: int


@dataclass(eq=False, slots=True)
class CopySpec:
    src_type: int
    src: int
    src_x: int
    src_y: int
    src_z: int
    src_pitch: int
    src_height: int
    dst_type: int
    dst: int
    dst_x: int
    dst_y: int
    dst_z: int
    dst_pitch: int
    dst_height: int
    width: int
    height: int
    depth: int


@dataclass(eq=False, slots=True)
class Exec:
    handle: int
    ctx: Ctx | None
    steps: list[tuple[Any, Any]]
    signature: tuple[Any, ...]
    user_refs: dict[int, int]
    refs: frozenset[int]
    allocs: list[Alloc]
    destroyed: bool = False
    # (stream, last op seq) of each launch not yet known to have completed.
    launches: list[tuple[Stream, int]] = field(default_factory=list)
    # The graph it was instantiated from, and where each of that graph's nodes is in ``steps``
    # (first, end): the per-node updates and cuGraphNodeSetEnabled find their steps with it.
    origin: int = 0
    where: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Positions in ``steps`` of disabled nodes (cuGraphNodeSetEnabled): they run as empty nodes.
    disabled: set[int] = field(default_factory=set)


@dataclass(eq=False, slots=True)
class UserObject:
    handle: int
    fn: int
    ptr: int | None
    refs: int
    destroyed: bool = False


_HOST = int(cb.CUmemorytype.CU_MEMORYTYPE_HOST)
_DEVICE = int(cb.CUmemorytype.CU_MEMORYTYPE_DEVICE)
_UNIFIED = int(cb.CUmemorytype.CU_MEMORYTYPE_UNIFIED)


def _listing(items: list[Any], requested: int, make: Any) -> tuple[list[Any], int]:
    """cuda-bindings' query convention: 0 asks for the count; otherwise ``requested`` entries, NULL-padded."""
    n = int(requested)
    if n == 0:
        return [], len(items)
    out = [make(x) for x in items[:n]]
    out.extend(make(0) for _ in range(n - len(out)))
    return out, min(n, len(items))


def _edge_data(nodes: list[Any]) -> list[Any]:
    """The ``edgeData`` list 13.x returns beside a node listing: default edges, one per entry."""
    return [cb.CUgraphEdgeData() for _ in nodes]


class SimGraphs(SimCore):
    """Adds graphs, executable graphs and user objects to :class:`SimCore`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._graphs: dict[int, Graph] = {}
        self._nodes: dict[int, Node] = {}
        self._execs: dict[int, Exec] = {}
        self._live_execs: dict[int, Exec] = {}
        self._user_objects: dict[int, UserObject] = {}
        # User-object references of destroyed or updated executable graphs whose launches are
        # still in flight: released when a sync point retires those launches.
        self._held: list[tuple[dict[int, int], list[tuple[Stream, int]]]] = []

    # --- lookups ---------------------------------------------------------------------------

    def _graph(self, value: Any, call: str) -> Graph:
        handle = h(value)
        graph = self._graphs.get(handle)
        if graph is None:
            raise Status(INVALID_VALUE)
        if graph.destroyed:
            self._note(self.use_after_release, call, f"graph {handle:#x} used after cuGraphDestroy", handle)
            raise Status(INVALID_VALUE)
        return graph

    def _node(self, value: Any, call: str) -> Node:
        handle = h(value)
        node = self._nodes.get(handle)
        if node is None:
            raise Status(INVALID_VALUE)
        if node.destroyed or node.graph.destroyed:
            raise self._crash(call, f"graph node {handle:#x} used after it was destroyed", handle)
        return node

    def _exec(self, value: Any, call: str) -> Exec:
        handle = h(value)
        ex = self._execs.get(handle)
        if ex is None:
            raise Status(INVALID_VALUE)
        if ex.destroyed:
            self._note(
                self.use_after_release, call, f"executable graph {handle:#x} used after cuGraphExecDestroy", handle
            )
            raise Status(INVALID_VALUE)
        return ex

    def _user_object(self, value: Any, call: str) -> UserObject:
        handle = h(value)
        obj = self._user_objects.get(handle)
        if obj is None:
            raise Status(INVALID_VALUE)
        if obj.destroyed:
            self._note(self.use_after_release, call, f"user object {handle:#x} used after its last release", handle)
            raise Status(INVALID_VALUE)
        return obj

    def _deps(self, graph: Graph, dependencies: Any, count: int) -> list[Node]:
        count = int(count)
        items = list(dependencies or [])
        if count > len(items):
            raise RuntimeError(f"List is too small: {len(items)} < {count}")
        deps: list[Node] = []
        for item in items[:count]:
            node = self._node(item, "cuGraphAddNode")
            if node.graph is not graph or node in deps:
                raise Status(INVALID_VALUE)
            deps.append(node)
        return deps

    def _add_node(self, graph: Graph, deps: list[Node], kind: Any, spec: Any) -> tuple[Any, ...]:
        node = Node(self._handle(), graph, kind, spec)
        graph.nodes[node.handle] = node
        self._nodes[node.handle] = node
        for dep in deps:
            self._link(dep, node)
        return (SUCCESS, cb.CUgraphNode(node.handle))

    def _link(self, a: Node, b: Node) -> None:
        a.outs.append(b)
        b.deps.append(a)
        a.graph.edges[(a.handle, b.handle)] = None

    def _unlink(self, a: Node, b: Node) -> None:
        a.outs.remove(b)
        b.deps.remove(a)
        del a.graph.edges[(a.handle, b.handle)]

    # --- user objects -----------------------------------------------------------------------

    def _uo_changed(self, obj: UserObject, delta: int) -> None:
        obj.refs += delta
        if obj.refs > 0:
            self._add_live("user_object", obj.handle, None, "cuUserObjectCreate", obj.refs)
            return
        obj.destroyed = True
        self._drop_live(obj.handle)
        fn, ptr = obj.fn, obj.ptr
        self._defer_callback(lambda: self._call_host_fn(fn, ptr))

    def _release_refs(self, refs: dict[int, int]) -> None:
        for handle, count in refs.items():
            obj = self._user_objects.get(handle)
            if obj is not None and not obj.destroyed and count:
                self._uo_changed(obj, -count)
        refs.clear()

    def _retain_refs(self, refs: dict[int, int]) -> dict[int, int]:
        for handle, count in refs.items():
            obj = self._user_objects.get(handle)
            if obj is not None and not obj.destroyed and count:
                self._uo_changed(obj, count)
        return dict(refs)

    def _all_refs(self, graph: Graph) -> dict[int, int]:
        """The user-object references of ``graph`` and of its child graphs, recursively (not retained)."""
        refs = dict(graph.user_refs)
        for node in graph.nodes.values():
            if node.type == T.CU_GRAPH_NODE_TYPE_GRAPH:
                for handle, count in self._all_refs(node.spec).items():
                    refs[handle] = refs.get(handle, 0) + count
        return refs

    @staticmethod
    def _in_flight(launches: list[tuple[Stream, int]]) -> list[tuple[Stream, int]]:
        """The launches of ``launches`` whose work a sync point has not retired yet."""
        return [(st, seq) for st, seq in launches if any(op.seq <= seq for op in st.inflight)]

    def _release_after(self, refs: dict[int, int], launches: list[tuple[Stream, int]]) -> None:
        """Release ``refs`` now, or once the launches in ``launches`` have completed (as the real driver does)."""
        pending = self._in_flight(launches)
        if pending:
            self._held.append((dict(refs), pending))
            refs.clear()
        else:
            self._release_refs(refs)

    def _retire(self, st: Stream, upto: int | None = None, depth: int = 0) -> None:
        super()._retire(st, upto, depth)
        if self._held and depth == 0:
            keep: list[tuple[dict[int, int], list[tuple[Stream, int]]]] = []
            for refs, launches in self._held:
                pending = self._in_flight(launches)
                if pending:
                    keep.append((refs, pending))
                else:
                    self._release_refs(refs)
            self._held = keep

    # Sync points may now run user-object destructors (of executable graphs destroyed while a
    # launch was in flight): the same functions, with the destructors run when the call returns.
    cuStreamSynchronize = api(0, locked=False, callbacks=True)(SimCore.cuStreamSynchronize.__wrapped__)  # type: ignore[attr-defined]
    cuStreamQuery = api(0, callbacks=True)(SimCore.cuStreamQuery.__wrapped__)  # type: ignore[attr-defined]
    cuCtxSynchronize = api(0, locked=False, callbacks=True)(SimCore.cuCtxSynchronize.__wrapped__)  # type: ignore[attr-defined]
    cuEventSynchronize = api(0, locked=False, callbacks=True)(SimCore.cuEventSynchronize.__wrapped__)  # type: ignore[attr-defined]
    cuEventQuery = api(0, callbacks=True)(SimCore.cuEventQuery.__wrapped__)  # type: ignore[attr-defined]
    cuCtxDestroy = api(0, locked=False, callbacks=True)(SimCore.cuCtxDestroy.__wrapped__)  # type: ignore[attr-defined]
    cuDevicePrimaryCtxRelease = api(0, locked=False, callbacks=True)(
        SimCore.cuDevicePrimaryCtxRelease.__wrapped__  # type: ignore[attr-defined]
    )

    @api(1)
    def cuUserObjectCreate(self, ptr: Any, destroy: Any, initialRefcount: int, flags: int) -> tuple[Any, ...]:
        fn = h(destroy)
        if (
            fn == 0
            or int(initialRefcount) <= 0
            or int(flags) != int(cb.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        ):
            raise Status(INVALID_VALUE)
        obj = UserObject(self._handle(), fn, self._user_data(ptr), 0)
        self._user_objects[obj.handle] = obj
        self._uo_changed(obj, int(initialRefcount))
        return (SUCCESS, cb.CUuserObject(obj.handle))

    @api(0)
    def cuUserObjectRetain(self, object: Any, count: int) -> tuple[Any, ...]:
        obj = self._user_object(object, "cuUserObjectRetain")
        if int(count) <= 0:
            raise Status(INVALID_VALUE)
        self._uo_changed(obj, int(count))
        return OK

    @api(0, callbacks=True)
    def cuUserObjectRelease(self, object: Any, count: int) -> tuple[Any, ...]:
        handle = h(object)
        existing = self._user_objects.get(handle)
        if existing is not None and existing.destroyed:
            self._note(
                self.double_release, "cuUserObjectRelease", f"user object {handle:#x} released too often", handle
            )
            raise Status(INVALID_VALUE)
        obj = self._user_object(object, "cuUserObjectRelease")
        count = int(count)
        if count <= 0:
            raise Status(INVALID_VALUE)
        if count > obj.refs:
            self._note(
                self.double_release, "cuUserObjectRelease", f"user object {handle:#x} released too often", handle
            )
            raise Status(INVALID_VALUE)
        self._uo_changed(obj, -count)
        return OK

    @api(0)
    def cuGraphRetainUserObject(self, graph: Any, object: Any, count: int, flags: int) -> tuple[Any, ...]:
        g = self._graph(graph, "cuGraphRetainUserObject")
        obj = self._user_object(object, "cuGraphRetainUserObject")
        count = int(count)
        move = int(flags) == int(cb.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE)
        if count <= 0 or int(flags) not in (0, 1):
            raise Status(INVALID_VALUE)
        if not move:
            self._uo_changed(obj, count)
        g.user_refs[obj.handle] = g.user_refs.get(obj.handle, 0) + count
        return OK

    @api(0, callbacks=True)
    def cuGraphReleaseUserObject(self, graph: Any, object: Any, count: int) -> tuple[Any, ...]:
        g = self._graph(graph, "cuGraphReleaseUserObject")
        obj = self._user_object(object, "cuGraphReleaseUserObject")
        count = int(count)
        held = g.user_refs.get(obj.handle, 0)
        if count <= 0 or count > held:
            raise Status(INVALID_VALUE)
        g.user_refs[obj.handle] = held - count
        self._uo_changed(obj, -count)
        return OK

    # --- graphs -------------------------------------------------------------------------------

    def _new_graph(self, call: str, child: bool = False) -> Graph:
        graph = Graph(self._handle(), call, child=child)
        self._graphs[graph.handle] = graph
        if not child:
            self._add_live("graph", graph.handle, None, call)
        return graph

    @api(1)
    def cuGraphCreate(self, flags: int) -> tuple[Any, ...]:
        if int(flags) != 0:
            raise Status(INVALID_VALUE)
        return (SUCCESS, cb.CUgraph(self._new_graph("cuGraphCreate").handle))

    def _destroy_graph(self, graph: Graph) -> None:
        graph.destroyed = True
        for node in graph.nodes.values():
            self._destroy_owned(node)
        self._release_refs(graph.user_refs)
        self._drop_live(graph.handle)

    @api(0, callbacks=True)
    def cuGraphDestroy(self, hGraph: Any) -> tuple[Any, ...]:
        handle = h(hGraph)
        graph = self._graphs.get(handle)
        if graph is None:
            raise Status(INVALID_VALUE)
        if graph.destroyed:
            self._note(self.double_release, "cuGraphDestroy", f"graph {handle:#x} destroyed twice", handle)
            raise Status(INVALID_VALUE)
        if graph.child:
            raise Status(INVALID_VALUE)
        self._destroy_graph(graph)
        return OK

    def _clone_into(self, source: Graph, target: Graph) -> None:
        """Copy the nodes and edges of ``source`` into ``target``; child graphs get their own references."""
        mapping: dict[int, Node] = {}
        for node in source.nodes.values():
            spec = self._copied_spec(node)
            copy = Node(self._handle(), target, node.type, spec)
            target.nodes[copy.handle] = copy
            self._nodes[copy.handle] = copy
            mapping[node.handle] = copy
        for a, b in source.edges:
            self._link(mapping[a], mapping[b])
        target.origin = {original: copy.handle for original, copy in mapping.items()}

    def _copied_spec(self, node: Node) -> Any:
        """The spec of a copy of ``node`` (clone, embed): a child graph is copied with its references."""
        if node.type == T.CU_GRAPH_NODE_TYPE_GRAPH:
            return self._child_copy(node.spec)
        return node.spec

    def _child_copy(self, source: Graph) -> Graph:
        """A child graph copying ``source``, holding its own clones of ``source``'s user-object references."""
        child = self._new_graph("cuGraphAddChildGraphNode", child=True)
        self._clone_into(source, child)
        child.user_refs = self._retain_refs(source.user_refs)
        return child

    @api(1)
    def cuGraphClone(self, originalGraph: Any) -> tuple[Any, ...]:
        source = self._graph(originalGraph, "cuGraphClone")
        if self._has_memory_nodes(source) or self._has_conditional_nodes(source):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)  # CUDA's rule; conditional nodes seen refused on an H200
        clone = self._new_graph("cuGraphClone")
        self._clone_into(source, clone)
        clone.user_refs = self._retain_refs(source.user_refs)
        return (SUCCESS, cb.CUgraph(clone.handle))

    @api(1)
    def cuGraphNodeFindInClone(self, hOriginalNode: Any, hClonedGraph: Any) -> tuple[Any, ...]:
        """The node of a clone copying ``hOriginalNode`` (a node of the source at the time of cuGraphClone)."""
        clone = self._graph(hClonedGraph, "cuGraphNodeFindInClone")
        copy = self._nodes.get(clone.origin.get(h(hOriginalNode), 0))
        if copy is None or copy.destroyed or copy.graph is not clone:
            raise Status(INVALID_VALUE)
        return (SUCCESS, cb.CUgraphNode(copy.handle))

    @api(1)
    def cuGraphAddEmptyNode(self, hGraph: Any, dependencies: Any, numDependencies: int) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddEmptyNode")
        return self._add_node(graph, self._deps(graph, dependencies, numDependencies), T.CU_GRAPH_NODE_TYPE_EMPTY, None)

    def _kernel_spec(self, params: Any, call: str) -> KernelSpec:
        if params is None:
            raise Status(INVALID_VALUE)
        func = h(params.func) or h(params.kern)
        fn = self._function(func, call)
        grid = (int(params.gridDimX), int(params.gridDimY), int(params.gridDimZ))
        block = (int(params.blockDimX), int(params.blockDimY), int(params.blockDimZ))
        if min(grid) <= 0 or min(block) <= 0 or block[0] * block[1] * block[2] > 1024:
            raise Status(INVALID_VALUE)
        args = self.decode_params(fn, params.kernelParams)
        return KernelSpec(fn, grid, block, int(params.sharedMemBytes), args, params)

    @api(1)
    def cuGraphAddKernelNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, nodeParams: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddKernelNode")
        if self._current() is None:
            # Seen on an H200: the real driver segfaults adding a kernel node while no
            # context is current (also with the params' ctx field set).
            raise self._crash("cuGraphAddKernelNode", "kernel node added while no context is current")
        deps = self._deps(graph, dependencies, numDependencies)
        spec = self._kernel_spec(nodeParams, "cuGraphAddKernelNode")
        self._arg_refs(spec.args, "cuGraphAddKernelNode", spec.fn.name)
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_KERNEL, spec)

    @api(1)
    def cuGraphKernelNodeGetParams(self, hNode: Any) -> tuple[Any, ...]:
        node = self._node(hNode, "cuGraphKernelNodeGetParams")
        if node.type != T.CU_GRAPH_NODE_TYPE_KERNEL:
            raise Status(INVALID_VALUE)
        return (SUCCESS, node.spec.params)

    @api(0)
    def cuGraphKernelNodeSetParams(self, hNode: Any, nodeParams: Any) -> tuple[Any, ...]:
        node = self._node(hNode, "cuGraphKernelNodeSetParams")
        if node.type != T.CU_GRAPH_NODE_TYPE_KERNEL:
            raise Status(INVALID_VALUE)
        spec = self._kernel_spec(nodeParams, "cuGraphKernelNodeSetParams")
        # Launch attributes are the node's, not its parameters': new parameters keep them (assumed).
        spec.cluster, spec.cooperative = node.spec.cluster, node.spec.cooperative
        node.spec = spec
        return OK

    @api(1)
    def cuGraphAddMemsetNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, memsetParams: Any, ctx: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddMemsetNode")
        deps = self._deps(graph, dependencies, numDependencies)
        spec = self._memset_spec(memsetParams, "cuGraphAddMemsetNode")
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_MEMSET, spec)

    def _memset_spec(self, p: Any, call: str) -> MemsetSpec:
        """The memset ``p`` describes, its memory checked (CUDA_ERROR_INVALID_VALUE otherwise)."""
        if p is None or int(p.elementSize) not in (1, 2, 4):
            raise Status(INVALID_VALUE)
        spec = MemsetSpec(h(p.dst), int(p.value), int(p.elementSize), int(p.width), max(1, int(p.height)), int(p.pitch))
        if spec.height > 1 and spec.pitch < spec.width * spec.element:
            raise Status(INVALID_VALUE)
        last = spec.dst + (spec.height - 1) * spec.pitch
        self._graph_mem(spec.dst, 1, call)
        self._graph_mem(last, spec.width * spec.element, call)
        return spec

    def _graph_mem(self, addr: int, n: int, call: str) -> Alloc:
        """A device range a graph node will use (graph allocations may be unallocated now)."""
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
        if alloc is None or addr + n > alloc.base + alloc.size:
            raise Status(INVALID_VALUE)
        if alloc.freed and not alloc.graph_owned:
            self._note(self.use_after_release, call, f"device memory {addr:#x} used after it was freed", addr)
            raise Status(INVALID_VALUE)
        return alloc

    @api(1)
    def cuGraphAddMemcpyNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, copyParams: Any, ctx: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddMemcpyNode")
        deps = self._deps(graph, dependencies, numDependencies)
        spec = self._copy_spec(copyParams, "cuGraphAddMemcpyNode")
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_MEMCPY, spec)

    def _copy_spec(self, p: Any, call: str) -> CopySpec:
        """The copy ``p`` describes, its device memory checked (CUDA_ERROR_INVALID_VALUE otherwise)."""
        if p is None:
            raise Status(INVALID_VALUE)

        def where(kind: Any, host: Any, dev: Any) -> tuple[int, int]:
            k = int(kind)
            if k == _HOST:
                return k, h(host)
            if k in (_DEVICE, _UNIFIED):
                return k, h(dev)
            raise Status(INVALID_VALUE)  # arrays are not simulated

        st, src = where(p.srcMemoryType, p.srcHost, p.srcDevice)
        dt, dst = where(p.dstMemoryType, p.dstHost, p.dstDevice)
        spec = CopySpec(
            st,
            src,
            int(p.srcXInBytes),
            int(p.srcY),
            int(p.srcZ),
            int(p.srcPitch),
            int(p.srcHeight),
            dt,
            dst,
            int(p.dstXInBytes),
            int(p.dstY),
            int(p.dstZ),
            int(p.dstPitch),
            int(p.dstHeight),
            int(p.WidthInBytes),
            max(1, int(p.Height)),
            max(1, int(p.Depth)),
        )
        if spec.width <= 0:
            raise Status(INVALID_VALUE)
        for first, last in self._copy_extents(spec):
            for addr in (first, last):
                if addr >= DEVICE_BASE:
                    self._graph_mem(addr, 1, call)
        return spec

    @staticmethod
    def _rows(spec: CopySpec) -> list[tuple[int, int]]:
        rows: list[tuple[int, int]] = []
        spitch = spec.src_pitch or spec.width
        dpitch = spec.dst_pitch or spec.width
        sheight = spec.src_height or spec.height
        dheight = spec.dst_height or spec.height
        for z in range(spec.depth):
            for y in range(spec.height):
                s = spec.src + spec.src_x + (spec.src_y + y) * spitch + (spec.src_z + z) * sheight * spitch
                d = spec.dst + spec.dst_x + (spec.dst_y + y) * dpitch + (spec.dst_z + z) * dheight * dpitch
                rows.append((s, d))
        return rows

    def _copy_extents(self, spec: CopySpec) -> list[tuple[int, int]]:
        rows = self._rows(spec)
        (s0, d0), (s1, d1) = rows[0], rows[-1]
        return [(s0, s1 + spec.width - 1), (d0, d1 + spec.width - 1)]

    @api(1)
    def cuGraphAddHostNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, nodeParams: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddHostNode")
        deps = self._deps(graph, dependencies, numDependencies)
        if nodeParams is None or h(nodeParams.fn) == 0:
            raise Status(INVALID_VALUE)
        spec = (h(nodeParams.fn), self._user_data(nodeParams.userData))
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_HOST, spec)

    @api(1)
    def cuGraphAddEventRecordNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, event: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddEventRecordNode")
        deps = self._deps(graph, dependencies, numDependencies)
        ev = self._event(event, "cuGraphAddEventRecordNode")
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev)

    @api(1)
    def cuGraphAddEventWaitNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, event: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddEventWaitNode")
        deps = self._deps(graph, dependencies, numDependencies)
        ev = self._event(event, "cuGraphAddEventWaitNode")
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev)

    @api(1)
    def cuGraphAddMemAllocNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, nodeParams: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddMemAllocNode")
        deps = self._deps(graph, dependencies, numDependencies)
        if nodeParams is None or int(nodeParams.bytesize) <= 0:
            raise Status(INVALID_VALUE)
        device = int(nodeParams.poolProps.location.id)
        if not 0 <= device < len(self._used):
            raise Status(R.CUDA_ERROR_INVALID_DEVICE)
        if int(nodeParams.bytesize) > self._memory_per_device:
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        alloc = self._new_device_alloc(int(nodeParams.bytesize), None, device, "cuGraphAddMemAllocNode", live=False)
        alloc.freed = True
        alloc.graph_owned = True
        nodeParams.dptr = cb.CUdeviceptr(alloc.base)
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_MEM_ALLOC, alloc)

    @api(1)
    def cuGraphAddMemFreeNode(self, hGraph: Any, dependencies: Any, numDependencies: int, dptr: Any) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddMemFreeNode")
        deps = self._deps(graph, dependencies, numDependencies)
        alloc = self._dev_find(h(dptr)) if h(dptr) >= DEVICE_BASE else None
        if alloc is None or not alloc.graph_owned or alloc.base != h(dptr):
            raise Status(INVALID_VALUE)
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_MEM_FREE, alloc)

    @api(1)
    def cuGraphAddChildGraphNode(
        self, hGraph: Any, dependencies: Any, numDependencies: int, childGraph: Any
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddChildGraphNode")
        deps = self._deps(graph, dependencies, numDependencies)
        source = self._graph(childGraph, "cuGraphAddChildGraphNode")
        if source is graph:
            raise Status(INVALID_VALUE)
        if self._has_memory_nodes(source):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)  # CUDA's rule, seen on an H200
        if self._has_conditional_nodes(source):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)  # CUDA's rule (the status is assumed to be the clone's)
        return self._add_node(graph, deps, T.CU_GRAPH_NODE_TYPE_GRAPH, self._child_copy(source))

    @api(1)
    def cuGraphChildGraphNodeGetGraph(self, hNode: Any) -> tuple[Any, ...]:
        node = self._node(hNode, "cuGraphChildGraphNodeGetGraph")
        if node.type != T.CU_GRAPH_NODE_TYPE_GRAPH:
            raise Status(INVALID_VALUE)
        return (SUCCESS, cb.CUgraph(node.spec.handle))

    # --- topology -----------------------------------------------------------------------------

    def _edge_lists(self, graph: Graph, from_: Any, to: Any, count: int) -> list[tuple[Node, Node]]:
        count = int(count)
        a_items, b_items = list(from_ or []), list(to or [])
        if count > len(a_items) or count > len(b_items):
            raise RuntimeError(f"List is too small: {min(len(a_items), len(b_items))} < {count}")
        return [
            (self._node(a, "cuGraphEdges"), self._node(b, "cuGraphEdges"))
            for a, b in zip(a_items[:count], b_items[:count], strict=True)
        ]

    def _add_dependencies(self, hGraph: Any, from_: Any, to: Any, numDependencies: int) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphAddDependencies")
        for a, b in self._edge_lists(graph, from_, to, numDependencies):
            if a.graph is not graph or b.graph is not graph or a is b or (a.handle, b.handle) in graph.edges:
                raise Status(INVALID_VALUE)
            self._link(a, b)
        return OK

    def _remove_dependencies(self, hGraph: Any, from_: Any, to: Any, numDependencies: int) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphRemoveDependencies")
        if self._has_memory_nodes(graph):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
        for a, b in self._edge_lists(graph, from_, to, numDependencies):
            if (a.handle, b.handle) not in graph.edges:
                raise Status(INVALID_VALUE)
            self._unlink(a, b)
        return OK

    # The signatures of the installed cuda-bindings: 13.x added edgeData (see cuguard.testing._bindings).
    if EDGE_DATA:

        @api(0)
        def cuGraphAddDependencies(
            self, hGraph: Any, from_: Any, to: Any, edgeData: Any, numDependencies: int
        ) -> tuple[Any, ...]:
            """Adds edges one by one and stops at the first invalid one (not atomic, as observed)."""
            return self._add_dependencies(hGraph, from_, to, numDependencies)

        @api(0)
        def cuGraphRemoveDependencies(
            self, hGraph: Any, from_: Any, to: Any, edgeData: Any, numDependencies: int
        ) -> tuple[Any, ...]:
            """Removes edges one by one and stops at the first missing one (not atomic, as observed)."""
            return self._remove_dependencies(hGraph, from_, to, numDependencies)

    else:

        @api(0)
        def cuGraphAddDependencies(  # type: ignore[misc]  # 12.x
            self, hGraph: Any, from_: Any, to: Any, numDependencies: int
        ) -> tuple[Any, ...]:
            """Adds edges one by one and stops at the first invalid one (not atomic, as observed)."""
            return self._add_dependencies(hGraph, from_, to, numDependencies)

        @api(0)
        def cuGraphRemoveDependencies(  # type: ignore[misc]  # 12.x
            self, hGraph: Any, from_: Any, to: Any, numDependencies: int
        ) -> tuple[Any, ...]:
            """Removes edges one by one and stops at the first missing one (not atomic, as observed)."""
            return self._remove_dependencies(hGraph, from_, to, numDependencies)

    @api(2)
    def cuGraphGetNodes(self, hGraph: Any, numNodes: int = 0) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphGetNodes")
        nodes, n = _listing(list(graph.nodes), numNodes, cb.CUgraphNode)
        return (SUCCESS, nodes, n)

    @api(2)
    def cuGraphGetRootNodes(self, hGraph: Any, numRootNodes: int = 0) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphGetRootNodes")
        roots = [k for k, node in graph.nodes.items() if not node.deps]
        nodes, n = _listing(roots, numRootNodes, cb.CUgraphNode)
        return (SUCCESS, nodes, n)

    def _get_edges(self, hGraph: Any, numEdges: int) -> tuple[Any, Any, int]:
        graph = self._graph(hGraph, "cuGraphGetEdges")
        edges = list(graph.edges)
        froms, n = _listing([a for a, _ in edges], numEdges, cb.CUgraphNode)
        tos, _ = _listing([b for _, b in edges], numEdges, cb.CUgraphNode)
        return froms, tos, n

    def _node_dependencies(self, hNode: Any, numDependencies: int) -> tuple[Any, int]:
        node = self._node(hNode, "cuGraphNodeGetDependencies")
        return _listing([d.handle for d in node.deps], numDependencies, cb.CUgraphNode)

    def _node_dependents(self, hNode: Any, numDependentNodes: int) -> tuple[Any, int]:
        node = self._node(hNode, "cuGraphNodeGetDependentNodes")
        return _listing([d.handle for d in node.outs], numDependentNodes, cb.CUgraphNode)

    # The return conventions of the installed cuda-bindings: 13.x returns edgeData before the count.
    if EDGE_DATA:

        @api(4)
        def cuGraphGetEdges(self, hGraph: Any, numEdges: int = 0) -> tuple[Any, ...]:
            froms, tos, n = self._get_edges(hGraph, numEdges)
            return (SUCCESS, froms, tos, _edge_data(froms), n)

        @api(3)
        def cuGraphNodeGetDependencies(self, hNode: Any, numDependencies: int = 0) -> tuple[Any, ...]:
            deps, n = self._node_dependencies(hNode, numDependencies)
            return (SUCCESS, deps, _edge_data(deps), n)

        @api(3)
        def cuGraphNodeGetDependentNodes(self, hNode: Any, numDependentNodes: int = 0) -> tuple[Any, ...]:
            outs, n = self._node_dependents(hNode, numDependentNodes)
            return (SUCCESS, outs, _edge_data(outs), n)

    else:

        @api(3)
        def cuGraphGetEdges(self, hGraph: Any, numEdges: int = 0) -> tuple[Any, ...]:
            froms, tos, n = self._get_edges(hGraph, numEdges)
            return (SUCCESS, froms, tos, n)

        @api(2)
        def cuGraphNodeGetDependencies(self, hNode: Any, numDependencies: int = 0) -> tuple[Any, ...]:
            deps, n = self._node_dependencies(hNode, numDependencies)
            return (SUCCESS, deps, n)

        @api(2)
        def cuGraphNodeGetDependentNodes(self, hNode: Any, numDependentNodes: int = 0) -> tuple[Any, ...]:
            outs, n = self._node_dependents(hNode, numDependentNodes)
            return (SUCCESS, outs, n)

    @api(1)
    def cuGraphNodeGetType(self, hNode: Any) -> tuple[Any, ...]:
        return (SUCCESS, self._node(hNode, "cuGraphNodeGetType").type)

    @api(0, callbacks=True)
    def cuGraphDestroyNode(self, hNode: Any) -> tuple[Any, ...]:
        node = self._node(hNode, "cuGraphDestroyNode")
        if self._has_memory_nodes(node.graph):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
        for dep in list(node.deps):
            self._unlink(dep, node)
        for out in list(node.outs):
            self._unlink(node, out)
        node.destroyed = True
        del node.graph.nodes[node.handle]
        self._destroy_owned(node)  # a child graph and its user-object references go with it
        return OK

    def _destroy_owned(self, node: Node) -> None:
        """Destroy the graphs ``node`` owns (a child graph node's copy)."""
        if node.type == T.CU_GRAPH_NODE_TYPE_GRAPH:
            self._destroy_graph(node.spec)

    @staticmethod
    def _has_memory_nodes(graph: Graph) -> bool:
        """Graphs holding allocation or free nodes refuse node and edge removal and cloning.

        Seen on an H200: destroying a node there answers ``CUDA_ERROR_NOT_SUPPORTED``
        (differential scenario graph_with_memory_nodes_is_frozen checks all three).
        """
        kinds = (T.CU_GRAPH_NODE_TYPE_MEM_ALLOC, T.CU_GRAPH_NODE_TYPE_MEM_FREE)
        return any(node.type in kinds for node in graph.nodes.values())

    @staticmethod
    def _has_conditional_nodes(graph: Graph) -> bool:
        """CUDA clones no graph holding conditional nodes, nor takes one as a child graph."""
        return any(node.type == T.CU_GRAPH_NODE_TYPE_CONDITIONAL for node in graph.nodes.values())

    # --- instantiation and launch ------------------------------------------------------------

    def _order(self, graph: Graph) -> list[Node]:
        """Topological order (Kahn); CUDA_ERROR_INVALID_VALUE when the graph has a cycle."""
        indegree = {k: len(n.deps) for k, n in graph.nodes.items()}
        ready = [n for k, n in graph.nodes.items() if indegree[k] == 0]
        order: list[Node] = []
        while ready:
            node = ready.pop(0)
            order.append(node)
            for out in node.outs:
                indegree[out.handle] -= 1
                if indegree[out.handle] == 0:
                    ready.append(out)
        if len(order) != len(graph.nodes):
            raise Status(INVALID_VALUE)
        return order

    def _flatten(
        self, graph: Graph, steps: list[tuple[Any, Any]], where: dict[int, tuple[int, int]] | None = None
    ) -> None:
        """Append the steps of ``graph`` in topological order; ``where`` gets each node's (first, end) steps."""
        for node in self._order(graph):
            first = len(steps)
            if node.type == T.CU_GRAPH_NODE_TYPE_GRAPH:
                self._flatten(node.spec, steps)
            else:
                steps.append(self._step(node))
            if where is not None:
                where[node.handle] = (first, len(steps))

    def _step(self, node: Node) -> tuple[Any, Any]:
        """The step a node (not a child graph) runs as."""
        return (node.type, node.spec)

    def _step_kernels(self, steps: list[tuple[Any, Any]]) -> list[Function]:
        """The kernels ``steps`` may run (a launch checks that each has a stand-in first)."""
        return [spec.fn for kind, spec in steps if kind == T.CU_GRAPH_NODE_TYPE_KERNEL]

    def _signature(self, graph: Graph) -> tuple[Any, ...]:
        """The topology an update must keep: node types and edges, child graphs' included (seen on an H200)."""
        index = {k: i for i, k in enumerate(graph.nodes)}
        types = tuple(int(n.type) for n in graph.nodes.values())
        edges = tuple(sorted((index[a], index[b]) for a, b in graph.edges))
        children = tuple(self._signature(n.spec) for n in graph.nodes.values() if n.type == T.CU_GRAPH_NODE_TYPE_GRAPH)
        return (types, edges, children)

    def _expanded(self, steps: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """``steps`` with the steps nested in them (none here; conditional bodies add theirs)."""
        return steps

    def _step_refs(self, steps: list[tuple[Any, Any]]) -> frozenset[int]:
        """The allocations the node specs of this module in ``steps`` use (other specs add theirs)."""
        refs: set[int] = set()
        for _, spec in steps:
            addrs: list[int] = []
            if isinstance(spec, KernelSpec):
                addrs = [a for a in spec.args if isinstance(a, int) and a >= DEVICE_BASE]
            elif isinstance(spec, MemsetSpec):
                addrs = [spec.dst]
            elif isinstance(spec, CopySpec):
                addrs = [spec.src, spec.dst]
            for addr in addrs:
                alloc = self._dev_find(addr) if addr >= DEVICE_BASE else self._host_find(addr)
                if alloc is not None and not alloc.graph_owned:
                    refs.add(alloc.base)
        return frozenset(refs)

    def _check_free_graphs(self, alloc: Alloc, call: str) -> None:
        for ex in self._live_execs.values():
            if alloc.base in ex.refs:
                self._note(
                    self.dangling,
                    call,
                    f"memory {alloc.base:#x} freed while executable graph {ex.handle:#x} references it",
                    alloc.base,
                )

    def _instantiate(self, hGraph: Any, call: str) -> tuple[Any, ...]:
        graph = self._graph(hGraph, call)
        steps: list[tuple[Any, Any]] = []
        where: dict[int, tuple[int, int]] = {}
        self._flatten(graph, steps, where)
        for kind, spec in steps:
            if kind in (T.CU_GRAPH_NODE_TYPE_EVENT_RECORD, T.CU_GRAPH_NODE_TYPE_WAIT_EVENT) and (
                spec.destroyed or not spec.ctx.alive(spec.gen)
            ):
                # The H200's driver read the destroyed event and died of SIGSEGV (misuse sweep, seed 3).
                raise self._crash(call, f"instantiating an event node of destroyed event {spec.handle:#x}", spec.handle)
        ctx = self._current()
        allocs = [spec for kind, spec in steps if kind == T.CU_GRAPH_NODE_TYPE_MEM_ALLOC]
        ex = Exec(
            self._handle(),
            ctx,
            steps,
            self._signature(graph),
            self._retain_refs(self._all_refs(graph)),
            self._step_refs(steps),
            allocs,
            origin=graph.handle,
            where=where,
        )
        self._execs[ex.handle] = ex
        self._live_execs[ex.handle] = ex
        self._add_live("graph_exec", ex.handle, ctx, call)
        return (SUCCESS, cb.CUgraphExec(ex.handle))

    @api(1)
    def cuGraphInstantiate(self, hGraph: Any, flags: int) -> tuple[Any, ...]:
        return self._instantiate(hGraph, "cuGraphInstantiate")

    @api(1)
    def cuGraphInstantiateWithFlags(self, hGraph: Any, flags: int) -> tuple[Any, ...]:
        return self._instantiate(hGraph, "cuGraphInstantiateWithFlags")

    @api(0, callbacks=True)
    def cuGraphExecDestroy(self, hGraphExec: Any) -> tuple[Any, ...]:
        handle = h(hGraphExec)
        ex = self._execs.get(handle)
        if ex is None:
            raise Status(INVALID_VALUE)
        if ex.destroyed:
            self._note(
                self.double_release, "cuGraphExecDestroy", f"executable graph {handle:#x} destroyed twice", handle
            )
            raise Status(INVALID_VALUE)
        ex.destroyed = True
        del self._live_execs[handle]
        self._release_after(ex.user_refs, ex.launches)  # held while a launch is in flight
        self._drop_live(handle, ex.ctx)
        return OK

    @api(1, callbacks=True)
    def cuGraphExecUpdate(self, hGraphExec: Any, hGraph: Any) -> tuple[Any, ...]:
        """Take ``hGraph``'s parameters; its user-object references (cloned) replace the exec's.

        As the real driver does: references the exec had are released once its launches in
        flight have completed.
        """
        ex = self._exec(hGraphExec, "cuGraphExecUpdate")
        graph = self._graph(hGraph, "cuGraphExecUpdate")
        info = cb.CUgraphExecUpdateResultInfo()
        signature = self._signature(graph)
        if signature != ex.signature:
            changed = signature[0] != ex.signature[0] and len(signature[0]) == len(ex.signature[0])
            info.result = (
                cb.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
                if changed
                else cb.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
            )
            raise Status(R.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
        steps: list[tuple[Any, Any]] = []
        self._flatten(graph, steps)
        ex.steps = steps
        ex.refs = self._step_refs(steps)
        ex.allocs = [spec for kind, spec in steps if kind == T.CU_GRAPH_NODE_TYPE_MEM_ALLOC]
        old = ex.user_refs
        ex.user_refs = self._retain_refs(self._all_refs(graph))
        self._release_after(old, ex.launches)
        info.result = cb.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_SUCCESS
        return (SUCCESS, info)

    @api(0)
    def cuGraphUpload(self, hGraphExec: Any, hStream: Any) -> tuple[Any, ...]:
        self._exec(hGraphExec, "cuGraphUpload")
        self._stream(hStream, "cuGraphUpload")
        return OK

    @api(0)
    def cuGraphLaunch(self, hGraphExec: Any, hStream: Any) -> tuple[Any, ...]:
        ex = self._exec(hGraphExec, "cuGraphLaunch")
        st = self._stream(hStream, "cuGraphLaunch")
        for alloc in ex.allocs:
            if not alloc.freed:
                raise Status(INVALID_VALUE)  # its previous allocation was not freed
        for fn in self._step_kernels([s for i, s in enumerate(ex.steps) if i not in ex.disabled]):
            self._require_stand_in(fn)
        self._launch_begins(st, ex)
        for i, (kind, spec) in enumerate(ex.steps):
            if i in ex.disabled:
                self._enqueue(st, "cuGraphLaunch", None)  # a disabled node runs as an empty node
            else:
                self._launch_step(st, kind, spec)
        ex.launches = self._in_flight(ex.launches)
        ex.launches.append((st, self._op_seq))
        return OK

    def _launch_begins(self, st: Stream, ex: Exec) -> None:
        """Stream-ordered work a launch of ``ex`` does before its first node (none here)."""

    def _launch_step(self, st: Stream, kind: Any, spec: Any) -> None:
        call = "cuGraphLaunch"
        if kind == T.CU_GRAPH_NODE_TYPE_KERNEL:
            module = spec.fn.module
            if module.unloaded or (module.ctx is not None and not module.ctx.alive(module.gen)):
                # CUDA requires what a graph uses to outlive it; the real driver's behaviour here
                # is undefined, so this is misuse, never a silent skip.
                self._note(
                    self.misuse,
                    call,
                    f"kernel node of {spec.fn.name!r} launched after its module {module.handle:#x} was unloaded",
                    module.handle,
                )
                return
            refs = self._arg_refs(spec.args, call, spec.fn.name)
            launch = {
                "name": spec.fn.name,
                "grid": spec.grid,
                "block": spec.block,
                "shared": spec.shared,
                "stream": st.handle,
                "cluster": spec.cluster,
                "cooperative": spec.cooperative,
            }
            self._enqueue(st, call, self._kernel_runner(spec.fn, spec.args, launch), refs)
        elif kind == T.CU_GRAPH_NODE_TYPE_MEMSET:
            self._graph_memset(st, spec)
        elif kind == T.CU_GRAPH_NODE_TYPE_MEMCPY:
            self._graph_memcpy(st, spec)
        elif kind == T.CU_GRAPH_NODE_TYPE_HOST:
            fn, data = spec
            self._enqueue(st, call, None, host=lambda: self._call_host_fn(fn, data))
        elif kind == T.CU_GRAPH_NODE_TYPE_EVENT_RECORD:
            ev: Event = spec
            if ev.destroyed or not ev.ctx.alive(ev.gen):
                self._note(
                    self.misuse, call, f"event record node launched after event {ev.handle:#x} was destroyed", ev.handle
                )
                return
            self._record_event(ev, st, call)
        elif kind == T.CU_GRAPH_NODE_TYPE_WAIT_EVENT:
            ev = spec
            if ev.destroyed or not ev.ctx.alive(ev.gen):
                self._note(
                    self.misuse, call, f"event wait node launched after event {ev.handle:#x} was destroyed", ev.handle
                )
                return
            if ev.stream is not None and ev.stream is not st:
                st.last_task = max(st.last_task, ev.task)
                for key, seq in ev.after.items():
                    st.ordered_after[key] = max(st.ordered_after.get(key, 0), seq)
        elif kind == T.CU_GRAPH_NODE_TYPE_MEM_ALLOC:
            alloc: Alloc = spec
            alloc.freed = False
            alloc.ctx = st.ctx
            alloc.gen = st.ctx.gen
            self._used[st.ctx.device] += alloc.size
            self._add_live("device_memory", alloc.base, st.ctx, "cuGraphAddMemAllocNode")
            self._enqueue(st, call, None)
        elif kind == T.CU_GRAPH_NODE_TYPE_MEM_FREE:
            alloc = spec
            if alloc.freed:
                self._note(
                    self.double_release, call, f"graph frees memory {alloc.base:#x} that is not allocated", alloc.base
                )
            else:
                self._check_free(alloc, call, st)
                self._release_alloc(alloc)
            self._enqueue(st, call, None)
        else:  # empty node
            self._enqueue(st, call, None)

    def _graph_memset(self, st: Stream, spec: MemsetSpec) -> None:
        alloc = self._dev_find(spec.dst)
        assert alloc is not None
        fmt = {1: "<B", 2: "<H", 4: "<I"}[spec.element]
        row = struct.pack(fmt, spec.value & ((1 << (8 * spec.element)) - 1)) * spec.width

        def run() -> None:
            if alloc.freed:
                self._note(
                    self.dangling, "cuGraphLaunch", f"memset node executed on freed memory {alloc.base:#x}", alloc.base
                )
                return
            for y in range(spec.height):
                alloc.write(spec.dst + y * spec.pitch - alloc.base, row)

        self._enqueue(st, "cuGraphLaunch", run, frozenset({alloc.base}))

    def _graph_memcpy(self, st: Stream, spec: CopySpec) -> None:
        rows = self._rows(spec)
        width = spec.width
        refs: set[int] = set()
        for first, last in self._copy_extents(spec):
            for addr in (first, last):
                alloc = self._dev_find(addr) if addr >= DEVICE_BASE else self._host_find(addr)
                if alloc is not None:
                    refs.add(alloc.base)

        def read(addr: int) -> bytes | None:
            if addr >= DEVICE_BASE:
                alloc = self._dev_find(addr)
                if alloc is None or alloc.freed:
                    return None
                return alloc.read(addr - alloc.base, width)
            return ctypes.string_at(addr, width)

        def write(addr: int, data: bytes) -> bool:
            if addr >= DEVICE_BASE:
                alloc = self._dev_find(addr)
                if alloc is None or alloc.freed:
                    return False
                alloc.write(addr - alloc.base, data)
                return True
            ctypes.memmove(addr, data, width)
            return True

        def run() -> None:
            for s, d in rows:
                data = read(s)
                if data is None or not write(d, data):
                    self._note(self.dangling, "cuGraphLaunch", "memcpy node executed on freed memory", s)
                    return

        self._enqueue(st, "cuGraphLaunch", run, frozenset(refs))
