"""Conditional nodes: condition handles, if / if-else / while / switch nodes and their bodies.

The tests that decide the branch with a condition's default run on the simulator and
(``--cuguard-driver=real``) a GPU; those whose kernels set the condition run on the simulator
(setting a condition on a GPU needs device code linked with the device runtime).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.graphs import ConditionalBody, GraphCondition, GraphDefinition
from cuguard.resources import Device, LaunchConfig, Stream
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls, settle

OUT_OF_MEMORY = 2
ONE = LaunchConfig(grid=1, block=1)

COND_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry set_condition(.param .u64 handle, .param .u32 value) { ret; }
.visible .entry count_down(.param .u64 counter, .param .u64 handle) { ret; }
.visible .entry add_one(.param .u64 out) { ret; }
"""


def _emulate(sim: SimulatedDriver) -> None:
    def set_condition(s: Any, handle: int, value: int) -> None:
        s.set_conditional(handle, value)

    def count_down(s: Any, counter: int, handle: int) -> None:
        left = int.from_bytes(s.read(counter, 4), "little") - 1
        s.write(counter, left.to_bytes(4, "little"))
        s.set_conditional(handle, 1 if left else 0)

    def add_one(s: Any, out: int) -> None:
        s.write(out, (int.from_bytes(s.read(out, 4), "little") + 1).to_bytes(4, "little"))

    for name, fn in (("set_condition", set_condition), ("count_down", count_down), ("add_one", add_one)):
        sim.register_kernel(name, fn)


@pytest.fixture
def sim_dev(sim: SimulatedDriver) -> Iterator[Device]:
    """Device 0 of the test's simulator, with the condition-setting kernels."""
    _emulate(sim)
    device = Device(0)
    device.context  # noqa: B018 - retained before any check starts
    yield device
    settle(sim)


def _run(graph_def: GraphDefinition, stream: Stream) -> None:
    with graph_def.instantiate() as graph:
        graph.launch(stream)
        stream.sync()


# --- the branch a default decides (simulator and GPU) -------------------------------------------


@pytest.mark.contract("G3")
@pytest.mark.parametrize(("default", "expected"), [(1, b"\x07"), (0, b"\x00")])
def test_if_then_runs_its_body_when_the_condition_is_set(
    cuguard_driver: Any, dev: Device, stream: Stream, default: int, expected: bytes
) -> None:
    out = dev.allocate_pinned(16)
    buf = dev.allocate(16)
    with leak_check(), GraphDefinition(dev) as g:
        cond = g.create_condition(default)
        first = g.memset(buf, 0)
        node = first.if_then(cond)
        (then,) = node.branches
        assert isinstance(then, ConditionalBody)
        assert node.type == "conditional"
        assert node.condition is cond
        then.memset(buf, 7)
        node.memcpy(out, buf)
        _run(g, stream)
        assert bytes(out.numpy()) == expected * 16
    settle(cuguard_driver)
    buf.close()
    out.close()


@pytest.mark.contract("G3")
@pytest.mark.parametrize(("default", "expected"), [(3, b"\x01"), (0, b"\x02")])
def test_if_else_runs_one_of_its_two_bodies(
    cuguard_driver: Any, dev: Device, stream: Stream, default: int, expected: bytes
) -> None:
    out = dev.allocate_pinned(16)
    buf = dev.allocate(16)
    with GraphDefinition(dev) as g:
        node = g.if_else(g.create_condition(default))
        then, otherwise = node.branches
        then.memset(buf, 1)
        otherwise.memset(buf, 2)
        node.memcpy(out, buf)
        _run(g, stream)
        assert bytes(out.numpy()) == expected * 16
    settle(cuguard_driver)
    buf.close()
    out.close()


@pytest.mark.contract("G3")
@pytest.mark.parametrize(("default", "expected"), [(0, b"\x0a"), (2, b"\x0c"), (3, b"\xff")])
def test_switch_runs_the_body_of_the_value(
    cuguard_driver: Any, dev: Device, stream: Stream, default: int, expected: bytes
) -> None:
    out = dev.allocate_pinned(16)
    buf = dev.allocate(16)
    with GraphDefinition(dev) as g:
        start = g.memset(buf, 0xFF)
        node = start.switch(g.create_condition(default), 3)
        assert len(node.branches) == 3
        for i, body in enumerate(node.branches):
            body.memset(buf, 10 + i)
        node.memcpy(out, buf)
        _run(g, stream)
        assert bytes(out.numpy()) == expected * 16
    settle(cuguard_driver)
    buf.close()
    out.close()


