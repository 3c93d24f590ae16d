"""Sticky faults on a real GPU (contract E5), each scenario in its own process.

Run from the source tree on a machine with a GPU (``scripts/gpu-suite`` does)::

    python scripts/gpu-sticky.py --json sticky.json

Three faulting kernels (an out-of-bounds write, ``__trap()``, a misaligned
access), each with fault attribution on and off:

- on: the faulting ``launch`` itself raises :class:`StickyCUDAError` whose
  ``launch`` names that kernel (not the good kernel launched just before);
- off: the launch succeeds, the next synchronization raises the first
  ``StickyCUDAError``, and every later call (allocate, create a stream,
  synchronize) raises one whose ``first_fault`` names that first fault.

One fault, one report (contract W7): with 60 streams, events and buffers alive,
a kernel writes through a null pointer; the objects are then dropped. cuguard
must give one ``StickyFaultWarning`` for the first refused release and at most
one summary counting the rest (``flood`` scenarios, with attribution on and off;
one keeps five streams alive until exit, where the summary comes). The counts
are printed.

Every process must exit 0 with nothing on stderr. A last scenario measures what
attribution costs per launch of an empty kernel.

``--only flood`` (or any part of a scenario's name) runs only the matching scenarios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(
        [str(p) for p in sorted((ROOT / "packages").glob("*/src"))] + [os.environ.get("PYTHONPATH", "")]
    ),
}

PRELUDE = """
import contextlib, json, sys, time
from cuguard.errors import CUDAError, StickyCUDAError, attribute_faults, first_sticky_fault
from cuguard.resources import Device, LaunchConfig, Program, launch
SOURCE = r'''
extern "C" __global__ void fine(int* p) { p[threadIdx.x] = 1; }
extern "C" __global__ void empty() { }
extern "C" __global__ void out_of_bounds(int* p) { *(volatile int*)((char*)p + (1ll << 40)) = 1; }
extern "C" __global__ void trap(int* p) { __trap(); }
extern "C" __global__ void misaligned(int* p) { *(volatile int*)((char*)p + 1) = 1; }
extern "C" __global__ void null_write(int* p) { *(volatile int*)0 = 1; }
'''
dev = Device(0)
major, minor = dev.compute_capability
module = dev.load_module(Program(SOURCE, options=[f"-arch=sm_{major}{minor}"]).compile("cubin"))
stream = dev.create_stream()
buf = dev.allocate(256)


def seen(action):
    try:
        action()
    except CUDAError as exc:
        return {
            "type": type(exc).__name__,
            "name": exc.name,
            "launch": getattr(exc, "launch", None),
            "first_fault": getattr(exc, "first_fault", None),
        }
    return "ok"
"""

FAULT = """
kernel = sys.argv[1]
attributed = sys.argv[2] == "on"
out = {"kernel": kernel, "attribution": attributed}
with attribute_faults() if attributed else contextlib.nullcontext():
    out["good launch"] = seen(lambda: launch(stream, LaunchConfig(block=32), module.get_kernel("fine"), buf))
    out["faulting launch"] = seen(lambda: launch(stream, LaunchConfig(), module.get_kernel(kernel), buf))
    out["stream sync"] = seen(stream.sync)
    out["allocate"] = seen(lambda: dev.allocate(16))
    out["create stream"] = seen(dev.create_stream)
    out["device sync"] = seen(dev.sync)
out["first sticky fault"] = first_sticky_fault()
later = [out[k] for k in ("allocate", "create stream", "device sync")]
if attributed:
    first = out["faulting launch"]
    ok = isinstance(first, dict) and first["type"] == "StickyCUDAError" and kernel in (first["launch"] or "")
    ok = ok and out["good launch"] == "ok"
else:
    first = out["stream sync"]
    ok = out["faulting launch"] == "ok" and isinstance(first, dict) and first["type"] == "StickyCUDAError"
ok = ok and all(isinstance(x, dict) and x["type"] == "StickyCUDAError" and x["first_fault"] for x in later)
ok = ok and all(kernel in x["first_fault"] for x in later) if attributed else ok
out["ok"] = bool(ok)
print(json.dumps(out))
"""

FLOOD = """
import atexit, gc, warnings
from cuguard.errors import CUDAWarning, StickyFaultWarning, flush_deferred

attributed = sys.argv[1] == "on"
keep = int(sys.argv[2])
out = {"attribution": attributed, "kept until exit": keep}
reports = []
phase = ["during"]
warnings.simplefilter("always")
warnings.showwarning = lambda message, *args, **kwargs: reports.append((phase[0], message))


