"""What cuguard does on its own behalf leaves captures alone (G6), and fault attribution meets capture (E5).

On the simulator and (``--cuguard-driver=real``) a GPU: while one thread captures a stream in
global mode (a ``GraphBuilder``'s default), another thread makes every kind of memory resource,
streams and events. CUDA prohibits potentially unsafe calls in that second thread (an H200 refused
``cuMemPoolCreate`` there with ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidated the
capture); cuguard's set-up runs in relaxed capture mode, so the constructor succeeds and the
capture ends with a graph that runs. The user's own requested work keeps CUDA's rule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.errors import CUDAError, StickyCUDAError, attribute_faults
from cuguard.graphs import GraphBuilder
from cuguard.resources import (
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    LaunchConfig,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    Module,
    PinnedMemoryResource,
    Stream,
    VirtualMemoryResource,
    launch,
)
from cuguard.testing import SimulatedDriver, record_calls, settle

UNSUPPORTED = 900  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
JOIN_TIMEOUT = 60


def _in_other_thread(action: Callable[[], Any]) -> Any:
    """``action()`` in a new thread (the default, global capture mode); its result, or what it raised."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive(), "the other thread did not finish"
    return outcome[0]


def _close(made: Any) -> None:
    close = getattr(made, "close", None)
    if close is not None:
        close()


def _pool(dev: Device) -> Any:
    return DeviceMemoryResource(dev, DeviceMemoryResourceOptions(max_size=1 << 25))


def _default_pool(dev: Device) -> Any:
    return DeviceMemoryResource(dev)


def _pinned_pool(dev: Device) -> Any:
    return PinnedMemoryResource(dev)


def _managed(dev: Device) -> Any:
    return ManagedMemoryResource(dev)


def _virtual(dev: Device) -> Any:
    return VirtualMemoryResource(dev)


def _legacy_pinned(dev: Device) -> Any:
    return LegacyPinnedMemoryResource(dev)


def _stream(dev: Device) -> Any:
    return dev.create_stream()


def _event(dev: Device) -> Any:
    return dev.create_event()


def _device_set_up(dev: Device) -> Any:
    # What a first use of a device does: its primary context, its default stream and current pool.
    device = Device(dev.ordinal)
    assert device.context is dev.context
    assert device.default_stream is not None
    assert device.memory_info.total > 0
    return DeviceMemoryResource(device)


_SET_UPS: dict[str, Callable[[Device], Any]] = {
    "DeviceMemoryResource(options)": _pool,
    "DeviceMemoryResource(current pool)": _default_pool,
    "PinnedMemoryResource": _pinned_pool,
    "ManagedMemoryResource": _managed,
    "VirtualMemoryResource": _virtual,
    "LegacyPinnedMemoryResource": _legacy_pinned,
    "Device.create_stream": _stream,
    "Device.create_event": _event,
    "device set-up": _device_set_up,
}


@pytest.mark.contract("G6")
@pytest.mark.parametrize("what", list(_SET_UPS))
def test_set_up_in_another_thread_leaves_a_global_capture_alone(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module, what: str
) -> None:
    buf = dev.allocate(64)
    builder = GraphBuilder(stream).begin_building()  # global mode
    try:
        launch(builder, LaunchConfig(block=16), module.get_kernel("fill_u32"), buf, 7, 16)
        made = _in_other_thread(lambda: _SET_UPS[what](dev))
        assert not isinstance(made, BaseException), f"{what} failed during another thread's capture: {made!r}"
        assert builder.status == "active"  # not invalidated
        builder.end_building()
    except BaseException:
        if builder.is_building:
            builder.close()
        raise
    with builder.complete() as graph:
        graph.launch(stream)
        stream.sync()
    out = bytearray(64)
    buf.copy_to(out)
    assert bytes(out) == (7).to_bytes(4, "little") * 16
    _close(made)  # usable: it closes like any other
    builder.close()
    buf.close()
    settle(cuguard_driver)


@pytest.mark.contract("G6")
def test_pool_set_up_runs_relaxed_and_gives_the_thread_its_mode_back(cuguard_driver: Any, dev: Device) -> None:
    with record_calls() as log:
        mr = PinnedMemoryResource(dev)
    names = [c.name for c in log]
    first, create = names.index("cuThreadExchangeStreamCaptureMode"), names.index("cuMemPoolCreate")
    last = len(names) - 1 - names[::-1].index("cuThreadExchangeStreamCaptureMode")
    assert first < create < names.index("cuMemPoolSetAccess") < last  # set-up and access grant, relaxed
    modes = [int(c.args[0]) for c in log if c.name == "cuThreadExchangeStreamCaptureMode"]
    assert modes == [2, 0]  # relaxed, then global (the thread's own mode) back
    mr.close()


