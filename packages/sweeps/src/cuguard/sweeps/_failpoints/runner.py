"""The failure-point sweep: every operation x every driver call it makes x each failure mode.

For each :class:`~cuguard.sweeps._failpoints.registry.Scenario` and each context
situation (no context current; another context current, so that operations
must switch and restore), the runner first runs the operation with no fault and
records its driver calls. It then re-runs the scenario from scratch (a fresh
simulated driver per case) once per call index ``k`` and per failure mode:

- ``OUT_OF_MEMORY``, ``INVALID_VALUE``, ``INVALID_CONTEXT``: call ``k`` fails;
- ``STICKY``: from call ``k`` on, the driver is sticky with
  ``CUDA_ERROR_ILLEGAL_ADDRESS`` (the calls the real driver still answers go
  through, see ``STICKY_EXEMPT``);
- ``DEINITIALIZED``: from call ``k`` on every call returns ``CUDA_ERROR_DEINITIALIZED``;
- ``RESTORE``: call ``k`` is a restore of the caller's context, and it fails
  with ``CUDA_ERROR_INVALID_CONTEXT``.

Each case is checked (see :func:`_check`) and every broken rule is a
:class:`Violation`.

Determinism: a case's failure point is an index into the fault-free run's calls, so it
means something only while the operation makes the same calls up to it. The fault-free
run is recorded on the driver being swept (in each process that runs cases) and recorded
twice; a second run that differs, or a case whose calls before and at its failure point
differ from the fault-free run's, is a :class:`NonDeterministic` finding: a failure of
the sweep itself, reported apart from the violations (the failure point it meant to test
was not tested). On a driver that lives through the whole sweep (the real one, or
``"sim-persistent"``), what one case changes must not reach the next: each case starts
with the capture mode of the sweep's thread and of cuguard's release thread back at
CUDA's default, and with automatic garbage collection off (collections happen at the
points the runner and the scenario choose, and a release handed to the release thread
is waited for before the operation's recording ends).
"""

from __future__ import annotations

import gc
import random
import time
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import cuguard.context as _context_layer
import cuguard.resources as _resources_layer
from cuguard.errors import (
    CUDAError,
    CUDAWarning,
    error_name,
    first_sticky_fault,
    flush_deferred,
    forget_sticky_fault,
    format_handle,
    install_driver,
    real_driver,
)
from cuguard.errors.lowlevel import DRIVER_FACTS, calls_where, defer
from cuguard.sweeps._failpoints import registry
from cuguard.sweeps._failpoints.registry import Env, Scenario
from cuguard.testing import DriverCall, FaultPlan, FaultProxy, SimulatedCrash, SimulatedDriver
from cuguard.testing.lowlevel import STICKY_EXEMPT, SafetyDriver, acquire_proxy, release_proxy

__all__ = [
    "CONTEXTS",
    "DRIVERS",
    "MODES",
    "CaseHooks",
    "CaseKey",
    "NonDeterministic",
    "ScenarioResult",
    "SweepResult",
    "Violation",
    "run_sweep",
]

OUT_OF_MEMORY = 2
INVALID_VALUE = 1
INVALID_CONTEXT = 201
ILLEGAL_ADDRESS = 700
DEINITIALIZED = 4
NOT_READY = 600

#: Failure modes, in report order.
MODES = ("OUT_OF_MEMORY", "INVALID_VALUE", "INVALID_CONTEXT", "STICKY", "DEINITIALIZED", "RESTORE")
_CODES = {
    "OUT_OF_MEMORY": OUT_OF_MEMORY,
    "INVALID_VALUE": INVALID_VALUE,
    "INVALID_CONTEXT": INVALID_CONTEXT,
    "STICKY": ILLEGAL_ADDRESS,
    "DEINITIALIZED": DEINITIALIZED,
    "RESTORE": INVALID_CONTEXT,
}
#: Context situations: nothing current, or another context current.
CONTEXTS = ("none", "other")
#: Where cases run: a fresh simulated driver per case, the real driver, or one simulated driver
#: for the whole sweep (what one case leaves behind meets the next, as on a real GPU).
DRIVERS = ("sim", "real", "sim-persistent")
#: CU_STREAM_CAPTURE_MODE_GLOBAL: a thread's capture mode until it exchanges it.
_DEFAULT_CAPTURE_MODE = 0
_DEINIT_EXEMPT = calls_where(callback_safe=True)


@dataclass(frozen=True)
class _CaseFinding:
    """Where a finding was made: the operation, its layer, the context mode and the failure point."""

    scenario: str
    layer: str
    context: str
    mode: str
    k: int
    call: str

    def _where(self, unfaulted: str) -> str:
        where = unfaulted if not self.mode else f"k={self.k} ({self.call}) {self.mode}"
        return f"{self.scenario} [{self.context}] {where}"


