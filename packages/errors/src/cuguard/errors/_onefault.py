"""One fault, one report (contract W7): the releases a sticky fault refuses.

After a kernel fault (an illegal address, a launch failure...) the driver refuses
all work in the context, releases included. Reported one by one (W1), every
cuguard object dropped afterwards would warn: sixty streams, events and buffers
alive at the fault would give sixty warnings for one fault. So every failure that
:func:`~cuguard.errors.report` or :func:`~cuguard.errors.report_error` is given
with a sticky status goes through :func:`fold`, per context (the ``context`` its
caller names: the context the release ran in):

- the first one in a context warns: one :class:`StickyFaultWarning` with the
  failure itself, the driver's first sticky fault (its call and, under fault
  attribution, the launch that caused it), and the news that later refused
  releases in that context leak their objects without a warning each;
- each later one is counted, not warned;
- the count is reported once, in one summary :class:`StickyFaultWarning`, when
  the context's last cuguard object is gone (collected or closed), or at
  interpreter exit while some are still alive. Nothing is said at exit when
  nothing was counted.

The cuguard objects of a context are found once, at its first refused release:
the :class:`~cuguard.errors.lowlevel.Unique` objects with a ``closed`` property, not
closed, that refer to the context object and own what they refer to (not those
whose ``owned`` is false, such as a device's default memory resource, which the
device keeps for good) (one walk over the objects the garbage
collector tracks; nothing is recorded while no fault happens, so the success
paths pay nothing). A collection clears weak references before it finalizes the
objects, so a summary that falls due during a collection is decided when it
ends; one that falls due while cuguard's release thread has releases queued is
decided by that thread, after them.

An explicit ``close()`` raises its error instead (S3): it is neither warned nor
counted here.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from cuguard.errors import _ownership
from cuguard.errors._exceptions import CUDAWarning
from cuguard.errors._locks import deferring_lock
from cuguard.errors._ownership import defer
from cuguard.errors._seam import driver_state, first_sticky_fault, record_sticky_fault
from cuguard.errors.owners import Unique

__all__ = ["StickyFaultWarning", "fold"]


class StickyFaultWarning(CUDAWarning):
    """The one report of the releases a sticky fault refused in a context (contract W7).

    A :class:`CUDAWarning`, so every filter of ``CUDAWarning`` applies to it.
    There are at most two per context and fault: the first refused release
    (``summary`` false), whose message is the failure itself followed by the
    first fault and the news that later refused releases in that context are
    leaked without a warning each; and the summary (``summary`` true), whose
    ``leaked`` counts those later releases, issued when the context's last
    cuguard object is gone or at interpreter exit.

    - ``first_fault``: the driver's first sticky fault (its call and, under
      fault attribution, the launch that caused it);
    - ``context``: the context the releases ran in, as text;
    - ``leaked``: the number of objects this warning says were leaked (1 for the
      first warning);
    - ``summary``: whether this is the summary.
    """

    first_fault: str
    context: str
    leaked: int
    summary: bool

    def __init__(
        self, message: str, *, first_fault: str = "", context: str = "", leaked: int = 1, summary: bool = False
    ) -> None:
        super().__init__(message)
        self.first_fault = first_fault
        self.context = context
        self.leaked = leaked
        self.summary = summary


class _Record:
    """What is known of one context's releases refused since one sticky fault."""

    __slots__ = ("context", "counted", "first_fault", "queued", "ready", "refs", "reported", "watched")

    def __init__(self, context: str, first_fault: str, watched: bool) -> None:
        self.context = context
        self.first_fault = first_fault
        self.counted = 0  # refused releases after the first one
        self.reported = 0  # of those, how many a summary reported
        self.refs: list[weakref.ref[Any]] = []  # the context's cuguard objects at the first refused release
        self.ready = False  # refs filled
        self.queued = False  # a check is waiting on the release thread
        self.watched = watched  # whether the context is known: unknown, its summary comes at exit


_KEY = "sticky-fault reports"  # driver_state() key: context key -> the _Record of the current fault
_lock = deferring_lock()
_open: list[_Record] = []  # every record, for the summaries at exit
_due: list[_Record] = []  # records to check when the running collection ends
_collecting = [False]  # a collection runs (between the gc callbacks "start" and "stop")
_exit_hook = [False]


def _key(context: object) -> object:
    if context is None:
        return None
    try:
        return hash(context)  # a Context hashes as its handle: every object of one context shares a record
    except TypeError:
        return id(context)


def _describe(context: object) -> str:
    if context is None:
        return "a context cuguard could not name"
    try:
        return repr(context)
    except Exception:  # noqa: BLE001 - describing a context for a report must never raise
        return object.__repr__(context)


def _alive(obj: object) -> bool:
    """Whether ``obj`` is a cuguard object not closed yet (its release is still to come)."""
    try:
        return getattr(obj, "closed", None) is False
    except Exception:  # noqa: BLE001 - a half-made object: nothing of it is released
        return False


def _owns(obj: object) -> bool:
    """Whether ``obj`` releases a handle of its own: ``owned`` false says not (a device's default memory resource)."""
    try:
        return getattr(obj, "owned", True) is not False
    except Exception:  # noqa: BLE001 - a half-made object: nothing of it is released
        return False


