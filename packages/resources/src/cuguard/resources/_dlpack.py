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

Typed export. :func:`export` also describes memory with a shape, strides
(in elements) and an element type, for
:class:`~cuguard.resources.StridedMemoryView`; the tensor's shape and strides
arrays live as long as the export.

Import. :func:`read_capsule` reads a capsule of another library (any DLPack
producer) into a :class:`TensorInfo` (address, device, shape, strides, element
type, read-only flag) and, once the caller accepted what it read, consumes it;
:func:`import_capsule` is that for a Buffer (C-contiguous tensors only). The
producer's deleter is called when the returned keeper is collected.
:func:`read_cuda_array_interface` is the one reader of
``__cuda_array_interface__`` dictionaries.

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
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cuguard.errors.lowlevel import defer, deferring_lock, in_driver_callback

__all__ = [
    "KDL_CPU",
    "KDL_CUDA",
    "KDL_CUDA_HOST",
    "KDL_CUDA_MANAGED",
    "ArrayInterface",
    "Lent",
    "TensorInfo",
    "c_contiguous",
    "export",
    "import_capsule",
    "live_exports",
    "read_capsule",
    "read_cuda_array_interface",
]

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
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


def export(
    owner: Any,
    ptr: int,
    size: int,
    device_type: int,
    device_id: int,
    *,
    versioned: bool,
    shape: tuple[int, ...] | None = None,
    strides: tuple[int, ...] | None = None,
    dtype: tuple[int, int, int] = (_KDL_UINT, 8, 1),
    readonly: bool = False,
    keep: object = None,
) -> Any:
    """A capsule over the memory at ``ptr``, keeping ``owner`` (and ``keep``) alive while live.

    Without ``shape``: ``size`` bytes as a 1-D ``uint8`` tensor. With it: that
    shape, ``strides`` in elements (``None``: C-contiguous), ``dtype`` as
    DLPack's ``(code, bits, lanes)`` and the read-only flag (versioned capsules
    carry it; legacy ones cannot). ``owner`` is what :func:`exported` answers
    for (the memory whose ``close()`` must refuse while the export is live).
    """
    collect()
    dims = (size,) if shape is None else shape
    shape_array = (ctypes.c_int64 * max(len(dims), 1))(*dims)
    strides_array = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
    managed: Any
    if versioned:
        managed = _DLManagedTensorVersioned()
        managed.version = _DLPackVersion(1, 0)
        managed.flags = _FLAG_READ_ONLY if readonly else 0
        name = _NAME_VERSIONED
    else:
        managed = _DLManagedTensor()
        name = _NAME
    tensor = managed.dl_tensor
    tensor.data = ptr
    tensor.device = _DLDevice(device_type, device_id)
    tensor.ndim = len(dims)
    tensor.dtype = _DLDataType(*dtype)
    tensor.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    if strides_array is None:
        tensor.strides = ctypes.POINTER(ctypes.c_int64)()
    else:
        tensor.strides = ctypes.cast(strides_array, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _DELETER
    address = ctypes.addressof(managed)
    capsule = _capsule_new(address, name, None)
    with _lock:
        _exports[address] = (managed, shape_array, strides_array, keep, owner)
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


def _let_go(box: list[object]) -> None:
    """Run on the release thread: empty ``box``, which holds the only reference to what was lent."""
    box.clear()


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
            # Only the box holds it once handed over: a reference left in this frame would be the last
            # one if the release thread ran first, and would go here, on the driver's thread.
            box = [self._held]
            self._held = None
            defer(_let_go, box)


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """What a DLPack tensor says of its memory (see :func:`read_capsule`).

    ``address`` includes the tensor's byte offset; ``strides`` are in elements
    (``None`` when the producer gave none: C-contiguous); ``dtype`` is DLPack's
    ``(code, bits, lanes)``; ``readonly`` is the versioned capsule's read-only
    flag (legacy capsules have none).
    """

    address: int
    device_type: int
    device_id: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dtype: tuple[int, int, int]
    readonly: bool

    @property
    def itemsize(self) -> int:
        """Bytes per element (whole bytes: :func:`read_capsule` refuses others)."""
        _code, bits, lanes = self.dtype
        return bits // 8 * lanes

    @property
    def count(self) -> int:
        """The number of elements."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count


def c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, unit: int = 1) -> bool:
    """Whether ``strides`` (in multiples of ``unit``; ``None``: C-contiguous) lay ``shape`` out densely in C order."""
    if strides is None:
        return True
    if len(strides) != len(shape):
        return False
    count = 1
    for dim in shape:
        count *= dim
    if not count:
        return True
    expected = unit
    for dim, step in zip(reversed(shape), reversed(strides), strict=True):
        if dim != 1 and step != expected:
            return False
        expected *= dim
    return True


def read_capsule(capsule: Any, accept: Callable[[TensorInfo], None] | None = None) -> tuple[TensorInfo, Imported]:
    """Read a producer's capsule and consume it: ``(what it describes, keeper)``.

    ``accept`` is called with what was read before the capsule is consumed:
    whatever it raises leaves the capsule unconsumed (its producer deletes
    it). A capsule of another kind raises ``TypeError``; one consumed already,
    of an unknown DLPack major version, with a negative dimension, or whose
    elements are not whole bytes raises ``BufferError`` (unconsumed too).
    """
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"__dlpack__() must return a DLPack capsule, not {type(capsule).__name__}")
    readonly = False
    if _capsule_is_valid(capsule, _NAME_VERSIONED):
        managed: Any = _DLManagedTensorVersioned.from_address(_capsule_get_pointer(capsule, _NAME_VERSIONED))
        if managed.version.major != 1:
            raise BufferError(f"unsupported DLPack version {managed.version.major}.{managed.version.minor}")
        readonly = bool(managed.flags & _FLAG_READ_ONLY)
        used = _USED_VERSIONED
    elif _capsule_is_valid(capsule, _NAME):
        managed = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, _NAME))
        used = _USED
    else:
        raise BufferError("the DLPack capsule was consumed already or is not a DLPack tensor")
    tensor = managed.dl_tensor
    dtype = tensor.dtype
    if dtype.bits % 8 or dtype.lanes < 1 or not dtype.bits:
        raise BufferError(f"DLPack elements of {dtype.bits} bits x {dtype.lanes} lanes are not whole bytes")
    ndim = int(tensor.ndim)
    if ndim < 0:
        raise BufferError(f"a DLPack tensor of {ndim} dimensions")
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if any(dim < 0 for dim in shape):
        raise BufferError(f"a DLPack tensor of shape {shape}")
    strides = tuple(int(tensor.strides[i]) for i in range(ndim)) if tensor.strides and ndim else None
    info = TensorInfo(
        address=int(tensor.data or 0) + int(tensor.byte_offset),
        device_type=int(tensor.device.device_type),
        device_id=int(tensor.device.device_id),
        shape=shape,
        strides=strides,
        dtype=(int(dtype.code), int(dtype.bits), int(dtype.lanes)),
        readonly=readonly,
    )
    if accept is not None:
        accept(info)
    deleter = ctypes.cast(managed.deleter, ctypes.c_void_p).value
    keeper = Imported(ctypes.addressof(managed), deleter)
    if _capsule_set_name(capsule, used):
        keeper._deleter = None
        raise BufferError("the DLPack capsule could not be marked consumed")
    return info, keeper


def _whole_buffer(info: TensorInfo) -> None:
    if not c_contiguous(info.shape, info.strides):
        raise BufferError("only C-contiguous DLPack tensors can be imported as a Buffer")


def import_capsule(capsule: Any) -> tuple[int, int, int, int, Imported]:
    """Consume a producer's capsule: ``(address, nbytes, device_type, device_id, keeper)``.

    The tensor must be C-contiguous with whole-byte elements; anything else
    raises ``BufferError`` and leaves the capsule unconsumed (its producer
    deletes it). A capsule of another kind raises ``TypeError``.
    """
    info, keeper = read_capsule(capsule, _whole_buffer)
    return info.address, info.count * info.itemsize, info.device_type, info.device_id, keeper


# --- the CUDA Array Interface ---------------------------------------------------------------

_TYPESTR = re.compile(r"[<>|=][a-zA-Z]([1-9][0-9]*)\Z")


@dataclass(frozen=True, slots=True)
class ArrayInterface:
    """What a ``__cuda_array_interface__`` says (see :func:`read_cuda_array_interface`).

    ``strides`` are in bytes (``None``: C-contiguous); ``stream`` is the
    producer's stream handle, or ``None`` when it names none.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    typestr: str
    itemsize: int
    readonly: bool
    stream: int | None

    @property
    def count(self) -> int:
        """The number of elements."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count


def read_cuda_array_interface(obj: Any, what: str) -> ArrayInterface:
    """Read ``obj.__cuda_array_interface__``; ``what`` names the import in messages (``"a Buffer"``).

    Raises ``AttributeError`` when ``obj`` has no interface (the caller turns
    it into its ``TypeError``), and ``BufferError`` for one that is not a dict,
    has a mask, or is malformed (a missing key, a typestr without an item
    size, a negative address or dimension, strides of another length).
    """
    interface = obj.__cuda_array_interface__
    name = type(obj).__name__
    if not isinstance(interface, dict):
        raise BufferError(f"__cuda_array_interface__ of {name} is not a dict")
    if interface.get("mask") is not None:
        raise BufferError(f"masked arrays cannot be imported as {what}")
    try:
        shape = tuple(int(n) for n in interface["shape"])
        typestr = str(interface["typestr"])
        match = _TYPESTR.match(typestr)
        if match is None:
            raise ValueError(f"typestr {typestr!r}")
        itemsize = int(match.group(1))
        data = interface["data"]
        ptr = int(data[0])
        readonly = bool(data[1]) if len(data) > 1 else False
        given = interface.get("strides")
        strides = None if given is None else tuple(int(step) for step in given)
        if strides is not None and len(strides) != len(shape):
            raise ValueError(f"{len(strides)} strides for {len(shape)} dimensions")
        producer = interface.get("stream")
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise BufferError(f"malformed __cuda_array_interface__ of {name}: {exc}") from None
    if ptr < 0 or any(n < 0 for n in shape):
        raise BufferError(f"malformed __cuda_array_interface__ of {name}: negative address or size")
    stream = producer if isinstance(producer, int) and not isinstance(producer, bool) and producer else None
    return ArrayInterface(ptr, shape, strides, typestr, itemsize, readonly, stream)
