"""The driver seam: the one place that decides where driver calls go.

Every cuguard layer calls the driver as ``driver.cuXxx(...)``, where
:data:`driver` is this module's :class:`DriverSeam`. By default calls go to the
real ``cuda.bindings.driver``, loaded on the first call (importing cuguard never
touches the driver). :func:`use_driver` installs another driver object for a
scope: the simulated driver and the fault-injecting proxies of cuguard.testing.

The success path costs one instance-dictionary lookup: the first access of a
name resolves it on the active driver and caches the function on the seam;
installing a driver clears the cache.

The installed driver is process-wide (CUDA calls callbacks on its own threads,
which must reach the same driver). Install and remove drivers while no other
thread is making CUDA calls.

The process's default driver is chosen by the ``CUGUARD_DRIVER`` environment
variable, read once, at the first driver use: ``real`` (or unset) is
``cuda.bindings.driver``; any other name is a driver provider registered under
the ``cuguard.drivers`` entry-point group (cuguard-testing registers ``sim``,
the simulated driver, sized by ``CUGUARD_SIM_DEVICES``). A provider's driver is
installed as if with :func:`install_driver` and stays for the whole process:
installing ``None`` later returns to it.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from cuguard.errors._exceptions import CUDADriverNotFoundError, CUDAError
from cuguard.errors._facts import calls_where
from cuguard.errors._locks import deferring_lock

__all__ = [
    "DRIVER_VARIABLE",
    "RESTORE_CONTEXT",
    "DriverSeam",
    "active_driver",
    "base_driver",
    "driver",
    "driver_state",
    "driver_token",
    "first_sticky_fault",
    "forget_driver",
    "forget_sticky_fault",
    "default_driver_choice",
    "install_driver",
    "installed_driver",
    "on_driver_change",
    "on_route_change",
    "real_driver",
    "record_sticky_fault",
    "use_driver",
]

#: Seam name under which the context layer restores a caller's context. A
#: driver that defines a function of this name receives restores there (fault
#: plans use it to fail exactly the restore); any other driver receives them
#: as ``cuCtxSetCurrent``, which is what they are.
RESTORE_CONTEXT = "cuguardRestoreContext"

_lock = deferring_lock()
_active: Any = None
_real: Any = None
_REAL_TOKEN = object()
_token: Any = _REAL_TOKEN
#: What :func:`driver_token` answers, as a one-element list read without a call on hot paths, once
#: that answer is settled; while it is not (the default driver is still to be chosen, which may
#: change the token), an object that no cuguard object records, so a check against it falls
#: through to the call. Kept by :func:`_settle`, under ``_lock``, at each change of the driver.
SETTLED_TOKEN: list[Any] = [object()]
_states: dict[Any, dict[str, Any]] = {}
_listeners: list[Callable[[Any], None]] = []
#: ``CUGUARD_DRIVER`` not read yet (it is read at the first driver use).
_choice_pending = True
#: The driver a provider named by ``CUGUARD_DRIVER`` made (``None``: the real driver is the default).
_default: Any = None

#: The environment variable that chooses the process's default driver (see the module's docstring).
DRIVER_VARIABLE = "CUGUARD_DRIVER"
PROVIDER_GROUP = "cuguard.drivers"


def default_driver_choice() -> str:
    """The default driver's name from ``CUGUARD_DRIVER``: ``"real"`` when unset or empty. Never raises."""
    return os.environ.get(DRIVER_VARIABLE, "").strip().lower() or "real"


