"""The race checker (contract B7): happens-before over streams, events and the host, for memory operations.

Off by default and free when off: every hot path reads :data:`ON` once and
calls into this module only when it is true. It is turned on for a whole
program with ``CUGUARD_RACECHECK=1`` (read when the first :class:`Device` is
made, the first driver use of this layer), for a block with :func:`racecheck`,
and for a test run with the pytest plugin's ``--cuguard-racecheck``.

The model is exact happens-before with vector clocks:

- Timelines: every stream (by handle; the legacy default stream once per
  context, the per-thread default stream once per context and thread) and the
  host. Host threads share one timeline: cuguard cannot see how Python threads
  synchronize with each other, so it orders them rather than report races it
  cannot prove.
- Work queued on a stream is ordered after what the host knew when queuing it
  (the host's clock joins the stream's), after earlier work on that stream,
  after the events it waited for (:meth:`Stream.wait`), and, on the legacy
  default stream, after the work of the context's blocking streams (and the
  other way round).
- The host learns of a stream's work by synchronizing it (``Stream.sync``,
  ``Event.sync``, a ``query`` that answers done, ``Device.sync``, and the
  synchronous copies to host memory).
- A host function (:meth:`Stream.launch_host_func`) runs as a step of its
  stream: host accesses made inside it (a NumPy view of pinned memory) are
  ordered like work on that stream.
- A graph launch is one operation on its stream: it reads the memory every
  node only reads (a copy node's source, kernel arguments named
  ``read_only``) and writes the rest of what its nodes use (the write marks of
  its owner table, :class:`~cuguard.resources._captures.OwnerTable`); races
  between nodes of one graph are not checked (CUDA orders them by the graph's
  edges).

Accesses are byte ranges of cuguard memory: copies, fills, kernel launches
(a buffer argument reads and writes its whole buffer unless ``read_only=``
names it, a read-only typed view only reads), stream-ordered allocation and
free (both count as writes on their stream), and host accesses: synchronous
copies, NumPy views and DLPack exports of pinned memory (a view counts as a
write when it is made). A synchronous free (``cuMemFree``, ``cuMemFreeHost``)
waits for the device's work and is not checked. Work queued into a capture that
cuguard runs (``GraphBuilder``) is not run then and is not an access.

Two accesses to overlapping bytes, at least one a write, that no edge orders
are a race: it is reported once per pair of operations as a :class:`RaceWarning`
naming both operations (the call, the stream, the memory, the byte range and
the source line that queued each).
"""

from __future__ import annotations

import os
import sys
import threading
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from cuguard.context.lowlevel import on_synchronized
from cuguard.errors import CUDAWarning, report_warning
from cuguard.errors.lowlevel import deferring_lock, on_driver_change
from cuguard.resources import _captures

__all__ = ["ON", "RaceWarning", "racecheck", "racecheck_enabled"]

#: The environment variable that turns the checker on for the whole program.
RACECHECK_VARIABLE = "CUGUARD_RACECHECK"

#: Whether the checker is on: the one flag the hot paths read.
ON = False
# CUGUARD_RACECHECK not read yet (it is read when the first Device is made).
PENDING = True


class RaceWarning(CUDAWarning):
    """Two operations touch overlapping memory with no ordering between them, and one writes (B7).

    Issued by the race checker (:func:`racecheck`, ``CUGUARD_RACECHECK=1``,
    ``--cuguard-racecheck``) once per pair of operations, when the second one
    is queued. The message names both operations: the call, the stream (or
    the host), the memory, the byte range and the source line that queued
    each. A subclass of :class:`~cuguard.errors.CUDAWarning`, so the filters
    that escalate those (the pytest plugin's) escalate races too. It is not
    issued for memory cuguard does not see (raw addresses passed as integers,
    memory of other libraries used through their own APIs) or for orderings
    cuguard cannot see (another library's synchronization, Python-level
    synchronization between host threads).
    """


_lock = deferring_lock(reentrant=True)
_serials = iter(range(1, 1 << 62))


class _Timeline:
    __slots__ = ("blocking", "clock", "context", "label", "serial")

    def __init__(self, label: str, context: int, blocking: bool) -> None:
        self.serial = next(_serials)
        self.label = label
        self.context = context
        self.blocking = blocking
        self.clock: dict[int, int] = {self.serial: 0}


