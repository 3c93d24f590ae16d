"""Differences between cuda-bindings 12.9 and 13.x signatures used by the context layer."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cuguard.errors import driver

__all__ = ["ctx_create"]


@lru_cache(maxsize=1)
def _bindings_major() -> int:
    try:
        import cuda.bindings
    except ImportError:  # pragma: no cover - cuda-bindings is a dependency of cuguard-errors
        return 13
    return int(str(cuda.bindings.__version__).split(".")[0])


def ctx_create(flags: int, dev: Any) -> Any:
    """``cuCtxCreate`` with the signature of the installed cuda-bindings; returns ``(err, ctx)``."""
    if _bindings_major() >= 13:
        return driver.cuCtxCreate(None, flags, dev)
    return driver.cuCtxCreate(flags, dev)
