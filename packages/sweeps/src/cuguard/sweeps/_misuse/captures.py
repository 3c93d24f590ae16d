"""Captures in progress and the second thread: what the misuse sweep varies beside the calls (B6, G6, W5).

The state of an example includes stream captures in progress, in each mode
(``"global"``, ``"thread_local"``, ``"relaxed"``), on streams of the objects'
contexts (cuguard's own streams, and foreign raw streams wrapped with
``as_stream`` or ``Stream.wrap``), begun by the main thread or by the example's
second thread (:class:`~cuguard.sweeps._misuse.threads.SecondThread`). The
``capture`` step begins, ends (and completes) or abandons (closes, or drops and
collects) such captures; every other step runs while they go on, and the
``second_thread`` step has the second thread act on the shared objects.

What CUDA itself refuses during a capture is the user's business, not a
violation: an operation's own requested work (an allocation, a synchronous
copy, a synchronization, a query, work queued on a capturing stream, the
destruction of a capturing stream) may be refused with
``CUDA_ERROR_STREAM_CAPTURE_*`` and invalidate the capture, as CUDA's rules
say. What cuguard does on its own behalf must not (G6), and the checks after
every call (:class:`CaptureWatch`) report it:

- **G6** a capture still in progress was invalidated by a driver call that is
  not the operation's own requested work (bookkeeping, set-up, a collection, a
  deferred release, a free), or by any call on a thread of cuguard's own; an
  operation failed with a capture status from such a call; a release was
  queued into a capture (``cuMemFreeAsync`` on a capturing stream); a
  ``CUDAWarning`` names a capture status;
- **W5** memory that work captured into a graph uses was freed while that graph
  (a capture in progress, or the graph a capture made) still exists.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cuguard.errors import CUDAError
from cuguard.errors.lowlevel import DRIVER_FACTS, calls_where
from cuguard.sweeps._misuse.choices import coin, pick

if TYPE_CHECKING:
    from cuguard.sweeps._misuse.session import Outcome, Session

__all__ = [
    "CAPTURE_STATUSES",
    "MODES",
    "CaptureRecord",
    "CaptureWatch",
    "capture",
    "legitimate",
    "observe",
    "second_thread",
]

MODES = ("global", "thread_local", "relaxed")
#: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ... CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (CAPTURED_EVENT included).
CAPTURE_STATUSES = frozenset(range(900, 909))
_STATUS_NAMES = (
    "STREAM_CAPTURE_UNSUPPORTED",
    "STREAM_CAPTURE_INVALIDATED",
    "STREAM_CAPTURE_MERGE",
    "STREAM_CAPTURE_UNMATCHED",
    "STREAM_CAPTURE_UNJOINED",
    "STREAM_CAPTURE_ISOLATION",
    "STREAM_CAPTURE_IMPLICIT",
    "CAPTURED_EVENT",
    "STREAM_CAPTURE_WRONG_THREAD",
)

#: Work queued on a stream the user gave: on a capturing stream CUDA captures it or refuses it (its rules).
QUEUED = calls_where(queues=True)
#: Waiting and asking: refused on a capturing stream, and during captures of the context (cuCtxSynchronize).
SYNCS = calls_where(waits=True)
#: Potentially unsafe calls a thread's capture mode may prohibit: allocations and synchronous copies and sets.
UNSAFE = frozenset(
    name
    for name in calls_where(capture_unsafe=True)
    if DRIVER_FACTS[name].transfers or DRIVER_FACTS[name].creates in {"device_memory", "host_memory"}
)
#: Destroying a stream (or context) that takes part in a capture ends or invalidates it: the user's call.
DESTROYS = calls_where(releases="stream") | calls_where(releases="context")

#: Operations whose requested work is to wait for or ask about streams, events or contexts.
SYNC_OPS = frozenset(
    {
        "resources.Stream.sync",
        "resources.Stream.query",
        "resources.Stream.wait",
        "resources.Event.sync",
        "resources.Event.query",
        "resources.Event.elapsed_since",
        "resources.Device.sync",
        "context.Context.synchronize",
        "resources.wait_attributed",
        "errors.attribute_faults",  # attribution waits for a launch (but never for a captured one: checked)
        # without a stream it synchronizes the producer's stream (documented)
        "resources.Buffer.from_cuda_array_interface",
    }
)
#: Operations whose requested work allocates, copies or sets memory (they may also wait for the copy).
MEMORY_OPS = frozenset(
    {
        "resources.Device.allocate",
        "resources.Device.allocate_pinned",
        "resources.Buffer.copy_from",
        "resources.Buffer.copy_to",
        "resources.PinnedBuffer.copy_from",
        "resources.PinnedBuffer.copy_to",
        "resources.Device.memory_resource",  # Device.allocate through the resource set
        "resources.Buffer.fill",
        "resources.Buffer.from_dlpack",
        "resources.PinnedBuffer.numpy",
        "resources.VirtualMemoryResource.modify_allocation",
        "resources.ManagedMemoryResource.prefetch",
        *(
            f"resources.{cls}.allocate"
            for cls in ("DeviceMemoryResource", "PinnedMemoryResource", "ManagedMemoryResource")
        ),
        *(f"resources.{cls}.allocate" for cls in ("VirtualMemoryResource", "LegacyPinnedMemoryResource")),
    }
)
#: Operations whose requested work instantiates a graph: cuGraphInstantiate is a potentially unsafe
#: call (an H200 refuses it under a capture that prohibits the thread's unsafe calls).
INSTANTIATE_OPS = frozenset({"graphs.GraphDefinition.instantiate", "graphs.GraphBuilder.complete"})
INSTANTIATES = frozenset({"cuGraphInstantiate", "cuGraphInstantiateWithFlags"})
#: Operations that destroy a stream or context on request.
DESTROY_OPS = frozenset(
    {
        "resources.Stream.close",
        "resources.Stream.__exit__",
        "graphs.GraphBuilder.close",
        "graphs.GraphBuilder.__exit__",
        "context.Context.close",
    }
)


def legitimate(op: str) -> frozenset[str]:
    """The driver calls that are ``op``'s own requested work: CUDA may refuse them during a capture (not G6)."""
    calls = set(QUEUED)
    base = op.split("[", 1)[0]
    if base in SYNC_OPS:
        calls |= SYNCS
    if base in MEMORY_OPS:
        calls |= UNSAFE | SYNCS
    if base in INSTANTIATE_OPS:
        calls |= INSTANTIATES
    if base in DESTROY_OPS:
        calls |= DESTROYS
        if base.startswith("context.Context."):
            calls |= SYNCS  # destroying a context waits for its work first
    return frozenset(calls)


