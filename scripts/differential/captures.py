"""Stream capture: what a capture records, what it refuses or invalidates, modes, forks and joins."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import BINDINGS_MAJOR
from differential.common import (
    HostFunction,
    Obs,
    Setup,
    name,
    ok,
    scenario,
)
from differential.graphtools import (
    CAP,
    capture_status,
    edge_count,
    end_capture,
    end_captures_quietly,
    node_kinds,
    run_graph,
)


@scenario
def capture_becomes_nodes_and_runs_at_launch(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(8)
        ok(d.cuMemsetD8(p, 0, 8))
        out: Obs = [name(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]), capture_status(d, s)]
        try:
            out.append(name(d.cuMemsetD8Async(p, 7, 4, s)[0]))
            out.append(name(d.cuMemsetD8Async(B.CUdeviceptr(int(p) + 4), 9, 4, s)[0]))
            status, graph = end_capture(d, s)
        finally:
            end_captures_quietly(d, s)
        host = bytearray(8)
        ok(d.cuMemcpyDtoH(host, p, 8))
        out += [status, capture_status(d, s), bytes(host).hex(), node_kinds(d, graph), edge_count(d, graph)]
        out += run_graph(d, graph, s)
        ok(d.cuMemcpyDtoH(host, p, 8))
        out.append(bytes(host).hex())
        d.cuGraphDestroy(graph)
    return out


@scenario
def capture_begin_and_end_refusals(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        out: Obs = [
            name(d.cuStreamBeginCapture(B.CUstream(0), CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]),
            end_capture(d, s)[0],
            name(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]),
        ]
        try:
            out.append(name(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0]))
            status, graph = end_capture(d, s)
        finally:
            end_captures_quietly(d, s)
        out += [status, node_kinds(d, graph)]
        d.cuGraphDestroy(graph)
    return out


@scenario
def capture_invalidated_by_sync_or_query(d: Any) -> Obs:
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(8)
        for forbidden in ("cuStreamSynchronize", "cuStreamQuery"):
            ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            try:
                d.cuMemsetD8Async(p, 1, 8, s)
                out.append(name(getattr(d, forbidden)(s)[0]))
                out.append(capture_status(d, s))
                out.append(name(d.cuMemsetD8Async(p, 1, 8, s)[0]))
                out.append(end_capture(d, s)[0])
            finally:
                end_captures_quietly(d, s)
            out += [capture_status(d, s), name(d.cuStreamSynchronize(s)[0])]
    return out


@scenario
def capture_and_the_legacy_stream(d: Any) -> Obs:
    with Setup(d) as env:
        blocking, non_blocking = env.stream(), env.stream(1)
        p = env.alloc(8)
        out: Obs = []
        ok(d.cuStreamBeginCapture(non_blocking, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out += [name(d.cuMemsetD8Async(p, 1, 8, B.CUstream(0))[0]), capture_status(d, B.CUstream(0))]
            status, graph = end_capture(d, non_blocking)
        finally:
            end_captures_quietly(d, non_blocking)
        out.append(status)
        if graph is not None:
            d.cuGraphDestroy(graph)
        d.cuStreamSynchronize(B.CUstream(0))
        ok(d.cuStreamBeginCapture(blocking, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out += [capture_status(d, B.CUstream(0)), name(d.cuMemsetD8Async(p, 1, 8, B.CUstream(0))[0])]
            out += [capture_status(d, blocking), end_capture(d, blocking)[0]]
        finally:
            end_captures_quietly(d, blocking)
        d.cuStreamSynchronize(B.CUstream(0))
    return out


@scenario
def capture_fork_and_join_through_events(d: Any) -> Obs:
    with Setup(d) as env:
        main, side = env.stream(), env.stream()
        fork, join = env.event(2), env.event(2)
        p = env.alloc(8)
        ok(d.cuMemsetD8(p, 0, 8))
        out: Obs = []
        ok(d.cuStreamBeginCapture(main, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuMemsetD8Async(p, 1, 4, main)
            out.append(name(d.cuEventRecord(fork, main)[0]))
            out.append(name(d.cuEventQuery(fork)[0]))
            out.append(name(d.cuStreamWaitEvent(side, fork, 0)[0]))
            out.append(capture_status(d, side))
            out.append(name(d.cuMemsetD8Async(B.CUdeviceptr(int(p) + 4), 2, 4, side)[0]))
            out.append(end_capture(d, side)[0])  # not the origin stream
            out.append(name(d.cuEventRecord(join, side)[0]))
            out.append(name(d.cuStreamWaitEvent(main, join, 0)[0]))
            status, graph = end_capture(d, main)
        finally:
            end_captures_quietly(d, main, side)
        out += [status, capture_status(d, side), node_kinds(d, graph), edge_count(d, graph)]
        out += run_graph(d, graph, main)
        host = bytearray(8)
        ok(d.cuMemcpyDtoH(host, p, 8))
        out.append(bytes(host).hex())
        if graph is not None:
            d.cuGraphDestroy(graph)
    return out


@scenario
def capture_fork_by_stream_flags(d: Any) -> Obs:
    # Forking a capture onto another stream through an event, for each pairing of blocking (0) and
    # non-blocking (1) streams, and once after a query of the captured event: the wait's status and
    # whether the other stream joined the capture.
    out: Obs = []
    with Setup(d) as env:
        p = env.alloc(4)
        for main_flags, side_flags, query in ((0, 0, False), (0, 1, False), (1, 0, False), (1, 1, False), (1, 1, True)):
            main, side = ok(d.cuStreamCreate(main_flags)), ok(d.cuStreamCreate(side_flags))
            fork = ok(d.cuEventCreate(2))
            ok(d.cuStreamBeginCapture(main, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            try:
                d.cuMemsetD8Async(p, 1, 4, main)
                row: Obs = [main_flags, side_flags, name(d.cuEventRecord(fork, main)[0])]
                if query:  # a query of the captured event before the wait
                    row += [name(d.cuEventQuery(fork)[0]), capture_status(d, main)]
                row += [name(d.cuStreamWaitEvent(side, fork, 0)[0]), capture_status(d, side), capture_status(d, main)]
            finally:
                end_captures_quietly(d, main, side)
            out.append(row)
            d.cuEventDestroy(fork)
            d.cuStreamDestroy(main)
            d.cuStreamDestroy(side)
    return out


@scenario
def capture_with_an_unjoined_fork(d: Any) -> Obs:
    with Setup(d) as env:
        main, side = env.stream(), env.stream()
        fork = env.event(2)
        p = env.alloc(8)
        out: Obs = []
        ok(d.cuStreamBeginCapture(main, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuEventRecord(fork, main)
            d.cuStreamWaitEvent(side, fork, 0)
            d.cuMemsetD8Async(p, 2, 4, side)
            out.append(end_capture(d, main)[0])
        finally:
            end_captures_quietly(d, main, side)
        out += [capture_status(d, main), capture_status(d, side), name(d.cuStreamSynchronize(side)[0])]
    return out


@scenario
def capture_waits_on_outside_work_or_another_capture(d: Any) -> Obs:
    with Setup(d) as env:
        a, b, other = env.stream(), env.stream(), env.stream()
        outside, mark = env.event(2), env.event(2)
        d.cuEventRecord(outside, other)
        out: Obs = []
        ok(d.cuStreamBeginCapture(a, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out += [name(d.cuStreamWaitEvent(a, outside, 0)[0]), capture_status(d, a), end_capture(d, a)[0]]
        finally:
            end_captures_quietly(d, a)
        ok(d.cuStreamBeginCapture(a, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        ok(d.cuStreamBeginCapture(b, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuEventRecord(mark, a)
            out += [name(d.cuStreamWaitEvent(b, mark, 0)[0]), capture_status(d, a), capture_status(d, b)]
            out += [end_capture(d, b)[0]]
            status, graph = end_capture(d, a)
            out.append(status)
            if graph is not None:
                d.cuGraphDestroy(graph)
        finally:
            end_captures_quietly(d, a, b)
        for st in (a, b, other):
            d.cuStreamSynchronize(st)
    return out


@scenario
def capture_modes_and_unsafe_calls(d: Any) -> Obs:
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, ptr = d.cuMemAlloc(8)
            out += [name(err), capture_status(d, s), end_capture(d, s)[0]]
            if not int(err):
                d.cuMemFree(ptr)
        finally:
            end_captures_quietly(d, s)
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, host = d.cuMemAllocHost(64)
            out += [name(err), end_capture(d, s)[0]]
            if not int(err):
                d.cuMemFreeHost(host)
        finally:
            end_captures_quietly(d, s)
        old = d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_RELAXED)
        out.append([name(old[0]), CAP(int(old[1])).name])
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, ptr = d.cuMemAlloc(8)
            out.append(name(err))
            status, graph = end_capture(d, s)
            out.append(status)
            if graph is not None:
                d.cuGraphDestroy(graph)
            if not int(err):
                d.cuMemFree(ptr)
        finally:
            end_captures_quietly(d, s)
        back = d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)
        out.append([name(back[0]), CAP(int(back[1])).name])
        out.append(name(d.cuThreadExchangeStreamCaptureMode(7)[0]))
        with contextlib.suppress(ValueError):  # the bindings cannot name a mode 7 returned as the old one
            d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)  # whatever 7 did, undo it
    return out


@scenario
def capture_in_another_thread_follows_its_mode(d: Any) -> Obs:
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        for mode in (CAP.CU_STREAM_CAPTURE_MODE_GLOBAL, CAP.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL):
            ok(d.cuStreamBeginCapture(s, mode))
            seen: list[str] = []

            def other(seen: list[str] = seen) -> None:
                d.cuCtxSetCurrent(env.ctx)
                err, ptr = d.cuMemAlloc(8)
                seen.append(name(err))
                if not int(err):
                    d.cuMemFree(ptr)
                d.cuCtxSetCurrent(B.CUcontext(0))

            try:
                thread = threading.Thread(target=other)
                thread.start()
                thread.join()
                status, graph = end_capture(d, s)
                out += [mode.name, *seen, status]
                if graph is not None:
                    d.cuGraphDestroy(graph)
            finally:
                end_captures_quietly(d, s)
    return out


@scenario
def capture_relaxed_thread_frees_during_a_capture(d: Any) -> Obs:
    """A thread in relaxed mode frees (cuMemFree of cuMemAlloc and of cuMemAllocAsync memory after
    cuCtxSynchronize, cuMemFreeHost) while a global-mode capture of its own runs on a stream of the
    same context: what a collection of cuguard memory does during a capture. Each call's status, then
    the capture's status and how it ends."""
    out: Obs = []
    with Setup(d) as env:
        s = env.stream(1)  # non-blocking: the legacy stream's rules stay out of it
        other = env.stream(1)
        plain = ok(d.cuMemAlloc(64))
        ordered = ok(d.cuMemAllocAsync(64, other))
        ok(d.cuStreamSynchronize(other))
        host = ok(d.cuMemHostAlloc(64, 0))
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            old = d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_RELAXED)
            out.append(name(old[0]))
            out.append(name(d.cuMemFree(plain)[0]))
            out.append(name(d.cuCtxSynchronize()[0]))
            out.append(name(d.cuMemFree(ordered)[0]))
            out.append(name(d.cuMemFreeHost(host)[0]))
            back = d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)
            out.append([name(back[0]), CAP(int(back[1])).name])
            out.append(capture_status(d, s))
            status, graph = end_capture(d, s)
            out.append(status)
            if graph is not None:
                d.cuGraphDestroy(graph)
        finally:
            end_captures_quietly(d, s)
    return out


