"""Graph nodes, the live set-like views of their edges, and the parameters of node kinds.

A :class:`Node` is made by the builders of its definition (see the definitions module); its
``pred``/``succ`` are :class:`EdgeView` objects, whose mutations are all-or-nothing (see the edges
module). Arguments are validated before any driver call (E3).
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator, MutableSet, Sequence
from typing import TYPE_CHECKING, Any

from cuguard.context import Context, call_in, init_driver
from cuguard.errors import (
    CUDAError,
    ResourceClosedError,
    add_failure_note,
    driver,
    driver_token,
    format_handle,
    raise_status,
)
from cuguard.errors.lowlevel import SETTLED_TOKEN, int_argument, is_integer, refuse_construction, source_new, wrong_kind
from cuguard.errors.owners import Owned, Unique  # from their defining module: the compiled classes derive from them
from cuguard.graphs._common import _UNINSTALLED, _types
from cuguard.graphs._edges import apply_edges
from cuguard.resources import (
    Buffer,
    Device,
    Event,
    Kernel,
    LaunchConfig,
    PinnedBuffer,
    pack_args,
)
from cuguard.resources.lowlevel import check_read_only, follow_compiled, memory_uses

if TYPE_CHECKING:
    from cuguard.graphs._conditional import ConditionalBody, GraphCondition
    from cuguard.graphs._definition import GraphDefinition
    from cuguard.graphs._executable import Graph

__all__ = [
    "Collected",
    "DefinitionFields",
    "EdgeView",
    "Node",
    "add_empty",
    "close_definition",
    "context_of",
    "create_definition",
    "forget_fields",
    "setup_fields",
]

# The compiled build's driver calls while in use and the seam routes to the real bindings, else None (_fast).
# In the compiled build it is typed (_nodes.pxd): its methods are C calls.
_fp: Any = None


def _compiled_changed(ops: Any) -> None:
    global _fp
    _fp = ops


follow_compiled(_compiled_changed)

# Node states.
_LIVE = 0
_DESTROYED = 1
_LEAKED = 2

# CUgraphNodeType values (stable across CUDA 12 and 13) -> the names cuguard uses.
_KINDS = {
    0: "kernel",
    1: "memcpy",
    2: "memset",
    3: "host",
    4: "graph",
    5: "empty",
    6: "wait_event",
    7: "event_record",
    8: "ext_semas_signal",
    9: "ext_semas_wait",
    10: "mem_alloc",
    11: "mem_free",
    12: "batch_mem_op",
    13: "conditional",
}


class Node(Unique):
    """A node of a :class:`GraphDefinition`.

    Created by the definition's builders (``g.empty()``, ``g.launch(...)``...)
    or by the same builders on a node, which make the new node depend on it.
    ``pred`` and ``succ`` are live set-like views of the edges into and out of
    the node, read from the driver each time. ``type`` names the node kind
    (``"empty"``, ``"kernel"``, ``"memset"``, ``"memcpy"``, ``"host"``,
    ``"event_record"``, ``"wait_event"``, ``"mem_alloc"``, ``"mem_free"``,
    ``"graph"``). Nodes compare by identity; a definition has exactly one
    ``Node`` per driver node.
    """

    __slots__ = ("__weakref__", "_graph", "_h", "_info", "_key", "_kind", "_order", "_state")

    _graph: GraphDefinition
    # The node's handle is kept as the bindings' CUgraphNode (_h), as its address (_key), or both: the
    # pure-Python builder keeps the handle and leaves the address for later, the compiled empty-node
    # builder keeps the address and leaves the handle for later (_handle makes it when asked).
    _h: Any
    _key: int | None
    _kind: str
    _order: int | None  # None until its definition numbers it (a node of the empty-node builder: see _order)
    _state: int
    _info: dict[str, Any]

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(Node, "the builders of GraphDefinition and Node (g.empty(), g.launch(...), ...)")

    @classmethod
    def _make(cls, graph: GraphDefinition, handle: Any, kind: str, order: int, info: dict[str, Any]) -> Node:
        self = cls.__new__(cls)
        self._graph = graph
        self._h = handle
        self._key = int(handle)
        self._kind = kind
        self._order = order
        self._state = _LIVE
        self._info = info
        return self

    @property
    def _handle(self) -> Any:
        """The ``CUgraphNode`` (for a node the compiled builder made, made from its address on first use)."""
        handle = self._h
        if handle is None:
            handle = self._h = _types().CUgraphNode(self._key)
        return handle

    @property
    def _int(self) -> int:
        """The handle as an int (what the definition keys its nodes by), computed once."""
        key = self._key
        if key is None:
            key = self._key = int(self._h)
        return key

    # --- state ---

    @property
    def graph(self) -> GraphDefinition:
        """The definition this node belongs to."""
        return self._graph

    @property
    def type(self) -> str:
        """The node kind, e.g. ``"kernel"``."""
        return self._kind

    @property
    def handle(self) -> Any:
        """The ``CUgraphNode``; raises ``ResourceClosedError`` once destroyed (or leaked)."""
        self._check_live()
        return self._handle

    @property
    def closed(self) -> bool:
        """Whether the node was destroyed, or leaked by a failed :meth:`destroy`."""
        return self._state != _LIVE

    def _check_live(self) -> None:
        if self._state != _LIVE:
            raise ResourceClosedError(f"{self!r} was {'destroyed' if self._state == _DESTROYED else 'leaked'}")
        graph = self._graph
        if graph._closed:
            raise ResourceClosedError(f"{self!r} belongs to a closed graph definition")
        if graph._driver is not driver_token():
            graph._check_open()

    def __repr__(self) -> str:
        state = {_LIVE: "", _DESTROYED: " destroyed", _LEAKED: " leaked"}[self._state]
        order = self._order
        if order is None:  # not numbered yet: the number its definition will give it (read, not settled)
            graph = self._graph
            fresh = graph._fresh
            order = next((graph._next_order + i for i, node in enumerate(fresh) if node is self), None)
        number = "?" if order is None else order  # None: its definition was closed before it was numbered
        return f"<Node {self._kind} #{number} {format_handle(self._int)}{state}>"

    # --- parameters ---

    @property
    def ptr(self) -> int:
        """The device address a ``mem_alloc`` node allocates; ``TypeError`` for other kinds."""
        if self._kind != "mem_alloc" or "ptr" not in self._info:
            raise TypeError(f"{self!r} is not a memory allocation node")
        return int(self._info["ptr"])

    @property
    def branches(self) -> tuple[ConditionalBody, ...]:
        """The bodies of a conditional node, in CUDA's order; ``TypeError`` for other kinds.

        ``(then,)`` for :meth:`GraphDefinition.if_then` and ``while_loop``,
        ``(then, else)`` for ``if_else``, one per value for ``switch``. Empty
        for the copy of a conditional node in a clone (CUDA copied the bodies
        and cannot list them) and for conditional nodes cuguard did not make.
        """
        if self._kind != "conditional":
            raise TypeError(f"{self!r} is not a conditional node")
        return tuple(self._info.get("branches", ()))

    @property
    def condition(self) -> GraphCondition | None:
        """The condition of a conditional node (``None`` if cuguard did not make it); ``TypeError`` for other kinds."""
        if self._kind != "conditional":
            raise TypeError(f"{self!r} is not a conditional node")
        return self._info.get("condition")

    @property
    def params(self) -> dict[str, Any]:
        """What the node was built with (a copy): e.g. ``config``, ``kernel``, ``args``, ``read_only`` for kernels."""
        return {key: value for key, value in self._info.items() if not key.startswith("_")}

    def set_args(self, *args: Any) -> None:
        """Replace the arguments of a kernel node; see :meth:`set_params`."""
        self.set_params(args=args)

    def set_params(
        self,
        config: LaunchConfig | None = None,
        kernel: Kernel | None = None,
        args: Iterable[Any] | None = None,
        *,
        read_only: Sequence[int] | None = None,
    ) -> None:
        """Change a kernel node's launch configuration, kernel or arguments (``None`` keeps each).

        ``read_only`` names the arguments the kernel only reads, as for
        :meth:`GraphDefinition.launch`; ``None`` keeps the node's when ``args``
        is kept and names none otherwise. Memory the node wrote before stays
        counted as written by the graph while the graph keeps it (the race
        checker errs towards reporting, B7).

        One driver call (``cuGraphKernelNodeSetParams``). The new buffers, kernel
        and module are kept alive by the definition before the call (G5). If
        the call fails, :class:`~cuguard.errors.CUDAError` is raised and the
        node keeps its previous parameters; the objects it newly referenced are
        released again. If the caller's context cannot be restored afterwards
        (C2), the old parameters are put back first; only if that fails too
        (a note on the error says so) does the node keep the new parameters,
        and then what they use stays alive.

        What only the previous parameters used (their argument block, buffers
        no other node uses, a replaced kernel) is released by the definition
        once the call succeeded, so repeated calls do not accumulate. Executable
        graphs already instantiated keep the old parameters (use
        :meth:`Graph.update` or :meth:`Graph.set_kernel_params`) and keep what
        those use alive until CUDA drops them (W5): when such a graph shares
        the definition's payload (clones and parent graphs keep their own
        copies of what they use), the definition first moves to a copy of it
        under a new CUDA user object
        (``cuUserObjectCreate``, ``cuGraphRetainUserObject``) and releases its
        reference to the shared one afterwards (``cuGraphReleaseUserObject``).
        A failure of any of these raises :class:`~cuguard.errors.CUDAError`
        with the node's previous parameters in place (a failed release puts
        them back; if that fails too, a note says the new parameters stay, and
        everything both use stays alive).
        """
        if self._kind != "kernel":
            raise TypeError(f"set_params() needs a kernel node, not {self!r}")
        self._check_live()
        graph = self._graph
        new_config = self._info["config"] if config is None else config
        new_kernel = self._info["kernel"] if kernel is None else kernel
        new_args = tuple(self._info["args"] if args is None else args)
        if read_only is None:
            read_only = self._info.get("read_only", ()) if args is None else ()
        params, owners, read = _kernel_params(new_config, new_kernel, new_args, read_only)
        used = (*owners, *read)
        root = graph._root()
        stale = root._stale(self, self._info.get("_owners", ()), {id(o) for o in used})
        swap = root._privatize() if stale else None  # raises creating nothing
        try:
            retained = root._retain(owners, read)
        except BaseException as exc:
            if swap is not None:
                root._unprivatize(swap, exc)
            raise
        node = self._handle
        old_params = self._info["_params"]
        applied: list[bool] = []
        context = new_kernel.module.context

        def set_node() -> None:
            (err,) = driver.cuGraphKernelNodeSetParams(node, params)
            if err:
                raise_status(err, "cuGraphKernelNodeSetParams")
            applied.append(True)

        def revert(_: None) -> None:
            # The caller's context could not be restored (C2): put the old parameters back.
            (err,) = driver.cuGraphKernelNodeSetParams(node, old_params)
            if err:
                raise_status(err, "cuGraphKernelNodeSetParams")
            applied.clear()

        # In the kernel's context: the driver may not be asked about a kernel with no context current.
        try:
            call_in(context, set_node, revert)
            if swap is not None:
                try:
                    root._release_shared(swap)
                except BaseException as exc:
                    try:
                        call_in(context, revert, None, None)
                    except BaseException as undo:  # noqa: BLE001 - attached as a note (G4)
                        add_failure_note(exc, undo)
                        exc.add_note(f"{self!r} keeps its new parameters; what both sets use stays alive")
                    raise
        except BaseException as exc:
            if applied:  # the new parameters stayed (their revert failed): keep what they use (G5)
                self._info.update(
                    config=new_config,
                    kernel=new_kernel,
                    args=new_args,
                    read_only=read_only,
                    _params=params,
                    _owners=used,
                )
            else:
                root._unretain(retained, exc)
                if swap is not None:
                    root._unprivatize(swap, exc)
            raise
        self._info.update(
            config=new_config, kernel=new_kernel, args=new_args, read_only=read_only, _params=params, _owners=used
        )
        root._drop(stale)  # its payload is its own now: nothing in CUDA uses what only the old ones used

    # --- edges ---

    @property
    def pred(self) -> EdgeView:
        """The nodes this node depends on: a live, mutable set-like view (see :class:`EdgeView`)."""
        return EdgeView(self, incoming=True)

    @pred.setter
    def pred(self, nodes: Iterable[Node]) -> None:
        if isinstance(nodes, EdgeView) and nodes._node is self and nodes._incoming:
            return
        EdgeView(self, incoming=True)._replace(nodes)

    @property
    def succ(self) -> EdgeView:
        """The nodes that depend on this node: a live, mutable set-like view (see :class:`EdgeView`)."""
        return EdgeView(self, incoming=False)

    @succ.setter
    def succ(self, nodes: Iterable[Node]) -> None:
        if isinstance(nodes, EdgeView) and nodes._node is self and not nodes._incoming:
            return
        EdgeView(self, incoming=False)._replace(nodes)

    def destroy(self) -> None:
        """Remove the node and its edges from the definition. Idempotent.

        One driver call. If it fails, :class:`~cuguard.errors.CUDAError` is
        raised and the node is *leaked*: it stays in the definition with its
        edges (the driver still lists it), but cuguard never passes its handle
        to the driver again (a second destroy of a node crashes the real
        driver), so it cannot be used, connected, disconnected or destroyed.
        What the node used stays alive until the definition and its executable
        graphs are gone (they may use it). In a definition holding memory
        allocation or free nodes, CUDA forbids removing nodes: ``ValueError``
        is raised before any driver call and the node stays usable.
        """
        if self._state != _LIVE:
            return
        self._graph._check_open()
        self._graph._check_no_memory_nodes("have nodes removed")
        self._graph._settle()
        self._state = _DESTROYED
        self._graph._version += 1
        (err,) = driver.cuGraphDestroyNode(self._handle)
        if err:
            self._state = _LEAKED
            raise CUDAError(
                err,
                "cuGraphDestroyNode",
                f"{self!r} was leaked: it stays in the definition with its edges and is never used again",
            )
        self._graph._nodes.pop(self._int, None)
        for body in self._info.get("branches", ()):
            body._close_with_node()  # CUDA destroyed the bodies with the node

    # --- builders: a new node that depends on this one ---

    def join(self, *nodes: Node) -> Node:
        """An empty node that depends on this node and on ``nodes``.

        Same arguments, failures and all-or-nothing behaviour as the definition's builder of the
        same name, with this node as a dependency.
        """
        return add_empty(self._graph, self, nodes)

    def empty(self) -> Node:
        """An empty node that depends on this node.

        Same arguments, failures and all-or-nothing behaviour as the definition's builder of the
        same name, with this node as a dependency.
        """
        return add_empty(self._graph, self, ())

    def memset(self, dst: Buffer, value: int, size: int | None = None, *, element_size: int = 1) -> Node:
        """A memset node after this node; see :meth:`GraphDefinition.memset`."""
        return self._graph.memset(dst, value, size, element_size=element_size, deps=(self,))

    def memcpy(self, dst: Buffer | PinnedBuffer, src: Buffer | PinnedBuffer, size: int | None = None) -> Node:
        """A memcpy node after this node; see :meth:`GraphDefinition.memcpy`."""
        return self._graph.memcpy(dst, src, size, deps=(self,))

    def launch(self, config: LaunchConfig, kernel: Kernel, *args: Any, read_only: Sequence[int] = ()) -> Node:
        """A kernel node after this node; see :meth:`GraphDefinition.launch`."""
        return self._graph.launch(config, kernel, *args, deps=(self,), read_only=read_only)

    def callback(self, fn: Callable[[], object]) -> Node:
        """A host-callback node after this node; see :meth:`GraphDefinition.callback`."""
        return self._graph.callback(fn, deps=(self,))

    def record(self, event: Event) -> Node:
        """An event-record node after this node.

        Same arguments, failures and all-or-nothing behaviour as the definition's builder of the
        same name, with this node as a dependency.
        """
        return self._graph.record(event, deps=(self,))

    def wait(self, event: Event) -> Node:
        """An event-wait node after this node.

        Same arguments, failures and all-or-nothing behaviour as the definition's builder of the
        same name, with this node as a dependency.
        """
        return self._graph.wait(event, deps=(self,))

    def allocate(self, size: int, *, device: Device | int | None = None) -> Node:
        """A memory-allocation node after this node; see :meth:`GraphDefinition.allocate`."""
        return self._graph.allocate(size, device=device, deps=(self,))

    def deallocate(self, ptr: int | Node) -> Node:
        """A memory-free node after this node; see :meth:`GraphDefinition.deallocate`."""
        return self._graph.deallocate(ptr, deps=(self,))

    def embed(self, child: GraphDefinition) -> Node:
        """A child-graph node after this node; see :meth:`GraphDefinition.embed`."""
        return self._graph.embed(child, deps=(self,))

    def if_then(self, condition: GraphCondition) -> Node:
        """A conditional if node after this node; see :meth:`GraphDefinition.if_then`."""
        return self._graph.if_then(condition, deps=(self,))

    def if_else(self, condition: GraphCondition) -> Node:
        """A conditional if-else node after this node; see :meth:`GraphDefinition.if_else`."""
        return self._graph.if_else(condition, deps=(self,))

    def while_loop(self, condition: GraphCondition) -> Node:
        """A conditional while node after this node; see :meth:`GraphDefinition.while_loop`."""
        return self._graph.while_loop(condition, deps=(self,))

    def switch(self, condition: GraphCondition, count: int) -> Node:
        """A conditional switch node after this node; see :meth:`GraphDefinition.switch`."""
        return self._graph.switch(condition, count, deps=(self,))


class EdgeView(MutableSet[Node]):
    """The predecessors (``node.pred``) or successors (``node.succ``) of a node, live.

    Reading (``in``, iteration, ``len``, comparisons) asks the driver each
    time. Mutations follow set semantics (``add`` of a present node and
    ``discard`` of an absent one do nothing) and are all-or-nothing:
    ``add``, ``discard``, ``remove``, ``update``, ``difference_update``,
    ``clear``, ``|=``, ``-=``, ``&=``, ``^=`` and assignment
    (``node.pred = {...}``, which replaces every edge of that side) each
    either make every edge change or leave the definition as it was. Edges are
    changed one driver call each, removals first (in node-creation order), then
    additions; when a step fails, the completed steps are undone in reverse. If
    an undo step fails too, its failure is a note on the raised exception and
    the edge it concerned stays as the failed step left it: an added edge that
    could not be removed again remains, a removed edge that could not be added
    back stays removed. Nothing else can remain.

    Elements must be live nodes of the same definition (``TypeError`` for
    other objects, ``ValueError`` for nodes of another definition or a self
    edge, ``ResourceClosedError`` for destroyed or leaked nodes), checked
    before any driver call. A change that would leave a cycle raises
    ``ValueError`` naming its nodes before any edge changes.
    """

    __slots__ = ("_incoming", "_node")

    def __init__(self, node: Node, incoming: bool) -> None:
        self._node = node
        self._incoming = incoming

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> set[Any]:
        return set(it)

    def _current(self) -> set[Node]:
        node = self._node
        node._check_live()
        return set(node._graph._neighbours(node, self._incoming))

    def _edge(self, other: Node) -> tuple[Node, Node]:
        return (other, self._node) if self._incoming else (self._node, other)

    def _valid(self, items: Iterable[object], param: str) -> list[Node]:
        graph = self._node._graph
        out: list[Node] = []
        seen: set[int] = set()
        for item in _iterable(items, param):
            other = graph._own(item, param)
            if other is self._node:
                raise ValueError(f"a node cannot depend on itself: {other!r}")
            if id(other) not in seen:
                seen.add(id(other))
                out.append(other)
        return out

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, Node):
            return False
        return item in self._current()

    def __iter__(self) -> Iterator[Node]:
        return iter(sorted(self._current(), key=_order))

    def __len__(self) -> int:
        return len(self._current())

    def __repr__(self) -> str:
        side = "pred" if self._incoming else "succ"
        return f"<{side} of {self._node!r}: {sorted(self._current(), key=_order)!r}>"

    def add(self, value: Node) -> None:
        """Add the edge to or from ``value``; nothing if it exists."""
        self.update((value,))

    def discard(self, value: Node) -> None:
        """Remove the edge to or from ``value``; nothing if there is none."""
        self.difference_update((value,))

    def remove(self, value: Node) -> None:
        """Remove the edge to or from ``value``; ``KeyError`` if there is none."""
        (other,) = self._valid((value,), "value")
        if other not in self._current():
            raise KeyError(value)
        self.difference_update((other,))

    def update(self, *others: Iterable[Node]) -> None:
        """Add edges to or from every node of ``others`` (all-or-nothing)."""
        wanted = self._valid([item for it in others for item in _iterable(it, "others")], "others")
        current = self._current()
        adds = [self._edge(o) for o in sorted(wanted, key=_order) if o not in current]
        apply_edges(self._node._graph, [], adds)

    def difference_update(self, *others: Iterable[Node]) -> None:
        """Remove the edges to or from every node of ``others`` that has one (all-or-nothing)."""
        unwanted = self._valid([item for it in others for item in _iterable(it, "others")], "others")
        current = self._current()
        removes = [self._edge(o) for o in sorted(unwanted, key=_order) if o in current]
        apply_edges(self._node._graph, removes, [])

    def clear(self) -> None:
        """Remove every edge of this side (all-or-nothing)."""
        self._replace(())

    def pop(self) -> Node:
        """Remove and return one node of this side; ``KeyError`` if empty."""
        current = sorted(self._current(), key=_order)
        if not current:
            raise KeyError("pop from an empty edge view")
        self.difference_update((current[0],))
        return current[0]

    def _replace(self, nodes: Iterable[object]) -> None:
        wanted = set(self._valid(nodes, "nodes"))
        current = self._current()
        removes = [self._edge(o) for o in sorted(current - wanted, key=_order)]
        adds = [self._edge(o) for o in sorted(wanted - current, key=_order)]
        apply_edges(self._node._graph, removes, adds)

    def __ior__(self, other: Iterable[Any]) -> EdgeView:  # type: ignore[misc]
        self.update(other)
        return self

    def __isub__(self, other: Iterable[Any]) -> EdgeView:
        self.difference_update(other)
        return self

    def __iand__(self, other: Iterable[Any]) -> EdgeView:
        keep = set(self._valid(other, "other"))
        self.difference_update(self._current() - keep)
        return self

    def __ixor__(self, other: Iterable[Any]) -> EdgeView:  # type: ignore[misc]
        toggled = set(self._valid(other, "other"))
        current = self._current()
        removes = [self._edge(o) for o in sorted(toggled & current, key=_order)]
        adds = [self._edge(o) for o in sorted(toggled - current, key=_order)]
        apply_edges(self._node._graph, removes, adds)
        return self


_PLURAL = frozenset({"deps", "nodes", "others", "other", "edges"})


class Collected(Owned):
    """Collection of a definition, an executable graph or a capture's builder: ``_collect``, or nothing.

    A compiled class in the compiled build (the finalizer compiled too), the base of the compiled
    ``DefinitionFields`` and ``Graph`` and of the Python ``GraphBuilder``. Nothing is released when
    the object is closed or was never fully made, during interpreter shutdown (S1), or when its driver
    was uninstalled (O3); otherwise the release runs now or on the release thread (O5), its failures
    warnings (W1).
    """

    __slots__ = ()  # its subclasses have the _closed and _driver it reads

    # sys.is_finalizing, bound in the class: at the very end of finalization the sys module (and this
    # module's globals) may be cleared while such an object is still alive (S1).
    _finalizing = staticmethod(sys.is_finalizing)

    def __del__(self) -> None:
        if getattr(self, "_closed", True) or self._finalizing():
            return
        if getattr(self, "_driver", None) is not driver_token():
            return  # its driver was uninstalled: nothing of it is released here or said (O3)
        self._collected()


class DefinitionFields(Collected):
    """The state of a graph definition: a base of ``GraphDefinition`` only.

    In the compiled build it is a compiled class (``_nodes.pxd``) whose fields are C slots, so that
    :func:`add_empty` and the definition's creation and release read and write them without a lookup.
    """

    __slots__ = (
        "__weakref__",
        "_bodies",
        "_closed",
        "_conditions",
        "_context",
        "_driver",
        "_executables",
        "_found",
        "_fresh",
        "_handle",
        "_int",
        "_next_order",
        "_nodes",
        "_owners",
        "_payload",
        "_shape",
        "_shared",
        "_source",
        "_uobj",
        "_version",
    )

    _closed: bool
    _driver: Any  # the driver_token() it was made under
    _fresh: list[Node]  # nodes the hot builders made, not yet keyed in _nodes (see _settle)
    _handle: Any
    _int: int  # the handle's address
    _next_order: int
    _version: int
    _context: Context | None
    _nodes: dict[int, Node]
    _owners: dict[int, object]
    _payload: bool
    _shared: bool  # whether an executable graph reads this very payload (see GraphDefinition._privatize)
    _uobj: Any  # the payload's user object while attached
    _bodies: list[Any]  # the bodies of its conditional nodes, nested ones included
    # Conditions made in it and its bodies, and (once it has some) weak references to the executable
    # graphs made from it: CUDA instantiates a graph with conditions once at a time, all of them used.
    # Both are None until the first condition.
    _conditions: list[GraphCondition] | None
    _executables: list[weakref.ref[Graph]] | None
    _found: dict[int, Node]
    _source: int
    _shape: tuple[int, tuple[tuple[str, ...], frozenset[tuple[int, int]], list[Node]]] | None


def context_of(device: Device | Context | None) -> Context | None:
    """The context a definition made for ``device`` instantiates in (``TypeError`` for anything else)."""
    if device is None or isinstance(device, Context):
        return device
    if isinstance(device, Device):
        return device.context
    raise TypeError(f"device must be a Device, a Context or None, not {type(device).__name__}")


def create_definition(graph: DefinitionFields, device: Device | Context | None = None) -> None:
    """Create an empty graph (``cuGraphCreate``) for ``device``: ``GraphDefinition(device)``.

    ``device`` is a :class:`~cuguard.resources.Device`, a :class:`~cuguard.context.Context` or
    ``None`` (see the class). Raises ``TypeError`` for anything else and ``ResourceClosedError``
    for a closed context, before any driver call; :class:`~cuguard.errors.CUDAError` when the
    driver refuses ``cuInit`` or ``cuGraphCreate``. Nothing is created when it raises (G1).
    """
    context = None if device is None else context_of(device)
    if context is not None and context._closed:
        raise context._refusal()
    graph._closed = True  # until fully built: __del__ must not release anything
    init_driver()
    err, handle = driver.cuGraphCreate(0)
    if err:
        raise_status(err, "cuGraphCreate")
    setup_fields(graph, handle, context, {}, 0)
    graph._closed = False


def setup_fields(
    graph: DefinitionFields, handle: Any, context: Context | None, owners: dict[int, object], next_order: int
) -> None:
    """Give ``graph`` the fields of a new definition of ``handle`` (all but ``_closed``); cannot fail."""
    graph._handle = handle
    graph._int = int(handle)
    graph._driver = driver_token()
    graph._context = context
    graph._nodes = {}
    graph._fresh = []
    graph._owners = owners
    graph._payload = False
    graph._shared = False
    graph._uobj = None
    graph._bodies = []
    graph._conditions = None
    graph._executables = None
    graph._next_order = next_order
    graph._found = {}
    graph._source = 0
    graph._version = 0
    graph._shape = None


def forget_fields(graph: DefinitionFields) -> None:
    """Drop the definition's own references to nodes and owners (the payload keeps what CUDA may use)."""
    bodies = graph._bodies
    if bodies:
        for body in list(bodies):
            body._close_with_node()  # CUDA destroys the bodies of conditional nodes with the graph
        graph._bodies = []
    graph._nodes = {}
    graph._fresh = []
    graph._found = {}
    graph._owners = {}
    graph._shape = None


