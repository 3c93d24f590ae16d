"""The misuse sweep's operations of the graphs layer's stream capture (GraphBuilder) and capture modes."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from cuguard.sweeps._misuse.ops_base import (
    ANY,
    BUILDER,
    CONFIG,
    GRAPHCOND,
    GRAPHDEF,
    KERNEL,
    KERNEL_ARGS_PARAM,
    Op,
    Param,
    _exit,
    _in_capture_mode,
    _noop,
    _p,
    _v,
    adder,
)

__all__ = ["capture_ops"]


def capture_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Graph builders: construction, captures begun and ended, captured work, conditional nodes, capture modes."""
    G = L.graphs
    ops: list[Op] = []
    add = adder(ops)
    kargs = KERNEL_ARGS_PARAM
    # Builders capture in relaxed mode: a capture in global mode prohibits the potentially unsafe
    # calls of every operation the sweep interleaves (a documented CUDAError, and an invalidated capture).
    state = (RuntimeError,)  # documented: an operation that needs a capture in progress (or ended) without one
    modes = _v("mode", "relaxed", "relaxed", "thread_local", "global", "loose", None, 2, good=4)
    add(
        "graphs.GraphBuilder()",
        None,
        lambda s, mode: G.GraphBuilder(s, mode=mode),
        _p("stream", frozenset({"Stream"}), "Stream"),
        modes,
        weight=2,
    )
    add(
        "graphs.GraphBuilder.begin_building", "GraphBuilder", lambda b: b.begin_building(), extra_errors=state, weight=3
    )
    add(
        "graphs.GraphBuilder.begin_building[mode]",
        "GraphBuilder",
        lambda b, mode: b.begin_building(mode),
        _v("mode", "relaxed", "thread_local", "global", None, "loose", 2, good=4),
        extra_errors=state,
        weight=2,
    )
    add(
        "graphs.GraphBuilder.launch",
        "GraphBuilder",
        lambda b, config, kernel, *args: b.launch(config, kernel, *args),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        kargs,
        extra_errors=state,
        weight=3,
    )
    # keep() takes any object: nothing is a wrong kind; closed objects and copies are kept as given.
    add(
        "graphs.GraphBuilder.keep",
        "GraphBuilder",
        lambda b, *objects: b.keep(*objects),
        Param("objects", ANY, "", star=True, uses=False, naming=False),
        extra_errors=state,
        weight=2,
    )
    add("graphs.GraphBuilder.end_building", "GraphBuilder", lambda b: b.end_building(), extra_errors=state, weight=3)
    add("graphs.GraphBuilder.complete", "GraphBuilder", lambda b: b.complete(), extra_errors=state, weight=2)
    add(
        "graphs.GraphBuilder.split",
        "GraphBuilder",
        lambda b, n: b.split(n),
        _v("count", 2, 1, 0, "2", None, good=2),
        extra_errors=state,
    )
    add(
        "graphs.GraphBuilder.join",
        "GraphBuilder",
        lambda b, f: b.join(f),
        _p("forks", BUILDER, "GraphBuilder"),
        extra_errors=state,
    )
    add(
        "graphs.GraphBuilder.embed",
        "GraphBuilder",
        lambda b, c: b.embed(c),
        _p("child", GRAPHDEF | BUILDER, "GraphBuilder"),
        extra_errors=state,
    )
    add("graphs.GraphBuilder.callback", "GraphBuilder", lambda b: b.callback(_noop), extra_errors=(*state, ValueError))
    # Conditional nodes in a capture: ValueError is documented for a condition of another capture (or
    # one a node uses already) and for a body builder, which holds no conditional or host nodes.
    conditional = (RuntimeError, ValueError)
    add(
        "graphs.GraphBuilder.create_condition",
        "GraphBuilder",
        lambda b, d: b.create_condition(d),
        _v("default", 0, 1, None, -1, 2**32, 1.5, "1", good=3),
        extra_errors=conditional,
        weight=2,
    )
    bcond = _p("condition", GRAPHCOND, "GraphCondition")
    add("graphs.GraphBuilder.if_then", "GraphBuilder", lambda b, c: b.if_then(c), bcond, extra_errors=conditional)
    add("graphs.GraphBuilder.if_else", "GraphBuilder", lambda b, c: b.if_else(c), bcond, extra_errors=conditional)
    add(
        "graphs.GraphBuilder.switch",
        "GraphBuilder",
        lambda b, c, n: b.switch(c, n),
        bcond,
        _v("count", 1, 3, 0, None, good=2),
        extra_errors=conditional,
    )
    # Not on a GPU: nothing in the sweep clears a condition (see GraphDefinition.while_loop).
    add(
        "graphs.GraphBuilder.while_loop",
        "GraphBuilder",
        lambda b, c: b.while_loop(c),
        bcond,
        extra_errors=conditional,
        real=False,
    )
    capture_modes = _v("mode", "relaxed", "thread_local", "global", "loose", None, 2, good=3)
    add("graphs.exchange_capture_mode", None, G.exchange_capture_mode, capture_modes)
    add("graphs.capture_mode", None, lambda mode: _in_capture_mode(G, mode), capture_modes)
    add("graphs.GraphBuilder.status", "GraphBuilder", lambda b: (b.closed, b.status, b.is_building, b.mode, b.stream))
    add("graphs.GraphBuilder.definition", "GraphBuilder", lambda b: b.definition, extra_errors=state)
    add("graphs.GraphBuilder.close", "GraphBuilder", lambda b: b.close(), idempotent_close=True)
    add("graphs.GraphBuilder.__exit__", "GraphBuilder", _exit, idempotent_close=True, exit=True)
    return ops
