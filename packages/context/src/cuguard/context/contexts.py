"""Contexts, the thread's current context, and switch-and-restore (contract G2, C1-C4).

Every operation above this layer that must run in a given context goes through
:func:`call_in` (ordinary calls, which raise) or :func:`cleanup_in`
(destructors and callbacks, which report). They are the only code in cuguard
that switches contexts, apart from :meth:`Context.set_current`.

This module is public (unlike the layers' private modules) for one reason: the
compiled build. Cython's pure-Python mode compiles this same source, with
``contexts.pxd`` declaring :class:`Context` a compiled class whose fields are C
slots, and the compiled layers above type the contexts they keep with it, which
needs the module that defines it. Import the names from :mod:`cuguard.context`.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from cuguard.errors import (
    CUDAError,
    ResourceClosedError,
    add_failure_note,
    call_unraisable,
    driver,
    driver_token,
    format_handle,
    raise_status,
    report,
    report_error,
)
from cuguard.errors.lowlevel import (
    INT_LIMIT,
    UINT_LIMIT,
    collection_deferred,
    defer,
    deferring_lock,
    driver_state,
    int_argument,
    is_integer,
    on_driver_change,
    refuse_construction,
    wrong_kind,
)
from cuguard.errors.owners import Unique  # from its defining module: the compiled Context derives from it

__all__ = ["Context", "call_in", "cleanup_in", "init_driver"]

T = TypeVar("T")

_init_lock = deferring_lock()
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


#: Called with the context after each successful :meth:`Context.synchronize` (layers above observe
#: the host's ordering with it; an observer never raises).
_synchronized: list[Callable[[Context], None]] = []


class Context(Unique):
    """A CUDA context: a device's primary context, one cuguard created, or a foreign one.

    - :meth:`primary` returns the primary context of a device. There is one such
      object per device and driver: the primary context is retained once, on
      first use, and held until the process exits (or, for a simulated driver,
      until that driver is closed), as the CUDA runtime does (O2). Its
      :meth:`close` releases nothing, so it can never go away under a thread
      where it is current.
    - :meth:`create` creates a new context that this object owns; :meth:`close`
      (or garbage collection) destroys it.
    - :meth:`wrap` and :meth:`current` wrap a handle without owning it; their
      :meth:`close` only marks the wrapper closed.

    ``with ctx:`` makes the context current for the block and restores the
    caller's context after, whatever happens inside (see :meth:`__enter__`
    and :meth:`__exit__`); it does not close the context.

    Contexts compare equal and hash by handle. Contexts are not copyable or
    picklable (O1). A context that refuses use raises
    :class:`~cuguard.errors.ResourceClosedError` before anything reaches the
    driver, saying why: closed, destroyed by cuguard (every wrapper of a context
    cuguard destroyed knows it, O4), or made under a driver that is no longer
    installed (O3). cuguard never switches to a context it destroyed, which
    would crash the process.
    """

    __slots__ = ("__weakref__", "_closed", "_device", "_driver", "_handle", "_int", "_kind", "_released", "_why")

    _handle: Any
    _int: int
    _device: int | None
    _kind: str  # "primary", "created" or "foreign"
    # _closed: unusable now (released, destroyed, or its driver is not installed);
    # _released: closed or destroyed for good; _why: "closed" or "destroyed" once released.
    _closed: bool
    _released: bool
    _why: str
    _driver: Any  # the driver_token() the context was made under

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(
            Context, "Context.primary(), Context.create(), Context.wrap(), Context.current() or Device.context"
        )

    @classmethod
    def _make(cls, handle: Any, device: int | None, kind: str) -> Context:
        self = cls.__new__(cls)
        self._handle = handle
        self._int = value = int(handle)
        self._device = device
        self._kind = kind
        self._driver = token = driver_token()
        self._released = False
        self._why = ""
        self._closed = False
        destroyed = driver_state().get(_DESTROYED)
        if destroyed and value in destroyed:
            if kind == "foreign":
                self._released = self._closed = True
                self._why = "destroyed"
            else:  # the driver gave a destroyed context's handle to a new context
                destroyed.discard(value)
                driver_state().get(_GONE, set()).discard(value)
        with _registry_lock:
            _contexts[id(self)] = self
        if token is not driver_token():  # the driver changed meanwhile
            self._closed = True
        return self

    @classmethod
    def primary(cls, ordinal: int) -> Context:
        """The primary context of device ``ordinal``, retained once and held for the life of the process (O2).

        Returns the same object for the same ordinal under the same driver,
        from any thread. The first call initializes the driver and retains the
        primary context; that retain is never released while the driver is
        installed, so ``Device(0).set_current()`` and calls through temporary
        devices are safe and cheap. Raises ``TypeError``/``ValueError`` for a
        bad ordinal and :class:`~cuguard.errors.CUDAError` when the driver
        refuses; nothing is retained then. Does not change the current context.
        """
        if type(ordinal) is not int or not 0 <= ordinal < INT_LIMIT:
            ordinal = _ordinal(ordinal)
        held: Context | None
        primaries = driver_state().get(_PRIMARY)
        if primaries is not None:
            held = primaries.get(ordinal)
            if held is not None:
                return held
        with _primary_lock:
            primaries = driver_state().setdefault(_PRIMARY, {})
            held = primaries.get(ordinal)
            if held is not None:
                return held
            init_driver()
            err, dev = driver.cuDeviceGet(ordinal)
            if err:
                raise_status(err, "cuDeviceGet")
            err, handle = driver.cuDevicePrimaryCtxRetain(dev)
            if err:
                raise_status(err, "cuDevicePrimaryCtxRetain")
            held = cls._make(handle, ordinal, "primary")
            primaries[ordinal] = held
        return held

    @classmethod
    def create(cls, ordinal: int, flags: int = 0) -> Context:
        """Create a new context on device ``ordinal``, owned by the returned object.

        The driver pushes the new context on the thread's context stack; this
        call pops it again, so the caller's context (and stack) is as before
        (G2). If that pop fails, the new context is destroyed and
        :class:`~cuguard.errors.CUDAError` is raised (C2) naming the context
        current now. Raises ``CUDAError`` when creation fails; nothing is
        created then. ``ordinal`` and ``flags`` are integers (NumPy's too); a
        bool, a float or another object raises ``TypeError``, an ordinal
        outside ``[0, 2**31)`` or flags outside ``[0, 2**32)`` ``ValueError``,
        before the driver is asked.
        """
        ordinal = _ordinal(ordinal)
        flags = int_argument("flags", flags, 0, UINT_LIMIT)  # CU_CTX_* bits, an unsigned int
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
            (derr,) = driver.cuCtxDestroy(handle)
            now_err, now = driver.cuCtxGetCurrent()
            current = "unknown (cuCtxGetCurrent failed)" if now_err else _describe(now)
            if derr:
                # Not destroyed after all: the message must not say so (C2 names what is current).
                error = CUDAError(
                    err,
                    "cuCtxPopCurrent",
                    "the caller's context could not be restored after creating a context, and the new context "
                    f"{format_handle(handle)} could not be destroyed either: it was leaked; the context now current "
                    f"is {current}; call set_current() on the context you want",
                )
                add_failure_note(error, derr, "cuCtxDestroy", handle)
            else:
                _record_destroyed(int(handle))
                _record_gone(int(handle))
                error = CUDAError(
                    err,
                    "cuCtxPopCurrent",
                    "the caller's context could not be restored after creating a context; the new context was "
                    f"destroyed; the context now current is {current}; call set_current() on the context you want",
                )
            raise error
        return cls._make(handle, ordinal, "created")

    @classmethod
    def wrap(cls, handle: Any, device: int | None = None) -> Context:
        """Wrap a context handle made elsewhere, without owning it.

        ``handle`` is a ``CUcontext`` (or an int, or anything whose ``__int__``
        gives the handle); anything else raises ``TypeError``, a null handle
        ``ValueError``. A handle of a context cuguard destroyed gives a wrapper
        that refuses use (O4).
        """
        if isinstance(handle, bool | float | str | bytes) or not hasattr(type(handle), "__int__"):
            raise TypeError(f"handle must be a CUcontext or an int, not {type(handle).__name__}")
        if device is not None:
            if not is_integer(device):
                raise wrong_kind("device", "an int or None", device)
            device = int_argument("device", device, 0, INT_LIMIT)
        try:
            value = int(handle)
        except (TypeError, ValueError):  # an __int__ that refuses (a NumPy array of several items...)
            raise TypeError(f"handle must be a CUcontext or an int, not {type(handle).__name__}") from None
        if value == 0:
            raise ValueError("cannot wrap a null CUcontext")
        return cls._make(handle, device, "foreign")

    @staticmethod
    def current() -> Context | None:
        """The calling thread's current context, or ``None``.

        The device's held primary context object when that is current, else a
        non-owning wrapper. Initializes the driver if needed. Raises
        :class:`~cuguard.errors.CUDAError` if the driver cannot say.
        """
        init_driver()
        err, handle = driver.cuCtxGetCurrent()
        if err:
            raise_status(err, "cuCtxGetCurrent")
        return _wrap_current(handle)

    @property
    def handle(self) -> Any:
        """The ``CUcontext`` handle; raises ``ResourceClosedError`` once unusable (see the class)."""
        if self._closed:
            raise self._refusal()
        return self._handle

    def _refusal(self) -> ResourceClosedError:
        """The error for a use of this context, which refuses use: says why."""
        if self._why == "destroyed":
            return ResourceClosedError(f"{self!r} is closed: cuguard destroyed it; nothing may use or switch to it")
        if self._released:
            return ResourceClosedError(f"{self!r} is closed")
        return ResourceClosedError(
            f"{self!r} belongs to a CUDA driver that is no longer installed; its handle cannot reach the driver "
            "installed now"
        )

    @property
    def is_primary(self) -> bool:
        """Whether this is a device's primary context, held by cuguard for the life of the process."""
        return self._kind == "primary"

    @property
    def owned(self) -> bool:
        """Whether closing this object destroys the context (a context made by :meth:`create`)."""
        return self._kind == "created"

    @property
    def closed(self) -> bool:
        """Whether the context refuses use: closed, destroyed, or of a driver that is no longer installed."""
        return self._closed

    @property
    def device(self) -> int:
        """The ordinal of the device this context belongs to.

        Known from creation; for a wrapped context it is asked from the driver
        once (running in this context, then restoring the caller's). That query
        raises ``ResourceClosedError`` for a context that refuses use and
        :class:`~cuguard.errors.CUDAError` if the driver refuses (C2 applies to the
        restore).
        """
        if self._device is None:
            self._device = call_in(self, _current_device, None)
        return self._device

    def set_current(self) -> Context | None:
        """Make this the calling thread's current context with one ``cuCtxSetCurrent``.

        Returns the context that was current before (see :meth:`current`), or
        ``None``. This is one of the two calls that change the current context
        on purpose (G2). Raises ``ResourceClosedError`` for a context that
        refuses use and :class:`~cuguard.errors.CUDAError` if the driver
        refuses; the current context is then unchanged.
        """
        if self._closed:
            raise self._refusal()
        err, previous = driver.cuCtxGetCurrent()
        if err:
            raise_status(err, "cuCtxGetCurrent")
        (err,) = driver.cuCtxSetCurrent(self._handle)
        if err:
            raise_status(err, "cuCtxSetCurrent")
        return _wrap_current(previous)

    def synchronize(self) -> None:
        """Wait for all work in this context; raises :class:`~cuguard.errors.CUDAError` on failure."""
        call_in(self, _synchronize, None)
        for observer in _synchronized:
            observer(self)  # e.g. the race checker: the host now follows every stream of this context (B7)

    def close(self) -> None:
        """Release what this object owns. Idempotent.

        - A context made by :meth:`create` is destroyed. Every other object
          that refers to it (wrappers, resources loaded into it) then refuses
          use (O4). If the destroy fails, raises
          :class:`~cuguard.errors.CUDAError` and the context is considered gone
          all the same (it is never destroyed or switched to again: a leak is
          preferred to a crash). Close its resources first: a resource of a
          destroyed context is leaked, never released.
        - A primary context is held for the life of the process (O2): closing
          it releases nothing and leaves it usable.
        - A foreign wrapper is only marked closed.

        Raises ``ResourceClosedError`` for a context of a driver that is no
        longer installed (O3); nothing reaches any driver then.
        """
        if self._released:
            return
        if self._driver is not driver_token():
            raise self._refusal()
        if self._kind == "primary":
            return
        if self._kind == "foreign":
            self._released = self._closed = True
            self._why = "closed"
            return
        _record_destroyed(self._int)
        (err,) = driver.cuCtxDestroy(self._handle)
        if err:
            raise_status(err, "cuCtxDestroy", f"the context {format_handle(self._handle)} was leaked")
        _record_gone(self._int)

    def __enter__(self) -> Context:
        """``with ctx:`` makes this context current for the block; the caller's context comes back after.

        Asks the driver for the current context once; when it is this one
        already, nothing is switched (C1); otherwise one ``cuCtxSetCurrent``
        switches in. Blocks nest and re-enter freely (``with a: with b: with
        a:``), each block on its own thread: what a block restores is what
        was current on that thread when it began. Raises
        ``ResourceClosedError`` for a context that refuses use (closed,
        destroyed, or of a driver no longer installed) and
        :class:`~cuguard.errors.CUDAError` when the driver refuses either
        call; the current context is then as before and the block does not
        run. Leaving the block never closes or destroys the context: use
        :meth:`close` for that.
        """
        if self._closed:
            raise self._refusal()
        err, previous = driver.cuCtxGetCurrent()
        if err:
            raise_status(err, "cuCtxGetCurrent")
        switched = int(previous) != self._int
        if switched:
            (err,) = driver.cuCtxSetCurrent(self._handle)
            if err:
                raise_status(err, "cuCtxSetCurrent")
        _scope_stack().append((self, previous, switched))
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Restore the context that was current when the block began, whatever happened inside.

        After a switch in, one ``cuCtxSetCurrent`` restores the caller's
        context. When nothing was switched in, the current context is asked
        once and restored only if the block changed it (C1). A caller's
        context that cuguard destroyed meanwhile is not switched back to: the
        thread is left with no context (S2). A failed restore while an
        exception leaves the block is a note on that exception, which
        propagates (G4); otherwise it raises :class:`~cuguard.errors.CUDAError`
        saying the caller's context could not be restored and naming the
        context current now (C2). Nothing is retried. Once the driver this
        context was made under is uninstalled, leaving the block calls no
        driver (O3).
        """
        stack = _scope_stack()
        for index in range(len(stack) - 1, -1, -1):
            if stack[index][0] is self:
                _, previous, switched = stack.pop(index)
                break
        else:
            raise RuntimeError(f"{self!r}: __exit__ without a matching __enter__ on this thread")
        if self._driver is not driver_token():
            return
        if not switched:
            err, now = driver.cuCtxGetCurrent()
            if not err and int(now) == int(previous):
                return
        if _any_gone:
            previous = _restorable(previous)
        (err,) = driver.cuguardRestoreContext(previous)
        if not err:
            return
        error = _restore_error(err, previous)
        if exc is not None:
            add_failure_note(exc, error)
            return
        raise error

    @property
    def stale(self) -> bool:
        """Whether the driver this context was made under is no longer installed."""
        return self._driver is not driver_token()

    # sys.is_finalizing, bound in the class: at the very end of finalization the sys module (and
    # this module's globals) may be cleared while a context is still alive (S1).
    _finalizing = staticmethod(sys.is_finalizing)

    def __del__(self) -> None:
        try:
            if self._released or self._kind != "created" or self._finalizing():
                return
        except AttributeError:  # construction never finished
            return
        if self._driver is not driver_token():
            # O3: its driver is gone (a simulator of an earlier test); releasing
            # into the driver installed now would hit a stranger.
            return
        if _gc_running:
            # O6: its resources in the same garbage go first. Nothing more here: this thread may
            # hold a cuguard lock (the registry's, say) that the destroy takes; _gc_phase decides.
            _after_gc.append(self)
        elif collection_deferred():
            # O5: no CUDA call on the driver's thread; S2: this thread holds a cuguard lock,
            # which the destroy may take again (_record_destroyed takes the registry's).
            defer(self._collect)
        else:
            self._collect()

    def _collect(self) -> None:
        """Destroy a collected context; a failure is a warning (W1)."""
        if self._released or self._driver is not driver_token():
            return
        _record_destroyed(self._int)
        (err,) = driver.cuCtxDestroy(self._handle)
        if err:
            report(err, "cuCtxDestroy", self._handle, "the context was leaked", context=self)
        else:
            _record_gone(self._int)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Context):
            return self._int == other._int
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._int)

    def __repr__(self) -> str:
        if self._why == "destroyed":
            state = " destroyed"
        elif self._released:
            state = " closed"
        elif self._closed:
            state = " of an uninstalled driver"
        else:
            state = ""
        dev = "" if self._device is None else f" device={self._device}"
        return f"<Context {self._kind} {format_handle(self._int)}{dev}{state}>"


# --- what is kept once per driver, and the objects that must hear about it ----------------------

_DESTROYED = "destroyed contexts"  # driver_state() key: ints of contexts cuguard destroyed (O4)
_PRIMARY = "primary contexts"  # driver_state() key: ordinal -> the held primary Context (O2)
_primary_lock = deferring_lock()
_registry_lock = deferring_lock()
# Every Context object, by identity (contexts compare equal by handle, so no set would do).
_contexts: weakref.WeakValueDictionary[int, Context] = weakref.WeakValueDictionary()


_GONE = "contexts destroyed for good"  # driver_state() key: ints of contexts whose cuCtxDestroy succeeded


#: Whether _record_gone ever ran, for any driver (a module flag: one global read on the switch paths;
#: a C global in the compiled build).
_any_gone = False


def _record_gone(value: int) -> None:
    """The driver destroyed context ``value``: nothing may switch to it again, a restore included (S2)."""
    global _any_gone
    _any_gone = True
    state = driver_state()
    gone = state.get(_GONE)
    if gone is None:
        gone = state[_GONE] = set()
    gone.add(value)


def _record_destroyed(value: int) -> None:
    """cuguard destroys context ``value`` now: every Context object of it refuses use from now on (O4)."""
    state = driver_state()
    destroyed = state.get(_DESTROYED)
    if destroyed is None:
        destroyed = state[_DESTROYED] = set()
    destroyed.add(value)
    token = driver_token()
    with _registry_lock:
        contexts = list(_contexts.values())
    for ctx in contexts:
        if ctx._int == value and ctx._driver is token and not ctx._released:
            ctx._released = ctx._closed = True
            ctx._why = "destroyed"


def _driver_changed(token: Any) -> None:
    """The installed driver changed: objects of other drivers refuse use, those of ``token`` are usable (O3)."""
    with _registry_lock:
        contexts = list(_contexts.values())
    for ctx in contexts:
        ctx._closed = ctx._released or ctx._driver is not token


on_driver_change(_driver_changed)


def _wrap_current(handle: Any) -> Context | None:
    """``None`` for a null handle, the held primary context object for a primary one, else a wrapper."""
    value = int(handle)
    if value == 0:
        return None
    primaries = driver_state().get(_PRIMARY)
    if primaries:
        for held in primaries.values():
            if held._int == value:
                return held  # type: ignore[no-any-return]
    return Context._make(handle, None, "foreign")


# --- garbage collection order (O6) ----------------------------------------------------------------

_gc_running = False
_after_gc: list[Context] = []


def _gc_phase(phase: str, info: dict[str, int], _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
    """A context collected during a collection is destroyed when the collection ends (O6).

    Its resources collected in the same pass have then been released first.
    """
    global _gc_running
    if _finalizing():  # module globals may be cleared by now (S1)
        return
    if phase == "start":
        _gc_running = True
        return
    _gc_running = False
    if not _after_gc:
        return
    pending = _after_gc[:]
    del _after_gc[:]
    if collection_deferred():
        # A collection inside a CUDA callback (O5) or while this thread holds a cuguard lock that
        # the destroy may take again (S2): the release thread destroys them, after the releases
        # this collection handed it (O6 keeps its order there).
        for ctx in pending:
            defer(ctx._collect)
        return
    for ctx in pending:
        call_unraisable(ctx._collect, what="collection of a CUDA context")


gc.callbacks.append(_gc_phase)


_scopes = threading.local()


def _scope_stack() -> list[tuple[Context, Any, bool]]:
    """The calling thread's open ``with ctx:`` blocks: (context, the caller's context handle, switched)."""
    stack: list[tuple[Context, Any, bool]] | None = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    return stack


def _ordinal(ordinal: object) -> int:
    return int_argument("ordinal", ordinal, 0, INT_LIMIT)  # a CUdevice, a C int


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


_NO_CONTEXT = 0  # what cuCtxSetCurrent takes for "no context"


def _restorable(previous: Any) -> Any:
    """``previous``, or no context when it is one cuguard destroyed (S2).

    A created context released elsewhere (on another thread, or by cuguard's
    release thread) may still be current on this one; switching back to it
    would crash the real driver, so the thread is left with no context instead.
    """
    gone = driver_state().get(_GONE)
    if gone and int(previous) in gone:
        return _NO_CONTEXT
    return previous


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
    - nothing is retried;
    - when the caller's current context is one cuguard destroyed (a created
      context released on another thread while it was current here), the
      restore leaves no context current: switching back to a destroyed
      context crashes the real driver (S2).

    Raises ``TypeError`` when ``context`` is not a :class:`Context`,
    ``ResourceClosedError`` for a closed ``context`` before any driver
    call, and ``CUDAError`` when the switch in fails (nothing ran then).
    """
    if type(context) is not Context:
        raise wrong_kind("context", "a Context", context)
    if context._closed:
        raise context._refusal()
    err, previous = driver.cuCtxGetCurrent()
    if err:
        raise_status(err, "cuCtxGetCurrent")
    if int(previous) == context._int:
        return op(*args)
    if _any_gone:  # one flag read on the switch path until some context was ever destroyed
        previous = _restorable(previous)
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


