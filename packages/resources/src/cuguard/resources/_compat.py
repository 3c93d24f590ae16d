"""The differences between the cuda-bindings majors (12.9.x and 13.x) that the resources layer follows.

- ``cuMemPrefetchAsync``: 13.x takes ``(devPtr, count, location, flags,
  hStream)`` with a ``CUmemLocation``; 12.x takes a device ordinal
  (``(devPtr, count, dstDevice, hStream)``) and has ``cuMemPrefetchAsync_v2``
  with the 13.x parameters.
- ``cuMemAdvise``: 13.x takes ``(devPtr, count, advice, location)``; 12.x takes
  a device ordinal and has ``cuMemAdvise_v2`` with the 13.x parameters.

Both are decided once, from the installed bindings (they cannot change in a
process); the calls go through the driver seam like every other call.
"""

from __future__ import annotations

from typing import Any, Final

from cuguard.errors import driver

__all__ = ["BINDINGS_MAJOR", "PREFETCH_CALL", "ADVISE_CALL", "mem_advise", "mem_prefetch_async"]


def _installed_major() -> int:
    try:
        import cuda.bindings
    except ImportError:  # pragma: no cover - cuda-bindings is a dependency of cuguard-errors
        return 13
    return int(str(cuda.bindings.__version__).split(".")[0])


#: The major version of the installed cuda-bindings (12 or 13).
BINDINGS_MAJOR: Final[int] = _installed_major()
#: The driver function that prefetches managed memory to a ``CUmemLocation``.
PREFETCH_CALL: Final[str] = "cuMemPrefetchAsync" if BINDINGS_MAJOR >= 13 else "cuMemPrefetchAsync_v2"
#: The driver function that advises on managed memory with a ``CUmemLocation``.
ADVISE_CALL: Final[str] = "cuMemAdvise" if BINDINGS_MAJOR >= 13 else "cuMemAdvise_v2"


def mem_prefetch_async(ptr: Any, size: int, location: Any, stream: Any) -> Any:
    """Prefetch ``size`` bytes at ``ptr`` to ``location`` (a ``CUmemLocation``) on ``stream``; the status."""
    (err,) = getattr(driver, PREFETCH_CALL)(ptr, size, location, 0, stream)
    return err


def mem_advise(ptr: Any, size: int, advice: Any, location: Any) -> Any:
    """Advise ``advice`` (a ``CUmem_advise``) for ``size`` bytes at ``ptr`` about ``location``; the status."""
    (err,) = getattr(driver, ADVISE_CALL)(ptr, size, advice, location)
    return err
