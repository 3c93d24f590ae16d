"""Stream capture on the simulated driver: work queued on a capturing stream becomes graph nodes.

:class:`SimCapture` builds on :class:`~cuguard.testing._sim.graphs.SimGraphs`.
Rules (documented in the CUDA driver API unless marked assumed):

- ``cuStreamBeginCapture(stream, mode)`` starts a capture sequence into a new
  graph; ``cuStreamBeginCaptureToGraph`` captures into an existing graph after
  the given nodes. A stream already capturing answers
  ``CUDA_ERROR_ILLEGAL_STATE``; the legacy NULL stream answers
  ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``.
- Kernel launches, asynchronous copies and memsets and host functions queued
  on a capturing stream run nothing: each becomes a node depending on the
  stream's capture dependencies, which it then replaces. ``cuMemAllocAsync`` and
  ``cuMemFreeAsync`` become allocation and free nodes (freeing memory that the
  capture did not allocate is ``CUDA_ERROR_INVALID_VALUE``, assumed).
- ``cuEventRecord`` on a capturing stream makes no node: the event remembers
  the stream's dependencies. ``cuStreamWaitEvent`` on such an event makes a
  stream that is not capturing join the capture (a fork) and adds the
  dependencies to one that is (a join); an event of another capture is
  ``CUDA_ERROR_STREAM_CAPTURE_MERGE`` and invalidates both captures, an event
  recorded outside the capture is ``CUDA_ERROR_STREAM_CAPTURE_ISOLATION`` and
  invalidates the waiting stream's capture. Querying or synchronizing an event recorded in a capture
  in progress is ``CUDA_ERROR_CAPTURED_EVENT``; the query invalidates that capture (H200), and a
  stream not capturing that then waits for the event is ``CUDA_ERROR_INVALID_VALUE`` and stays out.
- Synchronizing or querying a capturing stream is
  ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidates its capture;
  using the legacy NULL stream (queuing work on it, synchronizing, querying
  or waiting on it, and the synchronous copies and memsets, which run on it)
  while a blocking stream (one created without ``CU_STREAM_NON_BLOCKING``) of
  the same context captures is ``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`` and
  invalidates those captures; nothing is done then.
  Work queued on a stream whose capture was invalidated is
  ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``, and so is ``cuStreamGetCtx`` of
  that stream (as on an H200) until the capture ends.
- Potentially unsafe calls (``cuMemAlloc``, ``cuMemFree``, ``cuMemAllocHost``,
  ``cuMemHostAlloc``, ``cuMemFreeHost``, ``cuCtxSynchronize`` and the
  synchronous copies and memsets) answer
  ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` when the calling thread's capture
  mode (``cuThreadExchangeStreamCaptureMode``, global by default) prohibits
  them: a thread in global or thread-local mode is prohibited while it has a
  capture of its own begun in global or thread-local mode; a thread in global
  mode is also prohibited while another thread has a capture begun in global
  mode; a thread in relaxed mode never is. The captures that prohibited the
  call are invalidated (assumed). ``cuMemAllocManaged`` is one of them (as on
  an H200), and so are ``cuGraphInstantiate`` and ``cuGraphInstantiateWithFlags``
  (an H200 refused them under each prohibition, differential scenario
  capture_instantiate_by_mode), and ``cuMemPoolCreate`` (an H200 refused it in a thread in
  global mode while another thread captured in global mode, and that capture
  was invalidated), and so is ``cuGraphExecDestroy`` (an H200 refused it in
  the capturing thread during its global-mode capture, which was invalidated;
  ``cuGraphDestroy`` was allowed).
- With :data:`ENFORCE_SYNC_DURING_CAPTURE` on (the default), ``cuCtxSynchronize``
  while any stream of the current context is capturing
  is ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidates those captures,
  whatever the calling thread's mode (relaxed too: as on an H200, for a
  capture begun in global mode; assumed for the other modes).
- ``cuStreamEndCapture`` on the stream that began the capture ends it for
  every stream taking part and returns the graph. An invalidated capture
  returns ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`` and no graph: the driver
  destroys the graph, a new one and, as the H200's driver does, an existing
  graph given to ``cuStreamBeginCaptureToGraph`` too (later calls on it,
  ``cuGraphDestroy`` included, answer ``CUDA_ERROR_INVALID_VALUE``; a
  conditional body or child graph captured into is kept, not observed); a
  stream forked into the capture whose last work is not an ancestor of the
  origin stream's dependencies makes it
  ``CUDA_ERROR_STREAM_CAPTURE_UNJOINED``, also ending the capture with no
  graph (assumed). Other failures leave the capture as it was (assumed):
  ``CUDA_ERROR_ILLEGAL_STATE`` on a stream that is not capturing,
  ``CUDA_ERROR_STREAM_CAPTURE_UNMATCHED`` on a forked stream.
  ``CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD``, from another thread than the one
  that began a capture in global or thread-local mode, ends the capture with
  no graph all the same (as the H200's driver does).
- ``cuGraphLaunch`` on a capturing stream is
  ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidates the capture (as
  the H200's driver answers). ``cuThreadExchangeStreamCaptureMode`` takes an
  unknown mode as it is (it prohibits as thread-local mode does).
- ``cuStreamIsCapturing`` and ``cuStreamGetCaptureInfo`` report the status
  (none, active, invalidated); on the legacy stream while a blocking stream of
  the context captures they answer ``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT``.
  ``cuStreamUpdateCaptureDependencies`` adds to (flags 0) or replaces (flags 1)
  the stream's dependencies with nodes of the capture's graph.
- Destroying a capturing stream takes it out of its capture and invalidates
  the capture (assumed); destroying the stream that began it ends the capture
  for every stream taking part and destroys its graph (unless captured into an
  existing graph), so it prohibits nothing any more (assumed).

A captured kernel launch is a kernel node of the kernel, its dimensions and
its arguments (``cuGraphKernelNodeGetParams`` returns ``None`` for it: the
launch's parameter block is not kept, an assumed simplification); the other
nodes made by capture replay the captured work when the graph runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings import driver as cb

from cuguard.errors.lowlevel import calls_where
from cuguard.testing._bindings import EDGE_DATA
from cuguard.testing._sim.base import DEVICE_BASE, OK, SUCCESS, Status, api, h
from cuguard.testing._sim.graphs import SimGraphs
from cuguard.testing._sim.graphstate import Graph, KernelSpec, Node
from cuguard.testing._sim.pools import SimPools
from cuguard.testing._sim.queries import SimQueries
from cuguard.testing._sim.state import Event, Function, Stream

#: Whether cuCtxSynchronize is refused during any capture of its context whatever the thread's mode
#: (the H200's answer; on by default). Tests that model an older driver may switch it off.
ENFORCE_SYNC_DURING_CAPTURE = True

__all__ = ["Capture", "CapturedWork", "SimCapture"]

R = cb.CUresult
T = cb.CUgraphNodeType
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
ILLEGAL_STATE = R.CUDA_ERROR_ILLEGAL_STATE
UNSUPPORTED = R.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
INVALIDATED = R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
_S = cb.CUstreamCaptureStatus
_GLOBAL = int(cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL)
_RELAXED = int(cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
_MODES = (_GLOBAL, int(cb.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), _RELAXED)
_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING

#: The node type of the work each stream call queues while capturing.
_NODE_TYPES: dict[str, Any] = {
    "cuLaunchKernel": T.CU_GRAPH_NODE_TYPE_KERNEL,
    "cuLaunchKernelEx": T.CU_GRAPH_NODE_TYPE_KERNEL,
    "cuLaunchHostFunc": T.CU_GRAPH_NODE_TYPE_HOST,
}
#: Calls a thread whose capture mode prohibits potentially unsafe calls may not make.
UNSAFE_DURING_CAPTURE: frozenset[str] = calls_where(capture_unsafe=True)


#: Calls that may name the legacy stream while a blocking stream captures: they order no work.
_LEGACY_QUERIES: frozenset[str] = calls_where(legacy_query=True)


def _node_type(call: str) -> Any:
    kind = _NODE_TYPES.get(call)
    if kind is not None:
        return kind
    if call.startswith("cuMemcpy"):
        return T.CU_GRAPH_NODE_TYPE_MEMCPY
    if call.startswith("cuMemset"):
        return T.CU_GRAPH_NODE_TYPE_MEMSET
    return T.CU_GRAPH_NODE_TYPE_EMPTY


@dataclass(eq=False, slots=True)
class CapturedWork:
    """The spec of a copy, memset or host node made by capture: the captured work, replayed at each launch."""

    call: str
    run: Callable[[], None] | None
    refs: frozenset[int]
    host: Callable[[], None] | None
    runs: int = 0  # how many launches reached it (a captured cuLaunchHostFunc runs once: see _launch_step)


@dataclass(eq=False, slots=True)
class Capture:
    """One capture sequence: its graph, the streams taking part and each one's dependencies."""

    id: int
    origin: Stream
    graph: Graph
    mode: int
    thread: int
    to_graph: bool
    streams: dict[int, Stream] = field(default_factory=dict)
    deps: dict[int, list[Node]] = field(default_factory=dict)
    invalidated: bool = False