@dataclass(eq=False)
class CaptureRecord:
    """A capture the ``capture`` step began: its builder (weakly), mode, stream kind and thread."""

    builder: weakref.ref[Any]
    label: str
    mode: str
    where: str  # "own" or "foreign"
    thread: str  # "main" or "second"
    driver: int
    handle: int  # the captured stream's handle


@dataclass(eq=False)
class _Invalidation:
    sim: Any
    capture: Any
    call: str
    thread: str


_SWEEP_THREADS = frozenset({"MainThread", "cuguard-misuse", "cuguard-misuse-second"})


def _unseen(cap: Any) -> bool:
    """Whether no open cuguard ``Stream`` refers to the stream ``cap`` began on any more.

    cuguard asks the streams it holds whether someone else captures on them;
    a capture another library runs on a stream whose every cuguard wrapper is
    gone cannot be known, and a release needing ``cuCtxSynchronize`` then is
    refused, leaked and reported (W5), as documented: not a G6 violation.
    """
    from cuguard.resources import Stream as stream_type

    origin = getattr(cap, "origin", None)
    handle = getattr(origin, "handle", None)
    if handle is None:
        return False
    for obj in gc.get_objects():
        if type(obj) is stream_type and not obj._closed:
            try:
                if int(obj._handle) == handle:
                    return False
            except (TypeError, ValueError):
                continue
    return True


