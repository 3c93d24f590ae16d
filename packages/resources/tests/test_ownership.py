"""Ownership and identity of devices and resources (contract O1-O6, and W1's wording for leaks).

Tests with the ``cuguard_driver`` fixture (directly or through ``device``)
also run on a GPU with ``--cuguard-driver=real``; those about drivers that are
no longer installed need two simulators and use the ``sim`` fixture.
"""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import KERNELS_CU, KERNELS_PTX
from cuda.bindings.driver import CUcontext

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError, driver, flush_deferred
from cuguard.resources import (
    Buffer,
    Device,
    Event,
    Kernel,
    LaunchConfig,
    Module,
    PinnedBuffer,
    Program,
    Resource,
    Stream,
    launch,
)
from cuguard.testing import (
    SimulatedDriver,
    assert_no_misuse,
    leak_check,
    nothing_left_behind,
    record_calls,
    simulated_driver,
)

COPIERS: dict[str, Callable[[Any], object]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
    "pickle-protocol-0": lambda obj: pickle.dumps(obj, protocol=0),
}

_images: dict[tuple[int, int], bytes] = {}


@pytest.fixture
def image(device: Device, cuguard_driver: Any) -> bytes:
    """The test kernels' image: PTX on the simulator, a cubin for the GPU on the real driver."""
    if isinstance(cuguard_driver, SimulatedDriver):
        return KERNELS_PTX
    arch = device.compute_capability
    if arch not in _images:
        _images[arch] = Program(KERNELS_CU, options=[f"-arch=sm_{arch[0]}{arch[1]}"]).compile("cubin")
    return _images[arch]


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[BaseException | None]:
    """What reaches ``sys.unraisablehook`` during the test (a CUDAWarning from a destructor lands here)."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append(args.exc_value))
    return seen


def _null() -> Any:
    return CUcontext(0)


def _no_failed_calls(log: Any) -> bool:
    """Nothing failed: every call succeeded, except the parameter query past a kernel's last parameter.

    Without ``cuFuncGetParamCount`` (a CUDA 13.0 driver, cuda-bindings 12) the end of a
    kernel's parameter list is found by a ``cuFuncGetParamInfo`` that fails on purpose.
    """
    return all(c.status == 0 or c.name == "cuFuncGetParamInfo" for c in log)


def _live_handles(drv: Any) -> set[int]:
    if isinstance(drv, SimulatedDriver):
        return {o.handle for o in drv.live_objects()}
    return set()


# --- O1: one owner per handle ---------------------------------------------------------------------------


def _alone(obj: Any) -> tuple[Any, list[Any]]:
    return obj, [obj]


def _kernel_of(module: Module) -> tuple[Any, list[Any]]:
    return module.get_kernel("empty"), [module]


# kind -> maker(device, stream, image) -> (object, what to close afterwards, in order)
MAKERS: dict[str, Callable[[Device, Stream, bytes], tuple[Any, list[Any]]]] = {
    "Stream": lambda d, s, i: _alone(d.create_stream()),
    "Event": lambda d, s, i: _alone(d.create_event()),
    "Event-recorded": lambda d, s, i: _alone(s.record()),
    "Buffer": lambda d, s, i: _alone(d.allocate(64)),
    "Buffer-stream-ordered": lambda d, s, i: _alone(d.allocate(64, stream=s)),
    "PinnedBuffer": lambda d, s, i: _alone(d.allocate_pinned(64)),
    "Module": lambda d, s, i: _alone(d.load_module(i)),
    "Kernel": lambda d, s, i: _kernel_of(d.load_module(i)),
}


@pytest.mark.contract("O1")
@pytest.mark.parametrize("how", sorted(COPIERS))
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_resources_cannot_be_copied_or_pickled(
    cuguard_driver: Any, device: Device, image: bytes, kind: str, how: str
) -> None:
    gc.collect()  # what an earlier test left for collection is released before the count below
    stream = device.create_stream()
    obj, to_close = MAKERS[kind](device, stream, image)
    name = kind.split("-", maxsplit=1)[0]
    assert type(obj).__name__ == name
    with record_calls() as log, pytest.raises(TypeError, match=rf"\b{name}\b") as info:
        COPIERS[how](obj)
    assert "cannot be copied or pickled" in str(info.value)
    assert log == []  # refused before anything reached the driver
    # The original is still the one owner: it releases once, and nothing else releases it again.
    with record_calls() as log:
        for item in to_close:
            item.close()
            item.close()
        del obj, to_close
        gc.collect()
    releases = [c.name for c in log if c.name.startswith(("cuStreamDestroy", "cuEventDestroy", "cuMem", "cuModule"))]
    assert len(releases) == 1, releases
    stream.sync()
    stream.close()
    assert_no_misuse(cuguard_driver)


# class -> (the factory its TypeError must name)
FACTORIES: dict[type, str] = {
    Stream: "Device.create_stream()",
    Event: "Device.create_event()",
    Buffer: "Device.allocate()",
    PinnedBuffer: "Device.allocate_pinned()",
    Module: "Device.load_module()",
    Kernel: "Module.get_kernel()",
    Resource: "Device",
}

# How a user might try to construct one: with nothing, with a handle, with a keyword.
CONSTRUCTIONS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "no-arguments": ((), {}),
    "a-handle": ((0x1000,), {}),
    "a-keyword": ((), {"handle": 0x1000}),
}


@pytest.mark.contract("O1")
@pytest.mark.parametrize("args", sorted(CONSTRUCTIONS))
@pytest.mark.parametrize("cls", list(FACTORIES), ids=lambda c: c.__name__)
def test_resources_cannot_be_constructed_directly(cuguard_driver: Any, cls: type, args: str) -> None:
    positional, keywords = CONSTRUCTIONS[args]
    with record_calls() as log, pytest.raises(TypeError) as info:
        cls(*positional, **keywords)
    message = str(info.value)
    assert cls.__name__ in message
    assert FACTORIES[cls] in message, message
    assert log == []


@pytest.mark.contract("O1", "O2")
def test_device_copies_are_the_device_and_pickles_round_trip_to_the_same_device(cuguard_driver: Any) -> None:
    count = Device.count()
    for ordinal in range(min(count, 2)):
        dev = Device(ordinal)
        with record_calls() as log:
            assert copy.copy(dev) is dev
            assert copy.deepcopy(dev) is dev
            assert copy.deepcopy([dev, dev])[0] is dev
        assert log == []
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(dev, protocol=protocol)) is dev
        assert pickle.loads(pickle.dumps(dev)).ordinal == ordinal


@pytest.mark.contract("O1", "O2")
def test_unpickled_device_belongs_to_the_driver_installed_then(sim: SimulatedDriver) -> None:
    data = pickle.dumps(Device(0))
    with simulated_driver(devices=2) as inner:
        theirs = pickle.loads(data)
        assert theirs is Device(0)
        with theirs.create_stream():
            pass
        assert inner.misuse == []
    assert pickle.loads(data) is Device(0)


# --- O2: Device(n) is one object; its primary context is retained once and held ------------------------------


@pytest.mark.contract("O2")
def test_device_is_one_object_from_many_threads(cuguard_driver: Any) -> None:
    barrier = threading.Barrier(8)
    got: list[Device] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            got.append(Device(0))
            got[-1].context  # noqa: B018 - every thread asks for the primary context at once too
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
    assert all(dev is got[0] for dev in got)
    assert got[0] is Device(0)
    if Device.count() > 1:
        assert Device(1) is not got[0]
        assert Device(1) is Device(1)
    names = [c.name for c in log]
    assert names.count("cuDevicePrimaryCtxRetain") <= 1
    assert "cuDevicePrimaryCtxRelease" not in names
    if isinstance(cuguard_driver, SimulatedDriver):
        contexts = [o for o in cuguard_driver.live_objects() if o.kind == "context"]
        assert [(o.call, o.refcount) for o in contexts] == [("cuDevicePrimaryCtxRetain", 1)]


@pytest.mark.contract("O2")
def test_set_current_on_a_temporary_device_then_a_raw_driver_call(cuguard_driver: Any) -> None:
    driver.cuCtxSetCurrent(_null())
    try:
        Device(0).set_current()  # the cuda.core idiom: the Device object is dropped at once
        gc.collect()
        err, ptr = driver.cuMemAlloc(16)
        assert int(err) == 0
        (err,) = driver.cuMemFree(ptr)
        assert int(err) == 0
        err, current = driver.cuCtxGetCurrent()
        assert int(err) == 0
        assert int(current) == int(Device(0).context.handle)
        if isinstance(cuguard_driver, SimulatedDriver):
            # The same through the simulator directly.
            err, ptr = cuguard_driver.cuMemAlloc(16)
            assert int(err) == 0
            assert cuguard_driver.cuMemFree(ptr) == (0,)
    finally:
        driver.cuCtxSetCurrent(_null())
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O2")
def test_temporary_devices_retain_the_primary_context_once(cuguard_driver: Any) -> None:
    driver.cuCtxSetCurrent(_null())
    with record_calls() as log:
        for _ in range(200):
            Device(0).allocate(256).close()
            Device(0).create_stream().close()
            Device(0).create_event().close()
        gc.collect()
    names = [c.name for c in log]
    assert names.count("cuDevicePrimaryCtxRetain") <= 1
    assert "cuDevicePrimaryCtxRelease" not in names
    assert names.count("cuMemAlloc") == 200
    assert names.count("cuStreamCreate") == 200
    if isinstance(cuguard_driver, SimulatedDriver):
        contexts = [o for o in cuguard_driver.live_objects() if o.kind == "context"]
        assert [(o.call, o.refcount) for o in contexts] == [("cuDevicePrimaryCtxRetain", 1)]
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O2")
def test_primary_context_is_the_devices_context_and_closing_it_releases_nothing(cuguard_driver: Any) -> None:
    dev = Device(0)
    ctx = Context.primary(0)
    assert ctx is dev.context
    assert ctx is Device(0).context
    with record_calls() as log:
        ctx.close()
        dev.context.close()
        del ctx
        gc.collect()
    assert log == []
    assert not dev.context.closed
    with dev.create_stream() as s:  # still usable
        s.sync()
    dev.sync()
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O2")
def test_primary_context_current_in_another_thread_stays_usable(cuguard_driver: Any) -> None:
    ready = threading.Event()
    go = threading.Event()
    results: list[int] = []

    def worker() -> None:
        Device(0).set_current()
        ready.set()
        go.wait(30)
        err, ptr = driver.cuMemAlloc(16)
        results.append(int(err))
        if not err:
            results.append(int(driver.cuMemFree(ptr)[0]))
        driver.cuCtxSetCurrent(_null())

    thread = threading.Thread(target=worker)
    thread.start()
    assert ready.wait(30)
    with record_calls() as log:
        Device(0).context.close()
        for _ in range(10):
            Device(0).allocate(16).close()
        gc.collect()
    go.set()
    thread.join()
    assert results == [0, 0]
    assert "cuDevicePrimaryCtxRelease" not in [c.name for c in log]
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O2")
def test_a_device_under_another_simulator_is_another_object(sim: SimulatedDriver) -> None:
    mine = Device(0)
    my_context = mine.context  # retained under this simulator
    with simulated_driver(devices=2) as inner:
        theirs = Device(0)
        assert theirs is not mine
        assert theirs is Device(0)
        assert theirs.context is not my_context
        with theirs.create_stream():
            pass
        assert inner.misuse == []
    assert Device(0) is mine  # this simulator's device again, once it is installed again


# --- O3: objects do not outlive their driver ------------------------------------------------------------------

LAUNCH = LaunchConfig(grid=1, block=1)


def _objects_under(inner: SimulatedDriver) -> dict[str, Any]:
    """One object of each kind, made under ``inner`` (installed now)."""
    dev = Device(0)
    stream = dev.create_stream()
    module = dev.load_module(KERNELS_PTX)
    ctx = Context.create(0)
    return {
        "device": dev,
        "stream": stream,
        "event": dev.create_event(),
        "recorded-event": stream.record(),
        "buffer": dev.allocate(64),
        "buffer-stream-ordered": dev.allocate(64, stream=stream),
        "pinned": dev.allocate_pinned(64),
        "module": module,
        "kernel": module.get_kernel("empty"),
        "created-context": ctx,
        "module-in-created-context": Module.load(ctx, KERNELS_PTX),
        "wrapped-stream": Stream.wrap(stream, dev.context),
    }


# kind -> use name -> use(object, a stream / event / buffer of the driver installed now)
O3_USES: dict[str, dict[str, Callable[[Any, dict[str, Any]], object]]] = {
    "stream": {
        "handle": lambda o, mine: o.handle,
        "close": lambda o, mine: o.close(),
        "sync": lambda o, mine: o.sync(),
        "query": lambda o, mine: o.query(),
        "flags": lambda o, mine: o.flags,
        "priority": lambda o, mine: o.priority,
        "record": lambda o, mine: o.record(),
        "wait-on-my-event": lambda o, mine: o.wait(mine["event"]),
        "my-stream-waits-on-it": lambda o, mine: mine["stream"].wait(o),
        "launch_host_func": lambda o, mine: o.launch_host_func(lambda: None),
        "__cuda_stream__": lambda o, mine: o.__cuda_stream__(),
        "allocate-on-it": lambda o, mine: Device(0).allocate(16, stream=o),
    },
    "event": {
        "handle": lambda o, mine: o.handle,
        "close": lambda o, mine: o.close(),
        "query": lambda o, mine: o.query(),
        "sync": lambda o, mine: o.sync(),
        "record-on-my-stream": lambda o, mine: o.record(mine["stream"]),
        "my-event-on-it": lambda o, mine: mine["event"].record(o) if isinstance(o, Stream) else None,
    },
    "recorded-event": {
        "handle": lambda o, mine: o.handle,
        "close": lambda o, mine: o.close(),
        "elapsed_since": lambda o, mine: o.elapsed_since(o),
    },
    "buffer": {
        "handle": lambda o, mine: o.handle,
        "ptr": lambda o, mine: o.ptr,
        "close": lambda o, mine: o.close(),
        "copy_from-host": lambda o, mine: o.copy_from(bytes(64)),
        "my-buffer-copies-from-it": lambda o, mine: mine["buffer"].copy_from(o),
        "copy_to-host": lambda o, mine: o.copy_to(bytearray(64)),
        "fill": lambda o, mine: o.fill(1),
    },
    "buffer-stream-ordered": {
        "handle": lambda o, mine: o.handle,
        "close": lambda o, mine: o.close(),
    },
    "pinned": {
        "handle": lambda o, mine: o.handle,
        "address": lambda o, mine: o.address,
        "numpy": lambda o, mine: o.numpy(),
        "close": lambda o, mine: o.close(),
        "my-buffer-copies-from-it": lambda o, mine: mine["buffer"].copy_from(o, stream=mine["stream"]),
    },
    "module": {
        "handle": lambda o, mine: o.handle,
        "close": lambda o, mine: o.close(),
        "get_kernel": lambda o, mine: o.get_kernel("empty"),
    },
    "module-in-created-context": {
        "handle": lambda o, mine: o.handle,
        "close": lambda o, mine: o.close(),
    },
    "kernel": {
        "launch-on-my-stream": lambda o, mine: launch(mine["stream"], LAUNCH, o),
        "handle": lambda o, mine: o.handle,
    },
    "wrapped-stream": {
        "handle": lambda o, mine: o.handle,
        "sync": lambda o, mine: o.sync(),
        "close": lambda o, mine: o.close(),
    },
    "created-context": {
        "load-a-module-into-it": lambda o, mine: Module.load(o, KERNELS_PTX),
        "wrap-a-stream-in-it": lambda o, mine: Stream.wrap(mine["stream"], o).sync(),
    },
    "device": {
        "context": lambda o, mine: o.context,
        "set_current": lambda o, mine: o.set_current(),
        "sync": lambda o, mine: o.sync(),
        "create_stream": lambda o, mine: o.create_stream(),
        "create_event": lambda o, mine: o.create_event(),
        "allocate": lambda o, mine: o.allocate(64),
        "allocate-on-my-stream": lambda o, mine: o.allocate(64, stream=mine["stream"]),
        "allocate_pinned": lambda o, mine: o.allocate_pinned(64),
        "load_module": lambda o, mine: o.load_module(KERNELS_PTX),
        "name": lambda o, mine: o.name,
        "compute_capability": lambda o, mine: o.compute_capability,
    },
}
O3_CASES = [(kind, use) for kind, uses in O3_USES.items() for use in uses]
O3_CASES.remove(("event", "my-event-on-it"))  # (an event is not a stream: not a use)


@pytest.fixture
def mine(sim: SimulatedDriver) -> Iterator[dict[str, Any]]:
    """A stream, an event and a buffer of the test's own simulator."""
    sim.register_kernel("empty", lambda s: None)
    dev = Device(0)
    objects = {"stream": dev.create_stream(), "event": dev.create_event(), "buffer": dev.allocate(64)}
    yield objects
    for obj in objects.values():
        obj.close()


