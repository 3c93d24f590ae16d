"""Contexts, the thread's current context, and switch-and-restore (contract G2, C1-C4).

Every operation above this layer that must run in a given context goes through
:func:`call_in` (ordinary calls, which raise) or :func:`cleanup_in`
(destructors and callbacks, which report). They are the only code in cuguard
that switches contexts, apart from :meth:`Context.set_current`.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from cuguard.errors import (
    CUDAError,
    ResourceClosedError,
    add_failure_note,
    driver,
    driver_token,
    format_handle,
    raise_status,
    report,
    report_error,
)

__all__ = ["Context", "call_in", "cleanup_in", "init_driver"]

T = TypeVar("T")

_init_lock = threading.Lock()
_initialized_for: list[Any] = []


def init_driver() -> None:
    """Initialize the active driver (``cuInit(0)``) once; later calls cost one comparison.

    Raises :class:`~cuguard.errors.CUDAError` if initialization fails, and
    :class:`~cuguard.errors.CUDADriverNotFoundError` with no driver at all.
    """
    # The seam caches resolved functions per installed driver, so the identity
    # of its cuInit tells whether this driver was initialized already.
    fn = driver.cuInit
    if _initialized_for and _initialized_for[0] is fn:
        return
    with _init_lock:
        (err,) = fn(0)
        if err:
            raise_status(err, "cuInit")
        _initialized_for[:] = [fn]


class Context:
    """A CUDA context: a device's primary context, one cuguard created, or a foreign one.

    - :meth:`primary` retains the primary context of a device; :meth:`close`
      (or garbage collection) releases that retain.
    - :meth:`create` creates a new context that this object owns; :meth:`close`
      destroys it.
    - :meth:`wrap` and :meth:`current` wrap a handle without owning it; their
      :meth:`close` only marks the wrapper closed.

    Contexts compare equal and hash by handle. A closed context refuses use
    with :class:`~cuguard.errors.ResourceClosedError` before anything reaches
    the driver: cuguard never switches to a context it destroyed, which would
    crash the process.
    """

    __slots__ = ("__weakref__", "_closed", "_device", "_driver", "_handle", "_int", "_kind")

    _handle: Any
    _int: int
    _device: int | None
    _kind: str  # "primary", "created" or "foreign"
    _closed: bool
    _driver: Any  # the driver_token() the context was made under

    def __init__(self) -> None:
        raise TypeError("use Context.primary(), Context.create(), Context.wrap() or Context.current()")

    @classmethod
    def _make(cls, handle: Any, device: int | None, kind: str) -> Context:
        self = object.__new__(cls)
        self._handle = handle
        self._int = int(handle)
        self._device = device
        self._kind = kind
        self._closed = False
        self._driver = driver_token()
        return self

    @classmethod
    def primary(cls, ordinal: int) -> Context:
        """Retain the primary context of device ``ordinal``.

        Initializes the driver if needed. Raises ``TypeError``/``ValueError``
        for a bad ordinal and :class:`~cuguard.errors.CUDAError` when the driver
        refuses; nothing is retained then. Does not change the current context.
        """
        ordinal = _ordinal(ordinal)
        init_driver()
        err, dev = driver.cuDeviceGet(ordinal)
        if err:
            raise_status(err, "cuDeviceGet")
        err, handle = driver.cuDevicePrimaryCtxRetain(dev)
        if err:
            raise_status(err, "cuDevicePrimaryCtxRetain")
        return cls._make(handle, ordinal, "primary")

    @classmethod
    def create(cls, ordinal: int, flags: int = 0) -> Context:
        """Create a new context on device ``ordinal``, owned by the returned object.

        The driver pushes the new context on the thread's context stack; this
        call pops it again, so the caller's context (and stack) is as before
        (G2). If that pop fails, the new context is destroyed and
        :class:`~cuguard.errors.CUDAError` is raised (C2); as the destroyed
        context was current, none is current then. Raises
        ``CUDAError`` when creation fails; nothing is created then.
        """
        ordinal = _ordinal(ordinal)
        init_driver()
        err, dev = driver.cuDeviceGet(ordinal)
        if err:
            raise_status(err, "cuDeviceGet")
        err, handle = _ctx_create(flags, dev)
        if err:
            raise_status(err, "cuCtxCreate")
        # cuCtxCreate pushed the new context on the thread's context stack:
        # popping it restores the stack, and so the caller's context, exactly.
        err, _ = driver.cuCtxPopCurrent()
        if err:
            error = CUDAError(
                err,
                "cuCtxPopCurrent",
                "the caller's context could not be restored after creating a context; the new context was "
                "destroyed, so no context is current now; call set_current() on the context you want",
            )
            (derr,) = driver.cuCtxDestroy(handle)
            if derr:
                # Not destroyed after all: the message must not say so (C2 names what is current).
                error = CUDAError(
                    err,
                    "cuCtxPopCurrent",
                    "the caller's context could not be restored after creating a context, and the new context "
                    f"{format_handle(handle)} could not be destroyed either: it was leaked and may still be current; "
                    "call set_current() on the context you want",
                )
                add_failure_note(error, derr, "cuCtxDestroy", handle)
            raise error
        return cls._make(handle, ordinal, "created")

    @classmethod
    def wrap(cls, handle: Any, device: int | None = None) -> Context:
        """Wrap a context handle made elsewhere, without owning it.

        ``handle`` is a ``CUcontext`` (or anything with ``__int__`` giving the
        handle). A null handle raises ``ValueError``.
        """
        if int(handle) == 0:
            raise ValueError("cannot wrap a null CUcontext")
        return cls._make(handle, device, "foreign")

    @staticmethod
    def current() -> Context | None:
        """The calling thread's current context (a non-owning wrapper), or ``None``.

        Initializes the driver if needed. Raises :class:`~cuguard.errors.CUDAError`
        if the driver cannot say.
        """
        init_driver()
        err, handle = driver.cuCtxGetCurrent()
        if err:
            raise_status(err, "cuCtxGetCurrent")
        if int(handle) == 0:
            return None
        return Context._make(handle, None, "foreign")

    @property
    def handle(self) -> Any:
        """The ``CUcontext`` handle; raises ``ResourceClosedError`` once closed."""
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")
        return self._handle

    @property
    def is_primary(self) -> bool:
        """Whether this object holds a retain of a device's primary context."""
        return self._kind == "primary"

    @property
    def owned(self) -> bool:
        """Whether closing this object releases the context (primary retain or created)."""
        return self._kind != "foreign"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def device(self) -> int:
        """The ordinal of the device this context belongs to.

        Known from creation; for a wrapped context it is asked from the driver
        once (running in this context, then restoring the caller's). That query
        raises ``ResourceClosedError`` for a closed context and
        :class:`~cuguard.errors.CUDAError` if the driver refuses (C2 applies to the
        restore).
        """
        if self._device is None:
            self._device = call_in(self, _current_device, None)
        return self._device

    def set_current(self) -> Context | None:
        """Make this the calling thread's current context with one ``cuCtxSetCurrent``.

        Returns the context that was current before (a non-owning wrapper), or
        ``None``. This is one of the two calls that change the current context
        on purpose (G2). Raises ``ResourceClosedError`` for a closed context and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; the current
        context is then unchanged.
        """
        handle = self.handle
        err, previous = driver.cuCtxGetCurrent()
        if err:
            raise_status(err, "cuCtxGetCurrent")
        (err,) = driver.cuCtxSetCurrent(handle)
        if err:
            raise_status(err, "cuCtxSetCurrent")
        return None if int(previous) == 0 else Context._make(previous, None, "foreign")

    def synchronize(self) -> None:
        """Wait for all work in this context; raises :class:`~cuguard.errors.CUDAError` on failure."""
        call_in(self, _synchronize, None)

    def close(self) -> None:
        """Release what this object owns: the primary retain, or the created context.

        Idempotent. A foreign wrapper is only marked closed. If the release
        fails, raises :class:`~cuguard.errors.CUDAError`, and the context is
        considered gone (it is never released or switched to again: a leak is
        preferred to a crash). Resources of the context must be closed first.
        """
        if self._closed:
            return
        self._closed = True
        if self._kind == "foreign":
            return
        err, call = self._release()
        if err:
            raise_status(err, call)

    def _release(self) -> tuple[Any, str]:
        """Drop the primary retain or destroy the created context; ``(status, call)`` of the last step."""
        if self._kind == "primary":
            err, dev = driver.cuDeviceGet(self._device)
            if err:
                return err, "cuDeviceGet"
            (err,) = driver.cuDevicePrimaryCtxRelease(dev)
            return err, "cuDevicePrimaryCtxRelease"
        (err,) = driver.cuCtxDestroy(self._handle)
        return err, "cuCtxDestroy"

    def __enter__(self) -> Context:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as failure:  # noqa: BLE001 - attached to the propagating exception (G4)
            add_failure_note(exc, failure, handle=self._handle)

    @property
    def stale(self) -> bool:
        """Whether the driver this context was made under is no longer installed."""
        return self._driver is not driver_token()

    def __del__(self) -> None:
        if self._closed or self._kind == "foreign" or sys.is_finalizing():
            return
        if self._driver is not driver_token():
            # Its driver was uninstalled (a simulator of an earlier test): the
            # driver that owned it is gone, so there is nothing to release, and
            # releasing into the driver now installed would hit a stranger.
            self._closed = True
            return
        self._closed = True
        try:
            err, call = self._release()
        except CUDAError as exc:  # no driver any more
            report_error(exc, self._handle)
            return
        if err:
            report(err, call, self._handle, "the context was leaked")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Context):
            return self._int == other._int
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._int)

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        dev = "" if self._device is None else f" device={self._device}"
        return f"<Context {self._kind} {format_handle(self._int)}{dev}{state}>"


