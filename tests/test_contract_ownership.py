"""O1-O6 across layers: one owner per handle, process-wide devices, drivers, destroyed contexts, callbacks, cycles."""

from __future__ import annotations

import copy
import gc
import pickle
import threading
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import KERNELS_PTX, emulate

from cuguard.context import Context
from cuguard.errors import CUDAWarning, ResourceClosedError, driver
from cuguard.graphs import Graph, GraphDefinition, Node
from cuguard.resources import (
    Buffer,
    Device,
    Event,
    Kernel,
    LaunchConfig,
    Module,
    PinnedBuffer,
    Stream,
    launch,
)
from cuguard.testing import SimulatedDriver, record_calls, simulated_driver


@pytest.mark.contract("O1")
def test_O1_owners_of_every_layer_refuse_copies_pickles_and_direct_construction(
    dev: Device, kernels: dict[str, Kernel], config: LaunchConfig
) -> None:
    stream = dev.create_stream()
    buf = dev.allocate(64, stream=stream)
    ctx = Context.create(0)
    g = GraphDefinition(dev)
    node = g.launch(config, kernels["fill_u8"], buf, 1, 64)
    owners: dict[str, Any] = {
        "Stream": stream,
        "Event": stream.record(),
        "Buffer": buf,
        "PinnedBuffer": dev.allocate_pinned(64),
        "Module": kernels["fill_u8"].module,
        "Kernel": kernels["fill_u8"],
        "Context": ctx,
        "GraphDefinition": g,
        "Node": node,
        "Graph": g.instantiate(),
    }
    with record_calls() as calls:
        for name, obj in owners.items():
            for how in (copy.copy, copy.deepcopy, pickle.dumps):
                with pytest.raises(TypeError, match=name):
                    how(obj)
    assert calls == []  # refused before anything reached the driver
    factories = {
        Stream: "create_stream",
        Event: "create_event",
        Buffer: "allocate",
        PinnedBuffer: "allocate_pinned",
        Module: "load_module",
        Kernel: "get_kernel",
        Context: "Context.primary",
        Node: "GraphDefinition",
        Graph: "instantiate",
    }
    for cls, factory in factories.items():
        with pytest.raises(TypeError, match=factory):
            cls()
    # the originals are untouched and release once
    owners["Graph"].close()
    g.close()
    buf.close()
    stream.close()
    ctx.close()
    assert copy.copy(dev) is dev
    assert copy.deepcopy(dev) is dev
    assert pickle.loads(pickle.dumps(dev)) is dev


