"""cuguard's pytest plugin, registered through the ``pytest11`` entry point.

- ``--cuguard-driver=sim|real`` chooses the driver behind the ``cuguard_driver``
  fixture (default: ``CUGUARD_DRIVER`` when it is set, else ``sim``). Given on
  the command line it also sets ``CUGUARD_DRIVER`` for the run, so code that
  does not use the fixture runs on the same driver; a command line that
  contradicts ``CUGUARD_DRIVER`` is a usage error. With ``real`` on a machine
  with no usable GPU, the tests that use it are skipped with the reason.
- ``CUDAWarning`` is an error inside tests (a test that expects one uses
  ``pytest.warns(CUDAWarning)``). One that arises where nothing can raise (a
  garbage-collected resource, a host callback, cuguard's release thread)
  reaches ``sys.unraisablehook``; the plugin catches those during a test's
  call and teardown and fails the test with them (contract B3, W3). A project
  that writes ``ignore::cuguard.errors.CUDAWarning`` (or any other action for
  it) in its own ``filterwarnings`` turns this off.
- Fixtures: ``cuguard_driver`` (the driver of the run, installed for the test),
  ``sim`` (always a fresh simulated driver, installed for the test),
  ``cuguard_faults`` (fault plans that last until the end of the test).
- ``@pytest.mark.contract("G1", ...)`` names the contract clauses a test proves;
  the end of the run prints which clauses were exercised, on which driver, and
  ``--cuguard-summary=FILE`` writes the same as JSON.
- Sticky faults on the real driver (E5): the test after which the driver is sticky
  fails with the first fault (its call, and the launch that caused it when fault
  attribution is on); every later test that uses the real driver in the same
  process is reported as an error naming that test and fault, since nothing can
  run on that driver any more.
- One fault, one report (W7): a test whose dropped objects' releases a sticky
  fault refused (the :class:`~cuguard.errors.StickyFaultWarning` s that reach
  ``sys.unraisablehook``) fails once, at its teardown, with the first fault's
  text, unless the test already failed with that fault (a sticky error it
  raised, or the real driver's sticky-fault failure above).
- ``@pytest.mark.leak_check`` (or ``--cuguard-leak-check`` for every test)
  fails a test that leaves driver objects behind, on either driver.
- cuguard-resources adds its own plugin to these options and fixtures
  (:mod:`cuguard.resources.pytest_plugin`): ``--cuguard-racecheck`` and the
  ``no_memory_leaks`` fixture. This plugin needs ``cuguard.errors`` alone.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, cast

import pytest

from cuguard.errors import (
    CUDADriverNotFoundError,
    CUDAError,
    CUDAWarning,
    StickyFaultWarning,
    first_sticky_fault,
    flush_deferred,
    is_sticky,
    real_driver,
)
from cuguard.errors.lowlevel import DRIVER_VARIABLE, default_driver_choice
from cuguard.testing import _faults
from cuguard.testing._sim import SimulatedDriver, nothing_left_behind, simulated_driver

__all__ = ["Faults"]

_RESULTS_KEY = pytest.StashKey[dict[tuple[str, str], dict[str, int]]]()
_PHASES_KEY = pytest.StashKey[list[str]]()
_REAL_STATE: dict[str, Any] = {}
_STICKY_KEY = pytest.StashKey[str]()  # the first fault named by the StickyFaultWarnings a test caused (W7)
_STICKY_REPORTED_KEY = pytest.StashKey[bool]()  # the test failed with its sticky fault already: once is enough


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cuguard")
    group.addoption(
        "--cuguard-driver",
        choices=("sim", "real"),
        default=None,
        help="driver behind the cuguard_driver fixture and CUGUARD_DRIVER for the run: the simulated driver "
        "(default, unless CUGUARD_DRIVER says real) or the real GPU",
    )
    group.addoption(
        "--cuguard-leak-check",
        action="store_true",
        default=False,
        help="fail every test that leaves CUDA driver objects behind",
    )
    group.addoption("--cuguard-summary", default=None, help="write the contract-clause summary as JSON to this file")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "contract(*ids): the contract clauses (E1..B5) this test proves")
    config.addinivalue_line("markers", "leak_check: fail the test if it leaves CUDA driver objects behind")
    config.addinivalue_line("markers", "real_only: the test needs the real driver (skipped on the simulator)")
    # B3: CUDAWarning fails tests by default. A project whose own filterwarnings
    # (ini or -W) say something about CUDAWarning decides for itself.
    own = [str(line) for line in (config.getini("filterwarnings") or [])]
    own += [str(line) for line in (config.known_args_namespace.pythonwarnings or [])]
    if not any("CUDAWarning" in line for line in own):
        config.addinivalue_line("filterwarnings", "error::cuguard.errors.CUDAWarning")
    config.stash[_RESULTS_KEY] = {}
    config.pluginmanager.register(_ClauseCounter(config.stash[_RESULTS_KEY]), "cuguard-contract-clauses")
    chosen = config.getoption("--cuguard-driver")
    if chosen is not None:
        given = os.environ.get(DRIVER_VARIABLE, "").strip().lower()
        if given and given != chosen:
            raise pytest.UsageError(f"--cuguard-driver={chosen} contradicts {DRIVER_VARIABLE}={given}")
        os.environ[DRIVER_VARIABLE] = chosen
    else:
        # Not on the command line: CUGUARD_DRIVER decides when it is set, else the simulator.
        given = os.environ.get(DRIVER_VARIABLE, "").strip().lower()
        config.option.cuguard_driver = "real" if given == default_driver_choice() == "real" else "sim"


def _driver_name(config: pytest.Config) -> str:
    return str(config.getoption("--cuguard-driver"))


def _real_unavailable() -> str | None:
    """Why the real driver cannot run tests here, or None when it can."""
    if "reason" not in _REAL_STATE:
        reason: str | None = None
        try:
            module = real_driver()
            (err,) = module.cuInit(0)
            if err:
                reason = f"cuInit failed: {CUDAError(err, 'cuInit')}"
            else:
                err, count = module.cuDeviceGetCount()
                if err or count < 1:
                    reason = "no CUDA device is present"
        except CUDADriverNotFoundError as exc:
            reason = str(exc)
        _REAL_STATE["reason"] = reason
    return _REAL_STATE["reason"]  # type: ignore[no-any-return]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _driver_name(config) == "sim":
        skip = pytest.mark.skip(reason="needs the real driver (--cuguard-driver=real)")
        for item in items:
            if item.get_closest_marker("real_only") is not None:
                item.add_marker(skip)


class Faults:
    """Fault plans that stay active until the end of the test.

    Each method takes the arguments of the module-level function of the same
    name in :mod:`cuguard.testing`, raises what it raises for bad arguments
    (``ValueError``, ``TypeError``) and returns its :class:`FaultPlan`.
    """

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack

    def inject(self, function: str, code: int = 1, **kwargs: Any) -> _faults.FaultPlan:
        """Like :func:`cuguard.testing.inject`, until the end of the test."""
        plan: _faults.FaultPlan = self._stack.enter_context(_faults.inject(function, code, **kwargs))
        return plan

    def restore_fault(self, code: int = 201, *, nth: int = 1) -> _faults.FaultPlan:
        """Like :func:`cuguard.testing.restore_fault`, until the end of the test."""
        plan: _faults.FaultPlan = self._stack.enter_context(_faults.restore_fault(code, nth=nth))
        return plan

    def sticky(self, code: int = 700) -> _faults.FaultPlan:
        """Like :func:`cuguard.testing.sticky`, until the end of the test."""
        plan: _faults.FaultPlan = self._stack.enter_context(_faults.sticky(code))
        return plan

    def deinitialized(self) -> _faults.FaultPlan:
        """Like :func:`cuguard.testing.deinitialized`, until the end of the test."""
        plan: _faults.FaultPlan = self._stack.enter_context(_faults.deinitialized())
        return plan


def _leak_check_wanted(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--cuguard-leak-check")) or (
        request.node.get_closest_marker("leak_check") is not None
    )


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Iterator[SimulatedDriver]:
    """A fresh simulated driver with two devices, installed for the test.

    With the ``leak_check`` marker, the test fails if it leaves anything behind.
    """
    with simulated_driver(devices=2) as driver:
        try:
            if _leak_check_wanted(request):
                with nothing_left_behind(driver):
                    yield driver
            else:
                yield driver
        finally:
            # Release what the test dropped while its driver is still installed.
            gc.collect()


@pytest.fixture
def cuguard_driver(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The driver of this run (``--cuguard-driver``), installed for the test.

    On the simulator: a fresh :class:`SimulatedDriver` with two devices. On the
    real driver: the real ``cuda.bindings.driver`` behind a fault proxy (so
    fault plans and leak accounting work), or a skip when there is no GPU.
    """
    if _driver_name(request.config) == "sim":
        yield request.getfixturevalue("sim")
        return
    reason = _real_unavailable()
    if reason is not None:
        pytest.skip(f"real CUDA driver unavailable: {reason}")
    poisoned = _REAL_STATE.get("poisoned")
    if poisoned is not None:
        culprit, first = poisoned
        pytest.fail(
            f"the CUDA driver of this process is unusable since {culprit} caused a sticky fault ({first}); "
            "nothing can run on it any more: run the remaining tests in a new process",
            pytrace=False,
        )
    proxy = _faults._acquire()
    try:
        before = proxy.live_objects()
        yield proxy.inner
        first = first_sticky_fault()
        made_up = any(plan.fired and is_sticky(plan.code) for plan in proxy.plans)  # a fault plan's, not the GPU's
        if first is not None and not made_up:
            # E5: the test that made the driver sticky fails with the first fault, and the
            # tests after it are errors that name it, instead of a cascade of failures.
            _REAL_STATE["poisoned"] = (request.node.nodeid, first)
            if request.node.stash.get(_STICKY_REPORTED_KEY, False):
                return  # the test failed with this fault already (W7: once)
            request.node.stash[_STICKY_REPORTED_KEY] = True
            pytest.fail(f"this test left the CUDA driver unusable with a sticky fault: {first}", pytrace=False)
        if _leak_check_wanted(request):
            created = _faults.left_behind(before, proxy.live_objects())
            assert not created, f"driver objects left behind: {created}"
    finally:
        _faults._release(proxy)


