"""Executable graphs: launch, upload, update from a definition of the same shape, close."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from cuguard.context import Context, call_in
from cuguard.errors import (
    CUDAError,
    ResourceClosedError,
    driver,
    driver_token,
    format_handle,
    raise_status,
    report,
    report_error,
)
from cuguard.errors.lowlevel import ATTRIBUTING, SETTLED_TOKEN, refuse_construction, source_new, wrong_kind
from cuguard.graphs import _updates
from cuguard.graphs._common import _UNINSTALLED, _check_owners, _types
from cuguard.graphs._nodes import Collected
from cuguard.resources import (
    Buffer,
    Event,
    Kernel,
    LaunchConfig,
    Module,
    PinnedBuffer,
    Stream,
    as_stream,
    wait_attributed,
)
from cuguard.resources.lowlevel import (
    follow_compiled,
    on_own_behalf,
    race,
    relaxed_failed,
    retain,
    split_written,
    unprohibited,
)

if TYPE_CHECKING:
    from cuguard.graphs._definition import GraphDefinition
    from cuguard.graphs._nodes import Node

__all__ = ["Graph", "GraphUpdateError"]

_GRAPH_EXEC_UPDATE_FAILURE = 910  # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE

# The compiled build's driver calls while in use and the seam routes to the real bindings, else None (_fast).
_fp: Any = None


def _compiled_changed(ops: Any) -> None:
    global _fp
    _fp = ops


follow_compiled(_compiled_changed)


class GraphUpdateError(CUDAError, ValueError):
    """An executable graph could not be updated from a definition.

    Raised by :meth:`Graph.update`. ``reason`` is the name of the
    ``CUgraphExecUpdateResult`` that explains why (for example
    ``"CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED"``), or
    ``"CU_GRAPH_EXEC_UPDATE_ERROR"`` when the driver refused for a reason
    cuguard could not determine (cuda-bindings does not return the driver's
    result info on failure). The message says what differs. It is both a
    :class:`~cuguard.errors.CUDAError` (code ``CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE``)
    and a ``ValueError``. The executable graph is unchanged and usable.
    """

    reason: str

    def __init__(self, reason: str, detail: str, call: str | None = "cuGraphExecUpdate") -> None:
        self.reason = reason
        super().__init__(_GRAPH_EXEC_UPDATE_FAILURE, call, f"{reason}: {detail}")


class Graph(Collected):
    """An executable graph (a ``CUgraphExec``), made by :meth:`GraphDefinition.instantiate`.

    :meth:`launch` queues it on a stream; :meth:`upload` prepares it;
    :meth:`update` changes its parameters to those of another definition of
    the same shape. It keeps what its nodes use alive (through the CUDA user
    object it inherited), also while launches are in flight after it is
    closed. :meth:`close` (or ``with``, or garbage collection) destroys it.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_context",
        "_driver",
        "_handle",
        "_int",
        "_origin",
        "_owners",
        "_released_with_close",
        "_signature",
    )

    _handle: Any
    _int: int
    _driver: Any  # the driver_token() it was made under
    _closed: bool
    _context: Context | None
    _owners: dict[int, object]  # the payload of the user object this executable graph holds (W5)
    _signature: tuple[tuple[str, ...], frozenset[tuple[int, int]]]
    _origin: weakref.ref[GraphDefinition] | None  # the definition it was instantiated from: its nodes name ours

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(Graph, "GraphDefinition.instantiate()")

    @property
    def handle(self) -> Any:
        """The ``CUgraphExec``; raises ``ResourceClosedError`` once closed."""
        self._check_open()
        handle = self._handle
        if type(handle) is int:  # the compiled build keeps the address: the bindings' type on demand
            return _types().CUgraphExec(handle)
        return handle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")
        if self._driver is not driver_token():
            raise ResourceClosedError(_UNINSTALLED.format(self))
        context = self._context
        if context is not None and context._closed:
            raise ResourceClosedError(f"{self!r} cannot be used: its context {context!r} was closed")

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<Graph {format_handle(self._int)}{state}>"

    def launch(self, stream: Stream) -> None:
        """Queue one run of the graph on ``stream``; raises :class:`~cuguard.errors.CUDAError` if refused.

        Raises ``ResourceClosedError`` before the driver when a module or event
        its nodes use was closed since (the run would reach an unloaded module
        or a destroyed event; memory closed meanwhile stays allocated for the
        graph, W5).

        With fault attribution on (:func:`~cuguard.errors.attribute_faults`) it waits
        for the run, and a kernel fault inside it raises
        :class:`~cuguard.errors.StickyCUDAError` naming this launch. This is
        where work captured with a ``GraphBuilder`` is attributed: a captured
        launch is not waited for while its stream captures (that would
        invalidate the capture).
        """
        context = self._context
        if self._closed or self._driver is not SETTLED_TOKEN[0] or (context is not None and context._closed):
            self._check_open()  # raises, or the driver is current after all
        if type(stream) is not Stream:
            stream = as_stream(stream)
        if stream._closed or stream._context._closed:  # checked before the driver is looked up (O3)
            stream._check_open()
        hstream = stream._handle
        for owner in self._released_with_close:
            if owner._closed:  # S2: its nodes would reach an unloaded module or a destroyed event
                raise ResourceClosedError(f"{self!r} uses {owner!r}, which was closed: the graph cannot run any more")
        fp = _fp
        if fp is not None:
            err = fp.graph_launch(self._handle, hstream)  # compiled: the status back, raised here
        else:
            (err,) = driver.cuGraphLaunch(self._handle, hstream)
        if err:
            raise_status(err, "cuGraphLaunch")
        if race.ON:
            race.graph_launched(stream, self._owners)  # one operation on the memory its nodes use (B7)
        if ATTRIBUTING[0]:
            kinds = self._signature[0]
            wait_attributed(
                stream, lambda: f"the launch of executable graph {format_handle(self._int)} ({len(kinds)} nodes)"
            )

    def upload(self, stream: Stream) -> None:
        """Upload the graph's work to the device ahead of a launch, ordered on ``stream``.

        Raises ``ResourceClosedError`` once closed, ``TypeError`` for a non-stream and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; the graph is unchanged and usable
        then.
        """
        self._check_open()
        if type(stream) is not Stream:
            stream = as_stream(stream)
        hstream = stream.handle
        (err,) = driver.cuGraphUpload(self._handle, hstream)
        if err:
            raise_status(err, "cuGraphUpload")

    def update(self, definition: GraphDefinition) -> None:
        """Take the node parameters of ``definition``, which must have the same shape (``cuGraphExecUpdate``).

        Same shape: the same node kinds in the same creation order, with the
        same edges (a clone of the instantiated definition, changed with
        :meth:`Node.set_params`, has it). cuguard checks this first and raises
        :class:`GraphUpdateError` (a ``ValueError`` and a ``CUDAError``)
        saying what differs, before any driver call. If the driver refuses
        for another reason, :class:`GraphUpdateError` is raised too. Either
        way this graph is unchanged and usable. What ``definition``'s nodes
        use is kept alive by this graph from before the driver call; after a
        refused update it stays alive until the graph is gone (a leak, never a
        dangle).

        Per-node changes made before with :meth:`set_kernel_params` and the
        other ``set_*`` methods are replaced by the definition's parameters;
        which nodes are enabled is the driver's to keep (CUDA keeps it).
        """
        from cuguard.graphs._definition import GraphDefinition  # it imports this module

        self._check_open()
        if not isinstance(definition, GraphDefinition) or definition._root() is not definition:
            raise wrong_kind("definition", "a GraphDefinition", definition)
        definition._check_open()
        _check_owners(definition, definition._owners, "used for an update")
        kinds, edges, nodes = definition._signature()
        _explain_mismatch(self._signature, (kinds, edges), nodes)
        written, read = split_written(definition._owners)
        retain(self._owners, written, read)
        result = driver.cuGraphExecUpdate(self._handle, definition._handle)
        err = result[0]
        if err:
            if int(err) == _GRAPH_EXEC_UPDATE_FAILURE:
                info = result[1] if len(result) > 1 else None
                reason = _result_name(getattr(info, "result", None)) if info is not None else None
                raise GraphUpdateError(
                    reason or "CU_GRAPH_EXEC_UPDATE_ERROR",
                    "the driver refused the update for a reason other than the graph's shape (e.g. a kernel or "
                    "context changed in a way CUDA cannot apply)",
                )
            raise_status(err, "cuGraphExecUpdate")
        self._signature = (kinds, edges)
        # CUDA moved this graph to the user objects of ``definition``: that payload is the one it holds now.
        definition._root()._shared = True
        self._owners = definition._owners
        self._released_with_close = _released_with_close(definition._owners)

    # --- per-node changes (see the updates module) ---

    def set_kernel_params(
        self, node: Node, config: LaunchConfig, kernel: Kernel, *args: Any, read_only: Sequence[int] = ()
    ) -> None:
        """Run kernel node ``node`` with ``config``, ``kernel`` and ``args`` from the next launch on.

        ``node`` is a node of the definition this graph was instantiated from
        (open, the node not destroyed); the definition keeps its own
        parameters. One driver call (``cuGraphExecKernelNodeSetParams``), in
        the kernel's context; CUDA requires the kernel to be in the context of
        the one it replaces. Raises ``TypeError``/``ValueError`` for bad
        arguments and ``ResourceClosedError`` for a node whose definition was
        closed, before the driver; :class:`~cuguard.errors.CUDAError` when the
        driver refuses, and the graph runs as before. What the new parameters
        use is kept alive by this graph (W5); so is what the old ones used.
        ``read_only`` names the arguments the kernel only reads, as for
        :meth:`GraphDefinition.launch` (B7).
        If the caller's context cannot be restored afterwards (C2), the new
        parameters stay applied (a note says so).
        """
        _updates.kernel_params(self, node, config, kernel, args, read_only)

    def set_memset_params(
        self, node: Node, dst: Buffer, value: int, size: int | None = None, *, element_size: int = 1
    ) -> None:
        """Make memset node ``node`` set ``size`` bytes (default: all) of ``dst`` to ``value``.

        Arguments as in :meth:`GraphDefinition.memset`; CUDA requires ``dst``
        to be memory of the original destination's context. One driver call
        (``cuGraphExecMemsetNodeSetParams``); failures as in
        :meth:`set_kernel_params`: a refused change leaves the graph as it was.
        """
        _updates.memset_params(self, node, dst, value, size, element_size)

    def set_memcpy_params(
        self, node: Node, dst: Buffer | PinnedBuffer, src: Buffer | PinnedBuffer, size: int | None = None
    ) -> None:
        """Make memcpy node ``node`` copy ``size`` bytes (default: all of the smaller) from ``src`` to ``dst``.

        Arguments as in :meth:`GraphDefinition.memcpy`; CUDA requires the same
        kinds of memory (device or pinned host) on each side as the original
        copy, in the same contexts. One driver call
        (``cuGraphExecMemcpyNodeSetParams``); failures as in
        :meth:`set_kernel_params`.
        """
        _updates.memcpy_params(self, node, dst, src, size)

    def set_callback(self, node: Node, fn: Callable[[], object]) -> None:
        """Make host node ``node`` call ``fn()`` from the next launch on (``cuGraphExecHostNodeSetParams``).

        ``fn`` is kept alive as long as CUDA may call it; its exceptions go to
        ``sys.unraisablehook`` (W6). Failures as in :meth:`set_kernel_params`.
        """
        _updates.callback(self, node, fn)

    def set_event(self, node: Node, event: Event) -> None:
        """Make event-record or event-wait node ``node`` use ``event`` from the next launch on.

        One driver call (``cuGraphExecEventRecordNodeSetEvent`` or
        ``cuGraphExecEventWaitNodeSetEvent``), in the event's context; the
        event is kept alive with this graph. Failures as in
        :meth:`set_kernel_params`.
        """
        _updates.event(self, node, event)

    def set_child(self, node: Node, child: GraphDefinition) -> None:
        """Make child-graph node ``node`` run the parameters of ``child`` (``cuGraphExecChildGraphNodeSetParams``).

        CUDA requires ``child`` to have the topology of the original child
        graph (refused otherwise, and the graph runs as before). What
        ``child``'s nodes use is kept alive by this graph. Failures as in
        :meth:`set_kernel_params`.
        """
        _updates.child(self, node, child)

    def set_enabled(self, node: Node, enabled: bool) -> None:
        """Enable or disable node ``node`` for the next launches (``cuGraphNodeSetEnabled``).

        Only kernel, memset and memcpy nodes can be disabled (a CUDA rule;
        ``TypeError`` for other kinds before the driver). A disabled node runs
        as an empty node and keeps taking parameter changes. Failures as in
        :meth:`set_kernel_params`.
        """
        _updates.set_enabled(self, node, enabled)

    def is_enabled(self, node: Node) -> bool:
        """Whether node ``node`` (kernel, memset or memcpy) is enabled (``cuGraphNodeGetEnabled``).

        Raises as :meth:`set_enabled` does; :class:`~cuguard.errors.CUDAError` if the driver refuses.
        """
        return _updates.is_enabled(self, node)

    def close(self) -> None:
        """Destroy the executable graph now (``cuGraphExecDestroy``). Idempotent.

        Launches in flight complete; what they use stays alive until then.
        The destroy runs with the calling thread in relaxed capture mode, so a
        stream capture in progress neither refuses it nor is invalidated by it
        (G6); a refused switch of the mode raises
        :class:`~cuguard.errors.CUDAError` naming
        ``cuThreadExchangeStreamCaptureMode`` with nothing destroyed (the
        graph stays usable). If the driver refuses the destroy,
        :class:`~cuguard.errors.CUDAError` is raised and the executable graph
        is leaked (never destroyed again); if restoring the thread's mode is
        refused after the destroy, that is raised (the thread stays relaxed).
        """
        token = self._driver
        if token is not SETTLED_TOKEN[0] and token is not driver_token():  # O3 before idempotence, as every close()
            raise ResourceClosedError(_UNINSTALLED.format(self) + "; nothing was released")
        if self._closed:
            return
        context = self._context
        if context is not None and context._closed:
            self._closed = True
            raise ResourceClosedError(
                f"{self!r} cannot be released: its context {context!r} was closed first; it was leaked"
            )
        fp = _fp
        if fp is None:
            on_own_behalf(self._destroy, None)
            return
        # Compiled: the switch to relaxed mode, the destroy and the restore in one call; their failures
        # raised as on_own_behalf raises them.
        xerr, err, rerr = fp.graph_exec_destroy_relaxed(self._handle)
        if not xerr:
            self._closed = True  # destroyed, or refused and leaked (W5): never destroyed again
        if xerr or err or rerr:
            relaxed_failed(xerr, err, rerr, self._leaked)

    def _destroy(self) -> None:
        """``cuGraphExecDestroy``; the graph counts as closed from the call on (a refusal leaks it, W5)."""
        self._closed = True
        (err,) = driver.cuGraphExecDestroy(self._handle)
        if err:
            raise self._leaked(err)

    def _leaked(self, err: Any) -> CUDAError:
        return CUDAError(err, "cuGraphExecDestroy", f"executable graph {format_handle(self._int)} was leaked")

    def _collect(self) -> None:
        """Destroy a collected executable graph; failures are warnings (W1)."""
        if self._closed or self._driver is not driver_token():
            return
        self._closed = True
        context = self._context
        if context is not None and context._closed:
            report_error(
                ResourceClosedError(f"executable graph not released: its context {context!r} was closed before it"),
                self._handle,
                "it was leaked",
            )
            return
        try:
            # Relaxed capture mode (G6): during a capture in global mode the driver refuses
            # cuGraphExecDestroy as potentially unsafe and invalidates the capture (seen on an H200).
            err, call = unprohibited(_destroy_status, self._handle)
        except CUDAError as exc:
            report_error(exc, self._handle, "the executable graph was leaked", context=context)
            return
        if err:
            report(err, call, self._handle, "the executable graph was leaked", context=context)