@pytest.mark.contract("O2")
def test_O2_one_device_per_ordinal_and_its_primary_context_retained_once(
    cuguard_driver: Any, kernels: dict[str, Kernel], config: LaunchConfig
) -> None:
    seen: list[Device] = []
    with record_calls() as calls:
        threads = [threading.Thread(target=lambda: seen.append(Device(0))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for _ in range(20):  # temporary devices everywhere: graphs, buffers, streams
            with GraphDefinition(Device(0)) as g:
                g.memset(Device(0).allocate(64), 1)
                with g.instantiate() as graph, Device(0).create_stream() as s:
                    graph.launch(s)
                    s.sync()
    assert all(d is Device(0) for d in seen)
    assert "cuDevicePrimaryCtxRetain" not in [c.name for c in calls]
    assert "cuDevicePrimaryCtxRelease" not in [c.name for c in calls]
    Device(0).set_current()  # the cuda.core idiom: the context stays usable for any library
    err, ptr = driver.cuMemAlloc(64)
    assert not err
    (err,) = driver.cuMemFree(ptr)
    assert not err
    Device(0).context.close()  # releases nothing: the primary context is held for good
    launch(Device(0).create_stream(), config, kernels["fill_u8"], Device(0).allocate(64), 1, 64)
    Device(0).sync()
    if isinstance(cuguard_driver, SimulatedDriver):
        assert cuguard_driver.misuse == []


@pytest.mark.contract("O3")
def test_O3_objects_of_an_uninstalled_driver_refuse_every_use() -> None:
    old = SimpleNamespace()
    with simulated_driver(devices=1) as first:
        emulate(first)
        old.dev = Device(0)
        old.stream = old.dev.create_stream()
        old.buf = old.dev.allocate(64, stream=old.stream)
        old.event = old.stream.record()
        old.module = old.dev.load_module(KERNELS_PTX)
        old.kernel = old.module.get_kernel("fill_u8")
        old.ctx = Context.create(0)
        old.g = GraphDefinition(old.dev)
        old.node = old.g.launch(LaunchConfig(1, 64), old.kernel, old.buf, 1, 64)
        old.graph = old.g.instantiate()
    with simulated_driver(devices=1) as second, record_calls() as calls:
        emulate(second)
        new_stream = Device(0).create_stream()
        calls.clear()
        uses: dict[str, Callable[[], Any]] = {
            "stream.sync": old.stream.sync,
            "stream.close": old.stream.close,
            "event.query": old.event.query,
            "event.close": old.event.close,
            "buffer.fill": lambda: old.buf.fill(1),
            "buffer.close": old.buf.close,
            "module.get_kernel": lambda: old.module.get_kernel("fill_u8"),
            "module.close": old.module.close,
            "launch(kernel)": lambda: launch(new_stream, LaunchConfig(1, 64), old.kernel, 1, 2, 3),
            "context.set_current": old.ctx.set_current,
            "context.close": old.ctx.close,
            "device.sync": old.dev.sync,
            "device.create_stream": old.dev.create_stream,
            "graph definition.empty": old.g.empty,
            "graph definition.instantiate": old.g.instantiate,
            "graph definition.close": old.g.close,
            "node.empty": old.node.empty,
            "node.set_args": lambda: old.node.set_args(1, 2, 3),
            "graph.launch": lambda: old.graph.launch(new_stream),
            "graph.close": old.graph.close,
            "a new graph of the old device": lambda: GraphDefinition(old.dev),
            "a memset of the old buffer": lambda: GraphDefinition(Device(0)).memset(old.buf, 1),
            "the new stream waits on the old event": lambda: new_stream.wait(old.event),
        }
        problems = []
        for name, use in uses.items():
            try:
                use()
            except ResourceClosedError as error:
                if "no longer installed" not in str(error):
                    problems.append(f"{name}: the refusal does not say why: {error}")
            except Exception as error:  # noqa: BLE001 - collected: every use is checked
                problems.append(f"{name}: {type(error).__name__} instead of ResourceClosedError: {error}")
            else:
                problems.append(f"{name}: accepted")
        uses.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            vars(old).clear()  # collected under the new driver: nothing released, nothing said
            gc.collect()
        names = [c.name for c in calls]
        new_stream.close()
    assert not problems, "\n".join(problems)
    assert [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)] == []
    assert second.misuse == []
    assert second.use_after_release == []
    assert "cuStreamDestroy" not in names[:-1]  # only the new stream was destroyed, nothing of the old driver


@pytest.mark.contract("O3")
def test_O3_the_primary_context_of_an_uninstalled_driver_refuses_close_too() -> None:
    with simulated_driver(devices=1):
        primary = Device(0).context
    with simulated_driver(devices=1), pytest.raises(ResourceClosedError, match="no longer installed"):
        primary.close()


@pytest.mark.contract("O4")
def test_O4_every_object_of_a_destroyed_context_knows_it(cuguard_driver: Any, dev: Device, image: bytes) -> None:
    ctx = Context.create(0)
    previous = ctx.set_current()
    wrapper = Context.wrap(ctx.handle)
    current = Context.current()
    back = dev.set_current()  # returns the context that was current: ctx, as a wrapper
    of = SimpleNamespace()  # what lives in ctx
    of.module = Module.load(ctx, image)
    of.kernel = of.module.get_kernel("fill_u8")
    of.g = GraphDefinition(ctx)
    of.g.empty()
    of.graph = of.g.instantiate()
    stream = dev.create_stream()
    of.foreign = Stream.wrap(stream, ctx)
    assert back == ctx
    if previous is not None:
        previous.set_current()
    ctx.close()
    uses: dict[str, Callable[[], Any]] = {
        "wrapper.set_current": wrapper.set_current,
        "Context.current()'s value": current.set_current if current is not None else wrapper.set_current,
        "set_current()'s return value": back.set_current if back is not None else wrapper.set_current,
        "module.get_kernel": lambda: of.module.get_kernel("fill_u8"),
        "launch(kernel)": lambda: launch(stream, LaunchConfig(1, 64), of.kernel, dev.allocate(64), 1, 64),
        "graph definition.instantiate": of.g.instantiate,
        "graph.launch": lambda: of.graph.launch(stream),
        "wrapped stream.sync": of.foreign.sync,
        "Module.load": lambda: Module.load(wrapper, image),
    }
    problems = []
    for name, use in uses.items():
        try:
            use()
        except ResourceClosedError:
            pass
        except Exception as error:  # noqa: BLE001 - collected
            problems.append(f"{name}: {type(error).__name__} instead of ResourceClosedError: {error}")
        else:
            problems.append(f"{name}: accepted")
    assert not problems, "\n".join(problems)
    assert Context.current() is None or Context.current() != ctx
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        uses.clear()
        vars(of).clear()
        gc.collect()
    # what lived in the destroyed context is leaked and reported, never released into it (W5, S2)
    assert all("leaked" in str(w.message) for w in caught if issubclass(w.category, CUDAWarning))
    if isinstance(cuguard_driver, SimulatedDriver):
        assert cuguard_driver.misuse == [], cuguard_driver.misuse
    stream.close()


@pytest.mark.contract("O5")
def test_O5_callbacks_that_drop_the_last_references_never_call_the_driver(
    *,
    cuguard_driver: Any,
    dev: Device,
    stream: Stream,
    kernels: dict[str, Kernel],
    config: LaunchConfig,
    settled: Callable[[], None],
) -> None:
    victim_stream = dev.create_stream()
    buf = dev.allocate(64, stream=victim_stream)
    g = GraphDefinition(dev)
    g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 1, 64)
    graph = g.instantiate()
    g.close()
    held: list[Any] = [victim_stream, buf, graph, dev.allocate_pinned(64), dev.create_event()]
    graph.launch(victim_stream)
    handles = [int(o.handle) for o in held]
    del victim_stream, buf, graph, g
    stream.launch_host_func(held.clear)  # the host function holds the last references
    in_graph: list[Any] = [dev.allocate(64), dev.create_stream()]
    handles += [int(o.handle) for o in in_graph]
    g2 = GraphDefinition(dev)
    g2.callback(in_graph.clear)
    with g2.instantiate() as graph2:
        graph2.launch(stream)
    del in_graph
    g2.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream.sync()
        dev.sync()  # the graph launched on the dropped stream is done: CUDA drops the graph's user object
        settled()
    assert [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)] == []
    if isinstance(cuguard_driver, SimulatedDriver):
        assert cuguard_driver.misuse == [], cuguard_driver.misuse  # no driver call from its threads
        live = {o.handle for o in cuguard_driver.live_objects()}
        assert not [hex(h) for h in handles if h in live], "released on the release thread"


