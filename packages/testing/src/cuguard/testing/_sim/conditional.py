"""Conditional nodes of the simulated driver: condition handles, if / if-else / while / switch nodes.

``cuGraphConditionalHandleCreate`` makes a condition handle of a graph, with a
default value that each launch assigns when ``CU_GRAPH_COND_ASSIGN_DEFAULT`` is
set. ``cuGraphAddNode`` with a ``CU_GRAPH_NODE_TYPE_CONDITIONAL`` node (the
handle's context) makes the node and its body graphs (``phGraph_out``, owned by
the node), which are filled with the ordinary node functions, or by capture
(``cuStreamBeginCaptureToGraph`` into a body). Which handles a node takes, as
the H200's driver answered: outside a body, a live handle of any graph; in a
body, a handle of that body or of a graph holding it (its node's graph, and so
on up), and ``CUDA_ERROR_INVALID_VALUE`` for a handle of any other graph.
``cuGraphInstantiate`` refuses with ``CUDA_ERROR_INVALID_VALUE`` a graph where a
handle made on it or on one of its bodies (recursively) is used by no live
conditional node of that tree, one made and never used as well as one whose
node was destroyed (seen on an H200 for handles of the graph instantiated; the
rule's reach into bodies and child graphs is assumed). A handle belongs to one
conditional node: a second node with it is ``CUDA_ERROR_INVALID_VALUE``, and a
graph holding conditional nodes has one executable graph at a time (a second
``cuGraphInstantiate`` while the first lives is ``CUDA_ERROR_NOT_SUPPORTED``;
both seen on an H200). When an executable graph runs, a conditional
node evaluates its handle's value at the point the stream reaches it and runs
its bodies' steps in order, inline: ``if`` runs body 0 when the value is
non-zero (and body 1, if there is one, when it is zero), ``while`` runs body 0
as long as the value is non-zero (checked before each iteration), ``switch``
runs body ``n`` for the value ``n`` (none when the value is past the last).
Graphs holding conditional nodes can neither be cloned nor become child graphs
(``CUDA_ERROR_NOT_SUPPORTED``).

Kernels set a condition as ``cudaGraphSetConditional`` does on a GPU: a stand-in
calls :meth:`SimConditional.set_conditional` with the handle it was passed.
The simulator keeps one value per handle (executable graphs made from one
definition share it; a GPU keeps one per executable graph, which only differs
when two of them run interleaved). A handle created without a default starts
at 0. A ``while`` loop that runs :data:`MAX_ITERATIONS` times without its
condition clearing is stopped there and recorded as misuse (a GPU would loop on).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._bindings import EDGE_DATA
from cuguard.testing._sim.base import SUCCESS, Status, api, h
from cuguard.testing._sim.graphs import SimGraphs
from cuguard.testing._sim.graphstate import Exec, Graph, Node
from cuguard.testing._sim.state import Ctx, Function, Op, Stream

__all__ = ["MAX_ITERATIONS", "SimConditional"]

R = cb.CUresult
T = cb.CUgraphNodeType
C = cb.CUgraphConditionalNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
_CONDITIONAL = T.CU_GRAPH_NODE_TYPE_CONDITIONAL
_ASSIGN_DEFAULT = 1  # CU_GRAPH_COND_ASSIGN_DEFAULT
# Where CUDA_CONDITIONAL_NODE_PARAMS keeps phGraph_out: after handle (8 bytes), type and size (4 each).
_PH_GRAPH_OUT_OFFSET = 16

#: The most iterations a simulated ``while`` node runs before the launch faults.
MAX_ITERATIONS = 1 << 16


@dataclass(eq=False, slots=True)
class Condition:
    handle: int
    graph: Graph
    ctx: Ctx
    default: int
    flags: int
    value: int = 0
    node: Node | None = None  # the conditional node that uses it (one per handle: the H200 refused a second)


@dataclass(eq=False, slots=True)
class ConditionalSpec:
    condition: Condition
    type: Any
    bodies: list[Graph]
    # The CUDA-owned array phGraph_out points to (kept as long as the node lives).
    array: Any = None


@dataclass(eq=False, slots=True)
class ConditionalStep:
    condition: Condition
    type: Any
    bodies: list[list[tuple[Any, Any]]] = field(default_factory=list)


class SimConditional(SimGraphs):
    """Adds condition handles and conditional nodes to :class:`SimGraphs`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._conditions: dict[int, Condition] = {}
        self._graph_conditions: dict[int, list[Condition]] = {}  # graph handle -> the handles made on it
        self._parents: dict[int, Graph] = {}  # body graph handle -> the graph holding its node
        self._inline = threading.local()

    # --- handles ---------------------------------------------------------------------------------

    @api(1)
    def cuGraphConditionalHandleCreate(
        self, hGraph: Any, ctx: Any, defaultLaunchValue: int, flags: int
    ) -> tuple[Any, ...]:
        graph = self._graph(hGraph, "cuGraphConditionalHandleCreate")
        context = self._ctx_arg(ctx, "cuGraphConditionalHandleCreate")
        if int(flags) not in (0, _ASSIGN_DEFAULT) or context.destroyed:
            raise Status(INVALID_VALUE)
        cond = Condition(self._handle(), graph, context, int(defaultLaunchValue) & 0xFFFFFFFF, int(flags))
        cond.value = cond.default if cond.flags & _ASSIGN_DEFAULT else 0
        self._conditions[cond.handle] = cond
        self._graph_conditions.setdefault(graph.handle, []).append(cond)
        return (SUCCESS, cb.CUgraphConditionalHandle(cond.handle))

    def set_conditional(self, handle: int, value: int) -> None:
        """Set a condition's value from inside a kernel stand-in, as ``cudaGraphSetConditional`` does.

        ``handle`` is the condition handle the kernel was passed (an int).
        Raises ``RuntimeError`` outside a kernel (CUDA sets conditions from
        device code only) and ``ValueError`` for a handle this driver did not
        make; inside a stand-in either faults the launch.
        """
        if not getattr(self._tls, "in_kernel", False):
            raise RuntimeError("set_conditional() may only be called from a kernel stand-in (device code in CUDA)")
        cond = self._conditions.get(int(handle))
        if cond is None or cond.graph.destroyed:
            raise ValueError(f"{int(handle):#x} is not a condition handle of a live graph")
        cond.value = int(value) & 0xFFFFFFFF

    # --- the node --------------------------------------------------------------------------------

    def _add_graph_node(self, hGraph: Any, dependencies: Any, numDependencies: int, nodeParams: Any) -> tuple[Any, ...]:
        """``cuGraphAddNode``: conditional nodes only (other kinds answer CUDA_ERROR_NOT_SUPPORTED here)."""
        call = "cuGraphAddNode"
        graph = self._graph(hGraph, call)
        deps = self._deps(graph, dependencies, numDependencies)
        if nodeParams is None:
            raise Status(INVALID_VALUE)
        if int(nodeParams.type) != int(_CONDITIONAL):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)  # the simulator adds other kinds with their own functions
        p = nodeParams.conditional
        cond = self._conditions.get(h(p.handle))
        if cond is None or cond.graph.destroyed:
            # A live handle of another graph is taken as it is (the H200's driver answered success).
            raise Status(INVALID_VALUE)
        if h(p.ctx) != cond.ctx.handle:
            raise Status(INVALID_VALUE)  # CUDA: the node's context is the handle's
        if graph.handle in self._parents and cond.graph not in self._enclosing(graph):
            raise Status(INVALID_VALUE)  # in a body: a handle of the body or a graph holding it (H200)
        if cond.node is not None and not cond.node.destroyed:
            raise Status(INVALID_VALUE)  # a handle belongs to one conditional node (H200, at any depth)
        kind, size = p.type, int(p.size)
        if (
            (kind == C.CU_GRAPH_COND_TYPE_IF and size not in (1, 2))
            or (kind == C.CU_GRAPH_COND_TYPE_WHILE and size != 1)
            or (kind == C.CU_GRAPH_COND_TYPE_SWITCH and size < 1)
        ):
            raise Status(INVALID_VALUE)
        bodies = [self._new_graph(call, child=True) for _ in range(size)]
        for body in bodies:
            self._parents[body.handle] = graph
        spec = ConditionalSpec(cond, kind, bodies)
        spec.array = (ctypes.c_void_p * size)(*[body.handle for body in bodies])
        ctypes.c_void_p.from_address(p.getPtr() + _PH_GRAPH_OUT_OFFSET).value = ctypes.addressof(spec.array)
        result = self._add_node(graph, deps, _CONDITIONAL, spec)
        cond.node = graph.nodes[h(result[1])]
        return result

    if EDGE_DATA:

        @api(1)
        def cuGraphAddNode(
            self, hGraph: Any, dependencies: Any, dependencyData: Any, numDependencies: int, nodeParams: Any
        ) -> tuple[Any, ...]:
            """Adds a conditional node (13.x signature); see the module docstring."""
            return self._add_graph_node(hGraph, dependencies, numDependencies, nodeParams)

    else:

        @api(1)
        def cuGraphAddNode(  # type: ignore[misc]  # 12.x
            self, hGraph: Any, dependencies: Any, numDependencies: int, nodeParams: Any
        ) -> tuple[Any, ...]:
            """Adds a conditional node (12.x signature); see the module docstring."""
            return self._add_graph_node(hGraph, dependencies, numDependencies, nodeParams)

    def _enclosing(self, graph: Graph) -> list[Graph]:
        """``graph`` and the graphs holding it: a body's node's graph, and so on up to a graph that is no body."""
        chain = [graph]
        while chain[-1].handle in self._parents:
            chain.append(self._parents[chain[-1].handle])
        return chain

    def _tree(self, graph: Graph) -> list[Graph]:
        """``graph`` and every graph nested in it: conditional bodies and child graphs, recursively."""
        tree: list[Graph] = []
        todo = [graph]
        while todo:
            current = todo.pop()
            tree.append(current)
            for node in current.nodes.values():
                if type(node.spec) is ConditionalSpec:
                    todo.extend(node.spec.bodies)
                elif node.type == T.CU_GRAPH_NODE_TYPE_GRAPH:
                    todo.append(node.spec)
        return tree

    def _instantiate(self, hGraph: Any, call: str) -> tuple[Any, ...]:
        """Refuses (CUDA_ERROR_INVALID_VALUE) a graph whose tree holds a handle no live node of it uses (H200)."""
        graph = self._graph(hGraph, call)
        tree = self._tree(graph)
        used = {
            node.spec.condition.handle
            for member in tree
            for node in member.nodes.values()
            if type(node.spec) is ConditionalSpec
        }
        for member in tree:
            if any(cond.handle not in used for cond in self._graph_conditions.get(member.handle, ())):
                raise Status(INVALID_VALUE)
        if used and any(ex.origin == graph.handle for ex in self._live_execs.values() if not ex.destroyed):
            # One executable graph at a time of a graph with conditional nodes (H200: a second while
            # the first lived was refused, and taken once it was destroyed).
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
        return super()._instantiate(hGraph, call)

    # --- what the graph model does with it ---------------------------------------------------------

    def _destroy_owned(self, node: Node) -> None:
        super()._destroy_owned(node)
        if type(node.spec) is ConditionalSpec:
            for body in node.spec.bodies:
                self._destroy_graph(body)

    def _copied_spec(self, node: Node) -> Any:
        if type(node.spec) is not ConditionalSpec:
            return super()._copied_spec(node)  # a conditional step a captured graph launch copied stays as it is
        spec: ConditionalSpec = node.spec
        bodies = [self._child_copy(body) for body in spec.bodies]
        copy = ConditionalSpec(spec.condition, spec.type, bodies)
        copy.array = (ctypes.c_void_p * len(bodies))(*[body.handle for body in bodies])
        return copy

    def _signature(self, graph: Graph) -> tuple[Any, ...]:
        base = super()._signature(graph)
        bodies = tuple(
            (int(n.spec.type), tuple(self._signature(b) for b in n.spec.bodies))
            for n in graph.nodes.values()
            if type(n.spec) is ConditionalSpec
        )
        return (*base, bodies) if bodies else base

    def _step(self, node: Node) -> tuple[Any, Any]:
        if type(node.spec) is not ConditionalSpec:
            return super()._step(node)
        spec: ConditionalSpec = node.spec
        step = ConditionalStep(spec.condition, spec.type)
        for body in spec.bodies:
            steps: list[tuple[Any, Any]] = []
            self._flatten(body, steps)
            step.bodies.append(steps)
        return (_CONDITIONAL, step)

    def _expanded(self, steps: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        """``steps`` with the steps of every conditional body in them, recursively."""
        out: list[tuple[Any, Any]] = []
        for kind, spec in steps:
            out.append((kind, spec))
            if kind == _CONDITIONAL:
                for body in spec.bodies:
                    out.extend(self._expanded(body))
        return out

    def _step_refs(self, steps: list[tuple[Any, Any]]) -> frozenset[int]:
        return super()._step_refs(self._expanded(steps))

    def _step_kernels(self, steps: list[tuple[Any, Any]]) -> list[Function]:
        return super()._step_kernels(self._expanded(steps))

    def _conditions_of(self, steps: list[tuple[Any, Any]]) -> list[Condition]:
        found: dict[int, Condition] = {}
        for kind, spec in self._expanded(steps):
            if kind == _CONDITIONAL:
                found[spec.condition.handle] = spec.condition
        return list(found.values())

    def _launch_begins(self, st: Stream, ex: Exec) -> None:
        super()._launch_begins(st, ex)
        resets = [c for c in self._conditions_of(ex.steps) if c.flags & _ASSIGN_DEFAULT]
        if resets:

            def assign_defaults() -> None:
                for cond in resets:
                    cond.value = cond.default

            self._enqueue(st, "cuGraphLaunch", assign_defaults)

    def _enqueue(
        self,
        st: Stream,
        call: str,
        run: Callable[[], None] | None,
        refs: frozenset[int] = frozenset(),
        host: Callable[[], None] | None = None,
    ) -> int:
        if not getattr(self._inline, "on", False):
            return super()._enqueue(st, call, run, refs, host)
        # Inside a conditional node that runs: its bodies' work runs now, in order (no host work there).
        self._op_seq += 1
        st.inflight.append(Op(self._op_seq, refs, call))
        self._busy.add(st)
        if run is not None:
            run()
        if host is not None:
            host()
        return self._op_seq

    def _launch_step(self, st: Stream, kind: Any, spec: Any) -> None:
        if kind != _CONDITIONAL:
            super()._launch_step(st, kind, spec)
            return
        step: ConditionalStep = spec
        refs = self._step_refs([(kind, spec)])

        def run_body(body: list[tuple[Any, Any]]) -> None:
            for inner_kind, inner_spec in body:
                self._launch_step(st, inner_kind, inner_spec)

        def run() -> None:
            outer = getattr(self._inline, "on", False)
            self._inline.on = True
            try:
                self._evaluate(step, run_body)
            finally:
                self._inline.on = outer

        self._enqueue(st, "cuGraphLaunch", run, refs)

    def _evaluate(self, step: ConditionalStep, run_body: Callable[[list[tuple[Any, Any]]], None]) -> None:
        cond = step.condition
        if self._poison is not None or self._pending_fault is not None:
            return  # a faulted launch runs nothing more
        if step.type == C.CU_GRAPH_COND_TYPE_IF:
            if cond.value:
                run_body(step.bodies[0])
            elif len(step.bodies) > 1:
                run_body(step.bodies[1])
        elif step.type == C.CU_GRAPH_COND_TYPE_SWITCH:
            if cond.value < len(step.bodies):
                run_body(step.bodies[cond.value])
        else:
            for _ in range(MAX_ITERATIONS):
                if not cond.value or self._poison is not None or self._pending_fault is not None:
                    return
                run_body(step.bodies[0])
            # A GPU would loop on (until a watchdog, if any, ends the launch): stop and record it.
            self._note(
                self.misuse,
                "cuGraphLaunch",
                f"while node of condition {cond.handle:#x} ran {MAX_ITERATIONS} iterations without stopping",
                cond.handle,
            )