class _Op:
    __slots__ = ("call", "label", "serial", "source")

    def __init__(self, call: str, label: str, source: str) -> None:
        self.serial = next(_serials)
        self.call = call
        self.label = label
        self.source = source


class _Access:
    __slots__ = ("clock", "end", "op", "start", "timeline", "write")

    def __init__(self, start: int, end: int, *, write: bool, timeline: int, clock: int, op: _Op) -> None:
        self.start = start
        self.end = end
        self.write = write
        self.timeline = timeline
        self.clock = clock
        self.op = op


class _Region:
    __slots__ = ("accesses", "base", "label", "size")

    def __init__(self, base: int, size: int, label: str) -> None:
        self.base = base
        self.size = size
        self.label = label
        self.accesses: list[_Access] = []


# --- the model's state (reset when the checker is turned off or the driver changes) ----

_host = _Timeline("the host", 0, False)
_streams: dict[Any, _Timeline] = {}
_events: dict[int, dict[int, int]] = {}
_regions: dict[tuple[str, int], _Region] = {}
_bases: dict[str, list[int]] = {"device": [], "host": []}
_largest: dict[str, int] = {"device": 0, "host": 0}
_reported: set[tuple[int, int]] = set()
_local = threading.local()  # .inside: (timeline serial, clock, vector clock) while a host function runs


def _reset() -> None:
    global _host
    with _lock:
        _host = _Timeline("the host", 0, False)
        _streams.clear()
        _events.clear()
        _regions.clear()
        for bases in _bases.values():
            bases.clear()
        for space in _largest:
            _largest[space] = 0
        _reported.clear()


def _driver_changed(_token: object) -> None:
    _reset()  # handles and addresses of another driver mean other things


on_driver_change(_driver_changed)


# Hot modules that keep the flag as a global of their own (follow()).
_followers: list[Callable[[bool], None]] = []


def follow(listener: Callable[[bool], None]) -> None:
    """Call ``listener(ON)`` now and whenever the checker is turned on or off.

    For the hot modules, which keep the flag as a global of their own (a C flag in the compiled
    build) instead of reading ``_race.ON`` on every operation.
    """
    with _lock:  # no switch of the flag between the first call and the registration
        _followers.append(listener)
        listener(ON)


def _set(on: bool) -> None:
    global ON
    with _lock:  # the flag and its copies change together: two threads switching it leave them agreeing
        if on != ON:
            _reset()
        ON = on
        for listener in _followers:
            listener(on)


def read_environment() -> None:
    """Read ``CUGUARD_RACECHECK`` once: any value but empty, ``0``, ``false``, ``no`` or ``off`` turns it on."""
    global PENDING
    if PENDING:
        PENDING = False
        value = os.environ.get(RACECHECK_VARIABLE, "").strip().lower()
        if value not in ("", "0", "false", "no", "off"):
            _set(True)


def racecheck_enabled() -> bool:
    """Whether the race checker is on now (``CUGUARD_RACECHECK`` counts once a :class:`Device` was made)."""
    return ON


@contextmanager
def racecheck(enabled: bool = True) -> Iterator[None]:
    """Turn the race checker on (or off, with ``enabled=False``) for the ``with`` block.

    What the checker knew is forgotten whenever it is turned on or off, so work
    queued before the block is not seen inside it: start the block before the
    work to check. The previous state is restored when the block ends, also
    when it raises. Blocks nest. Races are reported as :class:`RaceWarning`;
    nothing is raised by the checker itself (a warning filter may escalate the
    warning to an error, raised by the operation that completed the race,
    after that operation was queued). Process-wide: turn it on and off while
    no other thread queues work. ``TypeError`` for an ``enabled`` that is not a bool.
    """
    if type(enabled) is not bool:
        from cuguard.errors.lowlevel import wrong_kind

        raise wrong_kind("enabled", "a bool", enabled)
    global PENDING
    PENDING = False  # an explicit choice: the environment no longer decides
    previous = ON
    _set(enabled)
    try:
        yield
    finally:
        _set(previous)


# --- where an operation came from ----------------------------------------------------------

_INTERNAL = ("cuguard.errors", "cuguard.context", "cuguard.resources", "cuguard.graphs", "contextlib")


