"""DLPack: export of cuguard memory and import of other libraries' device memory.

Export. A :class:`~cuguard.resources.Buffer` exports its bytes as a
one-dimensional ``uint8`` tensor on ``kDLCUDA``, a
:class:`~cuguard.resources.PinnedBuffer` as one on ``kDLCUDAHost``. The capsule
is the versioned one (``dltensor_versioned``, DLPack 1.0) when the consumer asks
with ``max_version`` of ``(1, 0)`` or more, the legacy one (``dltensor``)
otherwise. An export keeps its buffer alive, and the buffer's ``close()``
refuses, while the export is *live*: while the capsule is held by anyone and
not consumed, or, once a consumer has consumed it, until the consumer calls the
tensor's deleter.

The capsules carry no destructor. A consumer that refuses a capsule drops it
while its own exception is set, and Python code run at that moment (which is
what a destructor written with ``ctypes`` is) would turn that exception into a
``SystemError`` and print an "Exception ignored" traceback. Instead this module
holds a reference to every capsule it made and, at safe points (the next
export, a ``close()`` of exported memory, :func:`live_exports`, and after each
garbage collection), lets go of the capsules nobody else holds: one that was
never consumed ends its export there; a consumed one waits for its deleter.

Import. :func:`import_capsule` consumes a capsule of another library (any
DLPack producer) and returns what a Buffer needs; the producer's deleter is
called when the returned keeper is collected.

Foreign owners. What keeps memory made elsewhere alive (the consumed tensor and
its producer, a ``__cuda_array_interface__`` exporter, the owner given to
``Buffer.from_handle``) is held through a :class:`Lent`. Another library's
destructor or DLPack deleter may call CUDA; when the last reference goes inside
a CUDA host function or user-object destructor, where CUDA forbids API calls,
the :class:`Lent` hands what it holds to cuguard's release thread, which lets
go of it there (O5).
"""

from __future__ import annotations

import ctypes
import gc
import sys
from typing import Any

from cuguard.errors import defer, deferring_lock, in_driver_callback

__all__ = ["KDL_CUDA", "KDL_CUDA_HOST", "Lent", "export", "import_capsule", "live_exports"]

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
_KDL_UINT = 1
_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"
_FLAG_READ_ONLY = 1


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


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_DELETER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER_TYPE),
]
_DLManagedTensorVersioned._fields_ = [
    ("version", _DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER_TYPE),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", _DLTensor),
]

# Private prototypes: the shared ``ctypes.pythonapi`` entries may be retyped by other code.
_PY = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _PY)
)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _PY))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _PY)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _PY))

# address of a managed tensor -> what it keeps alive (the struct, its shape, the owner)
_exports: dict[int, tuple[Any, ...]] = {}
# address of a managed tensor -> its capsule, until nobody else holds the capsule
_capsules: dict[int, Any] = {}
_owners: dict[int, int] = {}  # id(owner) -> number of live exports
# Re-entrant: a garbage collection inside a locked section may delete an imported tensor
# (whose deleter comes back here) or run the collection hook, in the same thread.
_lock = deferring_lock(reentrant=True)


def _refs(table: dict[int, Any], key: int) -> int:
    """``sys.getrefcount`` of ``table[key]`` as seen from here (-1 if absent)."""
    held = table.get(key)
    return -1 if held is None else sys.getrefcount(held)


# What _refs says of a capsule that only a table holds, measured the same way once (so that
# the interpreter's own way of counting references cannot skew the comparison).
_ONLY_OURS = _refs({0: _capsule_new(1, b"cuguard-probe", None)}, 0)


def _end(address: int) -> Any:
    """End an export (under the lock); return its entry, to be dropped outside the lock."""
    entry = _exports.pop(address, None)
    if entry is not None:
        key = id(entry[-1])
        left = _owners.get(key, 0) - 1
        if left > 0:
            _owners[key] = left
        else:
            _owners.pop(key, None)
    return entry


def _deleter(address: int | None) -> None:
    # Called by the consumer once it is done with a tensor it consumed.
    with _lock:
        capsule = _capsules.pop(address or 0, None)
        entry = _end(address or 0)
    del capsule, entry  # outside the lock: the last reference to the owner may go here


_DELETER = _DELETER_TYPE(_deleter)


def collect(blocking: bool = True) -> None:
    """Let go of the capsules nobody else holds; end the exports of those never consumed.

    Safe points only: no exception may be set (this runs Python code). Not
    ``blocking``: do nothing if another thread holds the lock.
    """
    if not _capsules:
        return
    if not _lock.acquire(blocking):
        return
    dropped: list[Any] = []
    try:
        for address in list(_capsules):
            if _refs(_capsules, address) != _ONLY_OURS:
                continue  # gone meanwhile, or someone else holds the capsule still
            capsule = _capsules.pop(address)
            if _capsule_is_valid(capsule, _NAME) or _capsule_is_valid(capsule, _NAME_VERSIONED):
                dropped.append(_end(address))  # never consumed: the export ends here
            dropped.append(capsule)
    finally:
        _lock.release()
    del dropped  # outside the lock: the last reference to an owner may go here


def _after_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and _capsules and not sys.is_finalizing():
        collect(blocking=False)


gc.callbacks.append(_after_gc)


def exported(owner: Any) -> bool:
    """Whether ``owner`` has a live export (after letting go of the capsules nobody holds)."""
    collect()
    return id(owner) in _owners