def _ordinal(ordinal: object) -> int:
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        raise TypeError(f"a device ordinal must be an int, not {type(ordinal).__name__}")
    if ordinal < 0:
        raise ValueError(f"a device ordinal must be 0 or more, not {ordinal}")
    return ordinal


def _ctx_create(flags: int, dev: Any) -> Any:
    from cuguard.context._compat import ctx_create

    return ctx_create(flags, dev)


def _current_device() -> int:
    err, dev = driver.cuCtxGetDevice()
    if err:
        raise_status(err, "cuCtxGetDevice")
    return int(dev)


def _synchronize() -> None:
    (err,) = driver.cuCtxSynchronize()
    if err:
        raise_status(err, "cuCtxSynchronize")


def _describe(handle: Any) -> str:
    return "no context" if int(handle) == 0 else f"context {format_handle(handle)}"


def _restore_error(err: Any, previous: Any) -> CUDAError:
    """The C2 error: the caller's context could not be restored; names what is current now."""
    now_err, now = driver.cuCtxGetCurrent()
    current = "unknown (cuCtxGetCurrent failed)" if now_err else _describe(now)
    return CUDAError(
        err,
        "cuCtxSetCurrent",
        f"the caller's context ({_describe(previous)}) could not be restored; the context now current is "
        f"{current}; call set_current() on the context you want before further CUDA work on this thread",
    )


