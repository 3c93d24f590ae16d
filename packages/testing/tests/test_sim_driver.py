"""Behaviour of the simulated driver by area: contexts, memory, kernels, graphs, user objects, accounting."""

from __future__ import annotations

import ctypes
import inspect
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from cuda.bindings import driver as cb

from cuguard.errors import active_driver, install_driver
from cuguard.testing._bindings import BINDINGS_MAJOR, EDGE_DATA, get_edges, node_dependencies, node_dependents
from cuguard.testing._faults import _arity
from cuguard.testing._sim import SimulatedDriver, nothing_left_behind, simulated_driver
from cuguard.testing._sim.facts import PRE_INIT_CALLS

R = cb.CUresult
OK = R.CUDA_SUCCESS
T = cb.CUgraphNodeType
PTX = b".version 8.0\n.target sm_90\n.visible .entry fill(.param .u64 p, .param .u32 v, .param .u32 n)\n{ ret; }\n"
_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
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


def fill(sim: SimulatedDriver, ptr: int, value: int, n: int) -> None:
    sim.write(ptr, np.full(n, value, dtype=np.uint32).tobytes())


# --- init, contexts ------------------------------------------------------------------------------


def test_everything_but_four_calls_needs_cuinit() -> None:
    sim = SimulatedDriver()
    assert sim.cuDeviceGetCount() == (R.CUDA_ERROR_NOT_INITIALIZED, None)
    assert sim.cuDriverGetVersion() == (OK, 13000)
    assert sim.cuGetErrorName(R.CUDA_ERROR_OUT_OF_MEMORY) == (OK, b"CUDA_ERROR_OUT_OF_MEMORY")
    assert sim.cuInit(0) == (OK,)
    assert sim.cuDeviceGetCount() == (OK, 2)
    assert sim.cuDeviceGet(2) == (R.CUDA_ERROR_INVALID_DEVICE, None)


def test_unknown_function_is_named() -> None:
    with pytest.raises(AttributeError, match="cuNoSuchCall"):
        _ = SimulatedDriver().cuNoSuchCall


def _parameters(fn: Any) -> list[tuple[str, bool]]:
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.default is not inspect.Parameter.empty) for p in params if p.name != "self"]


def test_functions_have_the_signatures_of_the_installed_bindings() -> None:
    # cuda-bindings 12.9.x and 13.x differ (cuCtxCreate, the graph edge functions): the simulator
    # follows whichever is installed, parameter for parameter.
    checked = 0
    for name in sorted(n for n in dir(SimulatedDriver) if n.startswith("cu")):
        real = getattr(cb, name, None)
        if real is None:
            continue  # the simulator's own extras (cuguardRestoreContext, ...)
        sim = inspect.unwrap(getattr(SimulatedDriver, name))
        assert _parameters(sim) == _parameters(real), f"{name} (cuda-bindings {BINDINGS_MAJOR})"
        checked += 1
    assert checked > 90


def _dummy_arguments(fn: Any) -> list[Any]:
    """Values cuda-bindings converts for each parameter: ``None`` for the optional ones and lists, else 0."""
    params = inspect.signature(fn).parameters.values()
    return [None if "Optional" in str(p.annotation) or "list" in str(p.annotation) else 0 for p in params]


def test_failures_have_the_return_convention_of_the_installed_bindings() -> None:
    # A failed call returns the status and None for each output the installed cuda-bindings
    # documents (13.x edge queries return one more: edgeData). Before cuInit every call fails.
    sim = SimulatedDriver()
    checked = 0
    for name in sorted(n for n in dir(SimulatedDriver) if n.startswith("cu")):
        if getattr(cb, name, None) is None or name in PRE_INIT_CALLS:
            continue
        result = getattr(sim, name)(*_dummy_arguments(getattr(cb, name)))
        assert result == (R.CUDA_ERROR_NOT_INITIALIZED, *(None,) * (_arity(name) - 1)), name
        checked += 1
    assert checked > 90


