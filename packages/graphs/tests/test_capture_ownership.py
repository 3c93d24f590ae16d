"""What captured work uses belongs to the graph from the moment it is captured (G6, W5), and releases never
enter a capture.

- ``GraphBuilder.keep``, ``GraphBuilder.launch``, ``cuguard.resources.launch`` and copies and fills queued on
  a builder all count what they use as used by a graph: ``close()`` then closes the buffer for use at once and
  frees its memory only once no graph or capture uses it.
- A stream-ordered free that would be queued on a stream being captured waits for the capture's end.
- Captures are counted per driver context, so a capture on a wrapped foreign stream defers the collections that
  need ``cuCtxSynchronize`` as a capture on cuguard's own stream does.
- ``close()`` inside a host function closes the object for use and releases it on cuguard's release thread.

On the simulator the driver's books show what was freed when; on a GPU (``--cuguard-driver=real``) the values a
graph writes show that no memory was handed out again under it.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
import pytest

from cuguard.context import Context
from cuguard.errors import ResourceClosedError, driver
from cuguard.graphs import GraphBuilder, flush_deferred
from cuguard.resources import Device, LaunchConfig, Module, Stream, launch
from cuguard.testing import SimulatedDriver, record_calls, settle


def _u32(buf: Any) -> list[int]:
    host = np.zeros(buf.size // 4, dtype=np.uint32)
    buf.copy_to(host)
    return [int(v) for v in host]


def _live(drv: Any, handle: int) -> bool:
    """Whether the simulator still has the allocation ``handle`` (True on a GPU: its books are not visible)."""
    if not isinstance(drv, SimulatedDriver):
        return True
    return any(o.handle == handle for o in drv.live_objects())


def _fill_graph(builder: GraphBuilder, module: Module, buf: Any, value: int, how: str) -> None:
    """Capture a fill of ``buf`` with ``value``; ``how`` says which API queues it."""
    kernel = module.get_kernel("fill_u32")
    config = LaunchConfig(grid=1, block=4)
    if how == "keep":
        launch(builder.stream, config, kernel, buf, np.uint32(value), 4)  # captured, seen by nobody...
        builder.keep(buf)  # ...but kept by the user's own word
    elif how == "builder.launch":
        builder.launch(config, kernel, buf, np.uint32(value), 4)
    elif how == "launch":
        launch(builder, config, kernel, buf, np.uint32(value), 4)
    else:  # a fill queued through the builder as a stream
        buf.fill(value, builder)


HOW = ["keep", "builder.launch", "launch", "fill"]


@pytest.mark.contract("W5", "G5", "G6")
@pytest.mark.parametrize("how", HOW)
def test_memory_a_graph_uses_is_not_freed_by_close_before_the_graph_is_gone(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module, how: str
) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    handle = int(buf._handle)
    builder = GraphBuilder(stream).begin_building()
    _fill_graph(builder, module, buf, 7, how)
    graph = builder.end_building().complete()
    builder.close()
    buf.close()  # closed for use at once...
    assert buf.closed
    with pytest.raises(ResourceClosedError):
        buf.handle  # noqa: B018
    settle(cuguard_driver)
    assert _live(cuguard_driver, handle)  # ...but the executable graph still writes to the memory
    other = dev.allocate(16, stream)  # a new allocation never gets the memory the graph writes to
    other.fill(0, stream)
    graph.launch(stream)
    stream.sync()
    assert _u32(other) == [0, 0, 0, 0]
    graph.close()
    del graph
    settle(cuguard_driver)
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)
    other.close()


@pytest.mark.contract("W5", "G6")
@pytest.mark.parametrize("how", HOW)
def test_closing_memory_during_the_capture_that_uses_it_defers_the_free(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module, how: str
) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    handle = int(buf._handle)
    builder = GraphBuilder(stream).begin_building()
    _fill_graph(builder, module, buf, 5, how)
    with record_calls() as log:
        buf.close()  # the capture uses it: nothing is freed, nothing enters the capture
    assert [c.name for c in log if c.name.startswith("cuMemFree")] == []
    assert buf.closed
    assert builder.status == "active"
    graph = builder.end_building().complete()
    builder.close()
    settle(cuguard_driver)
    assert _live(cuguard_driver, handle)
    graph.launch(stream)
    stream.sync()
    graph.close()
    del graph
    settle(cuguard_driver)
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)


@pytest.mark.contract("W5", "G6")
def test_memory_closed_during_an_abandoned_capture_is_freed_when_it_ends(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module
) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    handle = int(buf._handle)
    builder = GraphBuilder(stream).begin_building()
    builder.launch(LaunchConfig(grid=1, block=4), module.get_kernel("fill_u32"), buf, np.uint32(1), 4)
    buf.close()
    assert _live(cuguard_driver, handle)
    builder.close()  # ends the capture without a graph: nothing uses the memory any more
    settle(cuguard_driver)
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)


@pytest.mark.contract("G6", "W5")
@pytest.mark.parametrize("how", ["close", "close(stream=builder)", "collection"])
def test_a_stream_ordered_free_never_enters_a_capture(
    cuguard_driver: Any, dev: Device, stream: Stream, how: str
) -> None:
    buf = dev.allocate(16, stream)  # allocated on the stream the capture will run on
    stream.sync()
    handle = int(buf._handle)
    builder = GraphBuilder(stream).begin_building()
    with record_calls() as log:
        if how == "close":
            buf.close()
        elif how == "close(stream=builder)":
            buf.close(stream=builder)
        else:
            del buf
            gc.collect()
    assert [c.name for c in log if c.name.startswith("cuMemFree")] == []  # not queued into the capture
    assert builder.status == "active"
    with record_calls() as log:
        builder.end_building()  # the capture ends: the free is made now, outside it
    assert [c.name for c in log if c.name.startswith("cuMemFree")] == ["cuMemFreeAsync"]
    assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]
    assert len(builder.definition.nodes) == 0  # the graph holds no free
    builder.close()
    stream.sync()
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)


@pytest.mark.contract("G6", "W5")
def test_a_free_on_a_stream_captured_outside_cuguard_waits_for_that_capture(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    handle = int(buf._handle)
    from cuda.bindings import driver as cb

    (err,) = driver.cuStreamBeginCapture(stream.handle, cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    assert not err
    with record_calls() as log:
        buf.close()  # the handle was handed out: cuguard asks whether the stream captures, and waits
    assert [c.name for c in log] == ["cuStreamIsCapturing"]
    err, graph = driver.cuStreamEndCapture(stream.handle)
    assert not err
    (err,) = driver.cuGraphDestroy(graph)
    assert not err
    assert _live(cuguard_driver, handle)
    with record_calls() as log:
        stream.sync()  # the next synchronization finds the capture over and frees the memory
    assert "cuMemFreeAsync" in [c.name for c in log]
    stream.sync()
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)


@pytest.mark.contract("G6", "O6")
def test_captures_are_counted_by_driver_context_not_by_wrapper(cuguard_driver: Any, dev: Device) -> None:
    from cuda.bindings import driver as cb

    dev.set_current()
    err, raw = driver.cuStreamCreate(1)
    assert not err
    try:
        foreign = Stream.wrap(raw, Context.wrap(dev.context.handle))  # another Context object, the same context
        assert foreign.context is not dev.context
        closed_stream = dev.create_stream()
        buf = dev.allocate(16, closed_stream)
        closed_stream.sync()
        closed_stream.close()  # the buffer's free now needs cuCtxSynchronize
        handle = int(buf._handle)
        builder = GraphBuilder(foreign).begin_building()
        with record_calls() as log:
            del buf
            gc.collect()
        assert "cuCtxSynchronize" not in [c.name for c in log]  # it would break the capture: deferred
        assert builder.status == "active"
        with record_calls() as log:
            builder.end_building()
        assert "cuCtxSynchronize" in [c.name for c in log]
        assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]
        assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)
        builder.close()
        foreign.close()
    finally:
        driver.cuStreamDestroy(raw)
        driver.cuCtxSetCurrent(cb.CUcontext(0))


@pytest.mark.contract("O5", "W1")
@pytest.mark.parametrize("kind", ["buffer", "pinned", "stream", "event"])
def test_close_inside_a_host_function_releases_on_the_release_thread(
    cuguard_driver: Any, dev: Device, stream: Stream, kind: str
) -> None:
    if kind == "buffer":
        obj: Any = dev.allocate(16, stream)
    elif kind == "pinned":
        obj = dev.allocate_pinned(16)
    elif kind == "stream":
        obj = dev.create_stream()
    else:
        obj = dev.create_event()
    handle = int(obj._handle)
    ran = threading.Event()

    def close_it() -> None:
        obj.close()
        ran.set()

    stream.launch_host_func(close_it)
    stream.sync()
    assert ran.wait(10)
    assert obj.closed
    assert flush_deferred(10)
    if isinstance(cuguard_driver, SimulatedDriver):
        cuguard_driver.drain()
        assert not _live(cuguard_driver, handle)  # released, not leaked
    obj.close()  # idempotent: nothing more happens


@pytest.mark.contract("G6", "W1")
@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_a_builder_collected_on_another_thread_ends_its_capture_quietly(
    cuguard_driver: Any, dev: Device, stream: Stream, mode: str
) -> None:
    made: list[GraphBuilder] = []

    def begin() -> None:
        made.append(GraphBuilder(stream, mode=mode).begin_building())

    worker = threading.Thread(target=begin)
    worker.start()
    worker.join()
    # Collected here, not on the thread that began the capture: the driver refuses the end from this
    # thread (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) and ends the capture anyway; nothing is reported.
    import warnings

    from cuguard.errors import CUDAWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", CUDAWarning)
        made.clear()
        gc.collect()
    err, status = driver.cuStreamIsCapturing(stream.handle)
    assert not err
    assert int(status) == 0  # the stream captures no more
    stream.sync()


@pytest.mark.contract("E3")
def test_builder_launch_checks_argument_kinds_before_its_state(dev: Device, stream: Stream, module: Module) -> None:
    builder = GraphBuilder(stream)  # not building: the kinds are still checked first
    with pytest.raises(TypeError, match="config"):
        builder.launch(module, module.get_kernel("fill_u32"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kernel"):
        builder.launch(LaunchConfig(grid=1, block=1), module)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no capture"):
        builder.launch(LaunchConfig(grid=1, block=1), module.get_kernel("fill_u32"), 0, np.uint32(0), 0)
    builder.close()


@pytest.mark.contract("G6")
@pytest.mark.parametrize("kind", ["device", "pinned"])
def test_an_explicit_close_of_memory_never_breaks_another_threads_global_capture(
    cuguard_driver: Any, dev: Device, stream: Stream, kind: str
) -> None:
    obj: Any = dev.allocate(64) if kind == "device" else dev.allocate_pinned(64)  # freed synchronously
    handle = int(obj._handle)
    begun, closed = threading.Event(), threading.Event()
    result: list[str] = []

    def capture() -> None:
        builder = GraphBuilder(stream, mode="global").begin_building()
        begun.set()
        closed.wait(10)
        result.append(builder.status)
        builder.end_building()
        builder.close()

    worker = threading.Thread(target=capture)
    worker.start()
    assert begun.wait(10)
    try:
        obj.close()  # cuMemFree / cuMemFreeHost, which a global capture prohibits: made relaxed
    finally:
        closed.set()
        worker.join(10)
    assert result == ["active"]
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)


@pytest.mark.contract("G6", "O6")
def test_a_builder_on_a_closed_foreign_wrapper_still_ends_its_capture(cuguard_driver: Any, dev: Device) -> None:
    from cuda.bindings import driver as cb

    dev.set_current()
    err, raw = driver.cuStreamCreate(1)
    assert not err

    class Foreign:  # a stream made elsewhere, kept alive by its wrapper
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, int(raw))

    try:
        wrapper = dev.create_stream(Foreign())
        builder = GraphBuilder(wrapper).begin_building()
        wrapper.close()  # closes the wrapper only: the stream and its capture go on
        del builder
        gc.collect()  # the collected builder ends the capture it began
        err, status = driver.cuStreamIsCapturing(raw)
        assert not err
        assert int(status) == 0
    finally:
        driver.cuStreamDestroy(raw)
        driver.cuCtxSetCurrent(cb.CUcontext(0))


@pytest.mark.contract("G6", "O6")
@pytest.mark.parametrize("end", ["close", "join then end_building"])
def test_a_release_waiting_for_a_forked_capture_runs_when_the_capture_ends(
    cuguard_driver: Any, dev: Device, stream: Stream, end: str
) -> None:
    closed_stream = dev.create_stream()
    buf = dev.allocate(16, closed_stream)
    closed_stream.sync()
    closed_stream.close()  # the buffer's free now needs cuCtxSynchronize
    handle = int(buf._handle)
    builder = GraphBuilder(stream).begin_building()
    forks = builder.split(3)  # (builder, fork, fork): the capture runs on the forks' streams too
    with record_calls() as log:
        del buf
        gc.collect()
    assert "cuCtxSynchronize" not in [c.name for c in log]  # it would break the capture: it waits
    assert _live(cuguard_driver, handle)
    with record_calls() as log:
        if end == "close":
            builder.close()  # ends the root's capture first, then lets go of the forks' streams
        else:
            builder.join(*forks[1:]).end_building()
            builder.close()
    assert "cuCtxSynchronize" in [c.name for c in log]  # no fork's stream still counts as capturing
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)


class _ForeignStream:
    """Another library's stream: only ``__cuda_stream__``."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


