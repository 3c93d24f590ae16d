"""Each driver fact observed on an H200 (shared/driver-facts), reproduced by the simulated driver.

One test per fact key of the JSON, named after it, plus the sticky-error table.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._bindings import add_dependencies, ctx_create, get_edges, remove_dependencies
from cuguard.testing._sim import SimulatedCrash, SimulatedDriver, simulated_driver
from cuguard.testing._sim.facts import STICKY_EXEMPT, STICKY_OBSERVED_FAILS, STICKY_OBSERVED_SUCCEEDS

pytestmark = pytest.mark.contract("B2")

R = cb.CUresult
OK = R.CUDA_SUCCESS
PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry scale(.param .u64 scale_param_0, .param .u32 scale_param_1)
{
    ret;
}
"""
_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_keep: list[Any] = []


def host_fn(fn: Callable[[int | None], None]) -> Any:
    thunk = _HOSTFN(fn)
    _keep.append(thunk)
    return cb.CUhostFn(ctypes.cast(thunk, ctypes.c_void_p).value)


@pytest.fixture
def drv() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=2) as sim:
        assert sim.cuInit(0) == (OK,)
        yield sim


def primary(sim: SimulatedDriver, ordinal: int = 0) -> Any:
    err, ctx = sim.cuDevicePrimaryCtxRetain(ordinal)
    assert err == OK
    assert sim.cuCtxSetCurrent(ctx) == (OK,)
    return ctx


def created(sim: SimulatedDriver, ordinal: int = 0) -> Any:
    err, ctx = ctx_create(sim, 0, ordinal)
    assert err == OK
    return ctx


def crashes(sim: SimulatedDriver, fn: Callable[[], Any], call: str) -> None:
    before = len(sim.misuse)
    with pytest.raises(SimulatedCrash) as info:
        fn()
    assert info.value.call == call
    assert len(sim.misuse) == before + 1
    assert sim.misuse[-1].call == call


# --- contexts ------------------------------------------------------------------------------


def test_ctx_get_current_fresh_thread(drv: SimulatedDriver) -> None:
    primary(drv)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(drv.cuCtxGetCurrent()))
    thread.start()
    thread.join()
    err, ctx = out[0]
    assert err == OK
    assert int(ctx) == 0


def test_ctx_set_current_null(drv: SimulatedDriver) -> None:
    primary(drv)
    assert drv.cuCtxSetCurrent(cb.CUcontext(0)) == (OK,)
    assert int(drv.cuCtxGetCurrent()[1]) == 0


def test_ctx_pop_empty_stack(drv: SimulatedDriver) -> None:
    assert drv.cuCtxPopCurrent() == (R.CUDA_ERROR_INVALID_CONTEXT, None)


def test_stream_create_without_context(drv: SimulatedDriver) -> None:
    assert drv.cuStreamCreate(0) == (R.CUDA_ERROR_INVALID_CONTEXT, None)