def test_edge_queries_return_what_the_installed_bindings_return(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    _, a = drv.cuGraphAddEmptyNode(g, None, 0)
    _, b = drv.cuGraphAddEmptyNode(g, [a], 1)
    extra = 1 if EDGE_DATA else 0  # 13.x returns an edgeData list before the count
    edges = drv.cuGraphGetEdges(g, 1)
    deps = drv.cuGraphNodeGetDependencies(b, 1)
    outs = drv.cuGraphNodeGetDependentNodes(a, 1)
    assert (len(edges), len(deps), len(outs)) == (4 + extra, 3 + extra, 3 + extra)
    assert (edges[-1], deps[-1], outs[-1]) == (1, 1, 1)
    if EDGE_DATA:
        assert isinstance(edges[3][0], cb.CUgraphEdgeData)
        assert drv.cuGraphAddDependencies(g, [b], [a], None, 1) == (OK,)
        assert drv.cuGraphRemoveDependencies(g, [b], [a], None, 1) == (OK,)
        assert drv.cuCtxCreate(None, 0, 0)[0] == OK
    else:
        v12: Any = drv  # type checkers see the 13.x signatures
        assert v12.cuGraphAddDependencies(g, [b], [a], 1) == (OK,)
        assert v12.cuGraphRemoveDependencies(g, [b], [a], 1) == (OK,)
        assert v12.cuCtxCreate(0, 0)[0] == OK
    _, ctx = drv.cuCtxPopCurrent()
    assert drv.cuCtxDestroy(ctx) == (OK,)
    drv.cuGraphDestroy(g)


def test_simulated_driver_is_installed_and_joined() -> None:
    with simulated_driver() as sim:
        assert active_driver() is sim
    previous = install_driver(None)
    install_driver(previous)
    assert previous is not sim


def test_current_context_is_per_thread(drv: SimulatedDriver) -> None:
    _, ctx1 = drv.cuDevicePrimaryCtxRetain(1)
    seen: list[int] = []

    def other() -> None:
        seen.append(int(drv.cuCtxGetCurrent()[1]))
        drv.cuCtxSetCurrent(ctx1)
        seen.append(int(drv.cuCtxGetCurrent()[1]))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [0, int(ctx1)]
    assert int(drv.cuCtxGetDevice()[1]) == 0


def test_push_pop(drv: SimulatedDriver) -> None:
    _, ctx0 = drv.cuCtxGetCurrent()
    _, ctx1 = drv.cuDevicePrimaryCtxRetain(1)
    assert drv.cuCtxPushCurrent(ctx1) == (OK,)
    assert int(drv.cuCtxGetDevice()[1]) == 1
    err, popped = drv.cuCtxPopCurrent()
    assert (err, int(popped)) == (OK, int(ctx1))
    assert int(drv.cuCtxGetCurrent()[1]) == int(ctx0)


# --- memory -------------------------------------------------------------------------------------


def test_memory_round_trip(drv: SimulatedDriver) -> None:
    _, stream = drv.cuStreamCreate(0)
    src = np.arange(256, dtype=np.float32)
    _, a = drv.cuMemAlloc(src.nbytes)
    _, b = drv.cuMemAllocAsync(src.nbytes, stream)
    assert drv.cuMemcpyHtoDAsync(a, src, src.nbytes, stream) == (OK,)
    assert drv.cuMemcpyDtoDAsync(b, a, src.nbytes, stream) == (OK,)
    out = np.zeros_like(src)
    assert drv.cuMemcpyDtoHAsync(out, b, src.nbytes, stream) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    np.testing.assert_array_equal(out, src)
    # interior pointers, memset, unified copy into pinned host memory
    assert drv.cuMemsetD32(int(a) + 16, 7, 2) == (OK,)
    err, host = drv.cuMemAllocHost(32)
    assert err == OK
    assert drv.cuMemcpy(host, int(a), 32) == (OK,)
    view = np.ctypeslib.as_array((ctypes.c_uint32 * 8).from_address(host))
    assert list(view[4:6]) == [7, 7]
    assert drv.cuMemcpyDtoH(int(host), int(a) + src.nbytes - 8, 16) == (R.CUDA_ERROR_INVALID_VALUE,)  # past the end
    drv.cuMemFreeHost(host)
    drv.cuMemFree(a)
    drv.cuMemFreeAsync(b, stream)
    drv.cuStreamSynchronize(stream)
    assert drv.cuMemGetInfo()[1] == 1 << 30
    assert not drv.dangling


def test_addresses_are_unique(drv: SimulatedDriver) -> None:
    seen = set()
    for _ in range(5):
        _, p = drv.cuMemAlloc(8)
        drv.cuMemFree(p)
        assert int(p) not in seen
        assert int(p) != 0
        seen.add(int(p))


# --- host functions and kernels -----------------------------------------------------------------------


def test_work_behind_a_host_function_runs_after_it(drv: SimulatedDriver) -> None:
    _, stream = drv.cuStreamCreate(0)
    _, ptr = drv.cuMemAlloc(4)
    gate = threading.Event()
    order: list[str] = []
    host = np.zeros(1, dtype=np.uint32)

    def slow(_data: int | None) -> None:
        gate.wait(5)
        order.append("host")
        fill(drv, int(ptr), 9, 1)

    drv.cuLaunchHostFunc(stream, host_fn(slow), None)
    drv.cuMemcpyDtoHAsync(host, ptr, 4, stream)
    assert drv.cuStreamQuery(stream) == (R.CUDA_ERROR_NOT_READY,)
    gate.set()
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert order == ["host"]
    assert host[0] == 9
    drv.cuMemFree(ptr)


def test_kernel_emulation_with_both_param_forms(drv: SimulatedDriver) -> None:
    _, module = drv.cuModuleLoadData(PTX)
    _, fn = drv.cuModuleGetFunction(module, b"fill")
    drv.register_kernel("fill", fill)
    _, ptr = drv.cuMemAlloc(16)
    params = ((ptr, 3, 4), (None, ctypes.c_uint32, ctypes.c_uint32))
    assert drv.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, 0, params, 0) == (OK,)
    assert np.frombuffer(drv.read(ptr, 16), np.uint32).tolist() == [3] * 4
    # address of a void** array, decoded with the PTX parameter types
    values = [ctypes.c_uint64(int(ptr)), ctypes.c_uint32(5), ctypes.c_uint32(2)]
    array = (ctypes.c_void_p * 3)(*(ctypes.addressof(v) for v in values))
    assert drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(array), 0) == (OK,)
    assert np.frombuffer(drv.read(ptr, 16), np.uint32).tolist() == [5, 5, 3, 3]
    assert drv.poisoned is None
    drv.cuMemFree(ptr)
    drv.cuModuleUnload(module)