def close_definition(graph: DefinitionFields) -> None:
    """Destroy the graph now (``cuGraphDestroy``). Idempotent.

    Executable graphs made from it are unaffected. If the driver refuses,
    :class:`~cuguard.errors.CUDAError` is raised and the graph is leaked
    (never destroyed again). Raises ``ResourceClosedError``, releasing
    nothing, when the definition belongs to a driver that is no longer
    installed (O3).
    """
    token = graph._driver
    if token is not SETTLED_TOKEN[0] and token is not driver_token():  # O3 before idempotence, as every close()
        raise ResourceClosedError(_UNINSTALLED.format(graph) + "; nothing was released")
    if graph._closed:
        return
    graph._closed = True
    forget_fields(graph)
    (err,) = driver.cuGraphDestroy(graph._handle)
    if err:
        raise CUDAError(err, "cuGraphDestroy", f"graph {format_handle(graph._int)} was leaked")


# How add_empty makes a Node without __init__ (source_new: None in the compiled build).
_new_node = source_new(__file__, Node)
_NO_INFO: dict[str, Any] = {}  # the info of every empty node the hot builder makes: read, copied, never changed


def add_empty(graph: DefinitionFields, first: Node | None, rest: tuple[object, ...]) -> Node:
    """An empty node of ``graph`` after ``first`` and ``rest``: the hot path of ``empty()`` and ``join()``.

    ``first`` is the node whose ``join()``/``empty()`` was called (a node of ``graph`` by construction,
    so only whether it is live is checked), or ``None`` for the definition's builders; ``rest`` the
    dependencies the caller named. The same checks as the other builders, in the same order: the
    definition open, each dependency a live node of it, none given twice (E3: raised before any
    driver call, through the definition's own checks, which name the problem), then one driver call
    that creates the node with its edges or nothing (``cuGraphAddEmptyNode``; a refusal raises
    :class:`~cuguard.errors.CUDAError`). The node is published unkeyed and unnumbered (``_fresh``): the
    definition keys and numbers it when it next reads its nodes or their order.
    """
    if graph._closed or graph._driver is not SETTLED_TOKEN[0]:
        graph._check_open()  # type: ignore[attr-defined]  # raises, or the driver is current after all
    if rest:
        deps = rest if first is None else (first, *rest)
        for dep in deps:
            if type(dep) is not Node or dep._graph is not graph or dep._state != _LIVE:
                graph._own(dep, "deps")  # type: ignore[attr-defined]  # raises the E3 exception that names the problem
        count = len(deps)
        if count == 1:
            first = deps[0]  # type: ignore[assignment]  # a Node: checked above
        else:
            if len({id(dep) for dep in deps}) != count:
                graph._deps(deps)  # type: ignore[attr-defined]  # raises: a dependency given twice
            handles: list[Any] | None = [dep._handle for dep in deps]  # type: ignore[attr-defined]
    elif first is None:
        count = 0
        handles = None
    else:
        if first._state != _LIVE:
            graph._own(first, "deps")  # type: ignore[attr-defined]
        count = 1
    # (the signature's cache key counts the node once it is settled: no version bump)
    node = Node.__new__(Node) if _new_node is None else _new_node(Node)
    fp = _fp
    if fp is None or count > 1:
        if count == 1:
            after = first._h  # type: ignore[union-attr]
            if after is None:
                after = first._handle  # type: ignore[union-attr]
            handles = [after]
        err, handle = driver.cuGraphAddEmptyNode(graph._handle, handles, count)
        if err:
            raise_status(err, "cuGraphAddEmptyNode")
        node._h = handle
        node._key = None
    else:
        # Compiled: one dependency (or none) straight to the driver, addresses in and out; the status back,
        # raised here. The node keeps the address; its CUgraphNode is made if ever asked for.
        after = None
        if count:
            after = first._key  # type: ignore[union-attr]
            if after is None:
                after = first._h  # type: ignore[union-attr]
        err, address = fp.graph_add_empty(graph._int, after)
        if err:
            raise_status(err, address)
        node._h = None
        node._key = address
    node._graph = graph
    node._kind = "empty"
    node._order = None  # numbered when the definition settles its fresh nodes (see _order)
    node._state = _LIVE
    node._info = _NO_INFO  # shared: an empty node's info is never changed
    fresh: list[Node] = graph._fresh
    fresh.append(node)  # published: from here on it is part of the definition (keyed and numbered when needed)
    return node


