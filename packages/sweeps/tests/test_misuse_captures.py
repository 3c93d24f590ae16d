"""The misuse sweep (contract B6) explores captures in progress and a second thread; its catalog is complete."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

# The sweep exercises every layer (see test_misuse.py).
pytest.importorskip("cuguard.graphs")

from cuguard.sweeps import MisuseResult, run_misuse_sweep
from cuguard.sweeps._misuse import captures, session
from cuguard.sweeps._misuse.catalog import COVERAGE, Op, _resolves, build_ops, coverage_problems, public_callables
from cuguard.sweeps._misuse.model import layers
from cuguard.sweeps._misuse.steps import STEPS


def _report(result: MisuseResult) -> str:
    return "\n" + result.format_table(max_shown=25)


def _plant(monkeypatch: pytest.MonkeyPatch, op: Op) -> None:
    """Add ``op`` to the catalog every session of the sweep draws from."""

    def with_planted(L: Any, image: Callable[[], bytes]) -> list[Op]:
        return [*build_ops(L, image), op]

    monkeypatch.setattr(session, "build_ops", with_planted)


# --- completeness -------------------------------------------------------------------------------------


@pytest.mark.contract("B6")
def test_every_public_callable_has_a_catalog_entry_or_a_written_reason() -> None:
    L = layers()
    ops = build_ops(L, lambda: b"")
    assert coverage_problems(L, ops, frozenset(STEPS)) == []
    names = {op.name for op in ops}
    # the callables the catalog lacked (GraphBuilder.keep is where a use-after-free lived) have entries now
    for name in (
        "graphs.GraphBuilder.launch",
        "graphs.GraphBuilder.keep",
        "resources.as_stream",
        "resources.link",
        "graphs.exchange_capture_mode",
    ):
        assert name in names
    assert len(public_callables(L)) > 400  # every layer's __all__, and the members of the classes they export


@pytest.mark.contract("B6")
def test_a_callable_without_entry_or_reason_is_named() -> None:
    L = layers()
    ops = [op for op in build_ops(L, lambda: b"") if op.name != "graphs.GraphBuilder.keep"]
    problems = coverage_problems(L, ops, frozenset(STEPS))
    assert problems == ["graphs.GraphBuilder.keep: no catalog entry and no reason in COVERAGE"]


@pytest.mark.contract("B6")
def test_a_row_naming_a_missing_operation_or_step_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    L = layers()
    ops = build_ops(L, lambda: b"")
    monkeypatch.setitem(COVERAGE, "resources.Stream.priority", "op:resources.Stream.no_such_operation")
    monkeypatch.setitem(COVERAGE, "graphs.Graph.closed", "step:no_such_step")
    monkeypatch.setitem(COVERAGE, "resources.Event.closed", "later")
    problems = coverage_problems(L, ops, frozenset(STEPS))
    assert len(problems) == 3
    assert any("resources.Stream.no_such_operation" in p for p in problems)
    assert any("no_such_step" in p for p in problems)
    assert any("not a sentence" in p for p in problems)


@pytest.mark.contract("B5", "B6")
def test_the_registry_and_the_catalog_name_operations_in_one_scheme() -> None:
    from cuguard.sweeps._failpoints.registry import scenarios

    L = layers()
    ops = build_ops(L, lambda: b"")
    public = set(public_callables(L))
    scheme = re.compile(r"(errors|context|resources|graphs)\.[A-Za-z_][\w.]*(\(\))?(\[[^\]]+\])?")
    names = [op.name for op in ops] + [s.name for s in scenarios()]
    assert [n for n in names if not scheme.fullmatch(n)] == []
    # one callable, one name: what both sweep is keyed alike (constructors, members, functions)
    shared = {op.name for op in ops} & {s.name for s in scenarios()}
    assert {"resources.Device()", "resources.Stream.sync", "context.call_in", "graphs.Node.pred[set]"} <= shared
    # every name starts with a callable its layer exports (the registry's as the catalog's)
    assert [n for n in names if not _resolves(L, n)] == []
    assert {n.split("[")[0] for n in shared} & public


@pytest.mark.contract("B6")
def test_an_operation_named_outside_the_scheme_is_named() -> None:
    L = layers()
    ops = build_ops(L, lambda: b"")
    renamed = [Op("Stream.sync" if op.name == "resources.Stream.sync" else op.name, op.receiver, op.run) for op in ops]
    problems = coverage_problems(L, renamed, frozenset(STEPS))
    assert problems == [
        "Stream.sync: an operation name outside the naming scheme (layer.function, layer.Class(), layer.Class.member)",
        "resources.Stream.sync: no catalog entry and no reason in COVERAGE",
    ]


# --- what a seeded run exercises ------------------------------------------------------------------------


@pytest.mark.contract("B6", "G6")
def test_a_seeded_run_has_captures_in_every_mode_on_own_and_foreign_streams_from_both_threads() -> None:
    # What a seed explores depends on the catalog: this one reaches every situation with the catalog of now.
    result = run_misuse_sweep(examples=12, steps=40, engine="random", seed=4)
    reached = {key: result.exercised.get(key, 0) for key in captures.exercised_keys()}
    assert len(reached) == 12  # 3 modes x own/foreign stream x main/second thread
    assert all(count > 0 for count in reached.values()), reached
    acts = {k: n for k, n in result.exercised.items() if k.startswith("second thread: ")}
    assert {"second thread: call", "second thread: close", "second thread: collect"} <= acts.keys()
    assert result.exercised.get("in progress global/foreign/second", 0) > 0
    assert any(k.startswith("ended ") for k in result.exercised)
    assert any(k.startswith("abandoned ") for k in result.exercised)


@pytest.mark.contract("G6")
def test_only_an_operations_own_requested_work_may_be_refused_by_a_capture() -> None:
    assert "cuCtxSynchronize" in captures.legitimate("context.Context.synchronize")
    assert "cuMemAlloc" in captures.legitimate("resources.Device.allocate")
    assert "cuStreamDestroy" in captures.legitimate("resources.Stream.close")
    assert "cuLaunchKernel" in captures.legitimate("graphs.GraphBuilder.launch")
    for own_behalf in ("resources.Buffer.close", "del", "gc.collect", "teardown", "resources.PinnedMemoryResource()"):
        allowed = captures.legitimate(own_behalf)
        assert not allowed & {"cuCtxSynchronize", "cuMemFree", "cuMemFreeHost", "cuMemAlloc", "cuStreamSynchronize"}


# --- planted violations -----------------------------------------------------------------------------------


def _bookkeeping_that_synchronizes(stream: Any) -> None:
    """Plays cuguard doing bookkeeping on its own behalf with a context synchronization (G6 forbids it)."""
    from cuguard.context import call_in
    from cuguard.errors import driver

    call_in(stream.context, driver.cuCtxSynchronize, None)


@pytest.mark.contract("B6", "G6")
def test_a_planted_operation_that_invalidates_a_capture_is_reported_as_G6(monkeypatch: pytest.MonkeyPatch) -> None:
    planted = Op("planted.bookkeeping", "Stream", _bookkeeping_that_synchronizes, weight=400)
    _plant(monkeypatch, planted)
    result = run_misuse_sweep(examples=8, steps=30, engine="random", seed=6)
    found = [v for v in result.violations if v.rule == "G6" and v.op == "planted.bookkeeping"]
    assert found, _report(result)
    assert any("cuCtxSynchronize invalidated a capture in progress" in v.detail for v in found)
    assert all(v.trace for v in found)  # each with its reproducer


@pytest.mark.contract("B6", "S2")
def test_a_step_that_hangs_is_reported_and_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    lock = threading.Lock()

    def deadlock() -> None:
        with lock, lock:  # a non-reentrant lock taken twice: the thread waits for itself
            pass

    _plant(monkeypatch, Op("planted.deadlock", None, deadlock, weight=400))
    monkeypatch.setattr(session, "STEP_TIMEOUT", 1.0)
    result = run_misuse_sweep(examples=5, steps=30, engine="random", seed=1)
    hangs = [v for v in result.violations if v.rule == "S2" and v.op.startswith("hang")]
    assert hangs, _report(result)
    assert "did not finish within 1 s" in hangs[0].detail
    assert result.stopped
    assert result.examples == 1  # the run stops after the example that hung
    assert not lock.locked()  # interrupted where it waited: the with-block released it
