"""Whole-process behaviour: sticky faults and interpreter exit (E4, S1, S2).

Each scenario runs in its own interpreter. The sticky-fault test needs a real
GPU; the exit test runs on the simulator too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import KERNELS_CU

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

STICKY = textwrap.dedent(
    """
    from cuguard.errors import CUDAError
    from cuguard.resources import Device, LaunchConfig, Program, launch
    dev = Device(0)
    major, minor = dev.compute_capability
    image = Program(SOURCE, options=[f"-arch=sm_{major}{minor}"]).compile("cubin")
    kernel = dev.load_module(image).get_kernel("poke")
    stream = dev.create_stream()
    launch(stream, LaunchConfig(), kernel, 16)
    try:
        stream.sync()
    except CUDAError as exc:
        print("first", exc.name, exc.is_sticky)
    else:
        print("first none")
    for what, action in [("stream", dev.create_stream), ("alloc", lambda: dev.allocate(16)), ("sync", dev.sync)]:
        try:
            action()
        except CUDAError as exc:
            print("later", what, exc.name, exc.is_sticky)
        else:
            print("later", what, "succeeded")
    """
)

EXIT_REAL = textwrap.dedent(
    """
    import time
    from cuguard.resources import Device
    dev = Device(0)
    streams = [dev.create_stream() for _ in range(3)]
    events = [dev.create_event() for _ in range(3)]
    buffers = [dev.allocate(1024, stream=streams[0]), dev.allocate(4096)]
    pinned = dev.allocate_pinned(4096)
    view = pinned.numpy()
    events[0].record(streams[1])
    streams[2].launch_host_func(lambda: time.sleep(0.05))
    """
)

EXIT_SIM = "from cuguard.testing import simulated_driver\ncm = simulated_driver()\nsim = cm.__enter__()\n" + EXIT_REAL


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.real_only
@pytest.mark.contract("E4", "S2")
def test_sticky_fault_raises_everywhere_and_process_exits_normally(cuguard_driver: object) -> None:
    result = _run(f"SOURCE = {KERNELS_CU!r}\n" + STICKY)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "first CUDA_ERROR_ILLEGAL_ADDRESS True"
    assert lines[1:] == [f"later {what} CUDA_ERROR_ILLEGAL_ADDRESS True" for what in ("stream", "alloc", "sync")]


@pytest.mark.real_only
@pytest.mark.contract("S1", "S2")
def test_exit_with_live_resources_is_clean_100_times(cuguard_driver: object) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: _run(EXIT_REAL), range(100)))
    bad = [(r.returncode, r.stdout, r.stderr) for r in results if r.returncode or r.stdout or r.stderr]
    assert bad == []


@pytest.mark.contract("S1")
def test_exit_with_live_resources_on_the_simulator_is_clean() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: _run(EXIT_SIM), range(10)))
    bad = [(r.returncode, r.stdout, r.stderr) for r in results if r.returncode or r.stdout or r.stderr]
    assert bad == []
