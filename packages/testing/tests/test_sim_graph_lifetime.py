"""The simulated driver's graph fidelity: cloned-node lookup and user-object references of graphs.

These follow the CUDA documentation of user objects: references held by child graph nodes belong
to the child graphs; an executable graph updated with ``cuGraphExecUpdate`` takes clones of the new
source graph's references; references an executable graph drops (destroyed or updated) while a
launch is in flight are held until that launch has completed.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._bindings import get_edges
from cuguard.testing._sim import SimulatedDriver, simulated_driver

R = cb.CUresult
OK = R.CUDA_SUCCESS
_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_NO_SYNC = cb.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
_MOVE = cb.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE
_keep: list[Any] = []


def host_fn(fn: Any) -> Any:
    thunk = _HOSTFN(fn)
    _keep.append(thunk)
    return cb.CUhostFn(ctypes.cast(thunk, ctypes.c_void_p).value)


@pytest.fixture
def drv() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=2) as sim:
        sim.cuInit(0)
        _, ctx = sim.cuDevicePrimaryCtxRetain(0)
        sim.cuCtxSetCurrent(ctx)
        yield sim


class Destructors:
    """User objects whose destructor records their token."""

    def __init__(self, sim: SimulatedDriver) -> None:
        self.sim = sim
        self.ran: list[int | None] = []
        self.fn = host_fn(self.ran.append)

    def moved_into(self, graph: Any, token: int) -> Any:
        err, obj = self.sim.cuUserObjectCreate(token, self.fn, 1, _NO_SYNC)
        assert err == OK
        assert self.sim.cuGraphRetainUserObject(graph, obj, 1, _MOVE) == (OK,)
        return obj


def refcount(sim: SimulatedDriver, obj: Any) -> int:
    return next((o.refcount for o in sim.live_objects() if o.handle == int(obj)), 0)


# --- cuGraphNodeFindInClone ----------------------------------------------------------------------


def test_find_in_clone_maps_each_node(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    _, a = drv.cuGraphAddEmptyNode(g, None, 0)
    _, b = drv.cuGraphAddEmptyNode(g, [a], 1)
    _, c = drv.cuGraphAddEmptyNode(g, None, 0)
    drv.cuGraphDestroyNode(c)  # insertion order of the source is no longer the clone's index
    _, d = drv.cuGraphAddEmptyNode(g, [b], 1)
    _, clone = drv.cuGraphClone(g)
    found = {}
    for node in (a, b, d):
        err, twin = drv.cuGraphNodeFindInClone(node, clone)
        assert err == OK
        assert int(twin) != int(node)
        found[int(node)] = int(twin)
    err, froms, tos, n = get_edges(drv, clone, 2)
    assert n == 2
    assert {(int(x), int(y)) for x, y in zip(froms, tos, strict=True)} == {
        (found[int(a)], found[int(b)]),
        (found[int(b)], found[int(d)]),
    }
    # A node added to the source after the clone, a node of the clone itself, a removed copy.
    _, e = drv.cuGraphAddEmptyNode(g, None, 0)
    assert drv.cuGraphNodeFindInClone(e, clone) == (R.CUDA_ERROR_INVALID_VALUE, None)
    assert drv.cuGraphNodeFindInClone(cb.CUgraphNode(found[int(a)]), clone) == (R.CUDA_ERROR_INVALID_VALUE, None)
    drv.cuGraphDestroyNode(cb.CUgraphNode(found[int(d)]))
    assert drv.cuGraphNodeFindInClone(d, clone) == (R.CUDA_ERROR_INVALID_VALUE, None)
    # Not a clone of that graph at all.
    assert drv.cuGraphNodeFindInClone(a, g) == (R.CUDA_ERROR_INVALID_VALUE, None)
    drv.cuGraphDestroy(g)
    drv.cuGraphDestroy(clone)


# --- executable graphs destroyed or updated while a launch is in flight ------------------------------


def _blocked_launch(drv: SimulatedDriver, graph: Any, gate: threading.Event) -> tuple[Any, Any]:
    """Instantiate ``graph`` (whose first node waits for ``gate``), launch it; return (exec, stream)."""
    _, ex = drv.cuGraphInstantiate(graph, 0)
    _, stream = drv.cuStreamCreate(0)
    assert drv.cuGraphLaunch(ex, stream) == (OK,)
    return ex, stream


def _gated_graph(drv: SimulatedDriver, gate: threading.Event) -> Any:
    _, g = drv.cuGraphCreate(0)
    params = cb.CUDA_HOST_NODE_PARAMS()
    params.fn = host_fn(lambda _d: gate.wait(10))
    _, host = drv.cuGraphAddHostNode(g, None, 0, params)
    drv.cuGraphAddEmptyNode(g, [host], 1)
    return g


@pytest.mark.parametrize("sync", ["stream", "context", "query"])
def test_exec_destroy_holds_references_until_the_launch_completes(drv: SimulatedDriver, sync: str) -> None:
    uo = Destructors(drv)
    gate = threading.Event()
    g = _gated_graph(drv, gate)
    obj = uo.moved_into(g, 7)
    ex, stream = _blocked_launch(drv, g, gate)
    assert drv.cuGraphDestroy(g) == (OK,)
    assert drv.cuGraphExecDestroy(ex) == (OK,)
    assert uo.ran == []  # the launch still uses what the user object keeps alive
    assert refcount(drv, obj) == 1
    gate.set()
    if sync == "stream":
        assert drv.cuStreamSynchronize(stream) == (OK,)
    elif sync == "context":
        assert drv.cuCtxSynchronize() == (OK,)
    else:
        drv.drain()
        assert drv.cuStreamQuery(stream) == (OK,)
    assert uo.ran == [7]
    assert refcount(drv, obj) == 0
    drv.cuStreamDestroy(stream)


def test_exec_destroy_after_completion_releases_at_once(drv: SimulatedDriver) -> None:
    uo = Destructors(drv)
    gate = threading.Event()
    gate.set()
    g = _gated_graph(drv, gate)
    uo.moved_into(g, 8)
    ex, stream = _blocked_launch(drv, g, gate)
    drv.cuStreamSynchronize(stream)
    drv.cuGraphDestroy(g)
    assert uo.ran == []
    drv.cuGraphExecDestroy(ex)
    assert uo.ran == [8]
    drv.cuStreamDestroy(stream)


def test_exec_update_takes_the_new_sources_references(drv: SimulatedDriver) -> None:
    uo = Destructors(drv)
    gate = threading.Event()
    g = _gated_graph(drv, gate)
    old = uo.moved_into(g, 1)
    ex, stream = _blocked_launch(drv, g, gate)
    g2 = _gated_graph(drv, gate)  # the same shape
    new = uo.moved_into(g2, 2)
    drv.cuGraphDestroy(g)
    err, _ = drv.cuGraphExecUpdate(ex, g2)
    assert err == OK
    assert refcount(drv, new) == 2  # g2 and the exec
    assert refcount(drv, old) == 1  # the exec's old reference, held for the launch in flight
    assert uo.ran == []
    gate.set()
    drv.cuStreamSynchronize(stream)
    assert uo.ran == [1]  # released with the launch
    drv.cuGraphDestroy(g2)
    assert refcount(drv, new) == 1  # the executable graph alone keeps the new source's object
    drv.cuGraphExecDestroy(ex)
    assert uo.ran == [1, 2]
    drv.cuStreamDestroy(stream)


# --- child graph nodes ------------------------------------------------------------------------------


def test_child_graph_node_holds_the_childs_references(drv: SimulatedDriver) -> None:
    uo = Destructors(drv)
    _, child = drv.cuGraphCreate(0)
    drv.cuGraphAddEmptyNode(child, None, 0)
    obj = uo.moved_into(child, 3)
    _, parent = drv.cuGraphCreate(0)
    err, _ = drv.cuGraphAddChildGraphNode(parent, None, 0, child)
    assert err == OK
    assert refcount(drv, obj) == 2
    drv.cuGraphDestroy(child)
    assert uo.ran == []
    _, ex = drv.cuGraphInstantiate(parent, 0)
    _, copy = drv.cuGraphClone(parent)
    assert refcount(drv, obj) == 3  # the parent's child, the exec, the clone's child
    drv.cuGraphDestroy(parent)
    drv.cuGraphDestroy(copy)
    assert uo.ran == []
    assert refcount(drv, obj) == 1
    drv.cuGraphExecDestroy(ex)
    assert uo.ran == [3]


def test_destroying_a_child_graph_node_releases_its_references(drv: SimulatedDriver) -> None:
    uo = Destructors(drv)
    _, child = drv.cuGraphCreate(0)
    uo.moved_into(child, 4)
    _, parent = drv.cuGraphCreate(0)
    _, node = drv.cuGraphAddChildGraphNode(parent, None, 0, child)
    drv.cuGraphDestroy(child)
    assert uo.ran == []
    assert drv.cuGraphDestroyNode(node) == (OK,)
    assert uo.ran == [4]
    drv.cuGraphDestroy(parent)
