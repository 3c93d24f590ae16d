"""The failure-point sweep (contract B5): coverage of the registry, and the sweep itself on a few operations."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
from pathlib import Path

import pytest

# The sweep exercises every layer; where only cuguard-testing and cuguard-errors are installed
# (the package's own test session) it is skipped here and run by `nox -s sweep`.
pytest.importorskip("cuguard.graphs")

from cuguard.sweeps.failpoints import LAYERS, NO_DRIVER_CALL, format_table, main, run_sweep, scenarios, write_json


def _public_callables(layer: str) -> set[str]:
    """``layer.Class.member`` for every public method and property, ``layer.Class()`` and ``layer.function``."""
    module = importlib.import_module(f"cuguard.{layer}")
    out: set[str] = set()
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue  # exception and warning classes are data, not operations
            if f"{layer}.{name}" in NO_DRIVER_CALL:
                out.add(f"{layer}.{name}")
                continue
            out.add(f"{layer}.{name}()")
            for member, value in inspect.getmembers(obj):
                if member.startswith("_") or getattr(BaseException, member, None) is value:
                    continue
                if (
                    callable(value)
                    or isinstance(inspect.getattr_static(obj, member), property)
                    or member in getattr(obj, "__slots__", ())
                    or inspect.isdatadescriptor(value)
                ):
                    out.add(f"{layer}.{name}.{member}")
        else:
            out.add(f"{layer}.{name}")
    return out


@pytest.mark.contract("B5")
@pytest.mark.parametrize("layer", LAYERS)
def test_every_public_callable_is_swept_or_listed(layer: str) -> None:
    covered = {key for scenario in scenarios() for key in scenario.covers}
    missing = sorted(_public_callables(layer) - covered - set(NO_DRIVER_CALL))
    assert not missing, (
        "public callables neither in the sweep registry (cuguard.sweeps._failpoints.registry) nor listed in "
        f"NO_DRIVER_CALL: {missing}"
    )


def test_registry_names_are_unique_and_listed_callables_exist() -> None:
    names = [s.name for s in scenarios()]
    assert len(names) == len(set(names))
    every = set().union(*(_public_callables(layer) for layer in LAYERS))
    covered = {key for scenario in scenarios() for key in scenario.covers}
    dunder = {key for key in covered if ".__" in key}
    assert not (covered - every - dunder), "the registry names callables that do not exist"
    assert not (set(NO_DRIVER_CALL) & covered), "a callable both swept and listed as making no driver call"


@pytest.mark.contract("B5", "G1", "G2", "G3", "G4", "W4", "W5", "S2")
@pytest.mark.parametrize(
    "match", ["resources.Device.create_stream", "resources.Buffer.close", "context.call_in", "Stream.__del__"]
)
def test_sweep_of_an_operation_finds_no_violation(match: str) -> None:
    # A seeded sample (every operation in every failure mode at least once); `nox -s sweep -- --full`
    # runs every case of every operation.
    result = run_sweep(match=match, sample=60, seed=1)
    assert result.scenarios
    assert sum(s.cases for s in result.scenarios) > 0
    assert not result.violations, "\n".join(str(v) for v in result.violations)


@pytest.mark.contract("B5")
def test_sweep_reports_a_violation_it_is_shown() -> None:
    # A scenario that swallows the failure it is given must be reported (E1), with k, code and call.
    from cuguard.sweeps._failpoints.registry import Scenario, dev_only

    def swallow(env: object, s: object) -> None:
        with contextlib.suppress(Exception):  # swallowing the failure is the point of the test
            s.dev.sync()  # type: ignore[attr-defined]

    broken = Scenario("resources.broken", "resources", (), dev_only, swallow)
    result = run_sweep(scenarios=[broken], modes=("OUT_OF_MEMORY",), contexts=("none",))
    rules = {(v.rule, v.mode) for v in result.violations}
    assert ("E1", "OUT_OF_MEMORY") in rules
    assert all(v.k >= 1 and v.call for v in result.violations)
    assert "violation" in format_table(result)


def test_command_line_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    assert main(["--match", "Stream.sync", "--json", str(out), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "resources" in table
    assert "total" in table
    data = json.loads(out.read_text())
    assert data["driver"] == "sim"
    assert data["scenarios"][0]["cases"] > 0


def test_sampling_is_seeded() -> None:
    a = run_sweep(match="Device.create_event", sample=10, seed=1)
    b = run_sweep(match="Device.create_event", sample=10, seed=1)
    assert a.sampled
    assert sum(s.cases for s in a.scenarios) == 10
    assert [v.k for v in a.violations] == [v.k for v in b.violations]
    write_json(a, Path("/dev/null"))


def test_a_sample_fails_every_operation_in_every_mode_first() -> None:
    # One operation with a thousand failure points in one mode, another with one point in another
    # mode: a sample of two holds both (a uniform sample would almost never pick the second).
    from cuguard.sweeps._failpoints.registry import Scenario, dev_only
    from cuguard.sweeps._failpoints.runner import _stratified_sample

    def body(env: object, s: object) -> None:
        pass

    big = Scenario("resources.big", "resources", (), dev_only, body)
    small = Scenario("resources.small", "resources", (), dev_only, body)
    cases = [(big, "none", "OUT_OF_MEMORY", k, []) for k in range(1, 1001)]
    cases += [(small, "none", "STICKY", 1, [])]
    for seed in range(5):
        assert _stratified_sample(cases, 2, seed)[-1] == 1000
        picked = _stratified_sample(cases, 10, seed)
        assert len(set(picked)) == 10
        assert picked == sorted(picked)
        assert 1000 in picked
    assert _stratified_sample(cases, 10, 3) == _stratified_sample(cases, 10, 3)


@pytest.mark.contract("B5")
def test_cases_run_in_several_processes_as_in_one() -> None:
    # Every case runs once whichever process runs it: the same counts, the same (no) violations.
    one = run_sweep(match="Device.create_", sample=60, seed=2, jobs=1)
    two = run_sweep(match="Device.create_", sample=60, seed=2, jobs=2)
    assert len(one.scenarios) > 1
    assert all(s.cases for s in one.scenarios)  # every scenario has cases: both processes get some
    assert {s.name: (s.cases, s.calls) for s in two.scenarios} == {s.name: (s.cases, s.calls) for s in one.scenarios}
    assert [str(v) for v in two.violations] == [str(v) for v in one.violations]
    with pytest.raises(ValueError, match="jobs"):
        run_sweep(match="Device.create_event", jobs=0)
