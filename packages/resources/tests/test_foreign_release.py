"""Foreign memory let go of on a driver's thread is handed to the release thread (contract O5).

Memory imported from another library (``Buffer.from_dlpack``, ``Buffer.from_cuda_array_interface``,
``Buffer.from_handle`` with an owner) keeps that library's object alive; when a CUDA host function
drops the last reference, the producer's DLPack deleter or its object's destructor, either of which
may call CUDA, must not run on the driver's thread. Each producer here records the thread its
release ran on and whether that thread was inside a driver callback.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cuguard.errors import flush_deferred
from cuguard.errors.lowlevel import in_driver_callback
from cuguard.resources import Buffer, Device
from cuguard.resources._dlpack import _DELETER_TYPE, _DLDataType, _DLDevice, _DLManagedTensorVersioned, _DLPackVersion

_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)

Record = tuple[str, bool]  # (thread name, inside a driver callback)


@pytest.fixture
def unraisable() -> Iterator[list[Any]]:
    seen: list[Any] = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    yield seen
    sys.unraisablehook = old


def _record(records: list[Record]) -> None:
    records.append((threading.current_thread().name, in_driver_callback()))


class _DLPackProducer:
    """Another library's device array: its capsule's deleter records where it ran."""

    def __init__(self, ptr: int, size: int, records: list[Record]) -> None:
        self.records = records
        self.shape = (ctypes.c_int64 * 1)(size)
        managed = _DLManagedTensorVersioned()
        managed.version = _DLPackVersion(1, 0)
        managed.flags = 0
        tensor = managed.dl_tensor
        tensor.data = ptr
        tensor.device = _DLDevice(2, 0)
        tensor.ndim = 1
        tensor.dtype = _DLDataType(1, 8, 1)
        tensor.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        tensor.strides = ctypes.POINTER(ctypes.c_int64)()
        tensor.byte_offset = 0
        self.managed = managed
        self.deleter = _DELETER_TYPE(lambda _address: _record(records))  # kept alive by the test's list
        managed.deleter = self.deleter

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor_versioned", None)


class _ArrayProducer:
    """Another library's array (``__cuda_array_interface__``): its destructor records where it ran."""

    def __init__(self, ptr: int, size: int, records: list[Record]) -> None:
        self.records = records
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3}

    def __del__(self) -> None:
        _record(self.records)


def _from_dlpack(backing: Buffer, records: list[Record], keep: list[Any]) -> Buffer:
    producer = _DLPackProducer(backing.ptr, backing.size, records)
    keep.append(producer.deleter)  # the C callback must outlive its call, which the test waits for
    return Buffer.from_dlpack(producer)


def _from_cuda_array_interface(backing: Buffer, records: list[Record], keep: list[Any]) -> Buffer:
    return Buffer.from_cuda_array_interface(_ArrayProducer(backing.ptr, backing.size, records))


def _from_handle(backing: Buffer, records: list[Record], keep: list[Any]) -> Buffer:
    return Buffer.from_handle(backing.ptr, backing.size, owner=_ArrayProducer(backing.ptr, backing.size, records))


_IMPORTS: dict[str, Callable[[Buffer, list[Record], list[Any]], Buffer]] = {
    "from_dlpack": _from_dlpack,
    "from_cuda_array_interface": _from_cuda_array_interface,
    "from_handle": _from_handle,
}


def _handed_to_a_host_function(device: Device, make: Callable[[], Buffer], how: str) -> tuple[Any, Any, Any]:
    """An imported buffer whose last reference a queued host function drops (by ``how``); the caller keeps none."""
    gate = threading.Event()
    stream = device.create_stream()
    buf = make()
    keep: list[Any] = [buf]
    ref = weakref.ref(buf)
    del buf
    stream.launch_host_func(gate.wait)  # runs only once the test dropped its references
    if how == "close":
        stream.launch_host_func(keep[0].close)  # close() inside the callback lets go of the producer
    stream.launch_host_func(keep.clear)
    return stream, gate, ref


@pytest.mark.contract("O5")
@pytest.mark.parametrize("how", ["collected", "close"])
@pytest.mark.parametrize("kind", list(_IMPORTS))
def test_foreign_memory_dropped_in_a_host_function_is_let_go_on_the_release_thread(
    cuguard_driver: Any, device: Device, unraisable: list[Any], kind: str, how: str
) -> None:
    backing = device.allocate(64)
    records: list[Record] = []
    alive: list[Any] = []
    stream, gate, ref = _handed_to_a_host_function(device, lambda: _IMPORTS[kind](backing, records, alive), how)
    gc.collect()
    assert ref() is not None  # the host functions hold it
    assert records == []
    gate.set()
    stream.sync()  # the host functions have returned
    assert flush_deferred(10)  # and what became due in them was carried out
    assert ref() is None
    assert records == [("cuguard-release", False)]  # once, on the release thread, never on the driver's
    assert unraisable == []
    stream.close()
    backing.close()


@pytest.mark.contract("O5")
@pytest.mark.parametrize("kind", list(_IMPORTS))
def test_foreign_memory_let_go_on_a_python_thread_is_let_go_there(
    cuguard_driver: Any, device: Device, kind: str
) -> None:
    backing = device.allocate(64)
    records: list[Record] = []
    alive: list[Any] = []
    buf = _IMPORTS[kind](backing, records, alive)
    del buf
    gc.collect()
    assert records == [(threading.current_thread().name, False)]  # at once, where it was dropped
    backing.close()
