"""The one lock of cuguard: garbage collection is deferred while a thread holds it (contract S2, O5, O6).

Any allocation can run a garbage collection, and a collected cuguard object's
``__del__`` releases its handle: it calls the driver and takes cuguard's locks.
Run on a thread that holds one of those locks already, that release would take
a non-reentrant lock a second time (the thread hangs for good, S2), or enter a
re-entrant one in the middle of the section it protects. So every lock in
cuguard comes from :func:`deferring_lock`, and while a thread holds one, the
finalizers that release something see :func:`collection_deferred` true and hand
the release to cuguard's release thread (:func:`~cuguard.errors.lowlevel.defer`) instead
of running it there.

The same thread-local counter also counts the CUDA callbacks running on the
thread (:func:`~cuguard.errors.lowlevel.enter_driver_callback`), where releases are
deferred as well, so a finalizer asks one question with one thread-local read.
Holding a lock does not refuse cuguard calls: only a driver callback does
(:func:`~cuguard.errors.lowlevel.in_driver_callback`, ``CUDA_ERROR_NOT_PERMITTED``, O5).

Test hook: :data:`on_acquire`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DeferringLock", "collection_deferred", "deferring_lock", "on_acquire", "set_acquire_hook"]

#: Test hook: ``None``, or a callable taken with no arguments on the acquiring
#: thread at each acquisition of every lock made by :func:`deferring_lock` (each
#: level of a re-entrant lock's nested acquisitions included). It runs at the
#: acquisition, once the thread holds the lock and before the locked section
#: goes on, so that what it does (``gc.collect()``, which the garbage-collection
#: point sweep forces there) meets the lock exactly as a collection inside the
#: section would: a finalizer that took the lock again would hang right there.
#: Costs one global read per acquisition while unset. An exception it raises
#: propagates from the acquisition, with the lock released again.
on_acquire: Callable[[], object] | None = None


def set_acquire_hook(hook: Callable[[], object] | None) -> Callable[[], object] | None:
    """Make ``hook`` the test hook :data:`on_acquire` (``None`` removes it); return the one it replaces.

    For the garbage-collection point sweep, which collects garbage at each
    acquisition of a cuguard lock. Never fails.
    """
    global on_acquire
    previous, on_acquire = on_acquire, hook
    return previous


class _ThreadState(threading.local):
    # Class attributes: every thread starts at zero without a getattr default.
    depth = 0  # CUDA callbacks running on this thread (in_driver_callback)
    deferring = 0  # callbacks running plus cuguard locks held: collections are deferred while > 0


_state = _ThreadState()


def collection_deferred() -> bool:
    """Whether a release that becomes due on this thread must be handed to the release thread.

    True inside a CUDA callback (where CUDA forbids API calls, O5) and while
    the thread holds a lock made by :func:`deferring_lock` (where a release
    could take that lock again, S2). One thread-local read: finalizers ask it
    on every collection. Never raises.
    """
    return _state.deferring > 0


class DeferringLock:
    """A lock of cuguard; while a thread holds it, :func:`collection_deferred` is true there.

    Made by :func:`deferring_lock`. Use it as ``with lock:``, or with
    :meth:`acquire` and :meth:`release` (the ``threading.Lock`` signatures), or
    under a ``threading.Condition``.
    """

    __slots__ = ("_inner",)

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock as ``threading.Lock.acquire`` does; returns whether it was taken.

        Then calls :data:`on_acquire` when set. An exception from it, or one
        that interrupts the wait, propagates with the lock not held and the
        thread's count as before.
        """
        state = _state
        state.deferring += 1  # before the lock is held: no instant of holding it unmarked
        try:
            taken: bool = self._inner.acquire(blocking, timeout)
        except BaseException:  # a signal handler's exception interrupted the wait
            state.deferring -= 1
            raise
        if not taken:
            state.deferring -= 1
        elif on_acquire is not None:
            self._hook()
        return taken

    def _hook(self) -> None:
        hook = on_acquire
        if hook is None:
            return
        try:
            hook()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Release the lock; ``RuntimeError`` (the count unchanged) when this thread may not release it."""
        self._inner.release()
        _state.deferring -= 1

    def locked(self) -> bool:
        """Whether some thread holds the lock (a non-reentrant lock only)."""
        return bool(self._inner.locked())

    def __enter__(self) -> bool:
        # acquire(), inlined: this runs on every locked section of cuguard.
        state = _state
        state.deferring += 1  # before the lock is held: no instant of holding it unmarked
        try:
            self._inner.acquire()
        except BaseException:  # a signal handler's exception interrupted the wait
            state.deferring -= 1
            raise
        if on_acquire is not None:
            self._hook()
        return True

    def __exit__(self, *exc: object) -> None:
        self._inner.release()
        _state.deferring -= 1

    def __repr__(self) -> str:
        return f"<cuguard {type(self).__name__} over {self._inner!r}>"


class _DeferringRLock(DeferringLock):
    """The re-entrant kind: each level of a nested acquisition counts (and is released) once."""

    __slots__ = ()

    def locked(self) -> bool:
        raise AttributeError("locked() is not defined for a re-entrant lock")

    # threading.Condition releases and takes a re-entrant lock whole across wait():
    # the thread's count follows the levels given up and taken back.
    def _is_owned(self) -> bool:
        return bool(self._inner._is_owned())

    def _release_save(self) -> Any:
        saved = self._inner._release_save()
        _state.deferring -= saved[0]
        return saved

    def _acquire_restore(self, saved: Any) -> None:
        _state.deferring += saved[0]
        try:
            self._inner._acquire_restore(saved)
        except BaseException:
            _state.deferring -= saved[0]
            raise


def deferring_lock(reentrant: bool = False) -> DeferringLock:
    """A new lock for cuguard's own bookkeeping, under which garbage collection is deferred.

    Non-reentrant unless ``reentrant`` (then like ``threading.RLock``: the
    holding thread may take it again, and releases it as often). While a thread
    holds it, releases that garbage collection makes due on that thread are
    handed to the release thread (see :func:`collection_deferred`), so a
    collection inside a locked section never takes a lock that thread holds
    (S2). cuguard calls made while holding it are not refused. Never raises.
    """
    if reentrant:
        return _DeferringRLock(threading.RLock())
    return DeferringLock(threading.Lock())