@scenario
def graph_teardown_during_a_capture(d: Any) -> Obs:
    """Destroying a graph and an executable graph while a global-mode capture of the same thread runs
    (what a collection does), in global mode then in relaxed mode: each call's status, and whether the
    capture survived it."""
    out: Obs = []
    with Setup(d) as env:
        s = env.stream(1)
        for relaxed in (False, True):
            graph = ok(d.cuGraphCreate(0))
            ok(d.cuGraphAddEmptyNode(graph, None, 0))
            exe = ok(d.cuGraphInstantiate(graph, 0))
            spare = ok(d.cuGraphCreate(0))
            ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            try:
                if relaxed:
                    old = d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_RELAXED)
                    out.append(name(old[0]))
                destroyed = d.cuGraphExecDestroy(exe)[0]
                out.append(["cuGraphExecDestroy", name(destroyed)])
                out.append(["cuGraphDestroy", name(d.cuGraphDestroy(spare)[0])])
                if relaxed:
                    back = d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)
                    out.append(name(back[0]))
                status, captured = end_capture(d, s)
                out.append(status)
                if captured is not None:
                    d.cuGraphDestroy(captured)
            finally:
                end_captures_quietly(d, s)
            if int(destroyed):
                d.cuGraphExecDestroy(exe)  # refused during the capture: destroyed now
            d.cuGraphDestroy(graph)
    return out