@pytest.mark.contract("G3")
def test_while_loop_with_a_zero_condition_never_runs_its_body(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(16)
    buf = dev.allocate(16)
    with GraphDefinition(dev) as g:
        start = g.memset(buf, 4)
        node = start.while_loop(g.create_condition(0))
        node.branches[0].memset(buf, 9)
        node.memcpy(out, buf)
        _run(g, stream)
        assert bytes(out.numpy()) == b"\x04" * 16
    settle(cuguard_driver)
    buf.close()
    out.close()


@pytest.mark.contract("E3", "G3")
def test_a_conditional_graph_is_neither_cloned_nor_embedded(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(16)
    buf = dev.allocate(16)
    with GraphDefinition(dev) as g, GraphDefinition(dev) as parent:
        node = g.if_then(g.create_condition(1))
        node.branches[0].memset(buf, 5)
        node.memcpy(out, buf)
        with record_calls() as calls:  # CUDA clones and embeds no graph with conditional nodes
            with pytest.raises(ValueError, match="conditional nodes"):
                g.clone()
            with pytest.raises(ValueError, match="conditional nodes"):
                parent.embed(g)
        assert not [c for c in calls if c.name in ("cuGraphClone", "cuGraphAddChildGraphNode")]
        assert parent.nodes == frozenset()
        _run(g, stream)  # the definition is still usable (G3)
        assert bytes(out.numpy()) == b"\x05" * 16
    settle(cuguard_driver)
    buf.close()
    out.close()


@pytest.mark.contract("G5", "W5")
def test_body_nodes_keep_what_they_use_alive_with_the_executable_graph(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    out = dev.allocate_pinned(16)
    with leak_check():
        g = GraphDefinition(dev)
        buf, staging = dev.allocate(16), dev.allocate(16)
        node = g.if_then(g.create_condition(1))
        body = node.branches[0]
        body.memset(buf, 3).memcpy(staging, buf)  # only the body uses buf
        node.memcpy(out, staging)
        graph = g.instantiate()
        ref = weakref.ref(buf)
        del buf, staging, body, node
        g.close()
        del g
        gc.collect()
        assert ref() is not None
        graph.launch(stream)
        stream.sync()
        assert bytes(out.numpy()) == b"\x03" * 16
        graph.close()
        del graph
        settle(cuguard_driver)
        assert ref() is None
    out.close()


# --- bodies: what they refuse, and their lifetime ------------------------------------------------


@pytest.mark.contract("E3")
def test_bodies_refuse_what_cuda_does_not_allow_before_the_driver(cuguard_driver: Any, dev: Device) -> None:
    buf = dev.allocate(16)
    ev = dev.create_event()
    with GraphDefinition(dev) as g, GraphDefinition(dev) as other:
        body = g.if_then(g.create_condition(1)).branches[0]
        with record_calls() as calls:
            with pytest.raises(ValueError, match="host-callback"):
                body.callback(lambda: None)
            with pytest.raises(ValueError, match="event-record"):
                body.record(ev)
            with pytest.raises(ValueError, match="event-wait"):
                body.wait(ev)
            with pytest.raises(ValueError, match="memory-allocation"):
                body.allocate(16)
            with pytest.raises(ValueError, match="memory-free"):
                body.deallocate(0x1000)
            for refused in (body.instantiate, body.clone, body.close, body.__enter__):
                with pytest.raises(TypeError, match="conditional node"):
                    refused()
            with pytest.raises(TypeError, match="conditional body"):
                other.embed(body)
            with pytest.raises(TypeError, match="GraphCondition"):
                g.if_then(1)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="deps"):
                g.if_then(g.create_condition(1), deps=3)  # type: ignore[arg-type]
            assert not [c for c in calls if c.name == "cuGraphAddNode"]
        with pytest.raises(ValueError, match="belongs to"):
            g.if_then(other.create_condition(1))
        with pytest.raises(ValueError, match="1 or more"):
            g.switch(g.create_condition(0), 0)
        with pytest.raises(ValueError, match=r"default must be 0 or more and below 2\*\*32"):
            g.create_condition(1 << 32)
        with pytest.raises(TypeError, match="default"):
            g.create_condition("1")  # type: ignore[arg-type]
    with GraphDefinition() as nowhere, pytest.raises(ValueError, match="no context"):
        nowhere.create_condition(1)
    settle(cuguard_driver)
    buf.close()
    ev.close()


@pytest.mark.contract("E3", "S2")
def test_bodies_go_with_their_node_and_their_definition(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        outer = g.if_then(g.create_condition(1))
        body = outer.branches[0]
        inner = body.while_loop(g.create_condition(0))  # a condition of the graph holding the body
        nested = inner.branches[0]
        nested.empty()
        outer.destroy()
        for gone in (body, nested):
            with record_calls() as calls, pytest.raises(ResourceClosedError):
                gone.empty()
            assert not calls
        second = g.if_then(g.create_condition(1)).branches[0]
    with pytest.raises(ResourceClosedError):
        second.nodes  # noqa: B018
    settle(cuguard_driver)


@pytest.mark.contract("G1", "G3")
@pytest.mark.parametrize("call", ["cuGraphAddNode", "cuGraphConditionalHandleCreate"])
def test_failed_conditional_creates_nothing(cuguard_driver: Any, dev: Device, call: str) -> None:
    with GraphDefinition(dev) as g:
        a = g.empty()
        cond = g.create_condition(1) if call == "cuGraphAddNode" else None
        attempt = (lambda: g.create_condition(1)) if cond is None else (lambda: a.if_then(cond))
        with leak_check(), inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            attempt()
        assert info.value.call == call
        assert g.nodes == {a}
        assert not g._bodies
        if cond is not None:
            node = a.if_then(cond)  # the definition is still usable (G3)
            assert g.edges == {(a, node)}
    settle(cuguard_driver)


# --- conditions set by kernels (simulator) ------------------------------------------------------


@pytest.mark.contract("G3")
def test_while_loop_runs_until_a_kernel_clears_the_condition(sim: SimulatedDriver, sim_dev: Device) -> None:
    module = sim_dev.load_module(COND_PTX)
    stream = sim_dev.create_stream()
    counter, count = sim_dev.allocate(4), sim_dev.allocate(4)
    out = sim_dev.allocate_pinned(4)
    with GraphDefinition(sim_dev) as g:
        cond = g.create_condition(1)
        start = g.memset(count, 0)
        loop = start.while_loop(cond)
        body = loop.branches[0]
        body.launch(ONE, module.get_kernel("add_one"), count).launch(
            ONE, module.get_kernel("count_down"), counter, cond.handle
        )
        loop.memcpy(out, count)
        with g.instantiate() as graph:
            for times in (5, 2):
                counter.copy_from(np.array([times], dtype=np.uint32), stream)
                graph.launch(stream)
                stream.sync()
                assert list(out.numpy("uint32")) == [times]
    stream.close()
    assert not sim.misuse


@pytest.mark.contract("G3")
def test_a_kernel_before_the_node_decides_the_branch(sim: SimulatedDriver, sim_dev: Device) -> None:
    module = sim_dev.load_module(COND_PTX)
    stream = sim_dev.create_stream()
    buf = sim_dev.allocate(4)
    out = sim_dev.allocate_pinned(4)
    with GraphDefinition(sim_dev) as g:
        cond = g.create_condition()  # no default: the value persists between launches
        setter = g.memset(buf, 0, element_size=4).launch(ONE, module.get_kernel("set_condition"), int(cond), 2)
        node = setter.switch(cond, 3)
        node.branches[2].launch(ONE, module.get_kernel("add_one"), buf)
        node.branches[1].memset(buf, 0xAA)
        node.memcpy(out, buf)
        with g.instantiate() as graph:
            graph.launch(stream)
            stream.sync()
            assert list(out.numpy("uint32")) == [1]
            # The kernel node's value is an executable-graph parameter like any other.
            graph.set_kernel_params(setter, ONE, module.get_kernel("set_condition"), int(cond), 1)
            graph.launch(stream)
            stream.sync()
            assert bytes(out.numpy()) == b"\xaa" * 4
    stream.close()


def test_an_endless_while_loop_is_stopped_and_recorded_as_misuse(sim: SimulatedDriver, sim_dev: Device) -> None:
    stream = sim_dev.create_stream()
    with GraphDefinition(sim_dev) as g:
        g.while_loop(g.create_condition(1)).branches[0].empty()
        with g.instantiate() as graph:
            graph.launch(stream)  # a GPU would loop until its watchdog, if any, ends the launch
            stream.sync()
    assert any("while node" in str(entry) for entry in sim.misuse)
    sim.misuse.clear()
    stream.close()


def test_set_conditional_outside_a_kernel_is_refused(sim: SimulatedDriver, sim_dev: Device) -> None:
    with GraphDefinition(sim_dev) as g:
        cond = g.create_condition(1)
        g.if_then(cond)
        assert isinstance(cond, GraphCondition)
        assert cond.default == 1
        assert int(cond) == cond.handle
        with pytest.raises(RuntimeError, match="kernel stand-in"):
            sim.set_conditional(cond.handle, 0)