@pytest.mark.contract("O3")
@pytest.mark.parametrize(("kind", "use"), O3_CASES, ids=[f"{k}-{u}" for k, u in O3_CASES])
def test_resource_of_an_uninstalled_driver_refuses_every_use(
    sim: SimulatedDriver, mine: dict[str, Any], kind: str, use: str
) -> None:
    with simulated_driver(devices=2) as inner:
        inner.register_kernel("empty", lambda s: None)
        objects = _objects_under(inner)
        inner_live = inner.live_objects()
    before = sim.snapshot()
    with record_calls() as log, pytest.raises(ResourceClosedError) as info:
        O3_USES[kind][use](objects[kind], mine)
    assert "no longer installed" in str(info.value)
    assert log == []  # its handle never reached the driver installed now
    assert not sim.changes_since(before)
    assert inner.live_objects() == inner_live  # and nothing was released in the old one


NO_DRIVER_CASES = [
    (kind, use)
    for kind, use in O3_CASES
    if not use.startswith(("my-", "wait-on-my", "record-on-my", "launch-on-my", "allocate-on-", "wrap-a-stream"))
]


@pytest.mark.contract("O3")
@pytest.mark.parametrize(("kind", "use"), NO_DRIVER_CASES, ids=[f"{k}-{u}" for k, u in NO_DRIVER_CASES])
def test_resource_of_an_exited_simulator_refuses_use_with_no_driver_installed(kind: str, use: str) -> None:
    # After the simulator's block no driver is installed (on a machine with no GPU, none can be
    # loaded): the refusal must come before any attempt to reach a driver.
    with simulated_driver(devices=2) as inner:
        objects = _objects_under(inner)
    with pytest.raises(ResourceClosedError, match="no longer installed"):
        O3_USES[kind][use](objects[kind], {})


