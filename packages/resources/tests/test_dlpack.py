"""DLPack export of device memory (G5/W5: the export keeps the memory alive)."""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import numpy as np
import pytest

from cuguard.resources import Device
from cuguard.resources._dlpack import _DLManagedTensor, live_exports

_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", ctypes.pythonapi))


def _tensor(capsule: Any) -> Any:
    return _DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))


@pytest.mark.contract("G5", "W5")
def test_export_describes_the_bytes_and_keeps_the_buffer_alive(device: Device) -> None:
    before = live_exports()
    buf = device.allocate(64)
    ptr = buf.ptr
    assert buf.__dlpack_device__() == (2, 0)
    capsule = buf.__dlpack__()
    managed = _tensor(capsule)
    assert managed.dl_tensor.data == ptr
    assert managed.dl_tensor.ndim == 1
    assert managed.dl_tensor.shape[0] == 64
    assert (managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits) == (1, 8)
    del buf
    gc.collect()
    assert live_exports() == before + 1  # the capsule still owns the buffer
    # A consumer takes the tensor: renames the capsule, later calls the deleter.
    _set_name(capsule, b"used_dltensor")
    del capsule
    gc.collect()
    assert live_exports() == before + 1
    managed.deleter(ctypes.addressof(managed))
    gc.collect()
    assert live_exports() == before


def test_unconsumed_capsule_releases_on_its_own(device: Device) -> None:
    before = live_exports()
    with device.allocate(16) as buf:
        capsule = buf.__dlpack__()
        assert live_exports() == before + 1
        del capsule
        gc.collect()
        assert live_exports() == before
    with device.allocate(16) as buf, pytest.raises(BufferError):
        buf.__dlpack__(copy=True)


@pytest.mark.real_only
def test_torch_reads_the_exported_bytes(device: Device) -> None:
    torch = pytest.importorskip("torch")
    data = np.arange(32, dtype=np.uint8)
    with device.allocate(32) as buf:
        buf.copy_from(data)
        tensor = torch.from_dlpack(buf)
        assert tensor.is_cuda
        assert tensor.cpu().numpy().tolist() == data.tolist()
        del tensor