@dataclass(frozen=True)
class Violation(_CaseFinding):
    """One broken rule: the operation, the failure point and mode, the rule and what happened."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self._where('baseline')}: {self.rule}: {self.detail}"


@dataclass(frozen=True)
class NonDeterministic(_CaseFinding):
    """A case (or a second fault-free run, ``mode`` empty) whose calls differ from the fault-free run's.

    ``k`` and ``call`` name the failure point the case meant to test (for a fault-free run:
    the first call that differs); ``detail`` says where the two sequences part. Not a contract
    violation: a failure of the sweep, whose failure point went untested.
    """

    detail: str

    def __str__(self) -> str:
        return f"{self._where('fault-free run')}: {self.detail}"


@dataclass(frozen=True)
class CaseKey:
    scenario: str
    context: str
    mode: str
    k: int


@dataclass
class ScenarioResult:
    """What the sweep did for one scenario."""

    name: str
    layer: str
    calls: dict[str, list[str]] = field(default_factory=dict)  # context -> recorded call names
    cases: int = 0
    violations: list[Violation] = field(default_factory=list)
    nondeterministic: list[NonDeterministic] = field(default_factory=list)

    @property
    def failure_points(self) -> int:
        return sum(len(calls) for calls in self.calls.values())


@dataclass
class SweepResult:
    """Everything a sweep found, by scenario."""

    driver: str
    scenarios: list[ScenarioResult]
    seconds: float
    sampled: bool
    total_cases: int

    @property
    def violations(self) -> list[Violation]:
        return [v for s in self.scenarios for v in s.violations]

    @property
    def nondeterministic(self) -> list[NonDeterministic]:
        """The cases (and fault-free runs) that did not follow the fault-free run: the sweep's own failures."""
        return [n for s in self.scenarios for n in s.nondeterministic]

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "seconds": round(self.seconds, 2),
            "sampled": self.sampled,
            "cases_available": self.total_cases,
            "scenarios": [
                {
                    "name": s.name,
                    "layer": s.layer,
                    "calls": s.calls,
                    "failure_points": s.failure_points,
                    "cases": s.cases,
                    "violations": [asdict(v) for v in s.violations],
                    "nondeterministic": [asdict(n) for n in s.nondeterministic],
                }
                for s in self.scenarios
            ],
        }


# --- fault plans ------------------------------------------------------------------------------


@dataclass
class _FromNth(FaultPlan):
    """Every call from the ``nth`` on fails (those named in ``exempt`` go through)."""

    def _applies(self, name: str, args: tuple[Any, ...], restore: bool) -> bool:
        self.seen += 1
        if self.seen >= self.nth and name not in self.exempt:
            self.fired += 1
            return True
        return False


def _plan(mode: str, k: int, calls: list[DriverCall]) -> FaultPlan:
    code = _CODES[mode]
    if mode == "STICKY":
        return _FromNth(None, code, nth=k, exempt=STICKY_EXEMPT)
    if mode == "DEINITIALIZED":
        return _FromNth(None, code, nth=k, exempt=_DEINIT_EXEMPT)
    if mode == "RESTORE":
        nth = sum(1 for c in calls[:k] if c.restore)
        return FaultPlan("cuCtxSetCurrent", code, nth=nth, restore_only=True)
    return FaultPlan(None, code, nth=k)


def _points(mode: str, calls: list[DriverCall]) -> list[int]:
    """The call indices (1-based) worth failing in ``mode``."""
    if mode == "STICKY":
        # Exempt calls go through: failing from an exempt call on is the same case as from the next one.
        return [i for i, c in enumerate(calls, 1) if c.name not in STICKY_EXEMPT]
    if mode == "RESTORE":
        return [i for i, c in enumerate(calls, 1) if c.restore]
    if mode == "DEINITIALIZED":
        return [i for i, c in enumerate(calls, 1) if c.name not in _DEINIT_EXEMPT]
    # A call that answers with this very status anyway (a query past the end of a list) is not a
    # failure point for it: injecting the status it returns changes nothing.
    code = _CODES.get(mode)
    return [i for i, c in enumerate(calls, 1) if code is None or not c.status or int(c.status) != int(code)]


# --- drivers ------------------------------------------------------------------------------------


def _find_in_clone(self: Any, hOriginalNode: Any, hClonedGraph: Any) -> tuple[Any, ...]:
    """Stand-in for the simulator's missing ``cuGraphNodeFindInClone`` (valid right after ``cuGraphClone``)."""
    from cuda.bindings import driver as cb

    with self._lock:
        node = self._nodes.get(int(hOriginalNode))
        clone = self._graphs.get(int(hClonedGraph))
        if node is None or clone is None or node.destroyed:
            return (cb.CUresult.CUDA_ERROR_INVALID_VALUE, None)
        index = list(node.graph.nodes).index(node.handle)
        handles = list(clone.nodes)
        if index >= len(handles):
            return (cb.CUresult.CUDA_ERROR_INVALID_VALUE, None)
        return (cb.CUresult.CUDA_SUCCESS, cb.CUgraphNode(handles[index]))


def _emulate(sim: SimulatedDriver) -> None:
    def fill_u8(s: Any, out: int, value: int, n: int) -> None:
        s.write(out, bytes([int(value) & 0xFF]) * int(n))

    sim.register_kernel("fill_u8", fill_u8)
    if "cuGraphNodeFindInClone" not in dir(type(sim)):
        setattr(sim, "cuGraphNodeFindInClone", types.MethodType(_find_in_clone, sim))  # noqa: B010


