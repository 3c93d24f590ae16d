"""Building the simulated driver's graphs: creation, destruction, cloning and the node adders.

:class:`SimGraphBuild` builds on :class:`~cuguard.testing._sim.graphtopology.SimGraphTopology`.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.base import DEVICE_BASE, OK, SUCCESS, Status, api, h
from cuguard.testing._sim.graphstate import CopySpec, Graph, KernelSpec, MemsetSpec, Node
from cuguard.testing._sim.graphtopology import SimGraphTopology
from cuguard.testing._sim.state import Alloc

__all__ = ["SimGraphBuild"]

R = cb.CUresult
T = cb.CUgraphNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE

_HOST = int(cb.CUmemorytype.CU_MEMORYTYPE_HOST)
_DEVICE = int(cb.CUmemorytype.CU_MEMORYTYPE_DEVICE)
_UNIFIED = int(cb.CUmemorytype.CU_MEMORYTYPE_UNIFIED)


class SimGraphBuild(SimGraphTopology):
    """Graphs made, destroyed and cloned; nodes of every kind added, their parameters read and checked."""

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
