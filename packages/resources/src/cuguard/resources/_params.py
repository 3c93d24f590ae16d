"""Kernel parameter lists and the packing of launch arguments against them.

A kernel's parameters come from the PTX text it was loaded from (names and
types) or, for a binary image, from the driver (``cuFuncGetParamInfo``: offsets
and sizes). Arguments are checked against them before any launch and packed
into the parameter buffer the kernel reads.
"""

from __future__ import annotations

import ctypes
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cuguard.errors import CUDAError, driver
from cuguard.resources._memory import Buffer, PinnedBuffer
from cuguard.resources._view import StridedMemoryView

__all__ = ["KernelParameter", "Signature", "parse_ptx_signatures", "query_signature"]

_KINDS = {"s": "integer", "u": "integer", "b": "integer", "f": "float"}


@dataclass(frozen=True, slots=True)
class KernelParameter:
    """One parameter of a kernel.

    ``index`` is its position, ``offset`` and ``size`` its place in the
    parameter buffer, in bytes. ``type`` is its PTX type (``"u64"``, ``"f32"``,
    ``"b8[16]"`` for a by-value struct...) and ``name`` its PTX name, both
    ``None`` when only the driver's offset and size are known (a kernel loaded
    from a cubin). ``kind`` is ``"integer"`` (``.s``, ``.u`` and ``.b`` types:
    compilers declare ``int`` parameters ``.u32`` and pointers ``.u64``, so an
    integer parameter takes the signed and the unsigned range of its size),
    ``"float"``, ``"bytes"`` (an array or struct passed by value) or ``"sized"``
    (the type is not known).
    """

    index: int
    offset: int
    size: int
    type: str | None = None
    name: str | None = None

    @property
    def kind(self) -> str:
        """What values the parameter takes (see the class docstring)."""
        if self.type is None:
            return "sized"
        if "[" in self.type:
            return "bytes"
        return _KINDS[self.type[0]]

    def __str__(self) -> str:
        shown = self.type if self.type is not None else f"{self.size} bytes"
        return f"{self.name}: {shown}" if self.name else shown


# --- where parameter lists come from --------------------------------------------------------

