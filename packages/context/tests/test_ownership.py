"""Ownership and identity of contexts (contract O1-O4).

Tests with the ``cuguard_driver`` fixture also run on a GPU
(``--cuguard-driver=real``); those about drivers that are no longer installed
need two simulators and use the ``sim`` fixture.
"""

from __future__ import annotations

import copy
import gc
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cuda.bindings.driver import CUcontext

from cuguard.context import Context
from cuguard.errors import ResourceClosedError, driver
from cuguard.testing import SimulatedDriver, record_calls, simulated_driver

COPIERS: dict[str, Callable[[Any], object]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
    "pickle-protocol-0": lambda obj: pickle.dumps(obj, protocol=0),
    "pickle-protocol-2": lambda obj: pickle.dumps(obj, protocol=2),
}


def _null() -> Any:
    return CUcontext(0)


@pytest.fixture
def no_context(cuguard_driver: Any) -> Iterator[Any]:
    """No context current before and after the test."""
    Context.primary(0)  # initializes the driver
    driver.cuCtxSetCurrent(_null())
    yield cuguard_driver
    driver.cuCtxSetCurrent(_null())


def _misuse_free(drv: Any) -> None:
    if isinstance(drv, SimulatedDriver):
        assert drv.misuse == []
        assert drv.double_release == []
        assert drv.use_after_release == []


# --- O1: one owner per handle ---------------------------------------------------------------------------


_kept: list[Context] = []  # contexts that a test's wrapper refers to, closed by the test


def _context_of_kind(kind: str) -> Context:
    if kind == "created":
        return Context.create(0)
    if kind == "primary":
        return Context.primary(0)
    if kind == "wrapped":
        return Context.wrap(Context.primary(0).handle)
    ctx = Context.create(0)
    previous = ctx.set_current()
    current = Context.current()
    driver.cuCtxSetCurrent(_null() if previous is None else previous.handle)
    assert current is not None
    assert current is not ctx
    _kept.append(ctx)  # the "current" wrapper does not own it
    return current


@pytest.mark.contract("O1")
@pytest.mark.parametrize("how", sorted(COPIERS))
@pytest.mark.parametrize("kind", ["created", "primary", "wrapped", "current"])
def test_contexts_cannot_be_copied_or_pickled(no_context: Any, kind: str, how: str) -> None:
    ctx = _context_of_kind(kind)
    with record_calls() as log, pytest.raises(TypeError, match=r"\bContext\b") as info:
        COPIERS[how](ctx)
    assert "cannot be copied or pickled" in str(info.value)
    assert log == []
    # The original is still the one owner: it closes once, cleanly.
    ctx.close()
    ctx.close()
    while _kept:
        _kept.pop().close()
    gc.collect()
    _misuse_free(no_context)


@pytest.mark.contract("O1")
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((0x1000,), {}), ((), {"handle": 0x1000})],
    ids=["no-arguments", "a-handle", "a-keyword"],
)
def test_contexts_cannot_be_constructed_directly(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"Context\.create\(\)") as info:
        Context(*args, **kwargs)
    message = str(info.value)
    assert "Context.primary()" in message
    assert "Context.wrap()" in message


# --- O2: the primary context is one object, retained once, never released ----------------------------------


@pytest.mark.contract("O2")
def test_primary_context_is_one_object_from_many_threads(no_context: Any) -> None:
    barrier = threading.Barrier(8)
    got: list[Context] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            got.append(Context.primary(0))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    with record_calls() as log:
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len(got) == 8
    assert all(ctx is got[0] for ctx in got)
    assert got[0] is Context.primary(0)
    names = [c.name for c in log]
    assert names.count("cuDevicePrimaryCtxRetain") <= 1
    assert "cuDevicePrimaryCtxRelease" not in names
    if isinstance(no_context, SimulatedDriver):
        contexts = [o for o in no_context.live_objects() if o.kind == "context"]
        assert [(o.call, o.refcount) for o in contexts] == [("cuDevicePrimaryCtxRetain", 1)]


@pytest.mark.contract("O2")
def test_current_primary_context_is_the_held_object(no_context: Any) -> None:
    primary = Context.primary(0)
    assert primary.set_current() is None
    assert Context.current() is primary
    other = Context.create(0)
    assert other.set_current() is primary  # what set_current() returns is the held object too
    assert primary.set_current() == other
    driver.cuCtxSetCurrent(_null())
    other.close()
    assert not primary.closed