class _Runtime:
    """Where cases run: a fresh simulated driver per case, or one driver for the whole sweep.

    ``"real"``: the real driver, through a safety net. ``"sim-persistent"``: one simulated
    driver, through the same net, so that what a case leaves behind (the threads' capture
    modes, cuguard's caches, the driver's address space) meets the next case as on a GPU.
    """

    def __init__(self, kind: str) -> None:
        if kind not in DRIVERS:
            raise ValueError(f"unknown driver {kind!r}: the drivers are {DRIVERS}")
        self.kind = kind
        self.image = registry.KERNELS_PTX
        self.guard: SafetyDriver | None = None
        self.sim: SimulatedDriver | None = None
        self._stack = ExitStack()
        self._other: Any = None
        self._device: Any = None
        self._previous: Any = None

    @property
    def persistent(self) -> bool:
        """Whether one driver serves every case (its state outlives a case)."""
        return self.kind != "sim"

    def __enter__(self) -> _Runtime:
        if self.kind == "sim":
            return self
        if self.kind == "real":
            inner: Any = real_driver()
        else:
            from cuguard.testing import simulated_driver

            self.sim = self._stack.enter_context(simulated_driver(devices=2))
            _emulate(self.sim)
            inner = self.sim
        self.guard = SafetyDriver(inner)
        self._previous = install_driver(self.guard)
        self._stack.callback(install_driver, self._previous)
        resources = _resources_layer
        context = _context_layer
        proxy = acquire_proxy()
        try:  # initialized through the proxy the cases run under: no case makes the one cuInit
            context.init_driver()
        finally:
            release_proxy(proxy)
        self._device = resources.Device(0)
        # The primary context is retained once, for the whole sweep, as a GPU's first case would do
        # it: every case then finds it retained (the first too), so their calls are alike.
        self._device.context  # noqa: B018
        if self.kind == "real":
            major, minor = self._device.compute_capability
            program = resources.Program(registry.KERNELS_CU, options=[f"-arch=sm_{major}{minor}"])
            self.image = program.compile("cubin").code
        self._other = context.Context.create(0)
        self._stack.callback(self._other.close)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @contextmanager
    def case(self) -> Iterator[tuple[Env, Any, FaultProxy, SimulatedDriver | None]]:
        """A case's driver: ``(env, raw driver, fault proxy, simulator)``.

        The simulator is given only when it is the case's own (its accounting checks the
        case); a driver that serves the whole sweep is checked through the proxy's ledger.
        """
        if self.persistent:
            proxy = acquire_proxy()
            try:
                env = Env(real=self.kind == "real", image=self.image, sim=self.sim)
                _fresh_thread_state(proxy.inner)
                yield env, proxy.inner, proxy, None
            finally:
                release_proxy(proxy)
            return
        from cuguard.testing import simulated_driver

        with simulated_driver(devices=2) as sim:
            _emulate(sim)
            proxy = acquire_proxy()
            try:
                yield Env(real=False, image=self.image, sim=sim), sim, proxy, sim
            finally:
                release_proxy(proxy)

    def other_context(self, env: Env) -> Any:
        if self._other is not None:
            return self._other
        return env.own(env.context.Context.create(0))


def _fresh_thread_state(raw: Any) -> None:
    """Give the sweep's thread and cuguard's release thread CUDA's default capture mode again.

    A driver that serves the whole sweep keeps each thread's capture mode from one case to the
    next: a case whose restoring ``cuThreadExchangeStreamCaptureMode`` failed by injection (the
    driver never saw it) leaves the thread relaxed for good, and cuguard then skips the restore
    (the thread was relaxed already) in every later case, which makes other calls. Made on the
    raw driver: nothing is recorded or injected.
    """
    from cuda.bindings import driver as cb

    default = cb.CUstreamCaptureMode(_DEFAULT_CAPTURE_MODE)

    def reset() -> None:
        raw.cuThreadExchangeStreamCaptureMode(default)

    reset()
    defer(reset)
    flush_deferred(5)


def _current(raw: Any) -> int:
    err, handle = raw.cuCtxGetCurrent()
    if int(err) == 3:  # CUDA_ERROR_NOT_INITIALIZED: nothing can be current yet
        return 0
    return -1 if err else int(handle)


def _set_current(raw: Any, handle: int) -> None:
    from cuda.bindings import driver as cb

    raw.cuCtxSetCurrent(cb.CUcontext(max(handle, 0)))


def _text(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    return "\n".join([str(exc), *getattr(exc, "__notes__", [])])


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_text(exc)}".replace("\n", " | ")[:400]


# --- one case ---------------------------------------------------------------------------------

_Add = Callable[[str, str], None]


class CaseHooks:
    """What another sweep dimension adds to a fault-free case of :func:`_run_case` (no-ops here).

    ``label`` is ``(mode, k, call)`` naming the case in its violations (a case with hooks and no
    label is that dimension's recording run). :meth:`prepare` runs after the set-up (and its
    collection), before anything is measured; :meth:`arm` wraps the operation; :meth:`after_op`
    runs once the operation returned, before anything else is collected, with the operation's
    warnings still recorded; :meth:`accounting` gets the simulator's changes over the case;
    :meth:`after_teardown` runs once the case's objects are released.
    """

    label: tuple[str, int, str] | None = None

    def prepare(self, env: Env, proxy: FaultProxy) -> None:
        return None

    def arm(self, env: Env, proxy: FaultProxy) -> AbstractContextManager[object]:
        return nullcontext()

    def after_op(self, env: Env, proxy: FaultProxy, result: Any, exc: BaseException | None, add: _Add) -> None:
        return None

    def accounting(self, changes: Any, add: _Add) -> None:
        return None

    def after_teardown(self, env: Env, proxy: FaultProxy, add: _Add) -> None:
        return None

    def foreign(self) -> set[int]:
        """Handles of driver objects the case made besides the scenario's (left out of its accounting)."""
        return set()


@dataclass
class _Outcome:
    calls: list[DriverCall]
    violations: list[Violation]
    nondeterministic: list[NonDeterministic] = field(default_factory=list)


def _label(call: DriverCall) -> str:
    return call.name + (" (restore)" if call.restore else "")


def _diverges(expected: list[DriverCall], got: list[DriverCall], until: int) -> tuple[int, str] | None:
    """Where ``got`` parts from ``expected`` in its first ``until`` calls: ``(index, what)``, or None.

    Calls are compared by function and by whether they restore a caller's context.
    """
    for i, want in enumerate(expected[:until], 1):
        if i > len(got):
            return i, f"the run made {len(got)} call(s) and never reached call {i} ({_label(want)})"
        if _label(got[i - 1]) != _label(want):
            return i, f"call {i} was {_label(want)} in the fault-free run, {_label(got[i - 1])} here"
    return None


