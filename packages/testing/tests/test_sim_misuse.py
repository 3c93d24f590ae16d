"""The simulator's side of the ownership model (O2, O3, O5): what it reports as misuse.

cuguard's ownership tests rely on the simulated driver to notice what the real
driver punishes: a driver call from a host function or a user-object
destructor (CUDA forbids them), a handle that outlived its driver reaching
another one, and work in a primary context whose last retain was released.
These tests drive the simulator through its raw API only (this package depends
on the errors layer alone).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.errors import use_driver
from cuguard.errors.lowlevel import driver_state
from cuguard.testing import SimulatedCrash, SimulatedDriver, simulated_driver

R = cb.CUresult
OK = R.CUDA_SUCCESS
NOT_PERMITTED = R.CUDA_ERROR_NOT_PERMITTED
NO_DESTRUCTOR_SYNC = cb.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
PTX = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry empty() { ret; }\n\x00"

_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_keep: list[Any] = []


def host_fn(fn: Callable[[Any], object]) -> Any:
    """A ``CUhostFn`` calling ``fn(user_data)``; the thunk is kept alive for the whole run."""
    thunk = _HOSTFN(fn)
    _keep.append(thunk)
    return cb.CUhostFn(ctypes.cast(thunk, ctypes.c_void_p).value)


def _ready(sim: SimulatedDriver) -> Any:
    """Initialize ``sim``, make device 0's primary context current; return that context."""
    assert sim.cuInit(0) == (OK,)
    err, ctx = sim.cuDevicePrimaryCtxRetain(0)
    assert err == OK
    assert sim.cuCtxSetCurrent(ctx) == (OK,)
    return ctx


@pytest.fixture
def drv() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=2) as sim:
        ctx = _ready(sim)
        yield sim
        sim.cuCtxSetCurrent(cb.CUcontext(0))
        sim.cuDevicePrimaryCtxRelease(0)
        del ctx


def _stream(sim: SimulatedDriver) -> Any:
    err, stream = sim.cuStreamCreate(0)
    assert err == OK
    return stream


# --- O5: no driver call from the driver's own threads ------------------------------------------------------

# Each raw call a host function might make, given the simulator and a stream of it.
RAW_CALLS: dict[str, Callable[[SimulatedDriver, Any], tuple[Any, ...]]] = {
    "cuCtxGetCurrent": lambda s, st: s.cuCtxGetCurrent(),
    "cuMemAlloc": lambda s, st: s.cuMemAlloc(16),
    "cuStreamQuery": lambda s, st: s.cuStreamQuery(st),
    "cuStreamDestroy": lambda s, st: s.cuStreamDestroy(st),
    "cuEventCreate": lambda s, st: s.cuEventCreate(0),
}


@pytest.mark.contract("O5")
@pytest.mark.parametrize("call", sorted(RAW_CALLS))
def test_driver_call_from_a_host_function_is_refused_and_recorded_as_misuse(drv: SimulatedDriver, call: str) -> None:
    stream = _stream(drv)
    before = {(o.kind, o.handle) for o in drv.live_objects()}
    seen: list[tuple[Any, ...]] = []
    threads: list[int] = []

    def body(_user_data: Any) -> None:
        threads.append(threading.get_ident())
        seen.append(RAW_CALLS[call](drv, stream))

    assert drv.cuLaunchHostFunc(stream, host_fn(body), None) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert threads == [drv.driver_thread_id]
    assert len(seen) == 1
    assert seen[0][0] == NOT_PERMITTED
    assert all(value is None for value in seen[0][1:])
    assert [(i.call, "host function" in i.description) for i in drv.misuse] == [(call, True)]
    # The refused call did nothing: no object made, none released.
    assert {(o.kind, o.handle) for o in drv.live_objects()} == before
    assert drv.cuStreamDestroy(stream) == (OK,)


@pytest.mark.contract("O5")
def test_static_table_calls_are_allowed_in_a_host_function(drv: SimulatedDriver) -> None:
    stream = _stream(drv)
    seen: list[tuple[Any, ...]] = []
    fn = host_fn(lambda _d: seen.append(drv.cuGetErrorName(R.CUDA_ERROR_OUT_OF_MEMORY)))
    assert drv.cuLaunchHostFunc(stream, fn, None) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert seen == [(OK, b"CUDA_ERROR_OUT_OF_MEMORY")]
    assert drv.misuse == []
    assert drv.cuStreamDestroy(stream) == (OK,)


