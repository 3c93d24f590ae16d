"""The misuse sweep's operations of the graphs layer: definitions, nodes, conditional nodes, executable graphs."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from cuguard.sweeps._misuse.model import SIZE
from cuguard.sweeps._misuse.ops_base import (
    ANY,
    CONFIG,
    CONTEXT,
    DEVICE,
    EDGE,
    EVENT,
    GRAPHCOND,
    GRAPHDEF,
    KERNEL,
    KERNEL_ARGS_PARAM,
    MEMORY,
    NODE,
    STREAM,
    Op,
    Param,
    _boom,
    _deps,
    _exit,
    _noop,
    _p,
    _v,
    adder,
)

__all__ = ["definition_ops", "definition_use_ops", "graph_ops", "node_builder_ops", "node_ops"]


def definition_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Graph definitions: construction and the node builders on a definition."""
    G = L.graphs
    ops: list[Op] = []
    add = adder(ops)
    kargs = KERNEL_ARGS_PARAM
    add(
        "graphs.GraphDefinition()",
        None,
        G.GraphDefinition,
        _p("device", DEVICE | CONTEXT, "Device", optional=True),
        weight=2,
    )
    deps = _deps()
    target = "GraphDefinition"

    def kw(d: Any) -> dict[str, Any]:
        return {"deps": d}

    add(
        "graphs.GraphDefinition.empty",
        target,
        lambda g, *d: g.empty(*d),
        Param("deps", NODE, "Node", names=("dependency", "dep"), star=True),
        weight=3,
    )
    add(
        "graphs.GraphDefinition.join",
        target,
        lambda g, *n: g.join(*n),
        Param("nodes", NODE, "Node", names=("node",), star=True),
    )
    add(
        "graphs.GraphDefinition.memset",
        target,
        lambda g, dst, value, d: g.memset(dst, value, **kw(d)),
        _p("dst", frozenset({"Buffer"}), "Buffer"),
        _v("value", 0, 7, 256, -1, None, good=2),
        deps,
        weight=2,
    )
    add(
        "graphs.GraphDefinition.memcpy",
        target,
        lambda g, dst, src, d: g.memcpy(dst, src, **kw(d)),
        _p("dst", MEMORY, "Buffer"),
        _p("src", MEMORY, "Buffer"),
        deps,
        weight=2,
    )
    add(
        "graphs.GraphDefinition.launch",
        target,
        lambda g, config, kernel, d, *args: g.launch(config, kernel, *args, **kw(d)),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        deps,
        kargs,
        weight=2,
    )
    add(
        "graphs.GraphDefinition.callback",
        target,
        lambda g, fn, d: g.callback(fn, **kw(d)),
        _v("fn", lambda: _noop, lambda: _boom, None, 5, good=2),
        deps,
    )
    add(
        "graphs.GraphDefinition.record",
        target,
        lambda g, ev, d: g.record(ev, **kw(d)),
        _p("event", EVENT, "Event"),
        deps,
    )
    add("graphs.GraphDefinition.wait", target, lambda g, ev, d: g.wait(ev, **kw(d)), _p("event", EVENT, "Event"), deps)
    add(
        "graphs.GraphDefinition.allocate",
        target,
        lambda g, size, device, d: g.allocate(size, device=device, **kw(d)),
        _v("size", SIZE, 0, -1, None, 1.5, good=1),
        _p("device", DEVICE | {"int"}, "Device", optional=True, values=(0, 1, -1, 1.5, "x")),
        deps,
    )
    add(
        "graphs.GraphDefinition.deallocate",
        target,
        lambda g, ptr, d: g.deallocate(ptr, **kw(d)),
        Param(
            "ptr",
            NODE | {"int"},
            "alloc",
            names=("address",),
            values=(0, -1, None, 1.5),
            uses=False,
            node_type="mem_alloc",
        ),
        deps,
    )
    add(
        "graphs.GraphDefinition.embed",
        target,
        lambda g, child, d: g.embed(child, **kw(d)),
        _p("child", GRAPHDEF, "GraphDefinition"),
        deps,
    )
    return ops