@pytest.fixture
def cuguard_faults() -> Iterator[Faults]:
    """Fault plans for the test (a :class:`Faults`); all are lifted when the test ends, also when it fails."""
    with ExitStack() as stack:
        yield Faults(stack)


class _UnraisableCUDAWarnings:
    """Collects the ``CUDAWarning``s that reach ``sys.unraisablehook``; passes everything else on."""

    def __init__(self) -> None:
        self.caught: list[str] = []
        self.sticky: list[str] = []  # first faults named by StickyFaultWarnings (W7): reported once, per test
        self._previous: Any = None

    def __enter__(self) -> _UnraisableCUDAWarnings:
        self._previous = sys.unraisablehook
        sys.unraisablehook = self._hook
        return self

    def _hook(self, args: Any) -> None:
        if isinstance(args.exc_value, StickyFaultWarning):
            self.sticky.append(args.exc_value.first_fault)
        elif isinstance(args.exc_value, CUDAWarning):
            self.caught.append(str(args.exc_value))
        else:
            self._previous(args)

    def __exit__(self, *exc: object) -> None:
        sys.unraisablehook = self._previous


def _fail_on_unraisable(outcome: Any, caught: list[str], phase: str) -> None:
    if not caught or outcome.exception is not None:
        return
    listing = "\n".join(f"  - {text}" for text in caught)
    outcome.force_exception(
        pytest.fail.Exception(
            f"CUDAWarning raised where nothing could catch it (garbage collection, a CUDA callback or "
            f"cuguard's release thread) during the test's {phase}:\n{listing}",
            pytrace=False,
        )
    )


