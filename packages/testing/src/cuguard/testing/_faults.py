"""Fault injection and call recording over whatever driver is active.

A :class:`FaultProxy` wraps a driver object (the real ``cuda.bindings.driver``
or a simulated driver) and is installed through cuguard's driver seam. Every
call goes through it: active fault plans decide whether the call fails (the
proxy then returns the failure status in the driver's own return convention,
without calling the driver), recorders see every call, and a ledger follows the
objects created and released through it, so leaks can be counted on the real
driver too.

The public entry points are context managers: :func:`inject`,
:func:`restore_fault`, :func:`sticky`, :func:`deinitialized` and
:func:`record_calls`. They install a proxy over the active driver on entry
when none is installed, and remove it when the last of them exits.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from cuguard.errors import (
    RESTORE_CONTEXT,
    active_driver,
    first_sticky_fault,
    forget_sticky_fault,
    install_driver,
    installed_driver,
    is_sticky,
)
from cuguard.errors.lowlevel import (
    DRIVER_FACTS,
    base_driver,
    calls_where,
    deferring_lock,
    int_argument,
    status_argument,
)
from cuguard.testing._sim.facts import STICKY_EXEMPT

__all__ = [
    "DriverCall",
    "FaultPlan",
    "FaultProxy",
    "deinitialized",
    "inject",
    "leak_check",
    "record_calls",
    "restore_fault",
    "sticky",
]

# Calls that still answer while the driver is deinitialized (they read static tables).
_DEINIT_EXEMPT = calls_where(callback_safe=True)


def _bindings() -> Any:
    from cuda.bindings import driver as bindings

    return bindings


@cache
def _arity(name: str) -> int:
    """How many values ``cuda.bindings.driver.<name>`` returns (status included).

    Read from the function's documentation, so it needs no driver loaded. On
    failure the driver returns the status followed by ``None`` for each output.
    """
    fn = getattr(_bindings(), name, None)
    doc = getattr(fn, "__doc__", None) or ""
    match = re.search(r"\nReturns\n-------\n(.*?)(?:\n\S[^\n]*\n-{3,}|\Z)", doc, re.S)
    if match is None:
        return 1
    return max(1, sum(1 for line in match.group(1).split("\n") if line and not line.startswith(" ")))


def known_function(name: str) -> bool:
    """Whether ``name`` is a function of ``cuda.bindings.driver``."""
    return name.startswith("cu") and callable(getattr(_bindings(), name, None))


def _failure(name: str, code: int) -> tuple[Any, ...]:
    status = _bindings().CUresult(code)
    arity = _arity("cuCtxSetCurrent" if name == RESTORE_CONTEXT else name)
    return (status,) + (None,) * (arity - 1)


@dataclass(frozen=True)
class DriverCall:
    """One driver call seen by the proxy: its name, arguments and returned status.

    ``name`` is the driver function; a restore of a caller's context is
    recorded as ``cuCtxSetCurrent`` with ``restore=True``. ``injected`` tells
    whether a fault plan made it fail (the driver was then not called).
    """

    name: str
    args: tuple[Any, ...]
    status: int
    restore: bool = False
    injected: bool = False


@dataclass
class FaultPlan:
    """A rule that makes chosen driver calls fail with ``code``.

    ``function`` is a driver function name (``"cuCtxSetCurrent"`` also matches
    restores), or ``None`` for every function. ``restore_only`` limits the plan
    to restores of a caller's context. Matching calls are counted in ``seen``;
    the ``nth`` matching call fails (or every one, with ``every``); ``when``, if
    given, is called with a call's argument tuple and only calls it accepts are
    counted. ``fired`` counts the failures injected so far. Plans compose:
    with several active, each counts every call it matches (also one that
    another plan failed), and when several fire on the same call the one
    installed first gives the status. ``exempt`` names
    functions a plan for every function leaves alone. A failing ``when`` raises
    into the driver call it was asked about.
    """

    function: str | None
    code: int
    nth: int = 1
    every: bool = False
    when: Callable[[tuple[Any, ...]], bool] | None = None
    restore_only: bool = False
    exempt: frozenset[str] = field(default_factory=frozenset)
    seen: int = 0
    fired: int = 0

    def _applies(self, name: str, args: tuple[Any, ...], restore: bool) -> bool:
        if self.restore_only and not restore:
            return False
        if self.function is not None and self.function != name:
            return False
        if self.function is None and name in self.exempt:
            return False
        if self.when is not None and not self.when(args):
            return False
        self.seen += 1
        if self.every or self.seen == self.nth:
            self.fired += 1
            return True
        return False


# Driver objects created and released, for leak accounting over any driver:
# function -> (kind, handle taken from the result (True) or the arguments, index, +1/-1); a view of the
# table of driver facts. Graph nodes die with their graph and user objects with their last reference:
# neither is counted.
_NOT_COUNTED = frozenset({"graph_node", "user_object"})
_LEDGER: dict[str, tuple[str, bool, int, int]] = {
    **{
        fact.name: (fact.creates, fact.handle_from == "result", 1 if fact.handle_from == "result" else 0, 1)
        for fact in DRIVER_FACTS.values()
        if fact.creates is not None and fact.creates not in _NOT_COUNTED
    },
    **{
        fact.name: (fact.releases, False, 0, -1)
        for fact in DRIVER_FACTS.values()
        if fact.releases is not None and fact.releases not in _NOT_COUNTED
    },
}


def _handle_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return id(value)


#: Per driver library (the driver under every wrapper): the functions the bindings have and the
#: library lacks (calling one raises ``RuntimeError``; a CUDA 13.0 driver under newer bindings).
_MISSING: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


class FaultProxy:
    """A driver that forwards to ``inner``, applying fault plans and recording calls.

    Functions are wrapped on first access and cached; with no plan and no
    recorder active a wrapped call costs one flag test over the plain call.
    An unknown function name raises ``AttributeError`` naming it.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        try:
            self._missing = _MISSING.setdefault(base_driver(inner), set())
        except TypeError:  # a driver object that takes no weak reference: nothing remembered
            self._missing = set()
        self.plans: list[FaultPlan] = []
        self.recorders: list[list[DriverCall]] = []
        self.live: dict[tuple[str, int], int] = {}
        self._released: dict[tuple[str, int], int] = {}
        self._lock = deferring_lock(reentrant=True)
        self._busy = False

    def __repr__(self) -> str:
        return f"<FaultProxy over {self.inner!r}>"

    @property
    def wrapped_driver(self) -> Any:
        """The driver this proxy forwards to (see :func:`cuguard.errors.driver_token`)."""
        return self.inner

    def _refresh(self) -> None:
        self._busy = bool(self.plans or self.recorders)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "wrapped_driver":
            raise AttributeError(name)
        restore = name == RESTORE_CONTEXT
        fn = getattr(self.inner, name, None)
        if fn is None and restore:
            fn = getattr(self.inner, "cuCtxSetCurrent", None)
        if fn is None:
            raise AttributeError(f"the driver {self.inner!r} has no function {name!r}")
        call_name = "cuCtxSetCurrent" if restore else name
        ledger = _LEDGER.get(call_name)
        proxy = self

        def wrapped(*args: Any) -> Any:
            if proxy._busy:
                return proxy._call(call_name, fn, args, restore)
            result = fn(*args)
            if ledger is not None and not result[0]:
                proxy._account(ledger, args, result)
            return result

        wrapped.__name__ = name
        wrapped.__doc__ = getattr(fn, "__doc__", None)
        self.__dict__[name] = wrapped
        return wrapped

    def _account(self, ledger: tuple[str, bool, int, int], args: tuple[Any, ...], result: Any) -> None:
        kind, from_result, index, delta = ledger
        source = result if from_result else args
        if index >= len(source):
            return
        handle = _handle_int(source[index])
        if from_result and handle == 0:
            return  # NULL is no object (a zero-byte allocation may return it; freeing it does nothing)
        key = (kind, handle)
        with self._lock:
            if delta < 0:
                self._released[key] = self._released.get(key, 0) + 1
            count = self.live.get(key, 0) + delta
            if kind == "memory_pool" and count > 1:
                count = 1  # a pool imported again is the same pool (an H200's answer): one destroy ends it
            if count > 0:
                self.live[key] = count
            else:
                self.live.pop(key, None)

    def _call(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], restore: bool) -> Any:
        if name in self._missing:
            # The bindings have the function and the driver library does not: the call raises
            # before reaching a driver. Once met (by a fault-free run: the proxy learns it from
            # the RuntimeError), no plan counts it; no recorder lists it either way.
            return fn(*args)
        with self._lock:
            # Every active plan counts every call it matches, whichever plan fails it; when
            # several fire on the same call, the one installed first (the outermost) gives the code.
            code = None
            for plan in self.plans:
                if plan._applies(name, args, restore) and code is None:
                    code = plan.code
        if code is not None:
            result: Any = _failure(name, code)
            injected = True
        else:
            try:
                result = fn(*args)
            except RuntimeError as missing:
                if "not found" in str(missing):
                    self._missing.add(name)
                raise
            injected = False
            ledger = _LEDGER.get(name)
            if ledger is not None and not result[0]:
                self._account(ledger, args, result)
        if self.recorders:
            entry = DriverCall(name, args, int(result[0]), restore, injected)
            with self._lock:
                for log in self.recorders:
                    log.append(entry)
        return result

    def live_objects(self) -> dict[tuple[str, int], int]:
        """Objects created through this proxy and not released: ``(kind, handle) -> count``. Never raises."""
        with self._lock:
            return dict(self.live)

    def released_objects(self) -> dict[tuple[str, int], int]:
        """How many times each object was released through this proxy: ``(kind, handle) -> count``.

        Tells a released object from a new one the driver gave the same handle (a real driver
        reuses addresses at once): compare two readings. Never raises.
        """
        with self._lock:
            return dict(self._released)


