"""Typed views of memory: :class:`StridedMemoryView` and :func:`args_viewable_as_strided_memory`.

A view describes memory it does not own (its address, shape, strides in
elements, element type, device and read-only flag) and keeps what holds the
memory alive: the producer of a DLPack tensor or a CUDA Array Interface, or
the cuguard buffer it was made over. It frees nothing. It exports itself again
with its type, through DLPack and the CUDA Array Interface, and passes to
kernels as its address wherever a :class:`~cuguard.resources.Buffer` does.

Parsing is the import's own: :func:`~cuguard.resources._dlpack.read_capsule`
and :func:`~cuguard.resources._dlpack.read_cuda_array_interface`, the readers
:meth:`Buffer.from_dlpack` and :meth:`Buffer.from_cuda_array_interface` use.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, ParamSpec, TypeVar

from cuguard.errors.lowlevel import Unique, int_argument, is_integer, wrong_kind
from cuguard.resources import _dlpack
from cuguard.resources._base import driver_types
from cuguard.resources._memory import Buffer, PinnedBuffer
from cuguard.resources._stream import Stream, as_stream

__all__ = [
    "StridedMemoryView",
    "args_viewable_as_strided_memory",
    "check_read_only",
    "memory_of",
    "memory_uses",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

# DLPack type codes
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_DEVICE_TYPES = (_dlpack.KDL_CPU, _dlpack.KDL_CUDA, _dlpack.KDL_CUDA_HOST, _dlpack.KDL_CUDA_MANAGED)
_MAX_NDIM = 64
_INT64 = 1 << 63
_NO_STREAM = -1


def _typestr_of(code: int, bits: int, lanes: int) -> str:
    """The NumPy type string of a DLPack element type; ``BufferError`` for one NumPy cannot name."""
    if lanes == 1:
        if code in (_INT, _UINT, _FLOAT) and bits in (8, 16, 32, 64) and (code != _FLOAT or bits != 8):
            return "<" + "iuf"[code] + str(bits // 8)
        if code == _COMPLEX and bits in (64, 128):
            return f"<c{bits // 8}"
        if code == _BOOL and bits == 8:
            return "|b1"
        if code == _BFLOAT and bits == 16:
            return "bfloat16"
    raise BufferError(f"DLPack elements of type code {code}, {bits} bits x {lanes} lanes have no NumPy dtype")


def _dlpack_type(typestr: str | None, itemsize: int) -> tuple[int, int, int]:
    """DLPack's ``(code, bits, lanes)`` of a NumPy type string; ``BufferError`` when DLPack has none."""
    if typestr is None:
        raise BufferError("a view without a dtype (made with itemsize only) cannot be exported with its type")
    if typestr == "bfloat16":
        return (_BFLOAT, 16, 1)
    order, kind = typestr[0], typestr[1:2]
    bits = itemsize * 8
    if order == ">" and itemsize > 1:
        raise BufferError(f"elements of type {typestr!r} (big-endian) cannot be exported")
    if kind == "b" and itemsize == 1:
        return (_BOOL, 8, 1)
    if kind in "iu" and itemsize in (1, 2, 4, 8):
        return (_INT if kind == "i" else _UINT, bits, 1)
    if kind == "f" and itemsize in (2, 4, 8):
        return (_FLOAT, bits, 1)
    if kind == "c" and itemsize in (8, 16):
        return (_COMPLEX, bits, 1)
    raise BufferError(f"elements of type {typestr!r} have no DLPack type")


def _numpy_dtype(typestr: str) -> Any:
    import numpy as np

    if typestr == "bfloat16":
        importlib.import_module("ml_dtypes")  # registers bfloat16 with NumPy
    return np.dtype(typestr)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    step = 1
    for dim in reversed(shape):
        out.append(step)
        step *= dim
    return tuple(reversed(out))