@pytest.mark.contract("O3")
def test_collecting_resources_of_an_uninstalled_driver_releases_and_reports_nothing(
    sim: SimulatedDriver, unraisable: list[BaseException | None]
) -> None:
    with simulated_driver(devices=2) as inner:
        objects = _objects_under(inner)
        inner_live = inner.live_objects()
    Device(0).create_stream().close()
    before = sim.snapshot()
    with record_calls() as log:
        del objects
        gc.collect()
        assert flush_deferred(10)
    assert log == []
    assert unraisable == []
    assert not sim.changes_since(before)
    assert inner.live_objects() == inner_live


@pytest.mark.contract("O3")
def test_resources_are_refused_while_another_driver_is_installed_and_usable_after(sim: SimulatedDriver) -> None:
    dev = Device(0)
    stream = dev.create_stream()
    buf = dev.allocate(64)
    with simulated_driver(devices=2) as inner:
        with record_calls() as log:
            with pytest.raises(ResourceClosedError, match="no longer installed"):
                stream.sync()
            with pytest.raises(ResourceClosedError, match="no longer installed"):
                buf.copy_from(bytes(64))
            with pytest.raises(ResourceClosedError, match="no longer installed"):
                stream.close()
        assert log == []
        assert inner.misuse == []
    assert not stream.closed
    buf.copy_from(bytes(64), stream=stream)
    stream.sync()
    buf.close()
    stream.close()
    assert sim.misuse == []


