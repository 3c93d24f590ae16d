"""Per-node updates of executable graphs in the simulated driver, and enabling or disabling their nodes.

Each update names a node of the graph the executable graph was instantiated
from and changes the step that node runs as, in that executable graph only
(the definition keeps its parameters). The rules follow CUDA's documentation of
each call: the node kind cannot change; a kernel stays in the context of the
kernel it replaces; memset and memcpy operands stay one-dimensional, in the
context of the original operands (memcpy: of the same memory types); a child
graph keeps the topology of the original one. A refused update changes
nothing. Only kernel, memset and memcpy nodes can be disabled; a disabled node
runs as an empty node and keeps taking parameter updates.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.base import OK, SUCCESS, Status, api, h
from cuguard.testing._sim.graphs import SimGraphs
from cuguard.testing._sim.graphstate import CopySpec, Exec, KernelSpec, MemsetSpec, Node

__all__ = ["SimExecUpdates"]

R = cb.CUresult
T = cb.CUgraphNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE

_ENABLE_KINDS = (T.CU_GRAPH_NODE_TYPE_KERNEL, T.CU_GRAPH_NODE_TYPE_MEMSET, T.CU_GRAPH_NODE_TYPE_MEMCPY)


class SimExecUpdates(SimGraphs):
    """Adds the ``cuGraphExec*SetParams`` family and ``cuGraphNodeSet/GetEnabled`` to :class:`SimGraphs`."""

    def _exec_node(self, hGraphExec: Any, hNode: Any, kind: Any, call: str) -> tuple[Exec, Node, int]:
        """The executable graph, the node of its origin graph and the node's step; INVALID_VALUE otherwise."""
        ex = self._exec(hGraphExec, call)
        node = self._node(hNode, call)
        span = ex.where.get(node.handle)
        if node.graph.handle != ex.origin or span is None or (kind is not None and node.type != kind):
            raise Status(INVALID_VALUE)
        return ex, node, span[0]

    def _replace_step(self, ex: Exec, first: int, kind: Any, spec: Any) -> None:
        ex.steps[first] = (kind, spec)
        ex.refs = self._step_refs(ex.steps)

    def _context_of_address(self, addr: int) -> Any:
        alloc = self._dev_find(addr) if addr else None
        return None if alloc is None else alloc.ctx

    @api(0)
    def cuGraphExecKernelNodeSetParams(self, hGraphExec: Any, hNode: Any, nodeParams: Any) -> tuple[Any, ...]:
        call = "cuGraphExecKernelNodeSetParams"
        ex, _, first = self._exec_node(hGraphExec, hNode, T.CU_GRAPH_NODE_TYPE_KERNEL, call)
        old: KernelSpec = ex.steps[first][1]
        spec = self._kernel_spec(nodeParams, call)
        if spec.fn.module.ctx is not old.fn.module.ctx:
            raise Status(INVALID_VALUE)  # CUDA: the function cannot move to another context
        self._arg_refs(spec.args, call, spec.fn.name)
        spec.cluster, spec.cooperative = old.cluster, old.cooperative  # the node's launch attributes (assumed)
        self._replace_step(ex, first, T.CU_GRAPH_NODE_TYPE_KERNEL, spec)
        return OK

    @api(0)
    def cuGraphExecMemsetNodeSetParams(
        self, hGraphExec: Any, hNode: Any, memsetParams: Any, ctx: Any
    ) -> tuple[Any, ...]:
        call = "cuGraphExecMemsetNodeSetParams"
        ex, _, first = self._exec_node(hGraphExec, hNode, T.CU_GRAPH_NODE_TYPE_MEMSET, call)
        old: MemsetSpec = ex.steps[first][1]
        spec = self._memset_spec(memsetParams, call)
        if spec.height != 1 or old.height != 1 or spec.width <= 0:
            raise Status(INVALID_VALUE)  # CUDA: both operands one-dimensional, not zero-sized
        if self._context_of_address(spec.dst) is not self._context_of_address(old.dst):
            raise Status(INVALID_VALUE)  # CUDA: memory of the original operand's context
        self._replace_step(ex, first, T.CU_GRAPH_NODE_TYPE_MEMSET, spec)
        return OK

    @api(0)
    def cuGraphExecMemcpyNodeSetParams(self, hGraphExec: Any, hNode: Any, copyParams: Any, ctx: Any) -> tuple[Any, ...]:
        call = "cuGraphExecMemcpyNodeSetParams"
        ex, _, first = self._exec_node(hGraphExec, hNode, T.CU_GRAPH_NODE_TYPE_MEMCPY, call)
        old: CopySpec = ex.steps[first][1]
        spec = self._copy_spec(copyParams, call)
        if (spec.src_type, spec.dst_type) != (old.src_type, old.dst_type):
            raise Status(INVALID_VALUE)  # CUDA: the operands' memory types cannot change
        if spec.height != 1 or spec.depth != 1 or old.height != 1 or old.depth != 1:
            raise Status(INVALID_VALUE)  # CUDA: one-dimensional operands only
        for new_addr, old_addr in ((spec.src, old.src), (spec.dst, old.dst)):
            if self._context_of_address(new_addr) is not self._context_of_address(old_addr):
                raise Status(INVALID_VALUE)
        self._replace_step(ex, first, T.CU_GRAPH_NODE_TYPE_MEMCPY, spec)
        return OK

    @api(0)
    def cuGraphExecHostNodeSetParams(self, hGraphExec: Any, hNode: Any, nodeParams: Any) -> tuple[Any, ...]:
        call = "cuGraphExecHostNodeSetParams"
        ex, _, first = self._exec_node(hGraphExec, hNode, T.CU_GRAPH_NODE_TYPE_HOST, call)
        if nodeParams is None or h(nodeParams.fn) == 0:
            raise Status(INVALID_VALUE)
        self._replace_step(
            ex, first, T.CU_GRAPH_NODE_TYPE_HOST, (h(nodeParams.fn), self._user_data(nodeParams.userData))
        )
        return OK

    def _set_event(self, hGraphExec: Any, hNode: Any, event: Any, kind: Any, call: str) -> tuple[Any, ...]:
        ex, _, first = self._exec_node(hGraphExec, hNode, kind, call)
        ev = self._event(event, call)
        if ev.ctx is not ex.steps[first][1].ctx:
            raise Status(INVALID_VALUE)
        self._replace_step(ex, first, kind, ev)
        return OK

    @api(0)
    def cuGraphExecEventRecordNodeSetEvent(self, hGraphExec: Any, hNode: Any, event: Any) -> tuple[Any, ...]:
        kind = T.CU_GRAPH_NODE_TYPE_EVENT_RECORD
        return self._set_event(hGraphExec, hNode, event, kind, "cuGraphExecEventRecordNodeSetEvent")

    @api(0)
    def cuGraphExecEventWaitNodeSetEvent(self, hGraphExec: Any, hNode: Any, event: Any) -> tuple[Any, ...]:
        kind = T.CU_GRAPH_NODE_TYPE_WAIT_EVENT
        return self._set_event(hGraphExec, hNode, event, kind, "cuGraphExecEventWaitNodeSetEvent")

    @api(0)
    def cuGraphExecChildGraphNodeSetParams(self, hGraphExec: Any, hNode: Any, childGraph: Any) -> tuple[Any, ...]:
        call = "cuGraphExecChildGraphNodeSetParams"
        ex = self._exec(hGraphExec, call)
        node = self._node(hNode, call)
        span = ex.where.get(node.handle)
        if node.graph.handle != ex.origin or span is None or node.type != T.CU_GRAPH_NODE_TYPE_GRAPH:
            raise Status(INVALID_VALUE)
        child = self._graph(childGraph, call)
        if self._has_memory_nodes(child):
            raise Status(INVALID_VALUE)
        if self._signature(child) != self._signature(node.spec):
            # CUDA: the same topology as the original child graph (refused as an update failure on an H200)
            raise Status(R.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
        steps: list[tuple[Any, Any]] = []
        self._flatten(child, steps)
        first, end = span
        if len(steps) != end - first:
            raise Status(INVALID_VALUE)
        ex.steps[first:end] = steps
        ex.refs = self._step_refs(ex.steps)
        return OK

    @api(0)
    def cuGraphNodeSetEnabled(self, hGraphExec: Any, hNode: Any, isEnabled: int) -> tuple[Any, ...]:
        ex, node, first = self._exec_node(hGraphExec, hNode, None, "cuGraphNodeSetEnabled")
        if node.type not in _ENABLE_KINDS:
            raise Status(INVALID_VALUE)  # CUDA: only kernel, memset and memcpy nodes
        if int(isEnabled):
            ex.disabled.discard(first)
        else:
            ex.disabled.add(first)
        return OK

    @api(1)
    def cuGraphNodeGetEnabled(self, hGraphExec: Any, hNode: Any) -> tuple[Any, ...]:
        ex, node, first = self._exec_node(hGraphExec, hNode, None, "cuGraphNodeGetEnabled")
        if node.type not in _ENABLE_KINDS:
            raise Status(INVALID_VALUE)
        return (SUCCESS, 0 if first in ex.disabled else 1)
