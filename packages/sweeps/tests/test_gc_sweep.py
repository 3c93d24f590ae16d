"""The garbage-collection point sweep (contract B6): it finds planted hangs and leaks, samples every operation."""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

# The sweep exercises every layer; where only cuguard-testing and cuguard-errors are installed
# (the package's own test session) it is skipped here and run by `nox -s gcsweep`.
pytest.importorskip("cuguard.graphs")

from cuguard.sweeps._failpoints import gc_points
from cuguard.sweeps._failpoints.gc_points import Env, _sample, garbage_makers, run_gc_sweep
from cuguard.sweeps._failpoints.gc_report import format_gc_table, main
from cuguard.sweeps._failpoints.registry import Scenario, scenarios, with_stream


class _Locked:
    """Garbage whose finalizer takes ``lock`` (a private lock of the test, standing for a library's)."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.me = self  # a reference cycle: only a collection finalizes it

    def __del__(self) -> None:
        with self.lock:
            pass


def _query_holding(lock: threading.Lock, hook: Any = None) -> Any:
    """An operation that makes garbage, then calls the driver while it holds ``lock``."""

    def op(env: Env, s: Any) -> Any:
        _Locked(lock)
        with lock:
            if hook is not None and hook.on_acquire is not None:
                hook.on_acquire()  # as cuguard's locks call their hook, once the lock is held
            return s.stream.query()

    return op


def _join_hung(lock: threading.Lock) -> None:
    """Let the hung case go on (its lock is released from here) and wait for it to end."""
    lock.release()
    for thread in threading.enumerate():
        if thread.name == "cuguard-gc-sweep-case":
            thread.join(30)
    gc.enable()


@pytest.mark.contract("B6", "S2")
def test_a_planted_hang_at_a_driver_call_is_reported_with_its_stack_and_stops_the_sweep() -> None:
    lock = threading.Lock()
    planted = Scenario("planted.hang", "resources", (), with_stream, _query_holding(lock))
    try:
        result = run_gc_sweep(
            scenarios=[planted, *[s for s in scenarios() if s.name == "resources.Stream.sync"]],
            dimensions=("call",),
            contexts=("none",),
            garbage={},
            timeout=3,
        )
    finally:
        _join_hung(lock)
    assert len(result.hangs) == 1
    hang = result.hangs[0]
    assert (hang.scenario, hang.mode, hang.k, hang.point) == ("planted.hang", "GC@call", 1, "cuStreamQuery")
    assert "__del__" in hang.stack
    assert "gc.collect()" in hang.stack
    assert result.failed
    rules = [(v.scenario, v.rule) for v in result.violations]
    assert rules == [("planted.hang", "S2")]
    # The sweep stopped at the hang: the operation after it ran no case.
    assert [s.cases for s in result.scenarios if s.name == "resources.Stream.sync"] == [0]
    assert "HANG" in format_gc_table(result)


@pytest.mark.contract("B6", "S2")
def test_a_planted_hang_at_a_lock_acquisition_is_found_through_the_lock_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = SimpleNamespace(on_acquire=None)

    def set_hook(new: Any) -> Any:
        previous, hook.on_acquire = hook.on_acquire, new
        return previous

    monkeypatch.setattr(gc_points, "set_acquire_hook", set_hook)
    lock = threading.Lock()
    planted = Scenario("planted.lock", "resources", (), with_stream, _query_holding(lock, hook))
    try:
        result = run_gc_sweep(scenarios=[planted], dimensions=("lock",), contexts=("none",), garbage={}, timeout=3)
    finally:
        _join_hung(lock)
    assert [(h.scenario, h.mode, h.k) for h in result.hangs] == [("planted.lock", "GC@lock", 1)]
    assert hook.on_acquire is None  # the hook is put back


@pytest.mark.contract("B6", "O6")
def test_a_planted_leak_among_the_garbage_is_found() -> None:
    kept: list[Any] = []

    def leaky(env: Env) -> Any:
        stream = env.resources.Device(0).create_stream()
        kept.append(stream)  # a hidden strong reference: collecting the cycle releases nothing
        cycle: list[Any] = [stream]
        cycle.append(cycle)
        return cycle

    result = run_gc_sweep(
        match="resources.Stream.sync", dimensions=("call",), contexts=("none",), garbage={"planted leak": leaky}
    )
    kept.clear()
    assert not result.hangs
    found = [v for v in result.violations if v.rule == "O6"]
    assert len(found) == 1
    assert "planted leak" in found[0].detail
    assert "stream" in found[0].detail
    assert (found[0].mode, found[0].call) == ("GC@call", "cuStreamSynchronize")


@pytest.mark.contract("B6")
def test_a_passing_run_collects_every_kind_of_garbage_and_reports_no_violation(tmp_path: Path) -> None:
    out = tmp_path / "gc.json"
    code = main(["--match", "resources.Stream.sync", "--json", str(out), "--quiet", "--jobs", "1", "--points", "call"])
    data = json.loads(out.read_text("utf-8"))
    assert code == 0
    assert data["hangs"] == []
    (row,) = data["scenarios"]
    assert row["violations"] == []
    assert row["cases"] == 2  # one point, two context situations
    assert set(garbage_makers()) >= {"created context", "builder mid-capture", "pools", "module and graphs"}


@pytest.mark.contract("B6")
def test_the_sample_picks_every_operation_and_dimension() -> None:
    cases = [
        (f"op{i}", "none", d, k, "cuX") for i in range(40) for d in ("call", "lock") for k in range(1, 1 + i % 7 + 1)
    ]
    chosen = [cases[i] for i in _sample(cases, 80, seed=3)]
    assert {(c[0], c[2]) for c in chosen} == {(c[0], c[2]) for c in cases}
    assert len(chosen) == 80
    assert chosen == sorted(chosen, key=cases.index)
    operations = [s for s in scenarios() if "resources.Event." in s.name]
    result = run_gc_sweep(
        scenarios=operations, dimensions=("call",), contexts=("none",), sample=len(operations), seed=5
    )
    swept = {s.name for s in result.scenarios if s.point_count}
    assert len(swept) > 1
    assert {s.name for s in result.scenarios if s.cases} == swept


@pytest.mark.contract("B6", "S2")
def test_lock_points_are_the_acquisitions_of_cuguards_own_locks() -> None:
    result = run_gc_sweep(match="context.Context.create", dimensions=("lock",), contexts=("none",))
    points = [p for s in result.scenarios for by_ctx in s.points.values() for ps in by_ctx.values() for p in ps]
    assert points, "Context.create takes the context registry's lock: it must give lock points"
    assert all(p.startswith("lock in ") and "testing." not in p for p in points)
    assert sum(s.cases for s in result.scenarios) == len(points)
    assert not result.hangs
