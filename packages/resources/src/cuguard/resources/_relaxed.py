"""The calling thread's stream-capture mode while cuguard works on its own behalf (contract G6).

While a stream is captured into a graph, CUDA prohibits "potentially unsafe"
calls (``cuMemAlloc``, ``cuMemFree``, ``cuMemPoolCreate``, ``cuCtxSynchronize``...)
in the capturing thread, and, for a capture begun in global mode (the
default), in every other thread whose mode is global too: such a call fails
with ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` *and invalidates the capture*.
A thread in relaxed mode is never prohibited.

cuguard's own calls (setting up a memory pool and its access, importing a
shared pool, destroying a collected pool, freeing collected memory) are not
the user's captured work: they run with the calling thread switched to relaxed
mode for their duration (``cuThreadExchangeStreamCaptureMode``, one call each
way, thread-local; the second is skipped when the thread was relaxed
already), so they neither fail because of someone's capture nor break it. What
the user asks for directly (a plain ``Device.allocate``, ``allocate_pinned``)
keeps CUDA's rule.

- :func:`relax` and :func:`restore`: the two exchanges, as statuses (for
  releases, which report instead of raising);
- :func:`on_own_behalf`: run a step relaxed in an ordinary call, which raises;
- :func:`relaxed_failed`: the same failures, raised from the three statuses of a
  compiled call that makes the switch, the step and the restore itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from cuguard.errors import CUDAError, add_failure_note, driver, raise_status

__all__ = ["on_own_behalf", "relax", "relaxed_failed", "restore"]

_CALL = "cuThreadExchangeStreamCaptureMode"
_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
_relaxed_mode: list[Any] = []  # the CUstreamCaptureMode value, made on first use

T = TypeVar("T")


def relax() -> tuple[Any, Any]:
    """Put the calling thread in relaxed capture mode: ``(status, the mode it had)``.

    On a failure status the mode is unchanged and the second item is meaningless.
    """
    if not _relaxed_mode:
        from cuda.bindings import driver as types

        _relaxed_mode.append(types.CUstreamCaptureMode(_RELAXED))
    err, previous = driver.cuThreadExchangeStreamCaptureMode(_relaxed_mode[0])
    return err, previous


def restore(previous: Any) -> Any:
    """Give the calling thread back the mode :func:`relax` returned; the status (0 with no call when it was relaxed)."""
    if int(previous) == _RELAXED:
        return 0
    (err, _) = driver.cuThreadExchangeStreamCaptureMode(previous)
    return err


def on_own_behalf(fn: Callable[..., T], undo: Callable[[T], object] | None, *args: Any) -> T:
    """``fn(*args)`` with the calling thread in relaxed capture mode, its mode restored after (G6).

    For cuguard's own set-up steps inside an ordinary call. A refused switch
    to relaxed mode raises :class:`~cuguard.errors.CUDAError` naming
    ``cuThreadExchangeStreamCaptureMode`` before ``fn`` runs. If ``fn``
    raises, a refused restore is a note on its exception (G4). If ``fn``
    succeeded and the restore is refused, ``undo(result)`` (when given) takes
    back what ``fn`` made, its own failure a note, and the restore's
    :class:`~cuguard.errors.CUDAError` is raised saying that the thread stays
    in relaxed capture mode (nothing is retried, C4).
    """
    err, previous = relax()
    if err:
        raise_status(err, _CALL)
    try:
        result = fn(*args)
    except BaseException as exc:
        err = restore(previous)
        if err:
            add_failure_note(exc, CUDAError(err, _CALL, "the thread stays in relaxed capture mode"))
        raise
    err = restore(previous)
    if err:
        failure = CUDAError(err, _CALL, "the thread stays in relaxed capture mode")
        if undo is not None:
            try:
                undo(result)
            except CUDAError as undo_failure:
                add_failure_note(failure, undo_failure)
        raise failure
    return result


def relaxed_failed(switch: Any, status: Any, restored: Any, failed: Callable[[Any], CUDAError]) -> NoReturn:
    """Raise what :func:`on_own_behalf` raises, from the statuses of a compiled call that switched to relaxed
    mode (``switch``), made the step (``status``; ``failed(status)`` is its error) and restored the mode
    (``restored``). For a caller that found one of them non-zero.

    A refused switch raises :class:`~cuguard.errors.CUDAError` naming ``cuThreadExchangeStreamCaptureMode``
    (the step did not run); a failed step raises ``failed(status)``, a refused restore a note on it (G4); a
    refused restore after a successful step raises saying that the thread stays in relaxed capture mode.
    """
    if switch:
        raise_status(switch, _CALL)
    restore = CUDAError(restored, _CALL, "the thread stays in relaxed capture mode") if restored else None
    if status:
        failure = failed(status)
        if restore is not None:
            add_failure_note(failure, restore)
        raise failure
    if restore is None:
        raise RuntimeError("relaxed_failed() was called with three zero statuses")
    raise restore
