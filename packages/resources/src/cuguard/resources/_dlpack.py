"""DLPack export of device memory (the legacy, unversioned ``dltensor`` capsule).

A :class:`~cuguard.resources.Buffer` exports its bytes as a one-dimensional
``uint8`` tensor on ``kDLCUDA``. The capsule keeps the buffer alive until the
consumer calls the tensor's deleter (or, if never consumed, until the capsule
itself is destroyed), so the memory cannot be freed under the consumer.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

__all__ = ["KDL_CUDA", "export"]

KDL_CUDA = 2
_KDL_UINT = 1
_NAME = b"dltensor"


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER_TYPE),
]

# address of a managed tensor -> what it keeps alive (the struct, its shape, the buffer)
_exports: dict[int, tuple[Any, ...]] = {}
_lock = threading.Lock()


def _deleter(address: int | None) -> None:
    with _lock:
        _exports.pop(address or 0, None)


_DELETER = _DELETER_TYPE(_deleter)

_CAPSULE_DESTRUCTOR_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Private prototypes: the shared ``ctypes.pythonapi`` entries may be retyped by other code.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR_TYPE)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _capsule_destructor(capsule: int | None) -> None:
    # Still named "dltensor": nobody consumed it, so the producer deletes it.
    if capsule and _capsule_is_valid(capsule, _NAME):
        _deleter(_capsule_get_pointer(capsule, _NAME))


_CAPSULE_DESTRUCTOR = _CAPSULE_DESTRUCTOR_TYPE(_capsule_destructor)


def export(owner: Any, ptr: int, size: int, device: int) -> Any:
    """A ``dltensor`` capsule over ``size`` bytes at device address ``ptr``, keeping ``owner`` alive."""
    managed = _DLManagedTensor()
    shape = (ctypes.c_int64 * 1)(size)
    tensor = managed.dl_tensor
    tensor.data = ptr
    tensor.device = _DLDevice(KDL_CUDA, device)
    tensor.ndim = 1
    tensor.dtype = _DLDataType(_KDL_UINT, 8, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.POINTER(ctypes.c_int64)()
    tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _DELETER
    address = ctypes.addressof(managed)
    with _lock:
        _exports[address] = (managed, shape, owner)
    try:
        return _capsule_new(address, _NAME, _CAPSULE_DESTRUCTOR)
    except BaseException:
        _deleter(address)
        raise


def live_exports() -> int:
    """How many exported tensors are still alive (not yet deleted)."""
    with _lock:
        return len(_exports)