def instantiate_definition(definition: GraphDefinition) -> Graph:
    """An executable :class:`Graph` made from the definition (``cuGraphInstantiate``).

    ``GraphDefinition.instantiate`` is this function. Runs in the
    definition's context when it has one (switching only if needed,
    restoring the caller's). Creates nothing when it raises (G1). The
    executable graph keeps what the nodes use alive by itself: the
    definition may be closed or changed afterwards. Raises
    ``ResourceClosedError`` before the driver when a module or event a node
    uses was closed (the driver would read it: on an H200, instantiating an
    event node of a destroyed event killed the process), or when a node uses
    an object whose context was destroyed. With conditional nodes, CUDA's two
    rules are checked first: every condition made in the definition (and its
    bodies) must be used by a live conditional node (``ValueError`` naming
    the unused ones), and only one executable graph of the definition may be
    open at a time (``RuntimeError``).
    """
    if definition._closed or definition._driver is not SETTLED_TOKEN[0]:
        definition._check_open()  # raises, or the driver is current after all
    owners = definition._owners
    if owners:
        _check_owners(definition, owners, "instantiated")
    conditions = definition._conditions
    if conditions:
        from cuguard.graphs import _conditional

        _conditional.check_instantiable(definition)
    if definition._fresh:
        definition._settle()  # numbers the empty-node builder's nodes: they count in the cache's key
    shape = definition._shape  # the signature's cache read here (a frame less when it is current)
    if shape is not None and shape[0] == definition._version + definition._next_order:
        kinds, edges, _ = shape[1]
    else:
        kinds, edges, _ = definition._signature()
    # The executable graph inherits the payload's user object: it keeps what later
    # updates bring alive too (see Graph.update), so a definition without owners gets one now.
    fresh = None if definition._payload else definition._attach()
    context = definition._context
    try:
        handle = None
        fp = _fp
        if fp is not None and (context is None or not context._closed):
            # Compiled: the context check and the instantiate in one call (-1: another context is
            # current, nothing made: switch in below); the executable graph comes back as an int.
            err, handle = fp.graph_instantiate(None if context is None else context._int, definition._handle, 0)
            if err:
                if err != -1:
                    raise_status(err, handle)
                handle = None
        if handle is None:
            if context is None:
                handle = _instantiate(definition._handle)
            else:
                handle = call_in(context, _instantiate, _exec_destroy, definition._handle)
    except BaseException as exc:
        if fresh is not None:
            definition._detach(fresh, exc)
        raise
    definition._shared = True  # the executable graph holds the payload's user object too
    graph = new_graph(handle, context, definition._owners, (kinds, edges), definition)
    if conditions:
        definition._executables = [ref for ref in definition._executables or () if ref() is not None]
        definition._executables.append(weakref.ref(graph))
    return graph