def _invalidating_call(sim: Any) -> str:
    """The driver function being run when the simulator invalidates a capture (from the call stack)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_name
        if name == "_refuse_unsafe":
            return str(frame.f_locals.get("name", "?"))
        if name == "_legacy_stream_used":
            return str(frame.f_locals.get("call", "?"))
        if name.startswith("cu") and frame.f_locals.get("self") is sim:
            return name
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


@dataclass(eq=False)
class CaptureWatch:
    """Watches the simulators' captures for the checks of G6 and W5 (see the module docstring)."""

    invalidations: list[_Invalidation] = field(default_factory=list)
    queued_frees: list[tuple[Any, Any, str]] = field(default_factory=list)  # (sim, capture, thread)
    graph_refs: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    flagged: set[tuple[int, int, int]] = field(default_factory=set)

    def install(self, sim: Any) -> None:
        """Hook ``sim``'s capture invalidation and its ``cuMemFreeAsync`` (the sweep's own simulator)."""
        from cuguard.testing.lowlevel import handle_value as h

        invalidate = sim._invalidate
        invalidations = self.invalidations

        def watched_invalidate(cap: Any) -> None:
            if not cap.invalidated:
                thread = threading.current_thread().name
                invalidations.append(_Invalidation(sim, cap, _invalidating_call(sim), thread))
            invalidate(cap)

        free_async = sim.cuMemFreeAsync
        queued = self.queued_frees

        def watched_free_async(dptr: Any, hStream: Any) -> Any:
            try:
                st = sim._streams.get(h(hStream))
            except Exception:  # noqa: BLE001 - a malformed handle: the driver answers it
                st = None
            cap = None if st is None or st.destroyed else st.capture
            if cap is not None and not cap.invalidated:
                queued.append((sim, cap, threading.current_thread().name))
            return free_async(dptr, hStream)

        sim._invalidate = watched_invalidate
        sim.cuMemFreeAsync = watched_free_async

    def mark(self) -> tuple[int, int]:
        return len(self.invalidations), len(self.queued_frees)

    def problems(
        self, op: str, mark: tuple[int, int], exc: BaseException | None, fault_active: bool
    ) -> list[tuple[str, str]]:
        """G6 for one performed call: invalidations, failures and queued frees that are not the user's."""
        out: list[tuple[str, str]] = []
        allowed = legitimate(op)
        for event in self.invalidations[mark[0] :]:
            cap = event.capture
            if cap.id not in event.sim._open_captures:
                continue  # ended or abandoned in the same call: nothing is left to break
            own_thread = event.thread not in _SWEEP_THREADS
            if event.call in allowed and not own_thread:
                continue
            if event.call == "cuCtxSynchronize" and _unseen(cap):
                continue  # a capture on a stream cuguard no longer holds: it cannot be known (W5 applies)
            where = f"on cuguard's thread {event.thread}" if own_thread else "by cuguard on its own behalf"
            out.append(
                (
                    "G6",
                    f"{event.call} invalidated a capture in progress ({_mode(cap)} mode) {where}: "
                    f"it is not {op}'s requested work",
                )
            )
        for _sim, cap, thread in self.queued_frees[mark[1] :]:
            out.append(
                ("G6", f"a free was queued into a capture in progress ({_mode(cap)} mode, cuMemFreeAsync on {thread})")
            )
        if (
            isinstance(exc, CUDAError)
            and not fault_active
            and exc.code in CAPTURE_STATUSES
            and exc.call
            and exc.call not in allowed
        ):
            out.append(
                ("G6", f"failed because of a capture in a call on cuguard's own behalf: {exc.name} from {exc.call}")
            )
        return out

    def warning_problems(self, messages: list[str], mark: tuple[int, int]) -> list[tuple[str, str]]:
        """G6: a report (``CUDAWarning``) of a failure a capture caused (a free queued into it included)."""
        queued = len(self.queued_frees) > mark[1]
        recent = self.invalidations[mark[0] :]
        unknowable = bool(recent) and all(e.call == "cuCtxSynchronize" and _unseen(e.capture) for e in recent)
        return [
            ("G6", f"a CUDAWarning reports a failure because of a capture: {text[:200]}")
            for text in messages
            if (any(name in text for name in _STATUS_NAMES) and not (unknowable and "cuCtxSynchronize" in text))
            or (queued and "cuMemFreeAsync" in text)
        ]

    def freed_under_graphs(self, sim: Any) -> list[str]:
        """W5: memory freed while a graph made by capture (or a capture in progress) still uses it."""
        from cuguard.testing.lowlevel import DEVICE_BASE

        out: list[str] = []
        invalid = {id(cap.graph) for cap in sim._open_captures.values() if cap.invalidated}
        alive: set[tuple[int, int]] = set()
        for graph in list(sim._graphs.values()):
            if graph.destroyed or graph.call != "cuStreamEndCapture" or id(graph) in invalid:
                continue
            key = (id(sim), graph.handle)
            alive.add(key)
            steps = [(n.type, n.spec) for n in graph.nodes.values() if not n.destroyed]
            refs = self.graph_refs.setdefault(key, set())
            refs.update(sim._step_refs(steps))
            for base in list(refs):
                alloc = sim._dev_find(base) if base >= DEVICE_BASE else sim._host_allocs.get(base)
                if alloc is not None and alloc.base == base and not alloc.freed:
                    continue
                refs.discard(base)
                flag = (id(sim), graph.handle, base)
                if flag not in self.flagged:
                    self.flagged.add(flag)
                    out.append(f"memory {base:#x} was freed while the graph {graph.handle:#x} captured work using it")
        for key in [k for k in self.graph_refs if k[0] == id(sim) and k not in alive]:
            del self.graph_refs[key]
        return out