@pytest.mark.contract("O3")
def test_resource_handles_of_two_simulators_never_coincide(sim: SimulatedDriver) -> None:
    def make() -> tuple[list[Any], set[int]]:
        dev = Device(0)
        stream = dev.create_stream()
        made: list[Any] = [stream]
        for _ in range(8):
            made += [dev.create_stream(), dev.create_event(), dev.allocate(64), dev.allocate(64, stream=stream)]
        return made, {int(o.handle) for o in made}

    mine, my_handles = make()
    with simulated_driver(devices=2) as inner:
        theirs, their_handles = make()
        assert my_handles.isdisjoint(their_handles)
        for obj in reversed(theirs):
            obj.close()
        assert inner.misuse == []
    for obj in reversed(mine):
        obj.close()
    assert sim.misuse == []


# --- O4: resources of a destroyed context know it ------------------------------------------------------------


def _stream_in(ctx: Context) -> Any:
    """A raw stream created in ``ctx`` (not owned by cuguard); the caller's context is restored."""
    previous = ctx.set_current()
    try:
        err, raw = driver.cuStreamCreate(0)
        assert int(err) == 0
    finally:
        driver.cuCtxSetCurrent(_null() if previous is None else previous.handle)
    return raw


@pytest.mark.contract("O4")
def test_resources_of_a_destroyed_context_refuse_use_and_close_says_leaked(
    cuguard_driver: Any, device: Device, image: bytes
) -> None:
    device.context  # noqa: B018 - retained before the count of driver calls starts
    ctx = Context.create(0)
    module = Module.load(ctx, image)
    kernel = module.get_kernel("empty")
    wrapped = Stream.wrap(_stream_in(ctx), ctx)
    event = wrapped.record()
    ctx.close()  # destroys the raw stream, the module and the event with it
    with record_calls() as log:
        with pytest.raises(ResourceClosedError, match="leaked") as info:
            module.close()
        assert "closed first" in str(info.value)
        assert module.closed
        module.close()  # idempotent: said once
        with pytest.raises(ResourceClosedError, match="leaked"):
            event.close()
        for use in (
            lambda: module.handle,
            lambda: module.get_kernel("empty"),
            lambda: event.handle,
            event.query,
            event.sync,
            lambda: wrapped.handle,
            wrapped.sync,
            wrapped.record,
            lambda: launch(wrapped, LAUNCH, kernel),
            lambda: device.allocate(16, stream=wrapped),
        ):
            with pytest.raises(ResourceClosedError):
                use()
        body = ValueError("the body's error")
        assert not wrapped.__exit__(ValueError, body, None)  # a wrapper owns nothing: closing it is fine,
        assert not getattr(body, "__notes__", [])  # nothing was refused or leaked, so nothing is noted
        assert wrapped.closed
        wrapped.close()
    assert log == []  # nothing reached the driver: nothing used or switched to the destroyed context
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O4")
def test_kernel_of_a_destroyed_context_cannot_be_launched_on_a_live_stream(
    cuguard_driver: Any, device: Device, image: bytes
) -> None:
    ctx = Context.create(0)
    module = Module.load(ctx, image)
    kernel = module.get_kernel("empty")
    stream = device.create_stream()
    ctx.close()
    with record_calls() as log, pytest.raises(ResourceClosedError, match="closed"):
        launch(stream, LAUNCH, kernel)
    assert log == []
    stream.close()
    with pytest.raises(ResourceClosedError, match="leaked"):
        module.close()
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("W1", "O4")
def test_collected_resource_of_a_destroyed_context_warns_naming_the_context(
    cuguard_driver: Any, device: Device, image: bytes
) -> None:
    ctx = Context.create(0)
    module = Module.load(ctx, image)
    handle = hex(int(module.handle))
    ctx_handle = hex(int(ctx.handle))
    ctx.close()
    with record_calls() as log, pytest.warns(CUDAWarning) as record:
        del module  # its last reference: collected here
    assert log == []
    messages = [str(w.message) for w in record if issubclass(w.category, CUDAWarning)]
    assert len(messages) == 1
    text = messages[0]
    assert "RuntimeError" not in text
    assert "ResourceClosedError" not in text
    assert ctx_handle in text
    assert handle in text
    assert "leaked" in text
    assert_no_misuse(cuguard_driver)