def _instantiate(graph: Any) -> Any:
    err, handle = driver.cuGraphInstantiate(graph, 0)
    if err:
        raise_status(err, "cuGraphInstantiate")
    return handle


def _exec_destroy(handle: Any) -> None:
    (err,) = driver.cuGraphExecDestroy(handle)
    if err:
        raise_status(err, "cuGraphExecDestroy")


# How new_graph makes a Graph without __init__ (source_new: None in the compiled build).
_new_graph = source_new(__file__, Graph)


def new_graph(
    handle: Any,
    context: Context | None,
    owners: dict[int, object],
    signature: tuple[tuple[str, ...], frozenset[tuple[int, int]]],
    origin: GraphDefinition,
) -> Graph:
    """The :class:`Graph` of a just-instantiated ``handle`` (a ``CUgraphExec`` or its address) of ``origin``.

    Only fields are set (nothing can fail after the driver made the graph); the compiled build sets its C slots.
    The graph belongs to ``origin``'s driver, which the caller found installed before it instantiated.
    """
    graph = Graph.__new__(Graph) if _new_graph is None else _new_graph(Graph)
    graph._origin = weakref.ref(origin)
    graph._handle = handle
    graph._int = handle if type(handle) is int else int(handle)
    graph._driver = origin._driver
    graph._closed = False
    graph._context = context
    graph._owners = owners
    graph._released_with_close = _released_with_close(owners) if owners else ()
    graph._signature = signature
    return graph