_WATCH_KEY = pytest.StashKey[_UnraisableCUDAWarnings]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    # Installed before the test's fixtures: a fixture or test that installs its own
    # sys.unraisablehook on top sees (and owns) what reaches it.
    watch = _UnraisableCUDAWarnings().__enter__()
    item.stash[_WATCH_KEY] = watch
    yield


def _check_unraisable(item: pytest.Item, outcome: Any, phase: str) -> None:
    """After a phase: collect, wait for the release thread, fail on what reached the hook meanwhile."""
    watch = item.stash.get(_WATCH_KEY, None)
    if watch is None:
        return
    gc.collect()
    flush_deferred()
    caught, watch.caught = watch.caught, []
    if watch.sticky:
        item.stash.setdefault(_STICKY_KEY, watch.sticky[0])
        watch.sticky = []
    if phase == "teardown":
        watch.__exit__()
        del item.stash[_WATCH_KEY]
    _fail_on_unraisable(outcome, caught, phase)
    if phase == "teardown":
        _fail_on_sticky(item, outcome)


def _fail_on_sticky(item: pytest.Item, outcome: Any) -> None:
    """W7: a test whose dropped objects a sticky fault leaked fails once, naming the first fault."""
    first = item.stash.get(_STICKY_KEY, None)
    if first is None or item.stash.get(_STICKY_REPORTED_KEY, False) or outcome.exception is not None:
        return
    item.stash[_STICKY_REPORTED_KEY] = True
    outcome.force_exception(
        pytest.fail.Exception(
            f"this test hit a sticky fault: {first}; the objects it dropped afterwards were leaked "
            "(their refused releases are reported once, as StickyFaultWarning)",
            pytrace=False,
        )
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    outcome: Any = yield
    _check_unraisable(item, outcome, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    outcome: Any = yield
    _check_unraisable(item, outcome, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report: pytest.TestReport = outcome.get_result()
    if call.excinfo is not None and isinstance(call.excinfo.value, CUDAError) and call.excinfo.value.is_sticky:
        item.stash[_STICKY_REPORTED_KEY] = True  # the test failed with its sticky fault: nothing more about it (W7)
    marker = item.get_closest_marker("contract")
    if marker is None:
        return
    # A test counts for its clauses once its teardown is over: passed only if set-up, call and
    # teardown all passed (an error at teardown, the plugin's own leak check included, is a failure).
    phases = item.stash.setdefault(_PHASES_KEY, [])
    phases.append(report.outcome)
    if report.when != "teardown":
        return
    if "failed" in phases:
        final = "failed"
    elif "skipped" in phases:
        final = "skipped"
    else:
        final = "passed"
    names = getattr(item, "fixturenames", ())
    real = "cuguard_driver" in names and "sim" not in names
    driver_kind = _driver_name(item.config) if real else "sim"
    # Carried by the report, so that the process that prints the summary counts it: this one, or
    # with pytest-xdist the controlling process its workers send their reports to.
    report.user_properties.append((_CLAUSES_PROPERTY, ([str(c) for c in marker.args], driver_kind, final)))


_CLAUSES_PROPERTY = "cuguard_contract_clauses"


class _ClauseCounter:
    """Counts each test's contract clauses from its teardown report (see pytest_runtest_makereport)."""

    def __init__(self, results: dict[tuple[str, str], dict[str, int]]) -> None:
        self.results = results

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name != _CLAUSES_PROPERTY:
                continue
            clauses, driver_kind, final = cast("tuple[list[str], str, str]", value)
            for clause in clauses:
                counts = self.results.setdefault((clause, driver_kind), {"passed": 0, "failed": 0, "skipped": 0})
                counts[final] = counts.get(final, 0) + 1


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS_KEY, {})
    if not results:
        return
    terminalreporter.section("cuguard contract clauses")
    for (clause, driver_kind), counts in sorted(results.items()):
        terminalreporter.write_line(
            f"{clause:4} {driver_kind:4}  passed {counts['passed']:4}  failed {counts['failed']:3}"
            f"  skipped {counts['skipped']:3}"
        )
    path = config.getoption("--cuguard-summary")
    if path:
        data = [{"clause": clause, "driver": drv, **counts} for (clause, drv), counts in sorted(results.items())]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
