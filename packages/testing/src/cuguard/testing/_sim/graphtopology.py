"""The topology of the simulated driver's graphs: edges, node listings, node removal.

:class:`SimGraphTopology` builds on :class:`~cuguard.testing._sim.graphbase.SimGraphBase`.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._bindings import EDGE_DATA
from cuguard.testing._sim.base import OK, SUCCESS, Status, api
from cuguard.testing._sim.graphbase import SimGraphBase
from cuguard.testing._sim.graphstate import Graph, Node

__all__ = ["SimGraphTopology"]

R = cb.CUresult
T = cb.CUgraphNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE


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


class SimGraphTopology(SimGraphBase):
    """Adding and removing edges, listing nodes and edges, destroying nodes."""

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
