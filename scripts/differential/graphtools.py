"""What the graph, capture and conditional scenarios share."""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import BINDINGS_MAJOR
from differential.common import (
    name,
    ok,
)

CAP = B.CUstreamCaptureMode


_T = B.CUgraphNodeType


def capture_status(d: Any, stream: Any) -> str:
    err, status = d.cuStreamIsCapturing(stream)
    return name(err) if int(err) else B.CUstreamCaptureStatus(int(status)).name


def end_captures_quietly(d: Any, *streams: Any) -> None:
    """End any capture still in progress on ``streams`` (a failed scenario must not leave one)."""
    for stream in streams:
        err, status = d.cuStreamIsCapturing(stream)
        if not int(err) and int(status):
            err, graph = d.cuStreamEndCapture(stream)
            if not int(err) and graph is not None and int(graph):
                d.cuGraphDestroy(graph)


def end_capture(d: Any, stream: Any) -> tuple[str, Any]:
    """``cuStreamEndCapture``: (status name, graph or None); a graph returned beside an error is destroyed."""
    err, graph = d.cuStreamEndCapture(stream)
    has = graph is not None and int(graph) != 0
    if int(err):
        if has:
            d.cuGraphDestroy(graph)
        return name(err), None
    return name(err), graph


def run_graph(d: Any, graph: Any, stream: Any) -> list[str]:
    """Instantiate, launch and wait: the statuses (the instantiate's refusal alone when it refuses)."""
    if graph is None:
        return ["no graph"]
    err, exe = d.cuGraphInstantiate(graph, 0)
    if int(err):
        return [f"instantiate: {name(err)}"]
    out = [name(d.cuGraphLaunch(exe, stream)[0]), name(d.cuStreamSynchronize(stream)[0])]
    d.cuGraphExecDestroy(exe)
    return out


def node_kinds(d: Any, graph: Any) -> list[str] | str:
    """The sorted node types of ``graph``; ``"no graph"`` or the refusal's name when there are none to list."""
    if graph is None:
        return "no graph"
    err, _, count = d.cuGraphGetNodes(graph, 0)
    if int(err):
        return name(err)
    nodes = list(d.cuGraphGetNodes(graph, int(count))[1] or [])[: int(count)] if int(count) else []
    return sorted(_T(int(ok(d.cuGraphNodeGetType(n)))).name for n in nodes)


def edge_count(d: Any, graph: Any) -> int | str:
    """The number of edges of ``graph``; ``"no graph"`` or the refusal's name when it cannot be listed."""
    if graph is None:
        return "no graph"
    result = d.cuGraphGetEdges(graph, 0)
    return name(result[0]) if int(result[0]) else int(result[-1])


def launch_and_wait(d: Any, exe: Any, stream: Any) -> list[str]:
    return [name(d.cuGraphLaunch(exe, stream)[0]), name(d.cuStreamSynchronize(stream)[0])]


COND = B.CUgraphConditionalNodeType


ASSIGN_DEFAULT = 1  # CU_GRAPH_COND_ASSIGN_DEFAULT


def add_node(d: Any, graph: Any, deps: list[Any], params: Any) -> Any:
    """cuGraphAddNode with default edges (13.x takes edge data, 12.x does not)."""
    if BINDINGS_MAJOR >= 13:
        return d.cuGraphAddNode(graph, deps or None, None, len(deps), params)
    return d.cuGraphAddNode(graph, deps or None, len(deps), params)


def add_conditional(  # noqa: PLR0917 - the node parameters' fields
    d: Any, graph: Any, handle: Any, kind: Any, size: int, ctx: Any, deps: list[Any]
) -> tuple[str, Any, list[Any]]:
    """(status, node, bodies) of a conditional node; bodies only on success (phGraph_out is unset otherwise)."""
    params = B.CUgraphNodeParams()
    params.type = B.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = kind
    params.conditional.size = size
    params.conditional.ctx = ctx
    err, node = add_node(d, graph, deps, params)
    if int(err):
        return name(err), None, []
    return name(err), node, list(params.conditional.phGraph_out)[:size]


def memset_node(d: Any, graph: Any, deps: list[Any], ptr: Any, value: int, n: int, ctx: Any) -> Any:  # noqa: PLR0917
    p = B.CUDA_MEMSET_NODE_PARAMS()
    p.dst, p.value, p.elementSize, p.width, p.height, p.pitch = ptr, value, 1, n, 1, 0
    return ok(d.cuGraphAddMemsetNode(graph, deps or None, len(deps), p, ctx))


def read_device(d: Any, ptr: Any, n: int) -> str:
    host = bytearray(n)
    ok(d.cuMemcpyDtoH(host, ptr, n))
    return bytes(host).hex()
