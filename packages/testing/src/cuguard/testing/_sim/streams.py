"""Streams, events and the stream-ordered work queue of the simulated driver.

:class:`SimStreams` builds on :class:`~cuguard.testing._sim.base.SimBase`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.base import (
    INVALID_HANDLE,
    INVALID_VALUE,
    OK,
    SUCCESS,
    R,
    SimBase,
    Status,
    api,
    h,
)
from cuguard.testing._sim.facts import event_flags_valid
from cuguard.testing._sim.state import Alloc, Event, Op, Stream

__all__ = ["SimStreams"]


class SimStreams(SimBase):
    """Streams and events, and how work queued on a stream runs, stays in flight and retires."""

    # --- stream work -------------------------------------------------------------------------

    def _enqueue(
        self,
        st: Stream,
        call: str,
        run: Callable[[], None] | None,
        refs: frozenset[int] = frozenset(),
        host: Callable[[], None] | None = None,
    ) -> int:
        """Queue one unit of work on ``st``: run it now, or on the driver thread behind pending host work."""
        if st.capture is not None:
            captured = self._captured(st, call, run, refs, host)
            if captured is not None:
                return captured
        self._op_seq += 1
        seq = self._op_seq
        st.inflight.append(Op(seq, refs, call))
        self._busy.add(st)
        if host is not None:
            st.last_task = self._worker.submit(host)
        elif run is not None:
            if st.last_task > self._worker.done:
                st.last_task = self._worker.submit(self._locked(run))
            else:
                run()
        return seq

    def _legacy_stream_used(self, null: Stream, call: str) -> None:
        """Overridden by the capture model: ``call`` uses the legacy stream while a capture is in progress."""

    def _captured(
        self,
        st: Stream,
        call: str,
        run: Callable[[], None] | None,
        refs: frozenset[int],
        host: Callable[[], None] | None,
    ) -> int | None:
        """Overridden by the capture model: work queued while a capture is in progress.

        Returns the work's sequence number when the capture took it (it runs nothing), or
        ``None`` when it is queued as usual.
        """
        return None

    def _locked(self, run: Callable[[], None]) -> Callable[[], None]:
        def task() -> None:
            with self._lock:
                run()

        return task

    def _retire(self, st: Stream, upto: int | None = None, depth: int = 0) -> None:
        if upto is None:
            st.inflight.clear()
        else:
            st.inflight = [op for op in st.inflight if op.seq > upto]
        if not st.inflight:
            self._busy.discard(st)
        if depth < 4:
            for key, seq in list(st.ordered_after.items()):
                if upto is None or seq <= upto:
                    other = self._stream_keys.get(key)
                    if other is not None:
                        self._retire(other, seq, depth + 1)

    def _check_free(self, alloc: Alloc, call: str, stream: Stream | None) -> None:
        """Record ``alloc`` as dangling if work not ordered before this free still uses it."""
        for other in list(self._busy):
            if other is stream:
                continue
            limit = 0 if stream is None else stream.ordered_after.get(other.key, 0)
            for op in other.inflight:
                if op.seq > limit and alloc.base in op.refs:
                    where = "stream 0" if other.handle == 0 else f"stream {other.handle:#x}"
                    self._note(
                        self.dangling,
                        call,
                        f"memory {alloc.base:#x} freed while {op.call} on {where} still in flight uses it",
                        alloc.base,
                    )
                    break
        self._check_free_graphs(alloc, call)

    def _check_free_graphs(self, alloc: Alloc, call: str) -> None:
        """Overridden by the graph layer: executable graphs that reference ``alloc``."""

    # --- streams ---------------------------------------------------------------------------------

    def _stream(self, value: Any, call: str) -> Stream:
        handle = h(value)
        if handle in (0, 1, 2):
            ctx = self._require_ctx()
            assert ctx.null is not None
            if self._open_captures and handle != 2:
                self._legacy_stream_used(ctx.null, call)
            return ctx.null
        st = self._streams.get(handle)
        if st is None:
            raise self._crash(call, f"stream {handle:#x} was never created by this driver", handle)
        if st.destroyed:
            raise self._crash(call, f"stream {handle:#x} used after cuStreamDestroy", handle)
        if not st.ctx.alive(st.gen):
            raise self._crash(call, f"stream {handle:#x} belongs to a destroyed context", handle)
        return st

    def _new_stream(self, flags: int, priority: int, call: str) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        handle = self._handle()
        st = Stream(handle, handle, ctx, ctx.gen, int(flags), max(-5, min(0, int(priority))))
        self._streams[handle] = st
        self._stream_keys[handle] = st
        self._add_live("stream", handle, ctx, call)
        return (SUCCESS, cb.CUstream(handle))

    @api(1)
    def cuStreamCreate(self, Flags: int) -> tuple[Any, ...]:
        if int(Flags) not in (0, 1):
            raise Status(INVALID_VALUE)
        return self._new_stream(Flags, 0, "cuStreamCreate")

    @api(1)
    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> tuple[Any, ...]:
        if int(flags) not in (0, 1):
            raise Status(INVALID_VALUE)
        return self._new_stream(flags, priority, "cuStreamCreateWithPriority")

    @api(0)
    def cuStreamDestroy(self, hStream: Any) -> tuple[Any, ...]:
        handle = h(hStream)
        if handle in (0, 1, 2):
            raise Status(INVALID_HANDLE)
        st = self._stream(hStream, "cuStreamDestroy")
        st.destroyed = True
        self._drop_live(handle, st.ctx)
        return OK

    @api(0, locked=False)
    def cuStreamSynchronize(self, hStream: Any) -> tuple[Any, ...]:
        with self._lock:
            st = self._stream(hStream, "cuStreamSynchronize")
            target = st.last_task
        self._worker.wait(target)
        with self._lock:
            self._retire(st)
            if self._poison is not None:
                return (self._poison,)
        return OK

    @api(0)
    def cuStreamQuery(self, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuStreamQuery")
        if st.last_task > self._worker.done:
            raise Status(R.CUDA_ERROR_NOT_READY)
        self._retire(st)
        return OK

    @api(0)
    def cuStreamWaitEvent(self, hStream: Any, hEvent: Any, Flags: int) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuStreamWaitEvent")
        ev = self._event(hEvent, "cuStreamWaitEvent")
        if ev.stream is not None and ev.stream is not st:
            st.last_task = max(st.last_task, ev.task)
            for key, seq in ev.after.items():
                if st.ordered_after.get(key, 0) < seq:
                    st.ordered_after[key] = seq
        return OK

    @api(1)
    def cuStreamGetFlags(self, hStream: Any) -> tuple[Any, ...]:
        return (SUCCESS, self._stream(hStream, "cuStreamGetFlags").flags)

    @api(1)
    def cuStreamGetPriority(self, hStream: Any) -> tuple[Any, ...]:
        return (SUCCESS, self._stream(hStream, "cuStreamGetPriority").priority)

    @api(1)
    def cuStreamGetCtx(self, hStream: Any) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUcontext(self._stream(hStream, "cuStreamGetCtx").ctx.handle))

    @api(0)
    def cuLaunchHostFunc(self, hStream: Any, fn: Any, userData: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuLaunchHostFunc")
        address = h(fn)
        if address == 0:
            raise Status(INVALID_VALUE)
        data = self._user_data(userData)
        self._enqueue(st, "cuLaunchHostFunc", None, host=lambda: self._call_host_fn(address, data))
        return OK

    # --- events ----------------------------------------------------------------------------------

    def _event(self, value: Any, call: str) -> Event:
        handle = h(value)
        ev = self._events.get(handle)
        if ev is None:
            raise self._crash(call, f"event {handle:#x} was never created by this driver", handle)
        if ev.destroyed:
            raise self._crash(call, f"event {handle:#x} used after cuEventDestroy", handle)
        if not ev.ctx.alive(ev.gen):
            raise self._crash(call, f"event {handle:#x} belongs to a destroyed context", handle)
        return ev

    @api(1)
    def cuEventCreate(self, Flags: int) -> tuple[Any, ...]:
        flags = int(Flags)
        if not event_flags_valid(flags):
            raise Status(INVALID_VALUE)
        ctx = self._require_ctx()
        handle = self._handle()
        self._events[handle] = Event(handle, ctx, ctx.gen, flags)
        self._add_live("event", handle, ctx, "cuEventCreate")
        return (SUCCESS, cb.CUevent(handle))

    @api(0)
    def cuEventRecord(self, hEvent: Any, hStream: Any) -> tuple[Any, ...]:
        ev = self._event(hEvent, "cuEventRecord")
        st = self._stream(hStream, "cuEventRecord")
        if st.ctx is not ev.ctx:
            raise Status(INVALID_HANDLE)
        self._record_event(ev, st, "cuEventRecord")
        return OK

    def _record_event(self, ev: Event, st: Stream, call: str) -> None:
        ev.time = None

        def run() -> None:
            ev.time = time.perf_counter()

        seq = self._enqueue(st, call, run)
        ev.stream = st
        ev.seq = seq
        ev.task = st.last_task
        ev.after = dict(st.ordered_after)
        ev.after[st.key] = seq

    @api(0, locked=False)
    def cuEventSynchronize(self, hEvent: Any) -> tuple[Any, ...]:
        with self._lock:
            ev = self._event(hEvent, "cuEventSynchronize")
            target = ev.task
        self._worker.wait(target)
        with self._lock:
            if ev.stream is not None:
                self._retire(ev.stream, ev.seq)
            if self._poison is not None:
                return (self._poison,)
        return OK

    @api(0)
    def cuEventQuery(self, hEvent: Any) -> tuple[Any, ...]:
        ev = self._event(hEvent, "cuEventQuery")
        if ev.task > self._worker.done:
            raise Status(R.CUDA_ERROR_NOT_READY)
        if ev.stream is not None:
            self._retire(ev.stream, ev.seq)
        return OK

    @api(1)
    def cuEventElapsedTime(self, hStart: Any, hEnd: Any) -> tuple[Any, ...]:
        start = self._event(hStart, "cuEventElapsedTime")
        end = self._event(hEnd, "cuEventElapsedTime")
        if (start.flags | end.flags) & 2 or start.stream is None or end.stream is None:
            raise Status(INVALID_HANDLE)
        if start.time is None or end.time is None:
            raise Status(R.CUDA_ERROR_NOT_READY)
        return (SUCCESS, float((end.time - start.time) * 1000.0))

    @api(0)
    def cuEventDestroy(self, hEvent: Any) -> tuple[Any, ...]:
        ev = self._event(hEvent, "cuEventDestroy")
        ev.destroyed = True
        self._drop_live(ev.handle, ev.ctx)
        return OK
