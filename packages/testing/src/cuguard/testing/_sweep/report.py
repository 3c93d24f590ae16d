"""The sweep's report: a table per layer, the violations, and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from cuguard.testing._sweep.registry import LAYERS
from cuguard.testing._sweep.runner import SweepResult

__all__ = ["format_table", "write_json"]


def format_table(result: SweepResult, max_violations: int = 50) -> str:
    """The per-layer table (operations, failure points, cases, violations), then the first violations."""
    head = f"{'layer':<10} {'operations':>10} {'failure points':>15} {'cases':>8} {'violations':>11}"
    lines = [
        f"cuguard failure-point sweep on the {'simulated' if result.driver == 'sim' else 'real'} driver"
        + (
            f" (seeded sample of {sum(s.cases for s in result.scenarios)} of {result.total_cases} cases)"
            if result.sampled
            else ""
        ),
        head,
        "-" * len(head),
    ]
    totals = [0, 0, 0, 0]
    for layer in LAYERS:
        rows = [s for s in result.scenarios if s.layer == layer]
        if not rows:
            continue
        row = [len(rows), sum(s.failure_points for s in rows), sum(s.cases for s in rows)]
        row.append(sum(len(s.violations) for s in rows))
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        lines.append(f"{layer:<10} {row[0]:>10} {row[1]:>15} {row[2]:>8} {row[3]:>11}")
    lines.append("-" * len(head))
    lines.append(f"{'total':<10} {totals[0]:>10} {totals[1]:>15} {totals[2]:>8} {totals[3]:>11}")
    lines.append(f"{result.seconds:.1f} s")
    violations = result.violations
    if violations:
        lines.append("")
        lines.append(f"{len(violations)} violation(s):")
        lines.extend(f"  {v}" for v in violations[:max_violations])
        if len(violations) > max_violations:
            lines.append(f"  ... and {len(violations) - max_violations} more (see the JSON)")
    return "\n".join(lines)


def write_json(result: SweepResult, path: str | Path) -> None:
    """Write the whole result (every scenario, its recorded calls, every violation) as JSON."""
    Path(path).write_text(json.dumps(result.to_json(), indent=1), "utf-8")
