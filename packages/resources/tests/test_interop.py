"""Interop: foreign memory wrapped without ownership, DLPack export (versioned and legacy) and its lifetime."""

from __future__ import annotations

import ctypes
import gc
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.resources import Buffer, Device, Stream
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


@pytest.fixture
def unraisable() -> Iterator[list[Any]]:
    seen: list[Any] = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    yield seen
    sys.unraisablehook = old


class _Producer:
    """Another library's device array: DLPack and the CUDA Array Interface over a cuguard buffer."""

    def __init__(self, buf: Buffer, *, versioned: bool = True, strides: tuple[int, ...] | None = None) -> None:
        self.buf = buf
        self.versioned = versioned
        self.strides = strides

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.buf.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        if not self.versioned and "max_version" in kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.buf.__dlpack__(**kwargs)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        interface = dict(self.buf.__cuda_array_interface__)
        interface["shape"] = (self.buf.size // 4,)
        interface["typestr"] = "<u4"
        interface["strides"] = self.strides
        return interface


@pytest.mark.contract("O1", "W5", "S3")
def test_from_handle_never_frees(device: Device) -> None:
    owner = device.allocate(64)
    with leak_check():
        view = Buffer.from_handle(owner.ptr, 64, device=device)
        assert not view.owned
        assert (view.ptr, view.device) == (owner.ptr, device.ordinal)
        view.fill(9)
        view.close()  # frees nothing: the leak check sees the memory still live
        view.close()
        with pytest.raises(ResourceClosedError):
            view.fill(1)
    marker = weakref.ref(owner)
    view = Buffer.from_handle(owner.ptr, 64, owner=owner)
    del owner
    gc.collect()
    assert marker() is not None  # the view keeps its owner alive
    view.close()
    gc.collect()
    assert marker() is None  # let go once closed: the owner freed its own memory
    with pytest.raises(TypeError, match="ptr must be"):
        Buffer.from_handle("0x10", 8)
    with pytest.raises(ValueError, match="ptr must be 0 or more"):
        Buffer.from_handle(-1, 8)
    with pytest.raises(ValueError, match="size must be 0 or more"):
        Buffer.from_handle(4096, -8)


@pytest.mark.contract("W5", "O1")
@pytest.mark.parametrize("versioned", [True, False])
def test_from_dlpack_shares_the_memory_and_keeps_the_producer(device: Device, stream: Stream, versioned: bool) -> None:
    data = np.arange(64, dtype=np.uint8)
    source = device.allocate(64, stream)
    source.copy_from(data, stream)
    producer = _Producer(source, versioned=versioned)
    imported = Buffer.from_dlpack(producer, stream=stream)
    assert not imported.owned
    assert (imported.ptr, imported.size, imported.device) == (source.ptr, 64, device.ordinal)
    back = np.zeros(64, dtype=np.uint8)
    imported.copy_to(back)
    assert back.tolist() == data.tolist()
    with pytest.raises(BufferError, match="DLPack export"):
        source.close()  # the imported buffer holds its export
    assert not source.closed
    marker = weakref.ref(producer)
    del producer
    gc.collect()
    assert marker() is not None
    imported.close()
    gc.collect()
    assert marker() is None
    source.close()


@pytest.mark.contract("E3")
def test_from_dlpack_refusals(device: Device) -> None:
    with pytest.raises(TypeError, match="obj must be"):
        Buffer.from_dlpack(5)
    with pytest.raises(BufferError, match="not on a CUDA device"):
        Buffer.from_dlpack(np.zeros(4, dtype=np.uint8))
    before = live_exports()
    with device.allocate(64) as source:
        with pytest.raises(BufferError, match="C-contiguous"):
            Buffer.from_cuda_array_interface(_Producer(source, strides=(8,)), device=device)
        closed = device.allocate(8)
        closed.close()
        with pytest.raises(ResourceClosedError):
            Buffer.from_dlpack(closed)
    assert live_exports() == before


@pytest.mark.contract("W5", "E1", "G1")
def test_from_cuda_array_interface_orders_after_the_producers_stream(device: Device, stream: Stream) -> None:
    source = device.allocate(64, stream)
    producer = _Producer(source)
    imported = Buffer.from_cuda_array_interface(producer, device=device)
    assert (imported.ptr, imported.size, imported.owned) == (source.ptr, 64, False)
    other = device.create_stream()
    waited = Buffer.from_cuda_array_interface(producer, stream=other, device=device)
    other.sync()
    with leak_check(), inject("cuStreamSynchronize", INVALID_VALUE), pytest.raises(CUDAError):
        Buffer.from_cuda_array_interface(producer, device=device)
    with pytest.raises(TypeError, match="obj must be"):
        Buffer.from_cuda_array_interface(object())
    for buf in (imported, waited):
        buf.close()
    source.close()
    other.close()


def _name(capsule: Any) -> bytes:
    return bytes(_get_name(capsule))


@pytest.mark.contract("G5", "W5")
def test_export_versioned_and_legacy(device: Device) -> None:
    with device.allocate(32) as buf:
        legacy = buf.__dlpack__()
        assert _name(legacy) == b"dltensor"
        managed: Any = _DLManagedTensor.from_address(_get_pointer(legacy, b"dltensor"))
        assert managed.dl_tensor.data == buf.ptr
        versioned = buf.__dlpack__(max_version=(1, 2))
        assert _name(versioned) == b"dltensor_versioned"
        v: Any = _DLManagedTensorVersioned.from_address(_get_pointer(versioned, b"dltensor_versioned"))
        assert (v.version.major, v.version.minor) == (1, 0)
        assert v.flags == 0
        assert (v.dl_tensor.data, v.dl_tensor.ndim, v.dl_tensor.shape[0]) == (buf.ptr, 1, 32)
        assert (v.dl_tensor.device.device_type, v.dl_tensor.device.device_id) == (2, device.ordinal)
        assert _name(buf.__dlpack__(max_version=(0, 8))) == b"dltensor"
        del legacy, versioned, managed, v


@pytest.mark.contract("W1", "W5")
def test_refused_capsule_raises_the_consumers_error_and_frees_the_buffer(device: Device, unraisable: list[Any]) -> None:
    before = live_exports()
    buf = device.allocate(64)
    marker = weakref.ref(buf)
    with pytest.raises((RuntimeError, BufferError, ValueError, TypeError)) as info:
        np.from_dlpack(buf)  # NumPy takes host memory only: it refuses the capsule
    assert not isinstance(info.value, SystemError)
    del info
    assert live_exports() == before
    buf.close()  # nothing holds an export
    del buf
    gc.collect()
    assert marker() is None
    assert unraisable == []


@pytest.mark.contract("W5")
def test_dropped_capsule_keeps_nothing_alive(device: Device, unraisable: list[Any]) -> None:
    before = live_exports()
    buf = device.allocate(16)
    marker = weakref.ref(buf)
    capsule = buf.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError, match="DLPack export"):
        buf.close()
    buf.fill(2)  # refused close changed nothing
    del buf
    gc.collect()
    assert marker() is not None  # the capsule holds it
    del capsule
    gc.collect()
    assert marker() is None
    assert live_exports() == before
    assert unraisable == []