@pytest.mark.contract("G6", "E3")
def test_a_foreign_stream_whose_capture_was_invalidated_is_still_wrapped(dev: Device) -> None:
    from cuguard.resources import as_stream

    dev.set_current()
    err, raw = driver.cuStreamCreate(1)
    assert not err
    try:
        foreign = _ForeignStream(int(raw))
        first = as_stream(foreign)
        builder = GraphBuilder(first).begin_building()
        (err,) = driver.cuStreamSynchronize(first.handle)  # refused during the capture: it is invalidated
        assert err
        assert builder.status == "invalidated"
        err, _ = driver.cuStreamGetCtx(first.handle)
        assert err  # the driver names no context now (as on an H200)
        again = as_stream(foreign)  # cuguard's own query would fail: the wrapper it holds knows the context
        assert again.context == first.context
        assert int(again.handle) == int(raw)
        builder.close()
        again.close()
        first.close()
    finally:
        driver.cuStreamDestroy(raw)


@pytest.mark.contract("G6", "W5")
@pytest.mark.parametrize("how", ["close", "collect"])
def test_a_capture_that_could_not_be_ended_holds_releases_back_until_its_stream_is_destroyed(
    cuguard_driver: Any, dev: Device, how: str
) -> None:
    from cuguard.errors import CUDAError
    from cuguard.resources.lowlevel import waiting_count
    from cuguard.testing import inject

    stream = dev.create_stream()
    closed_stream = dev.create_stream()
    buf = dev.allocate(16, closed_stream)
    closed_stream.sync()
    closed_stream.close()  # the buffer's free now needs cuCtxSynchronize
    handle = int(buf._handle)
    builder = GraphBuilder(stream).begin_building()
    with inject("cuStreamEndCapture", 999, nth=1), pytest.raises(CUDAError, match="cuStreamEndCapture"):
        builder.close()  # the capture goes on in the driver: it stays counted (G6)
    with record_calls() as log:
        del buf
        gc.collect()
    assert "cuCtxSynchronize" not in [c.name for c in log]  # it would break the capture: the free waits
    assert waiting_count() == 1
    with record_calls() as log:
        if how == "close":
            stream.close()  # the driver ends the capture with its stream: the free runs now
        else:
            del stream, builder
            gc.collect()  # the same when the stream is collected: the free runs at the collection's end
    assert "cuStreamDestroy" in [c.name for c in log]
    assert "cuCtxSynchronize" in [c.name for c in log]
    assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]
    assert waiting_count() == 0
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)


