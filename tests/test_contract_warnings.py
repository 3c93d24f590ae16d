"""W1-W7 across layers: failures nothing can raise (collection, deferred graph cleanup, callbacks)."""

from __future__ import annotations

import contextlib
import gc
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from cuguard.errors import CUDAWarning, StickyCUDAError, StickyFaultWarning, format_handle
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Kernel, LaunchConfig, Stream
from cuguard.testing import SimulatedDriver, deinitialized, inject, sticky

OUT_OF_MEMORY = 2


@contextmanager
def caught_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning of the block, from any thread (cuguard reports deferred releases on its release thread)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def cuda_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)]


@contextmanager
def unraisables() -> Iterator[list[Any]]:
    seen: list[Any] = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        yield seen
    finally:
        sys.unraisablehook = old


@pytest.mark.contract("W1")
def test_W1_a_failed_release_after_a_graph_is_dropped_is_a_CUDAWarning(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig, settled: Callable[[], None]
) -> None:
    buf = dev.allocate(64)
    handle = buf.ptr
    g = GraphDefinition(dev)
    g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 1, 64)
    graph = g.instantiate()
    graph.launch(stream)
    stream.sync()
    del buf  # only the graph's payload keeps the buffer now
    with caught_warnings() as caught, inject("cuMemFree", OUT_OF_MEMORY, every=True):
        g.close()
        graph.close()  # CUDA drops the user object: the payload is released on cuguard's release thread
        settled()
    messages = cuda_warnings(caught)
    assert len(messages) == 1, messages
    text = messages[0]
    assert "cuMemFree" in text
    assert format_handle(handle) in text
    assert "CUDA_ERROR_OUT_OF_MEMORY" in text
    assert "out of memory" in text


@pytest.mark.contract("W2")
def test_W2_independent_failures_give_independent_warnings(dev: Device, settled: Callable[[], None]) -> None:
    stream = dev.create_stream()
    buffers = [dev.allocate(64) for _ in range(3)]
    g = GraphDefinition(dev)
    for buf in buffers:
        g.memset(buf, 1)
    handles = {format_handle(b.ptr) for b in buffers}
    del buf, buffers
    with (
        caught_warnings() as caught,
        inject("cuMemFree", OUT_OF_MEMORY, every=True),
        inject("cuStreamDestroy", OUT_OF_MEMORY),
    ):
        del stream
        g.close()
        settled()
    messages = cuda_warnings(caught)
    assert len(messages) == 4, messages  # three buffers and the stream, each with its handle
    assert {h for h in handles if any(h in m for m in messages)} == handles
    assert sum("cuStreamDestroy" in m for m in messages) == 1


@pytest.mark.contract("W3")
def test_W3_escalated_warnings_reach_the_unraisable_hook_not_user_code(
    dev: Device, stream: Stream, settled: Callable[[], None]
) -> None:
    victim = dev.create_stream()
    held = [victim, dev.allocate(64)]
    del victim
    with warnings.catch_warnings(), unraisables() as seen, inject("cuStreamDestroy", OUT_OF_MEMORY):
        warnings.filterwarnings("error", category=CUDAWarning)
        stream.launch_host_func(held.clear)  # the host function drops the last references
        stream.sync()
        settled()  # the release happens on cuguard's release thread, where the warning is escalated
        user_code_ran = True  # nothing surfaced here
    assert user_code_ran
    escalated = [u for u in seen if isinstance(u.exc_value, CUDAWarning)]
    assert len(escalated) == 1, [repr(u.exc_value) for u in seen]
    assert "cuStreamDestroy" in str(escalated[0].exc_value)


@pytest.mark.contract("W4")
def test_W4_DEINITIALIZED_is_never_reported(
    dev: Device, kernels: dict[str, Kernel], config: LaunchConfig, settled: Callable[[], None]
) -> None:
    stream = dev.create_stream()
    buf = dev.allocate(64, stream=stream)
    g = GraphDefinition(dev)
    g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 1, 64)
    graph = g.instantiate()
    graph.launch(stream)
    event = stream.record()
    pinned = dev.allocate_pinned(64)
    g2 = GraphDefinition(dev)
    g2.empty()
    with caught_warnings() as caught, deinitialized():
        del buf, event, pinned, stream, graph, g  # implicit releases: nothing may be reported
        gc.collect()
        with pytest.raises(ValueError, match="body") as info, g2:
            raise ValueError("body failed")  # closing g2 on the way out fails: DEINITIALIZED is not a note
        settled()
    assert cuda_warnings(caught) == []
    assert not any("DEINITIALIZED" in note for note in getattr(info.value, "__notes__", []))


