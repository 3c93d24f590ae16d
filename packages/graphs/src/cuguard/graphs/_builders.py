"""Node builders of graph definitions: the methods that add nodes, shared by definitions and conditional bodies.

:class:`NodeBuilders` is a base of :class:`~cuguard.graphs.GraphDefinition`
(and so of :class:`~cuguard.graphs.ConditionalBody`): every builder of a
definition lives here, found through the definition's class as its own. A new
node is created with its dependencies in one driver call, which is
all-or-nothing by itself; what it uses is kept alive before the call and let go
again when the call fails (G5). Arguments are validated before any driver call
(E3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from cuguard.context import Context, call_in
from cuguard.errors import driver, driver_token, format_handle, raise_status
from cuguard.errors.lowlevel import INT_LIMIT, int_argument, is_integer, wrong_kind
from cuguard.graphs import _lifetime
from cuguard.graphs._common import _check_owners, _types
from cuguard.graphs._nodes import (
    Node,
    _iterable,
    _kernel_params,
    _memcpy_params,
    _memset_params,
    add_empty,
)
from cuguard.resources import Buffer, Device, Event, Kernel, LaunchConfig, PinnedBuffer
from cuguard.resources.lowlevel import split_written

if TYPE_CHECKING:
    from cuguard.graphs._conditional import GraphCondition
    from cuguard.graphs._definition import GraphDefinition

__all__ = ["NodeBuilders"]


def _destroy_new_node(handle: Any) -> None:
    """Undo of a node add whose context restore failed (C2): nothing else refers to it yet."""
    (err,) = driver.cuGraphDestroyNode(handle)
    if err:
        raise_status(err, "cuGraphDestroyNode")


def _ordinal_of(device: Device | int) -> int:
    if isinstance(device, Device):
        device._check_driver()  # a Device of a driver that is not installed is refused (O3)
        return device.ordinal
    if not is_integer(device):
        raise wrong_kind("device", "a Device or a device ordinal", device)
    return int_argument("device", device, 0, INT_LIMIT)


class NodeBuilders:
    """The node builders of a graph definition (see :class:`~cuguard.graphs.GraphDefinition`).

    A base of :class:`~cuguard.graphs.GraphDefinition` only: the builders use
    the definition's state (its ``__slots__``) and its owner bookkeeping,
    declared below for the type checker, which is also told where ``self`` is
    handed on as the definition it always is.
    """

    if TYPE_CHECKING:
        _handle: Any
        _closed: bool
        _driver: Any
        _context: Context | None
        _nodes: dict[int, Node]
        _fresh: list[Node]
        _next_order: int
        _version: int

        def _check_open(self) -> None: ...
        def _own(self, item: object, param: str = "node") -> Node: ...
        def _retain(self, owners: Iterable[object], read: Iterable[object] = ()) -> tuple[Any, list[int]]: ...
        def _unretain(self, retained: tuple[Any, list[int]], exc: BaseException) -> None: ...

    else:
        __slots__ = ()  # the state is the definition's

    # --- adding nodes ---

    def _deps(self, deps: Iterable[object]) -> list[Node]:
        out: list[Node] = []
        for dep in _iterable(deps, "deps"):
            node = self._own(dep, "deps")
            if node in out:
                raise ValueError(f"{node!r} is given twice as a dependency")
            out.append(node)
        return out

    def _add(
        self,
        kind: str,
        deps: Iterable[object],
        add: Callable[..., Any],
        call: str,
        *args: Any,
        owners: Iterable[object] = (),
        read: Iterable[object] = (),
        info: dict[str, Any] | None = None,
        context: Context | None = None,
        run_in: Context | None = None,
    ) -> Node:
        """Create a node with its dependencies in one driver call: ``add(graph, deps, count, *args)``.

        The driver validates the dependencies before creating the node, so the
        call is all-or-nothing by itself: the node exists with all its edges or
        not at all. The owners (written by the node) and ``read`` (only read by
        it, B7) are kept alive before the call (G5); those newly
        kept are dropped again if it fails. With ``run_in`` the call runs in
        that context (switching only if needed, C1): the driver crashes adding a
        kernel node while no context is current (seen on an H200). If restoring
        the caller's context then fails, the new node is destroyed again (C2).
        """
        if self._closed or self._driver is not driver_token():
            self._check_open()
        dep_nodes = self._deps(deps)
        if owners or read:
            owners, read = tuple(owners), tuple(read)
            info = {} if info is None else info
            info["_owners"] = owners + read  # what this node uses: set_params drops what no node uses any more
        retained = self._retain(owners, read) if owners or read else None
        self._version += 1
        graph = self._handle
        dep_handles = [d._handle for d in dep_nodes] if dep_nodes else None

        created: list[Any] = []
        removed: list[bool] = []

        def add_node() -> Any:
            err, handle = add(graph, dep_handles, len(dep_nodes), *args)
            if err:
                raise_status(err, call)
            created.append(handle)
            return handle

        def remove_node(handle: Any) -> None:
            _destroy_new_node(handle)
            removed.append(True)

        try:
            handle = add_node() if run_in is None else call_in(run_in, add_node, remove_node)
        except BaseException as exc:
            if created and not removed:
                # The restore failed and the node could not be removed again: it stays in the
                # definition, and what it uses stays alive with it (G5, W5: leak, never dangle).
                self._publish(created[0], kind, info, context)
                exc.add_note(
                    f"the new {kind} node {format_handle(created[0])} remains in the graph definition; "
                    "what it uses is kept alive with the definition"
                )
            elif retained is not None:
                self._unretain(retained, exc)
            raise
        return self._publish(handle, kind, info, context)

    def _publish(self, handle: Any, kind: str, info: dict[str, Any] | None, context: Context | None) -> Node:
        """Make the Node of a node the driver created part of this definition."""
        if self._fresh:
            self._settle()  # type: ignore[attr-defined]  # the empty-node builder's nodes are numbered first
        node = Node._make(self, handle, kind, self._next_order, {} if info is None else info)  # type: ignore[arg-type]
        self._next_order += 1
        self._nodes[node._int] = node  # published: from here on it is part of the definition
        if context is not None and self._context is None:
            self._context = context
        return node

    def empty(self, *deps: Node) -> Node:
        """An empty node depending on ``deps`` (a join point when there are several).

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        return self._empty(deps)

    def join(self, *nodes: Node) -> Node:
        """An empty node depending on every node of ``nodes``.

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        return self._empty(nodes)

    def _empty(self, deps: tuple[object, ...]) -> Node:
        """:func:`~cuguard.graphs._nodes.add_empty` of this definition (compiled in the compiled build)."""
        return add_empty(self, None, deps)  # type: ignore[arg-type]

    def memset(
        self, dst: Buffer, value: int, size: int | None = None, *, element_size: int = 1, deps: Iterable[Node] = ()
    ) -> Node:
        """A node setting ``size`` bytes (default: all) of ``dst`` to ``value``.

        ``element_size`` (1, 2 or 4) is the width of ``value``; ``size`` must
        be a multiple of it. Keeps ``dst`` alive (see the class docstring).

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        if not isinstance(dst, Buffer):
            raise TypeError(f"dst must be a Buffer, not {type(dst).__name__}")
        deps = self._deps(deps)  # kinds before values (E3)
        params, nbytes = _memset_params(dst, value, size, element_size)
        ctx = dst.context
        return self._add(
            "memset",
            deps,
            driver.cuGraphAddMemsetNode,
            "cuGraphAddMemsetNode",
            params,
            ctx.handle,
            owners=(dst,),
            info={"dst": dst, "value": value, "size": nbytes},
            context=ctx,
        )

    def memcpy(
        self,
        dst: Buffer | PinnedBuffer,
        src: Buffer | PinnedBuffer,
        size: int | None = None,
        *,
        deps: Iterable[Node] = (),
    ) -> Node:
        """A node copying ``size`` bytes (default: all of the smaller) from ``src`` to ``dst``.

        Each side is a device :class:`~cuguard.resources.Buffer` or a
        :class:`~cuguard.resources.PinnedBuffer`. Keeps both alive. The race
        checker counts a launch of the graph as writing ``dst`` and reading
        ``src`` (B7).

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        for name, obj in (("dst", dst), ("src", src)):
            if not isinstance(obj, Buffer | PinnedBuffer):
                raise TypeError(f"{name} must be a Buffer or PinnedBuffer, not {type(obj).__name__}")
        deps = self._deps(deps)  # kinds before values (E3)
        params, nbytes, ctx = _memcpy_params(dst, src, size)
        return self._add(
            "memcpy",
            deps,
            driver.cuGraphAddMemcpyNode,
            "cuGraphAddMemcpyNode",
            params,
            ctx.handle,
            owners=(dst,),
            read=(src,),
            info={"dst": dst, "src": src, "size": nbytes},
            context=ctx,
        )

    def launch(
        self,
        config: LaunchConfig,
        kernel: Kernel,
        *args: Any,
        deps: Iterable[Node] = (),
        read_only: Sequence[int] = (),
    ) -> Node:
        """A kernel node running ``kernel`` with ``config`` and ``args`` (see ``pack_args``).

        Keeps the kernel, its module and every buffer in ``args`` alive.
        Parameters can be changed later with :meth:`Node.set_params`.
        ``read_only`` names, by position in ``args``, the memory arguments the
        kernel only reads, as for :func:`~cuguard.resources.launch`: the race
        checker counts a launch of the graph as reading them and writing the
        other memory its nodes use (B7).

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        params, owners, read = _kernel_params(config, kernel, args, read_only)
        assert isinstance(kernel, Kernel)
        return self._add(
            "kernel",
            deps,
            driver.cuGraphAddKernelNode,
            "cuGraphAddKernelNode",
            params,
            owners=owners,
            read=read,
            info={"config": config, "kernel": kernel, "args": args, "read_only": read_only, "_params": params},
            context=kernel.module.context,
            run_in=kernel.module.context,
        )

    def callback(self, fn: Callable[[], object], *, deps: Iterable[Node] = ()) -> Node:
        """A host node calling ``fn()`` on a driver thread each time the graph runs.

        An exception raised by ``fn`` goes to ``sys.unraisablehook`` and the
        graph carries on (W6). ``fn`` must not call CUDA. It is kept alive as
        long as any graph may call it.
        """
        if not callable(fn):
            raise TypeError(f"a host callback must be callable, not {type(fn).__name__}")
        types = _types()
        entry = _lifetime.HostCallback(fn)
        params = types.CUDA_HOST_NODE_PARAMS()
        params.fn = types.CUhostFn(_lifetime.host_thunk_address())
        params.userData = entry.token
        return self._add(
            "host",
            deps,
            driver.cuGraphAddHostNode,
            "cuGraphAddHostNode",
            params,
            owners=(entry,),
            info={"fn": fn},
        )

    def record(self, event: Event, *, deps: Iterable[Node] = ()) -> Node:
        """A node recording ``event`` when the graph reaches it; keeps the event alive.

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        add = driver.cuGraphAddEventRecordNode
        return self._event_node("event_record", event, deps, add, "cuGraphAddEventRecordNode")

    def wait(self, event: Event, *, deps: Iterable[Node] = ()) -> Node:
        """A node making the graph wait for ``event``'s last record; keeps the event alive.

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        add = driver.cuGraphAddEventWaitNode
        return self._event_node("wait_event", event, deps, add, "cuGraphAddEventWaitNode")

    def _event_node(self, kind: str, event: Event, deps: Iterable[Node], add: Callable[..., Any], call: str) -> Node:
        """:meth:`_add` for event-record and event-wait nodes, which keep their event alive."""
        if not isinstance(event, Event):
            raise TypeError(f"event must be an Event, not {type(event).__name__}")
        return self._add(
            kind, deps, add, call, event.handle, owners=(event,), info={"event": event}, context=event.context
        )

    def allocate(self, size: int, *, device: Device | int | None = None, deps: Iterable[Node] = ()) -> Node:
        """A node allocating ``size`` bytes of device memory; its address is ``node.ptr``.

        ``device`` defaults to the definition's device. The memory belongs to
        the graph: free it with a :meth:`deallocate` node (CUDA's rules for
        graph memory apply: an executable graph whose allocation was not freed
        cannot be launched again until it is).

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        nbytes = int_argument("size", size, 1)
        # Wrong kinds of arguments are TypeErrors whatever else is wrong (E3): checked first.
        given = None if device is None else _ordinal_of(device)
        deps = self._deps(deps)
        if given is None:
            if self._context is None:
                raise ValueError("allocate() needs a device: pass device=, or create the definition with one")
            ordinal = self._context.device
        else:
            ordinal = given
        types = _types()
        params = types.CUDA_MEM_ALLOC_NODE_PARAMS()
        params.poolProps.allocType = types.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        params.poolProps.location.type = types.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        params.poolProps.location.id = ordinal
        params.bytesize = nbytes
        info: dict[str, Any] = {"size": nbytes, "device": ordinal}
        node = self._add(
            "mem_alloc",
            deps,
            driver.cuGraphAddMemAllocNode,
            "cuGraphAddMemAllocNode",
            params,
            info=info,
        )
        info["ptr"] = int(params.dptr)
        return node

    def deallocate(self, ptr: int | Node, *, deps: Iterable[Node] = ()) -> Node:
        """A node freeing graph memory: ``ptr`` is an address or the :meth:`allocate` node.

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        if isinstance(ptr, Node):
            if ptr._kind != "mem_alloc":
                raise TypeError(f"ptr must be a device address or an allocation Node, not a Node of kind {ptr._kind}")
            address: object = ptr.ptr
        else:
            address = ptr
        if not is_integer(address):
            raise wrong_kind("ptr", "a device address or an allocation Node", ptr)
        dptr = _types().CUdeviceptr(int_argument("ptr", address, 1))
        return self._add(
            "mem_free",
            deps,
            driver.cuGraphAddMemFreeNode,
            "cuGraphAddMemFreeNode",
            dptr,
            info={"ptr": address},
        )

    def embed(self, child: GraphDefinition, *, deps: Iterable[Node] = ()) -> Node:
        """A node running a copy of ``child`` (CUDA copies the child graph now).

        Later changes to ``child`` do not affect the node. Everything the
        child's nodes use is kept alive by this definition too.

        Raises ``TypeError``/``ValueError`` for bad arguments (before any driver call; a
        child holding memory allocation, memory free or conditional nodes is a
        ``ValueError``: CUDA does not embed those) and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; no node is created then.
        """
        from cuguard.graphs._definition import GraphDefinition  # it imports this module

        if not isinstance(child, GraphDefinition):
            raise TypeError(f"child must be a GraphDefinition, not {type(child).__name__}")
        if child._root() is not child:
            raise TypeError(f"child must be a GraphDefinition, not a conditional body ({child!r})")
        if child is self:
            raise ValueError("a graph definition cannot embed itself")
        child_handle = child.handle
        deps = self._deps(deps)  # a wrong kind of dependency is a TypeError before any rule of CUDA's (E3)
        child._check_no_memory_nodes("be embedded as a child graph")  # CUDA_ERROR_NOT_SUPPORTED on an H200
        child._check_no_conditional_nodes("be embedded as a child graph")
        _check_owners(child, child._owners, "embedded")  # CUDA copies its nodes now (S2, O4)
        owners, read = split_written(child._owners)
        node = self._add(
            "graph",
            deps,
            driver.cuGraphAddChildGraphNode,
            "cuGraphAddChildGraphNode",
            child_handle,
            owners=owners,
            read=read,
            info={"child": child._int},
            context=child._context,
        )
        return node

    # --- conditional nodes (see the conditional module) ---

    def create_condition(self, default: int | None = None) -> GraphCondition:
        """A condition handle for conditional nodes of this definition (``cuGraphConditionalHandleCreate``).

        ``default`` (0 to 2**32 - 1) is assigned at the start of every launch;
        with ``None`` the value persists between launches (undefined at the
        first, a CUDA rule). Kernels set it on the device; see
        :class:`GraphCondition`. Needs the definition's context (created with a
        device; ``ValueError`` otherwise, before the driver). Runs in that
        context. Raises :class:`~cuguard.errors.CUDAError` if the driver
        refuses; CUDA frees handles with their graph, so nothing is left to
        release.
        """
        from cuguard.graphs import _conditional

        return _conditional.create_condition(self, default)  # type: ignore[arg-type]

    def if_then(self, condition: GraphCondition, *, deps: Iterable[Node] = ()) -> Node:
        """A conditional node running its one body when ``condition`` is non-zero.

        The node's ``branches`` is ``(then,)``, a :class:`ConditionalBody` to
        fill with nodes. ``condition`` must belong to this definition or to a
        definition (or body) holding it. One driver call (``cuGraphAddNode``),
        in the condition's context: on failure no node and no body exist
        (:class:`~cuguard.errors.CUDAError`); bad arguments raise
        ``TypeError``/``ValueError`` before the driver.
        """
        from cuguard.graphs import _conditional

        return _conditional.add_conditional(self, "if", condition, 1, deps)  # type: ignore[arg-type]

    def if_else(self, condition: GraphCondition, *, deps: Iterable[Node] = ()) -> Node:
        """A conditional node with ``branches`` ``(then, else)``: ``then`` runs when ``condition`` is non-zero.

        Otherwise ``else`` runs.

        Arguments and failures as in :meth:`if_then`.
        """
        from cuguard.graphs import _conditional

        return _conditional.add_conditional(self, "if", condition, 2, deps)  # type: ignore[arg-type]

    def while_loop(self, condition: GraphCondition, *, deps: Iterable[Node] = ()) -> Node:
        """A conditional node running its one body as long as ``condition`` is non-zero (checked before each run).

        A kernel in the body must set the condition to 0 to end the loop.
        Arguments and failures as in :meth:`if_then`.
        """
        from cuguard.graphs import _conditional

        return _conditional.add_conditional(self, "while", condition, 1, deps)  # type: ignore[arg-type]

    def switch(self, condition: GraphCondition, count: int, *, deps: Iterable[Node] = ()) -> Node:
        """A conditional node with ``count`` bodies: body ``n`` runs when ``condition`` is ``n`` (none past the last).

        Arguments and failures as in :meth:`if_then`; ``count`` must be 1 or more.
        """
        from cuguard.graphs import _conditional

        return _conditional.add_conditional(
            self,  # type: ignore[arg-type]
            "switch",
            condition,
            _conditional.conditional_size(count),
            deps,
        )
