"""The race checker and graphs (B7): a graph launch is one operation on its stream on what its nodes use.

Work captured into a graph does not run while it is captured, so it is not an
access; the graph's launch is, ordered like any work on its stream. It writes
what some node may write and reads what every node only reads: a kernel
argument named in ``read_only`` (on a definition's, a builder's or a captured
launch), a copy's source.
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


CFG = LaunchConfig(grid=1, block=SIZE // 4)
COUNT = SIZE // 4


def _copy(module: Module, stream: object, dst: Buffer, src: Buffer, read_only: tuple[int, ...] = (1,)) -> None:
    launch(stream, CFG, module.get_kernel("copy_u32"), dst, src, COUNT, read_only=read_only)


def _copy_graph(
    how: str, stream: Stream, module: Module, buffers: tuple[Buffer, Buffer], read_only: tuple[int, ...]
) -> Graph:
    """A graph of one kernel copying ``buffers`` ``(dst, src)``, made the way ``how`` names."""
    dst, src = buffers
    kernel = module.get_kernel("copy_u32")
    if how in {"definition", "embedded"}:
        definition = GraphDefinition()
        definition.launch(CFG, kernel, dst, src, COUNT, read_only=read_only)
        if how == "embedded":
            parent = GraphDefinition()
            parent.embed(definition)
            definition.close()
            definition = parent
        with definition:
            return definition.instantiate()
    with GraphBuilder(stream).begin_building() as builder:
        if how == "builder":
            builder.launch(CFG, kernel, dst, src, COUNT, read_only=read_only)
        else:
            _copy(module, builder, dst, src, read_only)
        return builder.end_building().complete()


@pytest.mark.parametrize("how", ["definition", "builder", "captured", "embedded"])
@pytest.mark.parametrize("declared", [True, False])
def test_a_graph_reads_what_its_kernel_nodes_name_read_only(
    checked: Device, stream: Stream, module: Module, how: str, declared: bool
) -> None:
    other = checked.create_stream()
    src, dst, mine = (checked.allocate(SIZE) for _ in range(3))
    checked.sync()
    graph = _copy_graph(how, stream, module, (dst, src), (1,) if declared else ())
    graph.launch(stream)
    # Another reader of the source: no race when the graph only reads it.
    found = races(lambda: _copy(module, other, mine, src))
    assert len(found) == (0 if declared else 1), found
    # A writer of the source races with the graph's read; a reader of the destination with its write.
    found = races(lambda: _fill(module, other, src))
    assert len(found) == 1, found
    assert "cuGraphLaunch" in found[0]
    found = races(lambda: _copy(module, other, mine, dst))
    assert len(found) == 1, found
    assert "cuGraphLaunch" in found[0]
    checked.sync()
    assert races(lambda: _fill(module, other, src)) == []
    checked.sync()
    graph.close()


def test_memory_one_argument_writes_and_another_reads_is_written(
    checked: Device, stream: Stream, module: Module
) -> None:
    other = checked.create_stream()
    buf, mine = checked.allocate(SIZE), checked.allocate(SIZE)
    checked.sync()
    with _copy_graph("definition", stream, module, (buf, buf), (1,)) as graph:
        graph.launch(stream)
        assert len(races(lambda: _copy(module, other, mine, buf))) == 1
        checked.sync()


def test_a_memcpy_node_reads_its_source_and_writes_its_destination(
    checked: Device, stream: Stream, module: Module
) -> None:
    other = checked.create_stream()
    src, dst, mine = (checked.allocate(SIZE) for _ in range(3))
    checked.sync()
    with GraphDefinition() as definition:
        definition.memcpy(dst, src)
        graph = definition.instantiate()
    graph.launch(stream)
    assert races(lambda: _copy(module, other, mine, src)) == []
    assert len(races(lambda: _copy(module, other, mine, dst))) == 1
    checked.sync()
    graph.close()


def test_an_updated_graph_uses_the_new_definitions_marks(checked: Device, stream: Stream, module: Module) -> None:
    other = checked.create_stream()
    src, dst, mine = (checked.allocate(SIZE) for _ in range(3))
    checked.sync()
    kernel = module.get_kernel("copy_u32")
    with GraphDefinition() as writes, GraphDefinition() as reads:
        writes.launch(CFG, kernel, dst, src, COUNT)
        reads.launch(CFG, kernel, dst, src, COUNT, read_only=(1,))
        graph = writes.instantiate()
        graph.update(reads)
    graph.launch(stream)
    assert races(lambda: _copy(module, other, mine, src)) == []
    checked.sync()
    graph.close()


def test_set_params_read_only(checked: Device, stream: Stream, module: Module) -> None:
    other = checked.create_stream()
    src, fresh, dst, mine = (checked.allocate(SIZE) for _ in range(4))
    checked.sync()
    kernel = module.get_kernel("copy_u32")
    with GraphDefinition() as definition:
        node = definition.launch(CFG, kernel, dst, src, COUNT, read_only=(1,))
        node.set_params(config=LaunchConfig(grid=1, block=COUNT))  # read_only=None keeps the node's positions
        assert node.params["read_only"] == (1,)
        node.set_params(args=(dst, fresh, COUNT), read_only=[np.int64(1)])  # NumPy integers are positions
        graph = definition.instantiate()
        node.set_params(args=(dst, src, COUNT))  # new args without read_only: none is read-only
        assert node.params["read_only"] == ()
    graph.launch(stream)
    assert races(lambda: _copy(module, other, mine, fresh)) == []
    assert races(lambda: _copy(module, other, mine, src)) == []  # the graph's copy of the node reads src
    checked.sync()
    graph.close()


@pytest.mark.parametrize("how", ["definition", "builder"])
@pytest.mark.parametrize("case", [((3,), ValueError), (("1",), TypeError), ("1", TypeError)])
def test_a_bad_read_only_is_refused_before_the_driver(
    dev: Device, stream: Stream, module: Module, how: str, case: tuple[object, type[Exception]]
) -> None:
    read_only, error = case
    src, dst = dev.allocate(SIZE), dev.allocate(SIZE)
    kernel = module.get_kernel("copy_u32")
    if how == "definition":
        with GraphDefinition() as definition:
            with pytest.raises(error, match="read_only"):
                definition.launch(CFG, kernel, dst, src, COUNT, read_only=read_only)  # type: ignore[arg-type]
            assert definition.nodes == frozenset()
        return
    with GraphBuilder(stream).begin_building() as builder:
        with pytest.raises(error, match="read_only"):
            builder.launch(CFG, kernel, dst, src, COUNT, read_only=read_only)  # type: ignore[arg-type]
        builder.end_building()
        assert builder.definition.nodes == frozenset()
