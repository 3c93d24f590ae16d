"""The sweep's report: a table per layer, the violations, the cases that were not deterministic, and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from cuguard.sweeps._failpoints.registry import LAYERS
from cuguard.sweeps._failpoints.runner import SweepResult

__all__ = ["format_table", "write_json"]

_DRIVER_NAMES = {"sim": "simulated", "real": "real", "sim-persistent": "persistent simulated"}


def format_table(result: SweepResult, max_violations: int = 50) -> str:
    """The per-layer table, then the first violations, then the first cases that were not deterministic.

    Columns: operations, failure points, cases, violations (contract rules broken) and
    non-deterministic (cases whose calls before their failure point differed from the fault-free
    run's, and fault-free runs that differed from each other: the sweep's own failures, counted
    and listed apart from the violations).
    """
    head = (
        f"{'layer':<10} {'operations':>10} {'failure points':>15} {'cases':>8} {'violations':>11}"
        f" {'non-deterministic':>18}"
    )
    lines = [
        f"cuguard failure-point sweep on the {_DRIVER_NAMES.get(result.driver, result.driver)} driver"
        + (
            f" (seeded sample of {sum(s.cases for s in result.scenarios)} of {result.total_cases} cases)"
            if result.sampled
            else ""
        ),
        head,
        "-" * len(head),
    ]
    totals = [0, 0, 0, 0, 0]
    for layer in LAYERS:
        rows = [s for s in result.scenarios if s.layer == layer]
        if not rows:
            continue
        row = [len(rows), sum(s.failure_points for s in rows), sum(s.cases for s in rows)]
        row.append(sum(len(s.violations) for s in rows))
        row.append(sum(len(s.nondeterministic) for s in rows))
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        lines.append(f"{layer:<10} {row[0]:>10} {row[1]:>15} {row[2]:>8} {row[3]:>11} {row[4]:>18}")
    lines.append("-" * len(head))
    lines.append(f"{'total':<10} {totals[0]:>10} {totals[1]:>15} {totals[2]:>8} {totals[3]:>11} {totals[4]:>18}")
    lines.append(f"{result.seconds:.1f} s")
    violations = result.violations
    if violations:
        lines.append("")
        lines.append(f"{len(violations)} violation(s):")
        lines.extend(f"  {v}" for v in violations[:max_violations])
        if len(violations) > max_violations:
            lines.append(f"  ... and {len(violations) - max_violations} more (see the JSON)")
    unsteady = result.nondeterministic
    if unsteady:
        lines.append("")
        lines.append(
            f"{len(unsteady)} non-deterministic case(s) (the sweep's own failure: these failure points went untested):"
        )
        by_scenario: dict[str, int] = {}
        for n in unsteady:
            by_scenario[n.scenario] = by_scenario.get(n.scenario, 0) + 1
        lines.extend(f"  {name}: {count}" for name, count in sorted(by_scenario.items()))
        lines.append("  first:")
        lines.extend(f"  {n}" for n in unsteady[:max_violations])
        if len(unsteady) > max_violations:
            lines.append(f"  ... and {len(unsteady) - max_violations} more (see the JSON)")
    return "\n".join(lines)


def write_json(result: SweepResult, path: str | Path) -> None:
    """Write the whole result (every scenario, its recorded calls, every violation and non-deterministic case)."""
    Path(path).write_text(json.dumps(result.to_json(), indent=1), "utf-8")