@pytest.mark.contract("W5")
def test_W5_a_graph_keeps_its_memory_until_CUDA_drops_it_and_failed_releases_leak(
    *,
    cuguard_driver: Any,
    dev: Device,
    stream: Stream,
    kernels: dict[str, Kernel],
    config: LaunchConfig,
    settled: Callable[[], None],
) -> None:
    sim = cuguard_driver if isinstance(cuguard_driver, SimulatedDriver) else None
    out = dev.allocate_pinned(64)
    ordered_stream = dev.create_stream()
    buf = dev.allocate(64, stream=ordered_stream)  # freed on its own stream, whatever is current
    g = GraphDefinition(dev)
    g.memset(buf, 3).launch(config, kernels["add_u8"], buf, 4, 64).memcpy(out, buf)
    graph = g.instantiate()
    del buf  # dropped by the user: the definition and the executable graph keep it
    g.close()
    stream.wait(ordered_stream)  # the allocation was queued there: the graph's work comes after it
    graph.launch(stream)
    graph.close()  # closed with the launch possibly in flight: the buffer lives until CUDA drops the graph
    settled()
    stream.sync()
    settled()
    assert bytes(out.numpy()) == bytes([7]) * 64
    if sim is not None:
        assert not sim.dangling, sim.dangling
    # a release that fails leaks the memory (reported), never frees it later or twice
    leaked = dev.allocate(64)
    handle = leaked.ptr
    with caught_warnings() as caught, inject("cuMemFree", OUT_OF_MEMORY):
        del leaked
        gc.collect()
    assert any(format_handle(handle) in m and "leaked" in m for m in cuda_warnings(caught))
    if sim is not None:
        assert any(o.handle == handle for o in sim.live_objects())
        assert not sim.double_release
    ordered_stream.close()
    out.close()


@pytest.mark.contract("W5")
def test_W5_closing_memory_an_executable_graph_uses_never_frees_it_under_the_graph(
    cuguard_driver: Any, dev: Device, stream: Stream, settled: Callable[[], None]
) -> None:
    out = dev.allocate_pinned(64)
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    g.memset(buf, 5).memcpy(out, buf)
    graph = g.instantiate()
    g.close()
    with contextlib.suppress(BufferError, RuntimeError, ValueError):  # refusing is as good as deferring the free
        buf.close()  # the executable graph still uses the memory: it must not be freed under it
    graph.launch(stream)
    stream.sync()
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling, cuguard_driver.dangling
    assert bytes(out.numpy()) == bytes([5]) * 64
    graph.close()
    settled()
    out.close()


@pytest.mark.contract("W6")
def test_W6_exceptions_of_host_callbacks_go_to_the_unraisable_hook_and_work_carries_on(
    dev: Device, stream: Stream, read: Callable[[Any], bytes], settled: Callable[[], None]
) -> None:
    buf = dev.allocate(64)

    def failing() -> None:
        raise KeyError("raised by a user callback")

    g = GraphDefinition(dev)
    g.callback(failing).memset(buf, 9)
    with unraisables() as seen:
        stream.launch_host_func(failing)
        buf.fill(1, stream)
        with g.instantiate() as graph:
            graph.launch(stream)
            graph.launch(stream)
        stream.sync()
        settled()
    assert [type(u.exc_value) for u in seen] == [KeyError, KeyError, KeyError]
    assert read(buf) == bytes([9]) * 64  # the stream and the graph carried on after each callback
    g.close()
    buf.close()


@pytest.mark.contract("W7")
def test_W7_sixty_objects_dropped_after_a_sticky_fault_give_one_warning_and_one_summary(
    dev: Device, settled: Callable[[], None]
) -> None:
    streams = [dev.create_stream() for _ in range(20)]
    objects: list[Any] = [*streams, *(dev.create_event() for _ in range(20))]
    objects += [dev.allocate(64, stream=s) for s in streams]
    g = GraphDefinition(dev)
    g.empty()
    objects.append(g.instantiate())
    last = dev.create_stream()
    del streams
    with caught_warnings() as caught, sticky(700):  # the driver refuses all work, as after a kernel fault
        with pytest.raises(StickyCUDAError):
            last.close()  # an explicit close still raises (S3) ...
        assert caught == []  # ... and warns nothing
        del objects, g
        settled()
    first, summary = (w.message for w in caught if issubclass(w.category, CUDAWarning))
    assert isinstance(first, StickyFaultWarning)
    assert isinstance(summary, StickyFaultWarning)
    assert not first.summary
    assert first.first_fault in str(first)  # the first refused release is the first fault here
    assert first.context == summary.context == repr(dev.context)
    assert summary.summary
    assert summary.leaked == 60  # 20 streams, 20 events, 20 buffers and an executable graph: one warned
