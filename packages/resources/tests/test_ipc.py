"""IPC: shareable memory pools, buffer and event descriptors between two processes; on the simulator
(whose shareable pools live in memory files the other process maps) and (``--cuguard-driver=real``) a GPU.

The two-process tests spawn a second Python process (``multiprocessing``, start method ``spawn``)
that installs the same kind of driver as this one: a simulated driver of its own, or the real one.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError
from cuguard.resources import (
    Buffer,
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    Event,
    IPCAllocationHandle,
    IPCBufferDescriptor,
    IPCEventDescriptor,
)
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls

SIZE = 1 << 16
PATTERN = bytes(i % 251 for i in range(SIZE))
INVALID_VALUE = 1
INVALID_CONTEXT = 201
JOIN_TIMEOUT = 120


@pytest.fixture
def stream(device: Device) -> Any:
    with device.create_stream() as st:
        yield st


@pytest.fixture
def ipc_mr(device: Device) -> Any:
    with DeviceMemoryResource(device, DeviceMemoryResourceOptions(ipc_enabled=True)) as mr:
        yield mr


@pytest.fixture
def shared_mr(ipc_mr: DeviceMemoryResource) -> DeviceMemoryResource:
    """The IPC-enabled pool, shared once (the driver exports pointers of shared pools only)."""
    ipc_mr.get_allocation_handle().close()
    return ipc_mr


def _sim_only(driver: Any) -> None:
    if not isinstance(driver, SimulatedDriver):
        pytest.skip("imports in the exporting process itself: simulator only (the driver's IPC joins two processes)")


# --- the other process ------------------------------------------------------------------------


def _in_driver(simulated: bool, body: Any, *args: Any) -> Any:
    """Run ``body(*args)`` on the same kind of driver as the parent (a simulator of its own, or the real one)."""
    if simulated:
        from cuguard.testing import simulated_driver

        with simulated_driver(devices=1):
            return body(*args)
    return body(*args)


def _importer_body(conn: Any, handle: IPCAllocationHandle, desc: Any, edesc: Any) -> None:
    dev = Device(0)
    with handle:
        imr = DeviceMemoryResource.from_allocation_handle(dev, handle)
    ready = Event.from_ipc_descriptor(edesc, dev)
    with dev.create_stream() as st:
        st.wait(ready)  # the exporter's writes are done
        ibuf = Buffer.from_ipc_descriptor(imr, desc, st)
        seen = bytearray(ibuf.size)
        ibuf.copy_to(seen, st)
        st.sync()
        ibuf.fill(0x5A, st)  # the exporter sees this write
        st.sync()
        held = imr.held
        ibuf.close()  # before the exporter frees its buffer (the ownership rule)
        st.sync()
    conn.send((bytes(seen), held, imr.held, imr.leaked))
    imr.close()
    ready.close()


def _importer(conn: Any, simulated: bool, handle: IPCAllocationHandle, desc: Any, edesc: Any) -> None:
    try:
        _in_driver(simulated, _importer_body, conn, handle, desc, edesc)
    except BaseException as exc:
        conn.send(("error", repr(exc)))
        raise
    finally:
        conn.close()


def _exporter_body(conn: Any) -> None:
    dev = Device(0)
    mr = DeviceMemoryResource(dev, DeviceMemoryResourceOptions(ipc_enabled=True))
    buf = mr.allocate(SIZE)
    buf.copy_from(PATTERN)
    with mr.get_allocation_handle() as handle:
        conn.send((handle, buf.get_ipc_descriptor()))
    conn.recv()  # the parent imported what it needs: go away without freeing anything
    conn.send("exiting")


def _exporter(conn: Any, simulated: bool) -> None:
    try:
        _in_driver(simulated, _exporter_body, conn)
    except BaseException as exc:
        conn.send(("error", repr(exc)))
        raise
    finally:
        conn.close()


def _recv(conn: Any, proc: Any) -> Any:
    if not conn.poll(JOIN_TIMEOUT):
        proc.kill()
        pytest.fail("the other process sent nothing in time")
    message = conn.recv()
    if isinstance(message, tuple) and message and message[0] == "error":
        pytest.fail(f"the other process failed: {message[1]}")
    return message


# --- two processes --------------------------------------------------------------------------


@pytest.mark.contract("O1", "W5")
def test_ipc_round_trip_between_two_processes(
    cuguard_driver: Any, device: Device, ipc_mr: DeviceMemoryResource, stream: Any
) -> None:
    """The exporter shares a pool, a buffer and an event; the importer reads, writes, and frees its side first."""
    simulated = isinstance(cuguard_driver, SimulatedDriver)
    buf = ipc_mr.allocate(SIZE, stream)
    buf.copy_from(PATTERN, stream)
    ready = device.create_event(ipc_enabled=True)
    stream.record(ready)
    handle = ipc_mr.get_allocation_handle()
    spawn = multiprocessing.get_context("spawn")
    here, there = spawn.Pipe()
    proc = spawn.Process(
        target=_importer,
        args=(there, simulated, handle, buf.get_ipc_descriptor(), ready.get_ipc_descriptor()),
    )
    proc.start()
    there.close()
    handle.close()  # the child has its own copy of the descriptor
    seen, held, held_after, leaked = _recv(here, proc)
    proc.join(JOIN_TIMEOUT)
    assert proc.exitcode == 0
    assert seen == PATTERN
    assert (held, held_after, leaked) == (SIZE, 0, 0)
    out = bytearray(SIZE)
    buf.copy_to(out, stream)
    stream.sync()
    assert bytes(out) == b"\x5a" * SIZE  # what the importer wrote
    buf.close()
    ready.close()
    assert ipc_mr.held == 0
    assert ipc_mr.leaked == 0


@pytest.mark.contract("W5", "S3")
def test_imported_buffer_closed_after_its_exporter_went_away(cuguard_driver: Any, device: Device) -> None:
    """Never a crash: the close frees the mapping, or is refused, raises and leaks it (counted)."""
    simulated = isinstance(cuguard_driver, SimulatedDriver)
    spawn = multiprocessing.get_context("spawn")
    here, there = spawn.Pipe()
    proc = spawn.Process(target=_exporter, args=(there, simulated))
    proc.start()
    there.close()
    handle, desc = _recv(here, proc)
    with handle:
        imr = DeviceMemoryResource.from_allocation_handle(device, handle)
    ibuf = Buffer.from_ipc_descriptor(imr, desc)
    seen = bytearray(SIZE)
    ibuf.copy_to(seen)
    assert bytes(seen) == PATTERN
    here.send("go")
    assert _recv(here, proc) == "exiting"
    proc.join(JOIN_TIMEOUT)
    assert proc.exitcode == 0
    refusal: CUDAError | None = None
    try:
        ibuf.close()
    except CUDAError as exc:
        refusal = exc
    if refusal is not None:
        assert "leaked" in str(refusal)
        assert imr.leaked == SIZE
    else:
        assert imr.leaked == 0
    assert ibuf.closed
    assert imr.held == 0
    imr.close()


# --- one process: refusals, handles, descriptors ----------------------------------------------


@pytest.mark.contract("E3")
def test_ipc_refusals_come_before_the_driver(device: Device, ipc_mr: DeviceMemoryResource, stream: Any) -> None:
    plain_mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions())
    plain = plain_mr.allocate(64, stream)
    shared = ipc_mr.allocate(64, stream)
    event = device.create_event()
    unpooled = device.allocate(64)
    with record_calls() as calls:
        with pytest.raises(ValueError, match="not IPC-enabled"):
            plain_mr.get_allocation_handle()
        with pytest.raises(ValueError, match="cannot be shared"):
            plain.get_ipc_descriptor()
        with pytest.raises(ValueError, match="cannot be shared"):
            unpooled.get_ipc_descriptor()
        with pytest.raises(ValueError, match=r"never shared; call DeviceMemoryResource\.get_allocation_handle"):
            shared.get_ipc_descriptor()  # its pool was not shared yet: the driver would refuse
        with pytest.raises(TypeError, match="mr"):
            Buffer.from_ipc_descriptor(object(), None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="descriptor"):
            Buffer.from_ipc_descriptor(ipc_mr, b"x" * 64)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="was not imported"):
            Buffer.from_ipc_descriptor(ipc_mr, IPCBufferDescriptor(bytes(64), 64))
        with pytest.raises(ValueError, match="ipc_enabled=True"):
            event.get_ipc_descriptor()
        with pytest.raises(TypeError, match="descriptor"):
            Event.from_ipc_descriptor(bytes(64))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="cannot time"):
            device.create_event(timing=True, ipc_enabled=True)
        with pytest.raises(TypeError, match="alloc_handle"):
            DeviceMemoryResource.from_allocation_handle(device, "3")  # type: ignore[arg-type]
    assert [c.name for c in calls if c.name.startswith("cuMem") or c.name.startswith("cuIpc")] == []
    with pytest.raises(ValueError, match="64 bytes"):
        IPCBufferDescriptor(b"short", 5)
    with pytest.raises(ValueError, match="64 bytes"):
        IPCEventDescriptor(b"short")
    assert not event.is_ipc_enabled
    for obj in (plain, shared, unpooled, event, plain_mr):
        obj.close()


def test_allocation_handle_owns_its_descriptor(ipc_mr: DeviceMemoryResource) -> None:
    handle = ipc_mr.get_allocation_handle()
    fd = handle.fd
    with pytest.raises(TypeError, match="multiprocessing"):
        pickle.dumps(handle)
    with pytest.raises(TypeError, match="get_allocation_handle"):
        IPCAllocationHandle()
    handle.close()
    assert handle.closed
    with pytest.raises(ValueError, match="closed"):
        _ = handle.fd
    handle.close()  # idempotent
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)  # the descriptor was closed


def test_descriptors_are_plain_picklable_data(device: Device, shared_mr: DeviceMemoryResource, stream: Any) -> None:
    buf = shared_mr.allocate(128, stream)
    desc = buf.get_ipc_descriptor()
    assert pickle.loads(pickle.dumps(desc)) == desc
    assert desc.size == 128
    event = device.create_event(ipc_enabled=True)
    assert event.is_ipc_enabled
    edesc = event.get_ipc_descriptor()
    assert pickle.loads(pickle.dumps(edesc)) == edesc
    buf.close()
    event.close()


@pytest.mark.contract("G2", "C1")
@pytest.mark.parametrize("caller", ["none", "other"])
@pytest.mark.parametrize("size", [128, 2 << 20])
def test_descriptors_right_after_a_stream_ordered_allocation(
    device: Device,
    shared_mr: DeviceMemoryResource,
    stream: Any,
    *,
    size: int,
    caller: str,
    request: pytest.FixtureRequest,
) -> None:
    """A buffer exported at once after its allocation on a stream, and an IPC event, with no context or
    another one current: the buffer's stream is waited for first, both run in the device's context (the
    event's handle never with no context current: the real process dies there), and the caller's context
    is current again afterwards."""
    if caller == "other":
        request.getfixturevalue("other_context")
    before = Context.current()
    buf = shared_mr.allocate(size, stream)
    with record_calls() as log:
        desc = buf.get_ipc_descriptor()
    names = [c.name for c in log]
    assert names.index("cuStreamSynchronize") < names.index("cuMemPoolExportPointer")
    assert desc.size == size
    event = device.create_event(ipc_enabled=True)
    with record_calls() as log:
        edesc = event.get_ipc_descriptor()
    assert len(edesc.data) == 64
    names = [c.name for c in log]
    assert names.index("cuCtxSetCurrent") < names.index("cuIpcGetEventHandle")  # into the event's context
    assert Context.current() == before
    buf.close()
    event.close()


@pytest.mark.contract("G2", "G3")
@pytest.mark.parametrize("call", ["cuStreamSynchronize", "cuMemPoolExportPointer", "cuCtxSetCurrent"])
def test_a_failed_buffer_export_leaves_the_buffer_usable(
    device: Device, shared_mr: DeviceMemoryResource, stream: Any, call: str
) -> None:
    buf = shared_mr.allocate(256, stream)
    with inject(call, INVALID_VALUE), pytest.raises(CUDAError) as info:
        buf.get_ipc_descriptor()
    assert info.value.call == call
    assert Context.current() is None
    assert buf.get_ipc_descriptor().size == 256  # G3: still usable, and exported now
    buf.close()


@pytest.mark.contract("G1", "G3")
def test_failed_import_maps_nothing(cuguard_driver: Any, device: Device, ipc_mr: DeviceMemoryResource) -> None:
    _sim_only(cuguard_driver)
    buf = ipc_mr.allocate(256)
    with ipc_mr.get_allocation_handle() as handle:
        desc = buf.get_ipc_descriptor()
        with leak_check(), inject("cuMemPoolImportFromShareableHandle", INVALID_VALUE), pytest.raises(CUDAError):
            DeviceMemoryResource.from_allocation_handle(device, handle)
        imr = DeviceMemoryResource.from_allocation_handle(device, handle.fd)
    assert imr.is_imported
    assert imr.is_ipc_enabled
    with leak_check(), inject("cuMemPoolImportPointer", INVALID_VALUE), pytest.raises(CUDAError) as info:
        Buffer.from_ipc_descriptor(imr, desc)
    assert info.value.call == "cuMemPoolImportPointer"
    assert imr.held == 0
    ibuf = Buffer.from_ipc_descriptor(imr, desc)  # G3: the imported pool still maps
    assert ibuf.memory_resource is imr
    assert imr.held == 256
    with pytest.raises(ValueError, match="imported"):
        imr.allocate(16)
    with pytest.raises(ValueError, match="imported"):
        imr.get_allocation_handle()
    ibuf.close()
    imr.close()
    buf.close()


def test_same_process_event_open_is_refused_by_the_simulator(cuguard_driver: Any, device: Device) -> None:
    _sim_only(cuguard_driver)
    event = device.create_event(ipc_enabled=True)
    with pytest.raises(CUDAError) as info:
        Event.from_ipc_descriptor(event.get_ipc_descriptor(), device)
    assert info.value.call == "cuIpcOpenEventHandle"
    assert int(info.value.code) == INVALID_CONTEXT
    with cuguard_driver.as_other_process():
        desc = event.get_ipc_descriptor()
    opened = Event.from_ipc_descriptor(desc, device.ordinal)
    assert opened.is_ipc_enabled
    assert opened is not event
    opened.close()
    event.close()