def call_switched(  # noqa: PLR0917  # positional: a keyword call is not specialized on the hot path
    context: Context, previous: Any, fn: Callable[[Any], Any], call: str, undo: Callable[[Any], object], arg: Any
) -> Any:
    """:func:`call_in`'s switch path for one creating driver call of one argument, inlined for the hot paths.

    For a caller that has just read the current context (``previous``, a
    handle or an int) and found it is not the open ``context``: switch in
    with one ``cuCtxSetCurrent``, make the driver call ``fn(arg) -> (status,
    value)`` (``call`` is its name), restore ``previous`` with one call, and
    return ``value``. The driver calls and every failure are exactly
    :func:`call_in`'s: a refused switch raises (nothing ran); a failed call
    raises its :class:`~cuguard.errors.CUDAError` after the restore, a failed
    restore being a note on it (G4); a failed restore after a successful call
    runs ``undo(value)`` while ``context`` is still current and raises the C2
    error. Nothing is retried.
    """
    if _any_gone:  # one flag read on the switch path until some context was ever destroyed
        previous = _restorable(previous)
    (err,) = driver.cuCtxSetCurrent(context._handle)
    if err:
        raise_status(err, "cuCtxSetCurrent")
    try:
        err, value = fn(arg)
    except BaseException as exc:  # the bindings refused the argument: restore, as call_in does
        (rerr,) = driver.cuguardRestoreContext(previous)
        if rerr:
            add_failure_note(exc, _restore_error(rerr, previous))
        raise
    (rerr,) = driver.cuguardRestoreContext(previous)
    if err or rerr:
        _switched_failed(err, rerr, value, previous, context, call=call, undo=undo)
    return value