def _source() -> str:
    """``file:line`` of the first caller outside cuguard's layers."""
    frame: Any = sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(_INTERNAL):
        frame = frame.f_back
    if frame is None:
        return "an unknown place"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


# --- timelines ---------------------------------------------------------------------------


def _per_thread_default() -> bool:
    return os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")


def _timeline(stream: Any) -> _Timeline:
    handle = int(stream._handle)
    context = stream._context._int
    if handle == 1:
        key: Any = ("legacy", context)
    elif handle == 2:
        key = ("per-thread", context, threading.get_ident())
    else:
        key = handle
    found = _streams.get(key)
    if found is None:
        if handle == 1:
            label = f"the legacy default stream of context 0x{context:x}"
        elif handle == 2:
            label = f"the per-thread default stream of context 0x{context:x} (thread {threading.get_ident()})"
        else:
            label = f"stream 0x{handle:x}"
        found = _streams[key] = _Timeline(label, context, True)
    return found


def _legacy(context: int) -> _Timeline | None:
    return _streams.get(("legacy", context))


def _join(into: dict[int, int], other: dict[int, int]) -> None:
    for key, value in other.items():
        if into.get(key, 0) < value:
            into[key] = value


def _step(timeline: _Timeline) -> int:
    """One more operation queued on ``timeline`` from the host: its clock value."""
    clock = timeline.clock
    _join(clock, _host_clock())
    context = timeline.context
    legacy = _legacy(context)
    if legacy is timeline:
        for other in _streams.values():
            if other.blocking and other.context == context and other is not timeline:
                _join(clock, other.clock)
    elif timeline.blocking and legacy is not None:
        _join(clock, legacy.clock)
    clock[timeline.serial] += 1
    return clock[timeline.serial]


def _host_clock() -> dict[int, int]:
    inside = getattr(_local, "inside", None)
    if inside is not None:
        return inside[2]  # type: ignore[no-any-return]
    return _host.clock


def _captured(stream: Any) -> bool:
    """Whether work queued on ``stream`` now goes into a capture cuguard runs (it does not run now)."""
    return bool(_captures._tables) and _captures.captured_into(stream) is not None


# --- memory --------------------------------------------------------------------------------


def _memory(obj: Any) -> tuple[str, int, int, str] | None:
    """``(space, base, size, label)`` of a Buffer or PinnedBuffer, or None for anything else."""
    from cuguard.resources._memory import Buffer, PinnedBuffer

    if isinstance(obj, Buffer):
        base = int(obj._handle)
        return "device", base, obj._size, f"device memory 0x{base:x} ({obj._size} bytes)"
    if isinstance(obj, PinnedBuffer):
        base = int(obj._handle)
        return "host", base, obj._size, f"pinned host memory 0x{base:x} ({obj._size} bytes)"
    return None


def _region(space: str, base: int, size: int, label: str) -> _Region:
    key = (space, base)
    region = _regions.get(key)
    if region is None:
        region = _regions[key] = _Region(base, size, label)
        insort(_bases[space], base)
        _largest[space] = max(_largest[space], size)
    return region


def _overlapping(space: str, start: int, end: int) -> Iterator[_Region]:
    bases = _bases[space]
    largest = _largest[space]
    index = bisect_left(bases, end) - 1
    while index >= 0:
        base = bases[index]
        if base + largest <= start:
            break
        region = _regions[(space, base)]
        if base + region.size > start:
            yield region
        index -= 1


def _drop(space: str, base: int) -> None:
    if _regions.pop((space, base), None) is not None:
        bases = _bases[space]
        index = bisect_left(bases, base)
        if index < len(bases) and bases[index] == base:
            del bases[index]


def _access(
    memory: tuple[str, int, int, str], write: bool, *, timeline: int, clock: int, vc: dict[int, int], op: _Op
) -> list[tuple[_Access, _Access, _Region]]:
    """Check one access against what is recorded, then record it; the races found."""
    space, base, size, label = memory
    start, end = base, base + size
    new = _Access(start, end, write=write, timeline=timeline, clock=clock, op=op)
    races: list[tuple[_Access, _Access, _Region]] = []
    for region in _overlapping(space, start, end):
        kept: list[_Access] = []
        for old in region.accesses:
            if old.start < end and start < old.end:
                ordered = vc.get(old.timeline, 0) >= old.clock
                if not ordered and (write or old.write) and old.op is not op:
                    races.append((old, new, region))
                if ordered and (write or not old.write) and start <= old.start and old.end <= end:
                    continue  # covered by the new access for every later check (see the module's notes)
            kept.append(old)
        region.accesses = kept
    _region(space, base, size, label).accesses.append(new)
    return races