def _compare_runs(
    scn: Scenario, ctx_mode: str, first: list[DriverCall], second: list[DriverCall]
) -> NonDeterministic | None:
    """A second fault-free run that differs from the first (its first difference), or None."""
    found = _diverges(first, second, len(first))
    if found is None and len(second) > len(first):
        extra = second[len(first)]
        found = len(first) + 1, f"the fault-free run made {len(first)} call(s), another run more ({_label(extra)} next)"
    if found is None:
        return None
    i, detail = found
    call = _label(first[i - 1]) if i <= len(first) else ""
    return NonDeterministic(scn.name, scn.layer, ctx_mode, "", i, call, f"two fault-free runs differ: {detail}")


def _end_leftover_captures(raw: Any, proxy: Any) -> None:
    """On the real driver, end the captures a case left going on streams still alive.

    A refused ``cuStreamEndCapture`` is a fault the proxy made up: the real capture goes on,
    and in global mode it would prohibit the allocations of every later case of the process
    (the simulator starts afresh for each case). What cuguard leaked with it stays leaked.
    """
    from cuda.bindings import driver as cb

    for kind, handle in list(proxy.live_objects()):
        if kind != "stream":
            continue
        stream = cb.CUstream(handle)
        err, status = raw.cuStreamIsCapturing(stream)
        if err or not int(status):
            continue
        err, graph = raw.cuStreamEndCapture(stream)
        if not err and graph is not None and int(graph):
            raw.cuGraphDestroy(graph)


def _teardown(env: Env, state: Any, raw: Any, add: Callable[[str, str], None]) -> None:
    _set_current(raw, 0)
    # Objects are released the way a program releases them, by dropping the references
    # (collection, and the deferred release of what graphs use), so that an object a failure
    # leaked keeps alive what it uses; explicit cleanups (raw handles) run first.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in reversed(env.keep):
            if callable(obj) and not hasattr(obj, "close"):
                try:
                    obj()
                except SimulatedCrash as crash:
                    add("S2", f"teardown crashed the driver: {crash}")
                except Exception:  # noqa: BLE001 - a leaked handle may refuse
                    pass
        env.keep.clear()
        if state is not None:
            vars(state).clear()
        gc.collect()
        graphs = env.graphs
        graphs.flush_deferred(5)
        gc.collect()
        graphs.flush_deferred(5)


def _run_case(  # noqa: PLR0917 - the checks read best in one place
    runtime: _Runtime,
    scn: Scenario,
    ctx_mode: str,
    mode: str | None,
    k: int,
    baseline: list[DriverCall],
    hooks: CaseHooks | None = None,
) -> _Outcome:
    """Run one case: the fault-free run (``mode`` None) or call ``k`` failing in ``mode``.

    ``hooks`` (fault-free runs only) add another dimension's steps and checks (:class:`CaseHooks`).
    """
    violations: list[Violation] = []
    call_k = ""
    if mode is not None and 0 < k <= len(baseline):
        call_k = baseline[k - 1].name
    label = (mode or "", k, call_k) if hooks is None or hooks.label is None else hooks.label
    point = f" with a collection at {label[0]} k={label[1]} ({label[2]})" if label[0] and mode is None else ""

    def add(rule: str, detail: str) -> None:
        violations.append(Violation(scn.name, scn.layer, ctx_mode, label[0], label[1], label[2], rule, detail))

    # Collections happen where the runner and the scenario ask for them, never at an allocation
    # count that another case's garbage shifted (a release collected mid-operation makes calls).
    collecting = gc.isenabled()
    gc.disable()
    try:
        outcome = _run_case_body(runtime, scn, ctx_mode, mode, k, baseline, hooks, add, point, call_k)
    finally:
        if collecting:
            gc.enable()
    outcome.violations = violations
    return outcome


@dataclass
class _Case:
    """One case while it runs: its driver, its objects, what the operation did, and the state before it."""

    scn: Scenario
    ctx_mode: str
    mode: str | None
    k: int
    hooks: CaseHooks | None
    add: _Add
    env: Env
    raw: Any
    proxy: FaultProxy
    sim: SimulatedDriver | None
    log: list[DriverCall] = field(default_factory=list)
    nondeterministic: list[NonDeterministic] = field(default_factory=list)
    state: Any = None
    exc: BaseException | None = None
    crashed: SimulatedCrash | None = None
    result: Any = None
    caught: list[warnings.WarningMessage] = field(default_factory=list)
    cuda_warnings: list[str] = field(default_factory=list)


def _run_case_body(  # noqa: PLR0917 - the case's coordinates, as _run_case has them
    runtime: _Runtime,
    scn: Scenario,
    ctx_mode: str,
    mode: str | None,
    k: int,
    baseline: list[DriverCall],
    hooks: CaseHooks | None,
    add: _Add,
    point: str,
    call_k: str,
) -> _Outcome:
    """Set up, run and check one case, then release its objects; the findings go to ``add``."""
    with runtime.case() as (env, raw, proxy, sim):
        case = _Case(scn, ctx_mode, mode, k, hooks, add, env, raw, proxy, sim)
        if not _set_up_case(runtime, case):
            return _Outcome(case.log, [], case.nondeterministic)
        before_state = scn.state(env, case.state) if scn.state is not None and mode is not None else None
        current_before = _current(raw)
        snapshot = sim.snapshot() if sim is not None else None
        ledger = proxy.live_objects()
        guard_before = len(runtime.guard.incidents) if runtime.guard is not None else 0
        _perform_case(case, _plan(mode, k, baseline) if mode is not None else None)
        _check_raised(case, baseline, point, call_k)
        # G1 / W5 / S2: what the operation created, released or misused.
        gc.collect()
        if sim is not None and snapshot is not None:
            _check_simulated_objects(case, sim, snapshot)
        else:
            _check_ledger(case, ledger)
        if runtime.guard is not None and len(runtime.guard.incidents) > guard_before:
            for refused in runtime.guard.incidents[guard_before:]:
                add("S2", f"refused by the safety net: {refused}")
        _check_current_context(case, current_before)
        _check_after_failure(case, before_state)
        _release_case(case)
    return _Outcome(case.log, [], case.nondeterministic)