def node_builder_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """The node builders on a node (the new node depends on it)."""
    ops: list[Op] = []
    add = adder(ops)
    kargs = KERNEL_ARGS_PARAM
    target = "Node"
    add("graphs.Node.empty", target, lambda n: n.empty(), weight=2)
    add(
        "graphs.Node.join",
        target,
        lambda n, *others: n.join(*others),
        Param("nodes", NODE, "Node", names=("node",), star=True),
    )
    add(
        "graphs.Node.memset",
        target,
        lambda n, dst, value: n.memset(dst, value),
        _p("dst", frozenset({"Buffer"}), "Buffer"),
        _v("value", 0, 7, 256, None, good=2),
    )
    add(
        "graphs.Node.memcpy",
        target,
        lambda n, dst, src: n.memcpy(dst, src),
        _p("dst", MEMORY, "Buffer"),
        _p("src", MEMORY, "Buffer"),
    )
    add(
        "graphs.Node.launch",
        target,
        lambda n, config, kernel, *args: n.launch(config, kernel, *args),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        kargs,
    )
    add("graphs.Node.callback", target, lambda n, fn: n.callback(fn), _v("fn", lambda: _noop, lambda: _boom, 5, good=2))
    add("graphs.Node.record", target, lambda n, ev: n.record(ev), _p("event", EVENT, "Event"))
    add("graphs.Node.wait", target, lambda n, ev: n.wait(ev), _p("event", EVENT, "Event"))
    add(
        "graphs.Node.allocate",
        target,
        lambda n, size, device: n.allocate(size, device=device),
        _v("size", SIZE, 0, None, good=1),
        _p("device", DEVICE | {"int"}, "Device", optional=True, values=(0, -1, "x")),
    )
    add(
        "graphs.Node.deallocate",
        target,
        lambda n, ptr: n.deallocate(ptr),
        Param(
            "ptr",
            NODE | {"int"},
            "alloc",
            names=("address",),
            values=(0, None),
            uses=False,
            node_type="mem_alloc",
        ),
    )
    add("graphs.Node.embed", target, lambda n, child: n.embed(child), _p("child", GRAPHDEF, "GraphDefinition"))
    return ops


def definition_use_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Edges, queries, cloning, instantiation and release of definitions; conditional nodes."""
    ops: list[Op] = []
    add = adder(ops)
    edge = Param("edges", special=EDGE, accepts=frozenset({EDGE}), expect="Node", names=("edge",), star=True)
    add("graphs.GraphDefinition.connect", "GraphDefinition", lambda g, *e: g.connect(*e), edge, weight=2)
    add("graphs.GraphDefinition.disconnect", "GraphDefinition", lambda g, *e: g.disconnect(*e), edge)
    add("graphs.GraphDefinition.nodes", "GraphDefinition", lambda g: (g.nodes, g.edges))
    add("graphs.GraphDefinition.handle", "GraphDefinition", lambda g: g.handle)
    add("graphs.GraphDefinition.context", "GraphDefinition", lambda g: (g.context, g.closed), uses_receiver=False)
    add("graphs.GraphDefinition.clone", "GraphDefinition", lambda g: g.clone())
    add(
        "graphs.GraphDefinition.find_node",
        "GraphDefinition",
        lambda g, n: g.find_node(n),
        _p("original", NODE, "Node", uses=False),
    )
    add("graphs.GraphDefinition.instantiate", "GraphDefinition", lambda g: g.instantiate(), weight=3)
    add("graphs.GraphDefinition.close", "GraphDefinition", lambda g: g.close(), idempotent_close=True)
    add("graphs.GraphDefinition.__exit__", "GraphDefinition", _exit, idempotent_close=True, exit=True)

    # --- graphs: conditional nodes -------------------------------------------------------------
    add(
        "graphs.GraphDefinition.create_condition",
        "GraphDefinition",
        lambda g, d: g.create_condition(d),
        _v("default", 0, 1, None, 7, -1, 2**32, 1.5, "1", good=4),
        weight=2,
    )
    cond = _p("condition", GRAPHCOND, "GraphCondition")
    for target in ("GraphDefinition", "Node"):
        add(f"graphs.{target}.if_then", target, lambda t, c: t.if_then(c), cond, weight=2)
        add(f"graphs.{target}.if_else", target, lambda t, c: t.if_else(c), cond)
        add(
            f"graphs.{target}.switch",
            target,
            lambda t, c, n: t.switch(c, n),
            cond,
            _v("count", 1, 3, 0, -1, None, 1.5, good=2),
        )
        # Not on a GPU: nothing in the sweep clears a condition, so a while node whose value is not 0
        # would run its body until the launch is killed.
        add(f"graphs.{target}.while_loop", target, lambda t, c: t.while_loop(c), cond, real=False)
    add(
        "graphs.Node.branches",
        "Node",
        lambda n: ([(b.nodes, b.edges) for b in n.branches], n.condition),
        receiver_type="conditional",
    )
    add("graphs.GraphCondition.handle", "GraphCondition", lambda c: (c.handle, c.default, c.graph))
    return ops


def node_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Nodes: kernel parameters, destruction, queries, edges and edge views."""
    ops: list[Op] = []
    add = adder(ops)
    kargs = KERNEL_ARGS_PARAM
    add("graphs.Node.set_args", "Node", lambda n, *args: n.set_args(*args), kargs, receiver_type="kernel")
    add(
        "graphs.Node.set_params",
        "Node",
        lambda n, config, kernel: n.set_params(config=config, kernel=kernel),
        _p("config", CONFIG, "LaunchConfig", optional=True),
        _p("kernel", KERNEL, "Kernel", optional=True),
        receiver_type="kernel",
    )
    add("graphs.Node.destroy", "Node", lambda n: n.destroy(), idempotent_close=True, weight=2)
    add("graphs.Node.handle", "Node", lambda n: n.handle)
    add("graphs.Node.type", "Node", lambda n: (n.type, n.graph, n.closed, n.params), uses_receiver=False)
    add("graphs.Node.ptr", "Node", lambda n: n.ptr, uses_receiver=False, receiver_type="mem_alloc")
    add("graphs.Node.pred", "Node", lambda n: (set(n.pred), len(n.succ)))
    nodes_it = Param("nodes", NODE, "Node", names=("node",), iterable=True)

    def assign(side: str) -> Callable[..., None]:
        def run(n: Any, nodes: Any) -> None:
            setattr(n, side, nodes)

        return run

    add("graphs.Node.pred[set]", "Node", assign("pred"), nodes_it)
    add("graphs.Node.succ[set]", "Node", assign("succ"), nodes_it)
    value = Param("value", NODE, "Node", names=("node", "item"))
    others = Param("others", NODE, "Node", names=("other", "node", "iterable"), iterable=True)
    key_error = (KeyError,)
    for side in ("pred", "succ"):

        def view(n: Any, side: str = side) -> Any:
            return getattr(n, side)

        add(f"graphs.Node.{side}.add", "Node", lambda n, v, view=view: view(n).add(v), value)
        add(f"graphs.Node.{side}.discard", "Node", lambda n, v, view=view: view(n).discard(v), value)
        add(
            f"graphs.Node.{side}.remove",
            "Node",
            lambda n, v, view=view: view(n).remove(v),
            value,
            extra_errors=key_error,
        )
        add(f"graphs.Node.{side}.update", "Node", lambda n, o, view=view: view(n).update(o), others)
        add(
            f"graphs.Node.{side}.difference_update",
            "Node",
            lambda n, o, view=view: view(n).difference_update(o),
            others,
        )
        add(f"graphs.Node.{side}.clear", "Node", lambda n, view=view: view(n).clear())
        add(f"graphs.Node.{side}.pop", "Node", lambda n, view=view: view(n).pop(), extra_errors=key_error)
        add(f"graphs.Node.{side}.__ixor__", "Node", lambda n, o, view=view: view(n).__ixor__(o), others)
        add(f"graphs.Node.{side}.__iand__", "Node", lambda n, o, view=view: view(n).__iand__(o), others)
        add(
            f"graphs.Node.{side}.__contains__",
            "Node",
            lambda n, v, view=view: v in view(n),
            Param("item", ANY, "Node", uses=False, naming=False),
            uses_receiver=False,  # set semantics: a non-node is simply not a member
        )
    return ops


