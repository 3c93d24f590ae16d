"""StridedMemoryView: typed views of DLPack and CUDA Array Interface producers and of cuguard buffers.

They keep their producer alive and free nothing (W5), export themselves with their type, pass to
kernels as their address, and refuse bad input before the driver (E3).
"""

from __future__ import annotations

import copy
import ctypes
import gc
import pickle
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError, ResourceClosedError, flush_deferred
from cuguard.errors.lowlevel import in_driver_callback
from cuguard.resources import (
    Buffer,
    Device,
    LaunchConfig,
    Module,
    Stream,
    StridedMemoryView,
    args_viewable_as_strided_memory,
    launch,
    pack_args,
)
from cuguard.resources._dlpack import _DLManagedTensor, _DLManagedTensorVersioned, live_exports
from cuguard.testing import inject, leak_check

INVALID_VALUE = 1

_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))


@pytest.fixture
def stream(device: Device) -> Iterator[Stream]:
    s = device.create_stream()
    yield s
    s.close()


class _Array:
    """Another library's device array: a typed CUDA Array Interface (and DLPack of its bytes) over a buffer."""

    def __init__(
        self,
        buf: Buffer,
        shape: tuple[int, ...],
        typestr: str,
        strides: tuple[int, ...] | None = None,
        *,
        stream: Stream | None = None,
        readonly: bool = False,
    ) -> None:
        self.buf = buf
        self.shape = shape
        self.typestr = typestr
        self.strides = strides
        self.stream = stream
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        interface: dict[str, Any] = {
            "shape": self.shape,
            "typestr": self.typestr,
            "data": (self.buf.ptr, self.readonly),
            "version": 3,
            "strides": self.strides,
        }
        if self.stream is not None:
            interface["stream"] = int(self.stream.handle)
        return interface


def _versioned(capsule: Any) -> Any:
    return _DLManagedTensorVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))


def _legacy(capsule: Any) -> Any:
    return _DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))


@pytest.mark.contract("W5")
def test_a_host_array_round_trips_with_its_type() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = StridedMemoryView.from_dlpack(data, stream_ptr=-1)
    assert (view.shape, view.strides, view.dtype, view.size) == ((3, 4), None, np.dtype(np.float32), 12)
    assert (view.device_id, view.is_device_accessible, view.readonly) == (-1, False, False)
    assert view.ptr == data.ctypes.data
    assert view.exporting_obj is data
    assert view.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(view)
    assert back.dtype == np.float32
    assert back.shape == (3, 4)
    assert back.tolist() == data.tolist()
    assert back.ctypes.data == data.ctypes.data  # no copy: the same memory, typed
    # A strided host array keeps its strides (in elements) through the view and back.
    column = data[:, 1]
    strided = StridedMemoryView(column, stream_ptr=-1)
    assert (strided.shape, strided.strides) == ((3,), (4,))
    assert np.from_dlpack(strided).tolist() == [1.0, 5.0, 9.0]
    with pytest.raises(AttributeError):
        _ = strided.__cuda_array_interface__  # host memory: no CUDA Array Interface
    readonly = data.copy()
    readonly.flags.writeable = False
    assert StridedMemoryView.from_dlpack(readonly, -1).readonly
    # The view keeps its producer alive, and lets go of it when collected.
    source = np.zeros(8, dtype=np.int16)
    marker = weakref.ref(source)
    view = StridedMemoryView.from_dlpack(source, None)
    del source
    gc.collect()
    assert marker() is not None
    del view
    gc.collect()
    assert marker() is None