def _set_up_case(runtime: _Runtime, case: _Case) -> bool:
    """The scenario's set-up (and the other context made current); ``False`` when it failed (reported)."""
    try:
        case.state = case.scn.setup(case.env)
        if case.ctx_mode == "other":
            runtime.other_context(case.env).set_current()
        gc.collect()
        # Whether an operation's first call is cuInit depends on what ran before it in this process
        # (a driver installed again since): initialized here, it is never one of the operation's calls.
        _context_layer.init_driver()
        if case.hooks is not None:
            case.hooks.prepare(case.env, case.proxy)
    except SimulatedCrash as crash:
        case.add("S2", f"set-up crashed the driver: {crash}")
        return False
    except Exception as setup_error:  # noqa: BLE001 - a broken scenario is reported, not raised
        case.add("scenario", f"set-up failed: {_describe(setup_error)}")
        _teardown(case.env, case.state, case.raw, case.add)
        return False
    return True


def _perform_case(case: _Case, plan: FaultPlan | None) -> None:
    """The operation, recorded and with the fault plan armed; what it raised and warned goes into ``case``."""
    scn, proxy, state = case.scn, case.proxy, case.state
    fault_before = first_sticky_fault()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with proxy._lock:
            proxy.recorders.append(case.log)
            if plan is not None:
                proxy.plans.append(plan)
            proxy._refresh()
        try:
            with case.hooks.arm(case.env, proxy) if case.hooks is not None else nullcontext():
                case.result = scn.op(case.env, state)
                state._sweep_result = case.result
                if scn.kind == "warn":
                    gc.collect()
                    # A release handed to cuguard's release thread is carried out here, inside
                    # the recording: at a point of the case, not whenever that thread runs.
                    flush_deferred(5)
        except SimulatedCrash as crash:
            case.crashed = crash
        except BaseException as error:  # noqa: BLE001 - checked below
            case.exc = error
        finally:
            with proxy._lock:
                proxy.recorders.remove(case.log)
                if plan is not None:
                    proxy.plans.remove(plan)
                proxy._refresh()
            if plan is not None and plan.fired and fault_before is None and first_sticky_fault() is not None:
                # A sticky status the plan made up ends with it: it is not the first fault of a
                # driver that serves later cases too (each would be folded into its report, W7).
                forget_sticky_fault()
        if case.sim is not None:
            case.sim.drain()
        if case.hooks is not None:
            case.hooks.after_op(case.env, proxy, case.result, case.exc, case.add)
    case.caught = caught  # kept until the case's objects are released, as the warnings may hold them
    case.cuda_warnings = [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)]


def _check_raised(case: _Case, baseline: list[DriverCall], point: str, call_k: str) -> None:
    """E1 / W1 and the sweep's own checks: what the operation raised and warned, against its failure."""
    exc, cuda_warnings, add, mode = case.exc, case.cuda_warnings, case.add, case.mode
    if case.crashed is not None:
        add("S2", f"the operation crashed the driver: {case.crashed}")
    if mode is None and point:
        # Nothing failed: the operation must succeed and stay silent, as in its fault-free run.
        if exc is not None:
            add("E1", f"the operation raised{point} (it succeeds without): {_describe(exc)}")
        if cuda_warnings:
            add("W1", f"warnings{point} (none without): {cuda_warnings}")
    elif mode is None:
        if exc is not None:
            add("scenario", f"the operation failed with no fault injected: {_describe(exc)}")
        if cuda_warnings:
            add("scenario", f"warnings with no fault injected: {cuda_warnings}")
    else:
        scn, k, log = case.scn, case.k, case.log
        found = _diverges(baseline, log, k)
        if found is not None:
            case.nondeterministic.append(
                NonDeterministic(scn.name, scn.layer, case.ctx_mode, mode, k, call_k, f"the calls differ: {found[1]}")
            )
        if any(c.injected for c in log):
            _check(scn, mode, log, exc, cuda_warnings, add)
        elif found is None:  # every call up to the point was made, and none failed: the plan is wrong
            add("sweep", f"the failure was not injected at call {k} ({call_k})")


def _report_misuse(add: _Add, changes: Any, where: str) -> None:
    """S2 / W5: the driver misuse the simulator recorded (``where``: when, for the message)."""
    for rule, book in (
        ("S2", changes.misuse),
        ("W5", changes.dangling),
        ("S2", changes.double_release),
        ("S2", changes.use_after_release),
    ):
        for incident in book:
            add(rule, f"driver misuse{where}: {incident}")


def _check_simulated_objects(case: _Case, sim: SimulatedDriver, snapshot: Any) -> None:
    """G1 / G3 / W5 / S2 on the simulator: what the operation created, released or misused."""
    scn, mode, exc, log, add = case.scn, case.mode, case.exc, case.log, case.add
    changes = sim.changes_since(snapshot)
    if case.hooks is not None and (foreign := case.hooks.foreign()):
        changes.created = [o for o in changes.created if int(o.handle) not in foreign]
        changes.released = [o for o in changes.released if int(o.handle) not in foreign]
    failed = exc is not None or (mode is not None and scn.kind == "warn")
    released, ended = _failed_releases(log), _capture_end_refused(log)
    kept = [o for o in changes.created if o.handle not in released and not (ended and o.kind in _CAPTURE_HELD)]
    if failed and kept and mode != "DEINITIALIZED":
        add("G1", "left behind: " + "; ".join(str(o) for o in kept))
    if exc is not None and changes.released and not scn.releases:
        add("G3", "released objects it does not own: " + "; ".join(str(o) for o in changes.released))
    _report_misuse(add, changes, "")
    if case.hooks is not None:
        case.hooks.accounting(changes, add)