def export(owner: Any, ptr: int, size: int, device_type: int, device_id: int, *, versioned: bool) -> Any:
    """A capsule over ``size`` bytes at ``ptr`` (1-D ``uint8``), keeping ``owner`` alive while live."""
    collect()
    shape = (ctypes.c_int64 * 1)(size)
    managed: Any
    if versioned:
        managed = _DLManagedTensorVersioned()
        managed.version = _DLPackVersion(1, 0)
        managed.flags = 0
        name = _NAME_VERSIONED
    else:
        managed = _DLManagedTensor()
        name = _NAME
    tensor = managed.dl_tensor
    tensor.data = ptr
    tensor.device = _DLDevice(device_type, device_id)
    tensor.ndim = 1
    tensor.dtype = _DLDataType(_KDL_UINT, 8, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.POINTER(ctypes.c_int64)()
    tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _DELETER
    address = ctypes.addressof(managed)
    capsule = _capsule_new(address, name, None)
    with _lock:
        _exports[address] = (managed, shape, owner)
        _capsules[address] = capsule
        _owners[id(owner)] = _owners.get(id(owner), 0) + 1
    return capsule


def live_exports() -> int:
    """How many exported tensors are still live (held unconsumed, or consumed and not yet deleted)."""
    collect()
    with _lock:
        return len(_exports)


# --- import ----------------------------------------------------------------------------------


def _call_deleter(deleter: int, address: int) -> None:
    _DELETER_TYPE(deleter)(address)


def _let_go(held: object) -> None:
    """Run on the release thread: ``held``'s last reference goes with this call's arguments."""
    del held


class Imported:
    """Keeps a consumed foreign tensor: calls the producer's deleter when collected.

    Collected inside a CUDA host function or user-object destructor, the
    deleter (which may call CUDA) is handed to cuguard's release thread and
    called there (O5). Once the interpreter is finalizing nothing is called
    (the tensor is leaked, S1).
    """

    __slots__ = ("__weakref__", "_address", "_deleter")

    def __init__(self, address: int, deleter: int | None) -> None:
        self._address = address
        self._deleter = deleter

    def release(self) -> None:
        """Call the producer's deleter now (once; later calls do nothing)."""
        deleter, self._deleter = self._deleter, None
        if deleter:
            _call_deleter(deleter, self._address)

    def __del__(self, _finalizing: Any = sys.is_finalizing) -> None:
        if _finalizing():
            return
        if in_driver_callback():
            deleter, self._deleter = self._deleter, None
            if deleter:
                defer(_call_deleter, deleter, self._address)  # O5: never on the driver's thread
            return
        self.release()


class Lent:
    """Holds what keeps memory made elsewhere alive; lets go of it on the release thread when due on a driver's thread.

    Another library's object (a producer's array, a consumed tensor) may call
    CUDA when it goes away. Collected inside a CUDA host function or
    user-object destructor, where CUDA forbids API calls, this object hands
    what it holds to cuguard's release thread, which drops it there (O5).
    Never raises.
    """

    __slots__ = ("_held",)

    def __init__(self, held: object) -> None:
        self._held = held

    @property
    def held(self) -> object:
        """What is kept alive."""
        return self._held

    def __del__(self, _finalizing: Any = sys.is_finalizing) -> None:
        if not _finalizing() and in_driver_callback():
            held, self._held = self._held, None
            defer(_let_go, held)  # the queue holds the last reference now; the release thread drops it


def import_capsule(capsule: Any) -> tuple[int, int, int, int, Imported]:
    """Consume a producer's capsule: ``(address, nbytes, device_type, device_id, keeper)``.

    The tensor must be C-contiguous with whole-byte elements; anything else
    raises ``BufferError`` and leaves the capsule unconsumed (its producer
    deletes it). A capsule of another kind raises ``TypeError``.
    """
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"__dlpack__() must return a DLPack capsule, not {type(capsule).__name__}")
    if _capsule_is_valid(capsule, _NAME_VERSIONED):
        managed: Any = _DLManagedTensorVersioned.from_address(_capsule_get_pointer(capsule, _NAME_VERSIONED))
        if managed.version.major != 1:
            raise BufferError(f"unsupported DLPack version {managed.version.major}.{managed.version.minor}")
        used = _USED_VERSIONED
    elif _capsule_is_valid(capsule, _NAME):
        managed = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, _NAME))
        used = _USED
    else:
        raise BufferError("the DLPack capsule was consumed already or is not a DLPack tensor")
    tensor = managed.dl_tensor
    dtype = tensor.dtype
    if dtype.bits % 8 or dtype.lanes < 1:
        raise BufferError(f"DLPack elements of {dtype.bits} bits x {dtype.lanes} lanes are not whole bytes")
    itemsize = dtype.bits // 8 * dtype.lanes
    count = 1
    dims = [int(tensor.shape[i]) for i in range(tensor.ndim)]
    for dim in dims:
        count *= dim
    if tensor.strides and count:
        expected = 1
        for i in reversed(range(tensor.ndim)):
            if dims[i] != 1 and int(tensor.strides[i]) != expected:
                raise BufferError("only C-contiguous DLPack tensors can be imported as a Buffer")
            expected *= dims[i]
    address = int(tensor.data or 0) + int(tensor.byte_offset)
    deleter = ctypes.cast(managed.deleter, ctypes.c_void_p).value
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    keeper = Imported(ctypes.addressof(managed), deleter)
    if _capsule_set_name(capsule, used):
        keeper._deleter = None
        raise BufferError("the DLPack capsule could not be marked consumed")
    return address, count * itemsize, device[0], device[1], keeper
