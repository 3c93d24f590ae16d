"""Collecting memory while a stream is captured leaves the capture alone (O6, W1, W5).

A free's potentially unsafe calls (``cuMemFree``, ``cuMemFreeHost``, and the
``cuCtxSynchronize`` before freeing memory whose stream was closed) would fail
in a thread whose capture mode a capture in progress prohibits, and invalidate
that capture: the user's live capture, which a collection must not disturb. A
collection makes them with the thread in relaxed capture mode, restoring the
thread's own mode after.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.errors import CUDAWarning, driver
from cuguard.resources import (
    Device,
    DeviceMemoryResource,
    ManagedMemoryResource,
    VirtualMemoryResource,
)
from cuguard.testing import SimulatedDriver, inject, record_calls


def _sync_buffer(device: Device, keep: list[Any]) -> Any:
    return device.allocate(64)


def _buffer_of_a_closed_stream(device: Device, keep: list[Any]) -> Any:
    stream = device.create_stream()
    buf = device.allocate(64, stream)
    stream.close()  # the free must now wait for the context: cuCtxSynchronize, then cuMemFree
    return buf


def _pinned_buffer(device: Device, keep: list[Any]) -> Any:
    return device.allocate_pinned(64)


def _pool_buffer(device: Device, keep: list[Any]) -> Any:
    mr = DeviceMemoryResource(device)
    keep.append(mr)
    return mr.allocate(64)  # no stream: freed after synchronizing the context


def _managed_buffer(device: Device, keep: list[Any]) -> Any:
    mr = ManagedMemoryResource(device)
    keep.append(mr)
    return mr.allocate(64)


def _virtual_buffer(device: Device, keep: list[Any]) -> Any:
    mr = VirtualMemoryResource(device)
    keep.append(mr)
    return mr.allocate(64)  # freed after synchronizing the context, then unmapped and released


MAKERS: dict[str, Callable[[Device, list[Any]], Any]] = {
    "buffer": _sync_buffer,
    "buffer-of-a-closed-stream": _buffer_of_a_closed_stream,
    "pinned": _pinned_buffer,
    "pool-buffer": _pool_buffer,
    "managed": _managed_buffer,
    "virtual": _virtual_buffer,
}


def _mode() -> Any:
    from cuda.bindings.driver import CUstreamCaptureMode

    return CUstreamCaptureMode


def _begin(stream: Any) -> None:
    (err,) = driver.cuStreamBeginCapture(stream.handle, _mode().CU_STREAM_CAPTURE_MODE_GLOBAL)
    assert not err


def _end_with_a_graph(stream: Any) -> None:
    """The capture is still active and ends with a graph (the collection did not invalidate it)."""
    err, status = driver.cuStreamIsCapturing(stream.handle)
    assert not err
    assert int(status) == 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE
    err, graph = driver.cuStreamEndCapture(stream.handle)
    assert not err
    (err,) = driver.cuGraphDestroy(graph)
    assert not err


def _handle_of(obj: Any) -> int:
    return int(obj._handle)


def _freed(drv: Any, handle: int) -> bool:
    if not isinstance(drv, SimulatedDriver):
        return True  # the real driver keeps no books; the capture's status above is what is checked
    return all(o.handle != handle for o in drv.live_objects())


@pytest.mark.contract("O6", "W5")
@pytest.mark.parametrize("kind", list(MAKERS))
def test_collecting_memory_never_invalidates_a_capture_of_the_thread(
    cuguard_driver: Any, device: Device, kind: str
) -> None:
    keep: list[Any] = []
    obj = MAKERS[kind](device, keep)
    handle = _handle_of(obj)
    stream = device.create_stream(non_blocking=True)
    device.set_current()
    _begin(stream)
    try:
        with record_calls() as log:
            del obj
            gc.collect()
        names = [c.name for c in log]
        assert "cuThreadExchangeStreamCaptureMode" in names  # the free ran in relaxed mode...
        assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]  # ...and nothing was refused
        assert _freed(cuguard_driver, handle)  # freed now, not leaked
    finally:
        _end_with_a_graph(stream)
    err, mode = driver.cuThreadExchangeStreamCaptureMode(_mode().CU_STREAM_CAPTURE_MODE_GLOBAL)
    assert not err
    assert int(mode) == int(_mode().CU_STREAM_CAPTURE_MODE_GLOBAL)  # the thread's own mode came back
    stream.close()


@pytest.mark.contract("O6")
def test_collecting_memory_never_invalidates_a_global_capture_of_another_thread(
    cuguard_driver: Any, device: Device
) -> None:
    stream = device.create_stream(non_blocking=True)
    buf = device.allocate(64)
    handle = _handle_of(buf)
    begun, collected = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def capture() -> None:
        try:
            device.set_current()
            _begin(stream)
            begun.set()
            collected.wait()
            _end_with_a_graph(stream)
        except BaseException as exc:  # noqa: BLE001 - checked by the test's thread
            failures.append(exc)
            begun.set()

    thread = threading.Thread(target=capture)
    thread.start()
    begun.wait()
    try:
        del buf
        gc.collect()  # this thread is in global mode: another thread's global capture prohibits it
    finally:
        collected.set()
        thread.join()
    assert not failures, failures
    assert _freed(cuguard_driver, handle)
    stream.close()


@pytest.mark.contract("W1", "W5")
def test_a_refused_exchange_of_the_capture_mode_leaks_the_collected_memory(cuguard_driver: Any, device: Device) -> None:
    from cuda.bindings.driver import CUresult

    held = [device.allocate(64)]
    handle = _handle_of(held[0])
    code = CUresult.CUDA_ERROR_NOT_PERMITTED
    with (
        inject("cuThreadExchangeStreamCaptureMode", code),
        record_calls() as log,
        pytest.warns(CUDAWarning) as record,
    ):
        held.clear()  # the last reference: collected here
    assert "cuMemFree" not in [c.name for c in log]  # never freed outside relaxed mode
    messages = [str(w.message) for w in record if issubclass(w.category, CUDAWarning)]
    assert any("cuThreadExchangeStreamCaptureMode" in m and "leaked" in m for m in messages), messages
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not _freed(cuguard_driver, handle)  # leaked on purpose (W5), reported above