def test_ctx_set_current_destroyed(drv: SimulatedDriver) -> None:
    ctx = created(drv)
    assert drv.cuCtxDestroy(ctx) == (OK,)
    crashes(drv, lambda: drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def test_ctx_destroy_twice(drv: SimulatedDriver) -> None:
    ctx = created(drv)
    assert drv.cuCtxDestroy(ctx) == (OK,)
    assert drv.cuCtxDestroy(ctx) == (R.CUDA_ERROR_CONTEXT_IS_DESTROYED,)
    assert drv.double_release[-1].call == "cuCtxDestroy"


def test_ctx_destroy_current_then_get_current(drv: SimulatedDriver) -> None:
    ctx = created(drv)
    assert int(drv.cuCtxGetCurrent()[1]) == int(ctx)
    assert drv.cuCtxDestroy(ctx) == (OK,)
    err, now = drv.cuCtxGetCurrent()
    assert err == OK
    assert int(now) == 0  # the stack held only the destroyed context


def test_ctx_destroy_current_pops_to_the_previous_context(drv: SimulatedDriver) -> None:
    # Seen on an H200 (differential scenario destroying_current_context_pops_it): the
    # driver pops a destroyed current context, so the one below it is current again.
    previous = primary(drv)
    ctx = created(drv)
    assert drv.cuCtxDestroy(ctx) == (OK,)
    assert int(drv.cuCtxGetCurrent()[1]) == int(previous)


def test_ctx_create_makes_it_current(drv: SimulatedDriver) -> None:
    ctx = created(drv, 1)
    assert int(drv.cuCtxGetCurrent()[1]) == int(ctx)
    assert int(drv.cuCtxGetDevice()[1]) == 1
    assert drv.cuCtxDestroy(ctx) == (OK,)


def test_primary_retain_twice_same_handle(drv: SimulatedDriver) -> None:
    _, a = drv.cuDevicePrimaryCtxRetain(0)
    _, b = drv.cuDevicePrimaryCtxRetain(0)
    assert int(a) == int(b)
    [live] = [o for o in drv.live_objects() if o.kind == "context"]
    assert live.refcount == 2
    assert drv.cuDevicePrimaryCtxRelease(0) == (OK,)
    assert drv.cuDevicePrimaryCtxRelease(0) == (OK,)
    assert drv.live_objects() == []


# --- streams and events ------------------------------------------------------------------------


def test_stream_destroy_in_destroyed_ctx(drv: SimulatedDriver) -> None:
    ctx = created(drv)
    _, stream = drv.cuStreamCreate(0)
    assert drv.cuCtxDestroy(ctx) == (OK,)
    crashes(drv, lambda: drv.cuStreamDestroy(stream), "cuStreamDestroy")


def test_stream_destroy_twice(drv: SimulatedDriver) -> None:
    primary(drv)
    _, stream = drv.cuStreamCreate(0)
    assert drv.cuStreamDestroy(stream) == (OK,)
    crashes(drv, lambda: drv.cuStreamDestroy(stream), "cuStreamDestroy")


def test_stream_destroy_from_other_current_ctx(drv: SimulatedDriver) -> None:
    primary(drv, 0)
    _, stream = drv.cuStreamCreate(0)
    primary(drv, 1)
    assert drv.cuStreamDestroy(stream) == (OK,)


def test_stream_destroy_with_no_current_ctx(drv: SimulatedDriver) -> None:
    primary(drv)
    _, stream = drv.cuStreamCreate(0)
    assert drv.cuCtxSetCurrent(cb.CUcontext(0)) == (OK,)
    assert drv.cuStreamDestroy(stream) == (OK,)


def test_stream_get_ctx(drv: SimulatedDriver) -> None:
    ctx = primary(drv, 1)
    _, stream = drv.cuStreamCreate(0)
    primary(drv, 0)
    err, owner = drv.cuStreamGetCtx(stream)
    assert err == OK
    assert int(owner) == int(ctx)


def test_event_record_cross_context(drv: SimulatedDriver) -> None:
    primary(drv, 0)
    _, event = drv.cuEventCreate(0)
    primary(drv, 1)
    _, stream = drv.cuStreamCreate(0)
    assert drv.cuEventRecord(event, stream) == (R.CUDA_ERROR_INVALID_HANDLE,)


def test_event_destroy_twice(drv: SimulatedDriver) -> None:
    primary(drv)
    _, event = drv.cuEventCreate(0)
    assert drv.cuEventDestroy(event) == (OK,)
    crashes(drv, lambda: drv.cuEventDestroy(event), "cuEventDestroy")


def test_event_elapsed_cases(drv: SimulatedDriver) -> None:
    primary(drv)
    _, stream = drv.cuStreamCreate(0)
    _, a = drv.cuEventCreate(0)
    _, b = drv.cuEventCreate(0)
    assert drv.cuEventElapsedTime(a, b) == (R.CUDA_ERROR_INVALID_HANDLE, None)  # unrecorded
    assert drv.cuEventQuery(a) == (OK,)  # query_unrecorded
    _, c = drv.cuEventCreate(cb.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    _, e = drv.cuEventCreate(cb.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    drv.cuEventRecord(c, stream)
    drv.cuEventRecord(e, stream)
    assert drv.cuEventElapsedTime(c, e) == (R.CUDA_ERROR_INVALID_HANDLE, None)  # nontiming
    drv.cuEventRecord(a, stream)
    drv.cuEventRecord(b, stream)
    assert drv.cuEventSynchronize(b) == (OK,)
    err, ms = drv.cuEventElapsedTime(a, b)
    assert err == OK
    assert ms >= 0.0


def test_host_func_thread(drv: SimulatedDriver) -> None:
    primary(drv)
    _, stream = drv.cuStreamCreate(0)
    calls: list[tuple[int | None, int]] = []
    fn = host_fn(lambda data: calls.append((data, threading.get_ident())))
    assert drv.cuLaunchHostFunc(stream, fn, 42) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert len(calls) == 1
    assert calls[0][0] == 42
    assert calls[0][1] != threading.get_ident()
    assert calls[0][1] == drv.driver_thread_id


# --- memory --------------------------------------------------------------------------------------


def test_mem_alloc_cases(drv: SimulatedDriver) -> None:
    primary(drv)
    assert drv.cuMemAlloc(0) == (R.CUDA_ERROR_INVALID_VALUE, None)
    assert drv.cuMemAlloc(1 << 50) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    err, ptr = drv.cuMemAlloc(256)
    assert err == OK
    assert drv.cuMemFree(ptr) == (OK,)
    assert drv.cuMemFree(ptr) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert drv.double_release[-1].call == "cuMemFree"


def test_mem_async_cases(drv: SimulatedDriver) -> None:
    primary(drv, 0)
    _, stream = drv.cuStreamCreate(0)
    assert drv.cuMemAllocAsync(1 << 50, stream) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    err, zero = drv.cuMemAllocAsync(0, stream)
    assert err == OK
    assert int(zero) == 0  # NULL, nothing allocated (H200: differential stream_ordered_allocation_edges)
    _, ptr = drv.cuMemAllocAsync(64, stream)
    primary(drv, 1)
    _, other = drv.cuStreamCreate(0)
    assert drv.cuMemFreeAsync(ptr, other) == (OK,)  # free_on_other_ctx_stream
    assert drv.cuMemFree(ptr) == (R.CUDA_ERROR_INVALID_VALUE,)  # free_after
    assert drv.cuMemFreeAsync(zero, stream) == (OK,)


def test_memcpy_to_freed(drv: SimulatedDriver) -> None:
    primary(drv)
    _, ptr = drv.cuMemAlloc(16)
    drv.cuMemFree(ptr)
    assert drv.cuMemcpyHtoD(ptr, b"x" * 16, 16) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert drv.use_after_release[-1].call == "cuMemcpyHtoD"


# --- graphs ----------------------------------------------------------------------------------------


def empty(sim: SimulatedDriver, graph: Any, *deps: Any) -> Any:
    err, node = sim.cuGraphAddEmptyNode(graph, list(deps), len(deps))
    assert err == OK
    return node


def n_edges(sim: SimulatedDriver, graph: Any) -> int:
    err, _, _, count = get_edges(sim, graph)
    assert err == OK
    return int(count)


def test_graph_edge_cases(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    _, other = drv.cuGraphCreate(0)
    a, b, c = empty(drv, g), empty(drv, g), empty(drv, g)
    x = empty(drv, other)
    assert add_dependencies(drv, g, [a], [b], 1) == (OK,)
    assert add_dependencies(drv, g, [a], [b], 1) == (R.CUDA_ERROR_INVALID_VALUE,)  # duplicate
    assert remove_dependencies(drv, g, [b], [c], 1) == (R.CUDA_ERROR_INVALID_VALUE,)  # missing
    assert add_dependencies(drv, g, [x], [a], 1) == (R.CUDA_ERROR_INVALID_VALUE,)  # cross graph
    assert add_dependencies(drv, g, [b], [a], 1) == (OK,)  # closes a cycle
    assert drv.cuGraphInstantiate(g, 0) == (R.CUDA_ERROR_INVALID_VALUE, None)
    assert add_dependencies(drv, g, [c], [c], 1) == (R.CUDA_ERROR_INVALID_VALUE,)  # self edge
    assert n_edges(drv, g) == 2


def test_graph_bulk_add_partial(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    a, b, c, d = (empty(drv, g) for _ in range(4))
    add_dependencies(drv, g, [a], [c], 1)
    assert n_edges(drv, g) == 1
    status = add_dependencies(drv, g, [a, a, b], [b, c, d], 3)
    assert status == (R.CUDA_ERROR_INVALID_VALUE,)
    assert n_edges(drv, g) == 2  # the first edge was added before the duplicate failed


def test_graph_bulk_remove_partial(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    a, b, c = (empty(drv, g) for _ in range(3))
    add_dependencies(drv, g, [a], [b], 1)
    status = remove_dependencies(drv, g, [a, b], [b, c], 2)
    assert status == (R.CUDA_ERROR_INVALID_VALUE,)
    assert n_edges(drv, g) == 0  # the first edge was removed before the missing one failed


def test_graph_node_destroy_twice(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    node = empty(drv, g)
    assert drv.cuGraphDestroyNode(node) == (OK,)
    crashes(drv, lambda: drv.cuGraphDestroyNode(node), "cuGraphDestroyNode")


def test_graph_destroy_twice(drv: SimulatedDriver) -> None:
    _, g = drv.cuGraphCreate(0)
    assert drv.cuGraphDestroy(g) == (OK,)
    assert drv.cuGraphDestroy(g) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert drv.double_release[-1].call == "cuGraphDestroy"


def test_graph_exec_outlives_graph(drv: SimulatedDriver) -> None:
    primary(drv)
    _, stream = drv.cuStreamCreate(0)
    _, g = drv.cuGraphCreate(0)
    empty(drv, g)
    _, ex = drv.cuGraphInstantiate(g, 0)
    assert drv.cuGraphDestroy(g) == (OK,)
    assert drv.cuGraphLaunch(ex, stream) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert drv.cuGraphExecDestroy(ex) == (OK,)


def test_graph_without_context(drv: SimulatedDriver) -> None:
    assert int(drv.cuCtxGetCurrent()[1]) == 0
    err, g = drv.cuGraphCreate(0)
    assert err == OK
    assert drv.cuGraphDestroy(g) == (OK,)


def test_user_object_destructor_timing(drv: SimulatedDriver) -> None:
    calls: list[int] = []
    fn = host_fn(lambda _data: calls.append(threading.get_ident()))
    _, obj = drv.cuUserObjectCreate(None, fn, 1, cb.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
    _, g = drv.cuGraphCreate(0)
    move = cb.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE
    assert drv.cuGraphRetainUserObject(g, obj, 1, move) == (OK,)
    primary(drv)
    _, ex = drv.cuGraphInstantiate(g, 0)
    assert drv.cuGraphDestroy(g) == (OK,)
    assert calls == []  # called_after_graph_destroy: 0
    assert drv.cuGraphExecDestroy(ex) == (OK,)
    assert calls == [threading.get_ident()]  # called_after_exec_destroy: 1, on the same thread


# --- modules ---------------------------------------------------------------------------------------


def test_module_cases(drv: SimulatedDriver) -> None:
    primary(drv)
    assert drv.cuModuleLoadData(b"\x00garbage\xff") == (R.CUDA_ERROR_INVALID_IMAGE, None)
    err, module = drv.cuModuleLoadData(PTX)
    assert err == OK
    assert drv.cuModuleGetFunction(module, b"missing") == (R.CUDA_ERROR_NOT_FOUND, None)
    err, fn = drv.cuModuleGetFunction(module, b"scale")
    assert err == OK
    assert isinstance(fn, cb.CUfunction)
    assert drv.cuModuleUnload(module) == (OK,)


# --- after a sticky error ----------------------------------------------------------------------------


def test_sticky(drv: SimulatedDriver) -> None:
    ctx0 = primary(drv, 0)
    other = created(drv, 1)
    drv.cuCtxSetCurrent(ctx0)
    _, stream = drv.cuStreamCreate(0)
    _, event = drv.cuEventCreate(0)
    _, ptr = drv.cuMemAlloc(64)
    _, module = drv.cuModuleLoadData(PTX)
    _, fn = drv.cuModuleGetFunction(module, b"scale")
    drv.register_kernel("scale", lambda sim, p, n: sim.write(p + (1 << 30), b"x"))
    launch = drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, ((ptr, 4), (None, ctypes.c_uint32)), 0)
    assert launch == (OK,)  # the launch itself succeeds
    bad = R.CUDA_ERROR_ILLEGAL_ADDRESS
    assert drv.poisoned is None  # the fault surfaces at the next synchronizing call
    assert drv.cuEventRecord(event, stream) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (bad,)
    assert drv.poisoned == bad
    assert drv.cuStreamSynchronize(stream) == (bad,)
    assert drv.cuCtxSynchronize() == (bad,)
    assert drv.cuCtxGetCurrent()[0] == OK
    assert drv.cuCtxSetCurrent(other) == (OK,)
    assert drv.cuCtxSetCurrent(ctx0) == (OK,)
    assert drv.cuStreamCreate(0) == (bad, None)
    assert drv.cuEventCreate(0) == (bad, None)
    assert drv.cuMemAlloc(16) == (bad, None)
    assert drv.cuEventRecord(event, stream) == (bad,)
    assert drv.cuEventQuery(event) == (bad,)
    assert drv.cuStreamDestroy(stream) == (bad,)
    assert drv.cuEventDestroy(event) == (bad,)
    assert drv.cuMemFree(ptr) == (bad,)
    assert drv.cuModuleUnload(module) == (bad,)
    assert drv.cuGraphCreate(0)[0] == OK
    assert drv.cuCtxDestroy(other) == (OK,)
    # the failed releases leaked: the stream, event, memory and module still count as live
    kinds = {o.kind for o in drv.live_objects()}
    assert {"stream", "event", "device_memory", "module", "graph"} <= kinds
    assert drv.cuDevicePrimaryCtxRelease(0) == (OK,)
    assert drv.cuGetErrorName(bad) == (OK, b"CUDA_ERROR_ILLEGAL_ADDRESS")


def test_sticky_tables_are_consistent() -> None:
    assert not STICKY_OBSERVED_FAILS & STICKY_EXEMPT
    assert STICKY_OBSERVED_SUCCEEDS <= STICKY_EXEMPT


def test_graph_add_kernel_node_without_context(drv: SimulatedDriver) -> None:
    ctx = primary(drv)
    _, mod = drv.cuModuleLoadData(b".version 8.0\n.target sm_90\n.visible .entry k() { ret; }\n")
    _, fn = drv.cuModuleGetFunction(mod, b"k")
    _, g = drv.cuGraphCreate(0)
    params = cb.CUDA_KERNEL_NODE_PARAMS()
    params.func = fn
    params.gridDimX = params.gridDimY = params.gridDimZ = 1
    params.blockDimX = params.blockDimY = params.blockDimZ = 1
    assert drv.cuGraphAddKernelNode(g, None, 0, params)[0] == OK  # with the context current
    assert drv.cuCtxSetCurrent(cb.CUcontext(0)) == (OK,)
    crashes(drv, lambda: drv.cuGraphAddKernelNode(g, None, 0, params), "cuGraphAddKernelNode")
    assert drv.cuCtxSetCurrent(ctx) == (OK,)


def test_device_name_into_an_empty_buffer_crashes(drv: SimulatedDriver) -> None:
    # On the H200, cuDeviceGetName(0, dev) through cuda-bindings died of SIGSEGV (the driver wrote
    # the name into a buffer of no bytes); 64 bytes give the name.
    err, raw = drv.cuDeviceGetName(64, 0)
    assert err == OK
    assert raw.startswith(b"NVIDIA H200")
    crashes(drv, lambda: drv.cuDeviceGetName(0, 0), "cuDeviceGetName")