# --- graphs -----------------------------------------------------------------------------------------


def test_graph_topology_queries(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    _, a = drv.cuGraphAddEmptyNode(g, None, 0)
    _, b = drv.cuGraphAddEmptyNode(g, [a], 1)
    _, c = drv.cuGraphAddEmptyNode(g, [a, b], 2)
    err, nodes, count = drv.cuGraphGetNodes(g)
    assert (err, nodes, count) == (OK, [], 3)
    _, nodes, count = drv.cuGraphGetNodes(g, 4)
    assert [int(n) for n in nodes] == [int(a), int(b), int(c), 0]
    assert count == 3
    _, roots, _ = drv.cuGraphGetRootNodes(g, 3)
    assert [int(r) for r in roots] == [int(a), 0, 0]
    _, frm, to, n = get_edges(drv, g, 3)
    assert n == 3
    assert [(int(x), int(y)) for x, y in zip(frm, to, strict=True)] == [
        (int(a), int(b)),
        (int(a), int(c)),
        (int(b), int(c)),
    ]
    _, deps, n = node_dependencies(drv, c, 2)
    assert sorted(int(d) for d in deps) == sorted([int(a), int(b)])
    _, _outs, n = node_dependents(drv, a, 2)
    assert n == 2
    assert drv.cuGraphNodeGetType(b) == (OK, T.CU_GRAPH_NODE_TYPE_EMPTY)
    _, clone = drv.cuGraphClone(g)
    assert get_edges(drv, clone)[3] == 3
    assert drv.cuGraphDestroyNode(b) == (OK,)
    assert get_edges(drv, g)[3] == 1
    drv.cuGraphDestroy(g)
    drv.cuGraphDestroy(clone)


def test_graph_launch_runs_nodes_in_order(drv: SimulatedDriver) -> None:
    _, stream = drv.cuStreamCreate(0)
    _, ptr = drv.cuMemAlloc(16)
    host = np.zeros(4, dtype=np.uint32)
    _, g = drv.cuGraphCreate(0)
    ms = cb.CUDA_MEMSET_NODE_PARAMS()
    ms.dst, ms.value, ms.elementSize, ms.width, ms.height, ms.pitch = ptr, 6, 4, 4, 1, 0
    _, memset = drv.cuGraphAddMemsetNode(g, None, 0, ms, drv.cuCtxGetCurrent()[1])
    cp = cb.CUDA_MEMCPY3D()
    cp.srcMemoryType = cb.CUmemorytype.CU_MEMORYTYPE_DEVICE
    cp.srcDevice = ptr
    cp.dstMemoryType = cb.CUmemorytype.CU_MEMORYTYPE_HOST
    cp.dstHost = host.ctypes.data
    cp.WidthInBytes, cp.Height, cp.Depth = 16, 1, 1
    _, copy = drv.cuGraphAddMemcpyNode(g, [memset], 1, cp, drv.cuCtxGetCurrent()[1])
    calls: list[int] = []
    hp = cb.CUDA_HOST_NODE_PARAMS()
    hp.fn = host_fn(lambda data: calls.append(int(host[0])))
    hp.userData = 0
    drv.cuGraphAddHostNode(g, [copy], 1, hp)
    _, ex = drv.cuGraphInstantiate(g, 0)
    assert drv.cuGraphLaunch(ex, stream) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert host.tolist() == [6] * 4
    assert calls == [6]
    drv.cuGraphExecDestroy(ex)
    drv.cuGraphDestroy(g)
    drv.cuMemFree(ptr)
    assert not drv.dangling


def test_graph_exec_update(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    drv.cuGraphAddEmptyNode(g, None, 0)
    _, ex = drv.cuGraphInstantiate(g, 0)
    _, same = drv.cuGraphClone(g)
    err, info = drv.cuGraphExecUpdate(ex, same)
    assert err == OK
    assert info.result == cb.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_SUCCESS
    drv.cuGraphAddEmptyNode(same, None, 0)
    assert drv.cuGraphExecUpdate(ex, same) == (R.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, None)
    for handle in (g, same):
        drv.cuGraphDestroy(handle)
    drv.cuGraphExecDestroy(ex)


# --- user objects --------------------------------------------------------------------------------------


def test_user_object_references(drv: SimulatedDriver) -> None:
    calls: list[int | None] = []
    fn = host_fn(calls.append)
    flags = cb.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
    _, obj = drv.cuUserObjectCreate(1234, fn, 2, flags)
    _, g = drv.cuGraphCreate(0)
    assert drv.cuGraphRetainUserObject(g, obj, 1, 0) == (OK,)
    _, clone = drv.cuGraphClone(g)
    assert [o.refcount for o in drv.live_objects() if o.kind == "user_object"] == [4]
    drv.cuUserObjectRelease(obj, 2)
    drv.cuGraphDestroy(g)
    assert calls == []
    drv.cuGraphDestroy(clone)
    assert calls == [1234]
    assert drv.cuUserObjectRelease(obj, 1) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert drv.double_release[-1].call == "cuUserObjectRelease"


def test_user_object_destructor_on_driver_thread() -> None:
    with simulated_driver(initialized=True, destructors_on_driver_thread=True) as sim:
        threads: list[int] = []
        fn = host_fn(lambda _d: threads.append(threading.get_ident()))
        _, obj = sim.cuUserObjectCreate(None, fn, 1, 1)
        sim.cuUserObjectRelease(obj, 1)
        sim.drain()
        assert threads == [sim.driver_thread_id]


# --- accounting -------------------------------------------------------------------------------------------


def test_nothing_left_behind_detects_a_leak(drv: SimulatedDriver) -> None:
    with pytest.raises(AssertionError, match=r"stream .* from cuStreamCreate"), nothing_left_behind():
        drv.cuStreamCreate(0)


def test_nothing_left_behind_passes_when_released(drv: SimulatedDriver) -> None:
    with nothing_left_behind(drv):
        _, stream = drv.cuStreamCreate(0)
        _, ptr = drv.cuMemAllocAsync(64, stream)
        drv.cuMemFreeAsync(ptr, stream)
        drv.cuStreamDestroy(stream)


def test_dangling_free_while_another_stream_uses_it(drv: SimulatedDriver) -> None:
    _, s1 = drv.cuStreamCreate(0)
    _, s2 = drv.cuStreamCreate(0)
    _, ptr = drv.cuMemAllocAsync(64, s1)
    drv.cuMemsetD8Async(ptr, 1, 64, s2)
    with pytest.raises(AssertionError, match="dangling"), nothing_left_behind(drv):
        drv.cuMemFreeAsync(ptr, s1)
    assert "cuMemsetD8Async" in drv.dangling[-1].description


def test_free_ordered_by_event_is_not_dangling(drv: SimulatedDriver) -> None:
    _, s1 = drv.cuStreamCreate(0)
    _, s2 = drv.cuStreamCreate(0)
    _, ev = drv.cuEventCreate(0)
    _, ptr = drv.cuMemAllocAsync(64, s1)
    drv.cuMemsetD8Async(ptr, 1, 64, s2)
    drv.cuEventRecord(ev, s2)
    drv.cuStreamWaitEvent(s1, ev, 0)
    drv.cuMemFreeAsync(ptr, s1)
    assert drv.dangling == []


def test_dangling_free_while_graph_exec_references_it(drv: SimulatedDriver) -> None:
    _, ptr = drv.cuMemAlloc(16)
    _, g = drv.cuGraphCreate(0)
    ms = cb.CUDA_MEMSET_NODE_PARAMS()
    ms.dst, ms.value, ms.elementSize, ms.width, ms.height = ptr, 0, 1, 16, 1
    drv.cuGraphAddMemsetNode(g, None, 0, ms, drv.cuCtxGetCurrent()[1])
    _, ex = drv.cuGraphInstantiate(g, 0)
    drv.cuGraphDestroy(g)
    drv.cuMemFree(ptr)
    assert "executable graph" in drv.dangling[-1].description
    drv.cuGraphExecDestroy(ex)


def test_changes_since(drv: SimulatedDriver) -> None:
    snap = drv.snapshot()
    _, ev = drv.cuEventCreate(0)
    changes = drv.changes_since(snap)
    assert [o.kind for o in changes.created] == ["event"]
    drv.cuEventDestroy(ev)
    assert not drv.changes_since(snap)
