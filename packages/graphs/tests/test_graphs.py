"""Contract tests of the graph layer, on the simulator and (``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError
from cuguard.graphs import GraphDefinition, GraphUpdateError, Node, flush_deferred, pending_payloads
from cuguard.resources import Device, LaunchConfig, Module, Stream
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls, restore_fault, settle

OUT_OF_MEMORY = 2
MUTATING = {"cuGraphAddEmptyNode", "cuGraphAddDependencies", "cuGraphRemoveDependencies", "cuGraphDestroyNode"}


def _u32(pinned: Any) -> Any:
    return pinned.numpy("uint32")


# --- lifetime (G5, W5, W1) ---------------------------------------------------------------------


@pytest.mark.contract("G5", "W5")
def test_memset_node_keeps_its_buffer_alive(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(64)
    with leak_check():
        g = GraphDefinition(dev)
        buf = dev.allocate(64)
        ref = weakref.ref(buf)
        g.memset(buf, 0xAB).memcpy(out, buf)
        graph = g.instantiate()
        del buf
        g.close()
        del g
        gc.collect()
        assert ref() is not None  # the executable graph still uses it
        graph.launch(stream)
        stream.sync()
        assert bytes(out.numpy()) == b"\xab" * 64
        graph.close()
        del graph
        settle(cuguard_driver)
        assert ref() is None  # released once CUDA dropped the graph
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling
    out.close()


@pytest.mark.contract("G5", "W5")
def test_kernel_node_keeps_buffer_kernel_and_module_alive(
    cuguard_driver: Any, dev: Device, stream: Stream, kernel_image: bytes
) -> None:
    out = dev.allocate_pinned(4 * 16)
    with leak_check():
        module = dev.load_module(kernel_image)
        g = GraphDefinition(dev)
        buf = dev.allocate(4 * 16)
        kernel = module.get_kernel("fill_u32")
        mod_ref = weakref.ref(module)
        k = g.launch(LaunchConfig(grid=1, block=16), kernel, buf, np.uint32(7), 16)
        k.memcpy(out, buf)
        graph = g.instantiate()
        del buf, kernel, k, g
        gc.collect()
        graph.launch(stream)
        stream.sync()
        assert list(_u32(out)) == [7] * 16
        assert mod_ref() is not None
        graph.close()
        del graph, module
        settle(cuguard_driver)
    assert mod_ref() is None  # the module was unloaded once the graph was gone
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling
        assert not cuguard_driver.use_after_release
    out.close()


@pytest.mark.contract("G5", "W5")
def test_launch_in_flight_keeps_resources_after_everything_is_closed(
    cuguard_driver: Any, dev: Device, stream: Stream
) -> None:
    out = dev.allocate_pinned(32)
    release = threading.Event()
    with leak_check():
        g = GraphDefinition(dev)
        buf = dev.allocate(32)
        g.callback(lambda: release.wait(30)).memset(buf, 0x5A).memcpy(out, buf)
        graph = g.instantiate()
        graph.launch(stream)  # blocked in the host callback until `release` is set
        del buf
        g.close()
        graph.close()
        del g, graph
        gc.collect()
        assert flush_deferred(10)  # whatever CUDA released so far is released now
        release.set()
        stream.sync()
        assert bytes(out.numpy()) == b"\x5a" * 32
        settle(cuguard_driver)
    out.close()


@pytest.mark.contract("G5")
def test_embedded_child_keeps_its_resources_alive(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(16)
    with leak_check():
        child = GraphDefinition(dev)
        buf = dev.allocate(16)
        child.memset(buf, 3).memcpy(out, buf)
        parent = GraphDefinition(dev)
        parent.empty().embed(child)
        del buf
        child.close()
        del child
        graph = parent.instantiate()
        parent.close()
        del parent
        gc.collect()
        graph.launch(stream)
        stream.sync()
        assert bytes(out.numpy()) == b"\x03" * 16
        graph.close()
        del graph
        settle(cuguard_driver)
    out.close()


@pytest.mark.contract("W1")
def test_failed_deferred_release_is_a_warning(sim: SimulatedDriver, dev: Device) -> None:
    g = GraphDefinition(dev)
    buf = dev.allocate(16)
    g.memset(buf, 1)
    del buf

    def close_and_settle() -> None:
        g.close()  # the release runs on cuguard's daemon thread, maybe before this returns
        settle(sim)

    with inject("cuMemFree", 999), pytest.warns(CUDAWarning, match="cuMemFree"):
        close_and_settle()


@pytest.mark.contract("G5")
def test_definitions_and_executables_are_released_by_gc(cuguard_driver: Any, dev: Device) -> None:
    settle(cuguard_driver)
    payloads = pending_payloads()
    with leak_check():
        g = GraphDefinition(dev)
        g.empty().empty()
        graph = g.instantiate()
        assert pending_payloads() == payloads + 1
        del g, graph
        settle(cuguard_driver)
    assert pending_payloads() == payloads  # CUDA dropped the user object; its payload was released


# --- host callbacks (W6) ------------------------------------------------------------------------


@pytest.mark.contract("W6")
def test_callback_exception_goes_to_unraisablehook_and_graph_carries_on(
    cuguard_driver: Any, dev: Device, stream: Stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: seen.append(args.exc_value))
    ran: list[str] = []

    def bad() -> None:
        ran.append("bad")
        raise ZeroDivisionError("user bug")

    with GraphDefinition(dev) as g:
        g.callback(bad).callback(lambda: ran.append("after"))
        with g.instantiate() as graph:
            graph.launch(stream)
            graph.launch(stream)
            stream.sync()
    assert ran == ["bad", "after", "bad", "after"]
    assert len(seen) == 2
    assert all(isinstance(e, ZeroDivisionError) for e in seen)


# --- update (Graph.update) ---------------------------------------------------------------------


@pytest.mark.contract("G3")
def test_update_applies_new_kernel_arguments(cuguard_driver: Any, dev: Device, stream: Stream, module: Module) -> None:
    out = dev.allocate_pinned(4 * 8)
    buf = dev.allocate(4 * 8)
    kernel = module.get_kernel("fill_u32")
    config = LaunchConfig(grid=1, block=8)
    with GraphDefinition(dev) as g:
        k = g.launch(config, kernel, buf, np.uint32(1), 8)
        k.memcpy(out, buf)
        with g.instantiate() as graph:
            with g.clone() as changed:
                changed.find_node(k).set_args(buf, np.uint32(9), 8)
                graph.update(changed)
            graph.launch(stream)
            stream.sync()
            assert list(_u32(out)) == [9] * 8
    out.close()


@pytest.mark.contract("G5", "W5")
def test_update_keeps_the_new_definitions_resources_alive(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    out = dev.allocate_pinned(16)
    with leak_check():
        g = GraphDefinition(dev)
        buf = dev.allocate(16)
        g.memset(buf, 1).memcpy(out, buf)
        graph = g.instantiate()
        other = GraphDefinition(dev)
        buf2 = dev.allocate(16)
        other.memset(buf2, 2).memcpy(out, buf2)
        graph.update(other)
        del buf, buf2
        other.close()
        g.close()
        del g, other
        gc.collect()
        assert flush_deferred(10)
        graph.launch(stream)
        stream.sync()
        assert bytes(out.numpy()) == b"\x02" * 16
        graph.close()
        del graph
        settle(cuguard_driver)
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling
        assert not cuguard_driver.use_after_release
    out.close()


@pytest.mark.contract("E3", "G3")
def test_update_refused_for_topology_says_why(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    with GraphDefinition(dev) as g, GraphDefinition(dev) as other:
        a = g.empty()
        a.empty()
        other.empty()
        other.empty()
        with g.instantiate() as graph:
            with record_calls() as log, pytest.raises(GraphUpdateError) as info:
                graph.update(other)
            assert not [c for c in log if c.name == "cuGraphExecUpdate"]
            error = info.value
            assert isinstance(error, ValueError)
            assert isinstance(error, CUDAError)
            assert error.reason == "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED"
            assert "edges" in str(error)
            graph.launch(stream)  # still usable
            stream.sync()


@pytest.mark.contract("E3", "G3")
def test_update_refused_for_node_type_says_which_node(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g, GraphDefinition(dev) as other:
        g.empty()
        other.callback(lambda: None)
        with g.instantiate() as graph, pytest.raises(GraphUpdateError) as info:
            graph.update(other)
        assert info.value.reason == "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED"
        assert "host" in str(info.value)


@pytest.mark.contract("E3", "G3")
def test_an_executable_graph_records_the_nodes_joined_after_an_earlier_instantiate(
    cuguard_driver: Any, dev: Device
) -> None:
    # The definition's shape is cached between changes; a node the hot builder adds (join, empty) is one.
    with GraphDefinition(dev) as g, GraphDefinition(dev) as one:
        first = g.empty()
        one.empty()
        with g.instantiate():  # the shape is read (one node) and cached
            pass
        first.join()
        with inject("cuGraphAddEmptyNode", OUT_OF_MEMORY), pytest.raises(CUDAError):
            first.join()  # refused: the graph is unchanged
        with g.instantiate() as graph, pytest.raises(GraphUpdateError) as info:
            graph.update(one)
        assert "the definition has 1 nodes, the executable graph 2" in str(info.value)


@pytest.mark.contract("E3")
def test_nodes_keep_their_creation_order_across_the_builders(cuguard_driver: Any, dev: Device) -> None:
    # The empty-node builder numbers its nodes lazily; the other builders and the views must still
    # see creation order, whatever order the nodes are named in.
    with GraphDefinition(dev) as g:
        a = g.empty()
        h = g.callback(lambda: None)
        b = a.join()
        c = g.empty(b, h, a)
        assert list(c.pred) == [a, h, b]
        d = g.empty()
        d.pred |= {c, b}
        assert list(d.pred) == [b, c]
        assert [repr(n).split()[2] for n in (a, h, b, c, d)] == ["#0", "#1", "#2", "#3", "#4"]
    with GraphDefinition(dev) as g:
        first = g.empty()
        assert repr(first).startswith("<Node empty #0 ")  # numbered when asked
    g = GraphDefinition(dev)
    never_numbered = g.empty()
    g.close()
    assert repr(never_numbered).startswith("<Node empty #? ")  # closed before anything asked


@pytest.mark.contract("G3")
def test_update_refused_by_the_driver_is_a_graph_update_error(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        g.empty()
        with g.instantiate() as graph, g.clone() as same:
            with inject("cuGraphExecUpdate", 910), pytest.raises(GraphUpdateError) as info:
                graph.update(same)
            assert info.value.reason.startswith("CU_GRAPH_EXEC_UPDATE_ERROR")
            graph.update(same)  # usable afterwards


# --- creation failures (G1) -------------------------------------------------------------------


@pytest.mark.contract("G1")
@pytest.mark.parametrize("call", ["cuGraphInstantiate", "cuUserObjectCreate", "cuGraphRetainUserObject"])
def test_failed_instantiate_creates_nothing(cuguard_driver: Any, dev: Device, call: str) -> None:
    # A definition of plain nodes gets its user object at the first instantiate: undone on failure.
    with GraphDefinition(dev) as g:
        g.empty().empty()
        with leak_check(), inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            g.instantiate()
        assert info.value.call == call
        with g.instantiate():  # the definition is still usable
            pass


@pytest.mark.contract("G1", "C2")
def test_failed_restore_after_instantiate_destroys_the_executable(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        g.empty()
        with leak_check(), restore_fault(), pytest.raises(CUDAError, match="could not be restored"):
            g.instantiate()
        dev.set_current()  # C2: the caller must set a context again
    from cuda.bindings.driver import CUcontext

    from cuguard.errors import driver

    driver.cuCtxSetCurrent(CUcontext(0))


@pytest.mark.contract("G1")
def test_failed_definition_creates_nothing(sim: SimulatedDriver, dev: Device) -> None:
    with leak_check(), inject("cuGraphCreate", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        GraphDefinition(dev)
    assert info.value.call == "cuGraphCreate"
    settle(sim)
    assert not [o for o in sim.live_objects() if o.kind in ("graph", "user_object")]


@pytest.mark.contract("G1", "G3")
@pytest.mark.parametrize("call", ["cuUserObjectCreate", "cuGraphRetainUserObject"])
def test_failed_user_object_at_the_first_owner_creates_nothing(sim: SimulatedDriver, dev: Device, call: str) -> None:
    # Plain nodes need no user object; the first node that uses a buffer attaches one first.
    buf = dev.allocate(16)
    with GraphDefinition(dev) as g:
        a = g.empty()
        assert not [o for o in sim.live_objects() if o.kind == "user_object"]
        with leak_check(), inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            a.memset(buf, 1)
        assert info.value.call == call
        assert g.nodes == {a}
        settle(sim)
        assert not [o for o in sim.live_objects() if o.kind == "user_object"]
        b = a.memset(buf, 1)  # the definition is still usable
        assert g.edges == {(a, b)}
        assert len([o for o in sim.live_objects() if o.kind == "user_object"]) == 1
    buf.close()


@pytest.mark.contract("B4", "G1")
def test_add_node_with_dependencies_is_one_all_or_nothing_driver_call(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        a, b = g.empty(), g.empty()
        with record_calls() as log:
            c = g.empty(a, b)
        assert [x.name for x in log if x.name in MUTATING] == ["cuGraphAddEmptyNode"]
        with record_calls() as log, inject("cuGraphAddEmptyNode", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
            g.empty(a, c)
        assert info.value.call == "cuGraphAddEmptyNode"
        assert [x.name for x in log if x.name in MUTATING] == ["cuGraphAddEmptyNode"]
        assert g.nodes == {a, b, c}
        assert g.edges == {(a, c), (b, c)}


@pytest.mark.contract("G1")
@pytest.mark.parametrize("call", ["cuGraphClone", "cuUserObjectCreate", "cuGraphNodeFindInClone"])
def test_failed_clone_creates_nothing(sim: SimulatedDriver, dev: Device, call: str) -> None:
    with GraphDefinition(dev) as g:
        g.empty().callback(lambda: None)  # an owner: the copy attaches its own payload
        before = {(o.kind, o.handle) for o in sim.live_objects()}
        with leak_check(), inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError):
            g.clone()
        settle(sim)
        assert {(o.kind, o.handle) for o in sim.live_objects()} == before


# --- all-or-nothing with failing undo (B4, G4) ------------------------------------------------------


@pytest.mark.contract("B4", "G4")
def test_failed_undo_of_connect_is_a_note_and_leaves_the_documented_edge(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        a, b, c, d = (g.empty() for _ in range(4))
        with (
            inject("cuGraphAddDependencies", OUT_OF_MEMORY, nth=3),
            inject("cuGraphRemoveDependencies", OUT_OF_MEMORY, nth=1),
            pytest.raises(CUDAError) as info,
        ):
            g.connect((a, b), (a, c), (a, d))
        assert info.value.call == "cuGraphAddDependencies"
        notes = [n for n in info.value.__notes__ if "cleanup also failed" in n]
        assert len(notes) == 1
        assert "cuGraphRemoveDependencies" in notes[0]
        assert "remains" in notes[0]
        # (a, c) was undone last-first and its removal failed; (a, b) was removed again.
        assert g.edges == {(a, c)}


@pytest.mark.contract("B4", "G3")
def test_replacing_predecessors_is_all_or_nothing(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        a, b, c, d = (g.empty() for _ in range(4))
        d.pred = {a, b}
        with inject("cuGraphAddDependencies", OUT_OF_MEMORY, nth=1), pytest.raises(CUDAError):
            d.pred = {c}
        assert set(d.pred) == {a, b}
        d.pred = {b, c}
        assert set(d.pred) == {b, c}
        assert set(a.succ) == set()
        d.pred.clear()
        assert g.edges == set()


# --- validation (E3) ----------------------------------------------------------------------------


@pytest.mark.contract("E3")
def test_invalid_edges_are_refused_before_any_driver_call(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g, GraphDefinition(dev) as other:
        a, b = g.empty(), g.empty()
        x = other.empty()
        g.connect((a, b))
        gone = g.empty()
        gone.destroy()
        with record_calls() as log:
            with pytest.raises(ValueError, match="itself"):
                g.connect((a, a))
            with pytest.raises(ValueError, match="another graph"):
                g.connect((a, x))
            with pytest.raises(ValueError, match="exists"):
                g.connect((a, b))
            with pytest.raises(ValueError, match="twice"):
                g.disconnect((a, b), (a, b))
            with pytest.raises(ValueError, match="no edge"):
                g.disconnect((b, a))
            with pytest.raises(ResourceClosedError):
                g.connect((a, gone))
            with pytest.raises(TypeError):
                a.succ.add("b")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="twice"):
                g.empty(a, a)
            with pytest.raises(ValueError, match="itself"):
                a.pred = {a}
            with pytest.raises(ValueError, match="embed itself"):
                g.embed(g)
        assert not [c for c in log if c.name in MUTATING or c.name.startswith("cuGraphAdd")]
    with pytest.raises(ResourceClosedError):
        g.empty()
    with pytest.raises(ResourceClosedError):
        a.succ.add(b)


@pytest.mark.contract("S2")
def test_failed_destroy_leaks_the_node(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        a = g.empty()
        b = a.empty()
        with inject("cuGraphDestroyNode", OUT_OF_MEMORY), pytest.raises(CUDAError, match="leaked"):
            b.destroy()
        assert b.closed
        assert g.nodes == {a, b}
        assert g.edges == {(a, b)}
        with pytest.raises(ResourceClosedError):
            b.handle  # noqa: B018
        with g.instantiate():  # the definition stays usable
            pass


# --- node kinds -------------------------------------------------------------------------------


def test_views_behave_like_sets(cuguard_driver: Any, dev: Device) -> None:
    with GraphDefinition(dev) as g:
        a, b, c = g.empty(), g.empty(), g.empty()
        c.pred |= {a, b}
        assert c.pred == {a, b}
        assert a in c.pred
        assert len(c.pred) == 2
        c.pred -= {a}
        assert list(c.pred) == [b]
        c.pred.add(b)  # present: nothing
        c.pred.discard(a)  # absent: nothing
        with pytest.raises(KeyError):
            c.pred.remove(a)
        c.pred ^= {a, b}
        assert c.pred == {a}
        a.succ &= {b}
        assert c.pred == set()
        j = a.join(b, c)
        assert j.pred == {a, b, c}
        assert j.type == "empty"
        assert isinstance(j, Node)


def test_events_alloc_free_and_upload(cuguard_driver: Any, dev: Device, stream: Stream, module: Module) -> None:
    event = dev.create_event(timing=False)
    kernel = module.get_kernel("fill_u32")
    with GraphDefinition(dev) as g:
        alloc = g.allocate(64)
        assert alloc.ptr > 0
        fill = alloc.launch(LaunchConfig(grid=1, block=16), kernel, alloc.ptr, np.uint32(5), 16)
        rec = fill.record(event)
        rec.wait(event).deallocate(alloc)
        kinds = sorted(n.type for n in g.nodes)
        assert kinds == ["event_record", "kernel", "mem_alloc", "mem_free", "wait_event"]
        with g.instantiate() as graph:
            graph.upload(stream)
            graph.launch(stream)
            graph.launch(stream)
            stream.sync()
    del event
