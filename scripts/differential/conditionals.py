"""Conditional nodes: which body runs, CUDA's refusals, nested bodies, instantiation, capture of bodies."""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import BINDINGS_MAJOR, ctx_create
from differential.common import (
    Obs,
    Setup,
    name,
    ok,
    scenario,
)
from differential.graphtools import (
    ASSIGN_DEFAULT,
    CAP,
    COND,
    add_conditional,
    end_capture,
    end_captures_quietly,
    launch_and_wait,
    memset_node,
    node_kinds,
    read_device,
    run_graph,
)


@scenario
def conditional_branches_by_default_value(d: Any) -> Obs:
    # Which body runs, decided by the handle's default (assigned at each launch): if, if-else,
    # switch (in range and past the last body) and a while node whose value is 0.
    cases = [
        ("if", COND.CU_GRAPH_COND_TYPE_IF, 1, 1),
        ("if0", COND.CU_GRAPH_COND_TYPE_IF, 1, 0),
        ("if_else", COND.CU_GRAPH_COND_TYPE_IF, 2, 0),
        ("switch", COND.CU_GRAPH_COND_TYPE_SWITCH, 3, 2),
        ("switch_past", COND.CU_GRAPH_COND_TYPE_SWITCH, 3, 5),
        ("while0", COND.CU_GRAPH_COND_TYPE_WHILE, 1, 0),
    ]
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(8)
        for label, kind, size, default in cases:
            g = ok(d.cuGraphCreate(0))
            handle = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, default, ASSIGN_DEFAULT))
            first = memset_node(d, g, [], p, 0xEE, 8, env.ctx)
            status, _, bodies = add_conditional(d, g, handle, kind, size, env.ctx, [first])
            for i, body in enumerate(bodies):
                memset_node(d, body, [], p, 0x10 + i, 8, env.ctx)
            out.append([label, status, len(bodies), *run_graph(d, g, s), read_device(d, p, 8)])
            d.cuGraphDestroy(g)
    return out


@scenario
def conditional_refusals(d: Any) -> Obs:
    # CUDA's sizes per type, a handle of another graph, handle flags, and a handle no node uses.
    out: Obs = []
    with Setup(d) as env:
        g = ok(d.cuGraphCreate(0))
        other = ok(d.cuGraphCreate(0))
        handle = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 0, 0))
        theirs = ok(d.cuGraphConditionalHandleCreate(other, env.ctx, 0, 0))
        for kind, size in ((COND.CU_GRAPH_COND_TYPE_IF, 3), (COND.CU_GRAPH_COND_TYPE_WHILE, 2)):
            out.append(add_conditional(d, g, handle, kind, size, env.ctx, [])[0])
        out.append(add_conditional(d, g, theirs, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])[0])
        out.append(name(d.cuGraphConditionalHandleCreate(g, env.ctx, 0, 2)[0]))
        out.append(int(d.cuGraphGetNodes(g, 0)[-1]))
        unused = ok(d.cuGraphCreate(0))
        ok(d.cuGraphConditionalHandleCreate(unused, env.ctx, 1, ASSIGN_DEFAULT))
        err, exe = d.cuGraphInstantiate(unused, 0)
        out.append(["unused handle, instantiate", name(err)])
        if not int(err):
            d.cuGraphExecDestroy(exe)
        for graph in (g, other, unused):
            d.cuGraphDestroy(graph)
    return out


@scenario
def conditional_graph_clone_and_nested_bodies(d: Any) -> Obs:
    # An if node whose body holds a switch node (a handle of the outer graph), cloned (CUDA does not
    # clone graphs with conditional nodes) and run.
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(4)
        g = ok(d.cuGraphCreate(0))
        outer = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 1, ASSIGN_DEFAULT))
        inner = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 1, ASSIGN_DEFAULT))
        memset_node(d, g, [], p, 0, 4, env.ctx)
        status, _, bodies = add_conditional(d, g, outer, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])
        status2, cases = "no body", list[Any]()
        if bodies:
            status2, _, cases = add_conditional(d, bodies[0], inner, COND.CU_GRAPH_COND_TYPE_SWITCH, 2, env.ctx, [])
        for i, case in enumerate(cases):
            memset_node(d, case, [], p, 0x30 + i, 4, env.ctx)
        out += [status, status2]
        roots = int(d.cuGraphGetRootNodes(g, 0)[-1])
        err, copy = d.cuGraphClone(g)
        out += [roots, name(err)]
        if not int(err):
            out.append(node_kinds(d, copy))
            d.cuGraphDestroy(copy)
        err, exe = d.cuGraphInstantiate(g, 0)
        out.append(name(err))
        if not int(err):
            out += [name(d.cuGraphLaunch(exe, s)[0]), name(d.cuStreamSynchronize(s)[0]), read_device(d, p, 4)]
            d.cuGraphExecDestroy(exe)
        d.cuGraphDestroy(g)
    return out