def graph_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Executable graphs: launches, updates, per-node changes, release."""
    ops: list[Op] = []
    add = adder(ops)
    add("graphs.Graph.launch", "Graph", lambda x, s: x.launch(s), _p("stream", STREAM, "Stream"), weight=3)
    add("graphs.Graph.upload", "Graph", lambda x, s: x.upload(s), _p("stream", STREAM, "Stream"))
    add("graphs.Graph.update", "Graph", lambda x, g: x.update(g), _p("definition", GRAPHDEF, "GraphDefinition"))
    add("graphs.Graph.handle", "Graph", lambda x: (x.closed, x.handle))

    # --- graphs: per-node changes of executable graphs --------------------------------------------
    def node_of(kind: str = "") -> Param:
        return _p("node", NODE, "Node", node_type=kind)

    add(
        "graphs.Graph.set_kernel_params",
        "Graph",
        lambda x, n, cfg, k: x.set_kernel_params(n, cfg, k),
        node_of("kernel"),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
    )
    add(
        "graphs.Graph.set_memset_params",
        "Graph",
        lambda x, n, dst, v: x.set_memset_params(n, dst, v),
        node_of("memset"),
        _p("dst", frozenset({"Buffer"}), "Buffer"),
        _v("value", 1, 0, 255, -1, 256, None, 1.5, good=3),
    )
    add(
        "graphs.Graph.set_memcpy_params",
        "Graph",
        lambda x, n, dst, src: x.set_memcpy_params(n, dst, src),
        node_of("memcpy"),
        _p("dst", MEMORY, "Buffer"),
        _p("src", MEMORY, "Buffer"),
    )
    add(
        "graphs.Graph.set_callback",
        "Graph",
        lambda x, n, fn: x.set_callback(n, fn),
        node_of("host"),
        _v("fn", lambda: _noop, lambda: _boom, 5, good=2),
    )
    # Record and wait nodes both take an event: the kind of node is checked, not typed.
    add("graphs.Graph.set_event", "Graph", lambda x, n, ev: x.set_event(n, ev), node_of(), _p("event", EVENT, "Event"))
    add(
        "graphs.Graph.set_child",
        "Graph",
        lambda x, n, child: x.set_child(n, child),
        node_of("graph"),
        _p("child", GRAPHDEF, "GraphDefinition"),
    )
    add(
        "graphs.Graph.set_enabled",
        "Graph",
        lambda x, n, on: x.set_enabled(n, on),
        node_of(),
        _v("enabled", False, True, 0, None, "yes", good=2),
    )
    add("graphs.Graph.is_enabled", "Graph", lambda x, n: x.is_enabled(n), node_of())
    add("graphs.Graph.close", "Graph", lambda x: x.close(), idempotent_close=True)
    add("graphs.Graph.__exit__", "Graph", _exit, idempotent_close=True, exit=True)
    return ops