@pytest.mark.contract("O2")
def test_primary_context_current_in_another_thread_survives_close_and_collection(no_context: Any) -> None:
    ready = threading.Event()
    go = threading.Event()
    results: list[Any] = []

    def worker() -> None:
        Context.primary(0).set_current()
        ready.set()
        go.wait(30)
        results.append(driver.cuCtxSynchronize()[0])
        err, ptr = driver.cuMemAlloc(16)
        results.append(err)
        if not err:
            results.append(driver.cuMemFree(ptr)[0])
        driver.cuCtxSetCurrent(_null())

    thread = threading.Thread(target=worker)
    thread.start()
    assert ready.wait(30)
    primary = Context.primary(0)
    with record_calls() as log:
        primary.close()
        del primary
        gc.collect()
    go.set()
    thread.join()
    assert [c.name for c in log] == []
    assert [int(r) for r in results] == [0, 0, 0]
    assert not Context.primary(0).closed
    _misuse_free(no_context)


# --- O3: contexts do not outlive their driver ----------------------------------------------------------------


def _contexts_under(inner: SimulatedDriver) -> dict[str, Context]:
    """A created, the primary, a wrapped and a current-wrapper context of ``inner`` (installed now)."""
    created = Context.create(0)
    primary = Context.primary(0)
    previous = created.set_current()
    current = Context.current()
    assert current is not None
    driver.cuCtxSetCurrent(_null() if previous is None else previous.handle)
    return {
        "created": created,
        "primary": primary,
        "wrapped": Context.wrap(created.handle),
        "current": current,
    }


USES: dict[str, Callable[[Context], object]] = {
    "handle": lambda c: c.handle,
    "set_current": lambda c: c.set_current(),
    "synchronize": lambda c: c.synchronize(),
    "close": lambda c: c.close(),
}


@pytest.mark.contract("O3")
@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("kind", ["created", "primary", "wrapped", "current"])
def test_context_of_an_uninstalled_driver_refuses_every_use(sim: SimulatedDriver, kind: str, use: str) -> None:
    with simulated_driver(devices=2) as inner:
        contexts = _contexts_under(inner)
        inner_live = inner.live_objects()
    ctx = contexts[kind]
    assert ctx.closed
    assert ctx.stale
    before = sim.snapshot()
    with record_calls() as log, pytest.raises(ResourceClosedError, match="no longer installed"):
        USES[use](ctx)
    assert log == []
    assert not sim.changes_since(before)
    assert inner.live_objects() == inner_live  # nothing reached the old driver either


@pytest.mark.contract("O3")
@pytest.mark.parametrize("kind", ["created", "primary", "wrapped", "current"])
def test_context_of_an_exited_simulator_refuses_use_with_no_driver_installed(kind: str) -> None:
    with simulated_driver(devices=2) as inner:
        contexts = _contexts_under(inner)  # all kept: the wrappers' context stays alive
    ctx = contexts[kind]
    for use in ("handle", "set_current", "synchronize"):
        with pytest.raises(ResourceClosedError, match="no longer installed"):
            USES[use](ctx)


@pytest.mark.contract("O3")
def test_collecting_contexts_of_an_uninstalled_driver_releases_and_reports_nothing(sim: SimulatedDriver) -> None:
    with simulated_driver(devices=2) as inner:
        contexts = _contexts_under(inner)
        inner_live = inner.live_objects()
    assert any(o.kind == "context" and o.call == "cuCtxCreate" for o in inner_live)
    before = sim.snapshot()
    with record_calls() as log:  # CUDAWarning is an error in these tests: a report would fail here
        del contexts
        gc.collect()
    assert log == []
    assert not sim.changes_since(before)
    assert inner.live_objects() == inner_live


@pytest.mark.contract("O3")
def test_leaving_a_with_block_after_its_driver_was_uninstalled_calls_nothing(sim: SimulatedDriver) -> None:
    with simulated_driver(devices=2) as inner:
        ctx = Context.create(0)
        block = ctx.__enter__()  # the block began under the inner driver, which goes before it ends
        assert Context.current() == ctx
        inner_live = inner.live_objects()
    assert block is ctx
    before = sim.snapshot()
    with record_calls() as log:
        ctx.__exit__(None, None, None)
    assert log == []
    assert not sim.changes_since(before)
    assert inner.live_objects() == inner_live