_install_lock = deferring_lock()
_users = 0
_installed: FaultProxy | None = None
_previous: Any = None


def _acquire() -> FaultProxy:
    """The proxy over the active driver, installing one if needed."""
    global _users, _installed, _previous
    with _install_lock:
        current = active_driver()
        if isinstance(current, FaultProxy):
            proxy = current
        else:
            proxy = FaultProxy(current)
            _previous = install_driver(proxy)
            _installed = proxy
        _users += 1
        return proxy


def _release(proxy: FaultProxy) -> None:
    global _users, _installed, _previous
    with _install_lock:
        _users -= 1
        if _users == 0 and _installed is proxy:
            # Remove the proxy only if it is still the installed driver: when the driver it
            # wraps was uninstalled meanwhile (a simulator fixture torn down first), putting
            # that driver back would leave a closed simulator installed for later tests.
            if installed_driver() is proxy:
                install_driver(_previous)
            _installed = None
            _previous = None


@contextmanager
def _plan(plan: FaultPlan) -> Iterator[FaultPlan]:
    proxy = _acquire()
    with proxy._lock:
        proxy.plans.append(plan)
        proxy._refresh()
    fault_before = first_sticky_fault()
    try:
        yield plan
    finally:
        with proxy._lock:
            proxy.plans.remove(plan)
            proxy._refresh()
        if plan.fired and is_sticky(plan.code) and fault_before is None and first_sticky_fault() is not None:
            # The sticky status was made up by this plan and ends with it: it is not the
            # driver's first fault (E5), which later errors would otherwise name.
            forget_sticky_fault()
        _release(proxy)


