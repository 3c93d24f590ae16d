"""Ownership helpers every layer shares (contract O1, O5).

- :class:`~cuguard.errors.owners.Unique` (in :mod:`cuguard.errors.owners`): the
  base of every class whose objects own a driver handle (O1).
- :func:`refuse_construction`: the ``TypeError`` for a class that only a
  factory makes (O1); :func:`source_new`, how the factories of a module
  running as Python source make their objects without ``__init__``.
- The release thread (O5). CUDA calls host functions and user-object
  destructors on its own threads, where no CUDA call is allowed. cuguard's
  trampolines mark those calls (:func:`enter_driver_callback`,
  :func:`exit_driver_callback`); a release that becomes due there (a callback
  dropped the last reference to a stream, say) is handed with :func:`defer`
  to one Python daemon thread, which carries it out. :func:`flush_deferred`
  waits for what was handed over so far.
- :func:`wrong_kind`: the one ``TypeError`` message of every argument check (E3).
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn, cast

from cuguard.errors import _seam
from cuguard.errors._locks import _state, deferring_lock

__all__ = [
    "defer",
    "deferred_count",
    "enter_driver_callback",
    "exit_driver_callback",
    "flush_deferred",
    "in_driver_callback",
    "refuse_construction",
    "source_new",
    "wrong_kind",
]


def refuse_construction(cls: type, factory: str) -> NoReturn:
    """Raise the ``TypeError`` of a class whose objects only ``factory`` makes (O1)."""
    raise TypeError(f"{cls.__name__} objects cannot be constructed directly; use {factory}")


def source_new(module_file: str | None, cls: type) -> Callable[[type], Any] | None:
    """``cls.__new__`` when ``module_file`` (a module's ``__file__``) is Python source, else ``None``.

    The factories of the hot paths make their objects without ``__init__`` as
    ``X.__new__(X) if _new_x is None else _new_x(X)``, with ``_new_x = source_new(__file__, X)``.
    The compiled build (``None``) turns ``X.__new__(X)`` into a direct C call; the interpreter
    cannot specialize that read of ``__new__`` (the class's type, ``type``, has a ``__new__``
    of its own), which costs a module running as source about 200 interpreter instructions per
    object more than calling the same ``__new__`` read once into a global. It is ``cls``'s own
    ``__new__`` (``object.__new__``, or a compiled base's where a source module's class derives
    from a compiled one), so both make the same object. ``TypeError`` when ``cls`` is not a class;
    nothing else raises.
    """
    if not isinstance(cls, type):
        raise wrong_kind("cls", "a class", cls)
    source = isinstance(module_file, str) and module_file.endswith(".py")
    return cast("Callable[[type], Any]", cls.__new__) if source else None


# --- the driver's callback threads ------------------------------------------------------------

# The thread's state lives with cuguard's lock (cuguard.errors._locks): one counter there says
# whether releases are deferred (inside a callback or while holding a cuguard lock), another
# whether the thread runs a callback.


def enter_driver_callback() -> None:
    """Mark the calling thread as running inside a CUDA host function or destructor.

    Until :func:`exit_driver_callback`, releases that become due on this thread
    are handed to the release thread (:func:`~cuguard.errors.lowlevel.collection_deferred`
    is true), and cuguard calls made here raise
    :class:`~cuguard.errors.CUDAError` (``CUDA_ERROR_NOT_PERMITTED``) before
    reaching the driver, which forbids them (O5).
    """
    state = _state
    state.depth += 1
    state.deferring += 1
    _seam.callbacks_started()


def exit_driver_callback() -> None:
    """Undo :func:`enter_driver_callback`."""
    state = _state
    state.depth -= 1
    state.deferring -= 1
    _seam.callbacks_ended()


def in_driver_callback() -> bool:
    """Whether the calling thread is inside a CUDA host function or destructor, where CUDA forbids API calls."""
    return _state.depth > 0


# --- the release thread -----------------------------------------------------------------------

_queue: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]] | threading.Event] = queue.SimpleQueue()
_thread_lock = deferring_lock()
_thread: list[threading.Thread] = []
_put = _queue.put


_carried_out = [0]  # how many deferred releases the thread has carried out


def _release_loop() -> None:
    from cuguard.errors._report import call_unraisable

    while True:
        item = _queue.get()
        if isinstance(item, threading.Event):
            item.set()
            continue
        fn, args = item
        del item
        call_unraisable(fn, *args, what="deferred release of CUDA resources")
        del fn, args
        _carried_out[0] += 1


def deferred_count() -> int:
    """How many releases cuguard's release thread has carried out so far (it only grows)."""
    return _carried_out[0]


def _ensure_thread() -> None:
    if _thread:
        return
    # Not blocking: a collection while this thread starts the release thread hands its releases
    # over here again (they are queued already, and the thread being started will take them).
    if not _thread_lock.acquire(blocking=False):
        return
    try:
        if not _thread:
            thread = threading.Thread(target=_release_loop, name="cuguard-release", daemon=True)
            thread.start()
            _thread.append(thread)
    finally:
        _thread_lock.release()


def defer(fn: Callable[..., object], *args: Any) -> None:
    """Run ``fn(*args)`` soon on cuguard's release thread (never on the caller's thread).

    Safe to call from a CUDA host function or user-object destructor: it only
    puts the work on a queue (never blocks, never calls CUDA). Failures of
    ``fn`` reach ``sys.unraisablehook`` (W3); a ``CUDAWarning`` it issues is
    shown like any other. Once the interpreter is finalizing nothing is queued
    (S1).
    """
    if sys.is_finalizing():
        return
    _put((fn, args))  # first: starting the thread may run a collection that defers here again
    _ensure_thread()


def flush_deferred(timeout: float | None = None) -> bool:
    """Wait until everything handed to the release thread so far has been carried out.

    Returns ``False`` if ``timeout`` seconds passed first. Called from the
    release thread itself or from inside a CUDA callback it returns ``False`` at
    once (it would wait for itself).
    """
    if not _thread:
        if _queue.empty():
            return True  # nothing was ever handed over
        _ensure_thread()
    if sys.is_finalizing() or in_driver_callback() or (_thread and threading.current_thread() is _thread[0]):
        return False
    done = threading.Event()
    _put(done)
    return done.wait(timeout)


# --- argument checks (E3) ---------------------------------------------------------------------


def wrong_kind(param: str, expected: str, value: object) -> TypeError:
    """The ``TypeError`` for parameter ``param`` given ``value`` where ``expected`` is taken (E3).

    The message names the parameter, the expected kind and what was given, e.g.
    ``stream must be a Stream (or an object with __cuda_stream__), not Event``.
    The caller raises it.
    """
    given = "None" if value is None else type(value).__name__
    return TypeError(f"{param} must be {expected}, not {given}")