def _report(races: list[tuple[_Access, _Access, _Region]]) -> None:
    if sys.is_finalizing():
        return
    for old, new, region in races:
        pair = (old.op.serial, new.op.serial)
        if pair in _reported:
            continue
        _reported.add(pair)
        first = max(old.start, new.start) - region.base
        last = min(old.end, new.end) - region.base
        text = (
            f"race on {region.label}, bytes {first}..{last}: {new.op.call} on {new.op.label} "
            f"({_kind(new)}, queued at {new.op.source}) is not ordered after {old.op.call} on {old.op.label} "
            f"({_kind(old)}, queued at {old.op.source}); order them with an event (Stream.wait) or a "
            "synchronization"
        )
        report_warning(RaceWarning(text), stacklevel=_stacklevel())


def _stacklevel() -> int:
    """The ``stacklevel`` that points a warning issued by :func:`_report` at the first caller outside cuguard."""
    frame: Any = sys._getframe(2)
    level = 2
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(_INTERNAL):
        frame = frame.f_back
        level += 1
    return level


def _kind(access: _Access) -> str:
    return "writes" if access.write else "reads"


def _check(
    timeline: int, clock: int, vc: dict[int, int], *, label: str, call: str, touched: Iterable[tuple[Any, bool]]
) -> None:
    op = _Op(call, label, _source())
    races: list[tuple[_Access, _Access, _Region]] = []
    for obj, write in touched:
        memory = _memory(obj)
        if memory is not None:
            races += _access(memory, write, timeline=timeline, clock=clock, vc=vc, op=op)
    if races:
        _report(races)


def _on_stream(stream: Any, call: str, touched: Iterable[tuple[Any, bool]]) -> None:
    if _captured(stream):
        return
    with _lock:
        timeline = _timeline(stream)
        clock = _step(timeline)
        snapshot = dict(timeline.clock)
        _check(timeline.serial, clock, snapshot, label=timeline.label, call=call, touched=touched)


def _synchronous(context: Any, call: str, touched: Iterable[tuple[Any, bool]], host_waits: bool) -> None:
    """A synchronous copy or memset: work on the context's default stream, then (``host_waits``) the host waits."""
    with _lock:
        if _per_thread_default():
            key: Any = ("per-thread", context._int, threading.get_ident())
            label = f"the per-thread default stream of context 0x{context._int:x} (thread {threading.get_ident()})"
        else:
            key = ("legacy", context._int)
            label = f"the legacy default stream of context 0x{context._int:x}"
        timeline = _streams.get(key)
        if timeline is None:
            timeline = _streams[key] = _Timeline(label, context._int, True)
        clock = _step(timeline)
        _check(timeline.serial, clock, dict(timeline.clock), label=timeline.label, call=call, touched=touched)
        if host_waits:
            _join(_host_clock(), timeline.clock)


def _host_access(call: str, touched: Iterable[tuple[Any, bool]]) -> None:
    with _lock:
        inside = getattr(_local, "inside", None)
        if inside is not None:
            serial, clock, vc = inside
            _check(serial, clock, vc, label="a host function", call=call, touched=touched)
            return
        _host.clock[_host.serial] += 1
        _check(_host.serial, _host.clock[_host.serial], dict(_host.clock), label="the host", call=call, touched=touched)


# --- the hooks the hot paths call while ON ---------------------------------------------------


def copied(dst: Any, src: Any, stream: Any, call: str, context: Any = None) -> None:
    """A copy ``src`` -> ``dst`` was queued on ``stream`` (``None``: synchronous in ``context``)."""
    touched = ((src, False), (dst, True))
    if stream is not None:
        _on_stream(stream, call, touched)
    else:
        # A synchronous copy waits for the host unless it copies device memory to device memory.
        from cuguard.resources._memory import Buffer

        _synchronous(context, call, touched, not (isinstance(dst, Buffer) and isinstance(src, Buffer)))