@scenario
def stream_queries_during_an_invalidated_capture(d: Any) -> Obs:
    """cuStreamGetCtx of a stream while its capture runs, once it is invalidated (a synchronization of the
    capturing stream), and after the capture ended: each status, and whether the context named is right."""
    out: Obs = []
    with Setup(d) as env:
        s = env.stream(1)
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            err, named = d.cuStreamGetCtx(s)
            out.append([name(err), not int(err) and int(named) == int(env.ctx)])
            out.append(name(d.cuStreamSynchronize(s)[0]))
            out.append(capture_status(d, s))
            err, named = d.cuStreamGetCtx(s)
            out.append([name(err), not int(err) and int(named) == int(env.ctx)])
            out.append(end_capture(d, s)[0])
        finally:
            end_captures_quietly(d, s)
        err, named = d.cuStreamGetCtx(s)
        out.append([name(err), not int(err) and int(named) == int(env.ctx)])
    return out


@scenario
def capture_sync_by_mode_and_destroyed_stream(d: Any) -> Obs:
    # cuCtxSynchronize while a capture begun in each mode runs on a stream of the context (the thread
    # in the same mode), and what destroying a capturing stream does: its status, then a sync.
    out: Obs = []
    with Setup(d):
        for mode in (CAP.CU_STREAM_CAPTURE_MODE_RELAXED, CAP.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL):
            s = ok(d.cuStreamCreate(1))
            old = d.cuThreadExchangeStreamCaptureMode(mode)[1]
            ok(d.cuStreamBeginCapture(s, mode))
            try:
                out.append([mode.name, name(d.cuCtxSynchronize()[0]), capture_status(d, s), end_capture(d, s)[0]])
            finally:
                end_captures_quietly(d, s)
                d.cuThreadExchangeStreamCaptureMode(old)
            d.cuStreamDestroy(s)
        s = ok(d.cuStreamCreate(1))
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        out.append(["destroy while capturing", name(d.cuStreamDestroy(s)[0])])
        out.append(["sync after", name(d.cuCtxSynchronize()[0])])
        p = d.cuMemAlloc(4)
        out.append(["alloc after", name(p[0])])
        if not int(p[0]):
            d.cuMemFree(p[1])
    return out


