"""Running the misuse sweep: in this process, or one example per subprocess (the real GPU's crash canary).

:func:`run_misuse_sweep` returns a :class:`MisuseResult` (examples, steps,
crashes, violations); :meth:`MisuseResult.format_table` and
:meth:`MisuseResult.to_json` report it; :func:`main` is the command line
(``scripts/misuse``, ``python -m cuguard.sweeps._misuse``).

On the real driver every example runs in its own subprocess, so that a crash
of the driver (which the contract forbids, S2) is counted instead of ending the
sweep; a subprocess that dies or hangs is a crash. There is no simulator
accounting there: the checks are the exceptions (E3), the current context
(G2), leaks through the fault proxy's ledger (G1), the refusals of objects of
an uninstalled driver (O3; the sweep installs simulated drivers beside the real
one) and survival.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuguard.sweeps._misuse.checks import MisuseViolation
from cuguard.sweeps._misuse.machine import Sink, hypothesis_available, run_hypothesis, run_random
from cuguard.sweeps._misuse.session import Session

__all__ = ["MisuseResult", "main", "run_misuse_sweep"]

#: The budget of ``nox -s misuse`` and of the CLI's default run.
DEFAULT_EXAMPLES = 30
DEFAULT_STEPS = 40


@dataclass
class MisuseResult:
    """What a misuse sweep found.

    ``violations`` holds every violation (each with the trace of its example up
    to that step); :attr:`distinct` groups them by rule, operation and detail.
    ``crashes`` counts examples whose process died (only with isolation, as on the
    real driver); ``crash_details`` says how each died.
    """

    driver: str
    engine: str
    seed: int | None
    examples: int
    steps: int
    seconds: float
    violations: list[MisuseViolation] = field(default_factory=list)
    crashes: int = 0
    crash_details: list[str] = field(default_factory=list)
    #: what the examples exercised (see :mod:`~cuguard.sweeps._misuse.captures`): steps that ran with a
    #: capture in progress, by mode, stream kind and thread ("in progress global/foreign/second"), captures
    #: begun, ended and abandoned, and the second thread's acts
    exercised: dict[str, int] = field(default_factory=dict)
    stopped: bool = False  # a step hung and the run stopped after that example

    @property
    def distinct(self) -> list[tuple[MisuseViolation, int]]:
        """One violation per defect (rule, operation, detail without handles), with how often it occurred."""
        seen: dict[tuple[str, str, str], list[Any]] = {}
        for v in self.violations:
            key = v.key()
            if key in seen:
                seen[key][1] += 1
            else:
                seen[key] = [v, 1]
        return [(v, n) for v, n in seen.values()]

    @property
    def ok(self) -> bool:
        return not self.violations and not self.crashes

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "engine": self.engine,
            "seed": self.seed,
            "examples": self.examples,
            "steps": self.steps,
            "crashes": self.crashes,
            "crash_details": self.crash_details,
            "violations": len(self.violations),
            "distinct": [{**v.to_json(), "count": n} for v, n in self.distinct],
            "seconds": round(self.seconds, 2),
            "exercised": dict(sorted(self.exercised.items())),
            "stopped": self.stopped,
        }

    def format_table(self, max_shown: int = 40, traces: bool = True) -> str:
        """The summary table, violations by contract clause, and each distinct violation with a reproducer."""
        where = "simulated" if self.driver == "sim" else "real"
        seed = "derandomized" if self.seed is None else f"seed {self.seed}"
        head = f"{'examples':>8} {'steps':>7} {'crashes':>7} {'violations':>10} {'distinct':>8} {'seconds':>8}"
        distinct = self.distinct
        lines = [
            f"cuguard misuse sweep (B6) on the {where} driver ({self.engine}, {seed})",
            head,
            "-" * len(head),
            f"{self.examples:>8} {self.steps:>7} {self.crashes:>7} {len(self.violations):>10} {len(distinct):>8}"
            f" {self.seconds:>8.1f}",
        ]
        progress = {k[len("in progress ") :]: n for k, n in self.exercised.items() if k.startswith("in progress ")}
        if progress:
            lines.append("")
            lines.append("steps with a capture in progress (mode/stream/thread that began it):")
            lines.append("  " + ", ".join(f"{k} {n}" for k, n in sorted(progress.items())))
        acts = sum(n for k, n in self.exercised.items() if k.startswith("second thread: "))
        if acts:
            lines.append(f"second-thread acts between steps: {acts}")
        if self.stopped:
            lines.append("the run stopped early: a step hung (see the S2 violation)")
        if distinct:
            by_rule: dict[str, list[int]] = {}
            for v, n in distinct:
                counts = by_rule.setdefault(v.rule, [0, 0])
                counts[0] += n
                counts[1] += 1
            lines.append("")
            lines.append(f"{'clause':<7} {'violations':>10} {'distinct':>8}")
            for rule in sorted(by_rule):
                total, kinds = by_rule[rule]
                lines.append(f"{rule:<7} {total:>10} {kinds:>8}")
            lines.append("")
            lines.append("distinct violations (first occurrence; count):")
            for v, n in distinct[:max_shown]:
                lines.append(f"  {v}  (x{n}, example {v.example} step {v.step})")
                if traces:
                    lines.extend(f"      {line}" for line in v.trace[-12:])
            if len(distinct) > max_shown:
                lines.append(f"  ... and {len(distinct) - max_shown} more (see the JSON)")
        for detail in self.crash_details[:10]:
            lines.append(f"crash: {detail}")
        return "\n".join(lines)


def run_misuse_sweep(
    *,
    driver: str = "sim",
    examples: int = DEFAULT_EXAMPLES,
    steps: int = DEFAULT_STEPS,
    seed: int | None = None,
    engine: str = "auto",
    isolate: bool | None = None,
    shrink: bool = False,
    timeout: float = 300.0,
    callbacks_calling_cuguard: bool = True,
    progress: Callable[[str], None] | None = None,
) -> MisuseResult:
    """Run the misuse sweep (contract B6) and return what it found.

    ``driver``: ``"sim"`` (a fresh simulated driver per example, with the
    simulator's accounting) or ``"real"`` (the GPU; every example in its own
    subprocess). ``examples`` examples of up to ``steps`` steps each; ``seed``
    picks them (``None``: the fixed, derandomized examples). ``engine``:
    ``"hypothesis"`` (a ``RuleBasedStateMachine``), ``"random"`` (seeded
    ``random.Random``, no hypothesis needed) or ``"auto"`` (hypothesis when
    installed and the examples run in this process). ``isolate`` runs each
    example in a subprocess (default: only on the real driver), so that a crash
    is counted, not fatal. ``shrink`` (hypothesis, in process) stops at the first
    example that breaks a rule and shrinks it to a minimal one.
    ``callbacks_calling_cuguard``: on the simulator, some host callbacks call
    cuguard (which must refuse, O5).

    Raises ``ValueError`` for a bad ``driver``, ``engine`` or budget.
    """
    if driver not in ("sim", "real"):
        raise ValueError(f"driver must be 'sim' or 'real', not {driver!r}")
    if engine not in ("auto", "hypothesis", "random"):
        raise ValueError(f"engine must be 'auto', 'hypothesis' or 'random', not {engine!r}")
    if examples < 0 or steps < 0:
        raise ValueError("examples and steps must be 0 or more")
    if isolate is None:
        isolate = driver == "real"
    if engine == "auto":
        engine = "hypothesis" if hypothesis_available() and not isolate else "random"
    if engine == "hypothesis" and isolate:
        raise ValueError("the hypothesis engine runs in this process; use engine='random' with isolate")
    start = time.perf_counter()
    if isolate:
        return _run_isolated(driver, examples, steps, seed, timeout, callbacks_calling_cuguard, progress, start)
    sink = Sink(driver, progress=progress)
    if engine == "hypothesis":
        run_hypothesis(
            sink,
            examples=examples,
            steps=steps,
            seed=seed,
            shrink=shrink,
            callbacks_calling_cuguard=callbacks_calling_cuguard,
        )
        violations = sink.failing if shrink and sink.failing else sink.violations
    else:
        run_random(sink, examples=examples, steps=steps, seed=seed, callbacks_calling_cuguard=callbacks_calling_cuguard)
        violations = sink.violations
    return MisuseResult(
        driver,
        engine,
        seed,
        sink.examples,
        sink.steps,
        time.perf_counter() - start,
        violations,
        exercised=dict(sink.exercised),
        stopped=sink.stopped,
    )


def _child_env() -> dict[str, str]:
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


#: How many last lines of a crashed example's stderr are kept: its last steps, then where it died.
CRASH_LINES = 24


def _run_isolated(  # noqa: PLR0917
    driver: str,
    examples: int,
    steps: int,
    seed: int | None,
    timeout: float,
    callbacks: bool,
    progress: Callable[[str], None] | None,
    start: float,
) -> MisuseResult:
    result = MisuseResult(driver, "random", seed, 0, 0, 0.0)
    env = _child_env()
    with tempfile.TemporaryDirectory(prefix="cuguard-misuse-") as tmp:
        for i in range(examples):
            out = Path(tmp) / f"example-{i}.json"
            cmd = [
                sys.executable,
                "-m",
                "cuguard.sweeps._misuse",
                "--child",
                str(i),
                "--driver",
                driver,
                "--steps",
                str(steps),
                "--json",
                str(out),
            ]
            cmd[1:1] = ["-X", "faulthandler"]  # a crash prints where it happened
            if seed is not None:
                cmd += ["--seed", str(seed)]
            if not callbacks:
                cmd += ["--no-cuguard-callbacks"]
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                result.examples += 1
                result.crashes += 1
                result.crash_details.append(f"example {i}: no answer after {timeout:.0f} s (hung)")
                continue
            result.examples += 1
            if not out.exists():
                result.crashes += 1
                how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
                tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-CRASH_LINES:]
                result.crash_details.append(f"example {i}: {how}:\n    " + "\n    ".join(tail))
                if progress is not None:
                    progress(f"example {i + 1}/{examples} crashed: {result.crash_details[-1]}")
                continue
            data = json.loads(out.read_text("utf-8"))
            result.steps += int(data["steps"])
            for key, count in data.get("exercised", {}).items():
                result.exercised[key] = result.exercised.get(key, 0) + int(count)
            for v in data["violations"]:
                result.violations.append(
                    MisuseViolation(v["rule"], v["op"], v["detail"], v["example"], v["step"], tuple(v["trace"]))
                )
            if proc.returncode not in (0, 1):
                # it ran every step and then died: at exit (S1, S2), in a destructor or an atexit handler
                result.crashes += 1
                how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
                tail = (proc.stderr or "").strip().splitlines()[-4:]
                result.crash_details.append(f"example {i}: {how} after writing its results: {' | '.join(tail)}")
            if progress is not None:
                progress(f"example {i + 1}/{examples}: {len(result.violations)} violations, {result.crashes} crashes")
    result.seconds = time.perf_counter() - start
    return result


def _child(args: argparse.Namespace) -> int:
    """One example in this process; writes ``{"steps", "violations"}`` as JSON."""
    Session.echo = sys.stderr  # the parent shows the last steps of an example that crashed
    sink = Sink(args.driver)
    run_random(
        sink,
        examples=1,
        steps=args.steps,
        seed=args.seed,
        first=args.child,
        callbacks_calling_cuguard=not args.no_cuguard_callbacks,
    )
    Path(args.json).write_text(
        json.dumps(
            {
                "steps": sink.steps,
                "violations": [v.to_json() for v in sink.violations],
                "exercised": dict(sink.exercised),
            }
        ),
        "utf-8",
    )
    return 1 if sink.violations else 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: run the sweep, print the table, write JSON; exit 1 on a violation or crash."""
    parser = argparse.ArgumentParser(
        prog="misuse",
        description="The misuse sweep (contract B6): stateful random exploration of cuguard's whole public API.",
    )
    parser.add_argument("--driver", choices=("sim", "real"), default="sim")
    parser.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES, help="examples to run (default %(default)s)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="steps per example (default %(default)s)")
    parser.add_argument("--seed", type=int, default=None, help="pick the examples with this seed (default: fixed ones)")
    parser.add_argument("--engine", choices=("auto", "hypothesis", "random"), default="auto")
    parser.add_argument("--isolate", action="store_true", help="one subprocess per example (always on --driver real)")
    parser.add_argument("--shrink", action="store_true", help="stop at the first failing example and shrink it")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per isolated example")
    parser.add_argument("--no-cuguard-callbacks", action="store_true", help="no host callbacks that call cuguard")
    parser.add_argument("--json", default=None, help="write the result here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return _child(args)
    result = run_misuse_sweep(
        driver=args.driver,
        examples=args.examples,
        steps=args.steps,
        seed=args.seed,
        engine=args.engine,
        isolate=True if args.isolate or args.driver == "real" else None,
        shrink=args.shrink,
        timeout=args.timeout,
        callbacks_calling_cuguard=not args.no_cuguard_callbacks,
        progress=None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(result.format_table())
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1), "utf-8")
        print(f"wrote {args.json}")
    return 0 if result.ok else 1
