"""How far pure Python can bring cuguard's overhead: a measured prototype (issue 8).

Not cuguard code. For the operations that miss their targets, this times, in one
process and interleaved like ``overhead.py``:

- ``raw``: raw cuda-bindings (as in overhead.py);
- ``floor``: raw plus the one ``cuCtxGetCurrent`` that contract C1/G2 makes
  unavoidable for a call that must run in the device's context (the least a
  context-checking wrapper can cost through the Python bindings);
- ``cuguard``: cuguard as it is;
- ``lean``: a flattened pure-Python fast path keeping every check cuguard makes
  on success (context current? closed context? closed stream? status checked,
  object published before return, ``__del__`` safety net) but with no helper
  frames: no ``call_in``/op/undo indirection, no ``_release`` tuple, no
  properties, driver functions through the same seam (``driver.cuXxx``);
  the slow paths (switch needed, errors) would fall back to today's code;
- ``lean_bound``: the same with the driver functions bound once (what a seam
  that pushes bound functions into the hot modules on ``install_driver`` would give).

Usage: ``python benchmarks/fastpath_probe.py --out probe.json`` on the GPU machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead
from overhead import Env, Operation, Variant, _build, _fail, measure


class LeanContextError(RuntimeError):
    pass


class _LeanResource:
    __slots__ = ("__weakref__", "_closed", "_context", "_device", "_handle", "_owned", "_stream")

    def __del__(self) -> None:
        try:
            closed = self._closed
        except AttributeError:
            return
        if closed or sys.is_finalizing():
            return
        self._closed = True  # a real implementation reports/releases here (W1)


def _lean_ops(env: Env, bound: bool) -> dict[str, Any]:
    """The lean fast paths, driver functions via the seam or bound once."""
    from cuguard.errors import driver, raise_status

    ctx = env.ctx
    ordinal = env.dev.ordinal
    new = object.__new__

    if bound:
        get, s_create, s_destroy = driver.cuCtxGetCurrent, driver.cuStreamCreate, driver.cuStreamDestroy
        e_create, e_destroy = driver.cuEventCreate, driver.cuEventDestroy
        m_alloc, m_free = driver.cuMemAllocAsync, driver.cuMemFreeAsync
        launch_kernel, ev_record, ev_query = driver.cuLaunchKernel, driver.cuEventRecord, driver.cuEventQuery
        seam: Any = None
    else:
        seam = driver

    def _current_is(context: Any) -> bool:
        if context._closed:
            raise LeanContextError("closed")
        err, previous = get() if bound else seam.cuCtxGetCurrent()
        if err:
            raise_status(err, "cuCtxGetCurrent")
        return int(previous) == context._int

    class Stream(_LeanResource):
        __slots__ = ()

        def close(self) -> None:
            if self._closed:
                return
            self._closed = True
            if self._owned:
                if self._context._closed:
                    raise RuntimeError("leaked")
                (err,) = s_destroy(self._handle) if bound else seam.cuStreamDestroy(self._handle)
                if err:
                    raise_status(err, "cuStreamDestroy")

    class Event(_LeanResource):
        __slots__ = ()

        def close(self) -> None:
            if self._closed:
                return
            self._closed = True
            if self._owned:
                if self._context._closed:
                    raise RuntimeError("leaked")
                (err,) = e_destroy(self._handle) if bound else seam.cuEventDestroy(self._handle)
                if err:
                    raise_status(err, "cuEventDestroy")

        def record(self, stream: Any) -> None:
            if self._closed or stream._closed:
                raise RuntimeError("closed")
            (err,) = (
                ev_record(self._handle, stream._handle) if bound else seam.cuEventRecord(self._handle, stream._handle)
            )
            if err:
                raise_status(err, "cuEventRecord")

        def query(self) -> bool:
            if self._closed:
                raise RuntimeError("closed")
            (err,) = ev_query(self._handle) if bound else seam.cuEventQuery(self._handle)
            if not err:
                return True
            if int(err) == 600:
                return False
            raise_status(err, "cuEventQuery")
            return False

    class Buffer(_LeanResource):
        __slots__ = ()

        def close(self) -> None:
            if self._closed:
                return
            self._closed = True
            stream = self._stream
            if stream is not None and not stream._closed:
                (err,) = (
                    m_free(self._handle, stream._handle) if bound else seam.cuMemFreeAsync(self._handle, stream._handle)
                )
                if err:
                    raise_status(err, "cuMemFreeAsync")
                return
            raise NotImplementedError("slow path: today's code")

    def create_stream() -> Stream:
        if not _current_is(ctx):
            raise NotImplementedError("slow path: call_in")
        err, handle = s_create(0) if bound else seam.cuStreamCreate(0)
        if err:
            raise_status(err, "cuStreamCreate")
        self = new(Stream)
        self._handle, self._context, self._owned, self._closed, self._device = handle, ctx, True, False, ordinal
        return self

    def create_event() -> Event:
        if not _current_is(ctx):
            raise NotImplementedError("slow path: call_in")
        err, handle = e_create(2) if bound else seam.cuEventCreate(2)
        if err:
            raise_status(err, "cuEventCreate")
        self = new(Event)
        self._handle, self._context, self._owned, self._closed, self._device = handle, ctx, True, False, ordinal
        return self

    def allocate(size: int, stream: Stream) -> Buffer:
        if type(size) is not int or size < 0:
            raise TypeError("size")
        if type(stream) is not Stream or stream._closed:
            raise TypeError("stream")
        if not _current_is(ctx):
            raise NotImplementedError("slow path: call_in")
        err, ptr = m_alloc(size, stream._handle) if bound else seam.cuMemAllocAsync(size, stream._handle)
        if err:
            raise_status(err, "cuMemAllocAsync")
        self = new(Buffer)
        self._handle, self._context, self._owned, self._closed, self._device = ptr, ctx, True, False, ordinal
        self._stream = stream
        return self

    def launch(stream: Stream, dims: tuple[int, ...], shared: int, function: Any, module: Any) -> None:
        if stream._closed or module._closed:
            raise RuntimeError("closed")
        gx, gy, gz, bx, by, bz = dims
        (err,) = (
            launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream._handle, 0, 0)
            if bound
            else seam.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, stream._handle, 0, 0)
        )
        if err:
            raise_status(err, "cuLaunchKernel")

    return {
        "create_stream": create_stream,
        "create_event": create_event,
        "allocate": allocate,
        "launch": launch,
        "Stream": Stream,
    }


def _fns(env: Env) -> dict[str, dict[str, Any]]:
    return {"lean": _lean_ops(env, bound=False), "lean_bound": _lean_ops(env, bound=True)}


def op_stream(env: Env, lean: dict[str, dict[str, Any]]) -> Operation:
    base = overhead.op_stream(env)
    D = env.D

    def floor() -> Variant:
        get, create, destroy = D.cuCtxGetCurrent, D.cuStreamCreate, D.cuStreamDestroy
        ctx_int = env.ctx._int

        def fn() -> None:
            err, previous = get()
            if err or int(previous) != ctx_int:
                _fail(err, "cuCtxGetCurrent")
            err, h = create(0)
            if err:
                _fail(err, "cuStreamCreate")
            (err,) = destroy(h)
            if err:
                _fail(err, "cuStreamDestroy")

        return Variant(fn)

    variants = {"raw": base.variants["raw"], "floor": _build("floor", floor), "cuguard": base.variants["cuguard"]}
    for name, ops in lean.items():
        create = ops["create_stream"]

        def make(create: Any = create) -> Variant:
            return Variant(lambda: create().close())

        variants[name] = _build(name, make)
    base.variants = variants
    return base


def op_event(env: Env, lean: dict[str, dict[str, Any]]) -> Operation:
    base = overhead.op_event(env)
    D = env.D

    def floor() -> Variant:
        get, create, destroy = D.cuCtxGetCurrent, D.cuEventCreate, D.cuEventDestroy
        ctx_int = env.ctx._int

        def fn() -> None:
            err, previous = get()
            if err or int(previous) != ctx_int:
                _fail(err, "cuCtxGetCurrent")
            err, h = create(2)
            if err:
                _fail(err, "cuEventCreate")
            (err,) = destroy(h)
            if err:
                _fail(err, "cuEventDestroy")

        return Variant(fn)

    variants = {"raw": base.variants["raw"], "floor": _build("floor", floor), "cuguard": base.variants["cuguard"]}
    variants["cuda_core"] = base.variants["cuda_core"]
    for name, ops in lean.items():
        create = ops["create_event"]

        def make(create: Any = create) -> Variant:
            return Variant(lambda: create().close())

        variants[name] = _build(name, make)
    base.variants = variants
    return base


def op_alloc(env: Env, lean: dict[str, dict[str, Any]]) -> Operation:
    base = overhead.op_alloc(env)
    D = env.D

    def floor() -> Variant:
        get, alloc, free, hs = D.cuCtxGetCurrent, D.cuMemAllocAsync, D.cuMemFreeAsync, env.hstream
        ctx_int = env.ctx._int

        def fn() -> None:
            err, previous = get()
            if err or int(previous) != ctx_int:
                _fail(err, "cuCtxGetCurrent")
            err, p = alloc(256, hs)
            if err:
                _fail(err, "cuMemAllocAsync")
            (err,) = free(p, hs)
            if err:
                _fail(err, "cuMemFreeAsync")

        return Variant(fn, after=env.sync)

    variants = {"raw": base.variants["raw"], "floor": _build("floor", floor), "cuguard": base.variants["cuguard"]}
    variants["cuda_core"] = base.variants["cuda_core"]
    for name, ops in lean.items():
        allocate = ops["allocate"]
        stream = ops["Stream"].__new__(ops["Stream"])
        stream._handle, stream._context, stream._owned, stream._closed = env.hstream, env.ctx, False, False

        def make(allocate: Any = allocate, stream: Any = stream) -> Variant:
            return Variant(lambda: allocate(256, stream).close(), after=env.sync)

        variants[name] = _build(name, make)
    base.variants = variants
    return base


def op_launch(env: Env, lean: dict[str, dict[str, Any]]) -> Operation:
    base = overhead.op_launch(env)
    variants = {k: base.variants[k] for k in ("raw", "cuguard", "cuda_core")}
    for name, ops in lean.items():
        launch = ops["launch"]
        stream = ops["Stream"].__new__(ops["Stream"])
        stream._handle, stream._context, stream._owned, stream._closed = env.hstream, env.ctx, False, False

        def make(launch: Any = launch, stream: Any = stream) -> Variant:
            module = env.dev.load_module(overhead._kernel_image(env)[0])
            kernel = module.get_kernel("empty")
            dims = (1, 1, 1, 1, 1, 1)

            def cleanup() -> None:
                env.sync()
                module.close()

            return Variant(lambda: launch(stream, dims, 0, kernel.handle, module), after=env.sync, cleanup=cleanup)

        variants[name] = _build(name, make)
    base.variants = variants
    return base


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--target-ms", type=float, default=25.0)
    parser.add_argument("--driver", choices=("real", "sim"), default="real")
    args = parser.parse_args()
    with overhead._driver(args.driver) as raw:
        return run(args, raw)


def run(args: argparse.Namespace, raw: Any) -> int:
    env = Env(raw, simulated=args.driver == "sim")
    lean = _fns(env)
    results: dict[str, Any] = {}
    for builder in (op_stream, op_event, op_alloc, op_launch):
        op = builder(env, lean)
        print(f"measuring {op.name} ...", file=sys.stderr, flush=True)
        results[op.name] = measure(op, args.repeats, int(args.target_ms * 1e6))
    machine, versions = overhead.describe(env)
    env.close()
    report = {
        "benchmark": "pure-Python fast-path probe (issue 8); lean* are prototypes, not cuguard code",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "versions": versions,
        "operations": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    kinds = ("raw", "floor", "cuguard", "lean", "lean_bound", "cuda_core")
    print("operation".ljust(22) + "".join(k.rjust(12) for k in kinds))
    for name, r in results.items():
        cells = []
        for k in kinds:
            ns = r.get(f"{k}_ns")
            ratio = r.get(f"{k}_ratio")
            cells.append("-".rjust(12) if ns is None else (f"{ns:,.0f}" + (f"/{ratio:.2f}" if ratio else "")).rjust(12))
        print(name.ljust(22) + "".join(cells))
        for key, note in (r.get("notes") or {}).items():
            print(f"    {key}: {str(note)[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
