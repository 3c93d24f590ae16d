"""Public-API usage of conditional nodes and of per-node changes of executable graphs that
``mypy --strict`` must accept (type-checked, not run).

If a change to cuguard.graphs makes this file fail to type-check, users' code would too.
"""

from __future__ import annotations

from typing import assert_type

import numpy as np

from cuguard.graphs import ConditionalBody, Graph, GraphBuilder, GraphCondition, GraphDefinition, Node
from cuguard.resources import Buffer, Device, Event, Kernel, LaunchConfig, PinnedBuffer, Stream


def conditionals(device: Device, kernel: Kernel, buf: Buffer) -> None:
    g = GraphDefinition(device)
    cond = g.create_condition(1)
    assert_type(cond, GraphCondition)
    assert_type(cond.handle, int)
    assert_type(cond.default, int | None)
    assert_type(int(cond), int)
    node = g.if_then(cond)
    assert_type(node, Node)
    (then,) = node.branches
    assert_type(then, ConditionalBody)
    then.launch(LaunchConfig(grid=1, block=1), kernel, int(cond), np.uint32(0))
    assert_type(node.if_else(g.create_condition()).branches, tuple[ConditionalBody, ...])
    loop = then.while_loop(g.create_condition(0))
    loop.branches[0].memset(buf, 0)
    assert_type(g.switch(cond, 3, deps=(node,)), Node)
    assert_type(node.condition, GraphCondition | None)
    body: GraphDefinition = then  # a body is a definition to fill
    body.empty()


def captured_conditionals(stream: Stream, kernel: Kernel, buf: Buffer) -> None:
    builder = GraphBuilder(stream).begin_building()
    cond = builder.create_condition(0)
    assert_type(cond, GraphCondition)
    body = builder.if_then(cond)
    assert_type(body, GraphBuilder)
    body.begin_building()
    body.launch(LaunchConfig(grid=1, block=1), kernel, buf)
    body.end_building()
    assert_type(builder.if_else(builder.create_condition(1)), tuple[GraphBuilder, GraphBuilder])
    assert_type(builder.while_loop(builder.create_condition()), GraphBuilder)
    assert_type(builder.switch(builder.create_condition(2), 3), tuple[GraphBuilder, ...])
    assert_type(builder.end_building().definition, GraphDefinition)


def per_node_changes(  # noqa: PLR0917 - one of each argument kind
    graph: Graph, node: Node, kernel: Kernel, buf: Buffer, pinned: PinnedBuffer, event: Event, stream: Stream
) -> None:
    config = LaunchConfig(grid=1, block=32)
    graph.set_kernel_params(node, config, kernel, buf, np.uint32(1), 32)
    graph.set_memset_params(node, buf, 7, element_size=1)
    graph.set_memcpy_params(node, pinned, buf, 16)
    graph.set_callback(node, lambda: None)
    graph.set_event(node, event)
    graph.set_child(node, GraphDefinition(Device(stream.device)))
    graph.set_enabled(node, False)
    assert_type(graph.is_enabled(node), bool)
