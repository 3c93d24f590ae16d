"""The misuse sweep (contract B6): a bounded, derandomized run finds nothing; planted defects are found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# The sweep exercises every layer; where only cuguard-testing and cuguard-errors are installed
# (the package's own test session) it is skipped here and run by `nox -s misuse`.
pytest.importorskip("cuguard.graphs")
pytest.importorskip("hypothesis")

from cuguard.sweeps import MisuseResult, run_misuse_sweep
from cuguard.sweeps._misuse import main


def _report(result: MisuseResult) -> str:
    return "\n" + result.format_table(max_shown=25)


@pytest.mark.contract("B6", "E3", "G1", "G2", "O1", "O3", "O4", "O5", "O6", "S2")
def test_bounded_misuse_sweep_finds_no_violation() -> None:
    result = run_misuse_sweep(examples=15, steps=30)
    assert result.examples >= 15
    assert result.steps > 0
    assert result.crashes == 0
    assert not result.violations, _report(result)


@pytest.mark.contract("B6", "O1")
def test_a_planted_copy_defect_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    from cuguard.errors.lowlevel import Unique

    # copy.copy asks its dispatch table before the class's __copy__ (which a compiled class cannot have
    # replaced): every owner class copies as itself, the defect planted.
    pending, owners = [Unique], set()
    while pending:
        cls = pending.pop()
        owners.add(cls)
        pending.extend(sub for sub in cls.__subclasses__() if sub not in owners)
    for cls in owners:
        monkeypatch.setitem(copy._copy_dispatch, cls, lambda self: self)  # type: ignore[attr-defined]
    result = run_misuse_sweep(examples=12, steps=30, engine="random", seed=3)
    found = [v for v in result.violations if v.rule == "O1" and "copy.copy" in v.op]
    assert found, _report(result)
    assert all(v.trace for v in found)  # each violation carries its reproducer


@pytest.mark.contract("B6", "G2")
def test_a_planted_context_leak_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import cuguard.context
    import cuguard.resources._device as device_module

    def call_in_without_restore(context, op, undo, *args):  # type: ignore[no-untyped-def]
        from cuguard.errors import driver

        driver.cuCtxSetCurrent(context.handle)
        return op(*args)

    monkeypatch.setattr(device_module, "call_in", call_in_without_restore)
    assert cuguard.context.call_in is not call_in_without_restore
    result = run_misuse_sweep(examples=10, steps=30, engine="random", seed=5)
    assert any(v.rule == "G2" for v in result.violations), _report(result)


@pytest.mark.contract("B6")
def test_the_random_engine_is_seeded() -> None:
    a = run_misuse_sweep(examples=3, steps=20, engine="random", seed=11)
    b = run_misuse_sweep(examples=3, steps=20, engine="random", seed=11)
    assert a.steps == b.steps == 60
    assert [v.key() for v in a.violations] == [v.key() for v in b.violations]


@pytest.mark.contract("B6")
def test_isolated_examples_run_in_subprocesses() -> None:
    result = run_misuse_sweep(examples=2, steps=10, isolate=True, seed=2)
    assert result.engine == "random"
    assert result.examples == 2
    assert result.crashes == 0, result.crash_details


def test_command_line_writes_a_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "misuse.json"
    status = main(["--examples", "2", "--steps", "10", "--seed", "1", "--json", str(out), "--quiet"])
    table = capsys.readouterr().out
    assert "examples" in table
    assert "crashes" in table
    data = json.loads(out.read_text())
    assert data["driver"] == "sim"
    assert data["examples"] == 2
    assert status == (0 if data["violations"] == 0 else 1)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="driver"):
        run_misuse_sweep(driver="gpu")
    with pytest.raises(ValueError, match="engine"):
        run_misuse_sweep(engine="fuzz")
