"""The garbage-collection point sweep (contract B6): a collection of prepared garbage at every point.

For every operation of the failure-point sweep's registry, and each context situation, the
sweep prepares *garbage* before the operation: dead objects of every kind cuguard makes (a
created context with its stream, event, buffer and a capture in progress; streams, events,
buffers of every memory resource, pinned buffers, a module, a graph definition and its
executable graph), each group held only by a reference cycle, with automatic collection off
for the case. It then runs the operation once per *point* with ``gc.collect()`` forced there:

- ``GC@call``: just before the operation's ``k``-th driver call reaches the driver (the calls of
  its fault-free run, counted on every thread, as the failure-point sweep counts them);
- ``GC@lock``: just before the ``k``-th acquisition of a cuguard lock during the operation
  (through the errors layer's hook, :func:`cuguard.errors.lowlevel.set_acquire_hook`).

Nothing fails, so each case must behave as the fault-free run: the operation succeeds with a
result of the same kind, no ``CUDAWarning``, no unraisable exception, the same objects created
and released (the simulator's accounting), the calling thread's context unchanged, no driver
misuse; and the garbage is released (once ``flush_deferred()`` returned, or once a capture that
holds its releases back ended). Every case runs in a worker thread joined with a timeout: a case
that does not finish is a *hang*, reported with the stack of the hung thread, and the sweep
stops there (the hung thread holds locks).
"""

from __future__ import annotations

import gc
import random
import sys
import threading
import time
import traceback
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from cuguard.errors import RESTORE_CONTEXT
from cuguard.errors.lowlevel import set_acquire_hook
from cuguard.sweeps._failpoints import registry
from cuguard.sweeps._failpoints.registry import SIZE, Env, Scenario
from cuguard.sweeps._failpoints.runner import CONTEXTS, CaseHooks, Violation, _run_case, _Runtime
from cuguard.testing import FaultProxy

__all__ = [
    "DIMENSIONS",
    "HANG_SECONDS",
    "GarbageMaker",
    "GcScenarioResult",
    "GcSweepResult",
    "Hang",
    "garbage_makers",
    "run_gc_sweep",
]

#: The point dimensions, in report order: driver calls and lock acquisitions.
DIMENSIONS = ("call", "lock")
_MODES = {"call": "GC@call", "lock": "GC@lock"}
#: The garbage group that holds a capture in progress: left out for an operation that cannot run beside
#: one (CUDA refuses ``cuCtxSynchronize`` while a capture of the context is going on).
CAPTURE = "builder mid-capture"
#: The module of cuguard's locks: its frames are not where a lock is taken (see _acquirer).
_LOCKS_MODULE = set_acquire_hook.__module__
#: Seconds a case may take before it counts as a hang.
HANG_SECONDS = 20.0

#: Makes one group of garbage: dead objects held only by a reference cycle (returned, then dropped).
GarbageMaker = Callable[[Env], Any]


# --- garbage ----------------------------------------------------------------------------------


def _cycle(*objects: Any) -> list[Any]:
    holder: list[Any] = list(objects)
    holder.append(holder)
    return holder


def _created_context(env: Env) -> Any:
    """A created context with a module loaded into it (collected together: O6)."""
    ctx = env.context.Context.create(0)
    return _cycle(ctx, env.resources.Module.load(ctx, env.image))


def _capture_in_progress(env: Env) -> Any:
    """A builder mid-capture (relaxed mode) on a stream, with memory the capture uses and memory of its stream."""
    dev = env.resources.Device(0)
    stream = dev.create_stream(non_blocking=True)  # a blocking one would stop the legacy stream
    own = dev.allocate(SIZE, stream)  # freed on the stream being captured
    used = dev.allocate(SIZE)
    builder = env.graphs.GraphBuilder(stream, mode="relaxed").begin_building()
    used.fill(1, builder)
    return _cycle(stream, own, used, builder)


def _streams_and_events(env: Env) -> Any:
    dev = env.resources.Device(0)
    stream = dev.create_stream()
    return _cycle(stream, stream.record(), dev.create_event(timing=True))


def _buffers(env: Env) -> Any:
    dev = env.resources.Device(0)
    stream = dev.create_stream()
    return _cycle(dev.allocate(SIZE), stream, dev.allocate(SIZE, stream), dev.allocate_pinned(SIZE))


