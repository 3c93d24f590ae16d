"""What cuda-bindings itself refuses before a call reaches the driver.

``cuda.bindings.driver`` converts each Python argument to its C type before it
calls the driver, and raises there: ``cuMemAlloc(-1)`` raises ``OverflowError``
("can't convert negative value to size_t"), ``cuStreamCreate(None)`` raises
``TypeError`` ("an integer is required"), ``cuDeviceGetAttribute(None, 0)``
raises ``TypeError`` ("Argument 'attrib' must not be None"). The simulated
driver raises the same exceptions for the same values.

The rules are those of the Cython conversions cuda-bindings uses (checked
against cuda-bindings 13.x, which refuses these values without loading a
driver):

- C integer parameters (``size_t``, ``unsigned int``, ``int``, ``unsigned
  char``, ``unsigned short``, ``unsigned long long``): an ``int`` (``bool``
  included) or an object whose type has ``__int__`` (``float`` truncates,
  NumPy scalars); anything else, ``None`` included, is a ``TypeError``; a value
  outside the C type's range an ``OverflowError``.
- Enum parameters (``attrib: CUdevice_attribute``): ``None`` is a
  ``TypeError``; the value goes through ``int()`` (so ``"x"`` is a
  ``ValueError``) and must lie in ``(-2**30, 2**32)``, else ``OverflowError``.
- Handle parameters (``hStream``, ``dev``, ``dptr``...): ``None`` means 0; an
  object of the handle's class is taken as it is; anything else goes through
  that class's constructor, which raises what cuda-bindings raises.

The parameters and their types are read from the installed cuda-bindings'
docstrings (``cuMemHostAlloc(size_t bytesize, unsigned int Flags)``) and apply
to a simulator function's parameter only where its name and position match.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as cb

__all__ = ["ArgumentCheck", "argument_check"]

#: Checks the positional and keyword arguments of one call (raises like cuda-bindings).
ArgumentCheck = Callable[[tuple[Any, ...], dict[str, Any]], None]
_Convert = Callable[[Any], None]

_U64 = 1 << 64


def _integer(value: Any) -> int:
    """The C-integer conversion of Cython: ``int``, or a type with ``__int__``; else ``TypeError``."""
    if isinstance(value, int):
        return int(value)
    if getattr(type(value), "__int__", None) is None:
        raise TypeError("an integer is required")
    return int(value)


def _unsigned(ctype: str, bits: int, too_large: str | None = None) -> _Convert:
    limit = 1 << bits
    negative = f"can't convert negative value to {ctype}"
    large = too_large or f"value too large to convert to {ctype}"

    def convert(value: Any) -> None:
        if type(value) is int and 0 <= value < limit:
            return
        number = _integer(value)
        if number < 0:
            raise OverflowError(negative)
        if number >= limit:
            raise OverflowError(large)

    return convert


def _signed(ctype: str, bits: int) -> _Convert:
    low, high = -(1 << (bits - 1)), 1 << (bits - 1)
    message = f"value too large to convert to {ctype}"

    def convert(value: Any) -> None:
        if type(value) is int and low <= value < high:
            return
        number = _integer(value)
        if not low <= number < high:
            raise OverflowError(message)

    return convert


_C_TYPES: dict[str, _Convert] = {
    "size_t": _unsigned("size_t", 64, "Python int too large to convert to C unsigned long"),
    "unsigned long long": _unsigned("unsigned PY_LONG_LONG", 64, "Python int too large to convert to C unsigned long"),
    "unsigned int": _unsigned("unsigned int", 32),
    "unsigned short": _unsigned("unsigned short", 16),
    "unsigned char": _unsigned("unsigned char", 8),
    "int": _signed("int", 32),
}

# The C names cuda-bindings' enum conversion errors use, where not ``<Enum>_enum``.
_ENUM_C_NAMES = {"CUresult": "cudaError_enum"}


def _enum(param: str, enum_name: str) -> _Convert:
    missing = f"Argument '{param}' must not be None"
    large = f"value too large to convert to {_ENUM_C_NAMES.get(enum_name, enum_name + '_enum')}"

    def convert(value: Any) -> None:
        if value is None:
            raise TypeError(missing)
        number = int(value)
        if not -(1 << 30) < number < (1 << 32):
            raise OverflowError(large)

    return convert


def _handle(cls: type) -> _Convert:
    try:
        cls(-1)
    except OverflowError:
        low, high = 0, _U64  # a pointer-sized handle (unsigned long long)
    else:
        low, high = -(1 << 31), 1 << 31  # CUdevice (int)

    def convert(value: Any) -> None:
        if value is None or isinstance(value, cls) or (type(value) is int and low <= value < high):
            return
        cls(value)  # raises what cuda-bindings raises for this value

    return convert


_FIRST_LINE = re.compile(r"\s*(\w+)\((.*)\)\s*$")
_DOC_TYPE = re.compile(r"^(\w+) : :py:obj:`~\.(\w+)`", re.M)


def _split(params: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in params:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _binding_params(name: str) -> list[tuple[str, _Convert | None]] | None:
    """Each parameter of the installed ``cuda.bindings.driver.<name>`` and how it is converted."""
    doc = getattr(getattr(cb, name, None), "__doc__", None)
    if not doc:
        return None
    match = _FIRST_LINE.match(doc.splitlines()[0] if doc.strip() else "")
    if match is None or match.group(1) != name:
        return None
    start, end = doc.find("Parameters\n"), doc.find("Returns\n")
    documented = dict(_DOC_TYPE.findall(doc[start:end] if 0 <= start < end else ""))
    out: list[tuple[str, _Convert | None]] = []
    for part in _split(match.group(2)):
        convert: _Convert | None = None
        if ":" in part:
            head, annotation = (s.strip() for s in part.split(":", 1))
            param = head.rsplit(" ", 1)[-1]
            enum = getattr(cb, annotation, None)
            if " " not in head and isinstance(enum, type) and hasattr(enum, "__members__"):
                convert = _enum(param, annotation)
        elif " " in part:
            ctype, param = part.rsplit(" ", 1)
            convert = _C_TYPES.get(ctype)
        else:
            param = part
            cls = getattr(cb, documented.get(param, ""), None)
            if isinstance(cls, type) and hasattr(cls, "getPtr") and not hasattr(cls, "__members__"):
                convert = _handle(cls)
        out.append((param, convert))
    return out


def argument_check(name: str, fn: Callable[..., Any]) -> ArgumentCheck | None:
    """The argument check of the simulator function ``fn`` named ``name``, or ``None`` if it needs none.

    ``fn`` is the undecorated method (its first parameter is ``self``).
    """
    binding = _binding_params(name)
    if not binding:
        return None
    try:
        own = list(inspect.signature(fn).parameters)[1:]
    except (TypeError, ValueError):  # pragma: no cover - every simulator method has a signature
        return None
    checks: list[tuple[int, str, _Convert]] = [
        (pos, param, convert)
        for pos, (param, convert) in enumerate(binding)
        if convert is not None and pos < len(own) and own[pos] == param
    ]
    if not checks:
        return None

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        given = len(args)
        for pos, param, convert in checks:
            if pos < given:
                convert(args[pos])
            elif param in kwargs:
                convert(kwargs[param])

    return check