def _mode(cap: Any) -> str:
    return {0: "global", 1: "thread_local", 2: "relaxed"}.get(int(cap.mode), str(cap.mode))


# --- running on either thread --------------------------------------------------------------------------


def on_thread(s: Session, thread: str, fn: Callable[[], Outcome]) -> Outcome | None:
    """Run ``fn`` (a performed call) on the main thread or the second thread; ``None`` after a hang."""
    if thread == "main":
        return fn()
    ok, value = s.second.run(fn, s.step_timeout * 0.8)
    if ok:
        return value  # type: ignore[no-any-return]
    from cuguard.sweeps._misuse.threads import Hang

    if isinstance(value, Hang):
        s.hang("second thread", str(value))
        return None
    raise value


def _perform_on(s: Session, thread: str, op: str, desc: str, fn: Callable[[], Any], **kw: Any) -> Outcome | None:
    return on_thread(s, thread, lambda: s.perform(op, desc, fn, **kw))


# --- the capture step -------------------------------------------------------------------------------


def _live(s: Session) -> list[CaptureRecord]:
    out = []
    for record in s.captures:
        builder = record.builder()
        if builder is not None and not builder._closed and record.driver == s.model.current:
            out.append(record)
    s.captures = [r for r in s.captures if r.builder() is not None]
    return out


def _building(record: CaptureRecord) -> bool:
    builder = record.builder()
    return builder is not None and bool(builder._building)


def capture(s: Session) -> None:
    """Begin a capture (any mode, own or foreign stream, either thread), or end, complete or abandon one."""
    live = [r for r in _live(s) if _building(r)]
    action = "begin" if not live or coin(s.ch, 45) else pick(s.ch, ("end", "end", "complete", "abandon", "abandon"))
    if action == "begin":
        begin(s, pick(s.ch, ("main", "second")))
    elif action == "abandon":
        abandon(s, pick(s.ch, live))
    else:
        end(s, pick(s.ch, live), complete=action == "complete")