@pytest.mark.contract("O3", "O5")
def test_a_deferred_collection_that_runs_after_its_driver_was_uninstalled_calls_nothing(
    sim: SimulatedDriver,
) -> None:
    from cuguard.errors import flush_deferred, use_driver
    from cuguard.errors.lowlevel import defer, deferring_lock

    gate = threading.Event()
    defer(gate.wait)  # the release thread waits here until the inner driver is gone
    inner = SimulatedDriver(2)
    try:
        # use_driver, not simulated_driver: the latter waits for the release thread before it uninstalls.
        with use_driver(inner):
            doomed = Context.create(0)
            with deferring_lock():  # collection_deferred() holds: its release is queued
                del doomed
                gc.collect()
            inner_live = inner.live_objects()
        assert any(o.kind == "context" and o.call == "cuCtxCreate" for o in inner_live)
        before = sim.snapshot()
        with record_calls() as log:
            gate.set()
            assert flush_deferred(timeout=60)
        assert log == []
        assert not sim.changes_since(before)
        assert inner.live_objects() == inner_live  # nothing reached the old driver either
    finally:
        gate.set()
        inner.close()


@pytest.mark.contract("O3")
def test_contexts_of_the_installed_driver_are_refused_while_another_is_installed(sim: SimulatedDriver) -> None:
    created = Context.create(0)
    primary = Context.primary(0)
    with simulated_driver(devices=2) as inner:
        assert Context.primary(0) is not primary
        with record_calls() as log:
            for ctx in (created, primary):
                with pytest.raises(ResourceClosedError, match="no longer installed"):
                    ctx.set_current()
                with pytest.raises(ResourceClosedError, match="no longer installed"):
                    ctx.synchronize()
        assert log == []
        assert inner.misuse == []
    # Installed again: usable again, and the primary context is still the one object.
    assert Context.primary(0) is primary
    assert not created.closed
    created.synchronize()
    primary.synchronize()
    created.close()
    assert sim.misuse == []


@pytest.mark.contract("O3")
def test_contexts_of_two_simulators_never_share_a_handle(sim: SimulatedDriver) -> None:
    mine = [Context.create(0) for _ in range(4)] + [Context.primary(0), Context.primary(1)]
    my_handles = {int(c.handle) for c in mine}
    with simulated_driver(devices=2) as inner:
        theirs = [Context.create(0) for _ in range(4)] + [Context.primary(0), Context.primary(1)]
        assert {int(c.handle) for c in theirs}.isdisjoint(my_handles)
        for ctx in theirs[:4]:
            ctx.close()
        assert inner.misuse == []
    for ctx in mine[:4]:
        ctx.close()


# --- O4: a destroyed context is known to every wrapper ---------------------------------------------------------


def _wrappers_of(ctx: Context, other: Context) -> dict[str, Context]:
    """Every kind of object that refers to ``ctx``: wrap(), current() and a set_current() return value."""
    wrapped = Context.wrap(ctx.handle)
    wrapped_int = Context.wrap(int(ctx.handle), device=0)
    ctx.set_current()
    current = Context.current()
    returned = other.set_current()
    assert current is not None
    assert returned is not None
    assert current == ctx
    assert returned == ctx
    return {"wrapped": wrapped, "wrapped-int": wrapped_int, "current": current, "returned": returned}


@pytest.mark.contract("O4")
@pytest.mark.parametrize("use", ["handle", "set_current", "synchronize"])
def test_destroyed_context_is_refused_by_every_wrapper(no_context: Any, use: str) -> None:
    ctx = Context.create(0)
    other = Context.create(0)
    wrappers = _wrappers_of(ctx, other)
    driver.cuCtxSetCurrent(_null())
    ctx.close()
    refused: dict[str, str] = {}
    with record_calls() as log:
        for name, wrapper in {"owner": ctx, **wrappers}.items():
            assert wrapper.closed, name
            with pytest.raises(ResourceClosedError) as info:
                USES[use](wrapper)
            refused[name] = str(info.value)
    assert log == []  # nothing reached the driver, so nothing switched to the destroyed context
    assert all("destroyed" in text for text in refused.values()), refused
    assert Context.current() is None
    other.close()
    _misuse_free(no_context)


@pytest.mark.contract("O4")
def test_wrapping_a_destroyed_context_gives_a_refusing_wrapper(no_context: Any) -> None:
    ctx = Context.create(0)
    value = int(ctx.handle)
    ctx.close()
    late = Context.wrap(value)
    assert late.closed
    with record_calls() as log:
        with pytest.raises(ResourceClosedError, match="destroyed"):
            late.set_current()
        late.close()  # closing a wrapper releases nothing
    assert log == []
    _misuse_free(no_context)