def _iterable(value: object, param: str) -> Iterable[object]:
    """``value`` when it is an iterable of items (not a str or bytes), else the E3 ``TypeError``."""
    if isinstance(value, str | bytes | Node) or not hasattr(type(value), "__iter__"):
        raise wrong_kind(param, "an iterable of graph Nodes", value)
    return value  # type: ignore[return-value]


def _order(node: Node) -> int:
    """The node's creation order (the key of every sort of nodes).

    A node the empty-node builder made is numbered when its definition settles its fresh nodes;
    asking for its order settles them. Only live nodes of an open definition are sorted.
    """
    order = node._order
    if order is None:
        node._graph._settle()
        order = node._order
    return order  # type: ignore[return-value]  # numbered by the settle


# --- parameters of node kinds --------------------------------------------------------------


def _memset_params(dst: Buffer, value: object, size: int | None, element_size: object) -> tuple[Any, int]:
    """The ``CUDA_MEMSET_NODE_PARAMS`` of a memset of ``dst`` and its byte count; ``ValueError`` first."""
    if not is_integer(element_size):
        raise wrong_kind("element_size", "1, 2 or 4", element_size)
    element_size = int_argument("element_size", element_size, 1, 5)
    if element_size == 3:
        raise ValueError("element_size must be 1, 2 or 4, not 3")
    value = int_argument("value", value, 0, 1 << (8 * element_size))  # fits in element_size bytes
    nbytes = dst.size if size is None else int_argument("size", size)
    if nbytes > dst.size or nbytes % element_size or nbytes == 0:
        raise ValueError(f"size {nbytes} must be 1..{dst.size} bytes and a multiple of {element_size}")
    dst._check_open()
    params = _types().CUDA_MEMSET_NODE_PARAMS()
    params.dst = dst.handle
    params.value = value
    params.elementSize = element_size
    params.width = nbytes // element_size
    params.height = 1
    params.pitch = 0
    return params, nbytes


