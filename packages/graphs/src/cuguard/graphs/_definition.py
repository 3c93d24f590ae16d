"""Graph definitions: explicit CUDA graphs under construction and whole-graph operations.

Every mutation that takes several driver calls is all-or-nothing (B4, G3);
edge changes are made as the edges module describes. The node builders are
the builders module's (a base of :class:`GraphDefinition`): a new node is
created with its dependencies in one driver call, which is all-or-nothing by
itself. Arguments are validated before any driver call (E3).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cuguard.context import Context
from cuguard.errors import (
    CUDAError,
    ResourceClosedError,
    add_failure_note,
    driver,
    driver_token,
    format_handle,
    raise_status,
    report,
    report_error,
)
from cuguard.errors.lowlevel import wrong_kind
from cuguard.graphs import _compat, _lifetime
from cuguard.graphs._builders import NodeBuilders
from cuguard.graphs._common import _UNINSTALLED, _check_owners, _types
from cuguard.graphs._edges import apply_edges
from cuguard.graphs._executable import instantiate_definition
from cuguard.graphs._nodes import (
    _KINDS,
    _LIVE,
    _PLURAL,
    DefinitionFields,
    Node,
    _iterable,
    _order,
    close_definition,
    create_definition,
    forget_fields,
    setup_fields,
)
from cuguard.resources import Device
from cuguard.resources.lowlevel import OwnerTable, retain

if TYPE_CHECKING:
    from cuguard.graphs._conditional import GraphCondition

__all__ = ["GraphDefinition"]

_NO_DESTRUCTOR_SYNC = 1  # CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
_RETAIN_MOVE = 1  # CU_GRAPH_USER_OBJECT_MOVE


def _owner_key(obj: object) -> int:
    return id(obj)


class GraphDefinition(DefinitionFields, NodeBuilders):
    """An explicit CUDA graph under construction (a ``CUgraph``).

    ``GraphDefinition(device)`` creates an empty graph. ``device`` (a
    :class:`~cuguard.resources.Device`, a :class:`~cuguard.context.Context` or
    ``None``) is the context :meth:`instantiate` runs in and the device of
    :meth:`allocate` nodes; with ``None`` the context of the first node that
    has one (a buffer's, a kernel's, an event's) is used. Creating it needs no
    current context.

    Builders add nodes: :meth:`empty`, :meth:`join`, :meth:`memset`,
    :meth:`memcpy`, :meth:`launch`, :meth:`callback`, :meth:`record`,
    :meth:`wait`, :meth:`allocate`, :meth:`deallocate`, :meth:`embed`. Each
    takes the new node's dependencies and is all-or-nothing: one driver call
    creates the node together with its edges (the driver checks every
    dependency first), so when it fails there is no node and no edge.

    Lifetime: every buffer, kernel (and its module), event, callback and child
    graph a node uses is kept alive until CUDA has dropped this definition and
    every executable graph made from it, including launches still in flight
    (a CUDA user object tells cuguard, see :func:`flush_deferred`). The user
    object is created when first needed (the first node that uses something,
    or the first :meth:`instantiate`), so a builder or :meth:`instantiate` may
    also fail in ``cuUserObjectCreate`` or ``cuGraphRetainUserObject``; it
    then creates nothing.

    :meth:`close` (or ``with``, or garbage collection) destroys the graph.
    A definition is not thread-safe: mutate it from one thread at a time.
    """

    # Every field is DefinitionFields' (a compiled class in the compiled build).
    __slots__ = ()

    def __init__(self, device: Device | Context | None = None) -> None:
        create_definition(self, device)

    @classmethod
    def _adopt(
        cls, handle: Any, context: Context | None, owners: dict[int, object], next_order: int
    ) -> GraphDefinition:
        self = cls.__new__(cls)
        self._closed = True
        self._setup(handle, context, owners, next_order)
        return self

    def _setup(self, handle: Any, context: Context | None, owners: dict[int, object], next_order: int) -> None:
        """Adopt the new ``handle``; with owners, attach their user object, destroying the graph on failure (G1)."""
        setup_fields(self, handle, context, owners, next_order)
        if owners:
            try:
                self._attach()
            except BaseException as exc:
                (err,) = driver.cuGraphDestroy(handle)
                if err:
                    add_failure_note(exc, err, "cuGraphDestroy", handle)
                raise
        self._closed = False

    def _attach(self) -> Any:
        """Move a user object holding this definition's payload into the graph; return it.

        Deferred until something must be kept alive (the first owner, or the first
        :meth:`instantiate`), so building a graph of plain nodes costs no extra driver calls.
        The payload is a fresh dict that becomes ``_owners`` only on success: a failed attach
        leaves a user object whose (deferred) destructor drops a dict nobody else uses.
        Creates nothing when it raises.
        """
        payload = OwnerTable(self._owners)
        obj = _attach_payload(self._handle, payload)
        self._owners = payload
        self._payload = True
        self._shared = False
        self._uobj = obj
        return obj

    def _detach(self, obj: Any, exc: BaseException) -> None:
        """Undo :meth:`_attach` of a payload nothing uses yet (a failed instantiate); failures are notes."""
        try:
            (err,) = driver.cuGraphReleaseUserObject(self._handle, obj, 1)
        except Exception as undo_exc:  # noqa: BLE001 - attached as a note (G4)
            add_failure_note(exc, undo_exc)
            return
        if err:
            add_failure_note(exc, err, "cuGraphReleaseUserObject", obj)
            return  # still attached: keep using that payload
        self._owners = {}  # the released payload is dropped by its destructor; owners go in a new one
        self._payload = False
        self._uobj = None

    # --- state ---

    @property
    def handle(self) -> Any:
        """The ``CUgraph``; raises ``ResourceClosedError`` once closed."""
        self._check_open()
        return self._handle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the definition was collected)."""
        return self._closed

    @property
    def context(self) -> Context | None:
        """The context :meth:`instantiate` runs in, if known."""
        return self._context

    def _check_open(self) -> None:
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")
        if self._driver is not driver_token():
            raise ResourceClosedError(_UNINSTALLED.format(self))

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<GraphDefinition {format_handle(getattr(self, '_int', 0))}{state}>"

    def _own(self, item: object, param: str = "node") -> Node:
        """``item`` as a live node of this definition, or the E3 exception naming ``param``."""
        if not isinstance(item, Node):
            raise wrong_kind(param, "graph Nodes" if param in _PLURAL else "a graph Node", item)
        if item._graph is not self:
            raise ValueError(f"{item!r} belongs to another graph definition")
        item._check_live()
        return item

    def _wrap(self, handle: Any) -> Node:
        """The node of a handle the driver listed (a node cuguard did not make is wrapped once)."""
        if self._fresh:
            self._settle()
        key = int(handle)
        node = self._nodes.get(key)
        if node is None:
            err, kind = driver.cuGraphNodeGetType(handle)
            if err:
                raise_status(err, "cuGraphNodeGetType")
            node = Node._make(self, handle, _KINDS.get(int(kind), f"type{int(kind)}"), self._next_order, {})
            self._next_order += 1
            self._nodes[key] = node
            self._version += 1
        return node

    def _settle(self) -> None:
        """Key and number the nodes the hot builder made (it skips ``int(handle)``, the insert and the count).

        They take the next orders in the order they were made. Everything that numbers a node
        or reads ``_next_order`` settles first, so creation order is kept. The list is kept and
        only what was read is removed (one ``del``): a node the builder appends meanwhile (a
        collection or another thread reading the definition while it is built) waits for the
        next settle instead of being lost.
        """
        fresh = self._fresh
        if fresh:
            settled = fresh[:]
            nodes = self._nodes
            order = self._next_order
            for node in settled:
                nodes[node._int] = node
                node._order = order
                order += 1
            self._next_order = order
            del fresh[: len(settled)]

    # --- reading the topology from the driver ---

    @property
    def nodes(self) -> frozenset[Node]:
        """Every node of the definition, as the driver lists them (``cuGraphGetNodes``).

        Raises ``ResourceClosedError`` once closed and :class:`~cuguard.errors.CUDAError` if the
        driver refuses.
        """
        self._check_open()
        err, _, count = driver.cuGraphGetNodes(self._handle, 0)
        if err:
            raise_status(err, "cuGraphGetNodes")
        if not count:
            return frozenset()
        err, handles, count = driver.cuGraphGetNodes(self._handle, count)
        if err:
            raise_status(err, "cuGraphGetNodes")
        return frozenset(self._wrap(h) for h in list(handles)[:count])

    @property
    def edges(self) -> frozenset[tuple[Node, Node]]:
        """Every edge ``(from, to)`` of the definition, as the driver lists them (``cuGraphGetEdges``)."""
        self._check_open()
        err, _, _, count = _compat.get_edges(self._handle, 0)
        if err:
            raise_status(err, "cuGraphGetEdges")
        if not count:
            return frozenset()
        err, froms, tos, count = _compat.get_edges(self._handle, count)
        if err:
            raise_status(err, "cuGraphGetEdges")
        return frozenset((self._wrap(a), self._wrap(b)) for a, b in list(zip(froms, tos, strict=False))[:count])

    def _neighbours(self, node: Node, incoming: bool) -> list[Node]:
        query = _compat.node_dependencies if incoming else _compat.node_dependents
        call = "cuGraphNodeGetDependencies" if incoming else "cuGraphNodeGetDependentNodes"
        err, _, count = query(node._handle, 0)
        if err:
            raise_status(err, call)
        if not count:
            return []
        err, handles, count = query(node._handle, count)
        if err:
            raise_status(err, call)
        return [self._wrap(h) for h in handles[:count]]

    # --- owners (G5) ---

    def _root(self) -> GraphDefinition:
        """The definition whose payload keeps what this one's nodes use (a conditional body's is its root's)."""
        return self

    def _all_nodes(self) -> list[Node]:
        """Every node cuguard knows of this definition and of its conditional bodies."""
        self._settle()
        nodes = list(self._nodes.values())
        for body in self._bodies:
            body._settle()
            nodes.extend(body._nodes.values())
        return nodes

    def _stale(self, node: Node, old: Iterable[object], keep: set[int]) -> list[int]:
        """The keys of ``old`` (what ``node`` used) that no other node uses and ``keep`` does not hold."""
        candidates = {_owner_key(o) for o in old} - keep
        if not candidates:
            return []
        for other in self._all_nodes():
            if other is not node:
                for owner in other._info.get("_owners", ()):
                    candidates.discard(_owner_key(owner))
                if not candidates:
                    return []
        return [key for key in candidates if key in self._owners]

    def _privatize(self) -> tuple[Any, dict[int, object]] | None:
        """Give the definition a payload of its own before it drops owners (W5); return what to release after.

        The current payload is shared (an executable graph instantiated or updated from this
        definition holds its user object and keeps its objects by it), so nothing may be removed
        from it: a copy is attached under a new user object, and the caller releases the old one
        from this graph once its mutation
        succeeded (:meth:`_release_shared`), or undoes the copy (:meth:`_unprivatize`).
        Returns ``None`` when the payload is not shared. Raises, creating nothing, if the copy
        cannot be attached.
        """
        if not self._shared or not self._payload:
            return None
        old = (self._uobj, self._owners)
        payload = OwnerTable(self._owners)
        obj = _attach_payload(self._handle, payload)
        self._owners, self._uobj, self._shared = payload, obj, False
        return old

    def _unprivatize(self, old: tuple[Any, dict[int, object]], exc: BaseException) -> None:
        """Undo :meth:`_privatize` for a mutation that failed; a failed release is a note on ``exc``."""
        (err,) = driver.cuGraphReleaseUserObject(self._handle, self._uobj, 1)
        if err:
            add_failure_note(exc, err, "cuGraphReleaseUserObject", self._uobj)
            return  # the copy stays attached and in use: it holds everything the old payload does
        self._uobj, self._owners = old
        self._shared = True

    def _release_shared(self, old: tuple[Any, dict[int, object]]) -> None:
        """Release this graph's reference to the payload :meth:`_privatize` replaced; raises if refused.

        Whatever else holds that payload (executable graphs, launches in flight) keeps it alive.
        """
        (err,) = driver.cuGraphReleaseUserObject(self._handle, old[0], 1)
        if err:
            raise CUDAError(err, "cuGraphReleaseUserObject")

    def _drop(self, keys: Iterable[int]) -> None:
        """Forget owners nothing in this definition uses any more (its payload is its own: see _privatize)."""
        for key in keys:
            self._owners.pop(key, None)

    def _retain(self, owners: Iterable[object], read: Iterable[object] = ()) -> tuple[Any, list[int]]:
        """Keep ``owners`` (the nodes may write them) and ``read`` (only read) alive; return ``(attached, keys added)``.

        Attaches the payload's user object first if it is not yet (raises, adding nothing,
        if that fails); ``attached`` is that user object when this call attached it, so a
        mutation that then fails can detach it again (G1), else ``None``.
        """
        attached = None if self._payload else self._attach()
        return attached, retain(self._owners, owners, read)  # memory's close() now asks for graphs using it (W5)

    def _unretain(self, retained: tuple[Any, list[int]], exc: BaseException) -> None:
        """Undo :meth:`_retain` for a mutation that did not happen (nothing in CUDA uses them).

        A user object attached for it is released again; a failure to do so is a note on ``exc``.
        """
        attached, keys = retained
        for key in keys:
            self._owners.pop(key, None)
        if attached is not None:
            self._detach(attached, exc)

    # --- edges (B4) ---

    def _check_no_memory_nodes(self, what: str) -> None:
        """CUDA freezes graphs holding memory nodes: refuse removals and clones before the driver (E3)."""
        if any(node._kind in ("mem_alloc", "mem_free") for node in self._nodes.values()):
            raise ValueError(f"{self!r} holds memory allocation or free nodes, so it cannot {what} (a CUDA rule)")

    def _check_no_conditional_nodes(self, what: str) -> None:
        """CUDA neither clones nor embeds graphs holding conditional nodes: refuse before the driver (E3)."""
        if any(node._kind == "conditional" for node in self._nodes.values()):
            raise ValueError(f"{self!r} holds conditional nodes, so it cannot {what} (a CUDA rule)")

    def connect(self, *edges: tuple[Node, Node]) -> None:
        """Add the edges ``(from, to)``, all or none.

        Strict, unlike the set views: an edge that exists already, an edge
        given twice, a self edge or a node of another definition raise
        ``ValueError`` before any driver call; so does an edge that would
        close a cycle (the message names the nodes of the cycle; the edges
        are listed with ``cuGraphGetEdges`` first, whose failure raises
        :class:`~cuguard.errors.CUDAError` with nothing changed). Edges are added one driver call
        each, in the order given; on failure the added ones are removed again
        in reverse order (an edge whose removal fails remains and is named in a
        note on the exception).
        """
        self._check_open()
        pairs = self._pairs(edges)
        for a, b in pairs:
            if a is b:
                raise ValueError(f"a node cannot depend on itself: {a!r}")
        current = self._edges_from({a for a, _ in pairs})
        for a, b in pairs:
            if (a, b) in current:
                raise ValueError(f"the edge {a!r} -> {b!r} exists already")
        apply_edges(self, [], pairs)

    def disconnect(self, *edges: tuple[Node, Node]) -> None:
        """Remove the edges ``(from, to)``, all or none.

        An edge that does not exist or is given twice raises ``ValueError``
        before any driver call. Edges are removed one driver call each, in the
        order given; on failure the removed ones are added back in reverse
        order (an edge that cannot be added back stays removed and is named in
        a note on the exception).
        """
        self._check_open()
        pairs = self._pairs(edges)
        current = self._edges_from({a for a, _ in pairs})
        for a, b in pairs:
            if (a, b) not in current:
                raise ValueError(f"there is no edge {a!r} -> {b!r}")
        apply_edges(self, pairs, [])

    def _pairs(self, edges: Iterable[object]) -> list[tuple[Node, Node]]:
        pairs: list[tuple[Node, Node]] = []
        seen: set[tuple[int, int]] = set()
        for edge in _iterable(edges, "edges"):
            if (
                not isinstance(edge, tuple)
                or len(edge) != 2
                or not isinstance(edge[0], Node)
                or not isinstance(edge[1], Node)
            ):
                inner = (
                    f"a tuple of ({', '.join(type(x).__name__ for x in edge)})"
                    if isinstance(edge, tuple)
                    else type(edge).__name__
                )
                raise TypeError(f"edges must be (from, to) tuples of graph Nodes, not {inner}")
            a, b = self._own(edge[0], "edges"), self._own(edge[1], "edges")
            key = (id(a), id(b))
            if key in seen:
                raise ValueError(f"the edge {a!r} -> {b!r} is given twice")
            seen.add(key)
            pairs.append((a, b))
        return pairs

    def _edges_from(self, sources: set[Node]) -> set[tuple[Node, Node]]:
        return {(a, b) for a in sources for b in self._neighbours(a, incoming=False)}

    # --- whole-graph operations ---

    def clone(self) -> GraphDefinition:
        """An independent copy of the definition (``cuGraphClone``).

        The copy keeps everything the nodes use alive on its own. Map a node
        of this definition to its copy with ``copy.find_node(node)``. Creates
        nothing when it raises (G1): a partly built copy is destroyed. A
        definition holding memory allocation, memory free or conditional nodes
        cannot be cloned (a CUDA rule): ``ValueError`` before any driver call.
        """
        self._check_open()
        self._check_no_memory_nodes("be cloned")
        self._check_no_conditional_nodes("be cloned")  # CUDA_ERROR_NOT_SUPPORTED on an H200
        _check_owners(self, self._owners, "cloned")  # CUDA copies every node now (S2, O4)
        err, handle = driver.cuGraphClone(self._handle)
        if err:
            raise_status(err, "cuGraphClone")
        self._settle()  # (before _next_order is read)
        copy = GraphDefinition._adopt(handle, self._context, OwnerTable(self._owners), self._next_order)
        try:
            for node in sorted(self._nodes.values(), key=_order):
                if node._state != _LIVE:
                    continue  # a leaked node's handle is never used again; its copy is wrapped when listed
                err, found = driver.cuGraphNodeFindInClone(node._handle, handle)
                if err:
                    raise_status(err, "cuGraphNodeFindInClone")
                twin = Node._make(copy, found, node._kind, _order(node), dict(node._info))
                if "branches" in twin._info:
                    twin._info["branches"] = ()  # CUDA copied the bodies; the driver cannot list them
                copy._nodes[twin._int] = twin
                copy._found[node._int] = twin
        except BaseException as exc:
            copy._discard(exc)
            raise
        copy._source = self._int
        return copy

    def find_node(self, original: Node) -> Node:
        """The node of this clone that copies ``original`` (a node of the definition it was cloned from)."""
        self._check_open()
        if not isinstance(original, Node):
            raise wrong_kind("original", "a graph Node", original)
        twin = self._found.get(original._int) if original._graph._int == self._source else None
        if twin is None:
            raise ValueError(f"{original!r} is not a node of the definition {self!r} was cloned from")
        return twin

    def _signature(self) -> tuple[tuple[str, ...], frozenset[tuple[int, int]], list[Node]]:
        """The shape (node kinds in creation order, edges by creation index), read from the driver.

        Cached until cuguard next changes the definition (any node added, destroyed or
        wrapped, any edge change; a builder's failed attempt counts too, but for the empty-node
        builder's, which leaves the graph as it was). Changes made to the ``CUgraph`` behind
        cuguard's back (through :attr:`handle`) are not seen until then; the shape only
        explains :meth:`Graph.update` refusals, the driver still checks the real graph.
        The cache's key is ``_version + _next_order``: each change adds to one of the two and
        neither ever decreases, so the sum changes with every change (each node added takes
        an order, so adding one needs no other count; the empty-node builder's nodes take theirs
        when settled, done here before the key is read).
        """
        if self._fresh:
            self._settle()
        shape = self._shape
        if shape is not None and shape[0] == self._version + self._next_order:
            return shape[1]
        nodes = sorted(self.nodes, key=_order)
        index = {node: i for i, node in enumerate(nodes)}
        edges = frozenset((index[a], index[b]) for a, b in self.edges)
        signature = (tuple(n._kind for n in nodes), edges, nodes)
        self._shape = (self._version + self._next_order, signature)  # after the reads: wrapping nodes changes both
        return signature

    # An executable Graph made from the definition: the function itself (its docstring says what happens
    # on failure), so that the compiled build calls it without a Python frame.
    instantiate = instantiate_definition

    def _add_condition(self, condition: GraphCondition) -> None:
        """Record a condition made in this definition or one of its bodies (see :meth:`instantiate`)."""
        if self._conditions is None:
            self._conditions = []
        self._conditions.append(condition)

    # Destroy the graph now: the function itself, so that the compiled build calls it without a Python frame.
    close = close_definition

    def _forget(self) -> None:
        """Drop this object's own references to nodes and owners (the payload keeps what CUDA may use)."""
        forget_fields(self)

    def _collect(self) -> None:
        """Destroy a collected definition; failures are warnings (W1)."""
        if self._closed or self._driver is not driver_token():
            return
        self._closed = True
        self._forget()
        try:
            (err,) = driver.cuGraphDestroy(self._handle)
        except CUDAError as exc:  # the driver itself is gone
            report_error(exc, self._handle, "the graph was leaked", context=self._context)
            return
        if err:
            report(err, "cuGraphDestroy", self._handle, "the graph was leaked", context=self._context)


def _attach_payload(graph: Any, owners: dict[int, object]) -> Any:
    """Create the user object of ``owners`` and move it into ``graph``; return it; create nothing on failure."""
    token = _lifetime.register_payload(owners)
    err, obj = driver.cuUserObjectCreate(token, _destructor(), 1, _NO_DESTRUCTOR_SYNC)
    if err:
        _lifetime.unregister_payload(token)
        raise_status(err, "cuUserObjectCreate")
    (err,) = driver.cuGraphRetainUserObject(graph, obj, 1, _RETAIN_MOVE)
    if err:
        error = CUDAError(err, "cuGraphRetainUserObject")
        (rerr,) = driver.cuUserObjectRelease(obj, 1)  # its destructor queues the (unused) payload's release
        if rerr:
            add_failure_note(error, rerr, "cuUserObjectRelease", obj)
        raise error
    return obj


_destructor_fn: list[Any] = []


def _destructor() -> Any:
    """The ``CUhostFn`` of the user-object destructor thunk (made once)."""
    if not _destructor_fn:
        _destructor_fn.append(_types().CUhostFn(_lifetime.destructor_address()))
    return _destructor_fn[0]
