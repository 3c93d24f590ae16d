"""Running the scenarios: on the simulator, on the real driver, against recorded answers.

Modes (one at a time):

- ``--real`` (the default): every scenario on a fresh simulated driver and on the real driver,
  each in a process of its own so that a crash is counted, not fatal; the two must agree.
- ``--recorded [FILE]``: every scenario on a fresh simulated driver, compared with the answers a
  real GPU gave (``recorded/h200.json`` unless FILE is named); for a machine with no GPU. A
  scenario the file has no answer for is listed as not recorded and counted, not failed.
- ``--sim-only``: every scenario on the simulator only, which checks that each runs at all.

``--record FILE`` (with the real run) also writes the real driver's answers to FILE, with a
header naming the machine, for ``--recorded``; ``--jobs N`` runs N scenario processes at once.
``--only NAME`` (repeatable) restricts the run to the scenarios named; ``--json FILE`` writes one
row per scenario. Exit status 1 when a scenario disagrees or breaks, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import platform
import shutil
import subprocess
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import cuda.bindings
from cuda.bindings import driver as B

import differential
from cuguard.testing import SimulatedDriver
from differential.common import SCENARIOS, TWO_DEVICE, ok

PACKAGE = Path(differential.__file__).resolve().parent
RECORDED = PACKAGE / "recorded" / "h200.json"
SKIPPED = "skipped: needs two devices"
TABLES = ("answers", "not_run")  # a recording's tables; its other keys describe the machine


def load_scenarios() -> dict[str, Any]:
    """Every scenario, area by area, in the order the area modules define them."""
    for area in differential.AREAS:
        importlib.import_module(f"differential.{area}")
    return SCENARIOS


def run_all(driver: Any, devices: int, only: Iterable[str] | None = None) -> dict[str, Any]:
    """The observations of each scenario (of ``only`` when given) on ``driver``.

    A scenario that needs two devices is skipped when ``devices`` is fewer; one that raises gives
    ``{"error": ..., "trace": ...}`` instead of observations.
    """
    wanted = None if only is None else set(only)
    results: dict[str, Any] = {}
    for key, fn in load_scenarios().items():
        if wanted is not None and key not in wanted:
            continue
        if key in TWO_DEVICE and devices < 2:
            results[key] = SKIPPED
            continue
        try:
            results[key] = fn(driver)
        except Exception as exc:  # noqa: BLE001 - reported as a broken scenario
            results[key] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)}
    return results


def plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists), so that both sides compare alike."""
    return json.loads(json.dumps(value, default=str))


def canonical(value: Any) -> str:
    """``value`` as JSON text with sorted keys: equal only when types agree too (``True`` is not ``1``)."""
    return json.dumps(plain(value), sort_keys=True)


def run_simulated(devices: int, only: Iterable[str]) -> dict[str, Any]:
    """Each scenario of ``only`` on a simulated driver of its own with ``devices`` devices, as plain JSON values."""
    results: dict[str, Any] = {}
    for key in only:
        sim = SimulatedDriver(devices=devices)
        sim.cuInit(0)
        results[key] = plain(run_all(sim, devices, only=[key])[key])
    return results


def run_real_one(key: str) -> int:
    """One scenario on the real driver; its observations as one line of JSON on stdout."""
    B.cuInit(0)
    one = run_all(B, int(ok(B.cuDeviceGetCount())), only=[key])[key]
    print(json.dumps(plain(one)))
    return 0


def run_real_in_process(key: str) -> Any:
    """One scenario on the real driver in a process of its own: its observations, or what ended the process."""
    try:
        done = subprocess.run(
            [sys.executable, str(PACKAGE), "--real-one", key],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 120 s"}
    if done.returncode != 0:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
        return {"error": f"the scenario's process ended: {how}", "stderr": done.stderr[-2000:]}
    lines = done.stdout.strip().splitlines()
    if not lines:
        return {"error": "the scenario's process printed no observations", "stderr": done.stderr[-2000:]}
    return json.loads(lines[-1])


def run_real_isolated(devices: int, only: Iterable[str], jobs: int = 1) -> dict[str, Any]:
    """Each scenario of ``only`` on the real driver in a process of its own: a crash is counted, not fatal.

    ``jobs`` processes run at once (scenarios that compare free memory before and after an
    allocation assume no other process allocates meanwhile: one at a time is the reference).
    """
    keys = list(only)
    results: dict[str, Any] = {key: SKIPPED for key in keys if key in TWO_DEVICE and devices < 2}
    wanted = [key for key in keys if key not in results]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_real_in_process, key): key for key in wanted}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = future.result()
            print(f"ran {futures[future]}", flush=True)
    return {key: results[key] for key in keys}


def describe_machine(devices: int) -> dict[str, Any]:
    """The header of a recording: the GPU, driver, cuda-bindings and Python that gave the answers."""
    names = sorted(
        {bytes(ok(B.cuDeviceGetName(256, ok(B.cuDeviceGet(i))))).split(b"\0")[0].decode() for i in range(devices)}
    )
    version = int(ok(B.cuDriverGetVersion()))
    release = "unknown"
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        lines = done.stdout.split()
        if done.returncode == 0 and lines:
            release = lines[0]
    gpus = f"one {names[0]}" if devices == 1 and names else f"{devices} devices ({', '.join(names)})"
    python = ".".join(platform.python_version_tuple()[:2])
    machine = (
        f"{gpus}, driver {release} (CUDA {version // 1000}.{version % 1000 // 10}), "
        f"cuda-bindings {cuda.bindings.__version__}, Python {python}"
    )
    return {"machine": machine, "devices": devices}