def _capture_stream(s: Session, thread: str, where: str) -> tuple[Any, str] | None:
    """A stream to capture on: one of the pool's own streams (or a new one), or a wrapped foreign stream."""
    R = s.L.resources
    current = s.model.current
    if where == "own":
        streams = [
            e
            for e in s.model.pool
            if e.kind == "Stream" and e.driver == current and s.model.unusable(e.obj) is None and e.obj._owned
        ]
        idle = [e for e in streams if not _capturing(s, int(e.obj._handle))]
        if idle and coin(s.ch, 50):
            entry = pick(s.ch, idle if coin(s.ch, 85) else streams)
            return entry.obj, entry.label
        devices = [e for e in s.model.pool if e.kind == "Device" and e.driver == current]
        if not devices:
            return None
        dev = pick(s.ch, devices)
        non_blocking = coin(s.ch, 50)
        outcome = _perform_on(
            s,
            thread,
            "resources.Device.create_stream",
            f"{dev.label}.create_stream(non_blocking={non_blocking})",
            lambda: dev.obj.create_stream(non_blocking=non_blocking),
        )
    else:
        foreign = [e for e in s.model.pool if e.kind == "ForeignStream" and e.driver == current]
        if not foreign:
            return None
        idle = [e for e in foreign if not _capturing(s, e.obj.raw_handle)]
        fs = pick(s.ch, idle if idle and coin(s.ch, 85) else foreign)
        if coin(s.ch, 60):
            outcome = _perform_on(
                s, thread, "resources.as_stream", f"as_stream({fs.label})", lambda: R.as_stream(fs.obj)
            )
        else:
            contexts = [
                e
                for e in s.model.pool
                if e.kind == "Context" and e.driver == current and int(e.obj._int) == _context_of(s, fs.obj)
            ]
            if not contexts:
                return None
            ctx = pick(s.ch, contexts)
            outcome = _perform_on(
                s,
                thread,
                "resources.Stream.wrap",
                f"Stream.wrap({fs.label}, {ctx.label})",
                lambda: R.Stream.wrap(fs.obj, ctx.obj),
            )
    if outcome is None or outcome.exc is not None or outcome.result is None:
        return None
    s.pool_result(outcome.result)
    made = s.model.find(outcome.result)
    return outcome.result, made.label if made is not None else "stream"


def _capturing(s: Session, handle: int) -> bool:
    """Whether the stream ``handle`` takes part in a capture now (asked from the simulator; unknown: no)."""
    sim = s.slot.sim
    if sim is None:
        return False
    st = sim._streams.get(handle)
    return st is not None and st.capture is not None


def _context_of(s: Session, fs: Any) -> int:
    sim = s.slot.sim
    if sim is None:
        return -1
    st = sim._streams.get(int(fs.raw_handle))
    return -1 if st is None or st.ctx is None else int(st.ctx.handle)


def begin(s: Session, thread: str) -> None:
    """A builder on a stream of the pool's contexts (own or foreign) begins a capture on ``thread``."""
    G = s.L.graphs
    where = pick(s.ch, ("own", "foreign"))
    mode = pick(s.ch, MODES)
    found = _capture_stream(s, thread, where)
    if found is None:
        return
    stream, label = found
    outcome = _perform_on(
        s,
        thread,
        "graphs.GraphBuilder()",
        f"GraphBuilder({label}, mode={mode!r})",
        lambda: G.GraphBuilder(stream, mode=mode),
    )
    if outcome is None or outcome.exc is not None:
        return
    builder = outcome.result
    s.pool_result(builder)
    entry = s.model.find(builder)
    blabel = entry.label if entry is not None else "builder"
    outcome = _perform_on(
        s, thread, "graphs.GraphBuilder.begin_building", f"{blabel}.begin_building()", builder.begin_building
    )
    if outcome is None or outcome.exc is not None:
        return
    handle = int(stream._handle)
    s.captures.append(CaptureRecord(weakref.ref(builder), blabel, mode, where, thread, s.model.current, handle))
    s.exercised[f"began {mode}/{where}/{thread}"] += 1


def end(s: Session, record: CaptureRecord, *, complete: bool) -> None:
    """End a capture on the thread that began it (now and then on the other one: CUDA's WRONG_THREAD)."""
    builder = record.builder()
    if builder is None:
        return
    thread = record.thread if coin(s.ch, 85) else ("second" if record.thread == "main" else "main")
    outcome = _perform_on(
        s, thread, "graphs.GraphBuilder.end_building", f"{record.label}.end_building()", builder.end_building
    )
    if outcome is None or outcome.exc is not None:
        return
    s.exercised[f"ended {record.mode}/{record.where}/{record.thread}"] += 1
    if complete:
        outcome = _perform_on(s, thread, "graphs.GraphBuilder.complete", f"{record.label}.complete()", builder.complete)
        if outcome is not None and outcome.exc is None:
            s.pool_result(outcome.result)


