"""The failure-point sweep's scenarios of the context layer: one per public operation (or variant).

:func:`context_scenarios` declares them; :data:`NO_DRIVER_CALL_CONTEXT` lists the
layer's public callables that make no driver call, with the reason.
"""

from __future__ import annotations

from cuguard.sweeps._failpoints.registry_base import (
    Scenario,
    _call_in,
    _cleanup_in,
    _ctx_probe,
    _in_block,
    _ns,
    _release,
    adder,
    dev_only,
    nothing,
)

__all__ = ["NO_DRIVER_CALL_CONTEXT", "context_scenarios"]

_NO_CALL_RESOURCE = "returns what the object recorded at creation"


def context_scenarios() -> list[Scenario]:
    """The context layer's scenarios: the driver's start, contexts, ``call_in`` and ``cleanup_in``."""
    out: list[Scenario] = []
    add = adder(out)
    add("context.init_driver", nothing, lambda e, s: e.context.init_driver())
    add(
        "context.Context.primary",
        nothing,
        lambda e, s: e.own(e.context.Context.primary(0)),
        probe=lambda e, s: e.context.Context.primary(0).close(),
        # On a real driver the primary context is held from its first use on (O2): later
        # calls make no driver call, so there is no failure point left to sweep there.
        real=False,
    )
    add(
        "context.Context.create",
        nothing,
        lambda e, s: e.own(e.context.Context.create(0)),
        probe=lambda e, s: e.context.Context.create(0).close(),
    )
    add("context.Context.current", dev_only, lambda e, s: e.context.Context.current())
    add(
        "context.Context.set_current",
        dev_only,
        lambda e, s: s.dev.context.set_current(),
        sets_context=True,
        probe=_ctx_probe,
    )
    add("context.Context.synchronize", dev_only, lambda e, s: s.dev.context.synchronize(), probe=_ctx_probe)
    add(
        "context.Context.device",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.wrap(e.device().context.handle)),
        lambda e, s: s.ctx.device,
        probe=lambda e, s: s.ctx.device,
    )
    add(
        "context.Context.close[primary]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.primary(0)),
        lambda e, s: s.ctx.close(),
        covers=("context.Context.close",),
        releases=True,
        probe=lambda e, s: (s.ctx.close(), _ctx_probe(e, s)),
    )
    add(
        "context.Context.close[created]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.create(0)),
        lambda e, s: s.ctx.close(),
        covers=("context.Context.close",),
        releases=True,
        probe=lambda e, s: (s.ctx.close(), _ctx_probe(e, s)),
    )
    add(
        "context.Context.__enter__",
        dev_only,
        lambda e, s: _in_block(s.dev.context),
        covers=("context.Context.__enter__", "context.Context.__exit__"),
        probe=_ctx_probe,
    )
    add(
        "context.Context.__enter__[created]",
        lambda e: _ns(dev=e.device(), ctx=e.own(e.context.Context.create(0))),
        lambda e, s: _in_block(s.ctx),
        covers=("context.Context.__enter__", "context.Context.__exit__"),
        probe=_ctx_probe,
    )
    add(
        "context.Context.__del__[primary]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.primary(0)),
        _release("ctx"),
        covers=("context.Context.__del__",),
        kind="warn",
        releases=True,
    )
    add(
        "context.Context.__del__[created]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.create(0)),
        _release("ctx"),
        covers=("context.Context.__del__",),
        kind="warn",
        releases=True,
    )
    add("context.call_in", dev_only, _call_in, probe=_ctx_probe)
    add("context.cleanup_in", dev_only, _cleanup_in, kind="warn", probe=_ctx_probe)
    return out


#: Public callables of context that make no driver call, with the reason (keys as in ``Scenario.covers``).
NO_DRIVER_CALL_CONTEXT: dict[str, str] = {
    "context.Context()": "refused with TypeError: contexts come from the class methods",
    "context.Context.wrap": "wraps a handle; no driver call",
    "context.Context.handle": _NO_CALL_RESOURCE,
    "context.Context.is_primary": _NO_CALL_RESOURCE,
    "context.Context.owned": _NO_CALL_RESOURCE,
    "context.Context.closed": _NO_CALL_RESOURCE,
    "context.Context.stale": "compares driver tokens",
    "context.compiled": "a flag fixed at import: which build runs",
}
