"""The one check of integer arguments (E3): sizes, counts, ordinals, flags, dimensions.

Every layer checks an integer parameter with :func:`int_argument`, so every such parameter
accepts the same values and refuses the others with the same message:

- accepted: an ``int`` or anything with ``__index__`` (NumPy integers such as
  ``numpy.uint64(256) * 4``), returned as a plain ``int`` so that no NumPy scalar reaches
  the driver;
- ``TypeError``: a ``bool`` (Python's or NumPy's), a float (Python's or NumPy's) and any
  other object without ``__index__``; the message names the parameter and what was given;
- ``ValueError``: a value below the parameter's minimum or at or above the limit of the C
  type the driver takes it as (:data:`SIZE_LIMIT` for sizes, :data:`UINT_LIMIT` for
  32-bit unsigned values such as grid and block dimensions, :data:`INT_LIMIT` for
  32-bit signed ones such as device ordinals); the message names the parameter, the
  range and the value. No ``OverflowError`` of a C conversion ever reaches the caller.
"""

from __future__ import annotations

import operator
from typing import Final

from cuguard.errors._ownership import wrong_kind

SIZE_LIMIT: Final = 1 << 64
"""The first value a ``size_t``/``cuuint64_t`` argument (a byte count, an address) cannot hold."""
UINT_LIMIT: Final = 1 << 32
"""The first value an ``unsigned int`` argument (dimensions, counts, flags) cannot hold."""
INT_LIMIT: Final = 1 << 31
"""The first value an ``int`` argument (device ordinals, NUMA ids) cannot hold."""


def _bound(limit: int) -> str:
    exponent = limit.bit_length() - 1
    return f"2**{exponent}" if limit == 1 << exponent and exponent > 8 else str(limit)


def out_of_range(param: str, value: int, low: int = 0, limit: int = SIZE_LIMIT) -> ValueError:
    """The ``ValueError`` for ``param`` given ``value`` outside ``[low, limit)`` (E3); the caller raises it.

    The message names the parameter, the range and the value, e.g.
    ``size must be 0 or more and below 2**64, not 18446744073709551616``.
    """
    return ValueError(f"{param} must be {low} or more and below {_bound(limit)}, not {value}")


def is_integer(value: object) -> bool:
    """Whether :func:`int_argument` takes ``value`` as an integer: an ``int`` or an object with
    ``__index__``, never a ``bool`` (Python's or NumPy's). Never raises.

    For parameters that take either an integer or something else (a ``Device`` or its ordinal).
    """
    kind = type(value)
    if kind is int:
        return True
    if issubclass(kind, bool) or _numpy_bool(kind):
        return False
    return hasattr(kind, "__index__")


def int_argument(param: str, value: object, low: int = 0, limit: int = SIZE_LIMIT) -> int:
    """``value`` as a plain ``int`` if it is an integer in ``[low, limit)``, checked before any driver call.

    Accepts an ``int`` or anything with ``__index__`` (NumPy integers). Raises ``TypeError``
    naming ``param`` and the type given for a ``bool``, a float or any other non-integer, and
    ``ValueError`` naming ``param``, the range and the value for an integer outside the range
    (``limit`` is the first value the driver's C type cannot hold: :data:`SIZE_LIMIT`,
    :data:`UINT_LIMIT`, :data:`INT_LIMIT`). Changes nothing.
    """
    if type(value) is int:
        if low <= value < limit:
            return value
        raise out_of_range(param, value, low, limit)
    return _general(param, value, low, limit)


def _numpy_bool(kind: type) -> bool:
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")


def _general(param: str, value: object, low: int, limit: int) -> int:
    kind = type(value)
    if not hasattr(kind, "__index__") or issubclass(kind, bool) or _numpy_bool(kind):
        raise wrong_kind(param, "an int", value)
    try:
        number = int.__int__(operator.index(value))  # type: ignore[arg-type]  # a plain int from any int subclass
    except (TypeError, ValueError):  # an __index__ that refuses (an array of several items...)
        raise wrong_kind(param, "an int", value) from None
    if low <= number < limit:
        return number
    raise out_of_range(param, number, low, limit)


def is_driver_status(code: int) -> bool:
    """Whether ``code`` is a driver status (a ``CUresult`` value) in the status table. Never raises."""
    from cuguard.errors._table import _bindings_enum, _shipped

    return code in _shipped()["driver"] or code in _bindings_enum("driver")


def status_argument(param: str, value: object, *, success: bool = False) -> int:
    """``value`` as the plain ``int`` of a CUDA driver status (a ``CUresult`` or the int of one) (E3).

    Raises ``TypeError`` naming ``param`` for anything that is not an integer (a ``bool``, a float,
    a string...), and ``ValueError`` naming ``param`` and the value for an integer that is not a
    driver status in the status table (``12345``, ``-1``), and for ``CUDA_SUCCESS`` (``0``) unless
    ``success`` allows it. Needs no driver; changes nothing.
    """
    if not is_integer(value):
        raise wrong_kind(param, "a CUresult or an int", value)
    code = int.__int__(operator.index(value))  # type: ignore[arg-type]
    if not is_driver_status(code):
        raise ValueError(f"{param} must be a CUDA driver status (a CUresult), not {code}")
    if code == 0 and not success:
        raise ValueError(f"{param} must be a failure status, not CUDA_SUCCESS (0)")
    return code
