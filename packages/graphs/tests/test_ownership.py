"""Ownership and identity of graph definitions, executable graphs and nodes (contract O1, O3-O6).

Tests with the ``cuguard_driver`` fixture (directly or through ``dev``) also
run on a GPU with ``--cuguard-driver=real``; those about drivers that are no
longer installed, and those that would make the real driver use a destroyed
context if cuguard let them through, use the ``sim`` fixture.
"""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import KERNELS_PTX
from cuda.bindings.driver import CUcontext

from cuguard.context import Context
from cuguard.errors import ResourceClosedError, driver, flush_deferred
from cuguard.graphs import Graph, GraphDefinition, Node
from cuguard.resources import Device, LaunchConfig, Module, Stream
from cuguard.testing import (
    SimulatedCrash,
    SimulatedDriver,
    assert_no_misuse,
    leak_check,
    nothing_left_behind,
    record_calls,
    settle,
    simulated_driver,
)

COPIERS: dict[str, Callable[[Any], object]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
    "pickle-protocol-0": lambda obj: pickle.dumps(obj, protocol=0),
}
ONE = LaunchConfig(grid=1, block=1)


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[BaseException | None]:
    """What reaches ``sys.unraisablehook`` during the test (a CUDAWarning from a destructor lands here)."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append(args.exc_value))
    return seen


def _no_failed_calls(log: Any) -> bool:
    """Nothing failed: every call succeeded, except the parameter query past a kernel's last parameter.

    Without ``cuFuncGetParamCount`` (a CUDA 13.0 driver, cuda-bindings 12) the end of a
    kernel's parameter list is found by a ``cuFuncGetParamInfo`` that fails on purpose.
    """
    return all(c.status == 0 or c.name == "cuFuncGetParamInfo" for c in log)


def _null() -> Any:
    return CUcontext(0)


@pytest.fixture
def sim_dev(sim: SimulatedDriver) -> Iterator[Device]:
    """Device 0 of the test's simulator (never the real driver), nothing current before and after."""
    device = Device(0)
    device.context  # noqa: B018 - retained before any check starts
    driver.cuCtxSetCurrent(_null())
    yield device
    settle(sim)
    driver.cuCtxSetCurrent(_null())


# --- O1: one owner per handle ---------------------------------------------------------------------------


@pytest.mark.contract("O1")
@pytest.mark.parametrize("how", sorted(COPIERS))
@pytest.mark.parametrize("kind", ["GraphDefinition", "Graph", "Node"])
def test_graph_objects_cannot_be_copied_or_pickled(cuguard_driver: Any, dev: Device, kind: str, how: str) -> None:
    g = GraphDefinition(dev)
    node = g.empty()
    node.empty()
    graph = g.instantiate()
    obj = {"GraphDefinition": g, "Graph": graph, "Node": node}[kind]
    with record_calls() as log, pytest.raises(TypeError, match=rf"\b{kind}\b") as info:
        COPIERS[how](obj)
    assert "cannot be copied or pickled" in str(info.value)
    assert log == []
    # The originals are still the one owners: each releases once.
    with record_calls() as log:
        node.destroy()
        graph.close()
        graph.close()
        g.close()
        g.close()
        del obj, node, graph, g
        settle(cuguard_driver)
    names = [c.name for c in log]
    assert names.count("cuGraphDestroyNode") == 1
    assert names.count("cuGraphExecDestroy") == 1
    assert names.count("cuGraphDestroy") == 1
    assert_no_misuse(cuguard_driver)


CONSTRUCTIONS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "no-arguments": ((), {}),
    "a-handle": ((0x1000,), {}),
    "a-keyword": ((), {"handle": 0x1000}),
}


@pytest.mark.contract("O1")
@pytest.mark.parametrize("args", sorted(CONSTRUCTIONS))
@pytest.mark.parametrize(
    ("cls", "factory"), [(Graph, "GraphDefinition.instantiate()"), (Node, "g.empty()")], ids=["Graph", "Node"]
)
def test_graphs_and_nodes_cannot_be_constructed_directly(
    cuguard_driver: Any, cls: type, factory: str, args: str
) -> None:
    positional, keywords = CONSTRUCTIONS[args]
    with record_calls() as log, pytest.raises(TypeError) as info:
        cls(*positional, **keywords)
    assert cls.__name__ in str(info.value)
    assert factory in str(info.value)
    assert log == []


