"""Per-node changes of executable graphs: parameters of one node, and enabling or disabling nodes.

Each change is one driver call on the executable graph (``cuGraphExec*SetParams``,
``cuGraphNodeSetEnabled``) naming a node of the definition the graph was
instantiated from, and is all-or-nothing by itself: when the driver refuses,
the executable graph runs as before. Arguments are checked before the driver
is asked (E3). What a change brings in (buffers, kernels and their modules,
events, callbacks, what a child graph's nodes use) is added to the payload the
executable graph's CUDA user object keeps alive, before the call (G5); a
refused change removes it again. What a replaced parameter used stays alive
until CUDA drops the executable graph (launches in flight may still use it:
W5), so repeated changes keep each distinct object once, not once per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cuguard.context import Context, call_in
from cuguard.errors import driver, raise_status
from cuguard.errors.lowlevel import wrong_kind
from cuguard.graphs import _lifetime
from cuguard.graphs._common import _check_owners, _types
from cuguard.graphs._nodes import Node, _ArgumentBlock, _kernel_params, _memcpy_params, _memset_params
from cuguard.resources import Buffer, Event, Kernel, LaunchConfig, Module, PinnedBuffer
from cuguard.resources.lowlevel import retain, split_written

if TYPE_CHECKING:
    from cuguard.graphs._definition import GraphDefinition
    from cuguard.graphs._executable import Graph

__all__: list[str] = []

_ENABLE_KINDS = ("kernel", "memset", "memcpy")


def graph_node(graph: Graph, node: object, kinds: tuple[str, ...], what: str) -> Node:
    """``node`` as a live node of the definition ``graph`` was instantiated from, of one of ``kinds``.

    ``TypeError`` for a non-node or a node of another kind, ``ValueError`` for a
    node of another definition (or of a conditional body, which CUDA does not
    update one node at a time), ``ResourceClosedError`` for a destroyed node or
    a closed definition (its node handles are gone).
    """
    graph._check_open()
    if not isinstance(node, Node):
        raise wrong_kind("node", "a graph Node", node)
    if node._kind not in kinds:  # the argument's kind first, then its state (E3)
        raise TypeError(f"{what} needs a {' or '.join(kinds)} node, not {node!r}")
    origin = None if graph._origin is None else graph._origin()
    if origin is None or node._graph is not origin:
        raise ValueError(f"{node!r} is not a node of the definition {graph!r} was instantiated from")
    node._check_live()  # a destroyed node, or one of a closed definition: its handle is gone
    return node


def apply(
    graph: Graph,
    context: Context | None,
    owners: Iterable[object],
    call: str,
    fn: Callable[..., Any],
    *args: Any,
    read: Iterable[object] = (),
) -> None:
    """Keep ``owners`` (written) and ``read`` alive with ``graph``, then ``fn(*args)`` in ``context``.

    The keep-alive is undone if the driver refuses.

    If the caller's context cannot be restored afterwards (C2), the change stays
    applied (CUDA has no way to read the previous parameters back) and what it
    uses stays alive; the raised error says so in a note.
    """
    keep = graph._owners
    added = retain(keep, owners, read)  # memory's close() now asks whether a graph still uses it (W5)
    done: list[bool] = []

    def run() -> None:
        (err,) = fn(*args)
        if err:
            raise_status(err, call)
        done.append(True)

    try:
        if context is None:
            run()
        else:
            call_in(context, run, None)
    except BaseException as exc:
        if done:
            exc.add_note(f"{call} was applied: the executable graph keeps the new parameters")
        else:
            for key in added:
                keep.pop(key, None)
        raise
    new = tuple(
        o for o in keep.values() if (type(o) is Module or type(o) is Event) and o not in graph._released_with_close
    )
    if new:
        graph._released_with_close += new


def kernel_params(  # noqa: PLR0917 - the public method's arguments, passed through
    graph: Graph, node: object, config: LaunchConfig, kernel: Kernel, args: tuple[Any, ...], read_only: object
) -> None:
    if not isinstance(node, Node):  # every argument's kind before the values' checks (E3)
        raise wrong_kind("node", "a graph Node", node)
    params, owners, read = _kernel_params(config, kernel, args, read_only)  # kinds before the node's fit (E3)
    target = graph_node(graph, node, ("kernel",), "set_kernel_params()")
    # The driver copies the argument values during the call: the packed block need not outlive it.
    kept = [o for o in owners if type(o) is not _ArgumentBlock]
    fn = driver.cuGraphExecKernelNodeSetParams
    call = "cuGraphExecKernelNodeSetParams"
    apply(graph, kernel.module.context, kept, call, fn, graph._handle, target._handle, params, read=read)


def memset_params(  # noqa: PLR0917 - the public method's arguments, passed through
    graph: Graph, node: object, dst: Buffer, value: int, size: int | None, element_size: int
) -> None:
    if not isinstance(dst, Buffer):
        raise wrong_kind("dst", "a Buffer", dst)
    target = graph_node(graph, node, ("memset",), "set_memset_params()")
    params, _ = _memset_params(dst, value, size, element_size)
    ctx = dst.context
    fn = driver.cuGraphExecMemsetNodeSetParams
    call = "cuGraphExecMemsetNodeSetParams"
    apply(graph, ctx, (dst,), call, fn, graph._handle, target._handle, params, ctx.handle)


def memcpy_params(
    graph: Graph, node: object, dst: Buffer | PinnedBuffer, src: Buffer | PinnedBuffer, size: int | None
) -> None:
    for name, obj in (("dst", dst), ("src", src)):
        if not isinstance(obj, Buffer | PinnedBuffer):
            raise wrong_kind(name, "a Buffer or PinnedBuffer", obj)
    target = graph_node(graph, node, ("memcpy",), "set_memcpy_params()")
    params, _, ctx = _memcpy_params(dst, src, size)
    fn = driver.cuGraphExecMemcpyNodeSetParams
    call = "cuGraphExecMemcpyNodeSetParams"
    apply(graph, ctx, (dst, src), call, fn, graph._handle, target._handle, params, ctx.handle)


def callback(graph: Graph, node: object, fn: Callable[[], object]) -> None:
    if not callable(fn):
        raise TypeError(f"a host callback must be callable, not {type(fn).__name__}")
    target = graph_node(graph, node, ("host",), "set_callback()")
    types = _types()
    # The same callable again reuses its entry: repeated changes keep it once.
    found = [o for o in graph._owners.values() if type(o) is _lifetime.HostCallback and o.fn is fn]
    entry = found[0] if found else _lifetime.HostCallback(fn)
    params = types.CUDA_HOST_NODE_PARAMS()
    params.fn = types.CUhostFn(_lifetime.host_thunk_address())
    params.userData = entry.token
    call = "cuGraphExecHostNodeSetParams"
    apply(
        graph,
        graph._context,
        (entry,),
        call,
        driver.cuGraphExecHostNodeSetParams,
        graph._handle,
        target._handle,
        params,
    )


def event(graph: Graph, node: object, ev: Event) -> None:
    if not isinstance(ev, Event):  # every argument's kind before any value (E3)
        raise wrong_kind("event", "an Event", ev)
    target = graph_node(graph, node, ("event_record", "wait_event"), "set_event()")
    handle = ev.handle  # a closed event is refused here (its handle would reach the driver)
    if target._kind == "event_record":
        fn, call = driver.cuGraphExecEventRecordNodeSetEvent, "cuGraphExecEventRecordNodeSetEvent"
    else:
        fn, call = driver.cuGraphExecEventWaitNodeSetEvent, "cuGraphExecEventWaitNodeSetEvent"
    apply(graph, ev.context, (ev,), call, fn, graph._handle, target._handle, handle)


def child(graph: Graph, node: object, definition: GraphDefinition) -> None:
    from cuguard.graphs._definition import GraphDefinition  # it imports the executable graph's module

    if not isinstance(definition, GraphDefinition) or definition._root() is not definition:
        raise wrong_kind("child", "a GraphDefinition", definition)
    target = graph_node(graph, node, ("graph",), "set_child()")
    handle = definition.handle
    _check_owners(definition, definition._owners, "used for an update")  # CUDA reads its nodes now (S2, O4)
    owners, read = split_written(definition._owners)
    fn = driver.cuGraphExecChildGraphNodeSetParams
    call = "cuGraphExecChildGraphNodeSetParams"
    apply(graph, graph._context, owners, call, fn, graph._handle, target._handle, handle, read=read)


def set_enabled(graph: Graph, node: object, enabled: object) -> None:
    if not isinstance(enabled, bool):
        raise wrong_kind("enabled", "a bool", enabled)
    target = graph_node(graph, node, _ENABLE_KINDS, "set_enabled()")
    fn = driver.cuGraphNodeSetEnabled
    apply(graph, graph._context, (), "cuGraphNodeSetEnabled", fn, graph._handle, target._handle, 1 if enabled else 0)


def is_enabled(graph: Graph, node: object) -> bool:
    target = graph_node(graph, node, _ENABLE_KINDS, "is_enabled()")
    out: list[bool] = []

    def ask() -> None:
        err, value = driver.cuGraphNodeGetEnabled(graph._handle, target._handle)
        if err:
            raise_status(err, "cuGraphNodeGetEnabled")
        out.append(bool(value))

    if graph._context is None:
        ask()
    else:
        call_in(graph._context, ask, None)
    return out[0]
