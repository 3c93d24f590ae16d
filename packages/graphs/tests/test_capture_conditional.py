"""Conditional nodes in stream capture (GraphBuilder's create_condition, if_then, if_else, while_loop,
switch) and CUDA's instantiation rules for graphs with conditions.

The tests whose branch a condition's default decides run on the simulator and
(``--cuguard-driver=real``) a GPU; those whose kernels set the condition run on the simulator.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from test_conditional import COND_PTX, ONE, _emulate

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.graphs import GraphBuilder, GraphDefinition
from cuguard.resources import Device, Stream
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls, settle

OUT_OF_MEMORY = 2


def _read(buf: Any, n: int) -> bytes:
    host = np.zeros(n, dtype=np.uint8)
    buf.copy_to(host)
    return bytes(host)


@pytest.mark.contract("G3", "G5")
@pytest.mark.parametrize(("default", "expected"), [(1, b"\x11" * 8 + b"\x09"), (0, b"\x22" * 8 + b"\x09")])
def test_captured_if_else_runs_the_body_its_condition_picks(
    cuguard_driver: Any, dev: Device, stream: Stream, default: int, expected: bytes
) -> None:
    buf, tail = dev.allocate(8, stream), dev.allocate(1, stream)
    stream.sync()
    with leak_check():
        with GraphBuilder(stream).begin_building() as builder:
            buf.fill(0, builder)
            cond = builder.create_condition(default)
            then, other = builder.if_else(cond)
            for body, value in ((then, 0x11), (other, 0x22)):
                body.begin_building()
                buf.fill(value, body)  # a body builder is a stream too
                body.keep(buf)
                body.end_building()
            tail.fill(9, builder)  # follows the conditional node
            builder.keep(buf, tail)
            builder.end_building()
            kinds = sorted(node.type for node in builder.definition.nodes)
            assert kinds == ["conditional", "memset", "memset"]
            assert cond.graph is builder.definition
            for _ in range(2):
                with builder.complete() as graph:
                    graph.launch(stream)
                    stream.sync()
                assert _read(buf, 8) + _read(tail, 1) == expected
        settle(cuguard_driver)
    buf.close()
    tail.close()


@pytest.mark.contract("G3")
def test_captured_switch_and_while_loop_follow_their_kernels(sim: SimulatedDriver) -> None:
    _emulate(sim)
    dev = Device(0)
    module = dev.load_module(COND_PTX)
    stream = dev.create_stream()
    count, counter = dev.allocate(4), dev.allocate(4)
    with GraphBuilder(stream).begin_building() as builder:
        count.fill(0, builder)
        pick = builder.create_condition()
        builder.launch(ONE, module.get_kernel("set_condition"), int(pick), 2)
        cases = builder.switch(pick, 3)
        loop = builder.create_condition(1)
        for i, case in enumerate(cases):
            case.begin_building()
            if i == 2:  # the case the kernel picks: a loop cannot be nested in a captured body, so count
                case.launch(ONE, module.get_kernel("add_one"), count)
            case.end_building()
        body = builder.while_loop(loop)
        body.begin_building()
        body.launch(ONE, module.get_kernel("add_one"), count)
        body.launch(ONE, module.get_kernel("count_down"), counter, loop.handle)
        body.end_building()
        builder.end_building()
        with builder.complete() as graph:
            counter.copy_from(np.array([4], dtype=np.uint32), stream)
            graph.launch(stream)
            stream.sync()
    host = np.zeros(1, dtype=np.uint32)
    count.copy_to(host)
    assert list(host) == [1 + 4]  # case 2 once, then the loop body four times
    stream.close()
    assert not sim.misuse


@pytest.mark.contract("G1", "G3")
def test_a_refused_conditional_node_leaves_nothing_and_may_be_asked_again(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        cond = builder.create_condition(0)
        with inject("cuGraphAddNode", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            builder.if_then(cond)
        assert info.value.call == "cuGraphAddNode"
        assert builder.is_building  # nothing was added: the capture goes on
        builder.if_then(cond)  # the condition is still free
        builder.end_building()
        (node,) = builder.definition.nodes
        assert node.type == "conditional"
        builder.close()
        settle(cuguard_driver)


@pytest.mark.contract("G1", "G3")
def test_a_refused_dependency_update_abandons_the_capture(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        cond = builder.create_condition(1)
        with inject("cuStreamUpdateCaptureDependencies", OUT_OF_MEMORY), pytest.raises(CUDAError):
            builder.while_loop(cond)
        assert not builder.is_building  # the node could not be removed: the capture was dropped
        assert builder.status == "none"
        with pytest.raises(ResourceClosedError):
            cond.handle  # noqa: B018 - its graph went with the capture
        builder.begin_building().end_building()  # the stream captures again
        builder.close()
        settle(cuguard_driver)


@pytest.mark.contract("G1", "G3")
def test_a_refused_body_leaves_the_body_empty_and_captures_again(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    buf = dev.allocate(4, stream)
    buf.fill(0, stream)
    stream.sync()
    with leak_check():
        with GraphBuilder(stream).begin_building() as builder:
            body = builder.if_then(builder.create_condition(1))
            body.begin_building()
            buf.fill(5, body)
            with inject("cuGraphAddChildGraphNode", OUT_OF_MEMORY), pytest.raises(CUDAError):
                body.end_building()
            assert not body.is_building
            body.begin_building()  # the body is still empty: capture it again
            buf.fill(6, body)
            body.keep(buf)
            body.end_building()
            with pytest.raises(RuntimeError, match="once"):
                body.begin_building()
            builder.end_building()
            with builder.complete() as graph:
                graph.launch(stream)
                stream.sync()
        settle(cuguard_driver)
    assert _read(buf, 4) == b"\x06" * 4
    buf.close()


@pytest.mark.contract("G1", "W5")
def test_a_capture_ends_after_its_bodies_and_closing_it_ends_theirs(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    buf = dev.allocate(4, stream)
    stream.sync()
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        then, other = builder.if_else(builder.create_condition(1))
        then.begin_building()
        buf.fill(1, then)
        with record_calls() as calls, pytest.raises(RuntimeError, match="end the body first"):
            builder.end_building()
        assert not calls
        assert builder.is_building
        other.begin_building()
        builder.close()  # ends both bodies' captures and the capture, destroys the bodies' streams
        assert then.closed
        assert other.closed
        assert not then.is_building
        with pytest.raises(ResourceClosedError):
            then.begin_building()
        settle(cuguard_driver)
    assert stream.query()  # the wrapped stream is usable
    buf.close()


@pytest.mark.contract("W1", "W5")
def test_a_collected_body_builder_ends_its_capture(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        body = builder.if_then(builder.create_condition(0))
        body.begin_building()
        del body
        gc.collect()
        builder.end_building()  # no body is building any more
        (node,) = builder.definition.nodes
        assert node.type == "conditional"
        builder.close()
        settle(cuguard_driver)


@pytest.mark.contract("E3")
def test_wrong_conditions_and_nodes_a_body_cannot_hold_are_refused_before_the_driver(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    other_stream = dev.create_stream()
    with GraphDefinition(dev) as g, GraphBuilder(stream).begin_building() as builder:
        own = builder.create_condition(1)
        theirs = GraphBuilder(other_stream, mode="relaxed").begin_building()
        foreign = theirs.create_condition(1)
        body = builder.if_then(own)
        body.begin_building()
        with record_calls() as calls:
            with pytest.raises(TypeError, match="condition"):
                builder.if_then(1)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="this capture"):
                builder.if_then(foreign)
            with pytest.raises(ValueError, match="this capture"):
                builder.if_then(g.create_condition(1))
            with pytest.raises(ValueError, match="one node"):
                builder.while_loop(own)
            with pytest.raises(ValueError, match="1 or more"):
                builder.switch(builder.create_condition(0), 0)
            with pytest.raises(ValueError, match="conditional body"):
                body.create_condition(1)
            with pytest.raises(ValueError, match="conditional body"):
                body.callback(lambda: None)
            with pytest.raises(RuntimeError, match="conditional body"):
                body.definition  # noqa: B018
            with pytest.raises(RuntimeError, match="conditional body"):
                body.complete()
        # Only the conditions the block made reached the driver.
        assert {c.name for c in calls} <= {"cuGraphConditionalHandleCreate", "cuStreamGetCaptureInfo"}
        body.end_building()
        theirs.close()
    other_stream.close()
    settle(cuguard_driver)


# --- CUDA's instantiation rules for graphs with conditions ---------------------------------------


@pytest.mark.contract("E3")
def test_a_condition_without_its_node_is_refused_at_instantiation(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        used = g.create_condition(1)
        g.if_then(used)
        spare = g.create_condition(0)
        with record_calls() as calls, pytest.raises(ValueError, match="no live conditional node uses") as info:
            g.instantiate()
        assert not calls
        assert repr(spare) in str(info.value)
        assert repr(used) not in str(info.value)
        node = g.if_then(spare)
        node.destroy()  # a destroyed node no longer uses it
        with pytest.raises(ValueError, match="no live conditional node uses"):
            g.instantiate()
    settle(cuguard_driver)


@pytest.mark.contract("E3")
def test_one_executable_graph_at_a_time_of_a_graph_with_conditions(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        g.if_then(g.create_condition(1)).branches[0].empty()
        first = g.instantiate()
        with record_calls() as calls, pytest.raises(RuntimeError, match="one executable graph"):
            g.instantiate()
        assert not calls
        first.close()
        g.instantiate().close()  # once the first is closed
    settle(cuguard_driver)


@pytest.mark.contract("E3")
def test_a_condition_in_a_body_belongs_to_its_body(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    buf = dev.allocate(4, stream)
    buf.fill(0, stream)
    stream.sync()
    with GraphDefinition(dev) as g:
        body = g.if_then(g.create_condition(1)).branches[0]
        inner = body.create_condition(1)  # made on the body graph: CUDA's documented place for it
        body.if_then(inner).branches[0].memset(buf, 4)
        with g.instantiate() as graph:
            graph.launch(stream)
            stream.sync()
        with record_calls() as calls, pytest.raises(ValueError, match="one node"):
            body.if_then(inner)
        assert not calls
    settle(cuguard_driver)
    assert _read(buf, 4) == b"\x04" * 4
    buf.close()


def test_a_builder_condition_left_without_a_node_is_refused_at_complete(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    with GraphBuilder(stream).begin_building() as builder:
        builder.create_condition(1)
        builder.end_building()
        with pytest.raises(ValueError, match="no live conditional node uses"):
            builder.complete()
    settle(cuguard_driver)