@pytest.mark.contract("W5", "S3")
@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_numpy_consumes_pinned_memory(device: Device, unraisable: list[Any], max_version: Any) -> None:
    pinned = device.allocate_pinned(16)
    view = pinned.numpy()
    view[:] = np.arange(16, dtype=np.uint8)
    del view
    assert pinned.__dlpack_device__() == (3, 0)

    class Exporter:
        def __dlpack__(self, **kwargs: Any) -> Any:
            if max_version is None:
                kwargs.pop("max_version", None)
            return pinned.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return pinned.__dlpack_device__()

    array = np.from_dlpack(Exporter())
    assert array.tolist() == list(range(16))
    with pytest.raises(BufferError, match="DLPack export"):
        pinned.close()
    del array
    gc.collect()
    pinned.close()
    assert pinned.closed
    assert unraisable == []


# --- other libraries, where they are installed (a GPU machine) ---------------------------------


@pytest.mark.real_only
@pytest.mark.contract("W5")
def test_torch_round_trip(device: Device) -> None:
    torch = pytest.importorskip("torch")
    data = np.arange(32, dtype=np.uint8)
    buf = device.allocate(32)
    buf.copy_from(data)
    tensor = torch.from_dlpack(buf)
    assert tensor.cpu().numpy().tolist() == data.tolist()
    with pytest.raises(BufferError):
        buf.close()
    del tensor
    gc.collect()
    buf.close()
    source = torch.arange(16, dtype=torch.int32, device=f"cuda:{device.ordinal}")
    imported = Buffer.from_dlpack(source)
    back = np.zeros(16, dtype=np.int32)
    torch.cuda.synchronize()
    imported.copy_to(back)
    assert back.tolist() == list(range(16))
    imported.close()


@pytest.mark.real_only
@pytest.mark.contract("W5")
def test_cupy_round_trip(device: Device) -> None:
    cupy = pytest.importorskip("cupy")
    data = np.arange(32, dtype=np.uint8)
    buf = device.allocate(32)
    buf.copy_from(data)
    array = cupy.from_dlpack(buf)
    assert cupy.asnumpy(array).tolist() == data.tolist()
    del array
    gc.collect()
    buf.close()
    with cupy.cuda.Device(device.ordinal):
        source = cupy.arange(16, dtype=cupy.int32)
    for imported in (Buffer.from_dlpack(source), Buffer.from_cuda_array_interface(source, device=device)):
        back = np.zeros(16, dtype=np.int32)
        imported.copy_to(back)
        assert back.tolist() == list(range(16))
        imported.close()