def _check_ledger(case: _Case, before: dict[Any, int]) -> None:
    """G1 on a real driver: what the fault proxy's ledger holds after a failure that it did not before."""
    after = case.proxy.live_objects()
    if case.hooks is not None and (foreign := case.hooks.foreign()):
        after = {key: n for key, n in after.items() if key[1] not in foreign}
    if case.exc is not None or (case.mode is not None and case.scn.kind == "warn"):
        leaked, ended = _failed_releases(case.log), _capture_end_refused(case.log)
        grown = {
            key: n - before.get(key, 0)
            for key, n in after.items()
            if n > before.get(key, 0) and key[1] not in leaked and not (ended and key[0] in _CAPTURE_HELD)
        }
        if grown and case.mode != "DEINITIALIZED":
            case.add("G1", "left behind: " + ", ".join(f"{kind} {h:#x} x{n}" for (kind, h), n in grown.items()))


def _check_current_context(case: _Case, current_before: int) -> None:
    """G2 / C2 / C3: the current context is the caller's again (or the message says which it is)."""
    current_after = _current(case.raw)
    exc = case.exc
    # A deinitialized driver refuses the restore itself: the thread cannot get its context back.
    restore_refused = case.mode == "DEINITIALIZED" and any(c.restore and c.status for c in case.log)
    if current_after != current_before and not (case.scn.sets_context and exc is None) and not restore_refused:
        said = _text(exc) + "\n".join(case.cuda_warnings)
        name = "no context" if current_after == 0 else format_handle(current_after)
        if "could not be restored" in said:
            if name not in said:
                case.add("C2", f"the message does not name the context now current ({name}): {said[:300]!r}")
        else:
            case.add(
                "G2",
                f"current context changed from {format_handle(current_before)} to {format_handle(current_after)}",
            )
    _set_current(case.raw, current_before)


def _check_after_failure(case: _Case, before_state: Any) -> None:
    """G3: all-or-nothing (the scenario's state is unchanged by a failure) and usable once faults are off."""
    scn, mode, add, env, state = case.scn, case.mode, case.add, case.env, case.state
    if mode is not None and case.exc is not None and scn.state is not None and mode != "DEINITIALIZED":
        try:
            after_state = scn.state(env, state)
        except Exception as error:  # noqa: BLE001
            add("G3", f"reading the state after the failure raised {_describe(error)}")
        else:
            if after_state != before_state:
                add("G3", f"not all-or-nothing: state {before_state!r} became {after_state!r}")
    if mode not in ("STICKY", "DEINITIALIZED") and scn.probe is not None and case.crashed is None:
        with warnings.catch_warnings(record=True) as probe_warnings:
            warnings.simplefilter("always")
            try:
                scn.probe(env, state)
            except SimulatedCrash as crash:
                add("S2", f"using the objects afterwards crashed the driver: {crash}")
            except Exception as error:  # noqa: BLE001
                add("G3", f"not usable after the failure: {_describe(error)}")
        for w in probe_warnings:
            if issubclass(w.category, CUDAWarning):
                add("G3", f"using the objects afterwards warned: {w.message}")


def _release_case(case: _Case) -> None:
    """Release the case's objects (S2 / W5: the driver misuse while doing so is reported)."""
    sim = case.sim
    snapshot_end = sim.snapshot() if sim is not None else None
    # The exception's traceback holds the scenario's objects: drop it, so that they are
    # collected while their driver is still installed.
    if case.exc is not None:
        case.exc.__traceback__ = None
    case.exc = case.crashed = case.result = None
    case.caught.clear()
    if sim is None:
        _end_leftover_captures(case.raw, case.proxy)
    _teardown(case.env, case.state, case.raw, case.add)
    if case.hooks is not None:
        case.hooks.after_teardown(case.env, case.proxy, case.add)
    if sim is not None and snapshot_end is not None:
        sim.drain()
        _report_misuse(case.add, sim.changes_since(snapshot_end), " while releasing the objects afterwards")


_RELEASE_CALLS = frozenset(name for name, fact in DRIVER_FACTS.items() if fact.releases is not None)


#: What a capture holds: leaked with it when the driver refuses to end the capture (W5).
_CAPTURE_HELD = frozenset({"graph", "user_object"})


def _capture_end_refused(log: list[DriverCall]) -> bool:
    """Whether the driver refused to end a capture: its graph, and what that holds, cannot be released."""
    return any(c.status and c.name == "cuStreamEndCapture" for c in log)


def _failed_releases(log: list[DriverCall]) -> set[int]:
    """Handles whose release failed in ``log``: leaking them is the contract (W5), not a G1 violation."""
    out: set[int] = set()
    for c in log:
        if c.status and c.name in _RELEASE_CALLS and c.args:
            try:
                out.add(int(c.args[0]))
            except (TypeError, ValueError):
                continue
    return out