@pytest.mark.contract("W5")
def test_a_typed_buffer_view_exports_its_shape_strides_and_dtype(device: Device) -> None:
    with device.allocate(64) as buf:
        view = StridedMemoryView.from_buffer(buf, (4, 4), dtype=np.float32)
        assert (view.ptr, view.shape, view.strides, view.dtype) == (buf.ptr, (4, 4), None, np.dtype(np.float32))
        assert (view.device_id, view.is_device_accessible, view.readonly) == (device.ordinal, True, False)
        assert view.exporting_obj is buf
        assert view.__dlpack_device__() == (2, device.ordinal)
        before = live_exports()
        capsule = view.__dlpack__(max_version=(1, 0))
        tensor = _versioned(capsule).dl_tensor
        assert (tensor.data, tensor.ndim, tensor.shape[0], tensor.shape[1]) == (buf.ptr, 2, 4, 4)
        assert (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == (2, 32, 1)
        assert not tensor.strides
        assert _versioned(capsule).flags == 0
        with pytest.raises(BufferError, match="DLPack export"):
            buf.close()  # the view's export holds the buffer, as the buffer's own export does
        assert not buf.closed
        del capsule, tensor
        gc.collect()
        assert live_exports() == before
        # Columns of a 4x4 int32 matrix: strides (4,) in elements, read-only, a legacy capsule.
        column = StridedMemoryView.from_buffer(buf, (4,), (4,), dtype="int32", is_readonly=True)
        assert (column.strides, column.readonly) == ((4,), True)
        legacy = _legacy(column.__dlpack__())
        assert (legacy.dl_tensor.strides[0], legacy.dl_tensor.dtype.code) == (4, 0)
        interface = column.__cuda_array_interface__
        assert interface["shape"] == (4,)
        assert interface["strides"] == (16,)
        assert interface["typestr"] == "<i4"
        assert interface["data"] == (buf.ptr, True)
        del legacy
        # Views of views: a consumer of the export sees the same type.
        again = StridedMemoryView.from_dlpack(column, stream_ptr=-1)
        assert (again.ptr, again.shape, again.strides, again.dtype, again.readonly) == (
            buf.ptr,
            (4,),
            (4,),
            np.dtype(np.int32),
            True,
        )
        from_cai = StridedMemoryView.from_cuda_array_interface(column, stream_ptr=-1, device=device)
        assert (from_cai.shape, from_cai.strides, from_cai.dtype, from_cai.readonly) == (
            (4,),
            (4,),
            np.dtype(np.int32),
            True,
        )
        # A contiguous typed view imports as a Buffer of its bytes; a strided one is refused, unconsumed.
        dense = StridedMemoryView.from_buffer(buf, (16,), dtype=np.uint32)
        imported = Buffer.from_dlpack(dense)
        assert (imported.ptr, imported.size) == (buf.ptr, 64)
        with pytest.raises(BufferError, match="C-contiguous"):
            Buffer.from_dlpack(column)
        imported.close()
        del again, from_cai, imported, dense
        gc.collect()
        assert live_exports() == before


@pytest.mark.contract("W5")
def test_views_keep_their_producer_and_refuse_use_once_their_buffer_is_closed(device: Device) -> None:
    buf = device.allocate(32)
    marker = weakref.ref(buf)
    view = StridedMemoryView.from_buffer(buf, 8, itemsize=4)
    assert view.dtype is None
    del buf
    gc.collect()
    assert marker() is not None  # the view keeps its buffer (and so the memory) alive
    buffer = marker()
    assert buffer is not None
    buffer.close()
    with pytest.raises(ResourceClosedError):
        _ = view.ptr
    with pytest.raises(ResourceClosedError):
        view.__dlpack__()
    with pytest.raises(ResourceClosedError):
        _ = view.__cuda_array_interface__
    del buffer, view
    gc.collect()
    assert marker() is None
    # A view imported from a cuguard buffer holds the buffer's export: the buffer refuses close() meanwhile.
    with leak_check():
        source = device.allocate(16)
        imported = StridedMemoryView.from_dlpack(source, stream_ptr=-1)
        assert (imported.shape, imported.dtype) == ((16,), np.dtype(np.uint8))
        with pytest.raises(BufferError, match="DLPack export"):
            source.close()
        del imported
        gc.collect()
        source.close()


@pytest.mark.contract("W5", "E1", "G1")
def test_cuda_array_interface_views_order_after_the_producers_stream(device: Device, stream: Stream) -> None:
    source = device.allocate(64, stream)
    array = _Array(source, (4, 2), "<f4", (16, 4), stream=stream, readonly=True)
    view = StridedMemoryView.from_cuda_array_interface(array, device=device)  # synchronizes the producer
    assert (view.ptr, view.shape, view.strides, view.dtype) == (source.ptr, (4, 2), (4, 1), np.dtype("<f4"))
    assert (view.device_id, view.readonly, view.stream_ptr) == (device.ordinal, True, None)
    other = device.create_stream()
    waited = StridedMemoryView.from_cuda_array_interface(array, other, device=device)
    assert waited.stream_ptr == int(other.handle)
    # The wait and the synchronization are asked of the driver: their failure makes no view.
    with leak_check(), inject("cuStreamWaitEvent", INVALID_VALUE), pytest.raises(CUDAError):
        StridedMemoryView.from_cuda_array_interface(array, int(other.handle), device=device)
    with leak_check(), inject("cuStreamSynchronize", INVALID_VALUE), pytest.raises(CUDAError):
        StridedMemoryView(array)
    with inject("cuStreamSynchronize", INVALID_VALUE), inject("cuStreamWaitEvent", INVALID_VALUE):
        unordered = StridedMemoryView.from_cuda_array_interface(array, -1, device=device)  # -1: no ordering
    assert unordered.stream_ptr is None
    other.sync()
    other.close()
    del view, waited, unordered
    source.close()


@pytest.mark.contract("E3")
def test_refusals_come_before_the_driver(device: Device) -> None:
    before = live_exports()
    with device.allocate(64) as buf:
        for bad in (None, 5, "x", object()):
            with pytest.raises(TypeError, match="obj must be"):
                StridedMemoryView(bad, -1)
            with pytest.raises(TypeError, match="obj must be"):
                StridedMemoryView.from_dlpack(bad, -1)
            with pytest.raises(TypeError, match="obj must be"):
                StridedMemoryView.from_cuda_array_interface(bad, -1)
        for stream_ptr in (1.5, True, "0", object()):
            with pytest.raises(TypeError, match="stream_ptr must be"):
                StridedMemoryView.from_dlpack(buf, stream_ptr)
        for stream_ptr in (-2, 1 << 64):
            with pytest.raises(ValueError, match="stream_ptr"):
                StridedMemoryView.from_dlpack(buf, stream_ptr)
        with pytest.raises(TypeError, match="buffer must be"):
            StridedMemoryView.from_buffer(np.zeros(4), (4,), dtype=np.uint8)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="dtype or an itemsize"):
            StridedMemoryView.from_buffer(buf, (4,))
        with pytest.raises(ValueError, match="does not match"):
            StridedMemoryView.from_buffer(buf, (4,), itemsize=8, dtype=np.float32)
        with pytest.raises(ValueError, match="outside the buffer"):
            StridedMemoryView.from_buffer(buf, (17,), dtype=np.float32)
        with pytest.raises(ValueError, match="outside the buffer"):
            StridedMemoryView.from_buffer(buf, (4,), (-1,), dtype=np.float32)
        with pytest.raises(ValueError, match="one step per dimension"):
            StridedMemoryView.from_buffer(buf, (4, 4), (1,), dtype=np.uint8)
        with pytest.raises(ValueError, match="shape"):
            StridedMemoryView.from_buffer(buf, (-1,), dtype=np.uint8)
        with pytest.raises(TypeError, match="shape must be"):
            StridedMemoryView.from_buffer(buf, (1.5,), dtype=np.uint8)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="shape must be"):
            StridedMemoryView.from_buffer(buf, "4", dtype=np.uint8)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="is_readonly must be"):
            StridedMemoryView.from_buffer(buf, (4,), dtype=np.uint8, is_readonly=1)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="dtype must be"):
            StridedMemoryView.from_buffer(buf, (4,), dtype=object())
        # A view without a dtype, or one DLPack cannot describe, is not exported.
        with pytest.raises(BufferError, match="without a dtype"):
            StridedMemoryView.from_buffer(buf, (16,), itemsize=4).__dlpack__()
        with pytest.raises(BufferError, match="no DLPack type"):
            StridedMemoryView.from_buffer(buf, (4,), dtype="S4").__dlpack__()
        with pytest.raises(BufferError, match="big-endian"):
            StridedMemoryView.from_buffer(buf, (4,), dtype=">f4").__dlpack__()
        view = StridedMemoryView.from_buffer(buf, (16,), dtype=np.float32)
        with pytest.raises(BufferError, match="copying"):
            view.__dlpack__(copy=True)
        with pytest.raises(BufferError, match="cannot export to device"):
            view.__dlpack__(dl_device=(1, 0))
        # Malformed interfaces and producers on devices a view cannot read: BufferError, nothing consumed.
        with pytest.raises(BufferError, match="not whole 4-byte elements"):
            StridedMemoryView.from_cuda_array_interface(_Array(buf, (4,), "<f4", (6,)), -1, device=device)
        with pytest.raises(BufferError, match="malformed"):
            StridedMemoryView.from_cuda_array_interface(_Array(buf, (4,), "f4"), -1, device=device)
        with pytest.raises(BufferError, match="malformed"):
            StridedMemoryView.from_cuda_array_interface(_Array(buf, (4, 4), "<f4", (4,)), -1, device=device)

        class _Elsewhere:
            def __dlpack_device__(self) -> tuple[int, int]:
                return (4, 0)  # OpenCL

            def __dlpack__(self, **kwargs: Any) -> Any:
                raise AssertionError("never asked")

        with pytest.raises(BufferError, match="device type 4"):
            StridedMemoryView.from_dlpack(_Elsewhere(), -1)

        class _Lanes:
            def __dlpack_device__(self) -> tuple[int, int]:
                return (2, device.ordinal)

            def __dlpack__(self, **kwargs: Any) -> Any:
                capsule = buf.__dlpack__(max_version=(1, 0))
                _versioned(capsule).dl_tensor.dtype.lanes = 4  # a vector type NumPy cannot name
                return capsule

        with pytest.raises(BufferError, match="no NumPy dtype"):
            StridedMemoryView.from_dlpack(_Lanes(), -1)
        gc.collect()
        closed = device.allocate(8)
        closed.close()
        with pytest.raises(ResourceClosedError):
            StridedMemoryView.from_buffer(closed, (8,), dtype=np.uint8)
        with pytest.raises(ResourceClosedError):
            StridedMemoryView.from_dlpack(closed, -1)
    assert live_exports() == before