# --- O3: graph objects do not outlive their driver ----------------------------------------------------------------


def _graph_objects_under(inner: SimulatedDriver) -> dict[str, Any]:
    """A definition (with a node), its executable graph, and resources, made under ``inner`` (installed now)."""
    inner.register_kernel("fill_u32", lambda s, out, value, n: None)
    dev = Device(0)
    g = GraphDefinition(dev)
    node = g.empty()
    stream = dev.create_stream()
    module = dev.load_module(KERNELS_PTX)
    return {
        "device": dev,
        "context": Context.create(0),
        "definition": g,
        "node": node,
        "graph": g.instantiate(),
        "stream": stream,
        "event": dev.create_event(),
        "buffer": dev.allocate(64),
        "pinned": dev.allocate_pinned(64),
        "module": module,
        "kernel": module.get_kernel("fill_u32"),
    }


# name -> use(objects of the old driver, objects of the driver installed now)
O3_USES: dict[str, Callable[[dict[str, Any], dict[str, Any]], object]] = {
    "definition.handle": lambda old, new: old["definition"].handle,
    "definition.close": lambda old, new: old["definition"].close(),
    "definition.empty": lambda old, new: old["definition"].empty(),
    "definition.callback": lambda old, new: old["definition"].callback(lambda: None),
    "definition.nodes": lambda old, new: old["definition"].nodes,
    "definition.edges": lambda old, new: old["definition"].edges,
    "definition.clone": lambda old, new: old["definition"].clone(),
    "definition.instantiate": lambda old, new: old["definition"].instantiate(),
    "graph.handle": lambda old, new: old["graph"].handle,
    "graph.close": lambda old, new: old["graph"].close(),
    "graph.launch-on-my-stream": lambda old, new: old["graph"].launch(new["stream"]),
    "graph.upload-on-my-stream": lambda old, new: old["graph"].upload(new["stream"]),
    "graph.update-from-my-definition": lambda old, new: old["graph"].update(new["definition"]),
    "node.handle": lambda old, new: old["node"].handle,
    "node.pred": lambda old, new: set(old["node"].pred),
    "node.succ": lambda old, new: set(old["node"].succ),
    "node.empty": lambda old, new: old["node"].empty(),
    "node.destroy": lambda old, new: old["node"].destroy(),
    "my-definition-embeds-it": lambda old, new: new["definition"].embed(old["definition"]),
    "my-graph-updates-from-it": lambda old, new: new["graph"].update(old["definition"]),
    "my-definition-memsets-its-buffer": lambda old, new: new["definition"].memset(old["buffer"], 1),
    "my-definition-copies-its-pinned-buffer": lambda old, new: new["definition"].memcpy(new["buffer"], old["pinned"]),
    "my-definition-records-its-event": lambda old, new: new["definition"].record(old["event"]),
    "my-definition-waits-on-its-event": lambda old, new: new["definition"].wait(old["event"]),
    "my-definition-launches-its-kernel": lambda old, new: new["definition"].launch(
        ONE, old["kernel"], new["buffer"], np.uint32(1), 16
    ),
    "a-definition-for-its-device": lambda old, new: GraphDefinition(old["device"]),
    "a-definition-for-its-context": lambda old, new: GraphDefinition(old["context"]),
}


@pytest.fixture
def mine(sim: SimulatedDriver) -> Iterator[dict[str, Any]]:
    """A definition (one node), its executable graph, a stream and a buffer of the test's own simulator."""
    dev = Device(0)
    g = GraphDefinition(dev)
    g.empty()
    objects = {"definition": g, "graph": g.instantiate(), "stream": dev.create_stream(), "buffer": dev.allocate(64)}
    yield objects
    for obj in objects.values():
        obj.close()


@pytest.mark.contract("O3")
@pytest.mark.parametrize("use", sorted(O3_USES))
def test_graph_objects_of_an_uninstalled_driver_refuse_every_use(
    sim: SimulatedDriver, mine: dict[str, Any], use: str
) -> None:
    with simulated_driver(devices=2) as inner:
        old = _graph_objects_under(inner)
        inner_live = inner.live_objects()
    nodes_before = mine["definition"].nodes
    before = sim.snapshot()
    with record_calls() as log, pytest.raises(ResourceClosedError) as info:
        O3_USES[use](old, mine)
    assert "no longer installed" in str(info.value)
    assert log == []  # nothing reached the driver installed now
    assert not sim.changes_since(before)
    assert mine["definition"].nodes == nodes_before
    assert inner.live_objects() == inner_live