def _stream_ptr(value: object) -> tuple[int | None, Stream | None]:
    """``stream_ptr`` as ``(handle or None or -1, the Stream it names if one was given)``."""
    if value is None:
        return None, None
    if type(value) is Stream:
        return int(value.handle), value
    if is_integer(value):
        return int_argument("stream_ptr", value, -1, 1 << 64), None
    if isinstance(value, driver_types().CUstream):
        return int(value), None
    if getattr(type(value), "__cuda_stream__", None) is not None:
        stream = as_stream(value, "stream_ptr")
        return int(stream.handle), stream
    raise wrong_kind("stream_ptr", "a stream handle (an int, -1 or a CUstream), a Stream or None", value)


def _shape_argument(shape: object) -> tuple[int, ...]:
    if is_integer(shape):
        return (int_argument("shape", shape, 0, _INT64),)
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence):
        raise wrong_kind("shape", "a tuple of ints", shape)
    if len(shape) > _MAX_NDIM:
        raise ValueError(f"shape must have at most {_MAX_NDIM} dimensions, not {len(shape)}")
    return tuple(int_argument("shape", dim, 0, _INT64) for dim in shape)


def _strides_argument(strides: object, ndim: int) -> tuple[int, ...] | None:
    if strides is None:
        return None
    if isinstance(strides, str | bytes) or not isinstance(strides, Sequence):
        raise wrong_kind("strides", "a tuple of ints or None", strides)
    if len(strides) != ndim:
        raise ValueError(f"strides must have one step per dimension ({ndim}), not {len(strides)}")
    return tuple(int_argument("strides", step, -_INT64, _INT64) for step in strides)