def write_recording(path: Path, devices: int, real: dict[str, Any]) -> None:
    """The real driver's answers in ``path``: observations of the scenarios that ran, the reason for the others.

    When ``path`` already holds a recording of the same machine, the answers of scenarios this run
    left out (``--only``) are kept, as long as the scenario still exists.
    """
    header = describe_machine(devices)
    answers: dict[str, Any] = {}
    not_run: dict[str, Any] = {}
    if path.exists():
        before = load_recording(path)
        if before.get("machine") == header["machine"]:
            answers = {key: value for key, value in before["answers"].items() if key in SCENARIOS}
            not_run = {key: value for key, value in before["not_run"].items() if key in SCENARIOS}
        else:
            print(f"{path} holds answers of another machine ({before.get('machine')}): replaced")
    for key, value in real.items():
        answers.pop(key, None)
        not_run.pop(key, None)
        if isinstance(value, list):
            answers[key] = value
        else:
            not_run[key] = value if isinstance(value, str) else value.get("error", "broke")
    path.write_text(dump_recording({**header, "answers": answers, "not_run": not_run}))
    print(f"recorded {len(answers)} answers ({len(not_run)} scenarios without one) in {path}")


def dump_recording(recording: dict[str, Any]) -> str:
    """``recording`` as JSON text with one line per scenario, so that a new recording reads as a short diff."""

    def table(entries: dict[str, Any]) -> str:
        lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in sorted(entries.items())]
        return "{\n" + ",\n".join(lines) + "\n }" if lines else "{}"

    head = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in recording.items() if key not in TABLES]
    tables = [f" {json.dumps(key)}: {table(recording[key])}" for key in TABLES]
    return "{\n" + ",\n".join(head + tables) + "\n}\n"


def load_recording(path: Path) -> dict[str, Any]:
    """A recording written by :func:`write_recording`."""
    recording: dict[str, Any] = json.loads(path.read_text())
    return recording


def compare(keys: list[str], sim: dict[str, Any], other: dict[str, Any] | None) -> tuple[list[dict[str, Any]], int]:
    """One row per scenario and the number of disagreements (a broken scenario counts as one).

    ``other`` holds the real answers (``None``: simulator only); a key it lacks is not recorded.
    Each disagreement is printed with both sides.
    """
    rows: list[dict[str, Any]] = []
    disagreed = 0
    for key in keys:
        s = sim[key]
        broken = isinstance(s, dict) and "error" in s
        if s == SKIPPED:
            rows.append({"scenario": key, "sim": s, "real": s, "agree": None})
            continue
        if other is not None and key not in other:
            rows.append({"scenario": key, "sim": s, "real": "not recorded", "agree": None if not broken else False})
            if broken:
                disagreed += 1
                print(f"DISAGREE {key}\n  sim:  {s}\n  real: not recorded")
            else:
                print(f"NOT RECORDED {key}")
            continue
        r = s if other is None else other[key]
        same = canonical(s) == canonical(r) and not broken
        rows.append({"scenario": key, "sim": s, "real": r, "agree": same})
        if not same:
            disagreed += 1
            print(f"DISAGREE {key}\n  sim:  {s}\n  real: {r}")
    return rows, disagreed


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="differential", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--real", action="store_true", help="simulator against the real driver (the default)")
    mode.add_argument("--sim-only", action="store_true", help="the simulator only: every scenario runs")
    mode.add_argument(
        "--recorded",
        nargs="?",
        const=str(RECORDED),
        default=None,
        metavar="FILE",
        help="simulator against recorded answers (default: recorded/h200.json)",
    )
    parser.add_argument("--record", default=None, metavar="FILE", help="with the real run: write its answers to FILE")
    parser.add_argument("--only", action="append", default=None, metavar="NAME", help="only this scenario")
    parser.add_argument("--json", default=None, metavar="FILE", help="one row per scenario as JSON")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="with the real run: N scenarios at once")
    parser.add_argument("--real-one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    known = load_scenarios()
    for key in [*(args.only or []), *([args.real_one] if args.real_one else [])]:
        if key not in known:
            parser.error(f"no scenario named {key!r}")
    if args.record is not None and (args.sim_only or args.recorded is not None):
        parser.error("--record needs the real run")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.real_one is not None:
        return run_real_one(args.real_one)
    keys = [key for key in SCENARIOS if args.only is None or key in args.only]
    recording: dict[str, Any] | None = None
    if args.recorded is not None:
        recording = load_recording(Path(args.recorded))
        devices = int(recording["devices"])
        mode = f"simulator vs answers recorded on {recording['machine']}"
    elif args.sim_only:
        devices = 2  # the simulator gets two devices without a GPU
        mode = "simulator only"
    else:
        B.cuInit(0)
        devices = int(ok(B.cuDeviceGetCount()))  # the simulator gets as many as the real machine has
        mode = "simulator vs real driver"
    sim = run_simulated(devices, keys)
    other: dict[str, Any] | None = None
    if recording is not None:
        other = {key: value for key, value in recording["answers"].items() if key in SCENARIOS}
    elif not args.sim_only:
        other = run_real_isolated(devices, keys, args.jobs)
        if args.record is not None:
            write_recording(Path(args.record), devices, other)
    rows, disagreed = compare(keys, sim, other)
    skipped = sum(row["sim"] == SKIPPED for row in rows)
    unrecorded = sum(row["real"] == "not recorded" and row["agree"] is None for row in rows)
    ran = len(keys) - skipped
    counts = f"{ran} scenarios ran, {ran - disagreed - unrecorded} agreed, {disagreed} disagreed"
    if recording is not None:
        counts += f", {unrecorded} not recorded"
    print(f"differential ({mode}, {devices} device(s)): {counts}, {skipped} skipped (need two devices)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 1 if disagreed else 0