def _check(  # noqa: PLR0917
    scn: Scenario,
    mode: str,
    log: list[DriverCall],
    exc: BaseException | None,
    cuda_warnings: list[str],
    add: Callable[[str, str], None],
) -> None:
    """E1, G4, W1, W4: what was raised or reported for the injected failure."""
    first_index = next((i for i, c in enumerate(log) if c.injected), None)
    if first_index is None:  # nothing failed: the caller reports the case as not deterministic
        return
    first = log[first_index]
    name, code = first.name, first.status
    later = [
        c for c in log[first_index + 1 :] if c.status and c.status not in (DEINITIALIZED, NOT_READY) and c is not first
    ]
    if mode == "DEINITIALIZED":
        if cuda_warnings:
            add("W4", f"reported while the driver is deinitialized: {cuda_warnings[0]}")
        if exc is not None and any("CUDA_ERROR_DEINITIALIZED" in note for note in getattr(exc, "__notes__", [])):
            add("W4", "a DEINITIALIZED failure was attached as a note")
    if scn.kind == "warn":
        if exc is not None:
            add("W1", f"an implicit release raised {_describe(exc)}")
            return
        if mode == "DEINITIALIZED":
            return
        said = "\n".join(cuda_warnings)
        if not any(name in w and error_name(code) in w for w in cuda_warnings):
            add("W1", f"{name} failed with {error_name(code)} and no CUDAWarning says so (warnings: {cuda_warnings})")
        for c in later:
            if mode == "STICKY" and c.status == code:
                continue  # W7: after the first report of a sticky fault, later refusals are counted and summed up once
            if c.name not in said:
                add("G4", f"{c.name} failed too ({error_name(c.status)}) and no warning says so")
        return
    if exc is None:
        add("E1", f"{name} failed with {error_name(code)} and the operation returned normally")
        return
    if not isinstance(exc, CUDAError):
        add("E1", f"{name} failed with {error_name(code)} and the operation raised {_describe(exc)}")
        return
    if mode == "DEINITIALIZED":
        # Every call fails alike and DEINITIALIZED failures are never attached (W4): which of them
        # is raised is not observable beyond the code.
        if exc.code != code:
            add("G4", f"{name} failed with {error_name(code)} but {exc.call} {error_name(exc.code)} was raised")
    elif exc.code != code or exc.call != name:
        add("G4", f"{name} failed with {error_name(code)} but {exc.call} {error_name(exc.code)} was raised")
    text = _text(exc)
    for c in later:
        if c.name not in text:
            add("G4", f"{c.name} failed too ({error_name(c.status)}) and no note says so: {_describe(exc)}")
    if mode != "DEINITIALIZED" and cuda_warnings:
        add("W1", f"an ordinary call issued a CUDAWarning instead of a note: {cuda_warnings[0]}")


# --- the sweep ------------------------------------------------------------------------------------


def _stratified_sample(
    cases: list[tuple[Scenario, str, str, int, list[DriverCall]]], sample: int, seed: int
) -> list[int]:
    """The indices (in order) of ``sample`` of ``cases``, picked with ``seed``.

    One failure point of every operation and failure mode comes first (so a sample at least as
    large as the number of those pairs fails every operation in every mode); the rest of the
    sample is picked uniformly among the other cases. A smaller sample picks among those pairs.
    """
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (scn, _ctx_mode, mode, _k, _calls) in enumerate(cases):
        groups.setdefault((scn.name, mode), []).append(i)
    first = [rng.choice(indices) for indices in groups.values()]
    if sample <= len(first):
        return sorted(rng.sample(first, sample))
    chosen = set(first)
    rest = [i for i in range(len(cases)) if i not in chosen]
    return sorted(first + rng.sample(rest, sample - len(first)))


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Leave what exists now (modules, the driver serving the sweep) out of every collection of the block.

    Cases collect several times each; a full collection that walks every object of the process
    costs far more than the case itself. Objects made in the block are collected as usual.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _record(runtime: _Runtime, scn: Scenario, ctx_mode: str, res: ScenarioResult) -> list[DriverCall] | None:
    """Record ``scn``'s fault-free run twice on ``runtime``; its calls, or None when it failed.

    The first run's violations are the scenario's; a second run that makes other calls is a
    :class:`NonDeterministic` finding (the cases still run against the first).
    """
    outcome = _run_case(runtime, scn, ctx_mode, None, 0, [])
    res.calls[ctx_mode] = [_label(c) for c in outcome.calls]
    res.violations.extend(outcome.violations)
    if outcome.violations:
        return None
    again = _run_case(runtime, scn, ctx_mode, None, 0, [])
    differs = _compare_runs(scn, ctx_mode, outcome.calls, again.calls)
    if differs is not None:
        res.nondeterministic.append(differs)
    return outcome.calls