@pytest.mark.contract("O3")
def test_collecting_graph_objects_of_an_uninstalled_driver_releases_and_reports_nothing(
    sim: SimulatedDriver, unraisable: list[BaseException | None]
) -> None:
    with simulated_driver(devices=2) as inner:
        old = _graph_objects_under(inner)
        inner_live = inner.live_objects()
    before = sim.snapshot()
    with record_calls() as log:
        del old
        settle(sim)
    assert log == []
    assert unraisable == []
    assert not sim.changes_since(before)
    assert inner.live_objects() == inner_live


@pytest.mark.contract("O3")
def test_graph_objects_of_an_exited_simulator_refuse_use_with_no_driver_installed() -> None:
    with simulated_driver(devices=2) as inner:
        old = _graph_objects_under(inner)
    for use in ("definition.handle", "definition.close", "definition.empty", "graph.handle", "graph.close"):
        with pytest.raises(ResourceClosedError, match="no longer installed"):
            O3_USES[use](old, {})
    for use in ("node.handle", "node.empty", "node.destroy"):
        with pytest.raises(ResourceClosedError, match="no longer installed"):
            O3_USES[use](old, {})


@pytest.mark.contract("O3")
def test_graph_handles_of_two_simulators_never_coincide(sim: SimulatedDriver) -> None:
    def make() -> tuple[list[Any], set[int]]:
        made: list[Any] = []
        handles: set[int] = set()
        for _ in range(4):
            g = GraphDefinition(Device(0))
            nodes = [g.empty() for _ in range(3)]
            graph = g.instantiate()
            made += [graph, g]
            handles |= {int(g.handle), int(graph.handle)} | {int(n.handle) for n in nodes}
        return made, handles

    my_objects, my_handles = make()
    with simulated_driver(devices=2) as inner:
        their_objects, their_handles = make()
        assert my_handles.isdisjoint(their_handles)
        for obj in their_objects:
            obj.close()
        assert inner.misuse == []
    for obj in my_objects:
        obj.close()


# --- O4: graph objects that refer to a destroyed context -------------------------------------------------------


@pytest.mark.contract("O4")
def test_definition_of_a_destroyed_context_cannot_be_instantiated(cuguard_driver: Any, dev: Device) -> None:
    ctx = Context.create(0)
    g = GraphDefinition(ctx)
    g.empty().empty()
    ctx.close()
    with record_calls() as log, pytest.raises(ResourceClosedError, match="destroyed"):
        g.instantiate()
    assert [c.name for c in log if c.name in ("cuCtxSetCurrent", "cuGraphInstantiate")] == []
    g.close()
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O4")
def test_no_definition_is_made_for_a_destroyed_context(sim: SimulatedDriver, sim_dev: Device) -> None:
    ctx = Context.create(0)
    ctx.close()
    before = sim.snapshot()
    with record_calls() as log, pytest.raises(ResourceClosedError, match="destroyed"):
        GraphDefinition(ctx)
    assert [c.name for c in log if c.name != "cuInit"] == []
    assert not sim.changes_since(before)


@pytest.mark.contract("O4", "S2")
@pytest.mark.parametrize("use", ["handle", "launch", "upload", "close"])
def test_executable_graph_of_a_destroyed_context_refuses_use(sim: SimulatedDriver, sim_dev: Device, use: str) -> None:
    # Simulator only: on a GPU, what the driver does with an executable graph of a destroyed context is not
    # something a test should find out (S2 forbids using anything whose context is gone).
    stream = sim_dev.create_stream()
    ctx = Context.create(0)
    g = GraphDefinition(ctx)
    g.empty()
    graph = g.instantiate()
    g.close()
    ctx.close()
    uses: dict[str, Callable[[], object]] = {
        "handle": lambda: graph.handle,
        "launch": lambda: graph.launch(stream),
        "upload": lambda: graph.upload(stream),
        "close": graph.close,
    }
    try:
        with record_calls() as log, pytest.raises(ResourceClosedError, match=r"destroyed|leaked|closed"):
            uses[use]()
        assert log == []
    finally:
        stream.close()
        if not graph.closed:
            with pytest.raises(ResourceClosedError, match="leaked"):
                graph.close()  # said here, rather than as a warning when it is collected