def filled(buffer: Any, stream: Any, call: str) -> None:
    """``buffer`` was set on ``stream`` (``None``: a synchronous memset, asynchronous for device memory)."""
    if stream is not None:
        _on_stream(stream, call, ((buffer, True),))
    else:
        _synchronous(buffer._context, call, ((buffer, True),), False)


def launched(stream: Any, call: str, args: tuple[Any, ...], read_only: frozenset[int]) -> None:
    """A kernel was queued on ``stream`` with ``args``; ``read_only``: the positions of arguments it only reads."""
    from cuguard.resources._view import memory_uses

    written, read = memory_uses(args, read_only)
    touched = [(m, True) for m in written] + [(m, False) for m in read]
    _on_stream(stream, call, [(m, write) for m, write in touched if _memory(m) is not None])


def graph_launched(stream: Any, owners: dict[int, object]) -> None:
    """A graph keeping ``owners`` was launched on ``stream``: one operation on the memory its nodes use.

    It writes the memory ``owners`` marks written (every object, in a plain
    dict: see :class:`~cuguard.resources._captures.OwnerTable`) and reads the rest.
    """
    written = _captures.written_keys(owners)
    _on_stream(stream, "cuGraphLaunch", [(o, k in written) for k, o in owners.items() if _memory(o) is not None])


def allocated(buffer: Any, stream: Any) -> None:
    """``buffer`` was just allocated (on ``stream`` when stream-ordered: a write there)."""
    memory = _memory(buffer)
    if memory is None:
        return
    with _lock:
        _drop(memory[0], memory[1])
    if stream is not None:
        _on_stream(stream, "cuMemAllocAsync", ((buffer, True),))


def freed(buffer: Any, stream: Any, call: str) -> None:
    """``buffer`` was freed on ``stream`` (a write there, checked) or synchronously (``None``: not checked)."""
    memory = _memory(buffer)
    if memory is None:
        return
    if stream is not None:
        _on_stream(stream, call, ((buffer, True),))
    with _lock:
        _drop(memory[0], memory[1])


def host_view(buffer: Any, call: str) -> None:
    """The host made a view of ``buffer``'s memory (a NumPy array, a DLPack export): a host write."""
    _host_access(call, ((buffer, True),))


def recorded(event: Any, stream: Any) -> None:
    """``event`` was recorded on ``stream``."""
    if _captured(stream):
        return
    with _lock:
        timeline = _timeline(stream)
        _join(timeline.clock, _host_clock())
        _events[int(event._handle)] = dict(timeline.clock)


def waited(stream: Any, event: Any) -> None:
    """``stream`` waits for ``event``'s last record."""
    if _captured(stream):
        return
    with _lock:
        snapshot = _events.get(int(event._handle))
        if snapshot is not None:
            _join(_timeline(stream).clock, snapshot)


def stream_synced(stream: Any) -> None:
    """The host saw ``stream``'s queued work finish (``sync``, or a ``query`` that answered done)."""
    with _lock:
        _join(_host_clock(), _timeline(stream).clock)


def event_synced(event: Any) -> None:
    """The host saw ``event``'s last record finish."""
    with _lock:
        snapshot = _events.get(int(event._handle))
        if snapshot is not None:
            _join(_host_clock(), snapshot)


def context_synced(context: Any) -> None:
    """The host waited for every stream of ``context`` (``Device.sync``)."""
    with _lock:
        host = _host_clock()
        for timeline in _streams.values():
            if timeline.context == context._int:
                _join(host, timeline.clock)


def _context_synchronized(context: Any) -> None:
    if ON:
        context_synced(context)  # Context.synchronize(): the host waited for every stream of that context


on_synchronized(_context_synchronized)


def stream_created(stream: Any, non_blocking: bool) -> None:
    """A new stream was made: a fresh timeline (a handle may be reused after a destroy)."""
    with _lock:
        handle = int(stream._handle)
        _streams[handle] = _Timeline(f"stream 0x{handle:x}", stream._context._int, not non_blocking)


def host_func(stream: Any, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` queued on ``stream`` as a host function: it runs as a step of that stream."""
    if _captured(stream):
        return fn
    with _lock:
        timeline = _timeline(stream)
        clock = _step(timeline)
        inside = (timeline.serial, clock, dict(timeline.clock))

    def run() -> object:
        previous = getattr(_local, "inside", None)
        _local.inside = inside
        try:
            return fn()
        finally:
            _local.inside = previous

    return run
