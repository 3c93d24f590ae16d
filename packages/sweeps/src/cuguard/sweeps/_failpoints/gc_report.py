"""The garbage-collection point sweep's report and command line (``scripts/gcsweep``).

    scripts/gcsweep                                # every case, simulated driver
    scripts/gcsweep --sample 600 --seed 1          # a seeded sample
    scripts/gcsweep --driver real --json OUT.json  # on a GPU, through the fault proxy

Prints a table per layer (operations, collection points, cases, violations, hangs) and the
violations; ``--json`` writes everything. Exit status 1 on a violation, a hang, or a requested
dimension that cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cuguard.sweeps._failpoints.gc_points import DIMENSIONS, HANG_SECONDS, GcSweepResult, run_gc_sweep
from cuguard.sweeps._failpoints.registry import LAYERS

__all__ = ["DEFAULT_SEED", "format_gc_table", "main", "write_gc_json"]

#: The watchdog on a real driver: three runs with 15 other processes starting on the same GPU saw the
#: first cuCtxCreate take over 20 s; run alone, no case came near it.
REAL_HANG_SECONDS = 60.0

#: The seed that picks the cases of ``--sample N``.
DEFAULT_SEED = 20240607


def format_gc_table(result: GcSweepResult, max_violations: int = 50) -> str:
    """The per-layer table, then what could not run, the hangs and the first violations."""
    done = sum(s.cases for s in result.scenarios)
    head = f"{'layer':<10} {'operations':>10} {'points':>8} {'cases':>8} {'violations':>11} {'hangs':>6}"
    lines = [
        f"cuguard garbage-collection point sweep on the {'simulated' if result.driver == 'sim' else 'real'} driver"
        f" (points: {', '.join(result.dimensions)})"
        + (f" (seeded sample of {done} of {result.total_cases} cases)" if result.sampled else ""),
        head,
        "-" * len(head),
    ]
    hung = {h.scenario for h in result.hangs}
    totals = [0, 0, 0, 0, 0]
    for layer in LAYERS:
        rows = [s for s in result.scenarios if s.layer == layer]
        if not rows:
            continue
        row = [
            len(rows),
            sum(s.point_count for s in rows),
            sum(s.cases for s in rows),
            sum(len(s.violations) for s in rows),
            sum(1 for h in result.hangs if h.scenario in {s.name for s in rows}),
        ]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        lines.append(f"{layer:<10} {row[0]:>10} {row[1]:>8} {row[2]:>8} {row[3]:>11} {row[4]:>6}")
    lines.append("-" * len(head))
    lines.append(f"{'total':<10} {totals[0]:>10} {totals[1]:>8} {totals[2]:>8} {totals[3]:>11} {totals[4]:>6}")
    lines.append(f"{result.seconds:.1f} s")
    for hang in result.hangs:
        lines.append("")
        lines.append(f"HANG (the sweep stopped there): {hang}")
        lines.extend(f"    {line}" for line in hang.stack.rstrip().splitlines())
    violations = [v for v in result.violations if v.scenario not in hung or "hang" not in v.detail]
    if violations:
        lines.append("")
        lines.append(f"{len(violations)} violation(s):")
        lines.extend(f"  {str(v)[:600]}" for v in violations[:max_violations])
        if len(violations) > max_violations:
            lines.append(f"  ... and {len(violations) - max_violations} more (see the JSON)")
    return "\n".join(lines)


def write_gc_json(result: GcSweepResult, path: str | Path) -> None:
    """Write the whole result (every operation, its points, every violation and hang) as JSON."""
    Path(path).write_text(json.dumps(result.to_json(), indent=1), "utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: run the sweep, print the table, write JSON; exit 1 on a violation, hang or gap."""
    parser = argparse.ArgumentParser(prog="gcsweep", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--driver", choices=("sim", "real"), default="sim")
    parser.add_argument("--full", action="store_true", help="run every case (the default)")
    parser.add_argument("--sample", type=int, default=None, help="run this many cases, picked with --seed")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--match", default=None, help="only operations whose name contains this")
    parser.add_argument("--points", choices=(*DIMENSIONS, "all"), default="all", help="driver calls, locks, or both")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds before a case is a hang (default {HANG_SECONDS:g} on the simulator, {REAL_HANG_SECONDS:g} on "
        "a GPU, where creating a context can take seconds while other processes start)",
    )
    parser.add_argument("--json", default=None, help="write the full result here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="processes for the simulator's cases (default: one per CPU core, at most 8)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be 1 or more, not {args.jobs}")
    result = run_gc_sweep(
        driver=args.driver,
        dimensions=DIMENSIONS if args.points == "all" else (args.points,),
        sample=None if args.full else args.sample,
        seed=args.seed,
        match=args.match,
        timeout=args.timeout
        if args.timeout is not None
        else (REAL_HANG_SECONDS if args.driver == "real" else HANG_SECONDS),
        jobs=args.jobs,
        progress=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_gc_table(result), flush=True)
    if args.json:
        write_gc_json(result, args.json)
        print(f"wrote {args.json}", flush=True)
    return 1 if result.failed else 0