@pytest.mark.contract("O4", "S2")
def test_definition_with_a_kernel_of_a_destroyed_context_cannot_be_instantiated(
    sim: SimulatedDriver, sim_dev: Device
) -> None:
    # Simulator only, for the reason above: the kernel node uses a function whose context is gone.
    sim.register_kernel("fill_u32", lambda s, out, value, n: None)
    buf = sim_dev.allocate(64)
    ctx = Context.create(0)
    module = Module.load(ctx, KERNELS_PTX)
    g = GraphDefinition(sim_dev)
    g.launch(ONE, module.get_kernel("fill_u32"), buf, np.uint32(1), 16)
    ctx.close()
    try:
        with record_calls() as log, pytest.raises(ResourceClosedError):
            g.instantiate()
        assert [c.name for c in log if c.name == "cuGraphInstantiate"] == []
    finally:
        g.close()
        buf.close()
        with pytest.raises(ResourceClosedError, match="leaked"):
            module.close()  # said here, rather than as a warning when it is collected


@pytest.mark.contract("O4")
def test_nodes_refuse_resources_of_a_destroyed_context(
    cuguard_driver: Any, dev: Device, stream: Stream, kernel_image: bytes
) -> None:
    ctx = Context.create(0)
    module = Module.load(ctx, kernel_image)
    kernel = module.get_kernel("fill_u32")
    previous = ctx.set_current()
    err, raw = driver.cuStreamCreate(0)
    assert int(err) == 0
    driver.cuCtxSetCurrent(_null() if previous is None else previous.handle)
    event = Stream.wrap(raw, ctx).record()
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    ctx.close()
    with record_calls() as log:
        for add in (
            lambda: g.launch(ONE, kernel, buf, np.uint32(1), 16),
            lambda: g.record(event),
            lambda: g.wait(event),
        ):
            with pytest.raises(ResourceClosedError, match="closed"):
                add()
    assert log == []
    assert g.nodes == frozenset()
    g.close()
    buf.close()
    for leaked in (module, event):
        with pytest.raises(ResourceClosedError, match="leaked"):
            leaked.close()  # said here, rather than as a warning when it is collected
    assert_no_misuse(cuguard_driver)


# --- O5: releases due in a graph's host callback or user-object destructor ---------------------------------------


def _launch_a_graph_whose_callback_drops_a_buffer(
    dev: Device, stream: Stream, gate: threading.Event
) -> tuple[Any, int]:
    """Launch a graph whose host node holds the last reference to a buffer and drops it; keep nothing."""
    buf = dev.allocate(64)
    keep = [buf]

    def drop() -> None:
        gate.wait(30)
        keep.clear()

    g = GraphDefinition(dev)
    g.callback(drop)
    with g.instantiate() as graph:
        graph.launch(stream)
    g.close()
    return weakref.ref(buf), int(buf.handle)


@pytest.mark.contract("O5")
def test_buffer_dropped_by_a_graph_host_node_is_released_on_a_python_thread(
    cuguard_driver: Any, dev: Device, stream: Stream, unraisable: list[BaseException | None]
) -> None:
    gate = threading.Event()
    with leak_check(), record_calls() as log:
        buf_ref, handle = _launch_a_graph_whose_callback_drops_a_buffer(dev, stream, gate)
        gc.collect()
        assert buf_ref() is not None  # the callback holds it
        gate.set()
        stream.sync()
        settle(cuguard_driver)
        assert buf_ref() is None
    assert ("cuMemFree", handle) in {(c.name, int(c.args[0])) for c in log if c.name == "cuMemFree" and not c.status}
    assert unraisable == []
    assert_no_misuse(cuguard_driver)  # in particular no driver call from the callback's thread


