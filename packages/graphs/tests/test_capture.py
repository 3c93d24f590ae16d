"""Stream capture with GraphBuilder, on the simulator and (``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import copy
import gc
import threading
import weakref
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.graphs import GraphBuilder, GraphDefinition, capture_mode, exchange_capture_mode
from cuguard.resources import Device, LaunchConfig, Module, Stream, launch
from cuguard.testing import SimulatedDriver, inject, leak_check, settle

INVALIDATED = 901
UNJOINED = 904
WRONG_THREAD = 908
UNSUPPORTED = 900
OUT_OF_MEMORY = 2


def _u32(pinned: Any) -> Any:
    return pinned.numpy("uint32")


@pytest.mark.contract("G5")
def test_captured_work_runs_each_time_the_graph_runs(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(64)
    with leak_check():
        buf = dev.allocate(64, stream)
        stream.sync()
        with GraphBuilder(stream) as builder:
            assert builder.begin_building() is builder
            assert builder.is_building
            assert builder.status == "active"
            buf.fill(0x5A, builder)  # the builder is a stream
            buf.copy_to(out, builder)
            builder.keep(buf, out)
            out.numpy()[:] = 0
            builder.end_building()
            assert not builder.is_building
            assert builder.status == "none"
            assert len(builder.definition.nodes) == 2
            assert bytes(out.numpy()) == bytes(64)  # nothing ran during the capture
            with builder.complete() as graph:
                graph.launch(stream)
                stream.sync()
                assert bytes(out.numpy()) == b"\x5a" * 64
                out.numpy()[:] = 0
                graph.launch(stream)
                stream.sync()
                assert bytes(out.numpy()) == b"\x5a" * 64
        buf.close()
        settle(cuguard_driver)
    out.close()


@pytest.mark.contract("G5", "W5")
def test_builder_launch_keeps_kernel_module_and_buffers_alive(
    cuguard_driver: Any, dev: Device, stream: Stream, kernel_image: bytes
) -> None:
    out = dev.allocate_pinned(4 * 16)
    with leak_check():
        module = dev.load_module(kernel_image)
        buf = dev.allocate(4 * 16, stream)
        stream.sync()
        mod_ref, buf_ref = weakref.ref(module), weakref.ref(buf)
        builder = GraphBuilder(stream).begin_building()
        builder.launch(LaunchConfig(grid=1, block=16), module.get_kernel("fill_u32"), buf, np.uint32(9), 16)
        buf.copy_to(out, builder)
        graph = builder.end_building().complete()
        builder.close()
        del module, buf, builder
        gc.collect()
        assert mod_ref() is not None
        assert buf_ref() is not None
        graph.launch(stream)
        stream.sync()
        assert list(_u32(out)) == [9] * 16
        graph.close()
        del graph
        settle(cuguard_driver)
        assert mod_ref() is None
        assert buf_ref() is None
    out.close()


@pytest.mark.contract("G5")
def test_resources_launch_takes_the_builder_as_its_stream(dev: Device, stream: Stream, module: Module) -> None:
    out = dev.allocate_pinned(4 * 8)
    buf = dev.allocate(4 * 8, stream)
    stream.sync()
    with GraphBuilder(stream).begin_building() as builder:
        launch(builder, LaunchConfig(grid=1, block=8), module.get_kernel("fill_u32"), buf, np.uint32(3), 8)
        launch(builder, LaunchConfig(grid=1, block=8), module.get_kernel("add_u32"), buf, np.uint32(4), 8)
        buf.copy_to(out, builder)
        with builder.end_building().complete() as graph:
            graph.launch(stream)
            stream.sync()
    assert list(_u32(out)) == [7] * 8
    buf.close()
    out.close()


@pytest.mark.contract("G5", "W6")
def test_captured_callback_runs_at_each_launch(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    ran: list[int] = []
    with leak_check():
        with GraphBuilder(stream).begin_building() as builder:
            builder.callback(lambda: ran.append(1))
            assert ran == []
            with pytest.raises(RuntimeError, match="end_building"):
                builder.complete()
            with builder.end_building().complete() as graph:
                graph.launch(stream)
                graph.launch(stream)
                stream.sync()
        settle(cuguard_driver)
    assert ran == [1, 1]


@pytest.mark.contract("G1")
def test_split_and_join_capture_parallel_branches(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(64)
    with leak_check():
        left, right = dev.allocate(32, stream), dev.allocate(32, stream)
        stream.sync()
        builder = GraphBuilder(stream).begin_building()
        main, fork = builder.split(2)
        assert main is builder
        assert fork.is_building
        left.fill(1, main)
        right.fill(2, fork)
        main.join(fork)
        assert not fork.is_building
        with pytest.raises(RuntimeError, match="join"):
            fork.callback(lambda: None)
        main.keep(left, right)
        builder.end_building()
        assert fork.stream.closed  # the fork's stream is closed once the capture ended
        with builder.complete() as graph:
            graph.launch(stream)
            stream.sync()
        builder.close()
        host = np.zeros(64, dtype=np.uint8)
        left.copy_to(host[:32])
        right.copy_to(host[32:])
        assert bytes(host) == b"\x01" * 32 + b"\x02" * 32
        left.close()
        right.close()
        settle(cuguard_driver)
    out.close()


@pytest.mark.contract("G1", "G3")
def test_an_unjoined_fork_leaves_nothing_and_the_stream_usable(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    buf = dev.allocate(32, stream)
    stream.sync()
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        _, fork = builder.split(2)
        buf.fill(1, fork)
        with pytest.raises(CUDAError) as info:
            builder.end_building()
        assert int(info.value.code) == UNJOINED
        assert info.value.call == "cuStreamEndCapture"
        assert not builder.is_building
        assert fork.stream.closed
        stream.sync()  # usable again
        with pytest.raises(RuntimeError, match="no graph definition"):
            builder.definition  # noqa: B018
        builder.close()
        settle(cuguard_driver)
    buf.close()


@pytest.mark.contract("G1", "G3")
def test_an_invalidated_capture_is_ended_once_and_can_begin_again(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    buf = dev.allocate(32, stream)
    stream.sync()
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        buf.fill(1, builder)
        with pytest.raises(CUDAError) as info:
            stream.sync()  # synchronizing a capturing stream invalidates the capture
        assert int(info.value.code) == UNSUPPORTED
        assert builder.status == "invalidated"
        with pytest.raises(CUDAError) as ended:
            builder.end_building()
        assert int(ended.value.code) == INVALIDATED
        assert not builder.is_building
        assert builder.status == "none"
        builder.begin_building()
        buf.fill(2, builder)
        builder.keep(buf)
        builder.end_building()
        with builder.complete() as graph:
            graph.launch(stream)
            stream.sync()
        builder.close()
        settle(cuguard_driver)
    host = np.zeros(32, dtype=np.uint8)
    buf.copy_to(host)
    assert bytes(host) == b"\x02" * 32
    buf.close()


@pytest.mark.contract("G3")
def test_a_failed_end_leaves_the_capture_going(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        with inject("cuStreamEndCapture", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            builder.end_building()
        assert info.value.call == "cuStreamEndCapture"
        assert builder.is_building
        assert builder.status == "active"
        builder.end_building()
        assert len(builder.definition.nodes) == 0
        builder.close()
        settle(cuguard_driver)


@pytest.mark.contract("G3")
def test_a_failed_join_leaves_the_fork_usable_and_end_closes_it(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    buf = dev.allocate(32, stream)
    stream.sync()
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        _, fork = builder.split(2)
        buf.fill(4, fork)
        with inject("cuStreamWaitEvent", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            builder.join(fork)
        assert info.value.call == "cuStreamWaitEvent"
        assert fork.is_building  # not joined: still usable
        builder.join(fork)
        builder.keep(buf)
        builder.end_building()
        assert fork.stream.closed
        builder.close()
        settle(cuguard_driver)
    buf.close()


@pytest.mark.contract("G1")
def test_a_failed_split_returns_no_fork_and_the_capture_still_ends(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        with inject("cuStreamWaitEvent", OUT_OF_MEMORY), pytest.raises(CUDAError):
            builder.split(2)
        builder.end_building()  # the half-made fork captured nothing: the capture ends
        builder.close()
        settle(cuguard_driver)


@pytest.mark.contract("G5")
def test_embed_captures_a_child_graph(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    with leak_check():
        child = GraphDefinition(dev)
        child.memset(buf, 0x33)
        with GraphBuilder(stream).begin_building() as builder:
            builder.embed(child)
            child.close()
            builder.end_building()
            (node,) = builder.definition.nodes
            assert node.type == "graph"
            with builder.complete() as graph:
                graph.launch(stream)
                stream.sync()
        settle(cuguard_driver)
    host = np.zeros(16, dtype=np.uint8)
    buf.copy_to(host)
    assert bytes(host) == b"\x33" * 16
    buf.close()


@pytest.mark.contract("G3")
def test_recapture_updates_an_executable_graph(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    host = np.zeros(16, dtype=np.uint8)
    with GraphBuilder(stream) as builder:
        builder.begin_building()
        buf.fill(1, builder)
        builder.keep(buf)
        graph = builder.end_building().complete()
        builder.begin_building()
        buf.fill(2, builder)
        builder.keep(buf)
        first = builder.definition
        builder.end_building()
        assert first.closed  # the builder owns its definitions
        graph.update(builder.definition)
        graph.launch(stream)
        stream.sync()
        buf.copy_to(host)
        graph.close()
    assert bytes(host) == b"\x02" * 16
    buf.close()


@pytest.mark.contract("G3")
def test_ending_from_another_thread_follows_the_capture_mode(dev: Device, stream: Stream) -> None:
    for mode, expected in (("global", WRONG_THREAD), ("relaxed", None)):
        builder = GraphBuilder(stream, mode=mode).begin_building()
        seen: list[BaseException | None] = []

        def end(b: GraphBuilder = builder, seen: list[BaseException | None] = seen) -> None:
            try:
                b.end_building()
                seen.append(None)
            except CUDAError as exc:
                seen.append(exc)

        thread = threading.Thread(target=end)
        thread.start()
        thread.join()
        if expected is None:
            assert seen == [None]
            assert not builder.is_building
        else:
            assert isinstance(seen[0], CUDAError)
            assert int(seen[0].code) == expected
            # The driver ended the capture although it refused (seen on an H200): nothing is left building.
            assert not builder.is_building
            with pytest.raises(RuntimeError, match="no graph definition"):
                builder.definition  # noqa: B018 - the refused end made none
        builder.close()


@pytest.mark.contract("G3")
def test_thread_capture_mode_decides_whether_unsafe_calls_are_refused(dev: Device, stream: Stream) -> None:
    builder = GraphBuilder(stream).begin_building()
    with capture_mode("relaxed") as previous:
        assert previous == "global"
        dev.allocate_pinned(16).close()  # allowed in relaxed mode
    assert exchange_capture_mode("global") == "global"
    with pytest.raises(CUDAError) as info:
        dev.allocate_pinned(16)  # prohibited in global mode: invalidates the capture
    assert int(info.value.code) == UNSUPPORTED
    with pytest.raises(CUDAError) as ended:
        builder.end_building()
    assert int(ended.value.code) == INVALIDATED
    with pytest.raises(ValueError, match="mode"):
        exchange_capture_mode("loose")
    builder.close()


@pytest.mark.contract("E3", "O1")
def test_wrong_arguments_are_refused_before_the_driver(dev: Device, stream: Stream) -> None:
    with pytest.raises(TypeError, match="stream"):
        GraphBuilder(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        GraphBuilder(stream, mode="loose")
    builder = GraphBuilder(stream)
    with pytest.raises(RuntimeError, match="not building"):
        builder.end_building()
    with pytest.raises(RuntimeError, match="no capture"):
        builder.callback(lambda: None)
    builder.begin_building()
    with pytest.raises(RuntimeError, match="building already"):
        builder.begin_building()
    with pytest.raises(TypeError, match="count"):
        builder.split("2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count"):
        builder.split(0)
    with pytest.raises(TypeError, match="forks"):
        builder.join(stream)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        builder.callback(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="child"):
        builder.embed(stream)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="GraphBuilder"):
        copy.copy(builder)
    builder.close()
    builder.close()  # idempotent
    with pytest.raises(ResourceClosedError):
        builder.begin_building()


@pytest.mark.contract("S3", "G1")
def test_a_collected_builder_ends_its_capture(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        builder.split(2)
        del builder
        gc.collect()
        settle(cuguard_driver)
    stream.sync()  # no longer capturing
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.misuse


@pytest.mark.contract("G3")
def test_a_split_failing_after_a_fork_joined_keeps_that_fork_until_the_capture_ends(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    with leak_check():
        builder = GraphBuilder(stream).begin_building()
        with inject("cuStreamWaitEvent", OUT_OF_MEMORY, nth=2), pytest.raises(CUDAError):
            builder.split(3)  # the first fork's stream joined the capture before the second wait failed
        assert builder.is_building
        builder.end_building()  # nothing follows the kept fork's fork point: the capture ends
        builder.close()
        settle(cuguard_driver)


@pytest.mark.contract("G1", "G3")
def test_a_failed_embed_dependency_update_abandons_the_capture(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    with leak_check():
        child = GraphDefinition(dev)
        child.memset(buf, 0x44)
        builder = GraphBuilder(stream).begin_building()
        builder.split(2)
        with inject("cuStreamUpdateCaptureDependencies", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            builder.embed(child)
        assert info.value.call == "cuStreamUpdateCaptureDependencies"
        assert not builder.is_building  # the node could not be removed: the capture was dropped
        assert builder.status == "none"
        builder.begin_building()  # the builder and its stream work again
        builder.embed(child)
        builder.end_building()
        assert len(builder.definition.nodes) == 1
        child.close()
        builder.close()
        settle(cuguard_driver)
    buf.close()


@pytest.mark.contract("E3", "O1")
def test_a_builder_whose_stream_was_closed_is_not_wrapped(dev: Device) -> None:
    """``create_stream(obj=builder)`` refuses a builder whose stream was closed under its capture.

    Closing the stream leaves the capture going on the driver stream (its destroy waits, G6), but
    the cuguard ``Stream`` is closed: wrapping the builder raises ``ResourceClosedError`` naming it,
    instead of handing that closed stream back as if it were new.
    """
    stream = dev.create_stream()
    builder = GraphBuilder(stream).begin_building()
    stream.close()
    with pytest.raises(ResourceClosedError, match="is closed"):
        dev.create_stream(obj=builder)
    builder.close()