@pytest.mark.contract("G6", "O6")
def test_collected_virtual_memory_with_an_open_stream_waits_for_a_capture_of_its_context(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    # Its free unmaps after cuCtxSynchronize, whatever stream it was allocated on: refused during a capture.
    from cuguard.resources import VirtualMemoryResource

    other = dev.create_stream()
    buf = VirtualMemoryResource(dev).allocate(4096, other)
    builder = GraphBuilder(stream).begin_building()
    with record_calls() as log:
        del buf
        gc.collect()
    assert "cuCtxSynchronize" not in [c.name for c in log]  # it would break the capture: the free waits
    assert builder.status == "active"
    with record_calls() as log:
        builder.end_building()
    assert "cuCtxSynchronize" in [c.name for c in log]
    assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]
    builder.close()
    other.close()


@pytest.mark.contract("G6", "W5")
def test_a_builder_on_a_stream_whose_destroy_was_refused_still_ends_its_capture(dev: Device) -> None:
    # The stream is closed for use but leaked: the driver stream still exists and still captures.
    # Closing the builder ends that capture (before, it assumed the stream destroyed, forgot the
    # capture, and a later collection's cuCtxSynchronize met the capture still going on in the
    # driver; found by the misuse sweep, random engine, seed 29).
    from cuguard.errors import CUDAError
    from cuguard.resources import VirtualMemoryResource
    from cuguard.testing import inject

    INVALID_VALUE = 1
    stream = dev.create_stream(non_blocking=True)
    builder = GraphBuilder(stream).begin_building()
    handle = stream.handle
    with inject("cuStreamDestroy", INVALID_VALUE), pytest.raises(CUDAError):
        stream.close()  # refused: leaked, still capturing
    with record_calls() as log:
        builder.close()
    assert "cuStreamEndCapture" in [c.name for c in log]
    err, status = driver.cuStreamIsCapturing(handle)
    assert (int(err), int(status)) == (0, 0)  # the capture is over
    buf = VirtualMemoryResource(dev).allocate(64)
    with record_calls() as log:
        del buf  # its free synchronizes the context: nothing captures any more
        gc.collect()
    assert [c.status for c in log if c.name == "cuCtxSynchronize"] == [0]
    assert not driver.cuStreamDestroy(handle)[0]  # the test's own clean-up of the leaked stream