@pytest.mark.contract("O5")
@pytest.mark.parametrize("on_driver_thread", [False, True], ids=["destructor-in-call", "destructor-on-driver-thread"])
def test_graph_payload_released_by_a_user_object_destructor_reaches_no_driver_thread(
    on_driver_thread: bool, unraisable: list[BaseException | None]
) -> None:
    with simulated_driver(devices=1, destructors_on_driver_thread=on_driver_thread) as sim:
        dev = Device(0)
        stream = dev.create_stream()
        out = dev.allocate_pinned(64)
        with nothing_left_behind(sim):

            def launch_and_drop() -> tuple[Any, Any]:
                buf = dev.allocate(64)
                g = GraphDefinition(dev)
                g.memset(buf, 7).memcpy(out, buf).callback(lambda: None)
                graph = g.instantiate()
                graph.launch(stream)
                return weakref.ref(buf), weakref.ref(g)

            buf_ref, g_ref = launch_and_drop()
            gc.collect()
            stream.sync()
            settle(sim)
            assert buf_ref() is None
            assert g_ref() is None
        assert bytes(out.numpy()) == b"\x07" * 64
        assert sim.misuse == []
        assert unraisable == []
        out.close()
        stream.close()


# --- O6: a context outlives its resources, also in garbage cycles ------------------------------------------------


def _cycle_of_a_context_and_its_graphs(kernel_image: bytes) -> int:
    """A cycle holding a created context, a module of it, a definition for it and its executable graph.

    Nothing outside the cycle refers to any of them (no node uses the module, so no graph payload keeps
    it, and through it the context, alive): the collection frees the context together with its resources.
    """
    ctx = Context.create(0)
    module = Module.load(ctx, kernel_image)
    g = GraphDefinition(ctx)
    node = g.empty()
    graph = g.instantiate()
    cycle: list[Any] = [ctx, g, node, graph, module, module.get_kernel("fill_u32")]
    cycle.append(cycle)
    return int(ctx.handle)


@pytest.mark.contract("O6")
def test_cycle_of_a_context_and_its_graphs_destroys_the_context_last(
    cuguard_driver: Any, dev: Device, kernel_image: bytes, unraisable: list[BaseException | None]
) -> None:
    settle(cuguard_driver)
    with leak_check(), record_calls() as log:
        ctx_handle = _cycle_of_a_context_and_its_graphs(kernel_image)
        settle(cuguard_driver)
    names = [
        c.name for c in log if c.name in ("cuGraphExecDestroy", "cuGraphDestroy", "cuModuleUnload", "cuCtxDestroy")
    ]
    assert sorted(names) == ["cuCtxDestroy", "cuGraphDestroy", "cuGraphExecDestroy", "cuModuleUnload"]
    assert names[-1] == "cuCtxDestroy"
    assert [int(c.args[0]) for c in log if c.name == "cuCtxDestroy"] == [ctx_handle]
    assert _no_failed_calls(log)
    assert unraisable == []
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O6")
@pytest.mark.parametrize("on_driver_thread", [False, True], ids=["destructor-in-call", "destructor-on-driver-thread"])
def test_cycle_of_a_context_and_its_graphs_with_either_destructor_timing(
    on_driver_thread: bool, unraisable: list[BaseException | None]
) -> None:
    with simulated_driver(devices=1, destructors_on_driver_thread=on_driver_thread) as sim:
        sim.register_kernel("fill_u32", lambda s, out, value, n: None)
        Device(0).context  # noqa: B018 - retained before the check starts
        with nothing_left_behind(sim), record_calls() as log:
            for _ in range(3):
                _cycle_of_a_context_and_its_graphs(KERNELS_PTX)
            settle(sim)
        names = [c.name for c in log if c.name in ("cuGraphExecDestroy", "cuModuleUnload", "cuCtxDestroy")]
        assert names.count("cuCtxDestroy") == 3
        # Each context goes after the module and executable graph made in it (they are made in that order).
        for index, name in enumerate(names):
            if name == "cuCtxDestroy":
                assert names[:index].count("cuModuleUnload") > names[:index].count("cuCtxDestroy")
                assert names[:index].count("cuGraphExecDestroy") > names[:index].count("cuCtxDestroy")
        assert unraisable == []
        assert sim.misuse == []


