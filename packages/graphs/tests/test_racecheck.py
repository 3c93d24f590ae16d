"""The race checker and graphs (B7): a graph launch is one operation on its stream that writes what its nodes use.

Work captured into a graph does not run while it is captured, so it is not an
access; the graph's launch is, ordered like any work on its stream.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from cuguard.graphs import Graph, GraphBuilder, GraphDefinition
from cuguard.resources import Buffer, Device, LaunchConfig, Module, RaceWarning, Stream, launch, racecheck

pytestmark = pytest.mark.contract("B7")

SIZE = 64


@pytest.fixture
def checked(dev: Device) -> Iterator[Device]:
    with racecheck():
        yield dev


def races(program: Callable[[], object]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RaceWarning)
        program()
    return [str(w.message) for w in caught if issubclass(w.category, RaceWarning)]


def _fill(module: Module, stream: object, buf: Buffer) -> None:
    launch(stream, LaunchConfig(grid=1, block=1), module.get_kernel("fill_u32"), buf, np.uint32(3), SIZE // 4)


def _graph_writing(checked: Device, stream: Stream, module: Module, buf: Buffer) -> Graph:
    with GraphBuilder(stream).begin_building() as builder:
        _fill(module, builder, buf)
        return builder.end_building().complete()


def test_captured_work_is_not_an_access(checked: Device, stream: Stream, module: Module) -> None:
    other = checked.create_stream()
    buf = checked.allocate(SIZE)
    checked.sync()
    with GraphBuilder(stream).begin_building() as builder:
        assert races(lambda: (_fill(module, builder, buf), _fill(module, other, buf))) == []
        builder.end_building().complete().close()
    checked.sync()


@pytest.mark.parametrize("edge", [False, True])
def test_graph_launch_after_other_work(checked: Device, stream: Stream, module: Module, edge: bool) -> None:
    other = checked.create_stream()
    buf = checked.allocate(SIZE)
    checked.sync()
    graph = _graph_writing(checked, stream, module, buf)
    _fill(module, other, buf)
    if edge:
        stream.wait(other)
    found = races(lambda: graph.launch(stream))
    assert len(found) == (0 if edge else 1)
    if found:
        assert "cuGraphLaunch" in found[0]
    checked.sync()
    graph.close()


@pytest.mark.parametrize("edge", [False, True])
def test_work_after_a_graph_launch(checked: Device, stream: Stream, module: Module, edge: bool) -> None:
    other = checked.create_stream()
    buf = checked.allocate(SIZE)
    pinned = checked.allocate_pinned(SIZE)
    checked.sync()
    graph = _graph_writing(checked, stream, module, buf)
    graph.launch(stream)
    if edge:
        other.wait(stream.record())
    assert len(races(lambda: buf.copy_to(pinned, other))) == (0 if edge else 1)
    checked.sync()
    graph.close()


def test_graph_definition_kernel_node_memory_is_written(checked: Device, stream: Stream, module: Module) -> None:
    other = checked.create_stream()
    buf = checked.allocate(SIZE)
    checked.sync()
    definition = GraphDefinition()
    definition.launch(LaunchConfig(grid=1, block=1), module.get_kernel("fill_u32"), buf, np.uint32(1), SIZE // 4)
    with definition.instantiate() as graph:
        graph.launch(stream)
        assert len(races(lambda: _fill(module, other, buf))) == 1
        checked.sync()
        assert races(lambda: _fill(module, other, buf)) == []
        checked.sync()