def abandon(s: Session, record: CaptureRecord) -> None:
    """Close a capturing builder, or drop it and collect it (on either thread)."""
    builder = record.builder()
    if builder is None:
        return
    thread = pick(s.ch, ("main", "second"))
    if coin(s.ch, 50):
        _perform_on(s, thread, "graphs.GraphBuilder.close", f"{record.label}.close()", builder.close)
    else:
        entry = s.model.find(builder)
        pool = s.model.pool
        collect_now = coin(s.ch, 70)

        def drop() -> None:
            if entry is not None and entry in pool:
                pool.remove(entry)
            if collect_now:
                gc.collect()

        del builder
        _perform_on(s, thread, "del", f"del {record.label}" + ("; gc.collect()" if collect_now else ""), drop)
    s.exercised[f"abandoned {record.mode}/{record.where}/{record.thread}"] += 1


# --- the second thread's step --------------------------------------------------------------------------


def second_thread(s: Session) -> None:
    """The second thread acts on the shared objects: calls, closes, collections, launches, captures."""
    from cuguard.sweeps._misuse import steps

    action = pick(s.ch, ("call", "call", "call", "launch", "close", "collect", "drop", "capture"))
    s.exercised[f"second thread: {action}"] += 1
    if action == "capture":
        live = [r for r in _live(s) if _building(r) and r.thread == "second"]
        if live and coin(s.ch, 50):
            record = pick(s.ch, live)
            if coin(s.ch, 70):
                end(s, record, complete=coin(s.ch, 50))
            else:
                abandon(s, record)
        else:
            begin(s, "second")
        return
    if action == "collect":
        _perform_on(s, "second", "gc.collect", "gc.collect()", gc.collect, warn_rule="O6")
        return
    if action == "drop":
        steps.drop(s, runner=lambda fn: on_thread(s, "second", fn))
        return
    if action == "close":
        go = steps.close_call(s)
    elif action == "launch":
        ops = [
            s.by_name[name]
            for name in ("resources.launch", "graphs.GraphBuilder.launch", "graphs.Graph.launch")
            if name in s.by_name
        ]
        go = s.prepare(pick(s.ch, ops))
    else:
        go = s.prepare()
    if go is not None:
        on_thread(s, "second", go)


def end_foreign_captures(s: Session) -> int:
    """As the other library would: end the captures still going on its raw streams; return how many.

    cuguard cannot end a capture on a foreign stream whose wrapper was closed (the
    stream is not its own); releases that wait for such a capture to end (G6) are
    carried out once it has. Harness-side, through the raw driver.
    """
    slot = s.slot
    sim = slot.sim
    if sim is None:
        return 0
    ended = 0
    for handle in slot.raw_streams:
        st = sim._streams.get(handle)
        if st is None or st.destroyed or st.capture is None or st.capture.origin is not st:
            continue
        err, graph = slot.raw.cuStreamEndCapture(handle)
        if not err and graph is not None:
            slot.raw.cuGraphDestroy(graph)
        s.note(f"# another library ends the capture on its stream {handle:#x}")
        ended += 1
    return ended


def observe(s: Session) -> None:
    """Count the captures in progress after a step, by mode, stream kind and thread (what a run exercised)."""
    for record in _live(s):
        builder = record.builder()
        if builder is None or not builder._building:
            continue
        sim = s.slots[record.driver].sim
        if sim is not None:
            st = sim._streams.get(record.handle)
            if st is None or st.capture is None or st.capture.invalidated:
                continue
        s.exercised[f"in progress {record.mode}/{record.where}/{record.thread}"] += 1


def exercised_keys() -> list[str]:
    """Every combination a run should reach: each mode, own and foreign streams, both threads."""
    return [f"in progress {m}/{w}/{t}" for m in MODES for w in ("own", "foreign") for t in ("main", "second")]
