"""G1-G5 across layers: what a failing call leaves behind when graphs, kernels, buffers and streams meet."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Kernel, LaunchConfig, Stream
from cuguard.testing import SimulatedDriver, inject, leak_check, restore_fault

OUT_OF_MEMORY = 2
INVALID_VALUE = 1


@pytest.mark.contract("G1")
def test_G1_failed_creations_in_a_kernel_pipeline_leave_no_driver_object(
    *,
    dev: Device,
    stream: Stream,
    kernels: dict[str, Kernel],
    config: LaunchConfig,
    image: bytes,
    other_context: Context,
) -> None:
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 1, 64)
    plain = GraphDefinition(dev)
    plain.empty()
    failing: list[tuple[str, Callable[[], Any]]] = [
        ("cuGraphInstantiate", g.instantiate),
        ("cuUserObjectCreate", plain.instantiate),  # the payload's user object of a graph with no owners yet
        ("cuGraphRetainUserObject", plain.instantiate),
        ("cuGraphClone", g.clone),
        ("cuGraphNodeFindInClone", g.clone),
        ("cuGraphAddKernelNode", lambda: g.launch(config, kernels["fill_u8"], buf, 2, 64)),
        ("cuMemAllocAsync", lambda: dev.allocate(64, stream=stream)),
        ("cuModuleLoadData", lambda: dev.load_module(image)),
        ("cuStreamCreate", dev.create_stream),
        ("cuEventCreate", stream.record),
        ("cuEventRecord", stream.record),  # the new event is released again
        ("cuCtxPopCurrent", lambda: Context.create(0)),
        ("cuGraphCreate", lambda: GraphDefinition(dev)),
    ]
    for function, call in failing:
        with leak_check(), inject(function, OUT_OF_MEMORY), pytest.raises(CUDAError):
            call()
    # the same when the restore of the caller's context fails after the creation succeeded
    for call in (dev.create_stream, lambda: dev.allocate(64), g.instantiate, dev.create_event):
        with leak_check(), restore_fault(), pytest.raises(CUDAError, match="could not be restored"):
            call()
        other_context.set_current()
    for obj in (g, plain, buf):
        obj.close()


@pytest.mark.contract("G2")
def test_G2_a_pipeline_leaves_the_callers_context_current_also_when_it_fails(
    dev: Device, kernels: dict[str, Kernel], config: LaunchConfig, image: bytes, is_sim: bool
) -> None:
    def current() -> Context | None:
        return Context.current()

    def pipeline() -> None:
        stream = dev.create_stream()
        buf = dev.allocate(64, stream=stream)
        module = dev.load_module(image)
        g = GraphDefinition(dev)
        g.memset(buf, 1).launch(config, module.get_kernel("add_u8"), buf, 1, 64)
        with g.instantiate() as graph:
            graph.launch(stream)
        stream.sync()
        buf.close()
        stream.close()
        g.close()

    created = Context.create(0)
    for start in (None, created, dev.context):
        if start is None:
            from cuda.bindings import driver as cb

            from cuguard.errors import driver

            driver.cuCtxSetCurrent(cb.CUcontext(0))
        else:
            start.set_current()
        pipeline()
        assert current() == start
        for function in (
            "cuStreamCreate",
            "cuMemAllocAsync",
            "cuModuleLoadData",
            "cuGraphInstantiate",
            "cuGraphLaunch",
        ):
            with inject(function, OUT_OF_MEMORY), pytest.raises(CUDAError):
                pipeline()
            assert current() == start, f"{function} failed and the current context changed"
    # the calls that change it on purpose
    dev.set_current()
    assert current() == dev.context
    previous = created.set_current()
    assert previous == dev.context
    assert current() == created
    from cuda.bindings import driver as cb

    from cuguard.errors import driver

    driver.cuCtxSetCurrent(cb.CUcontext(0))
    created.close()
    gc.collect()


@pytest.mark.contract("G3", "B4")
def test_G3_objects_touched_by_a_failed_call_stay_usable(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig, read: Callable[[Any], bytes]
) -> None:
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    a = g.memset(buf, 1)
    b = g.empty()
    c = g.launch(config, kernels["add_u8"], buf, 2, 64)
    before = (frozenset(g.nodes), g.edges)
    # connect two edges; the second edge add fails: the first is undone (all-or-nothing)
    with inject("cuGraphAddDependencies", OUT_OF_MEMORY, nth=2), pytest.raises(CUDAError):
        g.connect((a, b), (b, c))
    assert (frozenset(g.nodes), g.edges) == before
    # replacing a node's predecessors fails half-way: nothing changed
    with inject("cuGraphAddDependencies", OUT_OF_MEMORY, nth=2), pytest.raises(CUDAError):
        c.pred = {a, b}
    assert (frozenset(g.nodes), g.edges) == before
    # a failed kernel-parameter change keeps the old parameters
    with inject("cuGraphKernelNodeSetParams", OUT_OF_MEMORY), pytest.raises(CUDAError):
        c.set_args(buf, 9, 64)
    assert c.params["args"] == (buf, 2, 64)
    # everything still works: the graph runs the memset, then the kernel adds 2
    g.connect((a, b), (b, c))
    graph = g.instantiate()
    with inject("cuGraphLaunch", OUT_OF_MEMORY), pytest.raises(CUDAError):
        graph.launch(stream)
    graph.launch(stream)
    stream.sync()
    assert read(buf) == bytes([3]) * 64
    # a failed update leaves the executable graph as it was, and usable
    clone = g.clone()
    clone.find_node(c).set_args(buf, 5, 64)
    with inject("cuGraphExecUpdate", INVALID_VALUE), pytest.raises(CUDAError):
        graph.update(clone)
    graph.launch(stream)
    stream.sync()
    assert read(buf) == bytes([3]) * 64
    graph.update(clone)
    graph.launch(stream)
    stream.sync()
    assert read(buf) == bytes([6]) * 64
    for obj in (graph, clone, g, buf):
        obj.close()


@pytest.mark.contract("G4")
def test_G4_failures_while_an_exception_propagates_become_notes(
    dev: Device, kernels: dict[str, Kernel], config: LaunchConfig, other_context: Context
) -> None:
    def body() -> None:
        with dev.create_stream() as stream, GraphDefinition(dev) as g:
            g.memset(dev.allocate(64, stream=stream), 1)
            raise ValueError("the body failed")

    with (
        inject("cuStreamDestroy", OUT_OF_MEMORY),
        inject("cuGraphDestroy", OUT_OF_MEMORY),
        pytest.raises(ValueError, match="the body failed") as info,
    ):
        body()
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "cuStreamDestroy" in notes
    assert "cuGraphDestroy" in notes
    # an operation fails and so does the restore of the caller's context: the operation's error wins
    buf = dev.allocate(64)
    g2 = GraphDefinition(dev)
    g2.memset(buf, 1)
    with inject("cuGraphInstantiate", OUT_OF_MEMORY), restore_fault(), pytest.raises(CUDAError) as failed:
        g2.instantiate()
    assert failed.value.call == "cuGraphInstantiate"
    assert any("could not be restored" in note for note in getattr(failed.value, "__notes__", []))
    other_context.set_current()
    g2.close()
    buf.close()


@pytest.mark.contract("G5")
def test_G5_what_a_graph_uses_is_kept_before_anything_can_raise(
    *,
    cuguard_driver: Any,
    dev: Device,
    stream: Stream,
    kernels: dict[str, Kernel],
    config: LaunchConfig,
    other_context: Context,
    settled: Callable[[], None],
) -> None:
    out = dev.allocate_pinned(64)
    first = dev.allocate(64)
    g = GraphDefinition(dev)
    node = g.launch(config, kernels["fill_u8"], first, 1, 64)
    # The new parameters are set, then the restore of the caller's context fails, and so does putting the
    # old parameters back: the node keeps the new buffer, so the definition must keep it alive (a note says so).
    second = dev.allocate(64)
    with restore_fault(), inject("cuGraphKernelNodeSetParams", OUT_OF_MEMORY, nth=2), pytest.raises(CUDAError) as info:
        node.set_args(second, 7, 64)
    other_context.set_current()
    kept_new = node.params["args"][0] is second
    assert kept_new == any("cuGraphKernelNodeSetParams" in n for n in getattr(info.value, "__notes__", []))
    g.memcpy(out, second if kept_new else first, deps=(node,))
    expected = bytes([7 if kept_new else 1]) * 64
    del second, first  # the user drops every reference: only the definition keeps the buffers
    gc.collect()
    graph = g.instantiate()
    g.close()
    del g, node
    settled()
    graph.launch(stream)
    stream.sync()
    assert bytes(out.numpy()) == expected
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling, cuguard_driver.dangling
        assert not cuguard_driver.use_after_release
    graph.close()
    settled()
    out.close()