@pytest.mark.contract("O1")
def test_views_cannot_be_copied_or_pickled(device: Device) -> None:
    with device.allocate(16) as buf:
        view = StridedMemoryView.from_buffer(buf, (4,), dtype=np.float32)
        for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot be copied or pickled"):
                attempt(view)
        del view


@pytest.mark.contract("E3")
def test_views_pass_to_kernels_as_their_address(device: Device, module: Module, stream: Stream) -> None:
    fill = module.get_kernel("fill_u32")
    with device.allocate(64) as buf:
        buf.fill(0)
        view = StridedMemoryView.from_buffer(buf, (4, 4), dtype=np.uint32)
        launch(stream, LaunchConfig(grid=1, block=16), fill, view, 7, 16)
        stream.sync()
        back = np.zeros(16, dtype=np.uint32)
        buf.copy_to(back)
        assert back.tolist() == [7] * 16
        params, keep = fill.pack([view, 7, 16])
        first = ctypes.c_uint64.from_address(int(params)).value  # where parameter 0 lies in the block
        assert ctypes.c_uint64.from_address(first).value == buf.ptr
        del keep
        values, types = pack_args([view])
        assert (values, types) == ((buf.ptr,), (ctypes.c_void_p,))
        host = StridedMemoryView.from_dlpack(np.zeros(4, dtype=np.uint32), -1)
        with pytest.raises(TypeError, match="host memory"):
            launch(stream, LaunchConfig(grid=1, block=1), fill, host, 7, 4)
        with pytest.raises(TypeError, match="host memory"):
            pack_args([host])
        with pytest.raises(TypeError, match="64-bit integer parameter"):
            fill.pack([buf, view, 16])  # a view where a 32-bit integer is declared
    with pytest.raises(ResourceClosedError):
        launch(stream, LaunchConfig(grid=1, block=16), fill, view, 7, 16)  # its buffer was closed


