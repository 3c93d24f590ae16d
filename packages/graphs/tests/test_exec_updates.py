"""Changes of parameters after instantiation: ``Node.set_params`` releasing what only the old parameters
used, and the per-node changes of executable graphs (``Graph.set_*``, enable/disable).

On the simulator and (``--cuguard-driver=real``) a GPU.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, LaunchConfig, Module, Stream
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls, settle

OUT_OF_MEMORY = 2
CONFIG = LaunchConfig(grid=1, block=8)


def _u32(pinned: Any) -> list[int]:
    return [int(x) for x in pinned.numpy("uint32")]


def _user_objects(sim: SimulatedDriver) -> int:
    return len([o for o in sim.live_objects() if o.kind == "user_object"])


# --- Node.set_params releases what only the previous parameters used (W5) --------------------


@pytest.mark.contract("W5")
def test_set_params_releases_the_previous_buffers_of_a_definition_no_graph_shares(
    cuguard_driver: Any, dev: Device, module: Module
) -> None:
    kernel = module.get_kernel("fill_u32")
    with leak_check():
        g = GraphDefinition(dev)
        first = dev.allocate(32)
        k = g.launch(CONFIG, kernel, first, np.uint32(1), 8)
        refs = [weakref.ref(first)]
        del first
        for i in range(20):  # an update loop: each call's previous buffer is released at once
            buf = dev.allocate(32)
            refs.append(weakref.ref(buf))
            k.set_args(buf, np.uint32(i), 8)
            del buf
            gc.collect()
            assert [r() is None for r in refs] == [True] * (len(refs) - 1) + [False]
        g.close()
        del g, k
        settle(cuguard_driver)
        assert refs[-1]() is None


@pytest.mark.contract("W5")
def test_set_params_keeps_what_an_executable_graph_uses_until_it_is_gone(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module
) -> None:
    kernel = module.get_kernel("fill_u32")
    out = dev.allocate_pinned(32)
    with leak_check():
        g = GraphDefinition(dev)
        old = dev.allocate(32)
        k = g.launch(CONFIG, kernel, old, np.uint32(5), 8)
        graph = g.instantiate()
        old_ref = weakref.ref(old)
        del old
        for i in range(5):
            last = dev.allocate(32)
            k.set_args(last, np.uint32(i), 8)
        gc.collect()
        kept = old_ref()
        assert kept is not None  # the executable graph still runs with it
        graph.launch(stream)
        stream.sync()
        kept.copy_to(out, stream)
        stream.sync()
        assert _u32(out) == [5] * 8
        del kept
        graph.close()
        del graph
        settle(cuguard_driver)
        assert old_ref() is None  # released once CUDA dropped the executable graph
        with g.instantiate() as again:  # the definition runs its latest parameters
            again.launch(stream)
            stream.sync()
        last.copy_to(out, stream)
        stream.sync()
        assert _u32(out) == [4] * 8
        del last
        g.close()
        del g, k
        settle(cuguard_driver)
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling
        assert not cuguard_driver.use_after_release
    out.close()


@pytest.mark.contract("W5")
def test_set_params_keeps_a_buffer_another_node_still_uses(cuguard_driver: Any, dev: Device, module: Module) -> None:
    kernel = module.get_kernel("fill_u32")
    with GraphDefinition(dev) as g:
        shared = dev.allocate(32)
        k = g.launch(CONFIG, kernel, shared, np.uint32(1), 8)
        g.memset(shared, 0)
        ref = weakref.ref(shared)
        del shared
        k.set_args(dev.allocate(32), np.uint32(2), 8)
        gc.collect()
        assert ref() is not None  # the memset node uses it
    settle(cuguard_driver)


@pytest.mark.contract("W5")
def test_set_params_after_a_clone_or_embed_keeps_what_the_copies_use(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module
) -> None:
    kernel = module.get_kernel("fill_u32")
    out = dev.allocate_pinned(32)
    with leak_check():
        g = GraphDefinition(dev)
        old = dev.allocate(32)
        k = g.launch(CONFIG, kernel, old, np.uint32(6), 8)
        copy = g.clone()
        parent = GraphDefinition(dev)
        parent.embed(g)
        ref = weakref.ref(old)
        del old
        k.set_args(dev.allocate(32), np.uint32(1), 8)
        g.close()
        del g, k
        gc.collect()
        kept = ref()
        assert kept is not None  # the clone and the parent run the old parameters
        for definition in (copy, parent):
            with definition.instantiate() as graph:
                graph.launch(stream)
                stream.sync()
            kept.copy_to(out, stream)
            stream.sync()
            assert _u32(out) == [6] * 8
        del kept
        copy.close()
        parent.close()
        del copy, parent
        settle(cuguard_driver)
        assert ref() is None
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling
        assert not cuguard_driver.use_after_release
    out.close()


@pytest.mark.contract("G1", "G3", "W5")
@pytest.mark.parametrize("call", ["cuUserObjectCreate", "cuGraphRetainUserObject", "cuGraphReleaseUserObject"])
def test_failed_payload_move_of_set_params_changes_nothing(
    sim: SimulatedDriver, dev: Device, stream: Stream, module: Module, call: str
) -> None:
    kernel = module.get_kernel("fill_u32")
    out = dev.allocate_pinned(32)
    old = dev.allocate(32)
    with GraphDefinition(dev) as g:
        k = g.launch(CONFIG, kernel, old, np.uint32(3), 8)
        k.memcpy(out, old)
        with g.instantiate() as graph:
            before = _user_objects(sim)
            new = dev.allocate(32)
            with inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
                k.set_args(new, np.uint32(4), 8)
            assert info.value.call == call
            del info  # its traceback holds the refused parameters
            assert k.params["args"][0] is old
            settle(sim)
            assert _user_objects(sim) == before
            new_ref = weakref.ref(new)
            del new
            gc.collect()
            assert new_ref() is None  # nothing keeps the refused parameters' buffer
            with g.instantiate() as again:  # the definition still runs its old parameters
                again.launch(stream)
                stream.sync()
            assert _u32(out) == [3] * 8
            k.set_args(dev.allocate(32), np.uint32(6), 8)  # and is usable (G3)
            graph.launch(stream)
            stream.sync()
            assert _u32(out) == [3] * 8
    settle(sim)
    assert not sim.dangling
    old.close()
    out.close()


# --- per-node changes of executable graphs -----------------------------------------------------


@pytest.mark.contract("G3", "W5")
def test_set_kernel_params_changes_the_executable_graph_only(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module
) -> None:
    kernel = module.get_kernel("fill_u32")
    out = dev.allocate_pinned(32)
    with leak_check():
        g = GraphDefinition(dev)
        buf = dev.allocate(32)
        k = g.launch(CONFIG, kernel, buf, np.uint32(1), 8)
        k.memcpy(out, buf)
        graph = g.instantiate()
        graph.set_kernel_params(k, CONFIG, module.get_kernel("fill_u32"), buf, np.uint32(8), 8)
        graph.launch(stream)
        stream.sync()
        assert _u32(out) == [8] * 8
        assert k.params["args"][1] == 1  # the definition keeps its own parameters
        other = dev.allocate(32)
        ref = weakref.ref(other)
        graph.set_kernel_params(k, CONFIG, kernel, other, np.uint32(2), 8)
        del other, buf
        g.close()
        del g, k
        gc.collect()
        assert ref() is not None  # the executable graph keeps what its new parameters use
        graph.launch(stream)
        stream.sync()
        graph.close()
        del graph
        settle(cuguard_driver)
        assert ref() is None
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling
    out.close()


@pytest.mark.contract("G3")
def test_set_memset_memcpy_callback_and_event_params(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(16)
    out2 = dev.allocate_pinned(16)
    calls: list[str] = []
    with leak_check():
        ev, ev2 = dev.create_event(), dev.create_event()
        a, b = dev.allocate(16), dev.allocate(16)
        g = GraphDefinition(dev)
        m = g.memset(a, 1)
        c = m.memcpy(out, a)
        h = c.callback(lambda: calls.append("first"))
        r = h.record(ev)
        with g.instantiate() as graph:
            graph.set_memset_params(m, b, 7)
            graph.set_memcpy_params(c, out2, b)
            graph.set_callback(h, lambda: calls.append("second"))
            graph.set_event(r, ev2)
            graph.launch(stream)
            stream.sync()
            ev2.sync()
        assert bytes(out2.numpy()) == b"\x07" * 16
        assert bytes(out.numpy()) != b"\x07" * 16
        assert calls == ["second"]
        g.close()
        del g, m, c, h, r
        settle(cuguard_driver)
        for obj in (ev, ev2, a, b):
            obj.close()
    out.close()
    out2.close()


@pytest.mark.contract("G3", "W5")
def test_repeated_changes_run_the_last_and_keep_the_replaced_alive(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    calls: list[int] = []
    buf = dev.allocate(16)
    with GraphDefinition(dev) as g:
        h = g.callback(lambda: None)
        m = h.memset(buf, 1)
        with g.instantiate() as graph:
            once = lambda: calls.append(0)  # noqa: E731 - a callable to drop
            ref = weakref.ref(once)
            graph.set_callback(h, once)
            del once
            fns = [lambda: calls.append(1), lambda: calls.append(2)]
            for i in range(10):  # an update loop alternating two callbacks and two values
                graph.set_callback(h, fns[i % 2])
                graph.set_memset_params(m, buf, i)
            gc.collect()
            assert ref() is not None  # a launch in flight may still call it (W5)
            graph.launch(stream)
            stream.sync()
            assert calls == [2]
        g.close()
        del g, h, m, graph
        settle(cuguard_driver)
        assert ref() is None
    buf.close()


@pytest.mark.contract("G3")
def test_set_child_runs_the_new_childs_parameters(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(16)
    buf = dev.allocate(16)
    with GraphDefinition(dev) as child, GraphDefinition(dev) as other, GraphDefinition(dev) as g:
        child.memset(buf, 1)
        other.memset(buf, 9)
        node = g.embed(child)
        node.memcpy(out, buf)
        with g.instantiate() as graph:
            graph.set_child(node, other)
            graph.launch(stream)
            stream.sync()
            assert bytes(out.numpy()) == b"\x09" * 16
            with GraphDefinition(dev) as bigger:  # another topology: refused, the graph runs as before
                bigger.memset(buf, 3).memset(buf, 4)
                with pytest.raises(CUDAError) as info:
                    graph.set_child(node, bigger)
                assert info.value.call == "cuGraphExecChildGraphNodeSetParams"
            graph.launch(stream)
            stream.sync()
            assert bytes(out.numpy()) == b"\x09" * 16
    settle(cuguard_driver)
    buf.close()
    out.close()


@pytest.mark.contract("G3")
def test_disabled_nodes_do_not_run_and_can_be_enabled_again(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(16)
    buf = dev.allocate(16)
    with GraphDefinition(dev) as g:
        first = g.memset(buf, 1)
        second = first.memset(buf, 2)
        second.memcpy(out, buf)
        with g.instantiate() as graph:
            assert graph.is_enabled(second)
            graph.set_enabled(second, False)
            assert not graph.is_enabled(second)
            graph.launch(stream)
            stream.sync()
            assert bytes(out.numpy()) == b"\x01" * 16
            graph.set_memset_params(second, buf, 5)  # a disabled node still takes changes
            graph.set_enabled(second, True)
            graph.launch(stream)
            stream.sync()
            assert bytes(out.numpy()) == b"\x05" * 16
    settle(cuguard_driver)
    buf.close()
    out.close()


def _change(graph: Any, change: str, nodes: tuple[Any, Any], kernel: Any, buf: Any) -> None:
    k, m = nodes
    if change == "kernel":
        graph.set_kernel_params(k, CONFIG, kernel, buf, np.uint32(9), 8)
    elif change == "memset":
        graph.set_memset_params(m, buf, 0x22)
    else:
        graph.set_enabled(m, False)


@pytest.mark.contract("G1", "G3", "W5")
@pytest.mark.parametrize(
    ("call", "change"),
    [
        ("cuGraphExecKernelNodeSetParams", "kernel"),
        ("cuGraphExecMemsetNodeSetParams", "memset"),
        ("cuGraphNodeSetEnabled", "enabled"),
    ],
)
def test_refused_change_leaves_the_executable_graph_as_it_was(  # noqa: PLR0917 - fixtures and parameters
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module, call: str, change: str
) -> None:
    kernel = module.get_kernel("fill_u32")
    out = dev.allocate_pinned(32)
    buf = dev.allocate(32)
    with GraphDefinition(dev) as g:
        k = g.launch(CONFIG, kernel, buf, np.uint32(4), 8)
        m = k.memset(buf, 0x11, 4)
        m.memcpy(out, buf)
        with g.instantiate() as graph:
            new = dev.allocate(32)
            ref = weakref.ref(new)
            with leak_check(), inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
                _change(graph, change, (k, m), kernel, new)
            assert info.value.call == call
            del info, new  # its traceback holds the refused parameters
            gc.collect()
            assert ref() is None  # a refused change keeps nothing alive
            graph.launch(stream)
            stream.sync()
            assert _u32(out)[1:] == [4] * 7
            assert _u32(out)[0] == 0x11111111
            assert graph.is_enabled(m)
    settle(cuguard_driver)
    buf.close()
    out.close()


@pytest.mark.contract("E3")
def test_per_node_changes_refuse_wrong_arguments_before_the_driver(
    cuguard_driver: Any, dev: Device, module: Module
) -> None:
    kernel = module.get_kernel("fill_u32")
    buf, buf2 = dev.allocate(32), dev.allocate(32)
    ev = dev.create_event()
    with GraphDefinition(dev) as g, GraphDefinition(dev) as other:
        k = g.launch(CONFIG, kernel, buf, np.uint32(1), 8)
        h = g.callback(lambda: None)
        c = g.memcpy(buf2, buf)
        r = g.record(ev)
        e = g.embed(other)
        foreign = other.memset(buf, 1)
        with g.instantiate() as graph, record_calls() as calls:
            with pytest.raises(TypeError, match="node"):
                graph.set_enabled(object(), True)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="instantiated from"):
                graph.set_memset_params(foreign, buf, 1)
            with pytest.raises(TypeError, match="memset"):
                graph.set_memset_params(k, buf, 1)
            with pytest.raises(TypeError, match="kernel or memset or memcpy"):
                graph.set_enabled(h, False)
            with pytest.raises(TypeError, match="enabled"):
                graph.set_enabled(k, 0)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="dst"):
                graph.set_memcpy_params(c, None, buf)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="event"):
                graph.set_event(r, None)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="callable"):
                graph.set_callback(h, 3)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="child"):
                graph.set_child(e, None)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="config"):
                graph.set_kernel_params(k, None, kernel, buf, np.uint32(1), 8)  # type: ignore[arg-type]
            assert not [call for call in calls if call.name.startswith(("cuGraphExec", "cuGraphNode"))]
    settle(cuguard_driver)
    for obj in (buf, buf2, ev):
        obj.close()


@pytest.mark.contract("E3", "S2")
def test_per_node_changes_refuse_nodes_of_a_closed_definition(cuguard_driver: Any, dev: Device) -> None:
    buf = dev.allocate(16)
    g = GraphDefinition(dev)
    m = g.memset(buf, 1)
    with g.instantiate() as graph:
        g.close()  # its node handles are gone: they must not reach the driver
        with record_calls() as calls, pytest.raises(ResourceClosedError):
            graph.set_memset_params(m, buf, 2)
        assert not calls
    settle(cuguard_driver)
    buf.close()