def _instantiate_status(d: Any, graph: Any) -> str:
    err, exe = d.cuGraphInstantiate(graph, 0)
    if not int(err):
        d.cuGraphExecDestroy(exe)
    return name(err)


@scenario
def conditional_nested_handle_by_graph(d: Any) -> Obs:
    # A conditional node inside a body, with its handle made on the body graph, on the outer graph and
    # on an unrelated graph; each graph instantiated and run (only the first two handles are used).
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(4)
        for where in ("body", "outer", "unrelated"):
            g = ok(d.cuGraphCreate(0))
            other = ok(d.cuGraphCreate(0))
            outer = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 1, ASSIGN_DEFAULT))
            ok(d.cuMemsetD8(p, 0, 4))
            status, _, bodies = add_conditional(d, g, outer, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])
            row: Obs = [where, status]
            if bodies:
                owner = {"body": bodies[0], "outer": g, "unrelated": other}[where]
                inner = ok(d.cuGraphConditionalHandleCreate(owner, env.ctx, 1, ASSIGN_DEFAULT))
                status2, _, cases = add_conditional(d, bodies[0], inner, COND.CU_GRAPH_COND_TYPE_SWITCH, 2, env.ctx, [])
                for i, case in enumerate(cases):
                    memset_node(d, case, [], p, 0x40 + i, 4, env.ctx)
                row.append(status2)
                if where == "outer" and int(d.cuGraphGetNodes(bodies[0], 0)[-1]) == 0:
                    memset_node(d, bodies[0], [], p, 0x50, 4, env.ctx)  # the unused inner handle stays
                err, exe = d.cuGraphInstantiate(g, 0)
                row.append(name(err))
                if not int(err):
                    row += launch_and_wait(d, exe, s)
                    row.append(read_device(d, p, 4))
                    d.cuGraphExecDestroy(exe)
            out.append(row)
            d.cuGraphDestroy(g)
            d.cuGraphDestroy(other)
    return out


@scenario
def conditional_instantiate_shapes(d: Any) -> Obs:
    # Which graphs with conditional nodes instantiate: an empty body, a node after empty nodes, two
    # conditional nodes, a handle with no node, and a handle used by a node that was destroyed.
    out: Obs = []
    with Setup(d) as env:
        p = env.alloc(4)

        def build(shape: str) -> Obs:
            g = ok(d.cuGraphCreate(0))
            try:
                a = ok(d.cuGraphAddEmptyNode(g, None, 0))
                h1 = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 1, ASSIGN_DEFAULT))
                deps = [a] if shape != "at_root" else []
                status, node, bodies = add_conditional(d, g, h1, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, deps)
                if bodies and shape != "empty_body":
                    memset_node(d, bodies[0], [], p, 3, 4, env.ctx)
                if shape == "two_nodes":
                    h2 = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 0, ASSIGN_DEFAULT))
                    _, _, more = add_conditional(d, g, h2, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])
                    if more:
                        memset_node(d, more[0], [], p, 4, 4, env.ctx)
                if shape == "two_nodes_one_empty":
                    h2 = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 0, ASSIGN_DEFAULT))
                    add_conditional(d, g, h2, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])
                if shape == "spare_handle":
                    ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 0, ASSIGN_DEFAULT))
                if shape == "destroyed_node" and node is not None:
                    h3 = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 0, ASSIGN_DEFAULT))
                    _, gone, _ = add_conditional(d, g, h3, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])
                    if gone is not None:
                        ok(d.cuGraphDestroyNode(gone))
                return [shape, status, _instantiate_status(d, g)]
            finally:
                d.cuGraphDestroy(g)

        for shape in (
            "at_root",
            "after_empty",
            "empty_body",
            "two_nodes",
            "two_nodes_one_empty",
            "spare_handle",
            "destroyed_node",
        ):
            out.append(build(shape))
    return out