def call_in(context: Context, op: Callable[..., T], undo: Callable[[T], object] | None, *args: Any) -> T:
    """Run ``op(*args)`` with ``context`` current, then restore the caller's context.

    The switch for ordinary calls (C1, C2, C4):

    - the current context is asked once; when it is ``context`` already,
      ``op`` runs with no switch at all;
    - otherwise one ``cuCtxSetCurrent`` switches in and one restores;
    - if ``op`` raises, the caller's context is restored and ``op``'s exception
      propagates; a failed restore is attached to it as a note (G4);
    - if ``op`` succeeded but the restore fails, ``undo(result)`` runs while
      ``context`` is still current to remove what ``op`` created (pass
      ``None`` only for operations that create nothing), and
      :class:`~cuguard.errors.CUDAError` is raised saying the caller's
      context could not be restored and which context is current now. If the
      current context is no longer ``context``, ``undo`` is not run (it would
      act in the wrong context): what ``op`` created is leaked and a note says so;
    - nothing is retried.

    Raises ``ResourceClosedError`` for a closed ``context`` before any driver
    call, and ``CUDAError`` when the switch in fails (nothing ran then).
    """
    if context._closed:
        raise ResourceClosedError(f"{context!r} is closed")
    err, previous = driver.cuCtxGetCurrent()
    if err:
        raise_status(err, "cuCtxGetCurrent")
    if int(previous) == context._int:
        return op(*args)
    (err,) = driver.cuCtxSetCurrent(context._handle)
    if err:
        raise_status(err, "cuCtxSetCurrent")
    try:
        result = op(*args)
    except BaseException as exc:
        (err,) = driver.cuguardRestoreContext(previous)
        if err:
            add_failure_note(exc, _restore_error(err, previous))
        raise
    (err,) = driver.cuguardRestoreContext(previous)
    if err:
        _fail_restore(err, previous, context, result, undo)
    return result


def _fail_restore(err: Any, previous: Any, context: Context, result: Any, undo: Callable[[Any], object] | None) -> None:
    error = _restore_error(err, previous)
    if undo is not None:
        now_err, now = driver.cuCtxGetCurrent()
        if not now_err and int(now) == context._int:
            try:
                undo(result)
            except Exception as undo_exc:  # noqa: BLE001 - attached as a note (G4)
                add_failure_note(error, undo_exc)
        else:
            error.add_note(
                "what this call created was leaked: its context is no longer current, so it could not be released"
            )
    raise error


def cleanup_in(context: Context, op: Callable[..., T], *args: Any) -> T | None:
    """Run ``op(*args)`` with ``context`` current for a destructor or callback (C3).

    Like :func:`call_in`, but a failure to switch in or to restore is
    reported as :class:`~cuguard.errors.CUDAWarning` instead of raised. When
    the switch in fails, ``op`` is not run and ``None`` is returned (the caller
    leaks what it meant to release). When the restore fails, the thread keeps
    ``context``, the context the cleanup used. Exceptions raised by ``op``
    propagate after the restore. Nothing is retried.
    """
    if context._closed:
        report_error(ResourceClosedError(f"{context!r} is closed"), context._int, "nothing was released")
        return None
    err, previous = driver.cuCtxGetCurrent()
    if err:
        report(err, "cuCtxGetCurrent", None, "nothing was released")
        return None
    if int(previous) == context._int:
        return op(*args)
    (err,) = driver.cuCtxSetCurrent(context._handle)
    if err:
        report(err, "cuCtxSetCurrent", context._handle, "nothing was released")
        return None
    try:
        return op(*args)
    finally:
        (err,) = driver.cuguardRestoreContext(previous)
        if err:
            report(
                err,
                "cuCtxSetCurrent",
                previous,
                f"the caller's context could not be restored; the thread keeps {_describe(context._handle)}",
            )