def _provided_driver(choice: str) -> Any:
    """Make the driver the provider ``choice`` of the ``cuguard.drivers`` entry points makes."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=PROVIDER_GROUP) if ep.name == choice]
    if not found:
        known = sorted({ep.name for ep in entry_points(group=PROVIDER_GROUP)} | {"real"})
        hint = " (install cuguard-testing for the simulated driver)" if choice == "sim" else ""
        raise CUDADriverNotFoundError(f"{DRIVER_VARIABLE}={choice!r} names no driver{hint}; known: {', '.join(known)}")
    try:
        return found[0].load()()
    except CUDADriverNotFoundError:
        raise
    except Exception as exc:
        raise CUDADriverNotFoundError(
            f"the {choice!r} driver named by {DRIVER_VARIABLE} could not be made: {type(exc).__name__}: {exc}"
        ) from exc


def _resolve_default() -> None:
    """Read ``CUGUARD_DRIVER`` (once) and install the driver it names, unless it is the real one.

    Raises :class:`CUDADriverNotFoundError` when it names no known driver; the
    variable is read again at the next driver use then. Calls made while the
    provider builds its driver go to the real driver's path (none are expected).
    """
    global _choice_pending, _default
    with _choice_lock:
        if not _choice_pending or _resolving:
            return
        _resolving.append(True)
        try:
            choice = default_driver_choice()
            made = None if choice == "real" else _provided_driver(choice)
        finally:
            _resolving.clear()
        _default = made
        _choice_pending = False
        if made is not None and _active is None:
            install_driver(made)
        else:
            with _lock:
                _settle()
            _reroute()


_choice_lock = deferring_lock(reentrant=True)
_resolving: list[bool] = []


def real_driver() -> Any:
    """The real ``cuda.bindings.driver`` module, loaded and checked on first use.

    Raises :class:`CUDADriverNotFoundError` when cuda-bindings is missing or no
    CUDA driver library can be loaded; nothing else is affected.
    """
    global _real
    if _real is not None:
        return _real
    with _lock:
        if _real is None:
            try:
                from cuda.bindings import driver as module
            except ImportError as exc:
                raise CUDADriverNotFoundError(
                    f"cuda-bindings could not be imported ({exc}); to run on cuguard's simulated driver "
                    f"instead, set {DRIVER_VARIABLE}=sim (with cuguard-testing installed)"
                ) from None
            try:
                module.cuDriverGetVersion()
            except RuntimeError as exc:
                raise CUDADriverNotFoundError(
                    f"the CUDA driver library could not be loaded ({exc}); install an NVIDIA driver, or run "
                    f"on cuguard's simulated driver: set {DRIVER_VARIABLE}=sim (with cuguard-testing "
                    "installed), or use cuguard.testing.simulated_driver() in code"
                ) from None
            _real = module
    _reroute()
    return _real


class DriverSeam:
    """Attribute access returns the active driver's function of that name.

    An unknown name raises ``AttributeError`` naming the function and the
    driver. The first access of any name with no driver installed loads the real
    driver (see :func:`real_driver`).
    """

    def __init__(self) -> None:
        # The cache of looked-up functions is a dict of its own, not the one an instance's first
        # ``__dict__`` access makes (shaped by the class's shared keys): CPython 3.12 does not
        # specialize attribute reads through the latter, which cost every driver call made through
        # the seam about 70 ns more (measured on 3.12; 3.11 and 3.13 read both alike).
        self.__dict__ = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if _active is None and _choice_pending:
            _resolve_default()
        target = _active if _active is not None else real_driver()
        fn = getattr(target, name, None)
        if fn is None and name == RESTORE_CONTEXT:
            fn = getattr(target, "cuCtxSetCurrent", None)
        if fn is None:
            raise AttributeError(f"the active CUDA driver ({target!r}) has no function {name!r}")
        if _callbacks_running[0]:
            # A CUDA callback runs on some thread: nothing is cached, and calls from inside
            # one are refused before they reach the driver (O5).
            return _refused_in_callbacks(fn, name)
        self.__dict__[name] = fn
        return fn

    def __repr__(self) -> str:
        return f"<cuguard driver seam over {_active if _active is not None else 'the real driver'!r}>"


driver = DriverSeam()

# How many CUDA callbacks (host functions, user-object destructors) run now, on any thread.
_callbacks_running = [0]
_callbacks_lock = deferring_lock()
_NOT_PERMITTED = 800  # CUDA_ERROR_NOT_PERMITTED: what the driver itself answers there
_CALLBACK_SAFE = calls_where(callback_safe=True)


def _refused_in_callbacks(fn: Any, name: str) -> Any:
    if name in _CALLBACK_SAFE:
        return fn

    def guarded(*args: Any) -> Any:
        from cuguard.errors._ownership import in_driver_callback

        if in_driver_callback():
            raise CUDAError(
                _NOT_PERMITTED,
                name,
                "not called: CUDA forbids API calls inside host functions and driver callbacks; "
                "do CUDA work from a Python thread instead",
            )
        return fn(*args)

    return guarded


def callbacks_started() -> None:
    """A CUDA callback starts running (see :func:`~cuguard.errors.lowlevel.enter_driver_callback`)."""
    with _callbacks_lock:
        _callbacks_running[0] += 1
        driver.__dict__.clear()
        if _callbacks_running[0] == 1:
            _reroute()


def callbacks_ended() -> None:
    """A CUDA callback stopped running."""
    with _callbacks_lock:
        _callbacks_running[0] -= 1
        if not _callbacks_running[0]:
            _reroute()


# Told whether calls go straight to the real bindings (see on_route_change).
_route_listeners: list[Callable[[bool], None]] = []
_route_lock = deferring_lock(reentrant=True)
_direct = [False]


def _routed_direct() -> bool:
    return (
        _real is not None
        and not _choice_pending
        and (_active is None or _active is _real)
        and not _callbacks_running[0]
    )


def _reroute() -> None:
    """Tell the route listeners when whether calls go straight to the real bindings changed."""
    with _route_lock:
        direct = _routed_direct()
        if direct is _direct[0]:
            return
        _direct[0] = direct
        for listener in list(_route_listeners):
            listener(direct)


def on_route_change(listener: Callable[[bool], None]) -> None:
    """Call ``listener(direct)`` now and whenever ``direct`` changes.

    ``direct`` is true while every seam call goes straight to the real
    ``cuda.bindings.driver`` functions: the real driver is loaded, the active
    driver is it (no simulator, fault plan, ``record_calls`` or other wrapper
    installed) and no CUDA callback is running (where the seam refuses calls,
    O5). For compiled driver calls: the layers use them only while ``direct``,
    with one flag read instead of comparing the seam's functions on each call.
    A listener must not raise and must not call any driver; it may be called
    on a driver thread (when a callback starts or ends).
    """
    with _route_lock:
        _route_listeners.append(listener)
        direct = _direct[0]
        listener(direct)


def active_driver() -> Any:
    """The driver object calls go to now: an installed one, or the real driver.

    With none installed, loads the real driver, which raises :class:`CUDADriverNotFoundError`
    when there is none (see :func:`real_driver`) or when ``CUGUARD_DRIVER``
    names no known driver.
    """
    if _active is None and _choice_pending:
        _resolve_default()
    return _active if _active is not None else real_driver()


def installed_driver() -> Any:
    """The driver object installed with :func:`install_driver`, or ``None`` for the real one.

    A driver chosen with ``CUGUARD_DRIVER`` counts as installed once a driver
    was first used. Never raises.
    """
    return _active


def install_driver(new: Any) -> Any:
    """Make ``new`` the active driver (``None``: the real one); return the previous one.

    Prefer :func:`use_driver`, which restores the previous driver on exit. Never raises and
    never calls either driver; objects made under the previous driver stay bound to it (see
    :func:`driver_token`).
    """
    global _active, _token
    with _lock:
        if new is None:
            new = _default  # the driver CUGUARD_DRIVER chose, when it chose one
        previous = _active
        old_token = _token
        _active = new
        base = base_driver(new)
        _token = _REAL_TOKEN if base is None or _is_real_module(base) else base
        driver.__dict__.clear()
        _settle()
        changed = _token is not old_token
        listeners = list(_listeners) if changed else []
    _reroute()
    for listener in listeners:
        listener(_token)
    return previous


def _is_real_module(candidate: Any) -> bool:
    """Whether ``candidate`` is the real ``cuda.bindings.driver`` (installed directly or under a wrapper)."""
    return candidate is _real or (
        isinstance(candidate, types.ModuleType) and candidate.__name__ == "cuda.bindings.driver"
    )


def base_driver(drv: Any) -> Any:
    """The driver under every wrapper of ``drv`` (each names the one it wraps in ``wrapped_driver``).

    ``drv`` itself when it wraps nothing; ``None`` for ``None``. Never raises.
    """
    while drv is not None and getattr(drv, "wrapped_driver", None) is not None:
        drv = drv.wrapped_driver
    return drv


_UNSETTLED = SETTLED_TOKEN[0]


def _settle() -> None:
    """Make :data:`SETTLED_TOKEN` agree with :func:`driver_token` (called with ``_lock`` held)."""
    SETTLED_TOKEN[0] = _UNSETTLED if _choice_pending and _active is None else _token


def driver_token() -> Any:
    """Identifies the driver behind the seam, looking through wrappers.

    A wrapper (such as a fault-injecting proxy) names the driver it wraps in a
    ``wrapped_driver`` attribute, so installing or removing it keeps the
    token; so does installing the real ``cuda.bindings.driver`` itself, or a
    wrapper over it: the real driver has one token whichever way calls reach
    it. Objects record the token at creation: one whose token is no longer
    current belongs to a driver that was uninstalled (a simulator of an earlier
    test), and must not be released into the driver now installed. Never raises
    (a ``CUGUARD_DRIVER`` that names no driver is reported at the next driver call).
    """
    if _choice_pending and _active is None:
        with suppress(CUDADriverNotFoundError):  # raised by the driver call that follows
            _resolve_default()
    return _token


def driver_state() -> dict[str, Any]:
    """A dictionary private to the driver behind the seam (see :func:`driver_token`).

    The layers keep there what exists once per driver: the :class:`Device`
    objects, the held primary contexts, the record of destroyed contexts. It
    stays while that driver is installed again later, and goes away with
    :func:`forget_driver`. Never raises.
    """
    token = driver_token()
    state = _states.get(token)
    if state is None:
        with _lock:
            state = _states.setdefault(token, {})
    return state


_FIRST_FAULT = "first sticky fault"


def record_sticky_fault(text: str) -> str | None:
    """Record ``text`` as the first sticky fault of the driver behind the seam, unless one is recorded.

    Returns ``None`` when ``text`` became the first, else the first fault's text.
    Nothing is recorded while no driver exists (the real one not loaded and none
    installed): an error built by hand is not a fault of any driver. Never raises.
    """
    if _token is _REAL_TOKEN and _real is None:
        return None
    state = driver_state()
    with _lock:
        first = state.get(_FIRST_FAULT)
        if first is None:
            state[_FIRST_FAULT] = text
    return first


def first_sticky_fault() -> str | None:
    """The first sticky fault the driver behind the seam reported to cuguard, or ``None``.

    A text naming its call and, when known, the launch that caused it
    (see :class:`~cuguard.errors.StickyCUDAError`). Never raises.
    """
    state = _states.get(_token)
    return None if state is None else state.get(_FIRST_FAULT)


def forget_sticky_fault() -> None:
    """Forget the first sticky fault of the driver behind the seam.

    For fault injection only: a sticky status that a fault plan made up ends
    with the plan. A real driver never recovers from a sticky fault. The
    releases counted under that fault (W7) get their summary now, each through
    ``sys.unraisablehook`` when ``CUDAWarning`` is escalated. Never raises.
    """
    state = _states.get(_token)
    if state is not None:
        state.pop(_FIRST_FAULT, None)
        from cuguard.errors._onefault import fault_ended

        fault_ended(state)  # W7: what was counted under that fault is summed up now


def forget_driver(token: Any) -> None:
    """Drop what the layers keep for the driver ``token`` (a driver that is finished for good).

    A simulated driver calls this when it is closed. Objects made under it stay
    refused (O3); nothing is released. Never raises.
    """
    with _lock:
        _states.pop(token, None)
        listeners = list(_forgotten_listeners)
    for listener in listeners:
        listener(token)


_forgotten_listeners: list[Callable[[Any], None]] = []


def on_driver_forgotten(listener: Callable[[Any], None]) -> None:
    """Call ``listener(token)`` when :func:`forget_driver` drops the driver ``token`` for good.

    For the layers' own tables keyed by driver (what they count per driver context): they drop
    that driver's entries. A listener must not raise and must not call any driver. Anything
    that is not callable raises ``TypeError``, at once.
    """
    if not callable(listener):
        from cuguard.errors._ownership import wrong_kind

        raise wrong_kind("listener", "a callable", listener)
    with _lock:
        _forgotten_listeners.append(listener)


def on_driver_change(listener: Callable[[Any], None]) -> None:
    """Call ``listener(new_token)`` after each :func:`install_driver` that changes the driver token.

    For the layers: they mark the objects of a driver that is no longer
    installed as unusable, and usable again when it is installed again. A
    listener must not raise and must not call any driver.
    """
    with _lock:
        _listeners.append(listener)


@contextmanager
def use_driver(new: Any) -> Iterator[Any]:
    """Route every driver call to ``new`` inside the ``with`` block.

    ``new`` is any object with the functions of ``cuda.bindings.driver`` (same
    names, signatures and return conventions). The previous driver is restored
    on exit, also when the block raises. Yields ``new``.
    """
    previous = install_driver(new)
    try:
        yield new
    finally:
        install_driver(previous)
