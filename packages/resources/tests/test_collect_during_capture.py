"""Collecting memory while a stream is captured leaves the capture alone (O6, W1, W5).

A free's potentially unsafe calls (``cuMemFree``, ``cuMemFreeHost``) would fail
in a thread whose capture mode a capture in progress prohibits, and invalidate
that capture: the user's live capture, which a collection must not disturb. A
collection makes them with the thread in relaxed capture mode, restoring the
thread's own mode after. ``cuCtxSynchronize`` (before freeing memory whose
stream was closed, a pool's buffer without a stream, virtual memory) is refused
during any capture of the context, relaxed mode or not (as on an H200): such a
collection waits until the captures cuguard knows of (``capture_began``, which
``GraphBuilder`` calls) have ended; during a capture begun with the bindings
alone it is refused and the memory leaked with a warning.

Every allocation is made before the capture begins: ``cuMemHostAlloc`` and
``cuMemAllocManaged`` are themselves unsafe calls during a capture of the thread.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cuguard.errors import CUDAWarning, driver
from cuguard.resources import (
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    ManagedMemoryResource,
    PinnedMemoryResource,
    VirtualMemoryResource,
)
from cuguard.resources._captures import capture_began, capture_ended
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
#: The kinds whose free synchronizes the context first (cuCtxSynchronize, refused during a capture of it).
SYNCED = ("buffer-of-a-closed-stream", "pool-buffer", "virtual")


def _mode() -> Any:
    from cuda.bindings.driver import CUstreamCaptureMode

    return CUstreamCaptureMode


def _begin(stream: Any) -> None:
    (err,) = driver.cuStreamBeginCapture(stream.handle, _mode().CU_STREAM_CAPTURE_MODE_GLOBAL)
    assert not err


def _end(stream: Any) -> tuple[int, int]:
    """End the capture whatever became of it: ``(its status before, the end's status)``."""
    err, status = driver.cuStreamIsCapturing(stream.handle)
    assert not err
    err, graph = driver.cuStreamEndCapture(stream.handle)
    if not err:
        (destroyed,) = driver.cuGraphDestroy(graph)
        assert not destroyed
    return int(status), int(err)


def _end_with_a_graph(stream: Any) -> None:
    """The capture is still active and ends with a graph (the collection did not invalidate it)."""
    assert _end(stream) == (1, 0)  # CU_STREAM_CAPTURE_STATUS_ACTIVE, CUDA_SUCCESS


@contextlib.contextmanager
def _counted_capture(device: Device) -> Iterator[Callable[[], list[Any]]]:
    """A capture cuguard counts (``capture_began``, as ``GraphBuilder.begin_building`` does) on a new stream.

    Yields ``end``: it checks the capture went on undisturbed (it ends with a graph), counts it down
    (``capture_ended``: the releases that waited for it run) and returns the driver calls of that.
    """
    stream = device.create_stream(non_blocking=True)
    device.set_current()
    _begin(stream)
    capture_began(stream, {})
    counted = [True]

    def end() -> list[Any]:
        _end_with_a_graph(stream)
        with record_calls() as log:
            counted[0] = False
            capture_ended(stream)
        return log

    try:
        yield end
    finally:
        if counted[0]:
            capture_ended(stream)
    stream.close()


def _handle_of(obj: Any) -> int:
    return int(obj._handle)


def _freed(drv: Any, handle: int) -> bool:
    if not isinstance(drv, SimulatedDriver):
        return True  # the real driver keeps no books; the capture's status above is what is checked
    return all(o.handle != handle for o in drv.live_objects())


@pytest.mark.contract("O6", "W5")
@pytest.mark.parametrize("kind", [kind for kind in MAKERS if kind not in SYNCED])
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


@pytest.mark.contract("O6", "W5")
@pytest.mark.parametrize("kind", SYNCED)
def test_collecting_memory_freed_after_a_context_sync_waits_for_the_captures_cuguard_began(
    cuguard_driver: Any, device: Device, kind: str
) -> None:
    keep: list[Any] = []
    obj = MAKERS[kind](device, keep)
    handle = _handle_of(obj)
    with _counted_capture(device) as end:
        with record_calls() as log:
            del obj
            gc.collect()
        assert "cuCtxSynchronize" not in [c.name for c in log]  # deferred: not asked during the capture
        if isinstance(cuguard_driver, SimulatedDriver):
            assert not _freed(cuguard_driver, handle)
        log = end()  # the last capture of the context: the collection runs now
        names = [c.name for c in log]
        assert "cuCtxSynchronize" in names, names
        assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]
        assert _freed(cuguard_driver, handle)