def call_switched_by(  # noqa: PLR0917  # as call_switched
    context: Context,
    previous: Any,
    op: Callable[[int, Any, Any], tuple[Any, Any, Any, Any]],
    call: str,
    undo: Callable[[Any], object],
    arg: Any,
) -> Any:
    """:func:`call_switched` with the switch, the call and the restore made by one compiled ``op``.

    ``op(context address, previous, arg)`` switches to ``context``, makes the
    driver call, switches back to ``previous`` and returns ``(switch status,
    status, value, restore status)`` (a refused switch: nothing else ran). Every
    failure is handled here exactly as :func:`call_switched` handles it: a
    refused switch raises; a failed call raises after the restore, a failed
    restore being a note on it (G4); a failed restore after a successful call
    runs ``undo(value)`` while ``context`` is current and raises the C2 error.
    """
    if _any_gone:
        previous = _restorable(previous)
    serr, err, value, rerr = op(context._int, previous, arg)
    if serr:
        raise_status(serr, "cuCtxSetCurrent")
    if err or rerr:
        _switched_failed(err, rerr, value, previous, context, call=call, undo=undo)
    return value


def _switched_failed(
    err: Any, rerr: Any, value: Any, previous: Any, context: Context, *, call: str, undo: Callable[[Any], object]
) -> None:
    if err:
        error = CUDAError(err, call)
        if rerr:
            add_failure_note(error, _restore_error(rerr, previous))
        raise error
    _fail_restore(rerr, previous, context, value, undo)


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