@scenario
def conditional_handle_needs_no_current_context(d: Any) -> Obs:
    # cuGraphConditionalHandleCreate takes its context as an argument: asked with none current, and
    # with another context current.
    out: Obs = []
    with Setup(d) as env:
        g = ok(d.cuGraphCreate(0))
        d.cuCtxSetCurrent(B.CUcontext(0))
        err, _ = d.cuGraphConditionalHandleCreate(g, env.ctx, 0, 0)
        out.append(["none current", name(err)])
        other = ok(ctx_create(d, 0, ok(d.cuDeviceGet(0))))
        err, _ = d.cuGraphConditionalHandleCreate(g, env.ctx, 0, 0)
        out.append(["another current", name(err)])
        d.cuCtxSetCurrent(B.CUcontext(0))
        d.cuCtxDestroy(other)
        d.cuCtxSetCurrent(env.ctx)
        d.cuGraphDestroy(g)
    return out


@scenario
def conditional_instantiate_by_current_context(d: Any) -> Obs:
    # A graph with a conditional node (context A) instantiated with A current, with none current,
    # with another context current, and with A made current just before (from none, from another);
    # once with created contexts and once with A the device's primary context.
    out: Obs = []
    dev = ok(d.cuDeviceGet(0))
    for kind in ("created", "primary"):
        a = ok(ctx_create(d, 0, dev)) if kind == "created" else ok(d.cuDevicePrimaryCtxRetain(dev))
        d.cuCtxSetCurrent(a)
        b = ok(ctx_create(d, 0, dev))
        d.cuCtxSetCurrent(a)
        p = ok(d.cuMemAlloc(4))
        g = ok(d.cuGraphCreate(0))
        handle = ok(d.cuGraphConditionalHandleCreate(g, a, 1, ASSIGN_DEFAULT))
        _, _, bodies = add_conditional(d, g, handle, COND.CU_GRAPH_COND_TYPE_IF, 1, a, [])
        for body in bodies:
            memset_node(d, body, [], p, 7, 4, a)
        row: Obs = [kind]
        for label, first, then in (
            ("A", a, None),
            ("none", B.CUcontext(0), None),
            ("other", b, None),
            ("none then A", B.CUcontext(0), a),
            ("other then A", b, a),
        ):
            d.cuCtxSetCurrent(first)
            if then is not None:
                d.cuCtxSetCurrent(then)
            err, exe = d.cuGraphInstantiate(g, 0)
            row.append([label, name(err)])
            if not int(err):
                d.cuGraphExecDestroy(exe)
        out.append(row)
        d.cuCtxSetCurrent(a)
        d.cuGraphDestroy(g)
        d.cuMemFree(p)
        d.cuCtxSetCurrent(B.CUcontext(0))
        d.cuCtxDestroy(b)
        if kind == "created":
            d.cuCtxDestroy(a)
        else:
            d.cuDevicePrimaryCtxRelease(dev)
        d.cuCtxSetCurrent(B.CUcontext(0))
    return out


@scenario
def conditional_nested_outer_handle_shapes(d: Any) -> Obs:
    # An if node in a body with a handle of the outer graph: the handle made before or after the outer
    # node, the body empty or holding a node already, the inner handle's default 0 or 1.
    out: Obs = []
    with Setup(d) as env:
        p = env.alloc(4)
        for early in (True, False):
            for filled in (False, True):
                for default in (0, 1):
                    g = ok(d.cuGraphCreate(0))
                    inner = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, default, ASSIGN_DEFAULT)) if early else None
                    outer = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 1, ASSIGN_DEFAULT))
                    _, _, bodies = add_conditional(d, g, outer, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])
                    if inner is None:
                        inner = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, default, ASSIGN_DEFAULT))
                    if filled:
                        memset_node(d, bodies[0], [], p, 3, 4, env.ctx)
                    status = add_conditional(d, bodies[0], inner, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])[0]
                    out.append([early, filled, default, status, _instantiate_status(d, g)])
                    d.cuGraphDestroy(g)
    return out