# --- O5: no CUDA call from the driver's threads --------------------------------------------------------------


def _hand_over_to_a_host_function(device: Device, gate: threading.Event) -> tuple[Any, ...]:
    """A stream and a buffer whose last references a queued host function holds; the caller keeps none."""
    stream = device.create_stream()
    buf = device.allocate(64)
    keep = [stream, buf]
    stream.launch_host_func(gate.wait)  # runs only once the test dropped its references
    stream.launch_host_func(keep.clear)  # drops the buffer (and the stream's entry drops the stream)
    done = stream.record()
    return weakref.ref(stream), weakref.ref(buf), done, int(stream.handle), int(buf.handle)


@pytest.mark.contract("O5")
def test_release_due_in_a_host_function_is_carried_out_on_a_python_thread(
    cuguard_driver: Any, device: Device, unraisable: list[BaseException | None]
) -> None:
    gate = threading.Event()
    stream_ref, buf_ref, done, stream_handle, buf_handle = _hand_over_to_a_host_function(device, gate)
    gc.collect()
    assert stream_ref() is not None  # the host function holds them
    assert buf_ref() is not None
    with record_calls() as log:
        gate.set()
        done.sync()  # the host functions have returned
        assert flush_deferred(10)  # and what became due in them was carried out
    assert stream_ref() is None
    assert buf_ref() is None
    released = {(c.name, int(c.args[0])) for c in log if c.name in ("cuStreamDestroy", "cuMemFree") and not c.status}
    assert ("cuStreamDestroy", stream_handle) in released
    assert ("cuMemFree", buf_handle) in released
    assert unraisable == []  # no warning, no failure
    assert not {stream_handle, buf_handle} & _live_handles(cuguard_driver)
    assert_no_misuse(cuguard_driver)  # in particular no "driver call from a host function"
    done.close()


