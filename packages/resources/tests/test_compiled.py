"""The compiled build (``cuguard.resources._native``): used only under the real driver, off and on at will, end to end.

The compiled path itself runs against a no-op driver library (``stub/libcuda_stub.c``, built here
with the C compiler) under the real cuda-bindings, in a subprocess (``compiled_scenario.py --stub``).
In the pure-Python build the tests that need the compiled calls skip; ``CUGUARD_REQUIRE_COMPILED=1``
(the nox sessions of the compiled build set it) makes them fail instead. Contract clauses: the
compiled calls change no behaviour (G1, G2, G6 and O5 hold in both builds, the same tests run on
both), and a failure they return is raised as on the Python path (E1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import cuguard.resources
from cuguard.resources import _fast
from cuguard.resources.lowlevel import compiled_status, follow_compiled, use_compiled

HERE = Path(__file__).resolve().parent
REQUIRED = os.environ.get("CUGUARD_REQUIRE_COMPILED") == "1"


def _need_compiled() -> None:
    if not cuguard.resources.compiled:
        if REQUIRED:
            pytest.fail(f"the compiled build is required here: {compiled_status()}")
        pytest.skip(f"the pure-Python build: {compiled_status()}")


def test_the_flag_and_the_status_agree() -> None:
    """``compiled`` is the build running; the status is "on" exactly while its calls are in use."""
    text = compiled_status()
    assert isinstance(text, str)
    assert text
    assert isinstance(cuguard.resources.compiled, bool)
    assert (text == "on") == cuguard.resources.compiled
    if REQUIRED:
        assert text == "on"


def test_listeners_hear_use_compiled_off_and_on() -> None:
    """Hot modules follow ``use_compiled``: ``None`` while off, the calls again while on (real driver only)."""
    heard: list[Any] = []
    follow_compiled(heard.append)
    try:
        assert use_compiled(False) is False
        assert "use_compiled(False)" in compiled_status() or not cuguard.resources.compiled
        assert use_compiled(True) is cuguard.resources.compiled
    finally:
        use_compiled(True)
    if not cuguard.resources.compiled:
        assert heard == []  # the pure-Python build has nothing to follow
        return
    # What a listener hears also depends on the seam's routing: the calls only while the real driver is direct.
    assert None in heard
    assert len(heard) >= 3


def test_simulated_driver_takes_the_python_path() -> None:
    """Under the simulator every call reaches it (the compiled functions are never used)."""
    _need_compiled()
    from cuguard.resources import Device
    from cuguard.testing import record_calls, simulated_driver

    assert _fast._calls is not None
    seen: list[object] = []
    follow_compiled(seen.append)  # what every hot module is given, from now on
    with simulated_driver(), record_calls() as calls:
        inside = list(seen)
        dev = Device(0)
        dev.set_current()
        with dev.create_stream() as stream, dev.create_event() as event:
            event.record(stream)
            event.query()
    assert inside
    assert inside[-1] is None  # the hot modules hold no compiled calls under the simulator
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


def run_scenario_on_the_stub(folder: Path) -> subprocess.CompletedProcess[str]:
    """``compiled_scenario.py --stub`` in a subprocess, the no-op driver library on its library path."""
    _build_stub(folder)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(folder), env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    env.pop("CUGUARD_DRIVER", None)
    env.pop(_fast.PURE_VARIABLE, None)
    return subprocess.run(
        [sys.executable, str(HERE / "compiled_scenario.py"), "--stub"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.skipif(sys.platform != "linux", reason="the no-op driver library is built for Linux")
def test_compiled_path_on_the_no_op_driver(tmp_path: Path) -> None:
    """Every hot operation through its compiled function, the switch, faults, failures, the capture refusal."""
    _need_compiled()
    result = run_scenario_on_the_stub(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"failures": []' in result.stdout


def test_off_by_the_environment_variable() -> None:
    """``CUGUARD_PURE_PYTHON=1`` at import: the pure-Python path, and the status says so."""
    code = "import cuguard.resources as r, cuguard.resources.lowlevel as l; print(r.compiled, '|', l.compiled_status())"
    env = dict(os.environ, CUGUARD_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("False |"), out
    assert "CUGUARD_PURE_PYTHON" in out


def test_an_extension_older_than_the_python_side_stays_off() -> None:
    """An extension that lacks a call the Python side uses is named stale: the compiled calls stay off."""
    old = types.ModuleType("cuguard.resources._native")

    class Calls:  # an older extension: one call only
        def event_create(self, context: int, flags: int) -> tuple[int, int]:
            return (0, 0)

    old.Calls = Calls  # type: ignore[attr-defined]
    old.setup = lambda *args: []  # type: ignore[attr-defined]
    missing = _fast.stale(old)
    assert "CALLS" in missing
    assert "event_destroy" in missing
    assert "event_create" not in missing
    assert "setup" not in missing
    if _fast.loaded:  # the extension built from this source lacks nothing
        from cuguard.resources import _native  # type: ignore[attr-defined, unused-ignore]

        assert _fast.stale(_native) == []


def test_compiled_copies_refuse_bad_host_buffers_before_the_driver() -> None:
    """A host buffer shorter than the copy, or a read-only one to copy into, raises before any driver call."""
    _need_compiled()
    from cuguard.resources import _native  # type: ignore[attr-defined, unused-ignore]

    with pytest.raises(ValueError, match="the copy needs 4"):
        _native.CALLS.memcpy_htod_async(1, bytearray(2), 4, 0)
    with pytest.raises(BufferError):
        _native.CALLS.memcpy_dtoh_async(bytes(4), 1, 4, 0)
    with pytest.raises(TypeError):
        _native.CALLS.memcpy_htod_async(1, object(), 4, 0)
    untyped: Any = _native.CALLS.memcpy_htod
    with pytest.raises(TypeError):
        untyped(0, 1, bytearray(4))  # three arguments, four needed
    with pytest.raises(TypeError, match="driver handle or an int"):
        _native.CALLS.graph_launch("not a handle", 0)
    with pytest.raises(OverflowError):
        _native.CALLS.launch(0, 2**32, 1, 1, 1, 1, 1, 0, 0, 0)  # a grid dimension beyond 32 bits


def test_an_error_the_bindings_raise_is_not_a_status() -> None:
    """When cuda-bindings' entry point raises (no driver library here), the compiled call raises it too.

    With a driver library present the call reaches the driver, which refuses a NULL event: a failed status.
    """
    _need_compiled()
    from cuguard.resources import _native  # type: ignore[attr-defined, unused-ignore]

    outcome: object
    try:
        outcome = _native.CALLS.event_query(0)
    except Exception as exc:  # noqa: BLE001 - whichever error the bindings' loader raises
        outcome = exc
    assert not isinstance(outcome, SystemError), outcome  # a status returned with an exception set would be one
    if not isinstance(outcome, Exception):
        assert isinstance(outcome, int)
        assert outcome != 0


def _import_over_pure(module: str, source: str, imported: str) -> str:
    """Import ``imported`` in a new interpreter where ``module`` is its pure-Python source (``source``, a file
    of the package ``module`` lives in); what ``ImportError`` said (``refused: ...``), else nothing."""
    package = module.rpartition(".")[0]
    code = (
        "import importlib, importlib.machinery, importlib.util, pathlib, sys\n"
        "import cuguard\n"
        f"package = importlib.machinery.PathFinder.find_spec({package!r}, cuguard.__path__)\n"
        f"source = pathlib.Path(package.submodule_search_locations[0]) / {source!r}\n"
        "class PureSource:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        f"        if name == {module!r}:\n"
        "            return importlib.util.spec_from_file_location(name, source)\n"
        "        return None\n"
        "sys.meta_path.insert(0, PureSource)\n"
        f"loaded = importlib.import_module({module!r})\n"
        "assert loaded.__file__.endswith('.py'), 'the pure module did not load'\n"
        "try:\n"
        f"    importlib.import_module({imported!r})\n"
        "except ImportError as exc:\n"
        "    print('refused:', exc)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def _require_compiled(module: Any) -> None:
    if module.__file__ is None or module.__file__.endswith(".py"):
        if REQUIRED:
            pytest.fail(f"the compiled build is required here, but {module.__name__} is pure Python")
        pytest.skip(f"the pure-Python build of {module.__name__}: nothing to refuse")


def test_compiled_classes_refuse_the_pure_owners() -> None:
    """The compiled classes derive from the compiled ``Owned``: over the pure-Python one they refuse to load (O1).

    A mixed install (a compiled layer over the pure-Python errors layer) would lay the compiled
    classes out on a base of another layout; importing it raises ``ImportError`` instead, naming the
    first compiled layer that meets it (the context layer's ``Context`` derives from ``Unique``).
    """
    from cuguard.resources import _base

    _require_compiled(_base)
    out = _import_over_pure("cuguard.errors.owners", "owners.py", "cuguard.resources")
    assert out.startswith("refused: cuguard-"), out
    assert "is the compiled build but cuguard-errors is the pure-Python one" in out, out


def test_compiled_resources_refuse_the_pure_context() -> None:
    """The compiled resources read the compiled ``Context``'s fields as C slots: over the pure-Python
    context layer they refuse to load, naming it (O1)."""
    from cuguard.resources import _base

    _require_compiled(_base)
    out = _import_over_pure("cuguard.context.contexts", "contexts.py", "cuguard.resources")
    assert out.startswith(
        "refused: cuguard-resources is the compiled build but cuguard-context is the pure-Python one"
    ), out
