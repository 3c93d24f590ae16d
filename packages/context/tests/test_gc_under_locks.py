"""Garbage collection while cuguard holds a lock (contract S2, O5, O6).

Any allocation can run a collection, and a collected context destroys itself,
which takes the context registry's lock. A collection that runs while the
thread holds that lock (registering a new Context object: ``Context.wrap``,
``Context.current``, every foreign stream) must not take it again: the thread
would hang for good. While a thread holds a cuguard lock, collections hand
their releases to the release thread.

Each scenario runs on a thread joined with a time bound, so that a regression
fails here instead of hanging the suite.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import cuguard.context.contexts as context_module
import cuguard.errors._locks as locks
from cuguard.context import Context
from cuguard.errors import flush_deferred
from cuguard.errors.lowlevel import (
    collection_deferred,
    deferring_lock,
    enter_driver_callback,
    exit_driver_callback,
    in_driver_callback,
)
from cuguard.testing import SimulatedDriver, run_bounded

BOUND = 60.0  # seconds: the scenarios take milliseconds; only a hang reaches this


def _bounded(fn: Callable[[], object]) -> None:
    """Run ``fn``; fail (instead of hanging) when it does not finish within BOUND."""
    run_bounded(fn, BOUND, "a collection under a cuguard lock (deadlocked)")


def _garbage_context() -> int:
    """A created Context that only a reference cycle holds now: the next collection destroys it. Its handle."""
    ctx = Context.create(0)
    cycle: list[Any] = [ctx]
    cycle.append(cycle)
    handle = int(ctx.handle)
    del ctx, cycle
    return handle


def _no_misuse(sim: SimulatedDriver) -> None:
    assert sim.misuse == []
    assert sim.double_release == []
    assert sim.use_after_release == []


def _live_contexts(sim: SimulatedDriver) -> set[int]:
    return {obj.handle for obj in sim.live_objects() if obj.kind == "context"}


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    """Collections happen only where a test forces them; gc's state is restored after."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if was_enabled:
        gc.enable()


class _CollectingRegistry(dict[int, Any]):
    """Stands for the registry while a test runs: registering an object runs a collection there.

    That is where an allocation made under the registry's lock may run one
    (the registry is a ``WeakValueDictionary``: each entry allocates a weak
    reference while the lock is held).
    """

    def __setitem__(self, key: int, value: Any) -> None:
        gc.collect()
        super().__setitem__(key, value)


@pytest.mark.contract("S2")
@pytest.mark.usefixtures("no_automatic_collection")
def test_wrap_registering_under_the_lock_collects_a_garbage_context_without_hanging(
    sim: SimulatedDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 27, defect 3: Context.wrap of a foreign context registers the wrapper under the
    # registry's lock; a collection there destroyed a garbage context, whose destroy took the
    # same lock again: the thread hung for good.
    foreign = int(Context.primary(0).handle)
    garbage = _garbage_context()
    assert garbage in _live_contexts(sim)
    monkeypatch.setattr(context_module, "_contexts", _CollectingRegistry())
    # A hang must not keep the real lock held for the rest of the suite: the test has its own.
    monkeypatch.setattr(context_module, "_registry_lock", deferring_lock())
    wrapped: list[Context] = []
    _bounded(lambda: wrapped.append(Context.wrap(foreign)))
    assert wrapped[0].handle == foreign
    assert flush_deferred(BOUND)
    assert garbage not in _live_contexts(sim)  # destroyed, on the release thread
    _no_misuse(sim)


@pytest.mark.contract("S2")
@pytest.mark.usefixtures("no_automatic_collection")
@pytest.mark.parametrize("where", ["registry", "primary", "init"])
def test_a_collection_at_each_context_lock_completes_and_destroys_the_garbage(
    sim: SimulatedDriver, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A collection forced at the acquisition of each of the context layer's locks (through the
    # locks' test hook), with a garbage context prepared, completes and destroys it.
    garbage = _garbage_context()
    lock = {
        "registry": context_module._registry_lock,
        "primary": context_module._primary_lock,
        "init": context_module._init_lock,
    }[where]
    held_at_collection: list[bool] = []

    def collect_at_acquisition() -> None:
        if not held_at_collection and lock.locked():
            held_at_collection.append(collection_deferred())
            gc.collect()

    def operation() -> None:
        if where == "registry":
            Context.wrap(garbage + 1)  # a handle no context has: wrapping makes no driver call
        elif where == "primary":
            Context.primary(1)  # the first use of device 1's primary context
        else:
            monkeypatch.setattr(context_module, "_initialized_for", [])  # as before the first driver use
            context_module.init_driver()

    monkeypatch.setattr(locks, "on_acquire", collect_at_acquisition)
    _bounded(operation)
    monkeypatch.setattr(locks, "on_acquire", None)
    assert held_at_collection == [True]  # the collection ran while the thread held the lock
    assert flush_deferred(BOUND)
    assert garbage not in _live_contexts(sim)
    _no_misuse(sim)


@pytest.mark.contract("O5")
def test_a_held_lock_defers_collections_but_refuses_no_call(sim: SimulatedDriver) -> None:
    # Holding a cuguard lock only defers collections; CUDA_ERROR_NOT_PERMITTED is for driver
    # callbacks alone (O5).
    lock = deferring_lock()
    reentrant = deferring_lock(reentrant=True)
    assert not collection_deferred()
    with lock:
        assert collection_deferred()
        assert not in_driver_callback()
        assert Context.primary(0).device == 0  # driver calls go through
        with reentrant, reentrant:
            assert collection_deferred()
        assert collection_deferred()
    assert not collection_deferred()
    enter_driver_callback()
    try:
        assert collection_deferred()
        assert in_driver_callback()
    finally:
        exit_driver_callback()
    assert not collection_deferred()
    assert lock.acquire(blocking=False)
    assert not lock.acquire(blocking=False)  # non-reentrant: a second take by the holder fails
    assert collection_deferred()
    lock.release()
    assert not collection_deferred()