def _memcpy_params(dst: Buffer | PinnedBuffer, src: Buffer | PinnedBuffer, size: int | None) -> tuple[Any, int, Any]:
    """The ``CUDA_MEMCPY3D`` of a copy ``src`` -> ``dst``, its byte count and its context; ``ValueError`` first."""
    nbytes = min(dst.size, src.size) if size is None else int_argument("size", size)
    if nbytes == 0 or nbytes > dst.size or nbytes > src.size:
        raise ValueError(f"size {nbytes} must be 1..{min(dst.size, src.size)} bytes")
    dst._check_open()
    src._check_open()
    types = _types()
    params = types.CUDA_MEMCPY3D()
    device_type = types.CUmemorytype.CU_MEMORYTYPE_DEVICE
    host_type = types.CUmemorytype.CU_MEMORYTYPE_HOST
    if isinstance(src, Buffer):
        params.srcMemoryType = device_type
        params.srcDevice = src.handle
    else:
        params.srcMemoryType = host_type
        params.srcHost = src.address
    if isinstance(dst, Buffer):
        params.dstMemoryType = device_type
        params.dstDevice = dst.handle
    else:
        params.dstMemoryType = host_type
        params.dstHost = dst.address
    params.srcPitch = params.dstPitch = nbytes
    params.srcHeight = params.dstHeight = 1
    params.WidthInBytes = nbytes
    params.Height = 1
    params.Depth = 1
    ctx = dst.context if isinstance(dst, Buffer) or not isinstance(src, Buffer) else src.context
    return params, nbytes, ctx