_capture_ids = iter(range(1, 1 << 62))


class SimCapture(SimGraphs):
    """Adds stream capture (the ``cuStream*Capture*`` calls) to :class:`SimGraphs`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # event handle -> (capture, the dependencies its record in that capture saw)
        self._capture_events: dict[int, tuple[Capture, list[Node]]] = {}

    # --- plumbing -----------------------------------------------------------------------------

    def _thread_mode(self) -> int:
        return int(getattr(self._tls, "capture_mode", _GLOBAL))

    def _passes_gate(self, name: str) -> bool:
        """Whether the call ``name`` would reach its body (not refused by the gate or from a host function)."""
        if self._worker.on_worker():
            return False
        return not self._gated or self._gate_code(name) is None

    def _capture_of(self, value: Any, name: str) -> Capture | None:
        """The capture in progress that the stream ``value`` takes part in (None when the gate refuses ``name``)."""
        if not self._open_captures or not self._passes_gate(name):
            return None
        st = self._streams.get(h(value))
        if st is None or st.destroyed:
            return None
        cap: Capture | None = st.capture
        return cap

    def _invalidate(self, cap: Capture) -> None:
        cap.invalidated = True

    def _leave(self, cap: Capture) -> None:
        """End ``cap`` for every stream taking part."""
        for st in cap.streams.values():
            st.capture = None
        self._open_captures.pop(cap.id, None)

    def _blocking_captures(self, st: Stream) -> list[Capture]:
        """Captures of blocking streams of ``st``'s context (what the legacy stream would implicitly wait for)."""
        found: list[Capture] = []
        for cap in self._open_captures.values():
            for other in cap.streams.values():
                if other.ctx is st.ctx and not other.flags & _NON_BLOCKING and cap not in found:
                    found.append(cap)
        return found

    def _prohibiting(self) -> list[Capture]:
        """The captures that prohibit this thread's potentially unsafe calls."""
        mode = self._thread_mode()
        if mode == _RELAXED or not self._open_captures:
            return []
        me = threading.get_ident()
        return [
            cap
            for cap in self._open_captures.values()
            if (cap.thread == me and cap.mode != _RELAXED)
            or (mode == _GLOBAL and cap.thread != me and cap.mode == _GLOBAL)
        ]

    def _captured(
        self,
        st: Stream,
        call: str,
        run: Callable[[], None] | None,
        refs: frozenset[int],
        host: Callable[[], None] | None,
    ) -> int | None:
        cap: Capture | None = st.capture
        if cap is None:
            return None
        if cap.invalidated:
            raise Status(INVALIDATED)
        kind = _node_type(call)
        kernel = getattr(self._tls, "captured_kernel", None)
        self._tls.captured_kernel = None
        spec: Any = CapturedWork(call, run, refs, host)
        if kind == T.CU_GRAPH_NODE_TYPE_KERNEL and kernel is not None:
            fn, args, launch = kernel
            spec = KernelSpec(
                fn,
                launch["grid"],
                launch["block"],
                launch["shared"],
                args,
                None,
                launch.get("cluster"),
                bool(launch.get("cooperative", False)),
            )
        self._capture_node(cap, st, kind, spec)
        return self._op_seq

    def _kernel_runner(self, fn: Function, args: tuple[Any, ...], launch: dict[str, Any]) -> Callable[[], None]:
        # A kernel launch builds its runner just before queuing it: a capture keeps the kernel as a kernel node.
        self._tls.captured_kernel = (fn, args, launch) if self._open_captures else None
        return super()._kernel_runner(fn, args, launch)

    def _legacy_stream_used(self, null: Stream, call: str) -> None:
        # Checked when the call looks the legacy stream up, before it has done anything.
        if call in _LEGACY_QUERIES:
            return
        implicit = self._blocking_captures(null)
        if implicit:
            for other in implicit:
                self._invalidate(other)
            raise Status(R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)

    def _capture_node(self, cap: Capture, st: Stream, kind: Any, spec: Any) -> Node:
        node = Node(self._handle(), cap.graph, kind, spec)
        cap.graph.nodes[node.handle] = node
        self._nodes[node.handle] = node
        for dep in cap.deps.get(st.key, []):
            self._link(dep, node)
        cap.deps[st.key] = [node]
        return node

    def _launch_step(self, st: Stream, kind: Any, spec: Any) -> None:
        if isinstance(spec, CapturedWork):
            spec.runs += 1
            if spec.call == "cuLaunchHostFunc" and spec.runs > 1:
                # cuda-bindings passes the driver a wrapper of its own for a cuLaunchHostFunc
                # callback and frees the wrapper's data after the first call: a host node captured
                # that way crashes the process the second time a graph runs it.
                raise self._crash(
                    "cuGraphLaunch",
                    "a host function captured with cuLaunchHostFunc ran a second time: cuda-bindings "
                    "freed its callback data after the first call",
                    h(st.handle),
                )
            self._enqueue(st, "cuGraphLaunch", spec.run, spec.refs, host=spec.host)
            return
        super()._launch_step(st, kind, spec)

    def _step_refs(self, steps: list[tuple[Any, Any]]) -> frozenset[int]:
        # Captured work anywhere in the steps, a conditional body's included (captured into a body graph).
        refs = set(super()._step_refs(steps))
        for _, spec in self._expanded(steps):
            if isinstance(spec, CapturedWork):
                for base in spec.refs:
                    alloc = self._dev_find(base) if base >= DEVICE_BASE else self._host_allocs.get(base)
                    if alloc is not None and not alloc.graph_owned:
                        refs.add(base)
        return frozenset(refs)

    # --- begin, end, query --------------------------------------------------------------------

    def _begin(self, st: Stream, graph: Graph, deps: list[Node], mode: int, to_graph: bool) -> None:
        cap = Capture(next(_capture_ids), st, graph, mode, threading.get_ident(), to_graph)
        cap.streams[st.key] = st
        cap.deps[st.key] = deps
        st.capture = cap
        self._open_captures[cap.id] = cap

    def _begin_checks(self, hStream: Any, mode: Any, call: str) -> Stream:
        if int(mode) not in _MODES:
            raise Status(INVALID_VALUE)
        if h(hStream) in (0, 1):
            raise Status(UNSUPPORTED)  # the legacy stream cannot capture
        st = self._stream(hStream, call)
        if st.capture is not None:
            raise Status(ILLEGAL_STATE)
        return st

    @api(0)
    def cuStreamBeginCapture(self, hStream: Any, mode: Any) -> tuple[Any, ...]:
        st = self._begin_checks(hStream, mode, "cuStreamBeginCapture")
        graph = Graph(self._handle(), "cuStreamEndCapture")
        self._graphs[graph.handle] = graph
        self._begin(st, graph, [], int(mode), False)
        return OK

    @api(0)
    def cuStreamBeginCaptureToGraph(  # noqa: PLR0917
        self, hStream: Any, hGraph: Any, dependencies: Any, dependencyData: Any, numDependencies: int, mode: Any
    ) -> tuple[Any, ...]:
        st = self._begin_checks(hStream, mode, "cuStreamBeginCaptureToGraph")
        graph = self._graph(hGraph, "cuStreamBeginCaptureToGraph")
        if any(cap.graph is graph for cap in self._open_captures.values()):
            raise Status(ILLEGAL_STATE)  # assumed: one capture into a graph at a time
        deps = self._deps(graph, dependencies, numDependencies)
        self._begin(st, graph, deps, int(mode), True)
        return OK

    def _unjoined(self, cap: Capture) -> bool:
        seen: set[int] = set()
        todo = list(cap.deps.get(cap.origin.key, []))
        while todo:
            node = todo.pop()
            if node.handle not in seen:
                seen.add(node.handle)
                todo.extend(node.deps)
        return any(
            node.handle not in seen
            for key, deps in cap.deps.items()
            if key != cap.origin.key
            for node in deps
            if not node.destroyed
        )

    @api(1, callbacks=True)
    def cuStreamEndCapture(self, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuStreamEndCapture")
        cap: Capture | None = st.capture
        if cap is None:
            raise Status(ILLEGAL_STATE)
        if st is not cap.origin:
            raise Status(R.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
        self._leave(cap)
        failure = INVALIDATED if cap.invalidated else None
        if cap.mode != _RELAXED and cap.thread != threading.get_ident():
            failure = R.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD  # refused, yet the capture ends (H200)
        if failure is None and self._unjoined(cap):
            failure = R.CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        if failure is not None:
            if not cap.to_graph:
                self._destroy_graph(cap.graph)
            elif failure == INVALIDATED and not cap.graph.child:
                # The H200's driver destroys the user's graph an invalidated capture was recording into:
                # later calls on it answer CUDA_ERROR_INVALID_VALUE (cuGraphDestroy included).
                self._destroy_graph(cap.graph)
            raise Status(failure)
        if not cap.to_graph:
            self._add_live("graph", cap.graph.handle, None, "cuStreamEndCapture")
        return (SUCCESS, cb.CUgraph(cap.graph.handle))

    def _status_of(self, hStream: Any, call: str) -> tuple[Any, Capture | None]:
        st = self._stream(hStream, call)
        if h(hStream) in (0, 1) and self._blocking_captures(st):
            raise Status(R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
        cap: Capture | None = st.capture
        if cap is None:
            return _S.CU_STREAM_CAPTURE_STATUS_NONE, None
        if cap.invalidated:
            return _S.CU_STREAM_CAPTURE_STATUS_INVALIDATED, cap
        return _S.CU_STREAM_CAPTURE_STATUS_ACTIVE, cap

    @api(1)
    def cuStreamIsCapturing(self, hStream: Any) -> tuple[Any, ...]:
        return (SUCCESS, self._status_of(hStream, "cuStreamIsCapturing")[0])

    def cuStreamGetCtx(self, hStream: Any) -> tuple[Any, ...]:
        # An H200 refuses to name the context of a stream whose capture was invalidated (until it ends).
        if self._open_captures:
            with self._lock:
                cap = self._capture_of(hStream, "cuStreamGetCtx")
                if cap is not None and cap.invalidated:
                    return (INVALIDATED, None)
        result: tuple[Any, ...] = super().cuStreamGetCtx(hStream)
        return result

    if EDGE_DATA:

        @api(6)
        def cuStreamGetCaptureInfo(self, hStream: Any) -> tuple[Any, ...]:
            status, cap, graph, deps = self._capture_info(hStream)
            return (SUCCESS, status, cb.cuuint64_t(cap), graph, deps, [cb.CUgraphEdgeData() for _ in deps], len(deps))

        @api(0)
        def cuStreamUpdateCaptureDependencies(
            self, hStream: Any, dependencies: Any, dependencyData: Any, numDependencies: int, flags: int
        ) -> tuple[Any, ...]:
            return self._update_dependencies(hStream, dependencies, numDependencies, flags)

    else:

        @api(5)
        def cuStreamGetCaptureInfo(self, hStream: Any) -> tuple[Any, ...]:  # 12.x
            status, cap, graph, deps = self._capture_info(hStream)
            return (SUCCESS, status, cb.cuuint64_t(cap), graph, deps, len(deps))

        @api(0)
        def cuStreamUpdateCaptureDependencies(  # type: ignore[misc]  # 12.x
            self, hStream: Any, dependencies: Any, numDependencies: int, flags: int
        ) -> tuple[Any, ...]:
            return self._update_dependencies(hStream, dependencies, numDependencies, flags)

    def _capture_info(self, hStream: Any) -> tuple[Any, int, Any, list[Any]]:
        """``(status, capture id, graph, dependencies)``; id 0, no graph and no dependencies unless active."""
        status, cap = self._status_of(hStream, "cuStreamGetCaptureInfo")
        if cap is None or cap.invalidated:
            return status, 0 if cap is None else cap.id, None, []
        st = self._stream(hStream, "cuStreamGetCaptureInfo")
        deps = [cb.CUgraphNode(n.handle) for n in cap.deps.get(st.key, [])]
        return status, cap.id, cb.CUgraph(cap.graph.handle), deps

    def _update_dependencies(self, hStream: Any, dependencies: Any, count: int, flags: int) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuStreamUpdateCaptureDependencies")
        cap: Capture | None = st.capture
        if int(flags) not in (0, 1):
            raise Status(INVALID_VALUE)
        if cap is None:
            raise Status(ILLEGAL_STATE)
        if cap.invalidated:
            raise Status(INVALIDATED)
        nodes = self._deps(cap.graph, dependencies, count)
        if int(flags) == 1:
            cap.deps[st.key] = nodes
        else:
            current = cap.deps.setdefault(st.key, [])
            current.extend(n for n in nodes if n not in current)
        return OK

    @api(1)
    def cuThreadExchangeStreamCaptureMode(self, mode: Any) -> tuple[Any, ...]:
        value = int(mode)  # an unknown mode is taken as it is (H200)
        old = self._thread_mode()
        self._tls.capture_mode = value
        return (SUCCESS, cb.CUstreamCaptureMode(old))

    # --- stream calls that see a capture ------------------------------------------------------

    def cuStreamSynchronize(self, hStream: Any) -> tuple[Any, ...]:
        if self._open_captures:
            with self._lock:
                cap = self._capture_of(hStream, "cuStreamSynchronize")
                if cap is not None:
                    self._invalidate(cap)
                    return (UNSUPPORTED,)
        return super().cuStreamSynchronize(hStream)  # type: ignore[no-any-return]

    def cuStreamQuery(self, hStream: Any) -> tuple[Any, ...]:
        if self._open_captures:
            with self._lock:
                cap = self._capture_of(hStream, "cuStreamQuery")
                if cap is not None:
                    self._invalidate(cap)
                    return (UNSUPPORTED,)
        return super().cuStreamQuery(hStream)  # type: ignore[no-any-return]

    def cuStreamDestroy(self, hStream: Any) -> tuple[Any, ...]:
        if self._open_captures:
            with self._lock:
                cap = self._capture_of(hStream, "cuStreamDestroy")
                if cap is not None:
                    st = self._streams[h(hStream)]
                    self._invalidate(cap)
                    st.capture = None
                    if st is not cap.origin:
                        del cap.streams[st.key]
                        cap.deps.pop(st.key, None)
                    else:  # nothing can end it any more: it ends with its stream, and its graph goes
                        self._leave(cap)
                        if not cap.to_graph:
                            self._destroy_graph(cap.graph)
        return super().cuStreamDestroy(hStream)

    def _open_capture_event(self, hEvent: Any) -> tuple[Capture, list[Node]] | None:
        mark = self._capture_events.get(h(hEvent))
        if mark is None or mark[0].id not in self._open_captures:
            return None
        return mark

    def cuEventRecord(self, hEvent: Any, hStream: Any) -> tuple[Any, ...]:
        if self._open_captures or self._capture_events:
            with self._lock:
                cap = self._capture_of(hStream, "cuEventRecord")
                if cap is not None:
                    ev: Event = self._event(hEvent, "cuEventRecord")
                    st = self._streams[h(hStream)]
                    if st.ctx is not ev.ctx:
                        return (R.CUDA_ERROR_INVALID_HANDLE,)
                    if cap.invalidated:
                        return (INVALIDATED,)
                    self._capture_events[ev.handle] = (cap, list(cap.deps.get(st.key, [])))
                    return OK
                result: tuple[Any, ...] = super().cuEventRecord(hEvent, hStream)
                if not result[0]:
                    self._capture_events.pop(h(hEvent), None)
                return result
        return super().cuEventRecord(hEvent, hStream)

    def cuStreamWaitEvent(self, hStream: Any, hEvent: Any, Flags: int) -> tuple[Any, ...]:
        if not self._open_captures or not self._passes_gate("cuStreamWaitEvent"):
            return super().cuStreamWaitEvent(hStream, hEvent, Flags)
        with self._lock:
            mark = self._open_capture_event(hEvent)
            cap = self._capture_of(hStream, "cuStreamWaitEvent")
            if mark is None and cap is None:
                return super().cuStreamWaitEvent(hStream, hEvent, Flags)
            st = self._stream(hStream, "cuStreamWaitEvent") if h(hStream) not in (0, 1) else None
            ev: Event = self._event(hEvent, "cuStreamWaitEvent")
            if st is None:
                return (UNSUPPORTED,)  # the legacy stream cannot join a capture
            if cap is not None and cap.invalidated:
                return (INVALIDATED,)
            if mark is None:
                assert cap is not None
                if ev.stream is None:
                    return OK  # never recorded: nothing to wait for
                self._invalidate(cap)
                return (R.CUDA_ERROR_STREAM_CAPTURE_ISOLATION,)
            source, nodes = mark
            if cap is None:  # a fork: the stream joins the capture
                if source.invalidated:
                    return (INVALID_VALUE,)  # a fork from an invalidated capture (H200); the stream stays out
                st.capture = source
                source.streams[st.key] = st
                source.deps[st.key] = list(nodes)
                return OK
            if cap is not source:  # both captures are invalidated (H200)
                self._invalidate(cap)
                self._invalidate(source)
                return (R.CUDA_ERROR_STREAM_CAPTURE_MERGE,)
            current = cap.deps.setdefault(st.key, [])
            current.extend(n for n in nodes if n not in current)
            return OK

    def cuEventQuery(self, hEvent: Any) -> tuple[Any, ...]:
        if self._open_captures and self._passes_gate("cuEventQuery"):
            with self._lock:
                mark = self._open_capture_event(hEvent)
                if mark is not None:
                    self._invalidate(mark[0])  # the H200 invalidated the capture the event was recorded in
                    return (R.CUDA_ERROR_CAPTURED_EVENT,)
        return super().cuEventQuery(hEvent)  # type: ignore[no-any-return]

    def cuEventSynchronize(self, hEvent: Any) -> tuple[Any, ...]:
        if self._open_captures and self._passes_gate("cuEventSynchronize"):
            with self._lock:
                if self._open_capture_event(hEvent) is not None:
                    return (R.CUDA_ERROR_CAPTURED_EVENT,)
        return super().cuEventSynchronize(hEvent)  # type: ignore[no-any-return]

    def cuGraphLaunch(self, hGraphExec: Any, hStream: Any) -> tuple[Any, ...]:
        if self._open_captures:
            with self._lock:
                cap = self._capture_of(hStream, "cuGraphLaunch")
                if cap is not None:
                    return self._capture_graph_launch(cap, hGraphExec, hStream)
        return super().cuGraphLaunch(hGraphExec, hStream)

    def _capture_graph_launch(self, cap: Capture, hGraphExec: Any, hStream: Any) -> tuple[Any, ...]:
        """A graph launched into a capture: ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``, which invalidates the capture."""
        self._exec(hGraphExec, "cuGraphLaunch")
        if cap.invalidated:
            return (INVALIDATED,)
        self._invalidate(cap)  # not capturable on the H200's driver: the capture is invalidated
        return (UNSUPPORTED,)

    def cuMemAllocAsync(self, bytesize: int, hStream: Any) -> tuple[Any, ...]:
        if self._open_captures:
            with self._lock:
                cap = self._capture_of(hStream, "cuMemAllocAsync")
                if cap is not None:
                    if cap.invalidated:
                        return (INVALIDATED, None)
                    st = self._streams[h(hStream)]
                    size = int(bytesize)
                    if size <= 0:
                        return (INVALID_VALUE, None)
                    if size > self._memory_per_device:
                        return (R.CUDA_ERROR_OUT_OF_MEMORY, None)
                    alloc = self._new_device_alloc(size, None, st.ctx.device, "cuMemAllocAsync", live=False)
                    alloc.freed = True
                    alloc.graph_owned = True
                    self._capture_node(cap, st, T.CU_GRAPH_NODE_TYPE_MEM_ALLOC, alloc)
                    return (SUCCESS, cb.CUdeviceptr(alloc.base))
        return super().cuMemAllocAsync(bytesize, hStream)

    def cuMemFreeAsync(self, dptr: Any, hStream: Any) -> tuple[Any, ...]:
        if self._open_captures:
            with self._lock:
                cap = self._capture_of(hStream, "cuMemFreeAsync")
                if cap is not None:
                    if cap.invalidated:
                        return (INVALIDATED,)
                    st = self._streams[h(hStream)]
                    addr = h(dptr)
                    alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
                    allocated_here = any(
                        n.type == T.CU_GRAPH_NODE_TYPE_MEM_ALLOC and n.spec is alloc for n in cap.graph.nodes.values()
                    )
                    if alloc is None or alloc.base != addr or not allocated_here:
                        return (INVALID_VALUE,)
                    self._capture_node(cap, st, T.CU_GRAPH_NODE_TYPE_MEM_FREE, alloc)
                    return OK
        return super().cuMemFreeAsync(dptr, hStream)

    # --- potentially unsafe calls -------------------------------------------------------------

    def _refuse_unsafe(self, name: str) -> bool:
        """Whether this thread's capture mode prohibits the unsafe call ``name`` now; those captures are invalidated.

        ``cuCtxSynchronize`` is also refused while a stream of the current context captures, whatever the
        thread's mode (as on an H200): those captures are invalidated too.
        """
        if not self._open_captures or not self._passes_gate(name):
            return False
        with self._lock:
            prohibiting = self._prohibiting()
            if name == "cuCtxSynchronize" and ENFORCE_SYNC_DURING_CAPTURE:
                ctx = self._current()
                for cap in self._open_captures.values():
                    if cap not in prohibiting and any(st.ctx is ctx for st in cap.streams.values()):
                        prohibiting.append(cap)
            for cap in prohibiting:
                self._invalidate(cap)
            return bool(prohibiting)


def _guard(name: str, outputs: int) -> Callable[..., tuple[Any, ...]]:
    pad = (None,) * outputs

    def guarded(self: SimCapture, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        if self._open_captures and self._refuse_unsafe(name):
            return (UNSUPPORTED, *pad)
        result: tuple[Any, ...] = getattr(super(SimCapture, self), name)(*args, **kwargs)
        return result

    guarded.__name__ = guarded.__qualname__ = name
    original = getattr(SimGraphs, name, None) or getattr(SimQueries, name, None) or getattr(SimPools, name)
    guarded.__wrapped__ = original  # type: ignore[attr-defined]  # its signature and documentation
    guarded.__doc__ = original.__doc__
    return guarded


for _name, _outputs in (
    ("cuMemAlloc", 1),
    ("cuMemFree", 0),
    ("cuMemAllocHost", 1),
    ("cuMemHostAlloc", 1),
    ("cuMemAllocManaged", 1),
    ("cuMemFreeHost", 0),
    ("cuMemPoolCreate", 1),
    ("cuCtxSynchronize", 0),
    ("cuGraphExecDestroy", 0),
    ("cuGraphInstantiate", 1),
    ("cuGraphInstantiateWithFlags", 1),
    ("cuMemcpy", 0),
    ("cuMemcpyHtoD", 0),
    ("cuMemcpyDtoH", 0),
    ("cuMemcpyDtoD", 0),
    ("cuMemsetD8", 0),
    ("cuMemsetD16", 0),
    ("cuMemsetD32", 0),
):
    setattr(SimCapture, _name, _guard(_name, _outputs))
del _name, _outputs