def _pools(env: Env) -> Any:
    res = env.resources
    dev = res.Device(0)
    stream = dev.create_stream()
    pool = res.DeviceMemoryResource(dev, res.DeviceMemoryResourceOptions())
    pinned = res.PinnedMemoryResource(dev)
    return _cycle(stream, pool, pool.allocate(SIZE, stream), pinned, pinned.allocate(SIZE, stream))


def _other_memory(env: Env) -> Any:
    res = env.resources
    dev = res.Device(0)
    vmm, managed, legacy = res.VirtualMemoryResource(dev), res.ManagedMemoryResource(dev), None
    legacy = res.LegacyPinnedMemoryResource(dev)
    return _cycle(vmm, vmm.allocate(SIZE), managed, managed.allocate(SIZE), legacy, legacy.allocate(SIZE))


def _module_and_graphs(env: Env) -> Any:
    dev = env.resources.Device(0)
    module = dev.load_module(env.image)
    buf = dev.allocate(SIZE)
    g = env.graphs.GraphDefinition(dev)
    g.memset(buf, 3).launch(env.resources.LaunchConfig(grid=1, block=SIZE), module.get_kernel("fill_u8"), buf, 1, SIZE)
    return _cycle(module, buf, g, g.instantiate(), g.clone())


def garbage_makers() -> dict[str, GarbageMaker]:
    """The garbage every case prepares, by name: every kind of object cuguard makes."""
    return {
        "created context": _created_context,
        CAPTURE: _capture_in_progress,
        "streams and events": _streams_and_events,
        "buffers": _buffers,
        "pools": _pools,
        "virtual, managed and legacy pinned memory": _other_memory,
        "module and graphs": _module_and_graphs,
    }


# --- triggers ---------------------------------------------------------------------------------


class _Trigger:
    """Counts points (on every thread) and forces a collection before the ``k``-th; ``k`` 0 records them."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.seen = 0
        self.fired = False
        self.where = ""
        self.recorded: list[str] = []
        self._lock = threading.Lock()
        self._collecting: int | None = None
        self.case_thread = threading.get_ident()  # the thread that runs the operation

    def outside(self) -> bool:
        """Whether this thread is not running the forced collection."""
        return self._collecting != threading.get_ident()

    def point(self, what: str) -> None:
        me = threading.get_ident()
        if self._collecting == me:
            return  # what the forced collection itself does is not a point
        with self._lock:
            self.seen += 1
            fire = self.seen == self.k and not self.fired
            if self.k == 0:
                thread = threading.current_thread()
                self.recorded.append(what if me == self.case_thread else f"{what} [{thread.name}]")
            if fire:
                self.fired = True
                self.where = what
                self._collecting = me
        if fire:
            try:
                gc.collect()
            finally:
                self._collecting = None


class _CollectingDriver:
    """A driver between cuguard's seam and the fault proxy: tells a trigger of each call first (``calls``).

    It also lists the calls made outside the forced collection (``path``): where they differ
    from the fault-free run's, the collection changed the operation's course (an address it
    got, a path it took), and what it created cannot be compared with that run's.
    """

    def __init__(self, inner: Any, trigger: _Trigger, calls: bool) -> None:
        self.inner = inner
        self._trigger = trigger
        self._calls = calls
        self.path: list[str] = []

    @property
    def wrapped_driver(self) -> Any:
        return self.inner

    def __repr__(self) -> str:
        return f"<collecting driver over {self.inner!r}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "wrapped_driver":
            raise AttributeError(name)
        fn = getattr(self.inner, name)
        trigger, calls, path = self._trigger, self._calls, self.path
        call = "cuCtxSetCurrent (restore)" if name == RESTORE_CONTEXT else name

        def wrapped(*args: Any) -> Any:
            if trigger.outside():
                path.append(call)
                if calls:
                    trigger.point(call)
            return fn(*args)

        wrapped.__name__ = name
        self.__dict__[name] = wrapped
        return wrapped


def _acquirer() -> str | None:
    """Where the lock being acquired is taken (``None`` for the simulator's and fault proxy's locks).

    The first frame outside the lock module and this one. Locks of cuguard.testing stand for the
    driver's own thread safety (each driver call takes them): their points are the call points.
    """
    frame: Any = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename == __file__ or frame.f_globals.get("__name__") in (_LOCKS_MODULE, "threading")
    ):
        frame = frame.f_back
    if frame is None:
        return "lock"
    module = str(frame.f_globals.get("__name__", "?"))
    if module.startswith("cuguard.testing"):
        return None
    return f"lock in {module.removeprefix('cuguard.')}.{frame.f_code.co_name}"


def _lock_point(trigger: _Trigger) -> None:
    where = _acquirer()
    if where is not None:
        trigger.point(where)


# --- one case ---------------------------------------------------------------------------------


def _shape(value: Any) -> Any:
    """What must be the same in a case as in the fault-free run: plain values, else the type."""
    if value is None or isinstance(value, bool | int | str | bytes):
        return value
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_shape(v) for v in value)
    return type(value).__qualname__


@dataclass
class _Baseline:
    """What the recording run saw: the result's shape, the accounting, the lock points."""

    shape: Any = None
    created: Counter[str] = field(default_factory=Counter)
    released: Counter[str] = field(default_factory=Counter)
    locks: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)  # its driver calls
    ok: bool = False
    garbage: tuple[str, ...] = ()  # the garbage groups its cases prepare