def _code(code: Any) -> int:
    """``code`` as the int of a failing driver status: ``TypeError``/``ValueError`` at once otherwise (E3).

    A ``CUresult`` or an int naming a status of the status table that the installed cuda-bindings
    can return is taken; ``CUDA_SUCCESS``, an unknown code (``12345``, ``-1``), a bool or a float
    is refused here, before any driver call, rather than inside the call the plan would fail.
    """
    status = status_argument("code", code)
    try:
        _bindings().CUresult(status)
    except ValueError:
        raise ValueError(f"code must be a CUDA driver status (a CUresult), not {status}") from None
    return status


def inject(
    function: str,
    code: int = 1,
    *,
    nth: int = 1,
    every: bool = False,
    when: Callable[[tuple[Any, ...]], bool] | None = None,
) -> Any:
    """Fail calls of the driver function ``function`` with ``code`` inside a ``with`` block.

    By default the first call fails (``nth=1``); ``nth=k`` fails the k-th call
    made inside the block, ``every=True`` every call, and ``when`` restricts the
    counted calls to those whose argument tuple it accepts. The failing call
    does not reach the driver; it returns ``code`` the way the driver returns a
    failure. Works on the simulated and on the real driver. Yields the
    :class:`FaultPlan` (``fired`` tells how many calls it failed).

    An unknown function name raises ``ValueError`` naming it; a code that is
    not a failing CUDA driver status (``CUDA_SUCCESS``, ``12345``, ``-1``)
    raises ``ValueError``, one that is not an integer ``TypeError``; ``nth``
    below 1 raises ``ValueError``. All are raised by this call, before any
    driver call.
    """
    if not known_function(function):
        raise ValueError(f"unknown CUDA driver function {function!r} in fault plan")
    nth = int_argument("nth", nth, 1)
    return _plan(FaultPlan(function, _code(code), nth=nth, every=every, when=when))


