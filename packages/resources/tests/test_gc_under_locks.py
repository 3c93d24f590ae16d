"""A garbage collection at every kind of lock cuguard takes completes and releases the garbage (S2, O5, O6).

Every lock of cuguard's layers and of the simulated driver is made by
``cuguard.errors.deferring_lock``. For each of them a collection of prepared
garbage (a created context with a module loaded into it, and memory, pinned
memory, a stream and an event of the primary context, all in reference cycles)
is forced at its acquisition through the locks' test hook
(``cuguard.errors._locks.on_acquire``): the operation finishes, and once the
release thread has run (``flush_deferred``) the simulator holds none of the
garbage. A lock a collection took again would hang: each operation runs on a
thread joined with a time bound, so that such a regression fails instead.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import Any

import pytest
from conftest import KERNELS_PTX

import cuguard.errors._locks as locks
from cuguard.context import Context
from cuguard.errors import CUDADriverNotFoundError, flush_deferred, use_driver
from cuguard.errors.lowlevel import collection_deferred, deferring_lock, enter_driver_callback, exit_driver_callback
from cuguard.resources import Device, Module, ObjectCode
from cuguard.testing import SimulatedDriver, record_calls, register_stand_in, remove_stand_in, run_bounded
from cuguard.testing.lowlevel import SafetyDriver

BOUND = 60.0  # seconds: the operations take milliseconds; only a hang reaches this


def _bounded(fn: Callable[[], object]) -> None:
    """Run ``fn``; fail (instead of hanging) when it does not finish within BOUND."""
    run_bounded(fn, BOUND, "a collection under a cuguard lock (deadlocked)")


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    """Collections happen only where a test forces them; gc's state is restored after."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if was_enabled:
        gc.enable()


def _prepare_garbage() -> set[tuple[str, int]]:
    """Dead objects of every kind, held only by reference cycles; ``(kind, handle)`` of what they own."""
    device = Device(0)
    ctx = Context.create(0)
    module = Module.load(ctx, KERNELS_PTX)
    buffer = device.allocate(256)
    pinned = device.allocate_pinned(256)
    stream = device.create_stream()
    event = device.create_event()
    owned = {
        ("context", int(ctx.handle)),
        ("module", int(module.handle)),
        ("device_memory", int(buffer.handle)),
        ("host_memory", int(pinned.handle)),
        ("stream", int(stream.handle)),
        ("event", int(event.handle)),
    }
    cycle: list[Any] = [ctx, module, buffer, pinned, stream, event]
    cycle.append(cycle)
    return owned


def _live(sim: SimulatedDriver) -> set[tuple[str, int]]:
    return {(obj.kind, obj.handle) for obj in sim.live_objects()}


def _holds(lock: Any) -> bool:
    """Whether ``lock`` is held (by this thread, for a re-entrant one)."""
    inner = lock._inner
    return bool(inner._is_owned()) if hasattr(inner, "_is_owned") else bool(inner.locked())


# --- one entry per lock: (the lock, what takes it, what the whole scenario runs under) -------------


def _seam() -> Any:
    from cuguard.errors import _seam

    return _seam


