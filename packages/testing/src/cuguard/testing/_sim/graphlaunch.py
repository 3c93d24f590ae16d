"""Instantiating, updating and launching the simulated driver's graphs.

:class:`SimGraphLaunch` builds on :class:`~cuguard.testing._sim.graphbuild.SimGraphBuild`.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.base import DEVICE_BASE, OK, SUCCESS, Status, api, h
from cuguard.testing._sim.graphbuild import SimGraphBuild
from cuguard.testing._sim.graphstate import CopySpec, Exec, Graph, KernelSpec, MemsetSpec, Node
from cuguard.testing._sim.state import Alloc, Event, Function, Stream

__all__ = ["SimGraphLaunch"]

R = cb.CUresult
T = cb.CUgraphNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE


class SimGraphLaunch(SimGraphBuild):
    """Executable graphs: instantiation, whole-graph update, destruction, upload and launch."""

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
