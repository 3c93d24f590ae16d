"""Contract tests of the resources layer, on the simulator and (``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError
from cuguard.resources import Buffer, Device, Event, LaunchConfig, Module, Stream, launch
from cuguard.testing import deinitialized, inject, leak_check, record_calls, restore_fault

OUT_OF_MEMORY = 2
INVALID_VALUE = 1
INVALID_CONTEXT = 201
ILLEGAL_ADDRESS = 700


def _current() -> Context | None:
    return Context.current()


# Each creating operation, the driver call that creates, and how to release what it returns.
CREATORS: dict[str, tuple[str, Callable[[Device, Stream], Any]]] = {
    "create_stream": ("cuStreamCreate", lambda d, s: d.create_stream()),
    "create_stream_priority": ("cuStreamCreateWithPriority", lambda d, s: d.create_stream(priority=0)),
    "create_event": ("cuEventCreate", lambda d, s: d.create_event()),
    "allocate": ("cuMemAlloc", lambda d, s: d.allocate(64)),
    "allocate_on_stream": ("cuMemAllocAsync", lambda d, s: d.allocate(64, stream=s)),
    "allocate_pinned": ("cuMemHostAlloc", lambda d, s: d.allocate_pinned(64)),
    "stream_record_new_event": ("cuEventCreate", lambda d, s: s.record()),
}


@pytest.fixture
def stream(device: Device) -> Any:
    s = device.create_stream()
    yield s
    s.close()


@pytest.mark.contract("G1", "G2", "G3")
@pytest.mark.parametrize("caller", ["none", "other", "own"])
@pytest.mark.parametrize("op", sorted(CREATORS))
def test_failed_creation_creates_nothing_and_keeps_context(
    device: Device, stream: Stream, op: str, caller: str, request: pytest.FixtureRequest
) -> None:
    # "own": the device's context is current already, the path with no switch at all (C1).
    call, create = CREATORS[op]
    if caller != "none":
        request.getfixturevalue(f"{caller}_context")
    before = _current()
    with leak_check(), inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        create(device, stream)
    assert info.value.call == call
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert _current() == before
    # G3: the device and stream are still usable.
    with create(device, stream):
        pass
    stream.sync()
    assert _current() == before


@pytest.mark.contract("G1", "G4")
def test_record_failure_releases_the_new_event(device: Device, stream: Stream) -> None:
    with leak_check(), inject("cuEventRecord", INVALID_VALUE), pytest.raises(CUDAError) as info:
        stream.record()
    assert info.value.call == "cuEventRecord"


@pytest.mark.contract("G1", "G4")
def test_failed_rollback_is_a_note(device: Device, stream: Stream) -> None:
    with (
        inject("cuEventRecord", INVALID_VALUE),
        inject("cuEventDestroy", OUT_OF_MEMORY),
        pytest.raises(CUDAError) as info,
    ):
        stream.record()
    assert info.value.call == "cuEventRecord"
    assert any("cuEventDestroy" in note for note in info.value.__notes__)


@pytest.mark.contract("G1", "G2", "G4")
@pytest.mark.parametrize("caller", ["none", "other", "own"])
def test_waiting_on_a_stream_whose_temporary_event_is_refused_queues_nothing(
    device: Device, stream: Stream, caller: str, request: pytest.FixtureRequest
) -> None:
    # stream.wait(other stream) makes, records and releases an event of its own: refused, none is left.
    if caller != "none":
        request.getfixturevalue(f"{caller}_context")
    other = device.create_stream()
    before = _current()
    with leak_check(), record_calls() as log, inject("cuEventCreate", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        stream.wait(other)
    assert info.value.call == "cuEventCreate"
    assert not {"cuEventRecord", "cuStreamWaitEvent"} & {c.name for c in log}
    assert _current() == before
    stream.wait(other)  # G3: both streams are still usable
    other.close()


@pytest.mark.contract("C2", "G4", "S3")
def test_free_refused_and_restore_refused_raises_the_free_with_the_restore_as_its_note(
    device: Device, other_context: Context
) -> None:
    buf = device.allocate(64)
    with (
        inject("cuMemFree", OUT_OF_MEMORY),
        restore_fault(INVALID_CONTEXT),
        pytest.raises(CUDAError) as info,
    ):
        buf.close()
    # The release's own error, not the restore's: it says the memory was leaked (S3).
    assert info.value.call == "cuMemFree"
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert "leaked" in str(info.value)
    notes = info.value.__notes__
    assert len(notes) == 1
    assert "could not be restored" in notes[0]
    assert buf.closed
    with record_calls() as log:
        buf.close()  # idempotent: never freed twice
    assert log == []
    other_context.set_current()


@pytest.mark.contract("C2", "G1")
@pytest.mark.parametrize("op", sorted(set(CREATORS) - {"stream_record_new_event", "allocate_on_stream"}))
def test_failed_restore_destroys_what_was_created(
    device: Device, stream: Stream, other_context: Context, op: str
) -> None:
    _, create = CREATORS[op]
    with leak_check(), restore_fault(INVALID_CONTEXT), pytest.raises(CUDAError, match="could not be restored"):
        create(device, stream)
    # The thread keeps the device's context; set_current() fixes it.
    assert _current() == device.context
    other_context.set_current()


@pytest.mark.contract("C1", "G2")
def test_stream_ordered_allocation_needs_no_switch(device: Device, stream: Stream, other_context: Context) -> None:
    with record_calls() as log:
        buf = device.allocate(64, stream=stream)
    # cuguard made the stream and never handed its handle out: no capture can run on it, nothing is asked.
    assert [c.name for c in log] == ["cuMemAllocAsync"]
    assert Context.current() == other_context
    buf.close()
    stream.handle  # noqa: B018 - handed out: someone else may capture it now
    with record_calls() as log:
        buf = device.allocate(64, stream=stream)
    assert [c.name for c in log] == ["cuStreamIsCapturing", "cuMemAllocAsync"]  # not capturing: no graph memory
    with record_calls() as log:
        buf.close()
    assert [c.name for c in log] == ["cuStreamIsCapturing", "cuMemFreeAsync"]  # the free is not captured (G6)


@pytest.mark.contract("C1", "G2")
def test_device_methods_switch_once_in_and_once_out(device: Device, other_context: Context) -> None:
    with record_calls() as log:
        s = device.create_stream()
    switches = [c.name for c in log if c.name in ("cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent")]
    assert switches == ["cuCtxSetCurrent", "cuCtxSetCurrent"]
    assert _current() == other_context
    device.set_current()
    with record_calls() as log:
        e = device.create_event()
    assert [c.name for c in log if c.name == "cuCtxSetCurrent"] == []
    e.close()
    s.close()


@pytest.mark.contract("G2")
def test_device_methods_leave_no_context_current(device: Device) -> None:
    assert _current() is None
    with device.create_stream() as s, device.create_event() as e:
        buf = device.allocate(16)
        buf.fill(7)
        e.record(s)
        e.sync()
        device.sync()
        buf.close()
    assert _current() is None


@pytest.mark.contract("G2")
def test_only_set_current_changes_the_context(device: Device) -> None:
    previous = device.set_current()
    assert previous is None
    assert _current() == device.context


@pytest.mark.contract("S3", "E3")
def test_close_is_idempotent_and_closed_use_is_refused(device: Device) -> None:
    s = device.create_stream()
    s.close()
    s.close()
    with record_calls() as log:
        with pytest.raises(ResourceClosedError, match="Stream"):
            s.sync()
        with pytest.raises(ResourceClosedError):
            _ = s.handle
    assert log == []
    assert isinstance(ResourceClosedError("x"), RuntimeError)


@pytest.mark.contract("S3", "W5", "S2")
def test_failed_close_raises_once_and_leaks(device: Device) -> None:
    e = device.create_event()
    with inject("cuEventDestroy", INVALID_VALUE), pytest.raises(CUDAError, match="leaked"):
        e.close()
    with record_calls() as log:
        e.close()  # never released twice
    assert log == []


@pytest.mark.contract("W1", "W2")
def test_garbage_collected_release_failure_warns(device: Device) -> None:
    a = device.create_stream()
    b = device.create_stream()
    handles = {hex(int(a.handle)), hex(int(b.handle))}
    with inject("cuStreamDestroy", INVALID_CONTEXT, every=True), pytest.warns(CUDAWarning) as record:
        del a, b
    messages = {str(w.message) for w in record if issubclass(w.category, CUDAWarning)}
    assert len(messages) == 2
    for handle in handles:
        assert any(f"cuStreamDestroy({handle}) failed: CUDA_ERROR_INVALID_CONTEXT" in m for m in messages)


@pytest.mark.contract("W4")
def test_deinitialized_release_is_silent(device: Device, recwarn: pytest.WarningsRecorder) -> None:
    s = device.create_stream()
    with deinitialized():
        del s
        gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, CUDAWarning)]


@pytest.mark.contract("W3")
def test_escalated_warning_from_collection_reaches_unraisablehook(device: Device) -> None:
    import warnings

    seen: list[Any] = []
    s = device.create_stream()
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", category=CUDAWarning)
            with inject("cuStreamDestroy", INVALID_CONTEXT):
                del s
                gc.collect()
    finally:
        sys.unraisablehook = old
    assert len(seen) == 1
    assert isinstance(seen[0].exc_value, CUDAWarning)


@pytest.mark.contract("W5")
def test_stream_ordered_buffer_is_freed_on_its_stream(device: Device, stream: Stream) -> None:
    buf = device.allocate(128, stream=stream)
    assert buf.stream is stream
    with record_calls() as log:
        buf.close()
    frees = [c for c in log if c.name.startswith("cuMemFree")]
    assert [c.name for c in frees] == ["cuMemFreeAsync"]
    assert int(frees[0].args[1]) == int(stream.handle)


@pytest.mark.contract("W5")
def test_buffer_outliving_its_stream_is_freed_after_a_sync(device: Device) -> None:
    s = device.create_stream()
    buf = device.allocate(128, stream=s)
    s.close()
    with record_calls() as log:
        buf.close()
    names = [c.name for c in log]
    assert names.index("cuCtxSynchronize") < names.index("cuMemFree")


def test_memory_round_trip(device: Device, stream: Stream) -> None:
    data = np.arange(256, dtype=np.uint8)
    out = np.zeros_like(data)
    with device.allocate(256) as a, device.allocate(256, stream=stream) as b:
        a.copy_from(data)
        b.copy_from(a, stream=stream)
        b.copy_to(out, stream=stream)
        stream.sync()
        assert (out == data).all()
        a.fill(9)
        a.copy_to(out)
        assert (out == 9).all()
        with pytest.raises(ValueError, match="size mismatch"):
            a.copy_from(np.zeros(3, dtype=np.uint8))
        iface = a.__cuda_array_interface__
        assert iface["data"][0] == a.ptr
        assert iface["shape"] == (256,)


def test_pinned_buffer_numpy_view_keeps_it_alive(device: Device) -> None:
    pinned = device.allocate_pinned(64)
    view = pinned.numpy()
    view[:] = 5
    with pytest.raises(BufferError):
        pinned.close()
    del pinned
    gc.collect()
    assert int(view.sum()) == 5 * 64  # still valid memory
    with device.allocate(64) as buf:
        buf.copy_from(view)
        back = np.zeros(64, dtype=np.uint8)
        buf.copy_to(back)
        assert (back == 5).all()
    del view
    gc.collect()


def test_events_and_waits(device: Device, stream: Stream) -> None:
    other = device.create_stream(non_blocking=True)
    start = stream.record()
    end = stream.record()
    end.sync()
    assert end.elapsed_since(start) >= 0.0
    other.wait(end)
    other.wait(stream)
    other.sync()
    assert other.query()
    assert other.flags == 1
    with device.create_event(timing=False) as quiet:
        assert quiet.query()  # never recorded: done
        quiet.record(stream)
        quiet.sync()
        with pytest.raises(CUDAError) as info:
            quiet.elapsed_since(start)
        assert info.value.name == "CUDA_ERROR_INVALID_HANDLE"
    for obj in (start, end, other):
        obj.close()


def test_foreign_stream_is_not_destroyed(device: Device, stream: Stream) -> None:
    wrapped = Stream.wrap(stream, device.context)
    assert wrapped.__cuda_stream__() == stream.__cuda_stream__()
    with record_calls() as log:
        wrapped.close()
    assert log == []
    stream.sync()


@pytest.mark.contract("W6")
def test_host_callback_exception_goes_to_unraisablehook(device: Device, stream: Stream) -> None:
    seen: list[Any] = []
    ran: list[str] = []
    threads: list[int] = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:

        def boom() -> None:
            threads.append(threading.get_ident())
            raise ValueError("user callback failed")

        stream.launch_host_func(boom)
        stream.launch_host_func(lambda: ran.append("after"))
        stream.sync()
    finally:
        sys.unraisablehook = old
    assert ran == ["after"]
    assert len(seen) == 1
    assert isinstance(seen[0].exc_value, ValueError)
    assert threads != [threading.get_ident()]  # ran on a driver thread


@pytest.mark.contract("E1")
def test_module_errors_name_what_failed(device: Device, module: Module) -> None:
    with pytest.raises(CUDAError) as info:
        module.get_kernel("no_such_kernel")
    assert info.value.name == "CUDA_ERROR_NOT_FOUND"
    assert "no_such_kernel" in str(info.value)
    with leak_check(), pytest.raises(CUDAError) as bad:
        device.load_module(b"\x7fnot an image at all")
    assert bad.value.name == "CUDA_ERROR_INVALID_IMAGE"


def test_kernel_launch_writes_memory(device: Device, module: Module, stream: Stream) -> None:
    kernel = module.get_kernel("fill_u32")
    n = 64
    with device.allocate(4 * n) as buf:
        launch(stream, LaunchConfig(grid=1, block=n), kernel, buf, np.uint32(0xABCD), n)
        out = np.zeros(n, dtype=np.uint32)
        stream.sync()
        buf.copy_to(out)
    assert (out == 0xABCD).all()
    launch(stream, LaunchConfig(), module.get_kernel("empty"))
    stream.sync()
    with pytest.raises(TypeError):
        launch(stream, LaunchConfig(), kernel, object())
    with pytest.raises(ValueError, match="1 or more"):
        LaunchConfig(grid=0)


@pytest.mark.contract("G1", "G3")
@pytest.mark.parametrize(
    ("call", "action"),
    [
        ("cuStreamSynchronize", lambda d, s: s.sync()),
        ("cuStreamQuery", lambda d, s: s.query()),
        ("cuCtxSynchronize", lambda d, s: d.sync()),
        ("cuMemsetD8", lambda d, s: d.allocate(8).fill(1)),
    ],
)
def test_failed_operations_leave_objects_usable(device: Device, stream: Stream, call: str, action: Any) -> None:
    before = _current()
    with inject(call, INVALID_VALUE), pytest.raises(CUDAError) as info:
        action(device, stream)
    gc.collect()
    assert info.value.call == call
    assert _current() == before
    stream.sync()
    device.sync()


@pytest.mark.contract("E4")
def test_sticky_errors_raise_with_is_sticky(device: Device, stream: Stream) -> None:
    with device.create_event() as e, inject("cuStreamSynchronize", ILLEGAL_ADDRESS):
        with pytest.raises(CUDAError) as info:
            stream.sync()
        assert info.value.is_sticky
        e.record(stream)


def test_device_facts(device: Device) -> None:
    assert Device.count() >= 1
    assert device.name
    major, _minor = device.compute_capability
    assert major >= 5
    assert device == Device(0)
    with pytest.raises(TypeError):
        Device("0")  # type: ignore[arg-type]
    with pytest.raises(CUDAError):
        Device(Device.count())
    assert isinstance(device.create_event(), Event)
    assert isinstance(device.allocate(8), Buffer)