def _destroy_status(handle: Any) -> tuple[Any, str]:
    (err,) = driver.cuGraphExecDestroy(handle)
    return err, "cuGraphExecDestroy"


def _released_with_close(owners: dict[int, object]) -> tuple[Any, ...]:
    """What an executable graph uses whose ``close()`` releases it at once: its modules and events.

    (Memory closed while a graph uses it stays allocated until the graph goes, W5.)
    """
    if not owners:  # a graph of empty nodes: no generator to run on every instantiate
        return ()
    return tuple(o for o in owners.values() if type(o) is Module or type(o) is Event)


def _result_name(value: object) -> str | None:
    if value is None:
        return None
    name = getattr(value, "name", None)
    return str(name) if name else None


def _explain_mismatch(
    old: tuple[tuple[str, ...], frozenset[tuple[int, int]]],
    new: tuple[tuple[str, ...], frozenset[tuple[int, int]]],
    nodes: list[Node],
) -> None:
    """Raise :class:`GraphUpdateError` saying how ``new``'s shape differs from ``old``'s; nothing if equal."""
    old_kinds, old_edges = old
    new_kinds, new_edges = new
    if len(old_kinds) != len(new_kinds):
        _refuse(
            "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED",
            f"the definition has {len(new_kinds)} nodes, the executable graph {len(old_kinds)}",
        )
    for i, (was, now) in enumerate(zip(old_kinds, new_kinds, strict=True)):
        if was != now:
            _refuse(
                "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED",
                f"node {i} in creation order ({nodes[i]!r}) is a {now} node, in the executable graph a {was} node",
            )
    if old_edges != new_edges:
        extra = sorted(new_edges - old_edges)
        missing = sorted(old_edges - new_edges)
        parts = []
        if extra:
            parts.append(
                "edges only in the definition: " + ", ".join(f"{nodes[a]!r} -> {nodes[b]!r}" for a, b in extra)
            )
        if missing:
            parts.append(
                "edges missing from the definition (by creation index): " + ", ".join(f"{a} -> {b}" for a, b in missing)
            )
        _refuse("CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED", "; ".join(parts))


def _refuse(reason: str, detail: str) -> NoReturn:
    raise GraphUpdateError(reason, detail, call=None)
