"""The simulated driver's graph registries, lookups and user objects.

:class:`SimGraphBase` builds on :class:`~cuguard.testing._sim.core.SimCore`; the graph classes
(:mod:`~cuguard.testing._sim.graphtopology`, :mod:`~cuguard.testing._sim.graphbuild`,
:mod:`~cuguard.testing._sim.graphlaunch`) build on it in turn.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.base import OK, SUCCESS, Status, api, h
from cuguard.testing._sim.core import SimCore
from cuguard.testing._sim.graphstate import Exec, Graph, Node, UserObject
from cuguard.testing._sim.state import Stream

__all__ = ["SimGraphBase"]

R = cb.CUresult
T = cb.CUgraphNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE


class SimGraphBase(SimCore):
    """Graph, node, executable-graph and user-object registries and lookups; user objects and their references."""

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
