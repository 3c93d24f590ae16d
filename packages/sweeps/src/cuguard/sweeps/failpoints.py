"""The failure-point sweep (contract B5): every public operation x every driver call x each failure.

Run it with ``nox -s sweep`` (a fixed, seeded sample; ``-- --full`` for every
case), ``scripts/sweep``, or ``python -m cuguard.sweeps.failpoints``::

    python -m cuguard.sweeps.failpoints --full --json sweep.json
    python -m cuguard.sweeps.failpoints --driver real --json sweep-gpu.json   # on a GPU
    python -m cuguard.sweeps.failpoints --driver sim-persistent   # one simulator for every case, as a GPU

:func:`run_sweep` returns a :class:`SweepResult`; :func:`format_table` renders
the per-layer table. The registry of operations and the list of public
callables that make no driver call are :func:`scenarios` and
:data:`NO_DRIVER_CALL`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from cuguard.sweeps._failpoints.registry import LAYERS, NO_DRIVER_CALL, Scenario, scenarios
from cuguard.sweeps._failpoints.report import format_table, write_json
from cuguard.sweeps._failpoints.runner import (
    CONTEXTS,
    DRIVERS,
    MODES,
    NonDeterministic,
    SweepResult,
    Violation,
    run_sweep,
)

__all__ = [
    "CONTEXTS",
    "DEFAULT_SEED",
    "DRIVERS",
    "LAYERS",
    "MODES",
    "NO_DRIVER_CALL",
    "NonDeterministic",
    "Scenario",
    "SweepResult",
    "Violation",
    "format_table",
    "main",
    "run_sweep",
    "scenarios",
    "write_json",
]

#: The seed that picks the cases of ``--sample N``.
DEFAULT_SEED = 20240607


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: run the sweep, print the table, write JSON; the exit status says what it found.

    The full sweep is the default (``--full`` says so explicitly; on the simulator several
    minutes on two cores); ``--sample N`` runs N cases picked with ``--seed`` instead (every
    operation's fault-free run always runs, and one failure point of every operation in every
    failure mode comes first: ``nox -s sweep`` runs such a sample). Exit status: 1 when a
    contract rule was broken; else 3 when a case was not deterministic (its calls before its
    failure point differed from the fault-free run's: that point went untested), unless
    ``--allow-nondeterministic``; else 0.
    """
    parser = argparse.ArgumentParser(prog="sweep", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--driver",
        choices=DRIVERS,
        default="sim",
        help="sim: a fresh simulator per case; real: the GPU; sim-persistent: one simulator for every case",
    )
    parser.add_argument("--full", action="store_true", help="run every case (the default)")
    parser.add_argument("--sample", type=int, default=None, help="run this many cases, picked with --seed")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--match", default=None, help="only scenarios whose name contains this")
    parser.add_argument("--json", default=None, help="write the full result here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="processes for the cases, each on its own driver (default: one per CPU core, at most 8)",
    )
    parser.add_argument(
        "--allow-nondeterministic",
        action="store_true",
        help="exit 0 when the only findings are cases that were not deterministic (they are still reported)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be 1 or more, not {args.jobs}")
    sample = None if args.full else args.sample
    result = run_sweep(
        driver=args.driver,
        sample=sample,
        seed=args.seed,
        match=args.match,
        jobs=args.jobs,
        progress=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_table(result))
    if args.json:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    if result.violations:
        return 1
    return 3 if result.nondeterministic and not args.allow_nondeterministic else 0


if __name__ == "__main__":
    sys.exit(main())
