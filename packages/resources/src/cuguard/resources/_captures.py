"""Stream captures in progress, what their work uses, and the releases that wait for them (G6, W5, O6).

cuguard knows of two kinds of capture:

- Captures a ``GraphBuilder`` runs (the graphs layer calls :func:`capture_began`
  and :func:`capture_ended`). They are counted per *driver* context (the
  context's handle, never the Python wrapper: a foreign stream's wrapper and a
  device's primary context are the same context to CUDA), and each stream they
  capture on (the root's, its forks', a conditional body's) is marked with the
  capture's *owner table*: the objects the captured work uses. Every cuguard
  operation that queues work referencing memory, a kernel or an event on such a
  stream adds them to that table (:func:`retain`), and memory in a
  table counts as used by a graph from the moment its work is captured
  (:func:`used_by_capture`): ``close()`` does not free it under the graph (W5).
  An owner table (:class:`OwnerTable`) also says which of that memory the
  work may write: the race checker counts a launch of the graph as a read of
  the rest (B7).
- Captures begun elsewhere (the bindings, another library) on a stream cuguard
  may see: such a stream is asked ``cuStreamIsCapturing`` before a stream-ordered
  free is queued on it, only when it *may* be capturing (``Stream._may_capture``:
  a foreign stream, one whose handle was handed out, one that waited on an event,
  one cuguard captured on), so a stream only cuguard ever used costs no query.

A release that would be queued into a capture (a stream-ordered free on a
capturing stream), or that needs ``cuCtxSynchronize`` while a capture of its
context runs (refused by the driver during any capture of the context, and the
refusal invalidates that capture), waits: the object is closed for use at once
and released when the capture ends (:func:`capture_ended`), or, for a capture
cuguard did not begin, at the next :func:`release_waiting` (a cuguard capture of
any context ending, ``Stream.sync()``, the end of a garbage collection) that
finds it over.
A deferred release reports failures as ``CUDAWarning`` (W1): nothing can raise
for it any more.

Nothing here holds its lock while it calls the driver or runs a release, so a
garbage collection inside never deadlocks on it.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from cuguard.errors import driver
from cuguard.errors.lowlevel import collection_deferred, defer, deferring_lock, on_driver_forgotten

if TYPE_CHECKING:
    from cuguard.context import Context
    from cuguard.resources._base import Resource
    from cuguard.resources._stream import Stream

__all__ = [
    "OwnerTable",
    "capture_began",
    "capture_ended",
    "capture_joined",
    "capture_left",
    "captured_into",
    "context_capturing",
    "generation",
    "known_context",
    "may_capture",
    "release_waiting",
    "retain",
    "stream_destroyed",
    "split_written",
    "stream_capturing",
    "used_by_capture",
    "wait_for_capture",
    "waiting_count",
]


class OwnerTable(dict[int, object]):
    """What a graph, or a capture in progress, keeps alive (by ``id``), and which of it its work may write.

    The table is the payload a graph's CUDA user object holds (W5).
    :attr:`written` holds the keys of the objects some node may write (a
    copy's or memset's destination, a kernel argument not named
    ``read_only``, whatever ``keep`` was given); the others are only read
    (a copy's source, a read-only kernel argument). Only the race checker
    reads the difference (B7): a graph launch writes the written memory and
    reads the rest. A write mark is never taken back while the object stays
    in the table (a node changed to only read it keeps it written), so the
    checker errs towards reporting, never towards missing a write.
    """

    __slots__ = ("written",)

    def __init__(self, items: Mapping[int, object] | None = None, written: set[int] | None = None) -> None:
        if items:
            self.update(items)
            self.written: set[int] = written_keys(items) if written is None else written
        else:
            self.written = set() if written is None else written

    def copy(self) -> OwnerTable:  # a table, with its own set of write marks
        return OwnerTable(self, set(self.written))

    def keep(self, obj: object, write: bool) -> bool:
        """Keep ``obj`` (written by the work when ``write``); return whether it was not kept before.

        A mark is only ever added here (an object leaving the table takes its mark with it: see
        :meth:`pop`), so threads keeping the same object at once cannot lose a write mark.
        """
        key = id(obj)
        new = key not in self
        if new:
            self[key] = obj
        if write:
            self.written.add(key)
        return new

    def pop(self, key: int, *default: object) -> object:
        """Forget ``key`` and its write mark (an object kept later under the same ``id`` starts unmarked)."""
        self.written.discard(key)
        return super().pop(key, *default)

    def __delitem__(self, key: int) -> None:
        self.written.discard(key)
        super().__delitem__(key)

    def merge(self, other: Mapping[int, object]) -> None:
        """Keep everything ``other`` keeps, with its write marks (all written when it is a plain mapping)."""
        marks = written_keys(other)
        for key, obj in other.items():
            self.keep(obj, key in marks)


def written_keys(owners: Mapping[int, object]) -> set[int]:
    """The keys of ``owners`` its work may write: all of a plain mapping's, an :class:`OwnerTable`'s marked ones."""
    written = getattr(owners, "written", None)
    return set(owners) if written is None else {key for key in owners if key in written}


def split_written(owners: Mapping[int, object]) -> tuple[list[object], list[object]]:
    """``(written, read)``: the objects of ``owners`` its work may write, and the ones it only reads."""
    marks = written_keys(owners)
    written: list[object] = []
    read: list[object] = []
    for key, obj in owners.items():
        (written if key in marks else read).append(obj)
    return written, read


#: ``CU_STREAM_CAPTURE_STATUS_NONE``: the stream is not being captured.
_CAPTURE_NONE = 0

_lock = deferring_lock()
# (driver token, context handle) -> the number of cuguard captures in progress in that context.
_counts: dict[tuple[object, int], int] = {}
# stream handle -> the owner table of the cuguard capture running on that stream (shared by a root and its forks).
_tables: dict[int, dict[int, object]] = {}
# Releases waiting for a capture to end, in the order they became due.
_waiting: list[Resource] = []
_ended = [0]  # captures (and forks' parts) ended so far (wait_for_capture's check for an end it raced with)


# Streams someone else may capture (``Stream._may_capture``), by driver context: before a release that needs
# cuCtxSynchronize, they are asked whether they capture (a capture cuguard did not begin, G6).
_watched: dict[tuple[object, int], weakref.WeakSet[Stream]] = {}


def _key(context: Context) -> tuple[object, int]:
    """The driver context's identity: its driver (the token object, kept alive here) and its handle.

    A driver uninstalled and installed again keeps its token, so its captures
    stay counted across the switch; another driver's contexts never match.
    """
    return (context._driver, context._int)


def _stream_key(stream: Stream) -> tuple[object, int]:
    """The driver context a capture on ``stream`` runs in.

    A stream made elsewhere is asked (``cuStreamGetCtx``): whoever wrapped it
    named a context, and the capture counts in the one the driver knows. A
    refused query falls back to the named context.
    """
    if stream._owned:
        return _key(stream._context)
    err, ctx = driver.cuStreamGetCtx(stream._handle)
    if err:
        return _key(stream._context)
    return (stream._context._driver, int(ctx))


# stream handle -> the key its counted capture was counted under (capture_ended takes it off the same one)
_began: dict[int, tuple[object, int]] = {}


def may_capture(stream: Stream) -> None:
    """Mark ``stream`` as one a capture cuguard does not see may run on (its handle was handed out...).

    Its stream-ordered allocations and frees then ask the driver whether it
    captures, and so do releases of its context that need ``cuCtxSynchronize``.
    """
    stream._may_capture = True
    key = _key(stream._context)
    with _lock:
        watched = _watched.get(key)
        if watched is None:
            watched = _watched[key] = weakref.WeakSet()
        watched.add(stream)


def known_context(handle: int) -> Context | None:
    """The context of a live wrapper cuguard holds for the stream ``handle`` (one that may be captured), or None.

    For a stream the driver will not name the context of (``cuStreamGetCtx``
    refuses while the stream's capture is invalidated): a wrapper made
    earlier knows it. Cheap enough for that rare path only.
    """
    with _lock:
        streams = [s for watched in _watched.values() for s in watched]
    for stream in streams:
        if int(stream._handle) == handle and not stream._context._closed:
            return stream._context
    return None


def capture_began(stream: Stream, owners: dict[int, object]) -> None:
    """A capture began on ``stream``: count it in the stream's driver context; its work feeds ``owners``.

    Called once per capture by the graphs layer (a ``GraphBuilder``'s root or
    conditional body). Until :func:`capture_ended`, collections of memory whose
    free needs ``cuCtxSynchronize`` wait, frees that would be queued on
    ``stream`` wait, and work queued on ``stream`` through cuguard adds what it
    uses to ``owners``. Never fails.
    """
    if not stream._may_capture:
        may_capture(stream)
    key = _stream_key(stream)
    with _lock:
        _counts[key] = _counts.get(key, 0) + 1
        _tables[int(stream._handle)] = owners
        _began[int(stream._handle)] = key


def capture_joined(stream: Stream, owners: dict[int, object]) -> None:
    """``stream`` joined a capture (a fork): its work feeds ``owners`` too; nothing more is counted."""
    if not stream._may_capture:
        may_capture(stream)
    with _lock:
        _tables[int(stream._handle)] = owners


def capture_left(stream: Stream) -> None:
    """``stream`` no longer captures (a fork's part ended): forget its owner table. Never fails.

    A release that waited because of that stream (a free queued on it, or
    ``cuCtxSynchronize`` while it captured) is asked again at once.
    """
    with _lock:
        left = _tables.pop(int(stream._handle), None) is not None
        if left:
            _ended[0] += 1
    if left:
        release_waiting()


def capture_ended(stream: Stream) -> None:
    """The capture :func:`capture_began` counted on ``stream`` ended: forget it, then run the releases due.

    Releases that waited for it are carried out in the calling thread as
    collections are (a refusal is a ``CUDAWarning``, the object leaked: W1, W5).
    Call it once per :func:`capture_began`; a stream of a driver that is no
    longer installed is only forgotten.
    """
    _forget(stream)
    release_waiting()


def stream_destroyed(stream: Stream) -> bool:
    """cuguard destroyed ``stream``: a capture still counted on it is over (the driver ends it with its stream).

    For a capture that could not be ended (its ``cuStreamEndCapture`` was
    refused, so it stayed counted for good, G6): once its stream is gone, the
    releases that waited for it may run. Returns whether one was counted; the
    releases themselves run at the next :func:`release_waiting`. Never fails.
    """
    with _lock:
        counted = int(stream._handle) in _began
    if counted:
        _forget(stream)
    return counted


def _forget(stream: Stream) -> None:
    """Forget the capture counted on ``stream`` (its count, its owner tables); once per capture_began."""
    with _lock:
        key = _began.pop(int(stream._handle), None)
        owners = _tables.pop(int(stream._handle), None)
        if owners is not None:
            # The forks' streams captured for the same capture (one shared table): it is over for them too,
            # even before their own capture_left, so no release waits on them after this end.
            for handle in [h for h, table in _tables.items() if table is owners]:
                del _tables[handle]
        _ended[0] += 1
        if key is None:
            return  # forgotten already (its stream was destroyed first): counted down once only
        count = _counts.get(key, 0) - 1
        if count > 0:
            _counts[key] = count
        else:
            _counts.pop(key, None)


def _driver_forgotten(token: object) -> None:
    """A driver is finished for good (a simulator closed): drop its captures, owner tables and waiters.

    Its objects are refused for good (O3) and its handles may come again from the next
    simulator: a capture it left counted must not hold back another driver's releases, nor its
    owner table take in another driver's work.
    """
    with _lock:
        for key in [k for k in _counts if k[0] is token]:
            del _counts[key]
        for key in [k for k in _watched if k[0] is token]:
            del _watched[key]
        for handle in [h for h, key in _began.items() if key[0] is token]:
            del _began[handle]
            owners = _tables.pop(handle, None)
            if owners is not None:
                for fork in [h for h, table in _tables.items() if table is owners]:
                    del _tables[fork]
        _waiting[:] = [r for r in _waiting if r._context._driver is not token]


on_driver_forgotten(_driver_forgotten)


def captured_into(stream: Stream) -> dict[int, object] | None:
    """The owner table of the cuguard capture running on ``stream``, or None (cheap when no capture runs)."""
    if not _tables:
        return None
    return _tables.get(int(stream._handle))


def retain(owners: dict[int, object], written: Iterable[object], read: Iterable[object] = ()) -> list[int]:
    """Keep ``written`` (the work may write them) and ``read`` (it only reads them) in ``owners``.

    ``owners`` is the owner table of a graph or of a capture in progress (W5,
    G6); in a plain dict (not an :class:`OwnerTable`) everything counts as
    written (B7). Memory among them counts as used by a graph from now on: its
    ``close()`` asks whether a graph still uses it. Returns the keys that were
    not kept before, for a caller that must undo this. Never fails.
    """
    from cuguard.resources._memory import Buffer, PinnedBuffer

    added: list[int] = []
    table = owners if type(owners) is OwnerTable else None
    for write, group in ((True, written), (False, read)):
        for obj in group:
            if table is not None:
                if not table.keep(obj, write):
                    continue
            elif id(obj) in owners:
                continue
            else:
                owners[id(obj)] = obj
            added.append(id(obj))
            if type(obj) is Buffer or type(obj) is PinnedBuffer:
                obj._graph_used = True  # its close() now asks whether a graph still uses it

    return added


def used_by_capture(obj: object) -> bool:
    """Whether a cuguard capture in progress uses ``obj`` (its captured work would run on it)."""
    if not _tables:
        return False
    key = id(obj)
    with _lock:
        tables = list(_tables.values())
    return any(table.get(key) is obj for table in tables)


def context_capturing(context: Context) -> bool:
    """Whether a capture runs in ``context``'s driver context (``cuCtxSynchronize`` would be refused and break it).

    True while cuguard runs one there; otherwise each stream of the context
    that someone else may capture (:func:`may_capture`) is asked
    (``cuStreamIsCapturing``). A capture on a stream cuguard never saw cannot
    be found: the driver then refuses the synchronization, and the caller
    leaks and reports (W5).
    """
    key = _key(context)
    if _counts and key in _counts:
        return True
    watched = _watched.get(key)
    if not watched:
        return False
    with _lock:
        streams = list(watched)
    return any(not s._closed and stream_capturing(s) for s in streams)


def stream_capturing(stream: Stream) -> bool:
    """Whether work queued on ``stream`` now would be captured (or refused as part of an invalidated capture).

    A stream cuguard captures on answers at once; a stream that may be
    captured by someone else (``_may_capture``) is asked (``cuStreamIsCapturing``,
    with the thread's capture mode as it is: the query is allowed in every
    mode); any other stream is not capturing. A refused query answers
    ``False``: the release then goes ahead and reports what the driver says.
    """
    if _tables and int(stream._handle) in _tables:
        return True
    if not stream._may_capture or stream._context._closed:
        return False  # a stream of a driver no longer installed (or a destroyed context) is never asked (O3, S2)
    err, status = driver.cuStreamIsCapturing(stream._handle)
    return not err and int(status) != _CAPTURE_NONE


def waiting_count() -> int:
    """How many releases wait for a capture to end (closed for use, not yet released). Never fails."""
    return len(_waiting)


# Streams cuguard closed for use without destroying them (their destroy was refused, or handed to the
# release thread from inside a host function): a capture on one goes on in the driver.
_undestroyed: weakref.WeakSet[Stream] = weakref.WeakSet()


def stream_undestroyed(stream: Stream) -> bool:
    """Whether ``stream`` was closed without its driver stream being destroyed (a capture on it goes on)."""
    return bool(_undestroyed) and stream in _undestroyed


def waiting_ids() -> set[int]:
    """The ``id`` of each release waiting for a capture to end (for accounting; cheap when none waits)."""
    # Without the lock (a copy of a list is one step): the accounting that asks may run while a
    # release holds it.
    return {id(resource) for resource in list(_waiting)} if _waiting else set()


def generation() -> int:
    """How many captures (or forks' parts) have ended so far: read it before asking whether a release must wait."""
    return _ended[0]


def wait_for_capture(resource: Resource, since: int | None = None) -> None:
    """Queue ``resource``'s release (already closed for use) until the capture in its way ends.

    ``since`` is :func:`generation` read before the caller decided to wait:
    when a capture ended in between (on another thread), the waiting
    releases are asked again at once, so none waits for an end already past.
    """
    with _lock:
        _waiting.append(resource)
        stale = since is not None and since != _ended[0]
    if stale:
        release_waiting()


_running = threading.local()


def _after_collection(phase: str, _info: dict[str, int]) -> None:
    """A garbage collection ended: carry out the waiting releases whose captures are over (G6).

    As a finalizer would: inside a CUDA callback or while a cuguard lock is
    held, they go to the release thread instead (O5, S2).
    """
    if phase != "stop" or not _waiting or sys.is_finalizing():
        return
    if collection_deferred():
        defer(release_waiting)
    else:
        release_waiting()


gc.callbacks.append(_after_collection)


def release_waiting() -> None:
    """Carry out the waiting releases whose captures have ended; the others keep waiting.

    Each is asked again (``Resource._capture_wait``) and released as a
    collection is (failures are ``CUDAWarning``, W1). Cheap when nothing waits.
    Not reentrant per thread: a release that ends a capture does not recurse.
    """
    if not _waiting or getattr(_running, "active", False):
        return
    _running.active = True
    try:
        while True:
            with _lock:
                ended = _ended[0]
                due = _waiting[:]
                _waiting.clear()
            for resource in due:
                resource._release_collected()  # queues itself again while its capture goes on
            if _ended[0] == ended:
                break  # no capture ended meanwhile (one of these releases may end one): nothing more is due
    finally:
        _running.active = False