@pytest.mark.contract("O5", "O6")
def test_host_function_holding_the_last_reference_to_a_created_context_and_its_module(
    cuguard_driver: Any, device: Device, image: bytes, unraisable: list[BaseException | None]
) -> None:
    stream = device.create_stream()
    gate = threading.Event()

    def hand_over() -> tuple[Any, Any, int]:
        ctx = Context.create(0)
        module = Module.load(ctx, image)
        keep = [ctx, module]
        stream.launch_host_func(gate.wait)
        stream.launch_host_func(keep.clear)
        return weakref.ref(ctx), weakref.ref(module), int(ctx.handle)

    with leak_check(), record_calls() as log:
        ctx_ref, module_ref, ctx_handle = hand_over()
        gc.collect()
        assert ctx_ref() is not None
        gate.set()
        stream.sync()
        assert flush_deferred(10)
        gc.collect()
        assert flush_deferred(10)
        assert ctx_ref() is None
        assert module_ref() is None
    names = [c.name for c in log if not c.status]
    assert names.index("cuModuleUnload") < names.index("cuCtxDestroy")
    assert [int(c.args[0]) for c in log if c.name == "cuCtxDestroy"] == [ctx_handle]
    assert unraisable == []
    assert_no_misuse(cuguard_driver)
    stream.close()