def restore_fault(
    code: int = 201, *, nth: int = 1, every: bool = False, when: Callable[[tuple[Any, ...]], bool] | None = None
) -> Any:
    """Fail the ``nth`` restore of a caller's context inside the block with ``code``.

    A restore is the ``cuCtxSetCurrent`` by which cuguard's context layer
    switches back to the caller's context after running work elsewhere. The
    default code is ``CUDA_ERROR_INVALID_CONTEXT``. The failing restore does
    not reach the driver, so the thread keeps the context the work used, as
    with a real failed restore. ``every`` and ``when`` work as for :func:`inject`
    (``when`` is also called on the restoring thread, so it can select a thread).
    ``code`` and ``nth`` are checked as by :func:`inject`.
    """
    nth = int_argument("nth", nth, 1)
    return _plan(FaultPlan("cuCtxSetCurrent", _code(code), nth=nth, every=every, when=when, restore_only=True))


def sticky(code: int = 700) -> Any:
    """Make the driver behave as after a kernel fault (``code``, default ILLEGAL_ADDRESS).

    Inside the block every call the real driver refuses after such a fault
    returns ``code`` (creation, synchronization, recording, queries and
    releases); the calls it still answers (getting and setting the current
    context, creating graphs, destroying contexts, releasing primary contexts,
    error names) go through. Leaving the block lifts the fault, which the real
    driver never does: use it to test what happens while the fault holds.
    A ``code`` that is not a failing CUDA driver status raises ``ValueError``
    (``TypeError`` for a non-integer) here, before any driver call.
    """
    return _plan(FaultPlan(None, _code(code), every=True, exempt=STICKY_EXEMPT))


def deinitialized() -> Any:
    """Every driver call in the block returns ``CUDA_ERROR_DEINITIALIZED``, as at process exit."""
    return _plan(FaultPlan(None, 4, every=True, exempt=_DEINIT_EXEMPT))


@contextmanager
def record_calls() -> Iterator[list[DriverCall]]:
    """Record every driver call made inside the block, from any thread.

    Yields a list that fills with :class:`DriverCall` entries in call order.
    Never makes a call fail; with no driver installed and none loadable, entering
    raises :class:`~cuguard.errors.CUDADriverNotFoundError`.
    """
    proxy = _acquire()
    log: list[DriverCall] = []
    with proxy._lock:
        proxy.recorders.append(log)
        proxy._refresh()
    try:
        yield log
    finally:
        with proxy._lock:
            proxy.recorders.remove(log)
            proxy._refresh()
        _release(proxy)


@contextmanager
def leak_check() -> Iterator[FaultProxy]:
    """Assert that the block leaves no driver object behind, on any driver.

    Driver objects created inside the block (contexts, primary-context
    retains, streams, events, memory, modules, graphs, executable graphs) must
    be released by its end; on exit an ``AssertionError`` lists those that
    were not. On the simulated driver the simulator's own accounting is
    checked as well (nothing dangling, no misuse). Before judging it collects
    garbage and waits, boundedly, for cuguard's release thread (deferred graph
    releases, releases due in host functions); the message says so. A device's
    primary context retained once is cuguard's by design (O2), not a leak.
    Yields the proxy doing the accounting.
    """
    proxy = _acquire()
    try:
        before = proxy.live_objects()
        sim_check = _sim_check(proxy.inner)
        with sim_check:
            yield proxy
        from cuguard.testing._sim.accounting import settle

        waited = settle()
        left = left_behind(before, proxy.live_objects())
        assert not left, f"driver objects left behind ({waited}): " + ", ".join(
            f"{kind} {hex(handle)} x{count}" for (kind, handle), count in sorted(left.items())
        )
    finally:
        _release(proxy)


def left_behind(before: dict[tuple[str, int], int], after: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """What ``after`` holds beyond ``before`` (two :meth:`FaultProxy.live_objects` results).

    A primary context retained for the first time, once, is the device's
    process-wide context that cuguard holds by design (contract O2): not a leak.
    """
    return {
        key: count - before.get(key, 0)
        for key, count in after.items()
        if count > before.get(key, 0) and not (key[0] == "primary_context" and key not in before and count == 1)
    }


def _sim_check(inner: Any) -> Any:
    from contextlib import nullcontext

    from cuguard.testing._sim import SimulatedDriver, nothing_left_behind

    if isinstance(inner, SimulatedDriver):
        return nothing_left_behind(inner)
    return nullcontext()