@scenario
def capture_ended_from_another_thread(d: Any) -> Obs:
    out: Obs = []
    with Setup(d) as env:
        s = env.stream()
        for mode in (CAP.CU_STREAM_CAPTURE_MODE_GLOBAL, CAP.CU_STREAM_CAPTURE_MODE_RELAXED):
            ok(d.cuStreamBeginCapture(s, mode))
            ended: list[Any] = []

            def other(ended: list[Any] = ended) -> None:
                d.cuCtxSetCurrent(env.ctx)
                ended.append(end_capture(d, s))
                d.cuCtxSetCurrent(B.CUcontext(0))

            try:
                thread = threading.Thread(target=other)
                thread.start()
                thread.join()
                status, graph = ended[0]
                out += [mode.name, status, capture_status(d, s)]
                if graph is not None:
                    d.cuGraphDestroy(graph)
            finally:
                end_captures_quietly(d, s)
    return out


@scenario
def capture_info_and_dependency_updates(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(8)
        idle = d.cuStreamGetCaptureInfo(s)
        out: Obs = [name(idle[0]), B.CUstreamCaptureStatus(int(idle[1])).name]
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            d.cuMemsetD8Async(p, 1, 8, s)
            info = d.cuStreamGetCaptureInfo(s)
            out += [name(info[0]), B.CUstreamCaptureStatus(int(info[1])).name, int(info[2]) > 0, int(info[-1])]
            graph, deps = info[3], list(info[4])
            empty = ok(d.cuGraphAddEmptyNode(graph, deps, len(deps)))
            if BINDINGS_MAJOR >= 13:
                upd = d.cuStreamUpdateCaptureDependencies(s, [empty], None, 1, 1)
            else:
                upd = d.cuStreamUpdateCaptureDependencies(s, [empty], 1, 1)
            out.append(name(upd[0]))
            after = d.cuStreamGetCaptureInfo(s)
            out.append([int(n) == int(empty) for n in list(after[4])[: int(after[-1])]])
            d.cuMemsetD8Async(p, 2, 8, s)
            status, ended = end_capture(d, s)
        finally:
            end_captures_quietly(d, s)
        out += [status, int(ended) == int(graph), node_kinds(d, ended), edge_count(d, ended)]
        d.cuGraphDestroy(ended)
    return out


@scenario
def capture_into_an_existing_graph(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(8)
        graph = ok(d.cuGraphCreate(0))
        root = ok(d.cuGraphAddEmptyNode(graph, None, 0))
        out: Obs = [
            name(d.cuStreamBeginCaptureToGraph(s, graph, [root], None, 1, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL)[0])
        ]
        try:
            d.cuMemsetD8Async(p, 3, 8, s)
            status, same = end_capture(d, s)
            out += [status, same is not None and int(same) == int(graph), edge_count(d, graph)]
            ok(d.cuStreamBeginCaptureToGraph(s, graph, None, None, 0, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            d.cuStreamSynchronize(s)
            out.append(end_capture(d, s)[0])
        finally:
            end_captures_quietly(d, s)
        out += [node_kinds(d, graph), name(d.cuGraphDestroy(graph)[0])]
    return out


@scenario
def capture_graph_launch_kernel_and_memory(d: Any) -> Obs:
    with Setup(d) as env:
        s = env.stream()
        p = env.alloc(8)
        fn = env.kernel()
        inner = ok(d.cuGraphCreate(0))
        ok(d.cuGraphAddEmptyNode(inner, None, 0))
        exe = ok(d.cuGraphInstantiate(inner, 0))
        out: Obs = []
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out.append(name(d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, 0, 0)[0]))
            out.append(name(d.cuGraphLaunch(exe, s)[0]))
            err, scratch = d.cuMemAllocAsync(64, s)
            out.append(name(err))
            out.append(name(d.cuMemFreeAsync(p, s)[0]))  # not allocated by the capture
            out.append(capture_status(d, s))
            if not int(err):
                out.append(name(d.cuMemFreeAsync(scratch, s)[0]))
            status, graph = end_capture(d, s)
        finally:
            end_captures_quietly(d, s)
        out.append(status)
        if graph is not None:
            out.append(node_kinds(d, graph))
            out += run_graph(d, graph, s)
            d.cuGraphDestroy(graph)
        d.cuGraphExecDestroy(exe)
        d.cuGraphDestroy(inner)
    return out


@scenario
def capture_host_function_node(d: Any) -> Obs:
    ran: list[int] = []
    fn = HostFunction(lambda _: ran.append(1))
    with Setup(d) as env:
        s = env.stream()
        ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
        try:
            out: Obs = [name(d.cuLaunchHostFunc(s, fn.handle, 0)[0])]
            status, graph = end_capture(d, s)
        finally:
            end_captures_quietly(d, s)
        out += [status, len(ran), node_kinds(d, graph)]
        # One launch only: cuda-bindings frees a cuLaunchHostFunc callback's data after its first call.
        out += run_graph(d, graph, s)
        out.append(len(ran))
        d.cuGraphDestroy(graph)
    return out


@scenario
def capture_instantiate_by_mode(d: Any) -> Obs:
    """cuGraphInstantiate of a one-node graph while a capture runs: in this thread's global, thread-local
    or relaxed mode, in this thread's global capture with the thread exchanged to relaxed, and in
    another thread's global or thread-local capture. Each: the instantiate's status, the capture's
    status after it and how the capture ends."""
    out: Obs = []
    with Setup(d) as env:
        s = env.stream(1)
        graph = ok(d.cuGraphCreate(0))
        ok(d.cuGraphAddEmptyNode(graph, None, 0))

        def instantiate() -> str:
            err, exe = d.cuGraphInstantiate(graph, 0)
            if not int(err):
                d.cuGraphExecDestroy(exe)
            return name(err)

        def finish(label: str, status: str) -> None:
            ended, captured = end_capture(d, s)
            if captured is not None:
                d.cuGraphDestroy(captured)
            out.append([label, status, ended])

        modes = (
            CAP.CU_STREAM_CAPTURE_MODE_GLOBAL,
            CAP.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CAP.CU_STREAM_CAPTURE_MODE_RELAXED,
        )
        try:
            for mode in modes:
                ok(d.cuStreamBeginCapture(s, mode))
                status = instantiate()
                out.append(capture_status(d, s))
                finish(f"this thread {mode.name}", status)
            ok(d.cuStreamBeginCapture(s, CAP.CU_STREAM_CAPTURE_MODE_GLOBAL))
            old = d.cuThreadExchangeStreamCaptureMode(CAP.CU_STREAM_CAPTURE_MODE_RELAXED)
            status = instantiate()
            d.cuThreadExchangeStreamCaptureMode(old[1])
            out.append(capture_status(d, s))
            finish("this thread GLOBAL, exchanged to RELAXED", status)
            for mode in modes[:2]:
                began, done = threading.Event(), threading.Event()

                def other(mode: Any = mode, began: threading.Event = began, done: threading.Event = done) -> None:
                    d.cuCtxSetCurrent(env.ctx)
                    d.cuStreamBeginCapture(s, mode)
                    began.set()
                    done.wait(10)
                    ended, captured = end_capture(d, s)
                    if captured is not None:
                        d.cuGraphDestroy(captured)
                    out.append(ended)
                    d.cuCtxSetCurrent(B.CUcontext(0))

                thread = threading.Thread(target=other)
                thread.start()
                began.wait(10)
                out.append([f"another thread {mode.name}", instantiate()])
                done.set()
                thread.join()
        finally:
            end_captures_quietly(d, s)
            d.cuGraphDestroy(graph)
    return out
