"""Ownership checks (contract O1, O2, O5) on a real GPU, each scenario in its own process.

Run from the source tree on a machine with a GPU (``scripts/gpu-suite`` does)::

    python scripts/gpu-ownership.py --json ownership.json

Scenarios (each a subprocess, so that a crash is counted rather than fatal):

- ``copy_and_close_both``: ``copy.copy``/``deepcopy``/``pickle`` of a Stream, Event,
  Buffer, PinnedBuffer and created Context are refused, then the originals close;
  the process must exit 0 (before O1 the real driver crashed here).
- ``set_current_then_raw_alloc``: ``Device(0).set_current()`` on a temporary device,
  then a raw ``cuMemAlloc`` through cuda-bindings in the same thread must succeed
  (before O2 it returned CUDA_ERROR_CONTEXT_IS_DESTROYED).
- ``host_function_drops_last_reference``: a host function holds the last references
  to a stream and a buffer; after the work is done they are released on cuguard's
  release thread, with no warning and nothing leaked (O5).
- ``temporary_device_calls``: ``Device(0).allocate(256)`` and ``Device(0).create_stream()``
  through a temporary device make exactly the driver calls they make through a held device
  (``record_calls``), with no primary-context retain or release and no context creation (O2).

Prints one line per scenario and writes the results as JSON. Exits 1 when a
scenario failed.
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

SCENARIOS: dict[str, str] = {
    "copy_and_close_both": """
        import copy, json, pickle
        from cuguard.context import Context
        from cuguard.resources import Device
        dev = Device(0)
        objects = {
            "Stream": dev.create_stream(),
            "Event": dev.create_event(),
            "Buffer": dev.allocate(256),
            "Buffer(stream-ordered)": None,
            "PinnedBuffer": dev.allocate_pinned(256),
            "Context": Context.create(0),
        }
        objects["Buffer(stream-ordered)"] = dev.allocate(256, stream=objects["Stream"])
        refused = {}
        for name, obj in objects.items():
            outcomes = []
            for how in (copy.copy, copy.deepcopy, pickle.dumps):
                try:
                    how(obj)
                    outcomes.append("copied")
                except TypeError:
                    outcomes.append("TypeError")
            refused[name] = outcomes
        for name in ("Buffer(stream-ordered)", "Buffer", "PinnedBuffer", "Event", "Stream", "Context"):
            objects[name].close()
            objects[name].close()
        print(json.dumps({"refused": refused, "ok": all(o == ["TypeError"] * 3 for o in refused.values())}))
    """,
    "set_current_then_raw_alloc": """
        import json
        from cuda.bindings import driver as cb
        from cuguard.resources import Device
        Device(0).set_current()
        import gc; gc.collect()
        err, ptr = cb.cuMemAlloc(256)
        name = cb.cuGetErrorName(err)[1].decode()
        if not err:
            cb.cuMemFree(ptr)
        err2, ctx = cb.cuCtxGetCurrent()
        err3, api = cb.cuCtxGetApiVersion(ctx)
        print(json.dumps({"cuMemAlloc": name, "current_usable": not err3, "ok": not err and not err3}))
    """,
    "host_function_drops_last_reference": """
        import gc, json, warnings
        warnings.simplefilter("error")
        from cuguard.errors import flush_deferred
        from cuguard.resources import Device
        from cuguard.testing import record_calls
        dev = Device(0)
        gate = dev.create_stream()
        with record_calls() as calls:
            s = dev.create_stream()
            b = dev.allocate(1 << 20, stream=s)
            b.fill(1, stream=s)
            held = [s, b]
            s.launch_host_func(lambda: held.clear())
            del s, b
            for _ in range(3):
                gate.sync()
                dev.sync()
                gc.collect()
                flush_deferred()
        names = [c.name for c in calls]
        failed = [(c.name, c.status) for c in calls if c.status]
        print(json.dumps({
            "stream_destroyed": names.count("cuStreamDestroy") == 1,
            "memory_freed": names.count("cuMemFreeAsync") + names.count("cuMemFree") == 1,
            "failed_calls": failed,
            "ok": names.count("cuStreamDestroy") == 1 and not failed,
        }))
    """,
    "temporary_device_calls": """
        import gc, json
        from cuguard.resources import Device
        from cuguard.testing import record_calls
        held = Device(0)
        held.allocate(256).close()
        def calls(fn):
            with record_calls() as made:
                fn()
                gc.collect()
            return [c.name for c in made]
        results = {}
        for name, with_held, temporary in (
            ("allocate", lambda: held.allocate(256).close(), lambda: Device(0).allocate(256).close()),
            ("create_stream", lambda: held.create_stream().close(), lambda: Device(0).create_stream().close()),
        ):
            results[name + "_held"] = calls(with_held)
            results[name + "_temporary"] = calls(temporary)
        same = all(results[n + "_held"] == results[n + "_temporary"] for n in ("allocate", "create_stream"))
        made = [c for n in ("allocate", "create_stream") for c in results[n + "_temporary"]]
        results["ok"] = same and not any("PrimaryCtx" in c or c.startswith("cuCtxCreate") for c in made)
        print(json.dumps(results))
    """,
}


def run(name: str, code: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=ENV, capture_output=True, text=True, timeout=300, check=False
    )
    result: dict[str, object] = {"scenario": name, "exit_code": proc.returncode}
    lines = proc.stdout.strip().splitlines()
    try:
        result.update(json.loads(lines[-1]))
    except (IndexError, json.JSONDecodeError):
        result["ok"] = False
    if proc.returncode != 0:
        result["ok"] = False
    if proc.stderr.strip():
        result["stderr"] = proc.stderr.strip()[-2000:]
        result["ok"] = False
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    results = [run(name, code) for name, code in SCENARIOS.items()]
    for r in results:
        detail = {k: v for k, v in r.items() if k not in ("scenario", "stderr")}
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['scenario']}: {json.dumps(detail)}")
        if "stderr" in r:
            print(textwrap.indent(str(r["stderr"]), "    "))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
