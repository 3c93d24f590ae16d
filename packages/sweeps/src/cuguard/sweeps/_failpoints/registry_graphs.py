"""The sweep's scenarios of the graph layer's newer operations (see :mod:`cuguard.sweeps._failpoints.registry`).

Each function returns the scenarios of one group of operations; ``registry._build()``
adds them. :data:`NO_DRIVER_CALL_GRAPHS` lists the public callables of these groups
that make no driver call, with the reason (merged into ``registry.NO_DRIVER_CALL``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from cuguard.sweeps._failpoints.registry_base import (
    SIZE,
    Env,
    Scenario,
    _graph_state,
    _probe_graph,
    _release,
    _stream_probe,
    adder,
    dev_only,
    nothing,
    with_exec,
    with_graph,
    with_module,
    with_stream,
)

__all__ = [
    "NO_DRIVER_CALL_GRAPHS",
    "capture_scenarios",
    "conditional_scenarios",
    "definition_scenarios",
    "node_scenarios",
    "update_scenarios",
]

_B = "graphs.GraphBuilder."
_RECORDED = "returns what the builder recorded: no driver call"
_NO_CALL_RESOURCE = "returns what the object recorded at creation"


def definition_scenarios() -> list[Scenario]:
    """Graph definitions: construction, node builders on definitions and nodes, cloning, release."""
    out: list[Scenario] = []
    add = adder(out)
    G = "graphs."
    gk: dict[str, Any] = {"probe": _probe_graph, "state": _graph_state}
    add(G + "GraphDefinition()", dev_only, lambda e, s: e.own(e.graphs.GraphDefinition(s.dev)))
    add(
        G + "GraphDefinition()[no device]",
        nothing,
        lambda e, s: e.own(e.graphs.GraphDefinition()),
        covers=(G + "GraphDefinition()",),
    )
    add(G + "GraphDefinition.nodes", with_graph, lambda e, s: s.g.nodes, **gk)
    add(G + "GraphDefinition.edges", with_graph, lambda e, s: s.g.edges, **gk)
    add(G + "GraphDefinition.connect", with_graph, lambda e, s: s.g.connect((s.a, s.c), (s.b, s.c)), **gk)

    def connected_graph(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.g.connect((s.a, s.c))
        return s

    add(G + "GraphDefinition.disconnect", connected_graph, lambda e, s: s.g.disconnect((s.a, s.b), (s.a, s.c)), **gk)
    builders: list[tuple[str, Callable[[Any, Any], Any]]] = [
        ("empty", lambda t, s: t.empty(*([s.c] if t is s.g else []))),
        ("join", lambda t, s: t.join(s.a, s.c) if t is s.g else t.join(s.a)),
        ("memset", lambda t, s: t.memset(s.buf, 1)),
        ("memcpy", lambda t, s: t.memcpy(s.buf, s.buf2)),
        ("launch", lambda t, s: t.launch(s.config, s.kernel, s.buf, 9, SIZE)),
        ("callback", lambda t, s: t.callback(lambda: None)),
        ("record", lambda t, s: t.record(s.event)),
        ("wait", lambda t, s: t.wait(s.event)),
        ("allocate", lambda t, s: t.allocate(SIZE)),
        ("deallocate", lambda t, s: t.deallocate(s.alloc)),
        ("embed", lambda t, s: t.embed(s.child)),
    ]

    def graph_with_child(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.child = env.own(env.graphs.GraphDefinition(s.dev))
        s.child.memset(s.buf2, 2)
        return s

    def graph_with_alloc(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.alloc = s.c.allocate(SIZE)
        return s

    def on(target: str, build: Callable[[Any, Any], Any]) -> Callable[[Env, Any], Any]:
        return lambda e, s: build(getattr(s, target), s)

    for method, build in builders:
        setup = {"embed": graph_with_child, "deallocate": graph_with_alloc}.get(method, with_graph)
        add(f"{G}GraphDefinition.{method}", setup, on("g", build), **gk)
        add(f"{G}Node.{method}", setup, on("b", build), **gk)
    add(
        G + "GraphDefinition.memcpy[pinned]",
        with_graph,
        lambda e, s: s.g.memcpy(s.pinned, s.buf, deps=(s.a, s.c)),
        covers=(G + "GraphDefinition.memcpy",),
        **gk,
    )
    add(G + "GraphDefinition.clone", with_graph, lambda e, s: e.own(s.g.clone()), **gk)
    add(G + "GraphDefinition.instantiate", with_graph, lambda e, s: e.own(s.g.instantiate()), **gk)
    add(
        G + "GraphDefinition.close",
        with_graph,
        lambda e, s: s.g.close(),
        releases=True,
        probe=lambda e, s: (s.g.close(), _stream_probe(e, s)),
    )
    add(G + "GraphDefinition.__exit__", with_graph, lambda e, s: s.g.__exit__(None, None, None), releases=True)

    def detached_graph(env: Env) -> SimpleNamespace:
        s = with_stream(env)
        s.g = env.graphs.GraphDefinition(s.dev)
        s.g.empty()
        return s

    add(G + "GraphDefinition.__del__", detached_graph, _release("g"), kind="warn", releases=True)
    return out


def node_scenarios() -> list[Scenario]:
    """Nodes, their edges and edge views, and executable graphs."""
    out: list[Scenario] = []
    add = adder(out)
    G = "graphs."
    gk: dict[str, Any] = {"probe": _probe_graph, "state": _graph_state}

    # --- graphs: nodes and edges -----------------------------------------------------------
    def kernel_graph(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.k = s.a.launch(s.config, s.kernel, s.buf, 1, SIZE)
        return s

    add(G + "Node.set_args", kernel_graph, lambda e, s: s.k.set_args(s.buf2, 2, SIZE), **gk)
    add(G + "Node.set_params", kernel_graph, lambda e, s: s.k.set_params(config=s.config, args=(s.buf2, 3, 8)), **gk)
    add(G + "Node.destroy", with_graph, lambda e, s: s.b.destroy(), **gk)
    add(G + "Node.pred", with_graph, lambda e, s: set(s.b.pred), **gk)
    add(G + "Node.succ", with_graph, lambda e, s: len(s.a.succ), **gk)

    def set_pred(e: Env, s: Any) -> None:
        s.b.pred = {s.c}

    def set_succ(e: Env, s: Any) -> None:
        s.a.succ = {s.c}

    add(G + "Node.pred[set]", with_graph, set_pred, covers=(G + "Node.pred",), **gk)
    add(G + "Node.succ[set]", with_graph, set_succ, covers=(G + "Node.succ",), **gk)
    edge_ops: list[tuple[str, Callable[[Env, Any], Any]]] = [
        ("add", lambda e, s: s.c.pred.add(s.a)),
        ("discard", lambda e, s: s.b.pred.discard(s.a)),
        ("remove", lambda e, s: s.b.pred.remove(s.a)),
        ("update", lambda e, s: s.c.pred.update([s.a, s.b])),
        ("difference_update", lambda e, s: s.a.succ.difference_update([s.b])),
        ("clear", lambda e, s: s.a.succ.clear()),
        ("pop", lambda e, s: s.a.succ.pop()),
        ("isdisjoint", lambda e, s: s.a.succ.isdisjoint([s.c])),
        ("__ixor__", lambda e, s: s.a.succ.__ixor__([s.b, s.c])),
    ]
    for method, fn in edge_ops:
        add(f"{G}EdgeView.{method}", with_graph, fn, **gk)

    # --- graphs: executable graphs -------------------------------------------------------
    ek: dict[str, Any] = {"probe": lambda e, s: (s.exec.launch(s.stream), s.stream.sync())}
    add(G + "Graph.launch", with_exec, lambda e, s: s.exec.launch(s.stream), **ek)
    add(G + "Graph.upload", with_exec, lambda e, s: s.exec.upload(s.stream), **ek)
    add(G + "Graph.update", with_exec, lambda e, s: s.exec.update(s.g2), **ek)
    add(
        G + "Graph.close",
        with_exec,
        lambda e, s: s.exec.close(),
        releases=True,
        probe=lambda e, s: (s.exec.close(), _stream_probe(e, s)),
    )
    add(G + "Graph.__exit__", with_exec, lambda e, s: s.exec.__exit__(None, None, None), releases=True)

    def detached_exec(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.exec = s.g.instantiate()
        return s

    add(G + "Graph.__del__", detached_exec, _release("exec"), kind="warn", releases=True)
    return out


# --- stream capture (GraphBuilder) -----------------------------------------------------------


def _with_builder(env: Env) -> SimpleNamespace:
    """A builder over a stream, not building, with a module and buffers to capture work on."""
    s = with_module(env)
    s.b = env.own(env.graphs.GraphBuilder(s.stream))
    s.fill = lambda: s.buf.fill(7, s.b)
    return s


def _building(env: Env) -> SimpleNamespace:
    s = _with_builder(env)
    s.b.begin_building()
    s.fill()
    s.b.keep(s.buf)
    return s


def _building_with_fork(env: Env) -> SimpleNamespace:
    s = _building(env)
    _, s.fork = s.b.split(2)
    s.buf2.fill(3, s.fork)
    s.b.keep(s.buf2)
    return s


def _ended(env: Env) -> SimpleNamespace:
    s = _building(env)
    s.b.end_building()
    return s


def _joined(env: Env) -> SimpleNamespace:
    s = _building_with_fork(env)
    s.b.join(s.fork)
    return s


def _with_child(env: Env) -> SimpleNamespace:
    s = _building(env)
    s.child = env.own(env.graphs.GraphDefinition(s.dev))
    s.child.memset(s.buf2, 5)
    return s


def _probe_builder(env: Env, s: Any) -> None:
    """The builder still works: end what is in progress (joining a fork left unjoined), capture again, run it."""
    b = s.b
    fork = getattr(s, "fork", None)
    if b.is_building and fork is not None and fork.is_building:
        b.join(fork)
    if b.is_building:
        b.end_building()
    b.begin_building()
    s.buf.fill(9, b)
    b.keep(s.buf)
    with b.end_building().complete():
        pass
    s.stream.sync()


def _building_state(env: Env, s: Any) -> Any:
    return s.b.is_building


def _launch(env: Env, s: Any) -> None:
    s.b.launch(s.config, s.kernel, s.buf, 7, SIZE)


def _exchange(env: Env, s: Any) -> Any:
    previous = env.graphs.exchange_capture_mode("relaxed")
    env.own(lambda: env.graphs.exchange_capture_mode(previous))
    return previous


def _scoped_mode(env: Env, s: Any) -> None:
    with env.graphs.capture_mode("relaxed"):
        pass


def _building_with_condition(env: Env) -> SimpleNamespace:
    s = _building(env)
    s.cond = s.b.create_condition(1)
    return s


def _with_captured_body(env: Env) -> SimpleNamespace:
    """A capture with an if node whose body builder ``body`` has not begun."""
    s = _building_with_condition(env)
    s.body = s.b.if_then(s.cond)
    return s


def _captured_body_building(env: Env) -> SimpleNamespace:
    s = _with_captured_body(env)
    s.body.begin_building()
    s.buf2.fill(4, s.body)
    s.body.keep(s.buf2)
    return s


def _probe_capture_conditional(env: Env, s: Any) -> None:
    """End what the case left (a body, a condition still without its node), then as ``_probe_builder``."""
    body = getattr(s, "body", None)
    if body is not None and body.is_building:
        body.end_building()
    cond = getattr(s, "cond", None)
    if s.b.is_building and cond is not None and cond._node is None:
        s.b.if_then(cond)
    _probe_builder(env, s)


def _collected_builder(env: Env) -> SimpleNamespace:
    s = with_module(env)
    s.b = env.graphs.GraphBuilder(s.stream)  # not owned: the operation drops it
    s.b.begin_building()
    s.buf.fill(1, s.b)
    s.b.split(2)
    return s


def _drop_builder(env: Env, s: Any) -> None:
    import gc

    s.b = None
    gc.collect()


def capture_scenarios() -> list[Scenario]:
    """GraphBuilder's operations and the thread's capture mode."""
    out: list[Scenario] = []
    add = adder(out)
    probe, state = _probe_builder, _building_state
    add(_B + "begin_building", _with_builder, lambda e, s: s.b.begin_building(), probe=probe, state=state)
    add(_B + "end_building", _joined, lambda e, s: s.b.end_building(), probe=probe, releases=True)
    add(_B + "complete", _ended, lambda e, s: e.own(s.b.complete()), probe=probe)
    # One fork: with more, a wait failing after another fork joined leaves that fork in the capture
    # until it ends, as split() documents (a stream leaves a capture only when the capture ends).
    add(_B + "split", _building, lambda e, s: s.b.split(2), probe=probe, state=state)
    add(_B + "join", _building_with_fork, lambda e, s: s.b.join(s.fork), probe=probe, state=state)
    # Not all-or-nothing: a failed dependency update abandons the capture (as embed() and callback() document).
    add(_B + "embed", _with_child, lambda e, s: s.b.embed(s.child), probe=probe, releases=True)
    add(_B + "callback", _building, lambda e, s: s.b.callback(lambda: None), probe=probe, releases=True)
    add(_B + "launch", _building, _launch, probe=probe, state=state)
    add(_B + "status", _building, lambda e, s: s.b.status, probe=probe)
    add(_B + "close", _building_with_fork, lambda e, s: s.b.close(), releases=True)
    add(_B + "__exit__", _building_with_fork, lambda e, s: s.b.__exit__(None, None, None), releases=True)
    add(_B + "__del__", _collected_builder, _drop_builder, kind="warn", releases=True)
    cprobe = _probe_capture_conditional
    add(_B + "create_condition", _building, lambda e, s: s.b.create_condition(1), probe=cprobe, state=state)
    for method in ("if_then", "if_else", "while_loop", "switch"):
        # Not all-or-nothing: a failed dependency update abandons the capture (as embed() documents).
        add(_B + method, _building_with_condition, _conditional_builder(method, "b"), probe=cprobe, releases=True)
    add(
        _B + "begin_building[body]",
        _with_captured_body,
        lambda e, s: s.body.begin_building(),
        covers=(_B + "begin_building",),
        probe=cprobe,
        state=lambda e, s: s.body.is_building,
    )
    add(
        _B + "end_building[body]",
        _captured_body_building,
        lambda e, s: s.body.end_building(),
        covers=(_B + "end_building",),
        probe=cprobe,
        releases=True,
    )
    add(_B + "close[body]", _captured_body_building, lambda e, s: s.b.close(), covers=(_B + "close",), releases=True)
    add("graphs.exchange_capture_mode", with_module, _exchange)
    add("graphs.capture_mode", with_module, _scoped_mode)
    return out


#: Public callables of these groups that make no driver call, with the reason.
NO_DRIVER_CALL_GRAPHS: dict[str, str] = {
    "graphs.flush_deferred": "waits for cuguard's release thread; makes no driver call itself",
    "graphs.compiled": "a flag fixed at import: which build runs",
    "graphs.pending_payloads": "counts registered payloads: no driver call",
    "graphs.Graph()": "refused with TypeError: use GraphDefinition.instantiate()",
    "graphs.Node()": "refused with TypeError: nodes come from builders",
    "graphs.EdgeView()": "made by Node.pred / Node.succ",
    "graphs.GraphDefinition.find_node": "looks up the clone's node table: no driver call",
    "graphs.GraphDefinition.handle": _NO_CALL_RESOURCE,
    "graphs.GraphDefinition.closed": _NO_CALL_RESOURCE,
    "graphs.GraphDefinition.context": _NO_CALL_RESOURCE,
    "graphs.Graph.handle": _NO_CALL_RESOURCE,
    "graphs.Graph.closed": _NO_CALL_RESOURCE,
    "graphs.Node.graph": _NO_CALL_RESOURCE,
    "graphs.Node.type": _NO_CALL_RESOURCE,
    "graphs.Node.handle": _NO_CALL_RESOURCE,
    "graphs.Node.closed": _NO_CALL_RESOURCE,
    "graphs.Node.ptr": _NO_CALL_RESOURCE,
    "graphs.Node.params": _NO_CALL_RESOURCE,
    "graphs.CAPTURE_MODES": "a table of the capture modes' names: no driver call",
    "graphs.GraphBuilder()": "checks its arguments and records the stream: no driver call",
    _B + "stream": _RECORDED,
    _B + "mode": _RECORDED,
    _B + "is_building": _RECORDED,
    _B + "definition": _RECORDED,
    _B + "closed": _RECORDED,
    _B + "keep": "records objects to keep alive: no driver call",
}


# --- conditional nodes ------------------------------------------------------------------------

_G = "graphs."


def _with_condition(env: Env) -> SimpleNamespace:
    """The definition of ``with_graph`` and a condition of it that no node uses yet."""

    s = with_graph(env)
    s.cond = s.g.create_condition(0)
    return s


def _with_body(env: Env) -> SimpleNamespace:
    """A conditional node ``n`` after ``a`` whose body ``body`` runs (default 1), and a spare condition."""
    s = _with_condition(env)
    s.on = s.g.create_condition(1)
    s.n = s.a.if_then(s.on)
    s.body = s.n.branches[0]
    s.body.memset(s.buf, 3)
    s.child = env.own(env.graphs.GraphDefinition(s.dev))
    s.child.memset(s.buf2, 2)
    return s


def _with_conditional_exec(env: Env) -> SimpleNamespace:
    s = _with_body(env)
    s.g.if_then(s.cond)  # every condition has its node before instantiation (a CUDA rule)
    s.exec = env.own(s.g.instantiate())
    return s


def _probe_conditional(env: Env, s: Any) -> None:
    """Every condition of the case gets a node, then the definition takes a node, loses it and instantiates."""

    g = s.g
    for name in ("cond", "on"):
        cond = getattr(s, name, None)
        if cond is not None and not cond._used():
            g.if_then(cond)
    for ref in list(g._executables or ()):  # CUDA instantiates a graph with conditions once at a time
        graph = ref()
        if graph is not None and not graph.closed:
            graph.close()
    _probe_graph(env, s)


def _create(env: Env, s: Any) -> None:
    s.cond = s.g.create_condition(1)


def _conditional_builder(method: str, target: str) -> Callable[[Env, Any], Any]:
    def op(env: Env, s: Any) -> Any:
        build = getattr(getattr(s, target), method)
        return build(s.cond, 3) if method == "switch" else build(s.cond)

    return op


def _exec_probe(env: Env, s: Any) -> None:
    s.exec.launch(s.stream)
    s.stream.sync()


def conditional_scenarios() -> list[Scenario]:
    """Condition handles, the conditional builders, body builders, and running conditional graphs."""

    out: list[Scenario] = []
    add = adder(out)
    gk: dict[str, Any] = {"probe": _probe_conditional, "state": _graph_state}
    add(_G + "GraphDefinition.create_condition", with_graph, _create, **gk)
    for method in ("if_then", "if_else", "while_loop", "switch"):
        add(f"{_G}GraphDefinition.{method}", _with_condition, _conditional_builder(method, "g"), **gk)
        add(f"{_G}Node.{method}", _with_condition, _conditional_builder(method, "b"), **gk)
    body_ops: list[tuple[str, Callable[[Env, Any], Any]]] = [
        ("empty", lambda e, s: s.body.empty()),
        ("memset", lambda e, s: s.body.memset(s.buf2, 1)),
        ("memcpy", lambda e, s: s.body.memcpy(s.buf2, s.buf)),
        ("launch", lambda e, s: s.body.launch(s.config, s.kernel, s.buf, 9, SIZE)),
        ("embed", lambda e, s: s.body.embed(s.child)),
        ("if_then", lambda e, s: s.body.if_then(s.cond)),
        ("nodes", lambda e, s: s.body.nodes),
    ]
    for method, op in body_ops:
        add(f"{_G}ConditionalBody.{method}", _with_body, op, covers=(f"{_G}GraphDefinition.{method}",), **gk)
    add(_G + "Node.destroy[conditional]", _with_body, lambda e, s: s.n.destroy(), covers=(_G + "Node.destroy",), **gk)
    add(
        _G + "GraphDefinition.instantiate[conditional]",
        _with_body,
        lambda e, s: (s.g.if_then(s.cond), e.own(s.g.instantiate())),
        covers=(_G + "GraphDefinition.instantiate",),
        probe=_probe_conditional,
    )
    add(
        _G + "Graph.launch[conditional]",
        _with_conditional_exec,
        lambda e, s: s.exec.launch(s.stream),
        covers=(_G + "Graph.launch",),
        probe=_exec_probe,
    )
    return out


# --- per-node changes of executable graphs, and set_params of an instantiated definition ---------


def _with_exec_nodes(env: Env) -> SimpleNamespace:
    """An executable graph with a node of every kind that takes per-node changes."""

    s = with_module(env)
    s.event = env.own(s.dev.create_event())
    s.event2 = env.own(s.dev.create_event())
    s.g = g = env.own(env.graphs.GraphDefinition(s.dev))
    s.k = g.launch(s.config, s.kernel, s.buf, 1, SIZE)
    s.m = s.k.memset(s.buf, 2)
    s.c = s.m.memcpy(s.pinned, s.buf)
    s.h = g.callback(lambda: None)
    s.r = g.record(s.event)
    s.w = s.r.wait(s.event)
    s.child = env.own(env.graphs.GraphDefinition(s.dev))
    s.child.memset(s.buf2, 5)
    s.child2 = env.own(env.graphs.GraphDefinition(s.dev))
    s.child2.memset(s.buf2, 6)
    s.e = g.embed(s.child)
    s.exec = env.own(g.instantiate())
    return s


def _with_instantiated_kernel(env: Env) -> SimpleNamespace:

    s = with_graph(env)
    s.k = s.a.launch(s.config, s.kernel, s.buf, 1, SIZE)
    s.exec = env.own(s.g.instantiate())
    return s


def _probe_instantiated(env: Env, s: Any) -> None:

    _probe_graph(env, s)
    _exec_probe(env, s)


def update_scenarios() -> list[Scenario]:
    """Graph.set_* and enable/disable, and Node.set_params once an executable graph shares the payload."""

    out: list[Scenario] = []
    add = adder(out)
    ek: dict[str, Any] = {"probe": _exec_probe}
    x = _G + "Graph."
    add(
        x + "set_kernel_params",
        _with_exec_nodes,
        lambda e, s: s.exec.set_kernel_params(s.k, s.config, s.kernel, s.buf2, 3, SIZE),
        **ek,
    )
    add(x + "set_memset_params", _with_exec_nodes, lambda e, s: s.exec.set_memset_params(s.m, s.buf2, 4), **ek)
    add(x + "set_memcpy_params", _with_exec_nodes, lambda e, s: s.exec.set_memcpy_params(s.c, s.pinned, s.buf2), **ek)
    add(x + "set_callback", _with_exec_nodes, lambda e, s: s.exec.set_callback(s.h, lambda: None), **ek)
    add(x + "set_event", _with_exec_nodes, lambda e, s: s.exec.set_event(s.r, s.event2), **ek)
    add(
        x + "set_event[wait]",
        _with_exec_nodes,
        lambda e, s: s.exec.set_event(s.w, s.event2),
        covers=(x + "set_event",),
        **ek,
    )
    add(x + "set_child", _with_exec_nodes, lambda e, s: s.exec.set_child(s.e, s.child2), **ek)
    add(x + "set_enabled", _with_exec_nodes, lambda e, s: s.exec.set_enabled(s.m, False), **ek)
    add(x + "is_enabled", _with_exec_nodes, lambda e, s: s.exec.is_enabled(s.m), **ek)
    add(
        _G + "Node.set_params[instantiated]",
        _with_instantiated_kernel,
        lambda e, s: s.k.set_params(config=s.config, args=(s.buf2, 3, 8)),
        covers=(_G + "Node.set_params",),
        probe=_probe_instantiated,
        state=_graph_state,
    )
    return out


NO_DRIVER_CALL_GRAPHS.update(
    {
        "graphs.ConditionalBody": "a GraphDefinition a conditional node owns: its builders are swept in a body "
        "(ConditionalBody.*); it refuses instantiate, clone, close and embed before the driver",
        "graphs.GraphCondition()": "refused with TypeError: conditions come from GraphDefinition.create_condition",
        "graphs.GraphCondition.handle": "returns what create_condition recorded: no driver call",
        "graphs.GraphCondition.default": "returns what create_condition recorded: no driver call",
        "graphs.GraphCondition.graph": "returns what create_condition recorded: no driver call",
        "graphs.Node.branches": "returns the bodies the conditional builder recorded: no driver call",
        "graphs.Node.condition": "returns the condition the conditional builder recorded: no driver call",
    }
)