def cleanup_in(context: Context, op: Callable[..., T], *args: Any, resource: tuple[str, Any] | None = None) -> T | None:
    """Run ``op(*args)`` with ``context`` current for a destructor or callback (C3).

    Like :func:`call_in`, but a failure to switch in or to restore is
    reported as :class:`~cuguard.errors.CUDAWarning` instead of raised. When
    the switch in fails, ``op`` is not run and ``None`` is returned (the caller
    leaks what it meant to release). When the restore fails, the thread keeps
    ``context``, the context the cleanup used. Exceptions raised by ``op``
    propagate after the restore. Nothing is retried.

    ``resource`` is ``(what, handle)`` of the object being released: a
    warning then names it and says it was leaked, so that several resources
    that could not be released give several warnings (W1, W2).
    """
    leaked = (
        "nothing was released" if resource is None else f"the {resource[0]} {format_handle(resource[1])} was leaked"
    )
    if type(context) is not Context:
        raise wrong_kind("context", "a Context", context)
    if context._closed:
        report_error(context._refusal(), context._int, leaked)
        return None
    err, previous = driver.cuCtxGetCurrent()
    if err:
        report(err, "cuCtxGetCurrent", None, leaked)
        return None
    if int(previous) == context._int:
        return op(*args)
    if _any_gone:  # one flag read on the switch path until some context was ever destroyed
        previous = _restorable(previous)
    (err,) = driver.cuCtxSetCurrent(context._handle)
    if err:
        report(err, "cuCtxSetCurrent", context._handle, leaked, context=context)
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
