"""The failure-point sweep checks that it tests what it means to (contract B5).

A case fails call ``k`` of the operation's fault-free run: that means something only while the
operation makes the same calls up to ``k``. A case whose calls part from the fault-free run's
before its failure point, or a second fault-free run that differs from the first, is reported
as not deterministic: apart from the contract violations, and not as a pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("cuguard.graphs")

from cuguard.sweeps._failpoints import registry, runner
from cuguard.sweeps.failpoints import MODES, format_table, main, run_sweep, write_json

pytestmark = pytest.mark.contract("B5")


def _changing_scenario(*, longer_later: bool) -> registry.Scenario:
    """A scenario whose first run synchronizes the device, and whose later runs make one more or one call less.

    ``longer_later``: the later runs read the memory information first (another call 1); else
    the first run reads it and the later ones do not.
    """
    runs = [0]

    def op(env: registry.Env, s: Any) -> None:
        runs[0] += 1
        if (runs[0] > 1) == longer_later:
            _ = s.dev.memory_info  # cuMemGetInfo
        s.dev.sync()  # cuCtxSynchronize

    return registry.Scenario("resources.changing", "resources", (), registry.dev_only, op)


@pytest.mark.parametrize("longer_later", [True, False], ids=["a call more later", "a call less later"])
def test_a_scenario_whose_path_changes_is_reported_as_not_deterministic(longer_later: bool) -> None:
    result = run_sweep(scenarios=[_changing_scenario(longer_later=longer_later)], contexts=("none",))
    found = result.nondeterministic
    assert found, "a path that changes between runs went unreported"
    # Not a contract violation: the operation raised what each injected failure called for.
    assert not result.violations, "\n".join(str(v) for v in result.violations)
    # The second fault-free run is compared with the first.
    baseline = [n for n in found if not n.mode]
    assert len(baseline) == 1
    assert "two fault-free runs differ" in baseline[0].detail
    assert "cuMemGetInfo" in baseline[0].detail  # the call one run makes and the other does not
    assert baseline[0].k >= 1
    # The cases whose calls up to their failure point changed are reported, with the point they
    # meant; those before the first call that changes are not.
    cases = [n for n in found if n.mode]
    assert cases
    assert all("the calls differ" in n.detail for n in cases)
    assert all(n.k >= baseline[0].k for n in cases)
    assert sum(s.cases for s in result.scenarios) > len(cases)


def test_a_deterministic_scenario_is_not_reported() -> None:
    result = run_sweep(match="resources.Device.sync", contexts=("none", "other"))
    assert sum(s.cases for s in result.scenarios) > 0
    assert not result.nondeterministic
    assert not result.violations


def test_the_report_counts_and_lists_them_apart_from_violations(tmp_path: Path) -> None:
    result = run_sweep(scenarios=[_changing_scenario(longer_later=True)], contexts=("none",))
    table = format_table(result)
    head, total = table.splitlines()[1], next(line for line in table.splitlines() if line.startswith("total"))
    assert "non-deterministic" in head
    assert total.split()[-2:] == ["0", str(len(result.nondeterministic))]  # violations, non-deterministic
    assert f"{len(result.nondeterministic)} non-deterministic case(s)" in table
    assert "violation(s):" not in table
    out = tmp_path / "sweep.json"
    write_json(result, out)
    data = json.loads(out.read_text())
    assert len(data["scenarios"][0]["nondeterministic"]) == len(result.nondeterministic)
    assert data["scenarios"][0]["violations"] == []


def test_the_command_line_fails_on_them_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    def only_changing() -> list[registry.Scenario]:
        return [_changing_scenario(longer_later=True)]

    monkeypatch.setattr(registry, "scenarios", only_changing)
    assert main(["--jobs", "1", "--quiet"]) == 3
    monkeypatch.setattr(registry, "scenarios", only_changing)  # a fresh run counter
    assert main(["--jobs", "1", "--quiet", "--allow-nondeterministic"]) == 0


def test_a_process_whose_fault_free_run_differs_reports_it() -> None:
    # The cases a process runs were picked from the fault-free run of the process that listed
    # them; the process records its own, and a difference is reported, not swept over.
    spec = ("resources.Device.sync", "none", "OUT_OF_MEMORY", 1, ("cuMemGetInfo",))
    rows = runner._run_shard([spec], "sim")
    ((name, count, violations, unsteady),) = rows
    assert (name, count) == ("resources.Device.sync", 1)
    assert [n.mode for n in unsteady] == [""]
    assert "this process's fault-free run differs at call 1" in unsteady[0].detail
    assert not violations


def test_a_driver_serving_every_case_gives_each_case_the_default_capture_mode() -> None:
    # One simulated driver for the whole sweep, as a GPU: a case whose restoring exchange of the
    # capture mode fails by injection leaves the thread relaxed, and without the runner giving
    # each case the default mode back, every later case of a collected buffer skipped the
    # restore (one call less: its last failure points were never reached). A sticky fault is left
    # out: what cuguard reports for it depends on the made-up faults of earlier cases (W7).
    modes = tuple(m for m in MODES if m != "STICKY")
    result = run_sweep(driver="sim-persistent", match="resources.Buffer.__del__[virtual]", modes=modes)
    ((scenario,),) = [result.scenarios]
    assert "cuThreadExchangeStreamCaptureMode" in scenario.calls["none"]
    assert scenario.cases > 0
    assert not result.nondeterministic, "\n".join(str(n) for n in result.nondeterministic)
    assert not result.violations, "\n".join(str(v) for v in result.violations)


def test_a_driver_serving_every_case_reads_device_properties_in_every_case() -> None:
    # Device.properties caches what it read in the one Device of the driver: each case's set-up
    # forgets it, so that every case reads the attribute the first did.
    result = run_sweep(driver="sim-persistent", match="resources.Device.properties")
    ((scenario,),) = [result.scenarios]
    assert scenario.calls["none"] == ["cuDeviceGetAttribute"]
    assert scenario.cases > 0
    assert not result.nondeterministic, "\n".join(str(n) for n in result.nondeterministic)
    assert not result.violations


def test_collections_happen_only_where_the_case_asks() -> None:
    # Automatic collection is off while a case runs (and back on after it).
    import gc

    seen: list[bool] = []

    def op(env: registry.Env, s: SimpleNamespace) -> None:
        seen.append(gc.isenabled())
        s.dev.sync()

    scn = registry.Scenario("resources.gc_state", "resources", (), registry.dev_only, op)
    assert gc.isenabled()
    result = run_sweep(scenarios=[scn], contexts=("none",), modes=("OUT_OF_MEMORY",))
    assert not result.violations
    assert seen
    assert not any(seen)
    assert gc.isenabled()


def test_unknown_driver_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="unknown driver 'gpu'"):
        run_sweep(driver="gpu", match="Device.sync")


_MOVED = ["cuMemAddressReserve", "cuMemAddressFree", "cuMemAddressReserve", "cuMemMap", "cuMemCreate", "cuMemMap"]


@pytest.mark.parametrize("hints", ["not followed", "followed"])
@pytest.mark.parametrize("driver", ["sim", "sim-persistent"])
def test_growth_elsewhere_moves_the_buffer_in_every_case(
    driver: str, hints: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether the driver follows address hints (the simulator when told to) or not (an H200, and
    # the simulator by default), the set-up takes the addresses after the buffer: the growth asks
    # for them, gives back what it got instead, and moves the buffer to a new range, every time.
    from cuguard.testing._sim.vmm import SimVmm

    monkeypatch.setattr(SimVmm, "follow_address_hints", hints == "followed")
    result = run_sweep(driver=driver, match="VirtualMemoryResource.modify_allocation[elsewhere]")
    ((scenario,),) = [result.scenarios]
    calls = [c for c in scenario.calls["none"] if c.startswith("cuMem")]
    assert calls[: len(_MOVED)] == _MOVED
    assert scenario.cases > 0
    assert not result.nondeterministic, "\n".join(str(n) for n in result.nondeterministic)
    assert not result.violations, "\n".join(str(v) for v in result.violations)