@pytest.mark.contract("O5")
def test_the_same_call_outside_a_host_function_is_not_misuse(drv: SimulatedDriver) -> None:
    # The control for the test above: only the driver's thread is special.
    stream = _stream(drv)
    results: list[tuple[Any, ...]] = []
    thread = threading.Thread(target=lambda: results.append(drv.cuCtxGetCurrent()))
    thread.start()
    thread.join()
    assert results[0][0] == OK
    assert drv.misuse == []
    assert drv.cuStreamDestroy(stream) == (OK,)


@pytest.mark.contract("O5")
def test_driver_call_from_a_user_object_destructor_on_the_driver_thread_is_misuse() -> None:
    with simulated_driver(devices=1, destructors_on_driver_thread=True) as sim:
        _ready(sim)
        seen: list[tuple[Any, ...]] = []
        fn = host_fn(lambda _d: seen.append(sim.cuMemAlloc(16)))
        err, obj = sim.cuUserObjectCreate(None, fn, 1, NO_DESTRUCTOR_SYNC)
        assert err == OK
        assert sim.cuUserObjectRelease(obj, 1) == (OK,)
        sim.drain()
        assert len(seen) == 1
        assert seen[0][0] == NOT_PERMITTED
        assert [i.call for i in sim.misuse] == ["cuMemAlloc"]
        assert not [o for o in sim.live_objects() if o.kind == "device_memory"]
        sim.cuCtxSetCurrent(cb.CUcontext(0))
        sim.cuDevicePrimaryCtxRelease(0)


# --- O3: a handle never belongs to two simulators ----------------------------------------------------------


def _make_handles(sim: SimulatedDriver, n: int = 8) -> dict[str, set[int]]:
    """``n`` of each kind of object in ``sim`` (left alive), as ints by kind."""
    made: dict[str, set[int]] = {
        "context": set(),
        "stream": set(),
        "event": set(),
        "memory": set(),
        "host": set(),
        "module": set(),
        "graph": set(),
    }
    for _ in range(n):
        made["stream"].add(int(_stream(sim)))
        err, event = sim.cuEventCreate(0)
        assert err == OK
        made["event"].add(int(event))
        err, ptr = sim.cuMemAlloc(64)
        assert err == OK
        made["memory"].add(int(ptr))
        err, host = sim.cuMemHostAlloc(64, 0)
        assert err == OK
        made["host"].add(int(host))
        err, module = sim.cuModuleLoadData(PTX)
        assert err == OK
        made["module"].add(int(module))
        err, graph = sim.cuGraphCreate(0)
        assert err == OK
        made["graph"].add(int(graph))
    err, primary = sim.cuCtxGetCurrent()
    assert err == OK
    made["context"].add(int(primary))
    return made


@pytest.mark.contract("O3")
def test_two_live_simulators_never_hand_out_the_same_handle() -> None:
    a = SimulatedDriver(2)
    b = SimulatedDriver(2)
    try:
        # Interleaved, as when a test's simulator outlives another's objects.
        _ready(a)
        _ready(b)
        made_a = _make_handles(a)
        made_b = _make_handles(b)
        more_a = _make_handles(a)
        all_a = set().union(*made_a.values(), *more_a.values())
        all_b = set().union(*made_b.values())
        assert all_a.isdisjoint(all_b)
        # Within one simulator too, every object has its own handle (the primary context is one object).
        assert len(all_a) == 2 * sum(len(v) for kind, v in made_a.items() if kind != "context") + 1
    finally:
        a.close()
        b.close()


@pytest.mark.contract("O3")
def test_a_later_simulator_never_reissues_an_earlier_ones_handles() -> None:
    # (Pinned host memory is left out: its addresses are real host memory, reusable once freed.)
    with simulated_driver(devices=2) as first:
        _ready(first)
        old = set().union(*(v for kind, v in _make_handles(first).items() if kind != "host"))
    with simulated_driver(devices=2) as second:
        _ready(second)
        new = set().union(*(v for kind, v in _make_handles(second).items() if kind != "host"))
    assert old.isdisjoint(new)