class _GcHooks(CaseHooks):
    """The garbage, the trigger and the checks of one case (``dimension`` None: the recording run)."""

    def __init__(
        self,
        makers: dict[str, GarbageMaker],
        dimension: str | None,
        k: int,
        where: str,
        baseline: _Baseline | None,
    ) -> None:
        self.makers = makers
        self.dimension = dimension
        self.k = k
        self.label = None if dimension is None else (_MODES[dimension], k, where)
        self.trigger = _Trigger(0 if dimension is None else k)
        self.baseline = baseline
        self.recorded = _Baseline(garbage=tuple(makers))
        self.garbage: dict[tuple[str, int], str] = {}
        self.refs: list[tuple[str, weakref.ref[Any]]] = []
        self.unraisable: list[str] = []
        self.postponed: list[tuple[str, int]] = []
        self.calls: list[str] = []  # the driver calls the proxy recorded (set once the case ended)
        self._held: list[Any] = []
        self.driver: _CollectingDriver | None = None
        self.same_path = True
        self.extra: set[int] = set()  # handles of simulator objects the garbage made
        self.released_before: dict[tuple[str, int], int] = {}  # the proxy's release counts once it was made
        self._gc_was_enabled = True
        self._previous_hook: Callable[[Any], object] | None = None

    # --- CaseHooks ---
    def prepare(self, env: Env, proxy: FaultProxy) -> None:
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        # The set-up may leave a global-mode capture going (the builder's scenarios): garbage is
        # made with this thread's capture mode relaxed, as a program would make it elsewhere.
        with env.graphs.capture_mode("relaxed"):
            for name, make in self.makers.items():
                self._make_group(name, make, env, proxy)
        self.released_before = proxy.released_objects()

    def _make_group(self, name: str, make: GarbageMaker, env: Env, proxy: FaultProxy) -> None:
        before = proxy.live_objects()
        sim_before = {int(o.handle) for o in env.sim.live_objects()} if env.sim is not None else set()
        try:
            self._make(name, make, env)
        finally:
            if env.sim is not None:  # what the ledger does not follow (user objects)
                self.extra.update(int(o.handle) for o in env.sim.live_objects() if int(o.handle) not in sim_before)
            after = proxy.live_objects()
            for key in after:
                # A primary context is retained once and held for the process (O2): not garbage.
                if after[key] > before.get(key, 0) and key[0] != "primary_context":
                    self.garbage[key] = name

    def _make(self, name: str, make: GarbageMaker, env: Env) -> None:
        holder = make(env)
        if self.dimension is None:
            # The recording run keeps the garbage until the operation returned: the operation's
            # own collections (an implicit release) must not count its releases as points.
            self._held.append(holder)
        for obj in holder if isinstance(holder, list) else [holder]:
            try:
                self.refs.append((f"{name}: {type(obj).__name__}", weakref.ref(obj)))
            except TypeError:
                continue

    @contextmanager
    def _armed(self, env: Env, proxy: FaultProxy) -> Iterator[object]:
        previous_hook = sys.unraisablehook

        def unraisable(info: Any) -> None:
            self.unraisable.append(f"{info.exc_type.__name__}: {info.exc_value} (in {info.object!r})"[:400])

        sys.unraisablehook = unraisable
        locks = self.dimension in (None, "lock")
        try:
            # The hook goes on once the driver is installed and off before it is removed: the
            # seam's own locks there are the sweep's doing, not the operation's.
            with env.errors.use_driver(self.driver):
                hook_before = set_acquire_hook(lambda: _lock_point(self.trigger)) if locks else None
                try:
                    yield None
                finally:
                    if locks:
                        set_acquire_hook(hook_before)
        finally:
            sys.unraisablehook = previous_hook

    def _path(self) -> list[str]:
        return list(self.driver.path) if self.driver is not None else []

    def arm(self, env: Env, proxy: FaultProxy) -> Any:
        self.driver = _CollectingDriver(proxy, self.trigger, calls=self.dimension == "call")
        self.trigger.case_thread = threading.get_ident()
        return self._armed(env, proxy)

    def after_op(self, env: Env, proxy: FaultProxy, result: Any, exc: BaseException | None, add: Any) -> None:
        if self.dimension is None:
            self.recorded.shape = _shape(result)
            self.recorded.locks = list(self.trigger.recorded)
            self.recorded.path = self._path()
            self._held.clear()
            return
        self.same_path = self.baseline is not None and self._path() == self.baseline.path
        for text in self.unraisable:
            add("W3", f"an exception escaped to sys.unraisablehook: {text}")
        if not self.trigger.fired:
            # With other driver calls the operation took another course, and a lock guarding a
            # process-wide cache (filled by an earlier case) is not taken again: no point there.
            if self.same_path and self.dimension == "call":
                add("sweep", f"the collection point was not reached ({self.trigger.seen} points seen)")
            return
        if exc is None and self.baseline is not None and _shape(result) != self.baseline.shape:
            add("G3", f"the result is {_shape(result)!r}, not {self.baseline.shape!r} as without the collection")
        env.graphs.flush_deferred(5)
        env.errors.flush_deferred(5)
        if env.sim is not None:
            env.sim.drain()
        remaining = self._unreleased(proxy)
        if remaining and _capturing(env, proxy):
            self.postponed = remaining  # held back until a capture ends (G6): checked once it ended
        elif remaining:
            add("O6", "the collected garbage was not released: " + _keys(remaining, self.garbage))

    def _unreleased(self, proxy: FaultProxy) -> list[tuple[str, int]]:
        """The garbage still live and never released since it was made: a handle the driver gave
        again to something new (a real driver reuses a freed address at once) is not garbage."""
        live, released = proxy.live_objects(), proxy.released_objects()
        return [key for key in self.garbage if key in live and released.get(key, 0) <= self.released_before.get(key, 0)]

    def foreign(self) -> set[int]:
        return {handle for _kind, handle in self.garbage} | self.extra

    def accounting(self, changes: Any, add: Any) -> None:
        created, released = Counter(o.kind for o in changes.created), Counter(o.kind for o in changes.released)
        if self.dimension is None:
            self.recorded.created, self.recorded.released, self.recorded.ok = created, released, True
            return
        base = self.baseline
        if base is None or not base.ok or not self.same_path:
            return
        if created != base.created or released != base.released:
            add(
                "G1",
                f"the operation created {dict(created)} and released {dict(released)}; "
                f"without the collection {dict(base.created)} and {dict(base.released)}",
            )

    def after_teardown(self, env: Env, proxy: FaultProxy, add: Any) -> None:
        if self.postponed:
            env.graphs.flush_deferred(5)
            still = [key for key in self._unreleased(proxy) if key in self.postponed]
            if still:
                add(
                    "O6",
                    "the collected garbage was not released, even after the capture ended: "
                    + _keys(still, self.garbage),
                )

    def finish(self) -> None:
        if self._gc_was_enabled:
            gc.enable()


