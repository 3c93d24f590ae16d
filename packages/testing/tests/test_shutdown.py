"""Interpreter shutdown with cuguard objects alive until its very end (S1).

Each program installs a simulated driver without ever uninstalling it, makes streams,
events, memory, a created context and graphs (one launched, one in the created context),
leaves work in flight, and hands every object to a keeper that the interpreter clears only
late in finalization: an attribute of ``sys``, a custom ``sys.unraisablehook`` object,
``builtins``, a module put in ``sys.modules``, a reference cycle hanging from ``sys``. The
process must exit with the program's own status and print nothing (no ``Exception ignored
in ... __del__``). Each variant runs several times, in its own interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("cuguard.graphs")  # the programs use every layer

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
ENV.pop("PYTHONWARNINGS", None)

RUNS = 3

_OBJECTS = textwrap.dedent(
    """
    import sys
    import time

    from cuguard.context import Context
    from cuguard.graphs import GraphDefinition
    from cuguard.resources import Device
    from cuguard.testing import simulated_driver

    cm = simulated_driver()
    sim = cm.__enter__()  # never exited
    dev = Device(0)
    stream = dev.create_stream()
    event = dev.create_event()
    buf = dev.allocate(4096)
    ordered = dev.allocate(1024, stream=stream)
    pinned = dev.allocate_pinned(64)
    view = pinned.numpy()
    ctx = Context.create(0)
    g = GraphDefinition(dev)
    g.memset(buf, 0)
    graph = g.instantiate()
    graph.launch(stream)
    in_ctx = GraphDefinition(ctx)
    in_ctx.empty()
    in_ctx_graph = in_ctx.instantiate()
    event.record(stream)
    stream.launch_host_func(lambda: time.sleep(0.05))
    keep = [dev, stream, event, buf, ordered, pinned, view, ctx, g, graph, in_ctx, in_ctx_graph]
    del dev, stream, event, buf, ordered, pinned, view, ctx, g, graph, in_ctx, in_ctx_graph
    """
)

_KEEPERS = {
    "sys attribute": "sys.keep = keep",
    "unraisablehook object": textwrap.dedent(
        """
        class Hook:
            def __call__(self, args):
                sys.__unraisablehook__(args)

        hook = Hook()
        hook.keep = keep
        sys.unraisablehook = hook
        del hook
        """
    ),
    "builtins": "import builtins\nbuiltins.keep = keep",
    "late module": textwrap.dedent(
        """
        import types
        late = types.ModuleType("zz_cuguard_keeper")
        late.keep = keep
        sys.modules["zz_cuguard_keeper"] = late
        del late
        """
    ),
    "cycle on sys": "cycle = {'keep': keep}\ncycle['self'] = cycle\nsys.keep = cycle\ndel cycle",
    "main module globals": "",
}


def _program(keeper: str, status: int = 0) -> str:
    drop = "" if not keeper else "del keep\n"
    end = f"raise SystemExit({status})\n" if status else ""
    return _OBJECTS + keeper + "\n" + drop + end


# A program that hangs dumps every thread's stack and exits after this long, so a failure says where.
_WATCHDOG = "import faulthandler\nfaulthandler.dump_traceback_later(90, exit=True)\n"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WATCHDOG + code], env=ENV, capture_output=True, text=True, timeout=120, check=False
    )


def _run_many(code: str, runs: int = RUNS) -> list[subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=runs) as pool:
        return list(pool.map(lambda _: _run(code), range(runs)))


@pytest.mark.contract("S1")
@pytest.mark.parametrize("keeper", list(_KEEPERS))
def test_objects_alive_until_the_end_of_finalization_exit_silently(keeper: str) -> None:
    results = _run_many(_program(_KEEPERS[keeper]))
    bad = [(r.returncode, r.stdout, r.stderr) for r in results if r.returncode or r.stdout or r.stderr]
    assert bad == []


@pytest.mark.contract("S1")
@pytest.mark.parametrize("keeper", ["sys attribute", "unraisablehook object"])
def test_exit_status_is_the_programs_own(keeper: str) -> None:
    results = _run_many(_program(_KEEPERS[keeper], status=3))
    assert [(r.returncode, r.stdout, r.stderr) for r in results] == [(3, "", "")] * RUNS


@pytest.mark.contract("S1")
def test_exit_with_a_fault_proxy_installed_and_objects_kept_late_is_silent() -> None:
    """A fault plan entered and never exited: the proxy over the simulator is installed at exit."""
    code = _program(
        "from cuguard.testing import inject\n"
        "plan = inject('cuStreamDestroy', 201, every=True)\n"
        "plan.__enter__()\n" + _KEEPERS["unraisablehook object"]
    )
    results = _run_many(code)
    bad = [(r.returncode, r.stdout, r.stderr) for r in results if r.returncode or r.stdout or r.stderr]
    assert bad == []


@pytest.mark.contract("S1")
def test_the_programs_do_run_to_their_end() -> None:
    """Guard against a vacuous pass: the same program, printing at its end, prints only that."""
    results = _run_many(_program(_KEEPERS["sys attribute"]) + "print('end', len(sys.keep))\n", runs=1)
    assert [(r.returncode, r.stdout, r.stderr) for r in results] == [(0, "end 12\n", "")]