@pytest.mark.contract("E3")
def test_args_viewable_as_strided_memory(device: Device, stream: Stream) -> None:
    seen: list[Any] = []

    @args_viewable_as_strided_memory((1,))
    def work(scale: float, data: Any, s: Stream) -> float:
        view = data.view(s.handle)
        assert isinstance(view, StridedMemoryView)
        seen.append((view.shape, view.dtype, view.stream_ptr))
        return scale

    assert work.__name__ == "work"
    host = np.ones(6, dtype=np.float64)
    assert work(2.0, host, stream) == 2.0
    with device.allocate(32) as buf:
        work(1.0, _Array(buf, (8,), "<i4"), stream)
        work(1.0, StridedMemoryView.from_buffer(buf, (2, 4), dtype=np.int32), stream)
    assert seen == [
        ((6,), np.dtype(np.float64), int(stream.handle)),
        ((8,), np.dtype(np.int32), int(stream.handle)),
        ((2, 4), np.dtype(np.int32), int(stream.handle)),
    ]
    with pytest.raises(TypeError, match="argument 1 must be"):
        work(1.0, [1, 2, 3], stream)
    with pytest.raises(TypeError, match="position 1"):
        work(1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="arg_indices must be"):
        args_viewable_as_strided_memory([1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="arg_indices must be"):
        args_viewable_as_strided_memory((1.0,))  # type: ignore[arg-type]


class _Recorded:
    """A producer (DLPack over a cuguard buffer, and a CUDA Array Interface) whose destructor records where it ran."""

    def __init__(self, buf: Buffer, records: list[tuple[str, bool]]) -> None:
        self.buf = buf
        self.records = records

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.buf.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.buf.__dlpack__(**kwargs)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.buf.size,), "typestr": "|u1", "data": (self.buf.ptr, False), "version": 3}

    def __del__(self) -> None:
        self.records.append((threading.current_thread().name, in_driver_callback()))


@pytest.mark.contract("O5", "W5")
@pytest.mark.parametrize("protocol", ["dlpack", "cuda_array_interface"])
def test_a_view_dropped_in_a_host_function_lets_go_of_its_producer_on_the_release_thread(
    device: Device, protocol: str
) -> None:
    backing = device.allocate(32)
    records: list[tuple[str, bool]] = []
    producer = _Recorded(backing, records)
    if protocol == "dlpack":
        view = StridedMemoryView.from_dlpack(producer, -1)
    else:
        view = StridedMemoryView.from_cuda_array_interface(producer, -1, device=device)
    del producer
    gate = threading.Event()
    stream = device.create_stream()
    keep: list[Any] = [view]
    ref = weakref.ref(view)
    del view
    stream.launch_host_func(gate.wait)  # runs once the test dropped its references
    stream.launch_host_func(keep.clear)  # the view's last reference goes inside a host function
    gc.collect()
    assert ref() is not None
    gate.set()
    stream.sync()
    assert flush_deferred(10)
    assert ref() is None
    assert records == [("cuguard-release", False)]  # never on the driver's thread (O5)
    gc.collect()
    backing.close()  # the export the DLPack view held ended with it
    stream.close()
