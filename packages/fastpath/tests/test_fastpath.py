"""cuguard.fastpath: on only under the real driver, off and on at will, and the compiled path end to end.

The compiled path itself runs against a no-op driver library (``stub/libcuda_stub.c``, built here
with the C compiler) under the real cuda-bindings, in a subprocess (``scenario.py --stub``).
``CUGUARD_FASTPATH_REQUIRED=1`` (the nox session sets it) makes a fast path that is off a failure
instead of a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from cuguard import fastpath

HERE = Path(__file__).resolve().parent
REQUIRED = os.environ.get("CUGUARD_FASTPATH_REQUIRED") == "1"


def _need_on() -> None:
    if not fastpath.enabled():
        if REQUIRED:
            pytest.fail(f"the fast path is off: {fastpath.status()}")
        pytest.skip(f"the fast path is off: {fastpath.status()}")


def test_version_matches_the_distribution() -> None:
    project = tomllib.loads((HERE.parent / "pyproject.toml").read_text("utf-8"))["project"]
    assert project["version"] == fastpath.__version__


def test_status_says_on_or_why_not() -> None:
    text = fastpath.status()
    assert isinstance(text, str)
    assert text
    assert (text == "on") == fastpath.enabled()
    if REQUIRED:
        assert text == "on"


def test_listeners_hear_disable_and_enable() -> None:
    heard: list[Any] = []
    fastpath.attach(heard.append)
    was_on = fastpath.enabled()
    try:
        fastpath.disable()
        assert not fastpath.enabled()
        assert "disable()" in fastpath.status() or not was_on
        on = fastpath.enable()
        assert on == was_on
    finally:
        fastpath.enable()
    assert heard[1] is None
    assert (heard[0] is None) == (not was_on)
    assert (heard[2] is None) == (not was_on)


def test_simulated_driver_takes_the_python_path() -> None:
    """Under the simulator every call reaches it (the compiled functions are never used)."""
    _need_on()
    from cuguard.resources import Device
    from cuguard.testing import record_calls, simulated_driver

    ops = fastpath._ops
    assert ops is not None
    used: list[str] = []
    names = ("event_create", "event_destroy", "stream_create", "stream_destroy", "event_record", "event_query")
    originals = {name: getattr(ops, name) for name in names}

    def spy(name: str) -> Any:
        def call(*args: Any) -> Any:
            used.append(name)
            return originals[name](*args)

        return call

    for name in names:
        setattr(ops, name, spy(name))
    try:
        with simulated_driver(), record_calls() as calls:
            dev = Device(0)
            dev.set_current()
            with dev.create_stream() as stream, dev.create_event() as event:
                event.record(stream)
                event.query()
    finally:
        for name, fn in originals.items():
            setattr(ops, name, fn)
    assert used == []
    made = [call.name for call in calls]
    for name in ("cuStreamCreate", "cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventDestroy"):
        assert name in made


def _build_stub(folder: Path) -> Path:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        if REQUIRED:
            pytest.fail("no C compiler to build the no-op driver library")
        pytest.skip("no C compiler to build the no-op driver library")
    out = folder / "libcuda.so.1"
    source = str(HERE / "stub" / "libcuda_stub.c")
    flags = ["-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"]
    subprocess.run([compiler, *flags, source, "-o", str(out)], check=True)
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="the no-op driver library is built for Linux")
def test_compiled_path_on_the_no_op_driver(tmp_path: Path) -> None:
    """Every hot operation through its compiled function, the switch, faults and failures (scenario.py)."""
    _need_on()
    _build_stub(tmp_path)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(tmp_path), env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    env.pop("CUGUARD_DRIVER", None)
    env.pop(fastpath.VARIABLE, None)
    result = subprocess.run(
        [sys.executable, str(HERE / "scenario.py"), "--stub"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"failures": []' in result.stdout


def test_off_by_the_environment_variable() -> None:
    """``CUGUARD_FASTPATH=0`` at import keeps it off, and says so."""
    code = "import cuguard.fastpath as f; print(f.enabled(), '|', f.status())"
    env = dict(os.environ, CUGUARD_FASTPATH="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("False |")
    if REQUIRED:
        assert "CUGUARD_FASTPATH" in out


def test_an_extension_older_than_the_python_side_stays_off() -> None:
    """An extension that lacks a function the Python side uses is off, and the status says to rebuild it."""
    pytest.importorskip("cuda.bindings.cydriver")
    code = (
        "import sys, types\n"
        "from cuguard import fastpath\n"
        "old = types.ModuleType('cuguard.fastpath._native')\n"
        "for name in fastpath.COMPILED[:-1]:\n"
        "    setattr(old, name, lambda *a: 0)\n"
        "old.setup = lambda *a: []\n"
        "sys.modules['cuguard.fastpath._native'] = old\n"
        "print(fastpath.enabled(), '|', fastpath.status())\n"
    )
    env = dict(os.environ)
    env.pop(fastpath.VARIABLE, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("False |"), out
    assert fastpath.COMPILED[-1] in out
    assert "rebuild" in out


def test_compiled_copies_refuse_bad_host_buffers_before_the_driver() -> None:
    """A host buffer shorter than the copy, or a read-only one to copy into, raises before any driver call."""
    _need_on()
    from cuguard.fastpath import _native

    with pytest.raises(ValueError, match="the copy needs 4"):
        _native.memcpy_htod_async(1, bytearray(2), 4, 0)
    with pytest.raises(BufferError):
        _native.memcpy_dtoh_async(bytes(4), 1, 4, 0)
    with pytest.raises(TypeError):
        _native.memcpy_htod_async(1, object(), 4, 0)
    untyped: Any = _native.memcpy_htod
    with pytest.raises(TypeError):
        untyped(0, 1, bytearray(4))  # three arguments, four needed
    with pytest.raises(TypeError, match="driver handle or an int"):
        _native.graph_launch("not a handle", 0)


def test_an_error_the_bindings_raise_is_not_a_status() -> None:
    """When cuda-bindings' entry point raises (no driver library here), the compiled call raises it too.

    With a driver library present the call reaches the driver, which refuses a NULL event: a failed status.
    """
    _need_on()
    from cuguard.fastpath import _native

    outcome: object
    try:
        outcome = _native.event_query(0)
    except Exception as exc:  # noqa: BLE001 - whichever error the bindings' loader raises
        outcome = exc
    assert not isinstance(outcome, SystemError), outcome  # a status returned with an exception set would be one
    if not isinstance(outcome, Exception):
        assert isinstance(outcome, int)
        assert outcome != 0