def _kernel_params(
    config: object, kernel: object, args: tuple[Any, ...], read_only: object = ()
) -> tuple[Any, list[object], list[object]]:
    """``(params, written, read)`` of a kernel node: its parameters, what it may write and what it only reads.

    ``written`` holds the kernel, its module, the argument block and the memory
    not named in ``read_only``; arguments are checked before anything reaches
    the driver (``TypeError``/``ValueError``).
    """
    if not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a LaunchConfig, not {type(config).__name__}")
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a Kernel, not {type(kernel).__name__}")
    if config._ex:
        # A kernel node has no launch attributes here: dropping them silently would run another launch.
        raise ValueError(
            "a kernel node cannot take a cluster, cooperative, priority or programmatic-serialization "
            f"launch configuration: {config!r}"
        )
    kernel.module._check_open()
    reads = check_read_only(read_only, len(args)) if read_only else frozenset()
    written, read = memory_uses(args, reads)  # buffers, and each view with the buffer under it (W5)
    for used in (*written, *read):
        if isinstance(used, Buffer | PinnedBuffer):
            used._check_open()
    owners: list[object] = [kernel, kernel.module, *written]
    gx, gy, gz, bx, by, bz = config.dims()
    params = _types().CUDA_KERNEL_NODE_PARAMS()
    params.func = kernel.handle
    params.gridDimX, params.gridDimY, params.gridDimZ = gx, gy, gz
    params.blockDimX, params.blockDimY, params.blockDimZ = bx, by, bz
    params.sharedMemBytes = config.shared_mem
    if kernel.parameters is not None:
        # Checked against the kernel's parameter list (TypeError before the driver); the driver
        # reads the block during the add call, and it is kept alive with the definition.
        block, keep = kernel.pack(args)
        params.kernelParams = block
        if keep is not None:
            owners.append(_ArgumentBlock(keep, []))
    elif args:
        # The driver reads the arguments through a void** array during the add call: build it
        # here and keep it (and each value it points to) alive with the definition.
        values, ctypes_types = pack_args(args)
        cells = [ctype(value) for value, ctype in zip(values, ctypes_types, strict=True)]
        array = (ctypes.c_void_p * len(cells))(*[ctypes.addressof(cell) for cell in cells])
        params.kernelParams = ctypes.addressof(array)
        owners.append(_ArgumentBlock(array, cells))
    return params, owners, read


class _ArgumentBlock:
    """Keeps a kernel node's packed arguments alive while the definition lives."""

    __slots__ = ("array", "cells")

    def __init__(self, array: Any, cells: list[Any]) -> None:
        self.array = array
        self.cells = cells