@pytest.mark.contract("O4")
def test_context_destroyed_while_current_is_refused_by_its_current_wrapper(no_context: Any) -> None:
    ctx = Context.create(0)
    ctx.set_current()
    current = Context.current()
    assert current is not None
    ctx.close()  # the driver pops it: no context is current now
    assert Context.current() is None
    with record_calls() as log, pytest.raises(ResourceClosedError, match="destroyed"):
        current.set_current()
    assert log == []
    assert Context.current() is None
    _misuse_free(no_context)


@pytest.mark.contract("O4")
def test_destroyed_context_is_known_to_wrappers_made_in_other_threads(no_context: Any) -> None:
    ctx = Context.create(0)
    made: list[Context] = []

    def worker() -> None:
        ctx.set_current()
        current = Context.current()
        assert current is not None
        made.append(current)
        driver.cuCtxSetCurrent(_null())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(made) == 1
    ctx.close()
    with record_calls() as log, pytest.raises(ResourceClosedError, match="destroyed"):
        made[0].set_current()
    assert log == []
    _misuse_free(no_context)


@pytest.mark.contract("O4", "C2")
def test_context_destroyed_by_a_failed_create_is_refused_when_wrapped(no_context: Any) -> None:
    from cuguard.errors import CUDAError
    from cuguard.testing import inject

    with record_calls() as log, inject("cuCtxPopCurrent", 201), pytest.raises(CUDAError, match="was destroyed"):
        Context.create(0)
    created = [c for c in log if c.name == "cuCtxCreate" and not c.status]
    assert len(created) == 1
    destroyed = [c for c in log if c.name == "cuCtxDestroy" and not c.status]
    assert len(destroyed) == 1
    handle = destroyed[0].args[0]
    with record_calls() as log, pytest.raises(ResourceClosedError, match="destroyed"):
        Context.wrap(handle).set_current()
    assert log == []
    driver.cuCtxSetCurrent(_null())
    _misuse_free(no_context)


@pytest.mark.contract("S2")
@pytest.mark.parametrize("how", ["call_in", "cleanup_in", "with"])
def test_a_context_destroyed_on_another_thread_while_current_here_is_never_switched_back_to(sim: Any, how: str) -> None:
    from cuguard.context import call_in, cleanup_in

    def within(context: Context, fn: Callable[[], object]) -> object:
        with context:
            return fn()

    doomed = Context.create(0)
    doomed.set_current()  # current on this thread from here on
    worker = threading.Thread(target=doomed.close)
    worker.start()
    worker.join()
    # The driver leaves a context destroyed on another thread current on this one.
    _, current = driver.cuCtxGetCurrent()
    assert int(current) == doomed._int
    other = Context.primary(0)
    if how == "with":
        assert within(other, Context.current) == other
    else:
        run = call_in if how == "call_in" else cleanup_in
        args: tuple[Any, ...] = (None,) if how == "call_in" else ()
        assert run(other, Context.current, *args) == other
    # Restoring the destroyed context would crash the real driver: the thread is left with none.
    assert Context.current() is None
    assert sim.misuse == []


@pytest.mark.contract("E3")
@pytest.mark.parametrize("flags", [-1, 1 << 32])
def test_context_flags_outside_32_bits_are_refused_before_the_driver(sim: Any, flags: int) -> None:
    from cuguard.testing import record_calls

    with record_calls() as log, pytest.raises(ValueError, match=r"flags must be 0 or more and below 2\*\*32"):
        Context.create(0, flags)
    assert "cuCtxCreate" not in [c.name for c in log]


@pytest.mark.contract("G2")
def test_a_context_whose_destroy_failed_is_still_restored(sim: Any) -> None:
    from cuguard.context import call_in
    from cuguard.errors import CUDAError
    from cuguard.testing import inject

    kept = Context.create(0)
    kept.set_current()
    with inject("cuCtxDestroy", 201, nth=1), pytest.raises(CUDAError, match="leaked"):
        kept.close()
    # The driver still has it, current on this thread: a switch elsewhere comes back to it.
    call_in(Context.primary(0), Context.current, None)
    _, current = driver.cuCtxGetCurrent()
    assert int(current) == kept._int
    driver.cuCtxSetCurrent(CUcontext(0))
    driver.cuCtxDestroy(kept._int)