def _keys(keys: list[tuple[str, int]], names: dict[tuple[str, int], str]) -> str:
    return ", ".join(f"{kind} {handle:#x} ({names[kind, handle]})" for kind, handle in keys)


def _capturing(env: Env, proxy: FaultProxy) -> bool:
    """Whether a stream still alive is being captured (releases wait for it: G6)."""
    from cuda.bindings import driver as cb

    raw = env.errors.driver
    for kind, handle in list(proxy.live_objects()):
        if kind != "stream":
            continue
        err, status = raw.cuStreamIsCapturing(cb.CUstream(handle))
        if not err and int(status):
            return True
    return False


# --- the sweep --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hang:
    """A case that did not finish in time: where, and the stack of the thread that hung."""

    scenario: str
    context: str
    mode: str
    k: int
    point: str
    seconds: float
    stack: str

    def __str__(self) -> str:
        return (
            f"{self.scenario} [{self.context}] k={self.k} ({self.point}) {self.mode}: hang after {self.seconds:.0f} s"
        )


@dataclass
class GcScenarioResult:
    """What the sweep did for one operation: its points per dimension and context, cases, violations."""

    name: str
    layer: str
    points: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # dimension -> context -> points
    cases: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def point_count(self) -> int:
        return sum(len(p) for by_ctx in self.points.values() for p in by_ctx.values())