@pytest.mark.contract("O6")
def test_O6_a_cycle_of_a_context_its_resources_and_graphs_is_collected_resources_first(
    cuguard_driver: Any, dev: Device, image: bytes
) -> None:
    ctx = Context.create(0)
    module = Module.load(ctx, image)
    g = GraphDefinition(ctx)
    g.empty()
    graph = g.instantiate()
    stream = dev.create_stream()
    cycle: list[Any] = [ctx, module, module.get_kernel("add_u8"), g, graph, Stream.wrap(stream, ctx)]
    cycle.append(cycle)
    ctx_handle, module_handle = int(ctx.handle), int(module.handle)
    del ctx, module, g, graph, cycle
    with warnings.catch_warnings(record=True) as caught, record_calls() as calls:
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)] == []
    names = [(c.name, int(c.args[0]) if c.args else 0) for c in calls]
    assert ("cuCtxDestroy", ctx_handle) in names
    destroyed_at = names.index(("cuCtxDestroy", ctx_handle))
    assert names.index(("cuModuleUnload", module_handle)) < destroyed_at
    assert [n for n, _ in names].index("cuGraphExecDestroy") < destroyed_at
    if isinstance(cuguard_driver, SimulatedDriver):
        assert cuguard_driver.misuse == []
        assert not any(o.handle in (ctx_handle, module_handle) for o in cuguard_driver.live_objects())
    stream.close()