def _extent(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """The lowest and one past the highest byte offset the layout reaches (``(0, 0)`` when empty)."""
    if any(dim == 0 for dim in shape):
        return 0, 0
    low = high = 0
    for dim, step in zip(shape, strides, strict=True):
        reach = (dim - 1) * step * itemsize
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high + itemsize


class StridedMemoryView(Unique):
    """A typed view of memory: address, shape, strides, dtype, device and read-only flag (``cuda.core``'s).

    Made from any DLPack producer (:meth:`from_dlpack`: CuPy, PyTorch, JAX,
    NumPy arrays on the host, cuguard buffers, other views), any
    ``__cuda_array_interface__`` producer (:meth:`from_cuda_array_interface`),
    either one (``StridedMemoryView(obj, stream_ptr)`` and
    :meth:`from_any_interface`: DLPack first), or a cuguard
    :class:`~cuguard.resources.Buffer` or
    :class:`~cuguard.resources.PinnedBuffer` with a shape and a dtype
    (:meth:`from_buffer`).

    The view owns no memory and frees nothing: it keeps its producer alive
    (:attr:`exporting_obj`; a consumed DLPack tensor is deleted by its
    producer's deleter once the view is collected, on cuguard's release
    thread if that happens inside a CUDA host function). A view over a cuguard
    buffer that was closed refuses use (:attr:`ptr`, exports and kernel
    arguments raise :class:`~cuguard.errors.ResourceClosedError`).

    It exports itself with its type: ``__dlpack__`` (versioned and legacy
    capsules, as :meth:`Buffer.__dlpack__`) and ``__cuda_array_interface__``
    (device-accessible memory only) describe its shape, strides and dtype. It
    passes to :func:`~cuguard.resources.launch`, :meth:`Kernel.pack` and graph
    kernel nodes as its address; a view of host memory
    (``is_device_accessible`` false) is refused there with ``TypeError``.

    ``stream_ptr`` (the consumer's stream: an int handle, a ``CUstream``, a
    :class:`~cuguard.resources.Stream` or any ``__cuda_stream__`` object)
    orders the producer's work before it: a DLPack producer is handed it
    (``__dlpack__(stream=...)``), a CUDA Array Interface producer's stream is
    made to be waited for by it. ``-1`` asks for no ordering. ``None`` (where
    ``cuda.core`` raises ``BufferError`` for device memory) orders as
    :meth:`Buffer.from_dlpack` and :meth:`Buffer.from_cuda_array_interface` do
    without a stream: the DLPack producer orders its work before the legacy
    default stream, and a CUDA Array Interface producer's stream is
    synchronized.

    Views cannot be copied or pickled (``TypeError``): the address means
    nothing in another process, and the view is what keeps the memory alive.
    """

    __slots__ = (
        "__weakref__",
        "_buffer",
        "_device_id",
        "_device_type",
        "_held",
        "_itemsize",
        "_ptr",
        "_readonly",
        "_shape",
        "_stream",
        "_stream_ptr",
        "_strides",
        "_typestr",
    )

    _buffer: Buffer | PinnedBuffer | None  # the cuguard memory under the view, if any (checked open on use)
    _device_id: int
    _device_type: int
    _held: _dlpack.Lent  # (keeper of a consumed tensor or None, exporting object): released off driver threads
    _ptr: int
    _readonly: bool
    _shape: tuple[int, ...]
    _strides: tuple[int, ...] | None  # in elements; None: C-contiguous
    _stream_ptr: int | None
    _stream: Stream | None  # the stream-ordered buffer's stream a consumer must wait for
    _itemsize: int
    _typestr: str | None

    def __init__(self, obj: Any = None, stream_ptr: Any = None) -> None:
        """View ``obj`` through DLPack, else through the CUDA Array Interface (see :meth:`from_any_interface`)."""
        self._fill_any(obj, stream_ptr)

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def from_dlpack(cls, obj: Any, stream_ptr: Any = None) -> StridedMemoryView:
        """A view of a DLPack producer's tensor (CuPy, PyTorch, JAX, NumPy, cuguard buffers and views).

        The producer's ``__dlpack_device__`` must name the host (``kDLCPU``:
        ``device_id`` is -1), a CUDA device, pinned or managed memory; its
        ``__dlpack__`` is asked for a versioned capsule, or a legacy one from
        producers that do not know ``max_version``. ``stream_ptr`` is handed to
        the producer (see the class docstring; host tensors are asked with no
        stream). The view keeps the consumed tensor and ``obj`` alive.

        An object without ``__dlpack__`` and ``__dlpack_device__`` raises
        ``TypeError`` naming ``obj``; a bad ``stream_ptr`` ``TypeError`` or
        ``ValueError``; a device of another kind, a capsule on another device
        than announced, elements that are not whole bytes or have no NumPy
        dtype (vector lanes...) ``BufferError``, before the capsule is
        consumed (its producer deletes it). What the producer raises
        propagates.
        """
        self = cls.__new__(cls)
        self._fill_dlpack(obj, stream_ptr)
        return self

    @classmethod
    def from_cuda_array_interface(cls, obj: Any, stream_ptr: Any = None, *, device: Any = None) -> StridedMemoryView:
        """A view of a ``__cuda_array_interface__`` producer's array (Numba, CuPy...).

        ``device`` (a :class:`~cuguard.resources.Device` or ordinal; default:
        the device of the current context, or device 0) is the device holding
        the array: the interface does not say. When the interface names a
        producer stream, the ``stream_ptr`` stream waits for it; ``None``
        synchronizes the producer's stream, ``-1`` does neither. The
        interface's read-only flag (``data[1]``) becomes :attr:`readonly`.

        An object without the interface raises ``TypeError`` naming ``obj``; a
        malformed interface (not a dict, a mask, a missing key, strides that
        are not whole elements) ``BufferError``; a failed wait or
        synchronization :class:`~cuguard.errors.CUDAError` (no view is made
        then).
        """
        self = cls.__new__(cls)
        self._fill_cai(obj, stream_ptr, device)
        return self

    @classmethod
    def from_any_interface(cls, obj: Any, stream_ptr: Any = None) -> StridedMemoryView:
        """:meth:`from_dlpack` for DLPack producers, else :meth:`from_cuda_array_interface`.

        An object with neither protocol raises ``TypeError`` naming ``obj``
        (``cuda.core`` raises ``RuntimeError``).
        """
        self = cls.__new__(cls)
        self._fill_any(obj, stream_ptr)
        return self

    @classmethod
    def from_buffer(
        cls,
        buffer: Buffer | PinnedBuffer,
        shape: int | Sequence[int],
        strides: Sequence[int] | None = None,
        *,
        itemsize: int | None = None,
        dtype: Any = None,
        is_readonly: bool = False,
    ) -> StridedMemoryView:
        """A view of a cuguard :class:`~cuguard.resources.Buffer` or :class:`~cuguard.resources.PinnedBuffer`.

        ``shape`` is a tuple of sizes (or one int); ``strides`` are in
        elements (``None``: C-contiguous); ``dtype`` (anything
        ``numpy.dtype`` takes) or ``itemsize`` (bytes per element) gives the
        element size; with both they must agree. The layout must lie within
        the buffer. As in ``cuda.core``, nothing is synchronized: order the
        work on the buffer yourself. The view keeps the buffer alive; once the
        buffer is closed the view refuses use. A view of a stream-ordered
        buffer makes DLPack consumers that name their stream wait for the
        buffer's stream, as the buffer's own export does.

        Raises ``TypeError`` for another kind of ``buffer``, ``shape``,
        ``strides`` or ``is_readonly``, or a non-integer size; ``ValueError``
        for neither or disagreeing ``dtype`` and ``itemsize``, a negative
        size, strides of another length or a layout outside the buffer;
        :class:`~cuguard.errors.ResourceClosedError` for a closed buffer;
        ``ImportError`` for a ``dtype`` without NumPy.
        """
        if not isinstance(buffer, Buffer | PinnedBuffer):
            raise wrong_kind("buffer", "a Buffer or a PinnedBuffer", buffer)
        ptr = buffer._address()  # a closed buffer refuses here
        dims = _shape_argument(shape)
        steps = _strides_argument(strides, len(dims))
        if type(is_readonly) is not bool:
            raise wrong_kind("is_readonly", "a bool", is_readonly)
        typestr: str | None = None
        if dtype is not None:
            described = _numpy_dtype_argument(dtype)
            typestr = "bfloat16" if described.name == "bfloat16" else described.str
            size = int(described.itemsize)
            if itemsize is not None and int_argument("itemsize", itemsize, 1, 1 << 31) != size:
                raise ValueError(f"itemsize {itemsize} does not match the dtype's ({described.name}: {size})")
        elif itemsize is not None:
            size = int_argument("itemsize", itemsize, 1, 1 << 31)
        else:
            raise ValueError("from_buffer needs a dtype or an itemsize")
        low, high = _extent(dims, steps if steps is not None else _c_strides(dims), size)
        if low < 0 or high > buffer.size:
            raise ValueError(
                f"a layout of shape {dims}, strides {steps} and {size}-byte elements reaches bytes {low} to "
                f"{high}, outside the buffer's {buffer.size}"
            )
        self = cls.__new__(cls)
        self._ptr = ptr
        self._shape = dims
        self._strides = None if _dlpack.c_contiguous(dims, steps) else steps
        self._itemsize = size
        self._typestr = typestr
        self._readonly = is_readonly
        self._stream_ptr = None
        self._buffer = buffer
        if isinstance(buffer, PinnedBuffer):
            self._device_type, self._device_id = _dlpack.KDL_CUDA_HOST, 0
            self._stream = None
        else:
            self._device_type, self._device_id = _dlpack.KDL_CUDA, buffer.device
            self._stream = buffer.stream
        self._held = _dlpack.Lent((None, buffer))
        return self

    def _fill_any(self, obj: Any, stream_ptr: Any) -> None:
        kind = type(obj)
        if getattr(kind, "__dlpack__", None) is not None and getattr(kind, "__dlpack_device__", None) is not None:
            self._fill_dlpack(obj, stream_ptr)
        elif obj is not None and hasattr(obj, "__cuda_array_interface__"):
            self._fill_cai(obj, stream_ptr, None)
        else:
            raise wrong_kind("obj", "an object with __dlpack__ or __cuda_array_interface__", obj)

    def _fill_dlpack(self, obj: Any, stream_ptr: Any) -> None:
        kind = type(obj)
        if getattr(kind, "__dlpack__", None) is None or getattr(kind, "__dlpack_device__", None) is None:
            raise wrong_kind("obj", "an object with __dlpack__ and __dlpack_device__", obj)
        handle = _stream_ptr(stream_ptr)[0]
        announced = obj.__dlpack_device__()
        device_type = int(announced[0])
        if device_type not in _DEVICE_TYPES:
            raise BufferError(f"{kind.__name__} is on DLPack device type {device_type}, which a view cannot read")
        # The host has no streams (and NumPy refuses one); 0 is no stream handle DLPack allows.
        given = None if device_type == _dlpack.KDL_CPU or handle == 0 else handle
        try:
            capsule = obj.__dlpack__(stream=given, max_version=(1, 0))
        except TypeError:  # a producer of the DLPack 0.x protocol
            capsule = obj.__dlpack__(stream=given)

        def accept(info: _dlpack.TensorInfo) -> None:
            if info.device_type != device_type:
                raise BufferError(
                    f"{kind.__name__}.__dlpack__() gave a tensor on DLPack device type {info.device_type}, "
                    f"not {device_type}"
                )
            _typestr_of(*info.dtype)

        info, keeper = _dlpack.read_capsule(capsule, accept)
        self._ptr = info.address
        self._shape = info.shape
        self._strides = None if _dlpack.c_contiguous(info.shape, info.strides) else info.strides
        self._itemsize = info.itemsize
        self._typestr = _typestr_of(*info.dtype)
        self._readonly = info.readonly
        self._stream_ptr = handle if handle is not None and handle != _NO_STREAM else None
        self._device_type = device_type
        self._device_id = -1 if device_type == _dlpack.KDL_CPU else info.device_id
        self._buffer = None
        self._stream = None
        self._held = _dlpack.Lent((keeper, obj))

    def _fill_cai(self, obj: Any, stream_ptr: Any, device: Any) -> None:
        from cuguard.resources._device import Device

        try:
            interface = _dlpack.read_cuda_array_interface(obj, "a StridedMemoryView")
        except AttributeError:
            raise wrong_kind("obj", "an object with __cuda_array_interface__", obj) from None
        handle, consumer = _stream_ptr(stream_ptr)
        if device is None:
            device = Device()
        elif not isinstance(device, Device):
            if not is_integer(device):
                raise wrong_kind("device", "a Device or a device ordinal", device)
            device = Device(int_argument("device", device, 0, 1 << 31))
        strides: tuple[int, ...] | None = None
        if interface.strides is not None:
            if any(step % interface.itemsize for step in interface.strides):
                raise BufferError(
                    f"strides {interface.strides} of {type(obj).__name__} are not whole {interface.itemsize}-byte "
                    "elements"
                )
            strides = tuple(step // interface.itemsize for step in interface.strides)
        producer = interface.stream
        if producer is not None and handle not in (_NO_STREAM, producer):
            types = driver_types()
            theirs = Stream._make(types.CUstream(producer), device.context, device.ordinal, owned=False)
            if handle is None:
                theirs.sync()
            else:
                if consumer is None:
                    consumer = Stream._make(types.CUstream(handle), device.context, device.ordinal, owned=False)
                consumer.wait(theirs)
        self._ptr = interface.ptr
        self._shape = interface.shape
        self._strides = None if _dlpack.c_contiguous(interface.shape, strides) else strides
        self._itemsize = interface.itemsize
        self._typestr = interface.typestr
        self._readonly = interface.readonly
        self._stream_ptr = handle if handle is not None and handle != _NO_STREAM else None
        self._device_type = _dlpack.KDL_CUDA
        self._device_id = device.ordinal
        self._buffer = None
        self._stream = None
        self._held = _dlpack.Lent((None, obj))

    # --- what the view says ----------------------------------------------------------------

    @property
    def ptr(self) -> int:
        """The address of the first element, as an int.

        Raises :class:`~cuguard.errors.ResourceClosedError` once the cuguard
        buffer the view was made over is closed.
        """
        buffer = self._buffer
        if buffer is not None and (buffer._closed or buffer._context._closed):
            buffer._check_open()
        return self._ptr

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension."""
        return self._shape

    @property
    def strides(self) -> tuple[int, ...] | None:
        """The step of each dimension in elements (not bytes); ``None`` when the layout is C-contiguous."""
        return self._strides

    @property
    def dtype(self) -> Any:
        """The element type as a ``numpy.dtype``, or ``None`` for a view made with an itemsize only.

        Raises ``ImportError`` without NumPy (and, for ``bfloat16``, without ``ml_dtypes``).
        """
        typestr = self._typestr
        return None if typestr is None else _numpy_dtype(typestr)

    @property
    def size(self) -> int:
        """The number of elements."""
        count = 1
        for dim in self._shape:
            count *= dim
        return count

    @property
    def device_id(self) -> int:
        """The device ordinal holding the memory; -1 for host memory no device reads."""
        return self._device_id

    @property
    def is_device_accessible(self) -> bool:
        """Whether kernels can read the memory (device, pinned or managed memory)."""
        return self._device_type != _dlpack.KDL_CPU

    @property
    def readonly(self) -> bool:
        """Whether the producer marked the memory read-only (DLPack's flag, the interface's ``data[1]``)."""
        return self._readonly

    @property
    def exporting_obj(self) -> Any:
        """The object the view was made from (the producer, or the buffer of :meth:`from_buffer`)."""
        return self._held.held[1]  # type: ignore[index]

    @property
    def stream_ptr(self) -> int | None:
        """The consumer stream's handle the view was ordered before, or ``None`` (none given, or -1)."""
        return self._stream_ptr

    def __repr__(self) -> str:
        dtype = self._typestr if self._typestr is not None else f"{self._itemsize} bytes"
        return (
            f"<StridedMemoryView 0x{self._ptr:x} shape={self._shape} strides={self._strides} dtype={dtype} "
            f"device_id={self._device_id}{' readonly' if self._readonly else ''}>"
        )

    # --- export ----------------------------------------------------------------------------

    def _export_owner(self) -> object:
        """What a live export must keep from being closed: the cuguard buffer under the view, else the view."""
        return self._buffer if self._buffer is not None else self

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(DLPack device type, device id)``: ``kDLCPU``, ``kDLCUDA``, ``kDLCUDAHost`` or ``kDLCUDAManaged``."""
        device_type = self._device_type
        return (device_type, self._device_id if device_type == _dlpack.KDL_CUDA else 0)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export the view as a DLPack tensor of its shape, strides and dtype.

        The capsule is versioned (DLPack 1.0, carrying the read-only flag)
        when ``max_version`` is ``(1, 0)`` or more, legacy otherwise. The
        export is live, keeping the view (and so its producer) alive, while
        anyone holds the capsule unconsumed and, once consumed, until the
        consumer deletes the tensor; a view of a cuguard buffer makes that
        buffer's ``close()`` refuse meanwhile, as the buffer's own export
        does. When the view was made over a stream-ordered buffer and
        ``stream`` names the consumer's stream, that stream waits for the
        buffer's. Copies, another device, a view without a dtype or with one
        DLPack cannot describe raise ``BufferError``; a view of a closed
        buffer :class:`~cuguard.errors.ResourceClosedError`.
        """
        ptr = self.ptr
        if copy:
            raise BufferError("cuguard views export without copying only")
        here = self.__dlpack_device__()
        if dl_device is not None:
            host = here[0] == _dlpack.KDL_CUDA_HOST and tuple(dl_device) == (_dlpack.KDL_CPU, 0)
            if tuple(dl_device) != here and not host:
                raise BufferError(f"cannot export to device {dl_device}; the view is on {here}")
        dtype = _dlpack_type(self._typestr, self._itemsize)
        own = self._stream
        buffer = self._buffer
        if (
            stream is not None
            and stream != -1
            and own is not None
            and buffer is not None
            and not own._closed
            and int(stream) != int(own._handle)
        ):
            consumer = Stream._make(driver_types().CUstream(int(stream)), buffer._context, self._device_id, owned=False)
            consumer.wait(own)
        versioned = max_version is not None and next(iter(max_version)) >= 1
        return _dlpack.export(
            self._export_owner(),
            ptr,
            self.size * self._itemsize,
            here[0],
            here[1],
            versioned=versioned,
            shape=self._shape,
            strides=self._strides,
            dtype=dtype,
            readonly=self._readonly,
            keep=self,
        )

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (version 3) with the view's shape, strides (in bytes), type and read-only flag.

        Only for memory kernels can read: a view of host memory has none
        (``AttributeError``). A view of a stream-ordered buffer names the
        buffer's stream. The consumer must not outlive the view. A view of a
        closed buffer raises :class:`~cuguard.errors.ResourceClosedError`.
        """
        if self._device_type == _dlpack.KDL_CPU:
            raise AttributeError("a StridedMemoryView of host memory has no __cuda_array_interface__")
        strides = self._strides
        interface: dict[str, Any] = {
            "shape": self._shape,
            "typestr": self._typestr if self._typestr not in (None, "bfloat16") else f"|V{self._itemsize}",
            "data": (self.ptr, self._readonly),
            "version": 3,
            "strides": None if strides is None else tuple(step * self._itemsize for step in strides),
        }
        own = self._stream
        if own is not None and not own._closed:
            interface["stream"] = int(own._handle)
        return interface

    # --- identity --------------------------------------------------------------------------

    def _refuse_copy(self) -> NoReturn:
        # Unique's refusal of copies and pickles, with the view's own reason.
        raise TypeError(
            "StridedMemoryView objects cannot be copied or pickled: the view keeps its memory alive and its "
            "address means nothing elsewhere; share the view itself"
        )


def _numpy_dtype_argument(dtype: object) -> Any:
    import numpy as np

    try:
        described = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        raise wrong_kind("dtype", "a NumPy dtype (or what numpy.dtype takes) or None", dtype) from None
    if described.itemsize < 1:
        raise ValueError(f"dtype {described} has no item size")
    return described


def memory_of(arg: object) -> Buffer | PinnedBuffer | None:
    """The cuguard buffer a kernel argument uses: the buffer itself, the one under a view, or ``None``."""
    if isinstance(arg, Buffer | PinnedBuffer):
        return arg
    if isinstance(arg, StridedMemoryView):
        if arg._buffer is not None:
            return arg._buffer
        held = arg._held.held[1]  # type: ignore[index]
        return held if isinstance(held, Buffer | PinnedBuffer) else None
    return None


def check_read_only(read_only: object, count: int) -> frozenset[int]:
    """``read_only`` of a launch: positions of its ``count`` arguments (integers, NumPy's too), as a set.

    Raises ``TypeError`` for something that is not a collection of integers
    (a ``str``, a ``bool`` position) and ``ValueError`` for a position outside
    the arguments. Changes nothing.
    """
    if isinstance(read_only, str | bytes) or not isinstance(read_only, Sequence | set | frozenset):
        raise wrong_kind("read_only", "a sequence of argument positions (ints)", read_only)
    positions: set[int] = set()
    for position in read_only:
        if not is_integer(position):
            raise wrong_kind("read_only", "a sequence of argument positions (ints)", position)
        index = int(position)  # is_integer: it has __index__
        if not 0 <= index < count:
            raise ValueError(f"read_only names argument {index}, but the launch has {count} arguments")
        positions.add(index)
    return frozenset(positions)


def memory_uses(args: Sequence[object], read_only: frozenset[int] = frozenset()) -> tuple[list[object], list[object]]:
    """The memory of kernel arguments ``args``, as ``(written, read)``: what a graph keeps, split for the race checker.

    A buffer argument is written unless its position is in ``read_only``; a
    view's buffer likewise, and only read when the view is read-only. Memory
    one argument writes and another reads is written. The views themselves
    are in ``read`` (kept alive, never accessed).
    """
    written: list[object] = []
    read: list[object] = []
    for index, arg in enumerate(args):
        if isinstance(arg, Buffer | PinnedBuffer):
            (read if index in read_only else written).append(arg)
        elif isinstance(arg, StridedMemoryView):
            read.append(arg)
            memory = memory_of(arg)
            if memory is not None:
                (read if arg._readonly or index in read_only else written).append(memory)
    if written and read:
        ids = {id(obj) for obj in written}
        read = [obj for obj in read if id(obj) not in ids]
    return written, read


class _Viewable:
    """An argument :func:`args_viewable_as_strided_memory` wrapped: ``view(stream_ptr)`` makes its view."""

    __slots__ = ("has_dlpack", "obj")

    def __init__(self, obj: Any, has_dlpack: bool) -> None:
        self.obj = obj
        self.has_dlpack = has_dlpack

    def view(self, stream_ptr: Any = None) -> StridedMemoryView:
        """A :class:`StridedMemoryView` of the argument, ordered before ``stream_ptr`` (see the class)."""
        if self.has_dlpack:
            return StridedMemoryView.from_dlpack(self.obj, stream_ptr)
        return StridedMemoryView.from_cuda_array_interface(self.obj, stream_ptr)

    def __repr__(self) -> str:
        return f"<viewable {type(self.obj).__name__}>"


def args_viewable_as_strided_memory(
    arg_indices: tuple[int, ...],
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a function so that the positional arguments at ``arg_indices`` arrive viewable.

    Inside the function, each of those arguments is a proxy whose
    ``view(stream_ptr)`` returns a :class:`StridedMemoryView` of the object
    passed (DLPack first, else the CUDA Array Interface) and whose ``obj`` is
    that object. ``arg_indices`` must be a tuple of ints (``TypeError``
    otherwise, at decoration). A call that passes an argument at one of the
    indices without either protocol, or fewer positional arguments, raises
    ``TypeError`` before the function runs.
    """
    if not isinstance(arg_indices, tuple) or not all(is_integer(i) for i in arg_indices):
        raise wrong_kind("arg_indices", "a tuple of ints", arg_indices)
    indices = tuple(int_argument("arg_indices", i, -(1 << 31), 1 << 31) for i in arg_indices)

    def decorate(func: Callable[_P, _R]) -> Callable[_P, _R]:
        if not callable(func):
            raise wrong_kind("func", "a callable", func)

        @functools.wraps(func)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            given = list(args)
            for index in indices:
                if not -len(given) <= index < len(given):
                    raise TypeError(
                        f"{getattr(func, '__qualname__', func)!s} takes a viewable argument at position {index}; "
                        f"{len(given)} positional arguments given"
                    )
                obj = given[index]
                kind = type(obj)
                dlpack = (
                    getattr(kind, "__dlpack__", None) is not None
                    and getattr(kind, "__dlpack_device__", None) is not None
                )
                if not dlpack and not hasattr(obj, "__cuda_array_interface__"):
                    raise wrong_kind(f"argument {index}", "an object with __dlpack__ or __cuda_array_interface__", obj)
                given[index] = _Viewable(obj, dlpack)
            return func(*given, **kwargs)  # type: ignore[arg-type]

        return wrapper

    return decorate
