"""Stream capture on the simulated driver: captured work becomes graph nodes, forbidden calls invalidate."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._bindings import EDGE_DATA
from cuguard.testing._sim import SimulatedDriver, simulated_driver

R = cb.CUresult
OK = R.CUDA_SUCCESS
GLOBAL = cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
THREAD_LOCAL = cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
RELAXED = cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
S = cb.CUstreamCaptureStatus
PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry tick() { ret; }
\x00"""


@pytest.fixture
def drv() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=1) as sim:
        sim.cuInit(0)
        _, ctx = sim.cuDevicePrimaryCtxRetain(0)
        sim.cuCtxSetCurrent(ctx)
        yield sim
        sim.cuCtxSetCurrent(cb.CUcontext(0))


def _stream(drv: SimulatedDriver, flags: int = 0) -> Any:
    err, stream = drv.cuStreamCreate(flags)
    assert err == OK
    return stream


def _alloc(drv: SimulatedDriver, n: int = 8) -> Any:
    err, ptr = drv.cuMemAlloc(n)
    assert err == OK
    return ptr


def _run(drv: SimulatedDriver, graph: Any, stream: Any) -> None:
    err, exe = drv.cuGraphInstantiate(graph, 0)
    assert err == OK
    assert drv.cuGraphLaunch(exe, stream) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert drv.cuGraphExecDestroy(exe) == (OK,)


@pytest.mark.contract("B2")
def test_captured_work_runs_only_when_the_graph_is_launched(drv: SimulatedDriver) -> None:
    stream, ptr = _stream(drv), _alloc(drv)
    drv.write(ptr, bytes(8))
    assert drv.cuStreamBeginCapture(stream, GLOBAL) == (OK,)
    assert drv.cuStreamIsCapturing(stream) == (OK, S.CU_STREAM_CAPTURE_STATUS_ACTIVE)
    assert drv.cuMemsetD8Async(ptr, 7, 4, stream) == (OK,)
    assert drv.cuMemsetD8Async(int(ptr) + 4, 9, 4, stream) == (OK,)
    assert drv.read(ptr, 8) == bytes(8)  # nothing ran
    err, graph = drv.cuStreamEndCapture(stream)
    assert err == OK
    assert drv.cuStreamIsCapturing(stream) == (OK, S.CU_STREAM_CAPTURE_STATUS_NONE)
    assert drv.cuGraphGetNodes(graph, 0)[-1] == 2
    assert drv.cuGraphGetEdges(graph, 0)[-1] == 1  # captured in stream order
    _run(drv, graph, stream)
    assert drv.read(ptr, 8) == b"\x07" * 4 + b"\x09" * 4
    assert drv.cuGraphDestroy(graph) == (OK,)
    assert drv.cuMemFree(ptr) == (OK,)
    assert drv.cuStreamDestroy(stream) == (OK,)
    assert drv.live_objects() == [] or all(o.kind == "context" for o in drv.live_objects())