# A raw handle of simulator A handed to simulator B: the real driver would crash on a foreign handle.
FOREIGN_CALLS: dict[str, tuple[str, Callable[[SimulatedDriver, dict[str, Any]], object]]] = {
    "cuStreamDestroy": ("stream", lambda s, a: s.cuStreamDestroy(a["stream"])),
    "cuStreamSynchronize": ("stream", lambda s, a: s.cuStreamSynchronize(a["stream"])),
    "cuEventDestroy": ("event", lambda s, a: s.cuEventDestroy(a["event"])),
    "cuEventRecord": ("event", lambda s, a: s.cuEventRecord(a["event"], cb.CUstream(0))),
}


@pytest.mark.contract("O3")
@pytest.mark.parametrize("call", sorted(FOREIGN_CALLS))
def test_a_handle_of_another_simulator_is_misuse(call: str) -> None:
    kind, use = FOREIGN_CALLS[call]
    with simulated_driver(devices=1) as a:
        _ready(a)
        stream = _stream(a)
        err, event = a.cuEventCreate(0)
        assert err == OK
        objects = {"stream": stream, "event": event}
        a_live = a.live_objects()
        with simulated_driver(devices=1) as b:
            _ready(b)
            b_live = b.live_objects()
            with pytest.raises(SimulatedCrash) as info:
                use(b, objects)
            assert not isinstance(info.value, Exception)  # a BaseException: rollback code cannot swallow it
            assert info.value.call == call
            assert [(i.call, i.handle) for i in b.misuse] == [(call, int(objects[kind]))]
            assert b.live_objects() == b_live  # the crash changed nothing in B
        # ... and A never heard of it: its objects are as they were.
        assert a.live_objects() == a_live
        assert a.misuse == []
        assert a.cuEventDestroy(event) == (OK,)
        assert a.cuStreamDestroy(stream) == (OK,)


# --- O2: the primary context must stay retained while it may be current -------------------------------------


@pytest.mark.contract("O2")
def test_work_in_a_primary_context_whose_last_retain_was_released_is_misuse() -> None:
    with simulated_driver(devices=1) as sim:
        _ready(sim)
        # The temporary-Device bug of cuda.core-style code: the last retain goes while the context is current.
        assert sim.cuDevicePrimaryCtxRelease(0) == (OK,)
        err, ptr = sim.cuMemAlloc(16)
        assert err == R.CUDA_ERROR_CONTEXT_IS_DESTROYED
        assert ptr is None
        assert len(sim.misuse) == 1
        assert "last retain was released" in sim.misuse[0].description
        sim.cuCtxSetCurrent(cb.CUcontext(0))


@pytest.mark.contract("O2")
def test_switching_to_an_unretained_primary_context_is_misuse() -> None:
    with simulated_driver(devices=1) as sim:
        ctx = _ready(sim)
        assert sim.cuCtxSetCurrent(cb.CUcontext(0)) == (OK,)
        assert sim.cuDevicePrimaryCtxRelease(0) == (OK,)
        assert sim.misuse == []
        sim.cuCtxSetCurrent(ctx)
        assert [i.call for i in sim.misuse] == ["cuCtxSetCurrent"]
        assert "not retained" in sim.misuse[0].description
        sim.cuCtxSetCurrent(cb.CUcontext(0))


@pytest.mark.contract("O2")
def test_a_primary_context_retained_and_held_is_not_misuse() -> None:
    # The control: one retain held for good (what cuguard does) keeps every call valid.
    with simulated_driver(devices=1) as sim:
        _ready(sim)
        for _ in range(3):
            err, ptr = sim.cuMemAlloc(16)
            assert err == OK
            assert sim.cuMemFree(ptr) == (OK,)
        contexts = [o for o in sim.live_objects() if o.kind == "context"]
        assert [(o.call, o.refcount) for o in contexts] == [("cuDevicePrimaryCtxRetain", 1)]
        assert sim.misuse == []
        sim.cuCtxSetCurrent(cb.CUcontext(0))


@pytest.mark.contract("O2", "O3")
def test_closing_a_simulator_drops_what_cuguard_kept_for_it() -> None:
    sim = SimulatedDriver(1)
    with use_driver(sim):
        driver_state()["probe"] = 1
        assert driver_state()["probe"] == 1
    with use_driver(sim):
        assert driver_state()["probe"] == 1  # kept while the driver lives, across installs
    sim.close()
    with use_driver(sim):
        assert "probe" not in driver_state()