@dataclass
class GcSweepResult:
    """Everything the garbage-collection point sweep found."""

    driver: str
    scenarios: list[GcScenarioResult]
    seconds: float
    sampled: bool
    total_cases: int
    dimensions: tuple[str, ...]
    hangs: list[Hang] = field(default_factory=list)

    @property
    def violations(self) -> list[Violation]:
        return [v for s in self.scenarios for v in s.violations]

    @property
    def failed(self) -> bool:
        """Whether the run must fail: a violation or a hang."""
        return bool(self.violations or self.hangs)

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "seconds": round(self.seconds, 2),
            "sampled": self.sampled,
            "cases_available": self.total_cases,
            "dimensions": list(self.dimensions),
            "hangs": [asdict(h) for h in self.hangs],
            "scenarios": [
                {
                    "name": s.name,
                    "layer": s.layer,
                    "points": s.points,
                    "cases": s.cases,
                    "violations": [asdict(v) for v in s.violations],
                }
                for s in self.scenarios
            ],
        }


def _watched(fn: Callable[[], Any], timeout: float) -> tuple[Any, threading.Thread | None]:
    """Run ``fn`` in a worker thread; its value, or the thread still running after ``timeout`` seconds."""
    box: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as error:  # noqa: BLE001 - raised again in the sweep's thread
            failure.append(error)

    worker = threading.Thread(target=run, name="cuguard-gc-sweep-case", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return None, worker
    if failure:
        raise failure[0]
    return box[0], None


def _stack(thread: threading.Thread) -> str:
    """The hung thread's stack, then every other thread's (a hang is often a wait on another thread)."""
    frames = sys._current_frames()
    frame = frames.get(thread.ident or -1)
    text = "(the thread's stack could not be read)" if frame is None else "".join(traceback.format_stack(frame))
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, other in frames.items():
        if ident not in {thread.ident, threading.get_ident()}:
            text += f"\n    -- thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(other))
    return text


def _one(runtime: _Runtime, scn: Scenario, ctx_mode: str, hooks: _GcHooks) -> list[Violation]:
    try:
        outcome = _run_case(runtime, scn, ctx_mode, None, 0, [], hooks)
    finally:
        hooks.finish()
    hooks.calls = [c.name + (" (restore)" if c.restore else "") for c in outcome.calls]
    return outcome.violations


def _sample(cases: list[_CaseSpec], sample: int, seed: int) -> list[int]:
    """The indices (in order) of ``sample`` of ``cases``: one point of every operation and dimension first."""
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (name, _ctx, dimension, _k, _point) in enumerate(cases):
        groups.setdefault((name, dimension), []).append(i)
    first = [rng.choice(indices) for indices in groups.values()]
    if sample <= len(first):
        return sorted(rng.sample(first, sample))
    chosen = set(first)
    rest = [i for i in range(len(cases)) if i not in chosen]
    return sorted(first + rng.sample(rest, sample - len(first)))


def run_gc_sweep(
    *,
    driver: str = "sim",
    scenarios: list[Scenario] | None = None,
    dimensions: tuple[str, ...] = DIMENSIONS,
    contexts: tuple[str, ...] = CONTEXTS,
    sample: int | None = None,
    seed: int = 0,
    match: str | None = None,
    garbage: dict[str, GarbageMaker] | None = None,
    timeout: float = HANG_SECONDS,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> GcSweepResult:
    """Run the garbage-collection point sweep and return what it found.

    ``driver`` is ``"sim"`` (a fresh simulated driver per case) or ``"real"`` (the real driver
    through the fault proxy and its safety net). ``dimensions`` picks ``"call"`` and/or
    ``"lock"`` points. ``sample`` runs that many cases picked with
    ``seed`` (one point of every operation and dimension first); ``None`` runs every case.
    ``garbage`` replaces the prepared garbage (:func:`garbage_makers`). A case running longer
    than ``timeout`` seconds is a :class:`Hang`: the sweep stops at the first one (in each
    process). ``jobs`` above 1 runs the simulator's recording runs and cases in that many
    processes (registry operations and the default garbage only); the result is the same.
    """
    unknown = [d for d in dimensions if d not in DIMENSIONS]
    if unknown:
        raise ValueError(f"unknown dimension(s) {unknown}: the dimensions are {DIMENSIONS}")
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, not {jobs}")
    chosen = scenarios if scenarios is not None else registry.scenarios()
    if driver == "real":
        chosen = [s for s in chosen if s.real]
    if match:
        chosen = [s for s in chosen if match in s.name]
    start = time.perf_counter()
    spec = _Spec(driver, tuple(dimensions), contexts, timeout)
    results = {s.name: GcScenarioResult(s.name, s.layer) for s in chosen}
    parallel = jobs > 1 and driver == "sim" and scenarios is None and garbage is None and len(chosen) > 1
    # Phase 1: every operation's recording run, in each context situation.
    if parallel:
        shards = [[s.name for s in chosen[i::jobs]] for i in range(jobs)]
        recorded = [row for part in _pool(jobs, _record_shard, [(spec, shard) for shard in shards]) for row in part]
    else:
        recorded = _Worker(spec, garbage).record([s.name for s in chosen], {s.name: s for s in chosen})
    baselines: dict[tuple[str, str], _Baseline] = {}
    hangs: list[Hang] = []
    cases: list[_CaseSpec] = []
    for name, ctx_mode, base, found, points, hang in recorded:
        res = results[name]
        res.violations.extend(found)
        if hang is not None:
            hangs.append(hang)
            continue
        if base is None:
            continue
        baselines[name, ctx_mode] = base
        for dimension, where in points.items():
            res.points.setdefault(dimension, {})[ctx_mode] = where
            cases.extend((name, ctx_mode, dimension, k, p) for k, p in enumerate(where, 1))
    total = len(cases)
    if sample is not None and sample < total:
        cases = [cases[i] for i in _sample(cases, sample, seed)]
    # Phase 2: the cases (none once something hung: the hung thread holds locks).
    if not hangs and cases:
        if progress is not None:
            progress(f"{len(cases)} of {total} cases")
        if parallel:
            by_name: dict[str, list[tuple[_CaseSpec, _Baseline]]] = {}
            for case in cases:
                by_name.setdefault(case[0], []).append((case, baselines[case[0], case[1]]))
            shards_c: list[list[tuple[_CaseSpec, _Baseline]]] = [[] for _ in range(jobs)]
            for group in sorted(by_name.values(), key=len, reverse=True):
                min(shards_c, key=len).extend(group)
            parts = _pool(jobs, _case_shard, [(spec, shard) for shard in shards_c if shard])
            ran = [row for part in parts for row in part]
        else:
            worker = _Worker(spec, garbage, {s.name: s for s in chosen})
            ran = worker.cases([(case, baselines[case[0], case[1]]) for case in cases])
        for name, found, hang in ran:
            results[name].cases += 1
            results[name].violations.extend(found)
            if hang is not None:
                hangs.append(hang)
    return GcSweepResult(
        driver,
        list(results.values()),
        time.perf_counter() - start,
        len(cases) < total or bool(hangs),
        total,
        tuple(dimensions),
        hangs,
    )


# --- workers (this process, or one per CPU core on the simulator) ------------------------------

#: A case: operation name, context situation, dimension, point index (1-based), point.
_CaseSpec = tuple[str, str, str, int, str]
#: What a recording run gives: name, context, baseline (None if it failed), violations, points, hang.
_Recorded = tuple[str, str, "_Baseline | None", list[Violation], dict[str, list[str]], "Hang | None"]

_Watched = tuple[list[Violation], "Hang | None"]
#: What a case gives: the operation's name, the violations, the hang.
_Ran = tuple[str, list[Violation], "Hang | None"]


@dataclass(frozen=True)
class _Spec:
    driver: str
    dimensions: tuple[str, ...]
    contexts: tuple[str, ...]
    timeout: float


class _Worker:
    """Runs recording runs and cases under the watchdog; stops at the first hang."""

    def __init__(
        self, spec: _Spec, garbage: dict[str, GarbageMaker] | None, by_name: dict[str, Scenario] | None = None
    ) -> None:
        self.spec = spec
        self.makers = garbage_makers() if garbage is None else dict(garbage)
        self.by_name = by_name if by_name is not None else {s.name: s for s in registry.scenarios()}
        self.hung = False

    def _watch(
        self, runtime: _Runtime, scn: Scenario, ctx_mode: str, hooks: _GcHooks
    ) -> tuple[list[Violation], Hang | None]:
        timeout = self.spec.timeout
        violations, thread = _watched(lambda: _one(runtime, scn, ctx_mode, hooks), timeout)
        if thread is None:
            assert isinstance(violations, list)
            return violations, None
        self.hung = True
        mode, k, point = hooks.label or ("recording", 0, "")
        hang = Hang(scn.name, ctx_mode, mode, k, point, timeout, _stack(thread))
        detail = f"hang: the case did not end within {timeout:.0f} s; the thread's stack:\n{hang.stack}"
        return [Violation(scn.name, scn.layer, ctx_mode, mode, k, point, "S2", detail)], hang

    def record(self, names: list[str], by_name: dict[str, Scenario] | None = None) -> list[_Recorded]:
        if by_name is not None:
            self.by_name = by_name
        out: list[_Recorded] = []
        gc_was_enabled = gc.isenabled()
        try:
            with _Runtime(self.spec.driver) as runtime:
                for name in names:
                    scn = self.by_name[name]
                    for ctx_mode in self.spec.contexts:
                        if self.hung:
                            return out
                        out.append(self._record_one(runtime, scn, ctx_mode))
        finally:
            if gc_was_enabled:
                gc.enable()
        return out

    def _record_one(self, runtime: _Runtime, scn: Scenario, ctx_mode: str) -> _Recorded:
        hooks = _GcHooks(self.makers, None, 0, "", None)
        found, hang = self._watch(runtime, scn, ctx_mode, hooks)
        if found and hang is None and CAPTURE in self.makers:
            # The operation cannot run beside a capture in progress (a context synchronization):
            # its cases go without that garbage.
            without = {name: make for name, make in self.makers.items() if name != CAPTURE}
            hooks = _GcHooks(without, None, 0, "", None)
            found, hang = self._watch(runtime, scn, ctx_mode, hooks)
        if found or hang is not None:
            return (scn.name, ctx_mode, None, found, {}, hang)
        base = hooks.recorded
        points = {d: (hooks.calls if d == "call" else base.locks) for d in self.spec.dimensions}
        return (scn.name, ctx_mode, base, [], points, None)

    def cases(self, cases: list[tuple[_CaseSpec, _Baseline]]) -> list[_Ran]:
        out: list[_Ran] = []
        gc_was_enabled = gc.isenabled()
        try:
            with _Runtime(self.spec.driver) as runtime:
                for (name, ctx_mode, dimension, k, point), base in cases:
                    if self.hung:
                        break
                    makers = {g: self.makers[g] for g in base.garbage if g in self.makers}
                    hooks = _GcHooks(makers, dimension, k, point, base)
                    found, hang = self._watch(runtime, self.by_name[name], ctx_mode, hooks)
                    out.append((name, found, hang))
        finally:
            if gc_was_enabled:
                gc.enable()
        return out


def _pool(jobs: int, fn: Callable[[Any], Any], work: list[Any]) -> list[Any]:
    """``fn`` over ``work`` in ``jobs`` spawned processes (the simulator and cuguard run threads)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(min(jobs, len(work))) as pool:
        return pool.map(fn, work, chunksize=1)


def _record_shard(args: tuple[_Spec, list[str]]) -> list[_Recorded]:
    spec, names = args
    return _Worker(spec, None).record(names)


def _case_shard(
    args: tuple[_Spec, list[tuple[_CaseSpec, _Baseline]]],
) -> list[tuple[str, list[Violation], Hang | None]]:
    spec, cases = args
    return _Worker(spec, None).cases(cases)
