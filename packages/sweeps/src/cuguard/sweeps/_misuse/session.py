"""One example of the misuse sweep: drivers, the pool, and every call made under the checks.

A :class:`Session` installs a driver (a fresh :class:`SimulatedDriver`, or the
real driver) behind a :class:`~cuguard.testing.FaultProxy` of its own, builds a
few objects of every kind (:meth:`Session.setup`), then runs steps chosen by a
:class:`Chooser` (:meth:`Session.step`, the step kinds are in
:mod:`cuguard.sweeps._misuse.steps`) and finally drops everything
(:meth:`Session.finish`).

Every cuguard call goes through :meth:`Session.perform`, which records the driver
calls, the warnings and the unraisable exceptions of the call, and then applies
the rules of :mod:`cuguard.sweeps._misuse.checks`. Broken rules become
:class:`~cuguard.sweeps._misuse.checks.MisuseViolation` records carrying the
trace of the example up to that step.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TextIO

from cuguard.errors import CUDAWarning
from cuguard.sweeps._failpoints.runner import _RELEASE_CALLS
from cuguard.sweeps._misuse import checks
from cuguard.sweeps._misuse.arguments import Arguments
from cuguard.sweeps._misuse.captures import CaptureRecord, CaptureWatch
from cuguard.sweeps._misuse.catalog import Op, build_ops
from cuguard.sweeps._misuse.checks import MisuseViolation, WrongArg
from cuguard.sweeps._misuse.choices import Chooser, coin, pick
from cuguard.sweeps._misuse.model import (
    KERNELS_CU,
    KERNELS_PTX,
    POOLED_KINDS,
    CallbackBoom,
    Entry,
    Model,
    emulate,
    kind_of,
)
from cuguard.sweeps._misuse.threads import STEP_TIMEOUT, Hang, SecondThread, deadline
from cuguard.testing import DriverCall, FaultPlan, FaultProxy, SimulatedCrash, SimulatedDriver
from cuguard.testing.lowlevel import left_behind

__all__ = ["DriverSlot", "Outcome", "Session"]


#: Driver functions whose release failing means the object was leaked on purpose (W5), not left behind (G1).
#: A refused cuStreamEndCapture leaks the capture's graph, and what that graph keeps (W5).
RELEASE_CALLS = _RELEASE_CALLS | {"cuGraphReleaseUserObject", "cuGraphDestroyNode", "cuStreamEndCapture"}
MAX_POOL = 70
#: How many steps of its example a violation keeps as its reproducer.
TRACE = 400


@dataclass(eq=False)
class DriverSlot:
    """One driver the session installs: the driver, the fault proxy over it, and what is kept about it."""

    index: int
    raw: Any
    proxy: FaultProxy
    sim: SimulatedDriver | None
    image: bytes
    raw_streams: list[int] = field(default_factory=list)
    failed_releases: set[int] = field(default_factory=set)
    uninstalled: bool = False

    @property
    def name(self) -> str:
        return f"driver{self.index} ({'simulated' if self.sim is not None else 'real'})"


@dataclass
class Outcome:
    """What one performed call did."""

    result: Any
    exc: BaseException | None
    log: list[DriverCall]
    crashed: bool = False
    fault_fired: bool = False


@dataclass
class _Marks:
    """Where the books stand before a call (see ``Session.perform``)."""

    slot: DriverSlot
    context: Any
    sims: list[DriverSlot]
    snaps: dict[int, Any]
    worker: dict[int, int]
    kernels: dict[int, int]
    bad: dict[int, int]
    ledger: Any
    warnings: int
    unraisables: int
    captures: Any


@dataclass
class _Call:
    """What one call did: its driver calls, its result, what it raised, and whether a fault fired."""

    log: list[DriverCall] = field(default_factory=list)
    result: Any = None
    exc: BaseException | None = None
    crash: SimulatedCrash | None = None
    fault_active: bool = False


def _call_text(name: str, receiver: str | None) -> str:
    """How a trace shows a call of operation ``name``, as a user writes it (``Device``, ``s0.sync``).

    A class's layer and its ``()`` are left out (``resources.Device()`` is shown ``Device``);
    on a receiver, the method after the class (``resources.Stream.sync`` on ``s0``: ``s0.sync``).
    """
    rest = name.partition(".")[2]
    if receiver is not None:
        return f"{receiver}.{rest.split('.', 1)[1] if '.' in rest else rest}"
    if rest[:1].isupper():
        return rest.replace("()", "", 1)
    return name


class Session:
    """One example of the misuse sweep (see the module docstring)."""

    #: Where each step is written as it happens (an isolated example's stderr: a crash's last steps).
    echo: TextIO | None = None

    def __init__(self, driver: str, chooser: Chooser, example: int = 0, *, callbacks_calling_cuguard: bool = True):
        if driver not in ("sim", "real"):
            raise ValueError(f"driver must be 'sim' or 'real', not {driver!r}")
        self.kind = driver
        self.ch = chooser
        self.example = example
        self.callbacks_calling_cuguard = callbacks_calling_cuguard and driver == "sim"
        self.model = Model()
        self.L = self.model.L
        self.slots: list[DriverSlot] = []
        self.ops = build_ops(self.L, self.image)
        self.arguments = Arguments(self)
        self.by_name = {op.name: op for op in self.ops}
        self.violations: list[MisuseViolation] = []
        self.trace: list[str] = []
        self.steps = 0
        self.unraisables: list[tuple[str, str]] = []  # (category, what): no exception objects (they hold frames)
        self.callback_outcomes: list[tuple[str, str, bool]] = []  # (target, exception described, allowed type)
        self._previous: Any = None
        self._installed_any = False
        self._old_hook: Any = None
        self._warn_cm: AbstractContextManager[Any] | None = None
        self._caught: list[warnings.WarningMessage] = []
        self.interrupted = False  # a step ended by an exception (see step())
        # captures in progress and the second thread (see captures.py)
        self.watch = CaptureWatch()
        self.captures: list[CaptureRecord] = []
        self.exercised: Counter[str] = Counter()
        self.second = SecondThread()
        self.step_timeout = STEP_TIMEOUT
        self.hung = False  # a step hung: the example stops, and so does the run (see hang())

    # --- drivers ---------------------------------------------------------------------------------

    @property
    def slot(self) -> DriverSlot:
        return self.slots[self.model.current]

    def image(self) -> bytes:
        return self.slot.image

    def new_slot(self, real: bool) -> DriverSlot:
        if real:
            raw = self.L.errors.real_driver()
            sim = None
        else:
            sim = SimulatedDriver(2)
            emulate(sim)
            self.watch.install(sim)
            raw = sim
        slot = DriverSlot(len(self.slots), raw, FaultProxy(raw), sim, KERNELS_PTX)
        self.slots.append(slot)
        self.model.sims[slot.index] = sim
        return slot

    def install(self, slot: DriverSlot) -> None:
        if self.slots and self._installed_any and slot.index != self.model.current:
            self.slot.uninstalled = True
        previous = self.L.errors.install_driver(slot.proxy)
        if not self._installed_any:
            self._previous = previous
            self._installed_any = True
        self.model.current = slot.index

    def current_context(self, slot: DriverSlot | None = None) -> int:
        """The calling thread's current context in ``slot``'s driver, asked directly (not through cuguard)."""
        raw = (slot or self.slot).raw
        err, handle = raw.cuCtxGetCurrent()
        if err:
            return 0 if int(err) == 3 else -1  # CUDA_ERROR_NOT_INITIALIZED: nothing can be current
        return int(handle)

    def context_gone(self, handle: int, slot: DriverSlot | None = None) -> bool:
        slot = slot or self.slot
        if handle <= 0:
            return False
        if slot.sim is not None:
            record = slot.sim._ctxs.get(handle)
            return record is None or bool(record.destroyed)
        if handle in self.model.destroyed.get(slot.index, set()):
            return True
        # The real driver cannot be asked: a created context whose cuguard object was closed or
        # collected is gone (and switching to it would abort the process).
        ref = self.model.created.get((slot.index, handle))
        if ref is None:
            return False
        ctx = ref()
        return ctx is None or bool(ctx._released)

    def set_context(self, handle: int, slot: DriverSlot | None = None) -> None:
        """Make ``handle`` current in this thread (harness-side, never a destroyed context)."""
        from cuda.bindings import driver as cb

        slot = slot or self.slot
        if self.context_gone(handle, slot):
            handle = 0
        slot.raw.cuCtxSetCurrent(cb.CUcontext(max(handle, 0)))

    def raw_stream(self, ctx: Any, flags: int = 0) -> int | None:
        """A stream made directly through the driver (another library's), in context ``ctx``."""
        slot = self.slot
        before = self.current_context()
        from cuda.bindings import driver as cb

        slot.raw.cuCtxSetCurrent(cb.CUcontext(int(ctx._int)))
        try:
            err, handle = slot.raw.cuStreamCreate(flags)
        finally:
            self.set_context(before)
        if err:
            return None
        slot.raw_streams.append(int(handle))
        return int(handle)

    # --- settling -------------------------------------------------------------------------------

    def settle(self) -> None:
        """Let host functions run and cuguard's release thread carry out what was handed to it."""
        sim = self.slot.sim
        if sim is not None:
            sim.drain()
        self.L.errors.flush_deferred(10)
        if sim is not None:
            sim.drain()

    def quiesce(self) -> None:
        """Finish all queued work, as a careful program does before it frees memory.

        Freeing memory while one's own work still uses it is the program's race, not cuguard's;
        what remains for the W5 check is cuguard's own: freeing what a graph or a release path
        still uses.
        """
        sim = self.slot.sim
        if sim is not None:
            sim.drain()
            with sim._lock:
                for stream in list(sim._busy):
                    sim._retire(stream)
            return
        before = self.current_context()
        for entry in self.model.entries("Device"):
            if entry.driver != self.model.current or entry.obj._context is None:
                continue
            ctx = entry.obj._context
            if ctx._closed:
                continue
            from cuda.bindings import driver as cb

            self.slot.raw.cuCtxSetCurrent(cb.CUcontext(int(ctx._int)))
            self.slot.raw.cuCtxSynchronize()
        self.set_context(before)

    # --- hooks ----------------------------------------------------------------------------------

    def _unraisable(self, args: Any) -> None:
        exc = args.exc_value
        what = f"{args.err_msg or 'exception ignored'}: {type(exc).__name__}: {exc}"
        category = "boom" if isinstance(exc, CallbackBoom) else "crash" if isinstance(exc, SimulatedCrash) else "other"
        self.unraisables.append((category, what[:300]))

    def start(self) -> None:
        """Install the hooks and the first driver."""
        self._old_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        self._warn_cm = warnings.catch_warnings(record=True)
        self._caught = self._warn_cm.__enter__()
        warnings.simplefilter("always")
        slot = self.new_slot(real=self.kind == "real")
        self.install(slot)
        if slot.sim is None:
            major, minor = self.L.resources.Device(0).compute_capability
            program = self.L.resources.Program(KERNELS_CU, options=[f"-arch=sm_{major}{minor}"])
            slot.image = program.compile("cubin").code

    def stop(self) -> None:
        """Remove the drivers and hooks (after :meth:`finish`)."""
        self.second.stop()
        try:
            if self._installed_any:
                self.L.errors.install_driver(self._previous)
            for slot in self.slots:
                if slot.sim is not None:
                    slot.sim.close()
        finally:
            if self._warn_cm is not None:
                self._warn_cm.__exit__(None, None, None)
                self._warn_cm = None
            if self._old_hook is not None:
                sys.unraisablehook = self._old_hook
                self._old_hook = None

    # --- violations -----------------------------------------------------------------------------

    def hang(self, where: str, detail: str) -> None:
        """A step did not finish in time: report it (S2: a hang is a crash) and stop the example."""
        self.flag("S2", f"hang ({where})", f"{detail}: a hang (the example stops here)")
        self.hung = True

    def flag(self, rule: str, op: str, detail: str) -> None:
        self.violations.append(MisuseViolation(rule, op, detail, self.example, self.steps, tuple(self.trace[-TRACE:])))

    def note(self, line: str) -> None:
        if threading.current_thread() is not threading.main_thread() and self.second.ident == threading.get_ident():
            line = f"[second thread] {line}"
        self.trace.append(f"{self.steps:3}: {line}")
        if self.echo is not None:
            self.echo.write(f"{self.steps:3}: {line}\n")
            self.echo.flush()

    # --- one call under the checks --------------------------------------------------------------

    def perform(
        self,
        op: str,
        desc: str,
        fn: Callable[[], Any],
        *,
        involved: Sequence[tuple[str, Any]] = (),
        wrong: Sequence[WrongArg] = (),
        sets_context: bool = False,
        may_warn: bool = False,
        extra_errors: tuple[type[BaseException], ...] = (),
        fault: Callable[[], AbstractContextManager[Any]] | None = None,
        fault_desc: str = "",
        warn_rule: str = "W1",
    ) -> Outcome:
        """Run ``fn`` (one cuguard call, described as ``desc``) and check every rule (see :mod:`.checks`)."""
        slot = self.slot
        unusable = []
        for label, obj in involved:
            why = self.model.why_unusable(obj)
            if why is not None:
                unusable.append((label, why[1], why[0]))
        marks = self._marks()  # slot is marks.slot: the one current when the call began
        call = self._call(desc, fn, fault, fault_desc)
        exc, crash = call.exc, call.crash
        # S2: crashes, exits
        if crash is not None:
            self.flag("S2", op, f"the real driver would crash the process: {crash}")
        elif isinstance(exc, SystemExit | GeneratorExit):
            self.flag("S2", op, f"tried to end the process: {checks.describe(exc)}")
        else:
            for rule, detail in checks.exception_problems(exc, list(wrong), unusable, call.fault_active, extra_errors):
                self.flag(rule, op, detail)
        self._check_simulators(op, marks)
        self._check_left_behind(op, marks, call, involved)
        # G2: the current context
        if crash is None and slot is self.slot:
            ctx_after = self.current_context(slot)
            restore_refused = any(c.restore and c.status for c in call.log) and call.fault_active
            ctx_before = marks.context
            problem = checks.g2_problem(
                ctx_before, ctx_after, exc, sets_context, self.context_gone(ctx_before, slot), restore_refused
            )
            if problem is not None:
                self.flag(problem[0], op, problem[1])
            if ctx_after != ctx_before and not (sets_context and exc is None):
                self.set_context(ctx_before, slot)
        self._check_reports(op, marks, call, may_warn, warn_rule)
        _drop_frames(exc)
        _drop_frames(crash)
        del self._caught[marks.warnings :]
        return Outcome(call.result, exc, call.log, crash is not None, call.fault_active)

    def _marks(self) -> _Marks:
        """Where the books stand before a call: the simulators', the ledger's, the warnings' and the captures'."""
        sims = [s for s in self.slots if s.sim is not None]
        return _Marks(
            slot=self.slot,
            context=self.current_context(self.slot),
            sims=sims,
            snaps={s.index: s.sim.snapshot() for s in sims if s.sim is not None},
            worker={s.index: len(s.sim._worker.errors) for s in sims if s.sim is not None},
            kernels={s.index: len(s.sim.kernel_errors) for s in sims if s.sim is not None},
            bad={s.index: len(s.sim.misuse_bad_launches) for s in sims if s.sim is not None},
            ledger=self.slot.proxy.live_objects(),
            warnings=len(self._caught),
            unraisables=len(self.unraisables),
            captures=self.watch.mark(),
        )

    def _call(
        self, desc: str, fn: Callable[[], Any], fault: Callable[[], AbstractContextManager[Any]] | None, fault_desc: str
    ) -> _Call:
        """Call ``fn`` (under ``fault``), recording its driver calls, and write its trace line."""
        call = _Call()
        proxy = self.slot.proxy
        plan: FaultPlan | None = None
        with proxy._lock:
            proxy.recorders.append(call.log)
            proxy._refresh()
        if self.echo is not None:  # said before the call: a call that kills the process is the last line
            self.echo.write(f"{self.steps:3}: calling {desc}{'    # under ' + fault_desc if fault_desc else ''}\n")
            self.echo.flush()
        try:
            if fault is not None:
                with fault() as plan:
                    call.result = fn()
            else:
                call.result = fn()
        except SimulatedCrash as c:
            call.crash = c
        except (KeyboardInterrupt, Hang):
            raise
        except BaseException as e:  # noqa: BLE001 - everything a cuguard call raises is checked by perform
            call.exc = e
        finally:
            with proxy._lock:
                proxy.recorders.remove(call.log)
                proxy._refresh()
        self.settle()
        call.fault_active = plan is not None and plan.fired > 0
        # the trace line
        if call.crash is not None:
            outcome = f"  !! SimulatedCrash: {call.crash}"
        elif call.exc is not None:
            outcome = f"  !! {checks.describe(call.exc)[:160]}"
        else:
            entry = self.model.find(call.result)
            outcome = "" if entry is None else f"  -> {entry.label}"
        self.note(desc + (f"    # under {fault_desc}" if fault_desc else "") + outcome)
        return call

    def _check_simulators(self, op: str, marks: _Marks) -> None:
        """S2, W5, O5, E3: what the simulators' books recorded during the call."""
        for s in marks.sims:
            assert s.sim is not None
            sim = s.sim
            changes = sim.changes_since(marks.snaps[s.index])
            for incident in changes.misuse:
                rule = "O5" if "host function" in incident.description else "S2"
                self.flag(rule, op, f"driver misuse recorded by {s.name}: {incident}")
            for incident in changes.double_release:
                self.flag("S2", op, f"double release recorded by {s.name}: {incident}")
            for incident in changes.use_after_release:
                self.flag("S2", op, f"use after release recorded by {s.name}: {incident}")
            for incident in changes.dangling:
                self.flag("W5", op, f"dangling memory recorded by {s.name}: {incident}")
            for error in sim._worker.errors[marks.worker[s.index] :]:
                self.flag("S2", op, f"an exception on the driver's thread of {s.name}: {checks.describe(error)}")
            for error in sim.kernel_errors[marks.kernels[s.index] :]:
                self.flag("S2", op, f"a kernel emulation failed: {checks.describe(error)}")
            for what in sim.misuse_bad_launches[marks.bad[s.index] :]:
                self.flag("E3", op, f"a launch whose arguments do not fit reached the driver: {what}")

    def _check_left_behind(self, op: str, marks: _Marks, call: _Call, involved: Sequence[tuple[str, Any]]) -> None:
        """G1: a call that raised created nothing (what a refused release leaked on purpose aside, W5)."""
        slot, exc = marks.slot, call.exc
        text = "" if exc is None else "\n".join([str(exc), *getattr(exc, "__notes__", [])])
        failed = {h for c in call.log if c.status and c.name in RELEASE_CALLS and c.args for h in [_handle(c.args[0])]}
        slot.failed_releases |= failed
        if exc is not None and type(exc).__name__ == "CUDAError" and "was leaked" in str(exc):
            # An explicit release the driver refused (cuCtxSynchronize during a capture of the context, say)
            # leaked the object on purpose, and a pool's buffer keeps its pool with it (W5).
            for _, obj in involved:
                for holder in (obj, getattr(obj, "_mr", None)):
                    handle = getattr(holder, "_handle", None)
                    if handle is not None:
                        slot.failed_releases.add(_handle(handle))
        if exc is not None and call.fault_active:
            # an explicit close (or any call) that failed under a fault may leak what it touched, on purpose (W5)
            for _, obj in involved:
                handle = getattr(obj, "_handle", None)
                if handle is not None:
                    slot.failed_releases.add(_handle(handle))
        if exc is not None and "leaked" not in text:
            if slot.sim is not None:
                created = slot.sim.changes_since(marks.snaps[slot.index]).created
                kept = [str(o) for o in created if o.handle not in failed]
            else:
                grown = left_behind(marks.ledger, slot.proxy.live_objects())
                kept = [f"{kind} {h:#x}" for (kind, h) in grown if h not in failed]
            if kept:
                self.flag("G1", op, f"raised {checks.describe(exc)[:120]} and left behind: {'; '.join(kept)}")

    def _check_reports(self, op: str, marks: _Marks, call: _Call, may_warn: bool, warn_rule: str) -> None:
        """G6 and W5 of captures; W1, W4, O5, O6: the reports (warnings, unraisable exceptions) the call made."""
        for rule, detail in self.watch.problems(op, marks.captures, call.exc, call.fault_active):
            self.flag(rule, op, detail)
        for s in marks.sims:
            assert s.sim is not None
            for detail in self.watch.freed_under_graphs(s.sim):
                self.flag("W5", op, detail)
        # (G6: a report of a failure a capture caused)
        messages = [str(w.message) for w in self._caught[marks.warnings :] if issubclass(w.category, CUDAWarning)]
        capture_reports = [] if call.fault_active else self.watch.warning_problems(messages, marks.captures)
        for rule, detail in capture_reports:
            self.flag(rule, op, detail)
        if capture_reports:
            messages = [m for m in messages if not self.watch.warning_problems([m], marks.captures)]
        for rule, detail in checks.warning_problems(messages, call.fault_active, may_warn, warn_rule):
            self.flag(rule, op, detail)
        for category, what in self.unraisables[marks.unraisables :]:
            if category == "boom":
                continue  # W6: the sweep's own callback raised, and it went where it must
            self.flag("S2" if category == "crash" else "W1", op, f"an exception reached sys.unraisablehook: {what}")

    # --- calls ------------------------------------------------------------------------------------

    def available_ops(self) -> list[Op]:
        kinds = {e.kind for e in self.model.pool}
        out = []
        for op in self.ops:
            if op.receiver is not None and op.receiver not in kinds:
                continue
            if self.kind == "real" and not op.real:
                continue
            out.extend([op] * op.weight)
        return out

    def prepare(self, op: Op | None = None, receiver: Entry | None = None) -> Callable[..., Outcome] | None:
        """Draw an operation and its arguments; return the call to perform (``None`` when nothing fits)."""
        if op is None:
            choices = self.available_ops()
            if not choices:
                return None
            op = pick(self.ch, choices)
        if op.receiver is not None and receiver is None:
            candidates = self.arguments.receivers(op.receiver)
            if not candidates:
                return None
            if op.receiver_type:
                typed = [e for e in candidates if e.obj._kind == op.receiver_type]
                if typed and coin(self.ch, 80):
                    candidates = typed
            receiver = pick(self.ch, candidates)
        drawn = self.arguments.draw_args(op, receiver)
        if drawn is None:
            return None
        values, texts, wrong, involved = drawn
        uses = op.uses_receiver
        if receiver is not None and op.idempotent_close:
            obj = receiver.obj
            already = getattr(obj, "_released", None) if receiver.kind == "Context" else None
            if already is None:
                already = obj._state != 0 if receiver.kind == "Node" else obj._closed
            if receiver.kind == "GraphBuilder" and obj._stream._closed:
                already = True  # its capture went with the stream; close() releases only the forks it made
            uses = not already
        exit_label = ""
        if receiver is not None and uses:
            if op.exit:
                exit_label = receiver.label  # checked through the notes of the propagating exception
            else:
                involved.insert(0, (receiver.label, receiver.obj))
        run = op.run
        recv = None if receiver is None else receiver.obj
        args = tuple(values)
        name = op.name
        shown = [t for t in texts if "=" not in t.split("(", 1)[0]] + [t for t in texts if "=" in t.split("(", 1)[0]]
        desc = f"{_call_text(name, None if receiver is None else receiver.label)}({', '.join(shown)})"

        def call() -> Any:
            return run(*args) if recv is None else run(recv, *args)

        def go(**kw: Any) -> Outcome:
            if op.frees_memory:
                self.quiesce()
            exit_why = self.model.why_unusable(recv) if exit_label else None
            outcome = self.perform(
                name,
                desc,
                call,
                involved=involved,
                wrong=wrong,
                sets_context=op.sets_context,
                may_warn=op.may_warn,
                extra_errors=op.extra_errors,
                **kw,
            )
            if op.exit:
                if exit_why is not None and exit_why[0] == "destroyed" and getattr(recv, "_owned", True) is False:
                    exit_why = None  # a wrapper of a destroyed context owns nothing: closed quietly, as documented
                self._check_exit(name, exit_label, exit_why, outcome)
            if outcome.fault_fired and recv is not None and getattr(recv, "_handle", None) is not None:
                # a close that failed under the fault leaked the object on purpose (W5); __exit__ says nothing
                self.slot.failed_releases.add(_handle(recv._handle))
            if op.destroys_context and receiver is not None and receiver.driver == self.model.current:
                ctx = receiver.obj
                if ctx._kind == "created" and ctx._released:  # cuguard considers it gone, even after a failure
                    self.model.destroyed.setdefault(self.model.current, set()).add(int(ctx._int))
            self.pool_result(outcome.result)
            return outcome

        return go

    def _check_exit(self, op: str, label: str, why: tuple[str, tuple[str, ...]] | None, outcome: Outcome) -> None:
        """G4 (and O3/O4): ``__exit__`` while an exception propagates never raises; a refused close is a note."""
        if outcome.exc is not None:
            what = checks.describe(outcome.exc)
            self.flag("G4", op, f"__exit__ raised while the body's exception propagated: {what}")
            return
        if why is None or outcome.result is None:
            return
        notes = getattr(outcome.result, "__notes__", [])
        if not notes:
            reason, names = why
            rule = {"stale": "O3", "stale+": "O3", "destroyed": "O4"}.get(reason, "E3")
            self.flag(
                rule,
                op,
                f"{label} ({names[0]}, {reason}) was closed by __exit__ and neither refused nor noted on the "
                "propagating exception",
            )

    def pool_result(self, result: Any, depth: int = 0) -> None:
        kind = kind_of(result)
        if kind in POOLED_KINDS:
            if kind == "Device":
                for other in self.model.entries("Device"):
                    if (
                        other.obj is not result
                        and other.driver == self.model.current
                        and other.obj._ordinal == result._ordinal
                        and other.obj._driver is result._driver
                    ):
                        self.flag("O2", "resources.Device()", f"Device({result._ordinal}) returned a second object")
            self.model.add(result)
        elif depth < 2 and isinstance(result, tuple | list | set | frozenset) and len(result) < 16:
            for item in result:
                self.pool_result(item, depth + 1)

    # --- the example ----------------------------------------------------------------------------------

    def step(self) -> None:
        from cuguard.sweeps._misuse import captures, steps

        if self.hung:
            return
        self.steps += 1
        try:
            with deadline(self.step_timeout):
                if len(self.model.pool) > MAX_POOL:
                    steps.drop(self, count=10)
                    return
                kinds = steps.weighted(self.kind)
                name = pick(self.ch, kinds)
                steps.STEPS[name](self)
            if not self.hung:
                captures.observe(self)
        except Hang as exc:
            self.hang("main thread", str(exc))
        except BaseException:
            # Interrupted (hypothesis ends an example from inside a draw): the frames of the
            # step still hold pool objects, so the tear-down cannot tell a leak from them.
            self.interrupted = True
            raise

    def setup(self) -> None:
        from cuguard.sweeps._misuse import steps

        try:
            with deadline(self.step_timeout):
                steps.setup(self)
        except Hang as exc:
            self.hang("set-up", str(exc))

    def finish(self) -> None:
        from cuguard.sweeps._misuse import steps

        try:
            if not self.hung:
                with deadline(self.step_timeout):
                    steps.teardown(self)
        except Hang as exc:
            self.hang("teardown", str(exc))
        finally:
            self.stop()

    def new_violations(self, since: int) -> list[MisuseViolation]:
        return self.violations[since:]


def _drop_frames(exc: BaseException | None) -> None:
    """Drop the tracebacks of ``exc`` and its chain: their frames hold pool objects, which must go when dropped."""
    seen = 0
    while exc is not None and seen < 8:
        exc.__traceback__ = None
        exc = exc.__context__ or exc.__cause__
        seen += 1


def _handle(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return id(value)
