"""Public-API usage of stream capture that ``mypy --strict`` must accept (type-checked, not run).

If a change to cuguard.graphs makes this file fail to type-check, users' code would too.
"""

from __future__ import annotations

from typing import assert_type

import numpy as np

from cuguard.graphs import CAPTURE_MODES, Graph, GraphBuilder, GraphDefinition, capture_mode, exchange_capture_mode
from cuguard.resources import Buffer, Kernel, LaunchConfig, Stream


def capture(stream: Stream, kernel: Kernel, buf: Buffer, child: GraphDefinition) -> None:
    builder = GraphBuilder(stream, mode="thread_local")
    assert_type(builder.begin_building(), GraphBuilder)
    assert_type(builder.is_building, bool)
    assert_type(builder.status, str)
    assert_type(builder.mode, str)
    assert_type(builder.stream, Stream)
    assert_type(builder.__cuda_stream__(), tuple[int, int])  # a stream for the calls that take one at run time
    builder.launch(LaunchConfig(grid=1, block=32), kernel, buf, np.uint32(2), 32)
    builder.callback(lambda: None)
    builder.keep(buf)
    forks = builder.split(3)
    assert_type(forks, tuple[GraphBuilder, ...])
    assert_type(builder.join(*forks[1:]), GraphBuilder)
    builder.embed(child)
    assert_type(builder.end_building(), GraphBuilder)
    assert_type(builder.definition, GraphDefinition)
    with builder.complete() as graph:
        assert_type(graph, Graph)
        graph.launch(stream)
    builder.close()
    with GraphBuilder(stream).begin_building() as other:
        other.end_building()


def modes() -> None:
    assert_type(exchange_capture_mode("relaxed"), str)
    with capture_mode("global") as previous:
        assert_type(previous, str)
    assert_type(CAPTURE_MODES["global"], int)
