"""The misuse sweep's operations of the context layer."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from cuguard.sweeps._misuse.ops_base import (
    CONTEXT,
    CTX_HANDLE,
    Op,
    Param,
    _block,
    _noop,
    _p,
    _v,
    adder,
    ordinal_param,
)

__all__ = ["context_ops"]


def context_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Contexts (primary, created, wrapped), their use in a ``with`` block, ``call_in`` and ``cleanup_in``."""
    E, C = L.errors, L.context
    ops: list[Op] = []
    add = adder(ops)
    ordinal = ordinal_param()
    add("context.init_driver", None, C.init_driver)
    add("context.Context.primary", None, C.Context.primary, ordinal)
    add("context.Context.create", None, C.Context.create, ordinal, _v("flags", 0, 1, -1, None, 1.5, good=2), weight=2)
    add(
        "context.Context.wrap",
        None,
        C.Context.wrap,
        Param(
            "handle",
            frozenset({"int", "CUcontext"}),
            "CUcontext",
            values=(None, 1.5, "x", 0),
            special=CTX_HANDLE,
        ),
        _v("device", None, 0, 1, "x", -1.5, good=3),
    )
    add("context.Context.current", None, C.Context.current)
    add("context.Context.set_current", "Context", lambda c: c.set_current(), sets_context=True, weight=2)
    add("context.Context.synchronize", "Context", lambda c: c.synchronize())
    add(
        "context.Context.close",
        "Context",
        lambda c: c.close(),
        idempotent_close=True,
        destroys_context=True,
        frees_memory=True,
    )
    # ``with ctx:`` makes it current for the block and restores the caller's context (it closes nothing)
    add("context.Context.__exit__", "Context", _block, _v("fail", False, True))
    add("context.Context.device", "Context", lambda c: c.device, uses_receiver=False)
    add("context.Context.handle", "Context", lambda c: c.handle)
    add(
        "context.Context.is_primary",
        "Context",
        lambda c: (c.is_primary, c.owned, c.closed, c.stale),
        uses_receiver=False,
    )

    def _query_device() -> Any:
        return E.driver.cuCtxGetDevice()

    add(
        "context.call_in",
        None,
        lambda ctx, op: C.call_in(ctx, op, None),
        _p("context", CONTEXT, "Context"),
        _v("op", lambda: _query_device, lambda: _noop, None, 5, good=2),
    )
    add(
        "context.cleanup_in",
        None,
        C.cleanup_in,
        # documented: an unusable context is reported (CUDAWarning), not raised
        _p("context", CONTEXT, "Context", uses=False),
        _v("op", lambda: _query_device, lambda: _noop),
        may_warn=True,
    )
    return ops