def run_sweep(
    *,
    driver: str = "sim",
    scenarios: list[Scenario] | None = None,
    modes: tuple[str, ...] = MODES,
    contexts: tuple[str, ...] = CONTEXTS,
    sample: int | None = None,
    seed: int = 0,
    match: str | None = None,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> SweepResult:
    """Run the sweep and return what it found.

    ``driver`` is ``"sim"`` (a fresh simulated driver per case), ``"real"`` (the real driver
    through the fault proxy and a safety net) or ``"sim-persistent"`` (one simulated driver for
    every case, through the same net, as the real one is). Each operation's fault-free run is
    recorded twice on that driver (a difference is a :class:`NonDeterministic` finding), and
    every case's calls up to its failure point are compared with it. ``sample``
    runs that many cases chosen with ``seed`` (every fault-free run always runs, and
    one failure point of every operation and failure mode first when ``sample`` is large
    enough: :func:`_stratified_sample`); ``None`` runs them all. ``match`` keeps the scenarios whose name contains it.
    ``jobs`` above 1 runs the cases of registry scenarios in that many fresh processes, whole
    scenarios each, each process recording the fault-free runs again on its own driver; the
    result is the same as with one. Raises ``ValueError`` for an unknown driver or ``jobs``
    below 1, before anything runs.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, not {jobs}")
    if driver not in DRIVERS:
        raise ValueError(f"unknown driver {driver!r}: the drivers are {DRIVERS}")
    chosen = scenarios if scenarios is not None else registry.scenarios()
    if driver != "sim":  # a driver that serves every case runs what a GPU runs
        chosen = [s for s in chosen if s.real]
    if match:
        chosen = [s for s in chosen if match in s.name]
    start = time.perf_counter()
    results = {s.name: ScenarioResult(s.name, s.layer) for s in chosen}
    cases: list[tuple[Scenario, str, str, int, list[DriverCall]]] = []
    with _Runtime(driver) as runtime, _frozen_heap():
        for scn in chosen:
            for ctx_mode in contexts:
                calls = _record(runtime, scn, ctx_mode, results[scn.name])
                if calls is None:
                    continue
                for mode in modes:
                    cases.extend((scn, ctx_mode, mode, k, calls) for k in _points(mode, calls))
        total = len(cases)
        if sample is not None and sample < total:
            cases = [cases[i] for i in _stratified_sample(cases, sample, seed)]
        if jobs > 1 and scenarios is None and len(cases) > 1:
            for name, count, found, unsteady in _run_in_processes(cases, jobs, driver, progress):
                results[name].cases += count
                results[name].violations.extend(found)
                results[name].nondeterministic.extend(unsteady)
        else:
            for i, (scn, ctx_mode, mode, k, calls) in enumerate(cases):
                outcome = _run_case(runtime, scn, ctx_mode, mode, k, calls)
                res = results[scn.name]
                res.cases += 1
                res.violations.extend(outcome.violations)
                res.nondeterministic.extend(outcome.nondeterministic)
                if progress is not None and i % 500 == 0:
                    progress(f"{i}/{len(cases)} cases")
    return SweepResult(driver, list(results.values()), time.perf_counter() - start, len(cases) < total, total)


# --- running the cases in several processes ------------------------------------------------------

#: A case as a child process gets it: scenario name, context situation, failure mode, call index,
#: and the fault-free run's calls it was picked from (their labels).
_CaseSpec = tuple[str, str, str, int, tuple[str, ...]]
#: What a child process found for one scenario: name, cases run, violations, non-deterministic cases.
_ShardRow = tuple[str, int, list[Violation], list[NonDeterministic]]


def _run_in_processes(
    cases: list[tuple[Scenario, str, str, int, list[DriverCall]]],
    jobs: int,
    driver: str,
    progress: Callable[[str], None] | None,
) -> list[_ShardRow]:
    """Run ``cases`` (of registry scenarios) in ``jobs`` fresh processes, each on its own ``driver``.

    A scenario's cases stay together: each process records the scenario's fault-free run again
    on its own driver (a run that differs from the one the cases were picked from is a
    :class:`NonDeterministic` finding) and fails its calls; the scenarios are dealt out so that
    each process gets about the same number of cases. Processes are spawned, not forked: the
    simulator and cuguard run threads.
    """
    import multiprocessing

    by_scenario: dict[str, list[_CaseSpec]] = {}
    for scn, ctx_mode, mode, k, calls in cases:
        labels = tuple(_label(c) for c in calls)
        by_scenario.setdefault(scn.name, []).append((scn.name, ctx_mode, mode, k, labels))
    shards: list[list[_CaseSpec]] = [[] for _ in range(jobs)]
    for specs in sorted(by_scenario.values(), key=len, reverse=True):
        min(shards, key=len).extend(specs)
    shards = [shard for shard in shards if shard]
    with multiprocessing.get_context("spawn").Pool(len(shards)) as pool:
        parts = pool.starmap(_run_shard, [(shard, driver) for shard in shards], chunksize=1)
    if progress is not None:
        progress(f"{len(cases)}/{len(cases)} cases in {len(shards)} processes")
    return [row for part in parts for row in part]


def _run_shard(specs: list[_CaseSpec], driver: str = "sim") -> list[_ShardRow]:
    """Run one process's cases; for each scenario: its name, the cases run and what they found."""
    by_name = {s.name: s for s in registry.scenarios()}
    found: dict[str, tuple[int, list[Violation], list[NonDeterministic]]] = {}
    baselines: dict[tuple[str, str], list[DriverCall]] = {}
    with _Runtime(driver) as runtime, _frozen_heap():
        for name, ctx_mode, mode, k, labels in specs:
            scn = by_name[name]
            count, violations, unsteady = found.get(name, (0, [], []))
            calls = baselines.get((name, ctx_mode))
            if calls is None:
                calls = baselines[name, ctx_mode] = _run_case(runtime, scn, ctx_mode, None, 0, []).calls
                here = [_label(c) for c in calls]
                if here != list(labels):
                    detail = _diverges_labels(list(labels), here)
                    unsteady.append(NonDeterministic(name, scn.layer, ctx_mode, "", 0, "", detail))
            outcome = _run_case(runtime, scn, ctx_mode, mode, k, calls)
            found[name] = (count + 1, violations + outcome.violations, unsteady + outcome.nondeterministic)
    return [(name, count, violations, unsteady) for name, (count, violations, unsteady) in found.items()]


def _diverges_labels(expected: list[str], got: list[str]) -> str:
    """Where a process's fault-free run parts from the one its cases were picked from."""
    for i, (want, have) in enumerate(zip(expected, got, strict=False), 1):
        if want != have:
            return f"this process's fault-free run differs at call {i}: {want} there, {have} here"
    return f"this process's fault-free run made {len(got)} call(s), the one its cases came from {len(expected)}"