@pytest.mark.contract("G6")
def test_the_users_own_allocation_keeps_cudas_rule(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("the refused allocation invalidates the capture; the simulator shows the rule without a GPU")
    builder = GraphBuilder(stream).begin_building()
    refused = _in_other_thread(lambda: dev.allocate(64))
    assert isinstance(refused, CUDAError)
    assert (refused.code, refused.call) == (UNSUPPORTED, "cuMemAlloc")
    assert builder.status == "invalidated"  # CUDA's rule, as asked: cuguard does not relax the user's work
    with pytest.raises(CUDAError):
        builder.end_building()
    builder.close()


@pytest.mark.contract("G6", "G1")
def test_the_users_own_instantiate_keeps_cudas_rule(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    # cuGraphInstantiate is a potentially unsafe call: an H200 refuses it in a thread whose global
    # capture prohibits them (differential scenario capture_instantiate_by_mode), and in relaxed mode
    # it is allowed. An instantiate is the user's own work: cuguard keeps CUDA's rule for it.
    from cuguard.graphs import GraphDefinition, capture_mode

    g = GraphDefinition(dev)
    g.empty()
    builder = GraphBuilder(stream).begin_building()
    with record_calls() as log, pytest.raises(CUDAError) as info:
        g.instantiate()
    assert (info.value.code, info.value.call) == (UNSUPPORTED, "cuGraphInstantiate")
    assert [c.name for c in log if c.name.startswith("cuGraphInstantiate")] == ["cuGraphInstantiate"]
    assert builder.status == "invalidated"
    with pytest.raises(CUDAError):
        builder.end_building()
    builder.close()
    builder = GraphBuilder(stream, mode="relaxed").begin_building()
    with capture_mode("relaxed"):
        graph = g.instantiate()  # the thread asked for relaxed mode: allowed, the capture goes on
    assert builder.status == "active"
    builder.end_building()
    builder.close()
    graph.close()
    g.close()


# --- E5: fault attribution and capture ---------------------------------------------------------------------


@pytest.mark.contract("E5", "G6")
def test_attributed_launches_into_a_capture_are_not_waited_for(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module
) -> None:
    buf = dev.allocate(64)
    with attribute_faults(), record_calls() as log:
        builder = GraphBuilder(stream).begin_building()
        launch(builder, LaunchConfig(block=16), module.get_kernel("fill_u32"), buf, 9, 16)
        assert builder.status == "active"  # no synchronization reached the capturing stream
        builder.end_building()
        with builder.complete() as graph:
            graph.launch(stream)  # attributed here: waited for
    synced = [int(c.args[0]) for c in log if c.name == "cuStreamSynchronize"]
    assert synced == [int(stream.handle)]
    out = bytearray(64)
    buf.copy_to(out)
    assert bytes(out) == (9).to_bytes(4, "little") * 16
    builder.close()
    buf.close()
    settle(cuguard_driver)


@pytest.mark.contract("E5", "G6")
def test_a_fault_in_captured_work_is_attributed_to_the_graph_launch(
    cuguard_driver: Any, sim: SimulatedDriver, dev: Device, stream: Stream, module: Module
) -> None:
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("a sticky fault ends the process's use of the driver: scripts/gpu-sticky.py covers the GPU")
    sim.register_kernel("add_u32", lambda s, address, value, n: s.write(int(address) + (1 << 40), b"x"))
    buf = dev.allocate(64)
    with attribute_faults():
        builder = GraphBuilder(stream).begin_building()
        launch(builder, LaunchConfig(), module.get_kernel("add_u32"), buf, 1, 1)  # faults when it runs
        builder.end_building()
        graph = builder.complete()
        with pytest.raises(StickyCUDAError) as info:
            graph.launch(stream)
    launched = info.value.launch or ""
    assert "executable graph" in launched
    assert hex(int(graph.handle)) in launched
    sim.poison(None)  # a test convenience only, so that what the test made can be released
    graph.close()
    builder.close()
    buf.close()


@pytest.mark.contract("G6", "O6")
def test_a_collected_executable_graph_leaves_the_threads_global_capture_alone(dev: Device, stream: Stream) -> None:
    import gc
    import warnings

    from cuguard.graphs import GraphDefinition

    definition = GraphDefinition(dev)
    definition.empty()
    graph = definition.instantiate()
    handle = int(graph.handle)
    cycle: list[Any] = [graph]
    cycle.append(cycle)
    del graph
    builder = GraphBuilder(stream).begin_building()  # global mode, this thread
    try:
        with record_calls() as log, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del cycle
            gc.collect()  # an H200 refuses cuGraphExecDestroy here in global mode and breaks the capture
        destroys = [c for c in log if c.name == "cuGraphExecDestroy"]
        assert [c.status for c in destroys] == [0]
        assert int(destroys[0].args[0]) == handle
        assert [str(w.message) for w in caught] == []
        assert builder.status == "active"
        builder.end_building()
    finally:
        builder.close()
        definition.close()


@pytest.mark.contract("G6", "G1")
@pytest.mark.parametrize("how", ["close", "with"])
def test_closing_an_executable_graph_leaves_the_threads_global_capture_alone(
    dev: Device, stream: Stream, how: str
) -> None:
    from cuguard.graphs import GraphDefinition

    definition = GraphDefinition(dev)
    definition.empty()
    graph = definition.instantiate()
    builder = GraphBuilder(stream).begin_building()  # global mode, this thread
    try:
        with record_calls() as log:
            if how == "close":
                graph.close()
            else:
                with graph:
                    pass
        destroys = [c for c in log if c.name == "cuGraphExecDestroy"]
        assert [c.status for c in destroys] == [0]  # the driver would refuse it in global mode (as on an H200)
        assert builder.status == "active"
        builder.end_building()
    finally:
        builder.close()
        definition.close()


@pytest.mark.contract("G1", "E1")
def test_a_refused_mode_switch_leaves_the_executable_graph_open(dev: Device) -> None:
    from cuguard.graphs import GraphDefinition
    from cuguard.testing import inject

    definition = GraphDefinition(dev)
    definition.empty()
    graph = definition.instantiate()
    with inject("cuThreadExchangeStreamCaptureMode", 2, nth=1), pytest.raises(CUDAError) as info:
        graph.close()
    assert info.value.call == "cuThreadExchangeStreamCaptureMode"
    assert not graph.closed  # nothing was destroyed: still usable
    with dev.create_stream() as stream:
        graph.launch(stream)
        stream.sync()
    graph.close()
    definition.close()