@scenario
def conditional_instantiate_twice_and_handle_reuse(d: Any) -> Obs:
    # A graph with a conditional node instantiated a second time while the first executable graph
    # lives, and again after it is destroyed; a node added and destroyed in between; one handle given
    # to a second conditional node (at the top level and in the node's own body).
    out: Obs = []
    with Setup(d) as env:
        p = env.alloc(4)
        g = ok(d.cuGraphCreate(0))
        handle = ok(d.cuGraphConditionalHandleCreate(g, env.ctx, 1, ASSIGN_DEFAULT))
        _, _, bodies = add_conditional(d, g, handle, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])
        memset_node(d, bodies[0], [], p, 1, 4, env.ctx)
        first = ok(d.cuGraphInstantiate(g, 0))
        out.append(["second while the first lives", _instantiate_status(d, g)])
        extra = ok(d.cuGraphAddEmptyNode(g, None, 0))
        ok(d.cuGraphDestroyNode(extra))
        out.append(["after a node came and went", _instantiate_status(d, g)])
        d.cuGraphExecDestroy(first)
        out.append(["after the first was destroyed", _instantiate_status(d, g)])
        out.append(
            ["handle again, top level", add_conditional(d, g, handle, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])[0]]
        )
        out.append(
            [
                "handle again, in its body",
                add_conditional(d, bodies[0], handle, COND.CU_GRAPH_COND_TYPE_IF, 1, env.ctx, [])[0],
            ]
        )
        out.append(["nodes", int(d.cuGraphGetNodes(g, 0)[-1]), int(d.cuGraphGetNodes(bodies[0], 0)[-1])])
        plain = ok(d.cuGraphCreate(0))
        memset_node(d, plain, [], p, 2, 4, env.ctx)
        exe = ok(d.cuGraphInstantiate(plain, 0))
        out.append(["plain graph, second", _instantiate_status(d, plain)])
        d.cuGraphExecDestroy(exe)
        d.cuGraphDestroy(plain)
        d.cuGraphDestroy(g)
    return out


def _add_conditional_at_tail(  # noqa: PLR0917 - the node parameters' fields
    d: Any, s: Any, kind: Any, size: int, default: int, ctx: Any
) -> tuple[Obs, list[Any]]:
    """A conditional node after the capture's tail on ``s``; the capture continues from it."""
    info = d.cuStreamGetCaptureInfo(s)
    graph, deps, count = info[3], list(info[4] or []), int(info[-1])
    handle = ok(d.cuGraphConditionalHandleCreate(graph, ctx, default, ASSIGN_DEFAULT))
    status, node, bodies = add_conditional(d, graph, handle, kind, size, ctx, deps[:count])
    out: Obs = [status]
    if node is not None:
        if BINDINGS_MAJOR >= 13:
            upd = d.cuStreamUpdateCaptureDependencies(s, [node], None, 1, 1)
        else:
            upd = d.cuStreamUpdateCaptureDependencies(s, [node], 1, 1)
        out.append(name(upd[0]))
    return out, bodies


@scenario
def capture_conditional_bodies_captured(d: Any) -> Obs:
    # Conditional nodes added during a capture (the handle made on the capture's graph), their bodies
    # captured on other streams with cuStreamBeginCaptureToGraph; then the graph runs.
    out: Obs = []
    with Setup(d) as env:
        s, side = env.stream(1), env.stream(1)
        p = env.alloc(8)
        ok(d.cuMemsetD8(p, 0, 8))
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        graph = None
        try:
            d.cuMemsetD8Async(p, 1, 8, s)
            for kind, size, default, offset in (
                (COND.CU_GRAPH_COND_TYPE_IF, 2, 0, 0),
                (COND.CU_GRAPH_COND_TYPE_SWITCH, 3, 1, 4),
            ):
                row, bodies = _add_conditional_at_tail(d, s, kind, size, default, env.ctx)
                for i, body in enumerate(bodies):
                    err = d.cuStreamBeginCaptureToGraph(side, body, None, None, 0, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]
                    row.append(name(err))
                    d.cuMemsetD8Async(B.CUdeviceptr(int(p) + offset), 0x20 + 0x10 * size + i, 4, side)
                    status, same = end_capture(d, side)
                    row += [status, same is not None and int(same) == int(body)]
                    row.append(node_kinds(d, body))
                out.append(row)
            d.cuMemsetD8Async(B.CUdeviceptr(int(p) + 7), 9, 1, s)
            status, graph = end_capture(d, s)
        finally:
            end_captures_quietly(d, s, side)
        out += [status, node_kinds(d, graph)]
        if graph is not None:
            err, exe = d.cuGraphInstantiate(graph, 0)
            out.append(name(err))
            if not int(err):
                out += launch_and_wait(d, exe, s)
                d.cuGraphExecDestroy(exe)
            d.cuGraphDestroy(graph)
        out.append(read_device(d, p, 8))
    return out