def fold(text: str, own: str, context: object) -> StickyFaultWarning | None:
    """A failure with a sticky status that nothing can raise: the warning to issue, or ``None`` (counted).

    ``text`` is the failure's report (W1), ``own`` its call and status (``"cuEventDestroy failed
    with CUDA_ERROR_ILLEGAL_ADDRESS"``: the first fault when the driver has none recorded yet),
    ``context`` the context the failed release ran in (``None`` when unknown). The first failure
    in a context since the driver's first sticky fault gets a :class:`StickyFaultWarning` to
    issue; later ones are counted, and a summary may be issued from here when that context's
    last object is gone (see the module's description). Raises only an escalated warning (W3).
    """
    recorded = record_sticky_fault(own)
    first = recorded or own
    # This failure is the driver's first fault (no earlier one, or a fault plan's ended): a new report.
    new_fault = recorded is None and first_sticky_fault() is not None
    key = _key(context)
    with _lock:
        records: dict[object, _Record] = driver_state().setdefault(_KEY, {})
        record = records.get(key)
        counted = record is not None and not new_fault and record.first_fault == first
        if record is not None and counted:
            record.counted += 1
        else:
            record = records[key] = _Record(_describe(context), first, context is not None)
            _open.append(record)
    if counted:
        _check(record)
        return None
    _track(record, context)
    _ensure_exit_hook()
    _check(record)  # failures counted by other threads while the objects were being found
    return StickyFaultWarning(
        f"{text}; the driver refuses all work since the first sticky fault: {first}; later releases refused "
        f"in {record.context} leak their objects without a warning each, and are counted in one summary warning "
        "when its last cuguard object is gone (or at exit)",
        first_fault=first,
        context=record.context,
    )


def _track(record: _Record, context: object) -> None:
    """Find the cuguard objects of ``context`` still to be released, and watch them go."""
    refs: list[weakref.ref[Any]] = []
    if context is not None:
        gone = functools.partial(_gone, record)
        for obj in gc.get_referrers(context):
            if isinstance(obj, Unique) and _alive(obj) and _owns(obj):
                with contextlib.suppress(TypeError):  # not weakly referable: not watched
                    refs.append(weakref.ref(obj, gone))
    with _lock:
        record.refs = refs
        record.ready = True


def _gone(record: _Record, _ref: object) -> None:
    """A watched object was collected (weak reference callback): maybe the context's last one."""
    if sys.is_finalizing():
        return
    _check(record)


def _on_release_thread() -> bool:
    return bool(_ownership._thread) and threading.current_thread() is _ownership._thread[0]


def _check(record: _Record) -> None:
    """Issue the summary of ``record`` if something is counted and none of the context's objects is left."""
    if not record.ready or not record.watched or record.counted <= record.reported:
        return
    if _collecting[0]:
        # Inside a collection the weak references are cleared before the objects' finalizers run:
        # those releases are still to come. Decided when the collection ends.
        with _lock:
            if record not in _due:
                _due.append(record)
        return
    if not _ownership._queue.empty() and not _on_release_thread():
        # Releases handed to the release thread are still to come: decided there, after them.
        with _lock:
            if record.queued:
                return
            record.queued = True
        defer(_queued_check, record)
        return
    for ref in record.refs:
        obj = ref()
        if obj is not None and _alive(obj):
            return
    _summarize(record)


def _queued_check(record: _Record) -> None:
    record.queued = False
    _check(record)


def _summarize(record: _Record, at_exit: bool = False) -> None:
    with _lock:
        leaked = record.counted - record.reported
        if leaked <= 0:
            return
        record.reported = record.counted
    text = (
        f"{leaked} more release{'s' if leaked != 1 else ''} refused in {record.context} after the sticky fault "
        f"({record.first_fault}) leaked {'their objects' if leaked != 1 else 'its object'} without a warning each"
    )
    if at_exit:
        alive = sum(1 for ref in record.refs if _alive(ref()))
        text = f"{text}; reported at exit"
        if alive:
            some = f"{alive} object{'s' if alive != 1 else ''} of that context {'are' if alive != 1 else 'is'}"
            text = f"{text}, where {some} still alive, never released"
    warnings.warn(
        StickyFaultWarning(text, first_fault=record.first_fault, context=record.context, leaked=leaked, summary=True),
        stacklevel=2,
    )


def fault_ended(state: dict[str, Any]) -> None:
    """The driver whose ``driver_state()`` is ``state`` forgot its sticky fault (a fault plan's, ended).

    Releases refused under it were counted for good: their summaries come now, not when the
    contexts' objects are gone (later releases succeed, or make a report of their own). An
    escalated warning goes to ``sys.unraisablehook``. Never raises otherwise.
    """
    from cuguard.errors._report import call_unraisable

    with _lock:
        records: dict[object, _Record] = state.pop(_KEY, {})
    for record in records.values():
        call_unraisable(_summarize, record, what="the summary of releases refused after a sticky fault")


def _gc_phase(phase: str, info: dict[str, int], _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
    """Summaries that fell due during a collection are decided when it ends (its finalizers have run)."""
    if phase == "start":
        _collecting[0] = True
        return
    _collecting[0] = False
    if not _due or _finalizing():
        return
    from cuguard.errors._report import call_unraisable

    with _lock:
        due = _due[:]
        del _due[:]
    for record in due:
        call_unraisable(_check, record, what="the summary of releases refused after a sticky fault")


gc.callbacks.append(_gc_phase)


def _ensure_exit_hook() -> None:
    if not _exit_hook[0]:
        with _lock:
            if not _exit_hook[0]:
                _exit_hook[0] = True
                atexit.register(_at_exit)


def _at_exit() -> None:
    """The summaries still owed at exit: counted releases whose context still had objects (W7)."""
    from cuguard.errors._report import call_unraisable

    with _lock:
        owed = [record for record in _open if record.counted > record.reported]
    for record in owed:
        call_unraisable(_summarize, record, True, what="the summary of releases refused after a sticky fault")
