"""Shared fixtures of the cuguard-errors tests.

Each test names the contract clauses it proves with ``@pytest.mark.contract("E1", ...)``
(see CONTRACT.md). cuguard-testing's pytest plugin registers that marker; until it is
installed this file registers it, and it stays out of the way once the plugin is there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import cuguard.errors

_SRC = Path(cuguard.errors.__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    registered = any(line.split("(")[0].split(":")[0].strip() == "contract" for line in config.getini("markers"))
    plugin_loaded = any(config.pluginmanager.has_plugin(name) for name in ("cuguard", "cuguard.testing.plugin"))
    if not registered and not plugin_loaded:
        config.addinivalue_line("markers", "contract(*ids): the contract clauses (E1..B5) this test proves")


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONDEVMODE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_SRC), env.get("PYTHONPATH")]))
    return env


RunPython = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def child_env() -> dict[str, str]:
    """Environment for a child interpreter: it can import cuguard.errors, no warning options."""
    return _child_env()


@pytest.fixture
def run_python(tmp_path: Path) -> RunPython:
    """Run a Python script in a fresh interpreter that can import cuguard.errors.

    Returns the completed process; stdout and stderr are text.
    """

    def run(source: str, *args: str) -> subprocess.CompletedProcess[str]:
        script = tmp_path / "script.py"
        script.write_text(textwrap.dedent(source), "utf-8")
        return subprocess.run(
            [sys.executable, str(script), *args],
            capture_output=True,
            text=True,
            env=_child_env(),
            cwd=tmp_path,
            timeout=120,
            check=False,
        )

    return run


@pytest.fixture
def run_json(run_python: RunPython) -> Callable[..., Any]:
    """Run a script whose last stdout line is JSON; return that value (the script must exit 0)."""

    def run(source: str, *args: str) -> Any:
        done = run_python(source, *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run
