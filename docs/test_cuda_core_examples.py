"""Run each program of ``examples/cuda_core/`` on the simulated driver, as CI does.

Each program is run unchanged, with the environment a reader without a GPU
would set: ``CUGUARD_DRIVER=sim``, two simulated devices, and the examples'
stand-ins module named in ``CUGUARD_SIM_STAND_INS``. It must exit with status
0, write nothing to stderr and say ``ok`` (each program checks its own
results). The two-device program is also run with one device, where it must
skip itself cleanly. On a GPU, ``build/gpu/examples.sh`` runs them without the
simulator. The programs compile their kernels with NVRTC: the ``docs`` nox
session installs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "cuda_core"
PROGRAMS = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))
_TIMEOUT = 120


def _run(program: str, devices: int) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(CUGUARD_DRIVER="sim", CUGUARD_SIM_DEVICES=str(devices), CUGUARD_SIM_STAND_INS="_standins")
    return subprocess.run(
        [sys.executable, program], cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=_TIMEOUT, check=False
    )


def test_the_six_programs_are_there() -> None:
    assert PROGRAMS == [
        "device_properties.py",
        "dlpack_view.py",
        "graph_capture.py",
        "pinned_staging.py",
        "saxpy_cubin.py",
        "two_devices.py",
    ]


@pytest.mark.parametrize("program", PROGRAMS)
def test_program_runs_on_the_simulator(program: str) -> None:
    result = _run(program, devices=2)
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, f"examples/cuda_core/{program} failed (exit status {result.returncode})\n{output}"
    assert result.stderr == "", f"examples/cuda_core/{program} wrote to stderr\n{output}"
    assert result.stdout.rstrip().endswith(": ok"), output


def test_the_two_device_program_skips_itself_with_one_device() -> None:
    result = _run("two_devices.py", devices=1)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert "needs two CUDA devices; skipped" in result.stdout
