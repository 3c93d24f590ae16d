"""The compiled build on the real cuda-bindings: every hot operation, its failures, and its limits.

Run as a program, under the real driver (a GPU) or the no-op driver library of
``stub/`` (``--stub``, with its folder on ``LD_LIBRARY_PATH``)::

    python packages/resources/tests/compiled_scenario.py [--stub] [--out result.json]

Checks, and prints as JSON (exit status 1 when a check fails):

- the compiled calls are in use, and each hot operation (stream, event, record,
  query, stream-ordered alloc/free, launch, copies, and with the graphs layer
  installed the empty graph node, instantiate, graph launch and destroy) went
  through its compiled function, counted by wrapping the functions the layers use;
- a stream-ordered allocation on a stream that may be capturing asks the driver
  inside the compiled call and is refused while a capture is active (``--stub``:
  the library answers "capturing"); a stream cuguard made and never handed out
  is not asked;
- the switch path: with another context current, ``create_event`` creates in
  the device's context and restores the caller's (G2);
- a fault plan over the real driver (``inject``) sees the call: the compiled
  function is not used, the injected failure is raised, nothing is left (G1);
- with ``--stub``: a driver failure returned to any compiled function (every
  create, destroy, free, record, query, copy, launch and graph call it makes) is
  raised as ``CUDAError`` with the right call and code; a failed create leaves
  nothing, a failed destroy or free leaks its object, closed for use;
- with ``--stub``: the switch path's failures (the switch, the create, the
  restore) are handled as ``call_switched``'s;
- a switched create made while the caller's context was destroyed on another
  thread leaves no context current instead of switching back to it (S2);
- ``use_compiled(False)`` sends every operation back to Python, ``use_compiled(True)``
  brings the compiled calls back.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PTX = ".version 7.8\n.target sm_{cc}\n.address_size 64\n\n.visible .entry empty()\n{{\n\tret;\n}}\n"


class _Counts:
    """The compiled calls made so far in this process (the extension counts them): ``counts[name]``, ``now()``."""

    def __init__(self, ops: Any, names: tuple[str, ...]) -> None:
        self._ops = ops
        self._names = names

    def now(self) -> dict[str, int]:
        made = self._ops.counts()
        return {name: made[name] for name in self._names}

    def __getitem__(self, name: str) -> int:
        return self.now()[name]

    def __repr__(self) -> str:
        return repr(self.now())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stub", action="store_true", help="the driver is the no-op library of stub/")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from cuguard.context import Context
    from cuguard.errors import CUDAError, driver
    from cuguard.errors.lowlevel import on_route_change
    from cuguard.resources import Device, LaunchConfig, _fast, launch
    from cuguard.resources.lowlevel import compiled_status, use_compiled

    try:
        from cuguard.graphs import GraphDefinition, flush_deferred, pending_payloads
    except ImportError:  # the resources layer alone: its own hot operations only
        graphs = False
    else:
        graphs = True

        def _released() -> bool:
            """Whether every graph payload was released (waits up to 30 s for CUDA's callbacks, the release thread)."""
            deadline = time.monotonic() + 30
            while pending_payloads() and time.monotonic() < deadline:
                flush_deferred(timeout=1.0)
            return not pending_payloads()

    # Set while every seam call goes straight to the real bindings (the compiled calls are used only then).
    direct = threading.Event()
    on_route_change(lambda on: direct.set() if on else direct.clear())
    used = tuple(name for name in _fast.COMPILED_FUNCTIONS if graphs or not name.startswith("graph_"))

    report: dict[str, Any] = {"status": compiled_status(), "stub": args.stub, "graphs": graphs, "checks": {}}
    report["failures"] = []
    checks: dict[str, Any] = report["checks"]

    def check(name: str, ok: bool, detail: object = None) -> None:
        checks[name] = "ok" if ok else f"FAILED: {detail}"
        if not ok:
            report["failures"].append(name)

    def refused(name: str, attempt: Callable[[], object], kind: type[Exception], ok: Callable[[Any], bool]) -> None:
        """Check that ``attempt()`` raises ``kind`` and that ``ok(the exception)`` holds."""
        try:
            attempt()
        except kind as exc:
            check(name, ok(exc), exc)
        else:
            check(name, False, "no error")

    if compiled_status() != "on":
        check("compiled calls in use", False, compiled_status())
        return _finish(report, args.out)

    ops = _fast._calls
    assert ops is not None
    counts = _Counts(ops, used)

    stub = ctypes.CDLL("libcuda.so.1") if args.stub else None

    def live() -> int | None:
        return int(stub.stub_live()) if stub is not None else None

    dev = Device(0)
    dev.set_current()
    before = live()
    major, minor = dev.compute_capability
    module = dev.load_module(PTX.format(cc=f"{major}{minor}").encode())
    kernel = module.get_kernel("empty")

    # --- every hot operation, compiled ---
    stream = dev.create_stream()
    event = dev.create_event()
    event.record(stream)
    done = event.query()
    buf = dev.allocate(256, stream=stream)
    # The compiled build keeps the handles it makes as ints; `handle` gives the bindings' types.
    kinds = {name: type(made.handle).__name__ for name, made in (("stream", stream), ("event", event), ("buffer", buf))}
    wanted = {"stream": "CUstream", "event": "CUevent", "buffer": "CUdeviceptr"}
    check("handles are the bindings' types", kinds == wanted, kinds)
    check("a buffer's ptr is its handle's address", buf.ptr == int(buf.handle), (buf.ptr, int(buf.handle)))
    buf.close()
    launch(stream, LaunchConfig(grid=1, block=1), kernel)
    if graphs:
        definition = GraphDefinition()
        first = node = definition.empty()
        for _ in range(15):
            node = node.join()
        nodes = len(definition.nodes)  # keys the fresh nodes: each Node once
        # The compiled builder keeps a node's address; its CUgraphNode is made when asked for, and the driver
        # agrees on the edges between such nodes.
        node_handle = first.handle
        check(
            "a compiled node's handle is a CUgraphNode of its address",
            type(node_handle).__name__ == "CUgraphNode" and int(node_handle) == first._int,
            (type(node_handle).__name__, int(node_handle), first._int),
        )
        if stub is None:  # (the no-op driver keeps no edges)
            successors = [n.type for n in first.succ]
            check("a compiled node's successor is read back from the driver", successors == ["empty"], successors)
        exe = definition.instantiate()
        exe.launch(stream)
        stream.sync()
        exe_handle_type = type(exe.handle).__name__
        exe.close()
        definition.close()
        check("graph lists its 16 nodes", nodes == 16, nodes)
        check("an executable graph's handle is a CUgraphExec", exe_handle_type == "CUgraphExec", exe_handle_type)
        # CUDA drops the graph's user object on a thread of its own, whenever it chooses; while that
        # callback runs, every call goes through the seam (O5) and the copies below would not be compiled.
        if stub is None:  # (the no-op driver never calls a user object's destructor)
            check("the graph's release delivered", _released(), pending_payloads())
        check("calls go straight to the driver again", direct.wait(30))
    device_buf = dev.allocate(16)
    pinned = dev.allocate_pinned(16)
    host = bytearray(16)
    device_buf.copy_from(pinned, stream=stream)
    device_buf.copy_from(host, stream=stream)
    device_buf.copy_to(pinned, stream=stream)
    device_buf.copy_to(host, stream=stream)
    device_buf.copy_from(pinned)
    device_buf.copy_from(bytes(16))
    device_buf.copy_to(pinned)
    device_buf.copy_to(host)
    stream.sync()
    event.close()
    stream.close()
    unused = {k: v for k, v in counts.now().items() if not v and not k.endswith("_switched")}  # the switch: below
    check("every hot operation compiled", not unused, unused)
    check("event query answered", done in (True, False), done)
    if stub is not None:
        copies = int(stub.stub_copies())
        check("eight copies reached the driver", copies == 8, copies)

    # --- a real capture (no stub): the compiled allocation asks, and refuses while it is active (G6) ---
    if stub is None:
        captured = dev.create_stream()
        raw = captured.handle  # handed out: the allocation must ask the driver from now on
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        (err,) = driver.cuStreamBeginCapture(raw, mode)
        check("a raw capture began", err == 0, err)
        calls_before = counts["mem_alloc_async"]
        refused(
            "an allocation on a capturing stream is refused in the compiled call",
            lambda: dev.allocate(64, stream=captured),
            RuntimeError,
            lambda exc: "being captured" in str(exc) and counts["mem_alloc_async"] == calls_before + 1,
        )
        err, graph = driver.cuStreamEndCapture(raw)
        check("the capture ended valid (nothing was queued into it)", err == 0, err)
        if err == 0:
            driver.cuGraphDestroy(graph)
        dev.allocate(64, stream=captured).close()  # after the capture: allocates
        captured.close()

    # --- the switch path (G2): another context current ---
    other = Context.create(0)
    previous = other.set_current()
    try:
        e2 = dev.create_event()
        now = Context.current()
        check("switch restores the caller's context", now == other, now)
        check("switched event in the device's context", e2.context == dev.context, e2.context)
        e2.close()
        s5 = dev.create_stream()
        check("switched stream in the device's context", s5.context == dev.context, s5.context)
        check("switched stream restores the caller's context", Context.current() == other, Context.current())
        s5.close()
        made = counts["event_create_switched"], counts["stream_create_switched"]
        check("switched creates made in one compiled call each", made == (1, 1), made)
        # The synchronous copy and the instantiate need the device's context: switched in, then restored.
        seen = counts.now()
        device_buf.copy_from(pinned)
        device_buf.copy_to(host)
        check("switched copies restore the caller's context", Context.current() == other, Context.current())
        check("switched calls asked the compiled functions first", counts["memcpy_htod"] > seen["memcpy_htod"], counts)
        if graphs:
            switched = GraphDefinition()
            switched.empty()
            exe2 = switched.instantiate()
            check("switched instantiate restores the caller's context", Context.current() == other, Context.current())
            check("switched instantiate asked first", counts["graph_instantiate"] > seen["graph_instantiate"], counts)
            exe2.close()
            switched.close()
    finally:
        dev.set_current()
        other.close()
        del previous

    # --- the switch path's failures, in one compiled call (stub only): handled as call_switched's (C1, C2, G1) ---
    if stub is not None:
        other = Context.create(0)
        previous = other.set_current()
        try:
            for kind, make in (("event", dev.create_event), ("stream", dev.create_stream)):
                call = "cuEventCreate" if kind == "event" else "cuStreamCreate"
                n = live()
                stub.stub_fail(b"cuCtxSetCurrent", 1)  # the switch in: nothing runs
                refused(
                    f"switched {kind}: a refused switch raises, nothing made, the caller's context kept",
                    make,
                    CUDAError,
                    lambda exc, n=n: exc.call == "cuCtxSetCurrent" and live() == n and Context.current() == other,
                )
                stub.stub_fail(call.encode(), 2)  # the create: raised after the restore
                refused(
                    f"switched {kind}: a refused create raises after the restore, nothing made",
                    make,
                    CUDAError,
                    lambda exc, n=n, call=call: exc.call == call and live() == n and Context.current() == other,
                )
                stub.stub_fail_later(b"cuCtxSetCurrent", 1, 1)  # the restore: the new object undone (C2)
                refused(
                    f"switched {kind}: a refused restore undoes the {kind} and raises",
                    make,
                    CUDAError,
                    lambda exc, n=n: "cuCtxSetCurrent" in str(exc) and live() == n,
                )
                other.set_current()
        finally:
            dev.set_current()
            other.close()
            del previous

    # --- S2 on the compiled switch path: a created context closed on another thread stays current here (the
    # driver pops it off the destroying thread's stack only); a switched create never switches back to it and
    # leaves no context current. (The real driver crashes when a destroyed context is made current, so only
    # the no-op library makes it current again for a second create.) ---
    doomed = Context.create(0)
    doomed.set_current()
    doomed_address = int(doomed.handle)  # (a closed context refuses its handle)
    closer = threading.Thread(target=doomed.close)
    closer.start()
    closer.join()
    seen = counts.now()
    kinds = (("event", dev.create_event), ("stream", dev.create_stream))
    for kind, make in kinds if stub is not None else kinds[:1]:
        made = make()
        err, now = driver.cuCtxGetCurrent()
        check(
            f"switched {kind} after the caller's context was destroyed elsewhere: no context current (S2)",
            not err and int(now) == 0,
            (err, int(now)),
        )
        made.close()
        if stub is not None:
            stub.cuCtxSetCurrent(ctypes.c_void_p(doomed_address))  # current here again, as the driver left it
    switched = counts["event_create_switched"] - seen["event_create_switched"]
    switched += counts["stream_create_switched"] - seen["stream_create_switched"]
    check("those switched creates were compiled", switched == (2 if stub is not None else 1), counts)
    dev.set_current()

    # --- a fault plan over the real driver sees the call (Python path) ---
    from cuguard.testing import inject

    seen = counts.now()
    with inject("cuEventCreate", 2):
        refused(
            "inject raises through the Python path",
            dev.create_event,
            CUDAError,
            lambda exc: exc.code == 2 and exc.call == "cuEventCreate",
        )
    check("no compiled call under the fault plan", counts["event_create"] == seen["event_create"], counts)

    # --- a failure returned to the compiled function is raised (stub only) ---
    if stub is not None:
        s2 = dev.create_stream()
        e3 = dev.create_event()
        s_leaked = dev.create_stream()
        buf_leaked = dev.allocate(64, stream=s2)
        # Each failure a compiled function returns is raised with the call's name and code; a failed
        # create leaves nothing, a failed destroy or free leaks its object (closed for use).
        attempts: tuple[tuple[str, int, Callable[[], object], Callable[[], bool]], ...] = (
            ("cuEventCreate", 2, dev.create_event, lambda: True),
            ("cuStreamCreate", 2, dev.create_stream, lambda: True),
            ("cuMemAllocAsync", 2, lambda: dev.allocate(64, stream=s2), lambda: True),
            ("cuEventRecord", 1, lambda: e3.record(s2), lambda: True),
            ("cuEventQuery", 1, e3.query, lambda: not e3.closed),
            ("cuLaunchKernel", 1, lambda: launch(s2, LaunchConfig(grid=1, block=1), kernel), lambda: True),
            ("cuEventDestroy", 1, e3.close, lambda: e3.closed),
            ("cuStreamDestroy", 1, s_leaked.close, lambda: s_leaked.closed),
            ("cuMemFreeAsync", 1, buf_leaked.close, lambda: buf_leaked.closed),
            ("cuMemcpyHtoDAsync", 1, lambda: device_buf.copy_from(pinned, stream=s2), lambda: True),
            ("cuMemcpyDtoHAsync", 1, lambda: device_buf.copy_to(host, stream=s2), lambda: True),
            ("cuMemcpyHtoD", 2, lambda: device_buf.copy_from(pinned), lambda: True),
            ("cuMemcpyDtoH", 2, lambda: device_buf.copy_to(host), lambda: True),
            ("cuCtxGetCurrent", 201, lambda: device_buf.copy_from(pinned), lambda: True),
            ("cuStreamSynchronize", 999, s2.sync, lambda: True),
        )
        for call, code, attempt, after in attempts:
            stub.stub_fail(call.encode(), code)
            n = live()
            leaked = call in {"cuEventDestroy", "cuStreamDestroy", "cuMemFreeAsync"}
            refused(
                f"{call} failure raised" + (", its object leaked" if leaked else ", nothing left"),
                attempt,
                CUDAError,
                lambda exc, call=call, code=code, n=n, after=after: (
                    exc.code == code and exc.call == call and live() == n and after()
                ),
            )
        # The capture check inside the compiled allocation (G6): asked only for a stream that may be capturing.
        s4 = dev.create_stream()
        queries = int(stub.stub_capture_queries())
        dev.allocate(64, stream=s4).close()
        check("a stream never handed out is not asked", int(stub.stub_capture_queries()) == queries, queries)
        _ = s4.handle  # handed out: someone else may capture it now
        stub.stub_capturing(1)
        n = live()
        calls_before = counts["mem_alloc_async"]
        refused(
            "an allocation on a capturing stream is refused in the compiled call, nothing made",
            lambda: dev.allocate(64, stream=s4),
            RuntimeError,
            lambda exc: "being captured" in str(exc) and live() == n and counts["mem_alloc_async"] == calls_before + 1,
        )
        stub.stub_capturing(0)
        stub.stub_fail(b"cuStreamIsCapturing", 2)
        refused(
            "a refused capture query raised, nothing made",
            lambda: dev.allocate(64, stream=s4),
            CUDAError,
            lambda exc: exc.call == "cuStreamIsCapturing" and live() == n,
        )
        s4.close()
        if graphs:
            failing = GraphDefinition()
            nodes = int(stub.stub_live_nodes())
            stub.stub_fail(b"cuGraphAddEmptyNode", 1)
            refused(
                "cuGraphAddEmptyNode failure raised, no node made",
                failing.empty,
                CUDAError,
                lambda exc: exc.call == "cuGraphAddEmptyNode" and int(stub.stub_live_nodes()) == nodes,
            )
            failing.empty()
            n = live()
            stub.stub_fail(b"cuGraphInstantiate", 2)
            refused(
                "cuGraphInstantiate failure raised, nothing made",
                failing.instantiate,
                CUDAError,
                lambda exc: exc.call == "cuGraphInstantiate" and live() == n,
            )
            exe3 = failing.instantiate()
            stub.stub_fail(b"cuGraphLaunch", 1)
            refused("cuGraphLaunch failure raised", lambda: exe3.launch(s2), CUDAError, lambda exc: exc.code == 1)
            exe3.launch(s2)  # still usable
            mode = "cuThreadExchangeStreamCaptureMode"
            stub.stub_fail(mode.encode(), 1)
            refused(
                "a refused switch to relaxed mode raised, nothing destroyed",
                exe3.close,
                CUDAError,
                lambda exc: exc.call == mode and not exe3.closed and int(stub.stub_capture_mode()) == 0,
            )
            exe3.launch(s2)  # still usable
            stub.stub_fail(b"cuGraphExecDestroy", 1)
            refused(
                "cuGraphExecDestroy failure raised, graph leaked, the thread's mode restored",
                exe3.close,
                CUDAError,
                lambda exc: exc.call == "cuGraphExecDestroy" and exe3.closed and int(stub.stub_capture_mode()) == 0,
            )
            exe4 = failing.instantiate()
            n = live()
            stub.stub_fail_later(mode.encode(), 1, 1)  # the restore
            refused(
                "a refused restore after the destroy raised, the thread stays relaxed",
                exe4.close,
                CUDAError,
                lambda exc: (
                    exc.call == mode
                    and "relaxed" in str(exc)
                    and exe4.closed
                    and live() == n - 1
                    and int(stub.stub_capture_mode()) == 2
                ),
            )
            global_mode = ctypes.c_int(0)
            stub.cuThreadExchangeStreamCaptureMode(ctypes.byref(global_mode))  # the thread's mode back
            failing.close()
        s2.close()

    device_buf.close()
    pinned.close()

    # --- use_compiled(False): Python again ---
    use_compiled(False)
    seen = counts.now()
    with dev.create_stream() as s3, dev.create_event() as e4:
        e4.record(s3)
        e4.query()
    check("use_compiled(False) sends every call to Python", counts.now() == seen, counts)
    check("use_compiled(True) turns it on again", use_compiled(True) and compiled_status() == "on", compiled_status())
    with dev.create_event():
        pass
    check("compiled again after use_compiled(True)", counts["event_create"] > seen["event_create"], counts)

    module.close()
    report["compiled_calls"] = counts.now()
    report["driver"] = repr(driver)
    if stub is not None:
        # One event, one stream, one stream-ordered allocation and (with graphs) one executable graph were
        # leaked on purpose above (their destroys or frees failed).
        leaked = 4 if graphs else 3
        check("nothing else left behind", live() == (before or 0) + leaked, (before, live()))
    return _finish(report, args.out)


def _finish(report: dict[str, Any], out: Path | None) -> int:
    text = json.dumps(report, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