@pytest.mark.contract("O6", "O2")
def test_cycle_of_primary_context_graphs_releases_them_and_keeps_the_context(
    cuguard_driver: Any, dev: Device, stream: Stream, unraisable: list[BaseException | None]
) -> None:
    settle(cuguard_driver)

    def make_cycle() -> None:
        buf = dev.allocate(64)
        g = GraphDefinition(dev)
        g.memset(buf, 1).empty()
        graph = g.instantiate()
        graph.launch(stream)
        cycle: list[Any] = [g, graph, buf, stream.record()]
        cycle.append(cycle)

    with leak_check(), record_calls() as log:
        make_cycle()
        stream.sync()
        settle(cuguard_driver)
    names = [c.name for c in log]
    assert "cuDevicePrimaryCtxRelease" not in names
    assert "cuCtxDestroy" not in names
    assert _no_failed_calls(log)
    assert unraisable == []
    assert not dev.context.closed
    assert_no_misuse(cuguard_driver)
    assert flush_deferred(10)


@pytest.mark.contract("W5")
def test_memory_a_graph_uses_is_closed_at_once_and_freed_when_the_graph_lets_go(sim: SimulatedDriver) -> None:
    # Found by the misuse sweep: close() freed memory an executable graph still used (a segfault on the H200).
    dev = Device(0)
    stream = dev.create_stream()
    buf = dev.allocate(64)
    out = dev.allocate_pinned(64)
    g = GraphDefinition(dev)
    g.memset(buf, 5).memcpy(out, buf)
    graph = g.instantiate()
    g.close()
    address = buf.ptr
    with record_calls() as log:
        buf.close()
        out.close()
    assert buf.closed
    assert out.closed
    assert [c.name for c in log] == []  # nothing freed under the graph
    del buf, out
    gc.collect()
    graph.launch(stream)
    stream.sync()
    assert sim.read(address, 64) == b"\x05" * 64
    assert sim.dangling == []
    with record_calls() as log:
        graph.close()
        del graph, g
        gc.collect()
        flush_deferred()
    assert sorted(c.name for c in log if c.name in ("cuMemFree", "cuMemFreeHost")) == ["cuMemFree", "cuMemFreeHost"]
    assert not any(obj.kind in ("device_memory", "host_memory") for obj in sim.live_objects())
    stream.close()


@pytest.mark.contract("E3")
def test_a_definition_holding_memory_nodes_is_refused_as_a_child_before_the_driver(sim: SimulatedDriver) -> None:
    dev = Device(0)
    child = GraphDefinition(dev)
    alloc = child.allocate(256)
    alloc.deallocate(alloc)
    parent = GraphDefinition(dev)
    with record_calls() as log, pytest.raises(ValueError, match="child graph"):
        parent.embed(child)
    assert [c.name for c in log] == []
    parent.close()
    child.close()


@pytest.mark.contract("S2")
@pytest.mark.parametrize("node", ["record", "wait"])
def test_a_definition_whose_event_was_closed_is_refused_before_the_driver(
    cuguard_driver: Any, dev: Device, node: str
) -> None:
    # On the H200, cuGraphInstantiate of an event node whose event was destroyed died of SIGSEGV
    # (the misuse sweep found it); cloning and embedding copy the node, so they refuse too.
    event = dev.create_event()
    g = GraphDefinition(dev)
    getattr(g, node)(event)
    event.close()
    parent = GraphDefinition(dev)
    with record_calls() as log:
        for use in (g.instantiate, g.clone, lambda: parent.embed(g)):
            with pytest.raises(ResourceClosedError, match="which was closed"):
                use()
    assert [c.name for c in log if c.name.startswith("cuGraph")] == []  # nothing reached the driver's graphs
    parent.close()
    g.close()
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("S2")
def test_the_simulator_reports_instantiating_an_event_node_of_a_destroyed_event_as_a_crash(
    sim: SimulatedDriver,
) -> None:
    sim.cuInit(0)
    _, ctx = sim.cuDevicePrimaryCtxRetain(0)
    sim.cuCtxSetCurrent(ctx)
    _, event = sim.cuEventCreate(0)
    _, graph = sim.cuGraphCreate(0)
    assert sim.cuGraphAddEventWaitNode(graph, None, 0, event)[0] == 0
    sim.cuEventDestroy(event)
    with pytest.raises(SimulatedCrash):
        sim.cuGraphInstantiate(graph, 0)
    assert sim.misuse[-1].call == "cuGraphInstantiate"
    sim.misuse.clear()
    sim.cuGraphDestroy(graph)
    sim.cuCtxSetCurrent(CUcontext(0))
    sim.cuDevicePrimaryCtxRelease(0)