@pytest.mark.contract("O5")
def test_host_function_calling_the_driver_is_misuse_on_the_simulator(
    sim: SimulatedDriver, unraisable: list[BaseException | None]
) -> None:
    # The simulator notices what O5 forbids, so the tests above can fail; and cuguard's own seam
    # refuses such a call before it reaches any driver.
    device = Device(0)
    results: list[Any] = []
    refused: list[CUDAError] = []

    def through_cuguard() -> None:
        try:
            driver.cuCtxGetCurrent()
        except CUDAError as exc:
            refused.append(exc)

    with device.create_stream() as stream:
        stream.launch_host_func(through_cuguard)
        stream.launch_host_func(lambda: results.append(sim.cuMemAlloc(16)))
        stream.sync()
    assert [(e.code, e.call) for e in refused] == [(800, "cuCtxGetCurrent")]  # CUDA_ERROR_NOT_PERMITTED
    assert [int(r[0]) for r in results] == [800]
    assert [i.call for i in sim.misuse] == ["cuMemAlloc"]  # only the raw call reached the driver
    assert unraisable == []
    sim.misuse.clear()


# --- O6: collection order ------------------------------------------------------------------------------------


def _cycle_with_a_created_context(image: bytes) -> tuple[int, int, int]:
    """A reference cycle of a created context, a module loaded into it and an event of it; nothing else refers."""
    ctx = Context.create(0)
    module = Module.load(ctx, image)
    raw = _stream_in(ctx)
    event = Stream.wrap(raw, ctx).record()
    (err,) = driver.cuStreamDestroy(raw)  # the test's own raw stream; the event stays
    assert int(err) == 0
    cycle: list[Any] = [ctx, module, event, module.get_kernel("empty")]
    cycle.append(cycle)
    return int(ctx.handle), int(module.handle), int(event.handle)


@pytest.mark.contract("O6")
def test_cycle_of_a_context_and_its_resources_releases_the_context_last(
    cuguard_driver: Any, device: Device, image: bytes, unraisable: list[BaseException | None]
) -> None:
    gc.collect()
    with leak_check(), record_calls() as log:
        ctx_handle, module_handle, event_handle = _cycle_with_a_created_context(image)
        gc.collect()
        assert flush_deferred(10)
    released = [(c.name, int(c.args[0])) for c in log if c.name in ("cuModuleUnload", "cuEventDestroy", "cuCtxDestroy")]
    assert sorted(released) == sorted(
        [("cuModuleUnload", module_handle), ("cuEventDestroy", event_handle), ("cuCtxDestroy", ctx_handle)]
    )
    assert released[-1] == ("cuCtxDestroy", ctx_handle)
    assert _no_failed_calls(log)
    assert unraisable == []  # nothing reported as leaked
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("O6")
def test_cycles_of_several_contexts_each_release_their_context_last(
    sim: SimulatedDriver, unraisable: list[BaseException | None]
) -> None:
    gc.collect()
    with nothing_left_behind(sim), record_calls() as log:
        handles = [_cycle_with_a_created_context(KERNELS_PTX) for _ in range(5)]
        # One cycle holding all of them too, created contexts first.
        gc.collect()
        assert flush_deferred(10)
    order = [(c.name, int(c.args[0])) for c in log if c.name in ("cuModuleUnload", "cuEventDestroy", "cuCtxDestroy")]
    for ctx_handle, module_handle, event_handle in handles:
        destroyed_at = order.index(("cuCtxDestroy", ctx_handle))
        assert order.index(("cuModuleUnload", module_handle)) < destroyed_at
        assert order.index(("cuEventDestroy", event_handle)) < destroyed_at
    assert unraisable == []