def _real_driver_first_load(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(_seam(), "_real", None)  # as before the first load (restored after the test)
    with suppress(CUDADriverNotFoundError):  # no CUDA driver on this machine: refused, after the lock
        _seam().real_driver()


def _resolve_again(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(_seam(), "_resolving", [True])  # as while a provider builds its driver: returns at once
    _seam()._resolve_default()


def _driver_callback(mp: pytest.MonkeyPatch) -> None:
    enter_driver_callback()
    exit_driver_callback()


def _attribute_faults(mp: pytest.MonkeyPatch) -> None:
    from cuguard.errors import attribute_faults

    with attribute_faults(False):
        pass


def _unraisable_type_probe(mp: pytest.MonkeyPatch) -> None:
    from cuguard.errors import _report

    mp.setattr(_report, "_ARGS_TYPE", [])  # as before the first report
    assert _report._unraisable_args_type() is not None


def _first_device(mp: pytest.MonkeyPatch) -> None:
    Device(1)  # the first use of device 1 under this driver


def _host_function(mp: pytest.MonkeyPatch) -> None:
    stream = Device(0).create_stream()
    ran: list[bool] = []
    stream.launch_host_func(lambda: ran.append(True))
    stream.sync()
    stream.close()
    assert ran == [True]


def _property_names(mp: pytest.MonkeyPatch) -> None:
    from cuguard.resources import _properties

    mp.setattr(_properties, "_names", None)  # as before the first property read
    assert Device(0).properties.warp_size > 0


def _dlpack_export(mp: pytest.MonkeyPatch) -> None:
    buffer = Device(0).allocate(64)
    capsule = buffer.__dlpack__()
    del capsule
    buffer.close()


def _program_cache(mp: pytest.MonkeyPatch) -> None:
    from cuguard.resources import ProgramCache

    cache = ProgramCache()
    assert len(cache) == 0


def _object_code_kernel(mp: pytest.MonkeyPatch) -> None:
    Device(0).set_current()
    code = ObjectCode.from_ptx(KERNELS_PTX)
    kernel = code.get_kernel("empty")
    assert kernel is not None


def _capture_left(mp: pytest.MonkeyPatch) -> None:
    from cuguard.resources import _captures

    stream = Device(0).create_stream()
    _captures.capture_left(stream)  # as when a fork's part of a capture ends (it was none: nothing to forget)
    stream.close()


def _pool_imports(mp: pytest.MonkeyPatch) -> None:
    from cuguard.resources import _ipc

    # An import needs a second process: the lock is taken as an import takes it.
    with _ipc._imports_lock:
        assert _ipc._imports() is not None


def _driver_call(mp: pytest.MonkeyPatch) -> None:
    Device(0).allocate(64).close()


def _stand_in_registration(mp: pytest.MonkeyPatch) -> None:
    register_stand_in("cuguard_gc_under_locks_probe", lambda launch: None)
    assert remove_stand_in("cuguard_gc_under_locks_probe")


def _recording(mp: pytest.MonkeyPatch) -> None:
    with record_calls():
        Device(0).allocate(64).close()


def _guarded_release(mp: pytest.MonkeyPatch) -> None:
    Device(0).allocate(64).close()  # a release passes the safety driver's ledger


def _sim_lock(sim: SimulatedDriver) -> Any:
    return sim._lock


def _worker_lock(sim: SimulatedDriver) -> Any:
    return sim._worker._cond._lock  # type: ignore[attr-defined]


def _faults_proxy_lock(sim: SimulatedDriver) -> Any:
    from cuguard.testing import _faults

    return _faults._installed._lock if _faults._installed is not None else _faults._install_lock


Site = tuple[str, Callable[[SimulatedDriver], Any], Callable[[pytest.MonkeyPatch], None], str]


def _module_lock(module: str, name: str) -> Callable[[SimulatedDriver], Any]:
    def find(sim: SimulatedDriver) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)

    return find


SITES: list[Site] = [
    # errors
    ("errors: the seam's load lock", _module_lock("cuguard.errors._seam", "_lock"), _real_driver_first_load, ""),
    (
        "errors: the seam's choice lock",
        _module_lock("cuguard.errors._seam", "_choice_lock"),
        _resolve_again,
        "",
    ),
    ("errors: the callbacks count", _module_lock("cuguard.errors._seam", "_callbacks_lock"), _driver_callback, ""),
    ("errors: the seam's route lock", _module_lock("cuguard.errors._seam", "_route_lock"), _driver_callback, ""),
    ("errors: fault attribution", _module_lock("cuguard.errors._sticky", "_lock"), _attribute_faults, ""),
    ("errors: the unraisable probe", _module_lock("cuguard.errors._report", "_ARGS_LOCK"), _unraisable_type_probe, ""),
    # resources
    ("resources: devices", _module_lock("cuguard.resources._device", "_devices_lock"), _first_device, ""),
    ("resources: host functions", _module_lock("cuguard.resources._stream", "_pending_lock"), _host_function, ""),
    ("resources: property names", _module_lock("cuguard.resources._properties", "_names_lock"), _property_names, ""),
    ("resources: the capture registry", _module_lock("cuguard.resources._captures", "_lock"), _capture_left, ""),
    ("resources: pool imports", _module_lock("cuguard.resources._ipc", "_imports_lock"), _pool_imports, ""),
    ("resources: DLPack exports", _module_lock("cuguard.resources._dlpack", "_lock"), _dlpack_export, ""),
    ("resources: an object code's modules", lambda sim: None, _object_code_kernel, "object code"),
    ("resources: a program cache", lambda sim: None, _program_cache, "program cache"),
    # the simulated driver and the testing layer
    ("simulator: the driver", _sim_lock, _driver_call, ""),
    ("simulator: addresses", _module_lock("cuguard.testing._sim.core", "_address_lock"), _driver_call, ""),
    ("simulator: the driver thread", _worker_lock, _host_function, ""),
    ("simulator: stand-ins", _module_lock("cuguard.testing._sim.standins", "_lock"), _stand_in_registration, ""),
    (
        "testing: installing the fault proxy",
        _module_lock("cuguard.testing._faults", "_install_lock"),
        _recording,
        "",
    ),
    ("testing: the fault proxy", _faults_proxy_lock, _recording, "proxy"),
    ("testing: the sweep's safety driver", lambda sim: None, _guarded_release, "safety driver"),
]


@pytest.mark.contract("S2", "O5")
@pytest.mark.usefixtures("no_automatic_collection")
@pytest.mark.parametrize(("lock_of", "operation", "special"), [s[1:] for s in SITES], ids=[s[0] for s in SITES])
def test_a_collection_at_each_lock_completes_and_releases_the_garbage(
    sim: SimulatedDriver,
    monkeypatch: pytest.MonkeyPatch,
    lock_of: Callable[[SimulatedDriver], Any],
    operation: Callable[[pytest.MonkeyPatch], None],
    special: str,
) -> None:
    guard = SafetyDriver(sim) if special == "safety driver" else None
    scope: AbstractContextManager[Any] = use_driver(guard) if guard is not None else nullcontext()
    with scope:
        Device(0).set_current()
        garbage = _prepare_garbage()
        assert garbage <= _live(sim)
        target: list[Any] = [lock_of(sim)]
        collected_under: list[bool] = []

        def collect_at_acquisition() -> None:
            lock = target[0]
            if lock is None:  # an instance's lock: the one being taken now (the hook runs once it is held)
                return
            if not collected_under and _holds(lock):
                collected_under.append(collection_deferred())
                gc.collect()

        if special == "object code":
            code = ObjectCode.from_ptx(KERNELS_PTX)
            target[0] = code._lock

            def operation(mp: pytest.MonkeyPatch, code: Any = code) -> None:
                Device(0).set_current()
                assert code.get_kernel("empty") is not None

        elif special == "program cache":
            from cuguard.resources import ProgramCache

            cache = ProgramCache()
            target[0] = cache._lock

            def operation(mp: pytest.MonkeyPatch, cache: Any = cache) -> None:
                cache.clear()
                assert len(cache) == 0

        elif special == "safety driver":
            assert guard is not None
            target[0] = guard._lock
        elif special == "proxy":
            from cuguard.testing import _faults

            def operation(mp: pytest.MonkeyPatch) -> None:
                with record_calls():
                    assert _faults._installed is not None
                    target[0] = _faults._installed._lock
                    Device(0).allocate(64).close()

        monkeypatch.setattr(locks, "on_acquire", collect_at_acquisition)
        try:
            _bounded(lambda: operation(monkeypatch))
        finally:
            monkeypatch.setattr(locks, "on_acquire", None)
        assert collected_under == [True]  # collected while the thread held the lock: releases deferred
        assert flush_deferred(BOUND)
        assert not garbage & _live(sim), "the prepared garbage was not released"
    assert sim.misuse == []
    assert sim.double_release == []
    assert sim.use_after_release == []
    if guard is not None:
        assert guard.incidents == []


@pytest.mark.contract("O6")
@pytest.mark.usefixtures("no_automatic_collection")
def test_a_context_collected_under_a_lock_goes_after_its_resources(sim: SimulatedDriver) -> None:
    # The collection runs while the thread holds a cuguard lock: every release goes to the
    # release thread, and the context's destroy is still the last of its garbage.
    Device(0).set_current()
    ctx = Context.create(0)
    module = Module.load(ctx, KERNELS_PTX)
    cycle: list[Any] = [ctx, module]
    cycle.append(cycle)
    ctx_handle, module_handle = int(ctx.handle), int(module.handle)
    del ctx, module, cycle
    lock = deferring_lock()

    def collect_under_the_lock() -> None:
        with lock:
            gc.collect()

    with record_calls() as log:
        _bounded(collect_under_the_lock)
        assert flush_deferred(BOUND)
    released = [(c.name, int(c.args[0])) for c in log if c.name in ("cuModuleUnload", "cuCtxDestroy")]
    assert released == [("cuModuleUnload", module_handle), ("cuCtxDestroy", ctx_handle)]
    assert {("context", ctx_handle), ("module", module_handle)}.isdisjoint(_live(sim))


@pytest.mark.contract("S2")
def test_a_collection_while_the_release_thread_starts_does_not_hang() -> None:
    # The first release handed over starts the release thread under its lock; a collection then
    # hands releases over again, which must not wait for that lock. A fresh interpreter, where
    # no release was ever handed over.
    script = textwrap.dedent(
        """
        import gc
        import cuguard.errors._locks as locks
        from cuguard.errors import defer, flush_deferred
        from cuguard.resources import Device
        from cuguard.testing import simulated_driver

        with simulated_driver() as sim:
            device = Device(0)
            device.set_current()
            gc.disable()
            buffer = device.allocate(64)
            cycle = [buffer]
            cycle.append(cycle)
            handle = int(buffer.handle)
            del buffer, cycle
            seen = []

            def collect_once():
                if not seen:
                    seen.append(True)
                    gc.collect()

            locks.on_acquire = collect_once
            defer(lambda: None)  # the first release handed over: starts the release thread
            locks.on_acquire = None
            assert seen == [True]
            assert flush_deferred(30)
            assert handle not in {o.handle for o in sim.live_objects()}
        print("done")
        """
    )
    env = dict(os.environ, CUGUARD_DRIVER="sim")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=BOUND, env=env, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