@pytest.mark.contract("B2")
def test_captured_kernel_and_host_function_become_nodes_of_their_kinds(drv: SimulatedDriver) -> None:
    calls: list[str] = []
    drv.register_kernel("tick", lambda sim: calls.append("kernel"))
    _, module = drv.cuModuleLoadData(PTX)
    _, function = drv.cuModuleGetFunction(module, b"tick")
    stream = _stream(drv)
    assert drv.cuStreamBeginCapture(stream, GLOBAL) == (OK,)
    assert drv.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0) == (OK,)
    assert calls == []
    err, graph = drv.cuStreamEndCapture(stream)
    assert err == OK
    _, nodes, _ = drv.cuGraphGetNodes(graph, 1)
    assert drv.cuGraphNodeGetType(nodes[0]) == (OK, cb.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL)
    _run(drv, graph, stream)
    _run(drv, graph, stream)
    assert calls == ["kernel", "kernel"]
    drv.cuGraphDestroy(graph)
    drv.cuModuleUnload(module)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_capture_info_reports_graph_and_dependencies(drv: SimulatedDriver) -> None:
    stream, ptr = _stream(drv), _alloc(drv)
    assert drv.cuStreamGetCaptureInfo(stream)[1] == S.CU_STREAM_CAPTURE_STATUS_NONE
    drv.cuStreamBeginCapture(stream, GLOBAL)
    drv.cuMemsetD8Async(ptr, 1, 8, stream)
    info = drv.cuStreamGetCaptureInfo(stream)
    assert info[0] == OK
    assert info[1] == S.CU_STREAM_CAPTURE_STATUS_ACTIVE
    assert int(info[2]) > 0
    assert info[-1] == 1
    assert len(info) == (7 if EDGE_DATA else 6)
    graph, (node,) = info[3], info[4]
    _, empty = drv.cuGraphAddEmptyNode(graph, [node], 1)
    args = [stream, [empty], None, 1, 1] if EDGE_DATA else [stream, [empty], 1, 1]
    assert drv.cuStreamUpdateCaptureDependencies(*args) == (OK,)
    assert [int(n) for n in drv.cuStreamGetCaptureInfo(stream)[4]] == [int(empty)]
    err, ended = drv.cuStreamEndCapture(stream)
    assert err == OK
    assert int(ended) == int(graph)
    drv.cuGraphDestroy(ended)
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_begin_refusals(drv: SimulatedDriver) -> None:
    stream = _stream(drv)
    assert drv.cuStreamBeginCapture(0, GLOBAL) == (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
    assert drv.cuStreamEndCapture(stream) == (R.CUDA_ERROR_ILLEGAL_STATE, None)
    assert drv.cuStreamBeginCapture(stream, GLOBAL) == (OK,)
    assert drv.cuStreamBeginCapture(stream, GLOBAL) == (R.CUDA_ERROR_ILLEGAL_STATE,)
    err, graph = drv.cuStreamEndCapture(stream)
    assert err == OK
    drv.cuGraphDestroy(graph)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
@pytest.mark.parametrize("call", ["cuStreamSynchronize", "cuStreamQuery"])
def test_synchronizing_or_querying_a_capturing_stream_invalidates_it(drv: SimulatedDriver, call: str) -> None:
    stream, ptr = _stream(drv), _alloc(drv)
    before = drv.snapshot()
    drv.cuStreamBeginCapture(stream, GLOBAL)
    drv.cuMemsetD8Async(ptr, 1, 8, stream)
    assert getattr(drv, call)(stream) == (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
    assert drv.cuStreamIsCapturing(stream) == (OK, S.CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    assert drv.cuMemsetD8Async(ptr, 1, 8, stream) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,)
    assert drv.cuStreamEndCapture(stream) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    assert drv.changes_since(before).created == []  # the driver destroyed the graph
    assert drv.cuStreamIsCapturing(stream) == (OK, S.CU_STREAM_CAPTURE_STATUS_NONE)
    assert drv.cuStreamSynchronize(stream) == (OK,)  # the stream is usable again
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_legacy_stream_work_invalidates_a_blocking_capture_only(drv: SimulatedDriver) -> None:
    blocking, non_blocking, ptr = _stream(drv, 0), _stream(drv, 1), _alloc(drv)
    drv.cuStreamBeginCapture(non_blocking, GLOBAL)
    assert drv.cuMemsetD8Async(ptr, 1, 8, 0) == (OK,)  # no implicit dependency
    assert drv.cuStreamIsCapturing(0) == (OK, S.CU_STREAM_CAPTURE_STATUS_NONE)
    err, graph = drv.cuStreamEndCapture(non_blocking)
    assert err == OK
    drv.cuGraphDestroy(graph)
    drv.cuStreamBeginCapture(blocking, GLOBAL)
    assert drv.cuStreamIsCapturing(0) == (R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, None)
    assert drv.cuMemsetD8Async(ptr, 1, 8, 0) == (R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,)
    assert drv.cuStreamEndCapture(blocking) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(blocking)
    drv.cuStreamDestroy(non_blocking)


@pytest.mark.contract("B2")
def test_fork_and_join_through_events(drv: SimulatedDriver) -> None:
    main, side, ptr = _stream(drv), _stream(drv), _alloc(drv)
    _, fork = drv.cuEventCreate(0)
    _, join = drv.cuEventCreate(0)
    drv.write(ptr, bytes(8))
    drv.cuStreamBeginCapture(main, GLOBAL)
    drv.cuMemsetD8Async(ptr, 1, 4, main)
    assert drv.cuEventRecord(fork, main) == (OK,)
    assert drv.cuStreamWaitEvent(side, fork, 0) == (OK,)
    assert drv.cuStreamIsCapturing(side) == (OK, S.CU_STREAM_CAPTURE_STATUS_ACTIVE)
    drv.cuMemsetD8Async(int(ptr) + 4, 2, 4, side)
    assert drv.cuStreamEndCapture(side) == (R.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, None)
    drv.cuEventRecord(join, side)
    assert drv.cuStreamWaitEvent(main, join, 0) == (OK,)
    err, graph = drv.cuStreamEndCapture(main)
    assert err == OK
    assert drv.cuStreamIsCapturing(side) == (OK, S.CU_STREAM_CAPTURE_STATUS_NONE)
    assert drv.cuGraphGetEdges(graph, 0)[-1] == 1  # the fork hangs off the first memset
    _run(drv, graph, main)
    assert drv.read(ptr, 8) == b"\x01" * 4 + b"\x02" * 4
    drv.cuGraphDestroy(graph)
    for ev in (fork, join):
        drv.cuEventDestroy(ev)
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(main)
    drv.cuStreamDestroy(side)


@pytest.mark.contract("B2")
def test_querying_a_captured_event_invalidates_its_capture(drv: SimulatedDriver) -> None:
    # The H200: the query is CUDA_ERROR_CAPTURED_EVENT and the capture is invalidated; a stream
    # that then waits for the event is CUDA_ERROR_INVALID_VALUE and does not join.
    main, side = _stream(drv), _stream(drv)
    _, fork = drv.cuEventCreate(0)
    drv.cuStreamBeginCapture(main, GLOBAL)
    assert drv.cuEventRecord(fork, main) == (OK,)
    assert drv.cuEventQuery(fork) == (R.CUDA_ERROR_CAPTURED_EVENT,)
    assert drv.cuStreamIsCapturing(main) == (OK, S.CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    assert drv.cuStreamWaitEvent(side, fork, 0) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert drv.cuStreamIsCapturing(side) == (OK, S.CU_STREAM_CAPTURE_STATUS_NONE)
    assert drv.cuStreamEndCapture(main) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    drv.cuEventDestroy(fork)
    drv.cuStreamDestroy(main)
    drv.cuStreamDestroy(side)


@pytest.mark.contract("B2")
def test_an_unjoined_fork_ends_the_capture_with_no_graph(drv: SimulatedDriver) -> None:
    main, side, ptr = _stream(drv), _stream(drv), _alloc(drv)
    _, fork = drv.cuEventCreate(0)
    before = drv.snapshot()
    drv.cuStreamBeginCapture(main, GLOBAL)
    drv.cuEventRecord(fork, main)
    drv.cuStreamWaitEvent(side, fork, 0)
    drv.cuMemsetD8Async(ptr, 2, 4, side)
    assert drv.cuStreamEndCapture(main) == (R.CUDA_ERROR_STREAM_CAPTURE_UNJOINED, None)
    assert drv.cuStreamIsCapturing(side) == (OK, S.CU_STREAM_CAPTURE_STATUS_NONE)
    assert drv.changes_since(before).created == []
    drv.cuEventDestroy(fork)
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(main)
    drv.cuStreamDestroy(side)


@pytest.mark.contract("B2")
def test_waiting_on_outside_work_or_another_capture_invalidates(drv: SimulatedDriver) -> None:
    a, b, other = _stream(drv), _stream(drv), _stream(drv)
    _, outside = drv.cuEventCreate(0)
    _, mark = drv.cuEventCreate(0)
    drv.cuEventRecord(outside, other)
    drv.cuStreamBeginCapture(a, GLOBAL)
    assert drv.cuStreamWaitEvent(a, outside, 0) == (R.CUDA_ERROR_STREAM_CAPTURE_ISOLATION,)
    assert drv.cuStreamEndCapture(a) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    drv.cuStreamBeginCapture(a, GLOBAL)
    drv.cuStreamBeginCapture(b, GLOBAL)
    drv.cuEventRecord(mark, a)
    assert drv.cuStreamWaitEvent(b, mark, 0) == (R.CUDA_ERROR_STREAM_CAPTURE_MERGE,)
    assert drv.cuStreamEndCapture(b) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    # The capture the event belongs to is invalidated too (as on an H200).
    assert drv.cuStreamEndCapture(a) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    for ev in (outside, mark):
        drv.cuEventDestroy(ev)
    for st in (a, b, other):
        drv.cuStreamDestroy(st)


@pytest.mark.contract("B2")
def test_unsafe_calls_follow_the_thread_capture_mode(drv: SimulatedDriver) -> None:
    stream = _stream(drv)
    drv.cuStreamBeginCapture(stream, GLOBAL)
    assert drv.cuMemAlloc(8) == (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, None)
    assert drv.cuStreamEndCapture(stream) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    assert drv.cuThreadExchangeStreamCaptureMode(RELAXED) == (OK, GLOBAL)
    drv.cuStreamBeginCapture(stream, GLOBAL)
    err, ptr = drv.cuMemAlloc(8)  # this thread is relaxed
    assert err == OK
    err, graph = drv.cuStreamEndCapture(stream)
    assert err == OK
    assert drv.cuThreadExchangeStreamCaptureMode(GLOBAL) == (OK, RELAXED)
    drv.cuStreamBeginCapture(stream, RELAXED)
    err, relaxed_ptr = drv.cuMemAlloc(8)  # a relaxed capture prohibits no unsafe call
    assert err == OK
    err, relaxed_graph = drv.cuStreamEndCapture(stream)
    assert err == OK
    for g in (graph, relaxed_graph):
        drv.cuGraphDestroy(g)
    drv.cuMemFree(ptr)
    drv.cuMemFree(relaxed_ptr)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
@pytest.mark.parametrize("call", ["cuMemHostAlloc", "cuMemAllocManaged"])
def test_host_and_managed_allocation_are_unsafe_during_a_capture(drv: SimulatedDriver, call: str) -> None:
    # As on an H200: the thread's own global-mode capture prohibits them, and they invalidate it.
    stream = _stream(drv, 1)
    drv.cuStreamBeginCapture(stream, GLOBAL)
    assert getattr(drv, call)(64, 1 if call == "cuMemAllocManaged" else 0) == (
        R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        None,
    )
    assert drv.cuStreamEndCapture(stream) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
@pytest.mark.parametrize("capture_mode", [GLOBAL, RELAXED])
def test_synchronizing_the_context_of_a_capture_invalidates_it_in_any_thread_mode(
    drv: SimulatedDriver, capture_mode: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cuguard.testing._sim.capture.ENFORCE_SYNC_DURING_CAPTURE", True)
    # As on an H200 (a global-mode capture, the thread in relaxed mode): cuCtxSynchronize is refused
    # and the capture invalidated, while cuMemFree in relaxed mode is not.
    stream = _stream(drv, 1)
    ptr = _alloc(drv)
    drv.cuStreamBeginCapture(stream, capture_mode)
    assert drv.cuThreadExchangeStreamCaptureMode(RELAXED) == (OK, GLOBAL)
    assert drv.cuMemFree(ptr) == (OK,)
    assert drv.cuCtxSynchronize() == (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
    assert drv.cuThreadExchangeStreamCaptureMode(GLOBAL) == (OK, RELAXED)
    assert drv.cuStreamIsCapturing(stream) == (OK, S.CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    assert drv.cuStreamEndCapture(stream) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    assert drv.cuCtxSynchronize() == (OK,)  # no capture any more
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
@pytest.mark.parametrize(("mode", "prohibited"), [(GLOBAL, True), (THREAD_LOCAL, False)])
def test_another_threads_capture_prohibits_only_in_global_mode(
    drv: SimulatedDriver, mode: Any, prohibited: bool
) -> None:
    stream = _stream(drv)
    _, ctx = drv.cuCtxGetCurrent()
    drv.cuStreamBeginCapture(stream, mode)
    seen: list[Any] = []

    def other() -> None:
        drv.cuCtxSetCurrent(ctx)
        seen.append(drv.cuMemAlloc(8))
        drv.cuCtxSetCurrent(cb.CUcontext(0))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    err, graph = drv.cuStreamEndCapture(stream)
    if prohibited:
        assert seen == [(R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, None)]
        assert (err, graph) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    else:
        assert seen[0][0] == OK
        assert err == OK
        drv.cuGraphDestroy(graph)
        drv.cuMemFree(seen[0][1])
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_ending_from_another_thread_needs_relaxed_mode(drv: SimulatedDriver) -> None:
    stream = _stream(drv)
    results: list[Any] = []
    for mode in (GLOBAL, RELAXED):
        drv.cuStreamBeginCapture(stream, mode)
        thread = threading.Thread(target=lambda: results.append(drv.cuStreamEndCapture(stream)))
        thread.start()
        thread.join()
        # Refused or not, the capture has ended (as on an H200): no graph comes of a refusal.
        assert drv.cuStreamIsCapturing(stream) == (OK, cb.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)
    assert results[0] == (R.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, None)
    assert results[1][0] == OK
    drv.cuGraphDestroy(results[1][1])
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_an_invalidated_capture_into_an_existing_graph_destroys_the_graph(drv: SimulatedDriver) -> None:
    stream, ptr = _stream(drv), _alloc(drv)
    _, graph = drv.cuGraphCreate(0)
    _, root = drv.cuGraphAddEmptyNode(graph, None, 0)
    assert drv.cuStreamBeginCaptureToGraph(stream, graph, [root], None, 1, GLOBAL) == (OK,)
    drv.cuMemsetD8Async(ptr, 3, 8, stream)
    err, same = drv.cuStreamEndCapture(stream)
    assert err == OK
    assert int(same) == int(graph)
    assert drv.cuGraphGetEdges(graph, 0)[-1] == 1
    drv.cuStreamBeginCaptureToGraph(stream, graph, None, None, 0, GLOBAL)
    drv.cuStreamSynchronize(stream)
    assert drv.cuStreamEndCapture(stream) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    # The H200's driver destroyed the user's graph: listing it and destroying it are refused.
    assert drv.cuGraphGetNodes(graph, 0)[0] == R.CUDA_ERROR_INVALID_VALUE
    assert drv.cuGraphDestroy(graph) == (R.CUDA_ERROR_INVALID_VALUE,)
    assert [u.call for u in drv.double_release] == ["cuGraphDestroy"]
    assert not [o for o in drv.live_objects() if o.kind == "graph"]  # nothing left to leak
    drv.use_after_release.clear()
    drv.double_release.clear()
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_work_captured_into_conditional_bodies_runs_when_the_graph_does(drv: SimulatedDriver) -> None:
    # As on an H200: a body filled by cuStreamBeginCaptureToGraph runs its captured work when the
    # conditional node picks it (here: the else body of an if node whose condition defaults to 0).
    stream, side, ptr = _stream(drv), _stream(drv), _alloc(drv)
    _, ctx = drv.cuCtxGetCurrent()
    drv.write(ptr, bytes(8))
    _, graph = drv.cuGraphCreate(0)
    _, handle = drv.cuGraphConditionalHandleCreate(graph, ctx, 0, 1)
    params = cb.CUgraphNodeParams()
    params.type = cb.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = cb.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF
    params.conditional.size = 2
    params.conditional.ctx = ctx
    if EDGE_DATA:
        assert drv.cuGraphAddNode(graph, None, None, 0, params)[0] == OK
    else:
        assert drv.cuGraphAddNode(graph, None, 0, params)[0] == OK  # type: ignore[call-arg]
    for i, body in enumerate(params.conditional.phGraph_out):
        assert drv.cuStreamBeginCaptureToGraph(side, body, None, None, 0, GLOBAL) == (OK,)
        drv.cuMemsetD8Async(ptr, 0x10 + i, 8, side)
        assert drv.cuStreamEndCapture(side)[0] == OK
    _run(drv, graph, stream)
    assert drv.read(ptr, 8) == b"\x11" * 8
    drv.cuGraphDestroy(graph)
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(stream)
    drv.cuStreamDestroy(side)


@pytest.mark.contract("B2")
def test_graph_launch_and_stream_ordered_memory_in_a_capture(drv: SimulatedDriver) -> None:
    stream, ptr = _stream(drv), _alloc(drv)
    _, inner = drv.cuGraphCreate(0)
    _, exe = drv.cuGraphInstantiate(inner, 0)
    drv.cuStreamBeginCapture(stream, GLOBAL)
    # A graph launch cannot be captured (as on an H200): the capture is invalidated.
    assert drv.cuGraphLaunch(exe, stream) == (R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
    assert drv.cuMemAllocAsync(64, stream)[0] == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert drv.cuStreamEndCapture(stream) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    drv.cuStreamBeginCapture(stream, GLOBAL)
    err, scratch = drv.cuMemAllocAsync(64, stream)
    assert err == OK
    assert drv.cuMemFreeAsync(ptr, stream) == (R.CUDA_ERROR_INVALID_VALUE,)  # not allocated by the capture
    assert drv.cuMemFreeAsync(scratch, stream) == (OK,)
    err, graph = drv.cuStreamEndCapture(stream)
    assert err == OK
    _, nodes, _ = drv.cuGraphGetNodes(graph, 2)
    kinds = sorted(int(drv.cuGraphNodeGetType(n)[1]) for n in nodes)
    t = cb.CUgraphNodeType
    assert kinds == sorted(int(k) for k in (t.CU_GRAPH_NODE_TYPE_MEM_ALLOC, t.CU_GRAPH_NODE_TYPE_MEM_FREE))
    _run(drv, graph, stream)
    drv.cuGraphDestroy(graph)
    drv.cuGraphExecDestroy(exe)
    drv.cuGraphDestroy(inner)
    drv.cuMemFree(ptr)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_destroying_a_capturing_stream_invalidates_its_capture(drv: SimulatedDriver) -> None:
    main, side = _stream(drv), _stream(drv)
    _, fork = drv.cuEventCreate(0)
    drv.cuStreamBeginCapture(main, GLOBAL)
    drv.cuEventRecord(fork, main)
    drv.cuStreamWaitEvent(side, fork, 0)
    assert drv.cuStreamDestroy(side) == (OK,)
    assert drv.cuStreamEndCapture(main) == (R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
    drv.cuEventDestroy(fork)
    drv.cuStreamDestroy(main)


@pytest.mark.contract("B2", "S2")
def test_a_host_function_captured_through_the_bindings_runs_only_once(drv: SimulatedDriver) -> None:
    # cuda-bindings frees the data of its cuLaunchHostFunc wrapper after the first call: the
    # real process crashes when a graph runs such a captured host node a second time.
    import ctypes

    from cuguard.testing import SimulatedCrash

    calls: list[int] = []
    thunk = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda data: calls.append(1))
    stream = _stream(drv)
    assert drv.cuStreamBeginCapture(stream, GLOBAL) == (OK,)
    fn = cb.CUhostFn(ctypes.cast(thunk, ctypes.c_void_p).value)
    assert drv.cuLaunchHostFunc(stream, fn, 0) == (OK,)
    err, graph = drv.cuStreamEndCapture(stream)
    assert err == OK
    _, nodes, _ = drv.cuGraphGetNodes(graph, 1)
    assert drv.cuGraphNodeGetType(nodes[0]) == (OK, cb.CUgraphNodeType.CU_GRAPH_NODE_TYPE_HOST)
    err, exe = drv.cuGraphInstantiate(graph, 0)
    assert drv.cuGraphLaunch(exe, stream) == (OK,)
    assert drv.cuStreamSynchronize(stream) == (OK,)
    assert calls == [1]
    assert drv.misuse == []
    with pytest.raises(SimulatedCrash, match="second time"):
        drv.cuGraphLaunch(exe, stream)
    assert [i.call for i in drv.misuse] == ["cuGraphLaunch"]
    drv.misuse.clear()
    drv.cuStreamSynchronize(stream)
    drv.cuGraphExecDestroy(exe)
    drv.cuGraphDestroy(graph)
    drv.cuStreamDestroy(stream)
