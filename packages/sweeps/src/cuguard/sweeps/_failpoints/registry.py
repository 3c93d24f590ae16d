"""The sweep's registry: one scenario per public operation of every cuguard layer.

A :class:`Scenario` builds what the operation needs (its *set-up*), then makes
exactly one public call (its *operation*). The sweep records the driver calls
of the operation and fails each of them in turn (see
:mod:`cuguard.sweeps._failpoints.runner`).

The scenarios are declared as data per layer: :mod:`.registry_context`,
:mod:`.registry_resources` and :mod:`.registry_memory` (the memory resources
and typed views), :mod:`.registry_graphs`; the errors layer makes no driver
call (:mod:`.registry_errors`). What they are built from (:class:`Scenario`,
:class:`Env`, the shared set-ups and probes) is :mod:`.registry_base`.
Scenario names follow the operation-naming scheme of :mod:`cuguard.sweeps`.

:data:`NO_DRIVER_CALL` lists the public callables that make no driver call,
each with the reason; ``tests/test_sweep.py`` checks that every public callable
of every layer is in the registry or in that list.
"""

from __future__ import annotations

from cuguard.sweeps._failpoints import (
    registry_context,
    registry_errors,
    registry_graphs,
    registry_memory,
    registry_resources,
)
from cuguard.sweeps._failpoints.registry_base import (
    KERNELS_CU,
    KERNELS_PTX,
    LAYERS,
    SIZE,
    Env,
    Scenario,
    dev_fresh,
    dev_only,
    nothing,
    with_buffers,
    with_event,
    with_exec,
    with_graph,
    with_module,
    with_stream,
    with_streams,
)

__all__ = [
    "KERNELS_CU",
    "KERNELS_PTX",
    "LAYERS",
    "NO_DRIVER_CALL",
    "SIZE",
    "Env",
    "Scenario",
    "dev_fresh",
    "dev_only",
    "nothing",
    "scenarios",
    "with_buffers",
    "with_event",
    "with_exec",
    "with_graph",
    "with_module",
    "with_stream",
    "with_streams",
]


def _build() -> list[Scenario]:
    """Every scenario, layer by layer, in the sweep's order (a seeded sample picks from this order)."""
    groups = (
        registry_context.context_scenarios,
        registry_resources.device_scenarios,
        registry_resources.stream_scenarios,
        registry_resources.event_and_copy_scenarios,
        registry_resources.module_scenarios,
        registry_graphs.definition_scenarios,
        registry_graphs.node_scenarios,
        registry_memory.vmm_scenarios,
        registry_memory.pool_scenarios,
        registry_memory.view_scenarios,
        registry_graphs.capture_scenarios,
        registry_graphs.conditional_scenarios,
        registry_graphs.update_scenarios,
    )
    return [scenario for group in groups for scenario in group()]


_SCENARIOS: list[Scenario] = []


def scenarios() -> list[Scenario]:
    """Every scenario of the registry (built on first use)."""
    if not _SCENARIOS:
        _SCENARIOS.extend(_build())
    return list(_SCENARIOS)


#: Public callables that make no driver call, with the reason. Keys as in ``Scenario.covers``.
NO_DRIVER_CALL: dict[str, str] = {
    **registry_errors.NO_DRIVER_CALL_ERRORS,
    **registry_context.NO_DRIVER_CALL_CONTEXT,
    **registry_resources.NO_DRIVER_CALL_RESOURCES,
    **registry_graphs.NO_DRIVER_CALL_GRAPHS,
    **registry_memory.NO_DRIVER_CALL_MEMORY,
    # the sweeps' own entry points, listed where an older layout exported them
    "testing.run_misuse_sweep": "runs the misuse sweep (B6) on drivers of its own; swept by running it, not here",
    "testing.MisuseResult": "a record of what the misuse sweep found: no driver call",
}