@pytest.mark.contract("O6", "O2")
def test_cycle_of_primary_context_resources_is_released_and_the_context_kept(
    cuguard_driver: Any, device: Device, image: bytes, unraisable: list[BaseException | None]
) -> None:
    device.context  # noqa: B018 - retained before the leak check starts
    gc.collect()

    def make_cycle() -> set[int]:
        stream = device.create_stream()
        objects: list[Any] = [
            stream,
            device.create_event(),
            stream.record(),
            device.allocate(64),
            device.allocate(64, stream=stream),
            device.allocate_pinned(64),
            device.load_module(image),
        ]
        objects.append(objects)
        return {int(o.handle) for o in objects[:-1]}

    with leak_check(), record_calls() as log:
        handles = make_cycle()
        gc.collect()
        assert flush_deferred(10)
        if isinstance(cuguard_driver, SimulatedDriver):
            assert not handles & _live_handles(cuguard_driver)
    names = [c.name for c in log]
    assert "cuDevicePrimaryCtxRelease" not in names
    assert "cuCtxDestroy" not in names
    assert _no_failed_calls(log)
    assert unraisable == []
    assert not device.context.closed
    if isinstance(cuguard_driver, SimulatedDriver):
        contexts = [o for o in cuguard_driver.live_objects() if o.kind == "context"]
        assert [(o.call, o.refcount) for o in contexts] == [("cuDevicePrimaryCtxRetain", 1)]
    assert_no_misuse(cuguard_driver)


@pytest.mark.contract("S2")
def test_a_wrapper_of_a_cuguard_stream_is_closed_with_it_and_never_reaches_a_destroyed_stream(
    device: Device,
) -> None:
    owner = device.create_stream()
    borrowed = Stream.wrap(owner, owner.context)
    borrowed.sync()
    owner.close()
    with record_calls() as log, pytest.raises(ResourceClosedError):
        borrowed.sync()
    assert [c.name for c in log] == []
    borrowed.close()  # owns nothing: a no-op


@pytest.mark.contract("E3")
def test_a_foreign_stream_that_answers_garbage_is_refused_naming_the_parameter(device: Device) -> None:
    class Garbage:
        def __cuda_stream__(self) -> tuple[str]:
            return ("not a stream",)

    with device.create_stream() as stream:
        with pytest.raises(TypeError, match=r"other must be an Event or a Stream.*Garbage.__cuda_stream__\(\)"):
            stream.wait(Garbage())
        with pytest.raises(TypeError, match=r"obj must be a Stream.*Garbage"):
            Stream.wrap(Garbage(), stream.context)


@pytest.mark.contract("E3")
def test_packing_for_a_kernel_of_a_closed_module_is_refused(module: Module) -> None:
    kernel = module.get_kernel("fill_u32")
    module.close()
    with pytest.raises(ResourceClosedError):
        kernel.pack([0, 1, 2])


@pytest.mark.contract("S2")
@pytest.mark.parametrize("make", ["create_event", "create_stream", "allocate"])
def test_a_callers_context_destroyed_on_another_thread_is_never_switched_back_to(
    sim: SimulatedDriver, make: str
) -> None:
    """The creating methods' switch paths leave no context current rather than restore a destroyed one.

    A created context closed on another thread stays current on this one (the driver pops it off
    the destroying thread's stack only). Switching back to it would crash the real driver, so the
    restore after the switch-in-create leaves the thread with no context (the same rule as
    ``call_in``'s, on the paths that inline the switch).
    """
    device = Device(0)
    doomed = Context.create(0)
    doomed.set_current()
    worker = threading.Thread(target=doomed.close)
    worker.start()
    worker.join()
    _, current = driver.cuCtxGetCurrent()
    assert int(current) == doomed._int
    made = getattr(device, make)(*((64,) if make == "allocate" else ()))
    assert Context.current() is None
    assert sim.misuse == []
    made.close()