def count(when):
    mine = [m for p, m in reports if p == when]
    sticky = [m for m in mine if isinstance(m, StickyFaultWarning)]
    return {
        "cuda warnings": sum(isinstance(m, CUDAWarning) for m in mine),
        "first warnings": sum(not m.summary for m in sticky),
        "summaries": [m.leaked for m in sticky if m.summary],
        "first fault": next((m.first_fault for m in sticky), None),
    }


def finish():
    out["at exit"] = count("exit")
    during, at_exit = out["during"], out["at exit"]
    ok = during["first warnings"] == 1 and during["cuda warnings"] == 1 + len(during["summaries"])
    ok = ok and at_exit["first warnings"] == 0 and at_exit["cuda warnings"] == len(at_exit["summaries"])
    ok = ok and len(during["summaries"]) + len(at_exit["summaries"]) <= 1
    ok = ok and (len(at_exit["summaries"]) == 1 if keep else not at_exit["summaries"])
    ok = ok and all(x == "StickyCUDAError" for x in out["closes"])
    if attributed:
        ok = ok and "null_write" in (during["first fault"] or "")
    out["ok"] = bool(ok)
    print(json.dumps(out))


atexit.register(finish)  # before cuguard's own exit hook, so it runs after it
objects = [dev.create_stream() for _ in range(20)] + [dev.create_event() for _ in range(20)]
objects += [dev.allocate(64) for _ in range(20)]
with attribute_faults() if attributed else contextlib.nullcontext():
    out["faulting launch"] = seen(lambda: launch(stream, LaunchConfig(), module.get_kernel("null_write"), buf))
    out["stream sync"] = seen(stream.sync)
out["closes"] = []
for obj in (stream, buf, module):  # explicit closes raise, and warn nothing
    try:
        obj.close()
        out["closes"].append("ok")
    except CUDAError as exc:
        out["closes"].append(type(exc).__name__)
kept = objects[:keep]
del objects
gc.collect()
flush_deferred(30)
out["during"] = count("during")
phase[0] = "exit"
"""

COST = """
kernel = module.get_kernel("empty")
config = LaunchConfig()
def per_launch(n=2000):
    best = None
    for _ in range(3):
        stream.sync()
        t0 = time.perf_counter()
        for _ in range(n):
            launch(stream, config, kernel)
        stream.sync()
        dt = (time.perf_counter() - t0) / n
        best = dt if best is None else min(best, dt)
    return best * 1e6
off = per_launch()
with attribute_faults():
    on = per_launch()
print(json.dumps({"launch_us_attribution_off": off, "launch_us_attribution_on": on, "ok": True}))
"""


def run(name: str, code: str, *args: str) -> dict[str, object]:
    program = textwrap.dedent(PRELUDE) + textwrap.dedent(code)
    proc = subprocess.run(
        [sys.executable, "-c", program, *args], env=ENV, capture_output=True, text=True, timeout=120, check=False
    )
    result: dict[str, object] = {"scenario": name, "exit_code": proc.returncode}
    try:
        result.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        result["ok"] = False
    if proc.returncode != 0 or proc.stderr.strip():
        result["ok"] = False
        result["stderr"] = proc.stderr.strip()[-1500:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--only", default="", help="run only the scenarios whose name contains this")
    args = parser.parse_args()
    scenarios: list[tuple[str, str, tuple[str, ...]]] = [
        (f"{kernel}, attribution {mode}", FAULT, (kernel, mode))
        for kernel in ("out_of_bounds", "trap", "misaligned")
        for mode in ("on", "off")
    ]
    scenarios += [
        ("flood of 60 objects, attribution on", FLOOD, ("on", "0")),
        ("flood of 60 objects, attribution off", FLOOD, ("off", "0")),
        ("flood of 60 objects, 5 kept until exit", FLOOD, ("off", "5")),
        ("attribution cost", COST, ()),
    ]
    results = [run(name, code, *argv) for name, code, argv in scenarios if args.only in name]
    for r in results:
        detail = {k: v for k, v in r.items() if k not in ("scenario", "stderr")}
        print(f"{'ok  ' if r.get('ok') else 'FAIL'} {r['scenario']}: {json.dumps(detail)}")
        if "stderr" in r:
            print(textwrap.indent(str(r["stderr"]), "    "))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