_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(
    rb"\.param\s+(?:\.align\s+(?P<a1>\d+)\s+)?\.(?P<kind>[usbf])(?P<bits>8|16|32|64)\b"
    rb"(?:\s+\.ptr(?:\.\w+)*)?(?:\s+\.align\s+(?P<a2>\d+))?\s+(?P<name>[A-Za-z_$%][\w$]*)"
    rb"(?:\s*\[(?P<count>\d+)\])?"
)
_BLOCK_COMMENT = re.compile(rb"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(rb"//[^\n]*")


def parse_ptx_signatures(image: bytes) -> dict[str, tuple[KernelParameter, ...]]:
    """The parameter list of every ``.entry`` of a PTX text whose parameters are all readable.

    An entry with a parameter this parser does not understand is left out (its
    kernel is then packed from the driver's parameter information).
    """
    text = _LINE_COMMENT.sub(b"", _BLOCK_COMMENT.sub(b"", image))
    out: dict[str, tuple[KernelParameter, ...]] = {}
    for entry in _ENTRY.finditer(text):
        declared = [p for p in entry.group(2).split(b",") if p.strip()]
        params: list[KernelParameter] = []
        offset = 0
        for index, chunk in enumerate(declared):
            match = _PARAM.search(chunk)
            if match is None:
                break
            width = int(match["bits"]) // 8
            count = match["count"]
            size = width * int(count) if count else width
            align = int(match["a1"] or match["a2"] or width)
            offset = (offset + align - 1) // align * align
            kind = match["kind"].decode() + match["bits"].decode()
            ptx_type = f"{kind}[{int(count)}]" if count else kind
            params.append(KernelParameter(index, offset, size, ptx_type, match["name"].decode()))
            offset += size
        else:
            out[entry.group(1).decode()] = tuple(params)
    return out


_END_OF_LIST = 1  # CUDA_ERROR_INVALID_VALUE: the index is past the last parameter
_UNKNOWN = frozenset({801, 500})  # CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_FOUND


def query_signature(function: Any, name: str) -> tuple[KernelParameter, ...] | None:
    """The parameter list the driver reports for ``function`` (offsets and sizes), or ``None``.

    With ``cuFuncGetParamCount`` (cuda-bindings 13 over a driver that has it): the count, then each
    parameter. Without it (cuda-bindings 12, or a CUDA 13.0 driver) there is no count: parameters are asked
    for until the driver answers ``CUDA_ERROR_INVALID_VALUE``, its answer for an
    index past the last one, twice (a failure that does not repeat is raised). ``None`` when the driver cannot say (no
    ``cuFuncGetParamInfo``, which needs driver 12.4 and cuda-bindings 12.4 or
    newer, or a status saying it does not know); any other failure raises
    :class:`~cuguard.errors.CUDAError`.
    """
    try:
        get = driver.cuFuncGetParamInfo
    except AttributeError:
        return None
    try:
        count_of = driver.cuFuncGetParamCount
    except AttributeError:
        count_of = None
    count: int | None = None
    if count_of is not None:
        try:
            err, total = count_of(function)
        except RuntimeError:
            # The bindings have the function and the driver library does not (a CUDA 13.0
            # driver under newer bindings): ask for parameters until the end of the list.
            count_of = None
    if count_of is not None:
        if err:
            if int(err) in _UNKNOWN:
                return None
            raise CUDAError(err, "cuFuncGetParamCount", f"the parameters of kernel {name!r}")
        count = int(total)
    params: list[KernelParameter] = []
    while count is None or len(params) < count:
        try:
            err, offset, size = get(function, len(params))
        except RuntimeError:
            return None  # the driver library predates cuFuncGetParamInfo (CUDA 12.4)
        if err:
            code = int(err)
            if count is None and code == _END_OF_LIST:
                again, _offset, _size = get(function, len(params))
                if int(again) == _END_OF_LIST:
                    return tuple(params)
                if again:  # the confirming call failed otherwise: that failure is the one to report
                    err = again
            if code in _UNKNOWN and not params:
                return None
            raise CUDAError(err, "cuFuncGetParamInfo", f"parameter {len(params)} of kernel {name!r}")
        params.append(KernelParameter(len(params), int(offset), int(size)))
    return tuple(params)


# --- packing ---------------------------------------------------------------------------

_INT_FORMAT = {1: "B", 2: "H", 4: "I", 8: "Q"}
_FLOAT_FORMAT = {2: "e", 4: "f", 8: "d"}
_POINTER = ctypes.sizeof(ctypes.c_void_p)


def _fast_format(param: KernelParameter) -> str | None:
    kind = param.kind
    if kind == "float":
        return _FLOAT_FORMAT.get(param.size)
    if kind in ("integer", "sized"):
        return _INT_FORMAT.get(param.size)  # a negative value takes the careful path
    return None


class Signature:
    """A kernel's parameter list, with what packing arguments against it needs."""

    __slots__ = ("_format", "_pointer_offsets", "_size", "_takes_memory", "kernel", "params")

    def __init__(self, kernel: str, params: tuple[KernelParameter, ...]) -> None:
        self.kernel = kernel
        self.params = params
        n = len(params)
        end = max((p.offset + p.size for p in params), default=0)
        self._size = n * _POINTER + end
        formats = [_fast_format(p) for p in params]
        self._format: struct.Struct | None = None
        if all(f is not None for f in formats):
            # One layout for the pointer array and the parameter buffer after it.
            parts = [f"{n}Q"]
            at = 0
            for p, f in zip(params, formats, strict=True):
                if p.offset > at:
                    parts.append(f"{p.offset - at}x")
                parts.append(str(f))
                at = p.offset + p.size
            self._format = struct.Struct("<" + "".join(parts))
        self._pointer_offsets = tuple(n * _POINTER + p.offset for p in params)
        self._takes_memory = tuple(p.size == _POINTER and p.kind in ("integer", "sized") for p in params)

    def describe(self) -> str:
        """``name(a: u64, n: u32)``: the kernel and its parameters, for messages."""
        return f"{self.kernel}({', '.join(str(p) for p in self.params)})"

    def pack(self, args: Sequence[Any]) -> tuple[int, Any]:
        """``(kernelParams address, storage to keep alive until the call returns)``.

        Raises ``TypeError`` naming the kernel, the parameter and the value for
        a wrong count of arguments or a value that does not fit its parameter.
        """
        params = self.params
        if len(args) != len(params):
            raise TypeError(
                f"kernel {self.describe()} takes {len(params)} argument{'s' if len(params) != 1 else ''}, "
                f"{len(args)} given"
            )
        if not params:
            return 0, None
        storage = (ctypes.c_uint8 * self._size)()
        base = ctypes.addressof(storage)
        fmt = self._format
        if fmt is not None:
            values: list[Any] | None = []
            for arg, takes_memory in zip(args, self._takes_memory, strict=True):
                if type(arg) is Buffer or type(arg) is PinnedBuffer:
                    if not takes_memory:  # memory for a float parameter: the careful path says so
                        values = None
                        break
                    values.append(arg._address())  # type: ignore[union-attr]
                elif type(arg) is StridedMemoryView:
                    if not takes_memory or not arg.is_device_accessible:  # the careful path says why not
                        values = None
                        break
                    values.append(arg.ptr)  # type: ignore[union-attr]
                else:
                    values.append(arg)  # type: ignore[union-attr]
            if values is not None and all(type(v) is int or type(v) is float for v in values):
                try:
                    fmt.pack_into(storage, 0, *[base + o for o in self._pointer_offsets], *values)
                except (struct.error, OverflowError):
                    pass  # the careful path below says which argument does not fit
                else:
                    return base, storage
        for offset, param, arg in zip(self._pointer_offsets, params, args, strict=True):
            ctypes.memmove(base + offset, _encode(self, param, arg), param.size)
        struct.pack_into(f"<{len(params)}Q", storage, 0, *[base + o for o in self._pointer_offsets])
        return base, storage


def _encode(sig: Signature, param: KernelParameter, arg: Any) -> bytes:
    """The bytes of ``arg`` as ``param`` holds it; ``TypeError`` when it does not fit."""
    kind, size = param.kind, param.size
    if isinstance(arg, Buffer | PinnedBuffer):
        if size != _POINTER or kind in ("float", "bytes"):
            raise _misfit(sig, param, arg, "memory passes its address, which needs a 64-bit integer parameter")
        return arg._address().to_bytes(_POINTER, "little")
    if isinstance(arg, StridedMemoryView):
        if size != _POINTER or kind in ("float", "bytes"):
            raise _misfit(sig, param, arg, "a view passes its address, which needs a 64-bit integer parameter")
        if not arg.is_device_accessible:
            raise _misfit(sig, param, arg, "a view of host memory that no kernel can read")
        return arg.ptr.to_bytes(_POINTER, "little")
    if kind == "bytes":
        data = _raw_bytes(arg)
        if data is None or len(data) != size:
            raise _misfit(sig, param, arg, f"a by-value parameter takes bytes (or a ctypes object) of exactly {size}")
        return data
    number = _number(arg)
    if number is None:
        data = _raw_bytes(arg)
        if data is not None and len(data) == size:
            return data  # the exact bytes of the parameter, as given
        raise _misfit(sig, param, arg, "not a number, a Buffer, a StridedMemoryView or bytes of the parameter's size")
    if isinstance(number, float) or kind == "float":
        if kind not in ("float", "sized") or size not in _FLOAT_FORMAT:
            raise _misfit(sig, param, arg, "a float where an integer or a pointer is declared")
        try:
            return struct.pack("<" + _FLOAT_FORMAT[size], float(number))
        except OverflowError:
            raise _misfit(sig, param, arg, f"too large for a {8 * size}-bit float") from None
    bits = 8 * size
    low, high = -(1 << (bits - 1)), (1 << bits) - 1
    if not low <= number <= high:
        raise _misfit(sig, param, arg, f"out of range ({low} to {high})")
    return (number & ((1 << bits) - 1)).to_bytes(size, "little")


def _number(arg: Any) -> int | float | None:
    if isinstance(arg, bool | int):
        return int(arg)
    if isinstance(arg, float):
        return float(arg)
    dtype = getattr(arg, "dtype", None)
    if dtype is not None and getattr(arg, "shape", None) == ():
        kind = getattr(dtype, "kind", "")
        if kind in "iub":
            return int(arg)
        if kind == "f":
            return float(arg)
    return None


def _raw_bytes(arg: Any) -> bytes | None:
    if isinstance(arg, bytes | bytearray | memoryview):
        return bytes(arg)
    if isinstance(arg, ctypes.Structure | ctypes.Union | ctypes.Array):
        return bytes(arg)
    return None


def _misfit(sig: Signature, param: KernelParameter, arg: Any, why: str) -> TypeError:
    shown = repr(arg)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return TypeError(
        f"argument {param.index} of kernel {sig.describe()} does not fit parameter {param}: {shown} ({why})"
    )