@pytest.mark.contract("G6", "W5")
def test_a_capture_begun_outside_cuguard_on_a_stream_it_handed_out_defers_memory_that_needs_a_context_sync(
    cuguard_driver: Any, device: Device
) -> None:
    obj = _buffer_of_a_closed_stream(device, [])
    handle = _handle_of(obj)
    stream = device.create_stream(non_blocking=True)
    device.set_current()
    _begin(stream)  # with the bindings alone, on the handle cuguard handed out: cuguard asks that stream
    try:
        with record_calls() as log:
            del obj  # the last reference: collected here, and its release waits
        assert "cuCtxSynchronize" not in [c.name for c in log]
        if isinstance(cuguard_driver, SimulatedDriver):
            assert not _freed(cuguard_driver, handle)
    finally:
        ended = _end(stream)
    assert ended == (1, 0)  # the capture went on undisturbed and ended with a graph
    with record_calls() as log:
        stream.sync()  # the next synchronization finds the capture over: the release is carried out
    assert "cuCtxSynchronize" in [c.name for c in log]
    assert _freed(cuguard_driver, handle)
    stream.close()


@pytest.mark.contract("W1", "W5")
def test_a_capture_on_a_stream_cuguard_never_saw_leaks_memory_that_needs_a_context_sync(
    cuguard_driver: Any, device: Device
) -> None:
    obj = _buffer_of_a_closed_stream(device, [])
    handle = _handle_of(obj)
    device.set_current()
    err, raw = driver.cuStreamCreate(1)  # made and captured with the bindings alone: cuguard cannot ask it
    assert not err
    try:
        (err,) = driver.cuStreamBeginCapture(raw, _mode().CU_STREAM_CAPTURE_MODE_GLOBAL)
        assert not err
        with pytest.warns(CUDAWarning) as record:
            del obj  # the last reference: collected here
        err, status = driver.cuStreamIsCapturing(raw)
        assert not err
        err, graph = driver.cuStreamEndCapture(raw)
        if not err:
            driver.cuGraphDestroy(graph)
        ended = (int(status), int(err))
    finally:
        driver.cuStreamDestroy(raw)
    messages = [str(w.message) for w in record if issubclass(w.category, CUDAWarning)]
    assert any("cuCtxSynchronize" in m and "leaked" in m for m in messages), messages
    # The driver refuses cuCtxSynchronize during the capture and invalidates it (as on an H200).
    assert ended == (2, 901)  # CU_STREAM_CAPTURE_STATUS_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not _freed(cuguard_driver, handle)  # leaked on purpose (W5), reported above


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


@pytest.mark.contract("W5", "G6")
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned-pool", "device-pool"])
def test_a_pool_closed_while_its_last_buffer_waits_for_a_capture_is_destroyed_after_it(
    cuguard_driver: Any, device: Device, pinned: bool
) -> None:
    # A buffer closed during a capture of its context waits (its free synchronizes the context);
    # it is not leaked, so closing its pool meanwhile only marks the pool for destruction, and the
    # pool goes right after the buffer's free. Before, the waiting buffer counted as leaked and the
    # pool was leaked with it for good (found by the misuse sweep, random engine, seed 11).
    mr = PinnedMemoryResource(device) if pinned else DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    buf = mr.allocate(64)  # no stream: freed after a context synchronization
    pool = int(mr.handle)
    with _counted_capture(device) as end:
        buf.close()
        assert mr.leaked == 0  # waiting, not leaked
        with record_calls() as log:
            mr.close()
        assert "cuMemPoolDestroy" not in [c.name for c in log]  # a buffer is still allocated
        log = end()
        names = [c.name for c in log]
        assert names.index("cuMemPoolDestroy") > names.index("cuCtxSynchronize"), names
        assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]
        if isinstance(cuguard_driver, SimulatedDriver):
            assert not [o for o in cuguard_driver.live_objects() if o.handle == pool]


@pytest.mark.contract("G6", "W5")
def test_virtual_memory_closed_on_a_stream_waits_for_a_capture_elsewhere_in_its_context(
    cuguard_driver: Any, device: Device
) -> None:
    # Its free synchronizes the context whatever stream close() names: a capture on any stream of
    # the context is in the way, not only one on that stream. Before, naming a stream that did not
    # capture freed at once, and the synchronization broke the capture (misuse sweep, seed 23).
    vmm = VirtualMemoryResource(device)
    buf = vmm.allocate(64)
    handle = _handle_of(buf)
    other = device.create_stream(non_blocking=True)
    with _counted_capture(device) as end:
        with record_calls() as log:
            buf.close(stream=other)
        assert "cuCtxSynchronize" not in [c.name for c in log]  # waits: the capture goes on
        if isinstance(cuguard_driver, SimulatedDriver):
            assert not _freed(cuguard_driver, handle)
        assert [c.status for c in end() if c.name == "cuCtxSynchronize"] == [0]
        assert _freed(cuguard_driver, handle)
    other.close()
