"""The helpers every layer uses: check (E1, E3), add_failure_note (G4), report and
call_unraisable (W1-W4), silence at shutdown (S1), internal_error (S2)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from cuda.bindings import driver as cu
from cuda.bindings import runtime as cudart

from cuguard.errors import (
    CUDAError,
    CUDAWarning,
    add_failure_note,
    call_unraisable,
    check,
    format_handle,
    internal_error,
    raise_status,
    report,
    report_error,
    report_warning,
)

INVALID_CONTEXT = cu.CUresult.CUDA_ERROR_INVALID_CONTEXT
DEINITIALIZED = cu.CUresult.CUDA_ERROR_DEINITIALIZED
HANDLE = 0x55D0C1A2B3C0
W1_EXAMPLE = "cuStreamDestroy(0x55d0c1a2b3c0) failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context"


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every call of ``sys.unraisablehook`` during the test (the previous hook comes back after)."""
    calls: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", calls.append)
    return calls


@pytest.fixture
def escalated() -> Iterator[None]:
    """CUDAWarning escalated to an error, as a user would do it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=CUDAWarning)
        yield


def _cuda_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)]


# check / raise_status: E1, E3 ----------------------------------------------------------------


@pytest.mark.contract("E1")
@pytest.mark.parametrize("success", [0, cu.CUresult.CUDA_SUCCESS, cudart.cudaError_t.cudaSuccess])
def test_check_returns_none_on_success(success: object) -> None:
    assert check(success, "cuTest") is None


@pytest.mark.contract("E1")
def test_check_raises_cuda_error_for_a_failure() -> None:
    with pytest.raises(CUDAError) as caught:
        check(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, "cuMemAllocAsync")
    assert str(caught.value) == "cuMemAllocAsync failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    with pytest.raises(CUDAError) as runtime:
        check(cudart.cudaError_t.cudaErrorInvalidValue, "cudaMemcpy")
    assert runtime.value.name == "cudaErrorInvalidValue"
    with pytest.raises(CUDAError, match=r"^cuCtxSetCurrent failed: CUDA_ERROR_INVALID_CONTEXT: .*; detail$") as raised:
        raise_status(201, "cuCtxSetCurrent", "detail")
    assert raised.value.code == 201


@pytest.mark.contract("E3")
@pytest.mark.parametrize("bad", [None, "x", "0", True, False, 1.5, 0.0, [], cu.CUstream(0)])
def test_check_rejects_what_is_not_a_status(bad: object) -> None:
    with pytest.raises(TypeError):
        check(bad, "cuTest")


# add_failure_note: G4, W4 ----------------------------------------------------------------------


def _operation_whose_restore_also_fails() -> None:
    """The pattern of every cuguard call: undo/restore while the operation's error propagates."""
    try:
        raise ValueError("the operation failed")
    except ValueError as exc:
        try:
            check(INVALID_CONTEXT, "cuCtxSetCurrent")
        except CUDAError as failure:
            add_failure_note(exc, failure)
        raise


@pytest.mark.contract("G4")
def test_a_cleanup_failure_becomes_a_note_on_the_propagating_exception() -> None:
    with pytest.raises(ValueError, match="the operation failed") as caught:
        _operation_whose_restore_also_fails()
    notes = caught.value.__notes__
    assert len(notes) == 1
    assert "cuCtxSetCurrent failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context" in notes[0]


@pytest.mark.contract("G4")
def test_a_failed_status_becomes_a_note_naming_call_handle_and_error() -> None:
    exc = CUDAError(2, "cuMemAllocAsync")
    add_failure_note(exc, INVALID_CONTEXT, "cuStreamDestroy", HANDLE)
    [note] = exc.__notes__
    assert W1_EXAMPLE in note
    assert str(exc) == "cuMemAllocAsync failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory"


@pytest.mark.contract("G4")
def test_a_cuda_error_note_names_the_handle_when_given() -> None:
    exc = RuntimeError("primary")
    add_failure_note(exc, CUDAError(400, "cuEventDestroy"), handle=0xABC)
    [note] = exc.__notes__
    assert "cuEventDestroy failed: CUDA_ERROR_INVALID_HANDLE" in note
    assert "0xabc" in note


@pytest.mark.contract("G4")
def test_any_exception_of_a_cleanup_step_becomes_a_note() -> None:
    exc = CUDAError(2, "cuMemAllocAsync")
    add_failure_note(exc, KeyError("stream 7"))
    add_failure_note(exc, internal_error("undo registered twice"))
    assert len(exc.__notes__) == 2
    assert "KeyError" in exc.__notes__[0]
    assert "stream 7" in exc.__notes__[0]
    assert "internal cuguard error, please report: undo registered twice" in exc.__notes__[1]


@pytest.mark.contract("G4", "W4")
@pytest.mark.parametrize("failure", [DEINITIALIZED, 4, CUDAError(DEINITIALIZED, "cuStreamDestroy")])
def test_deinitialized_is_never_attached(failure: object) -> None:
    exc = ValueError("primary")
    add_failure_note(exc, failure, "cuStreamDestroy", HANDLE)
    assert not hasattr(exc, "__notes__")


@pytest.mark.contract("G4")
@pytest.mark.parametrize("bad", [None, "x", 1.5, object()])
def test_add_failure_note_never_raises_even_for_a_bad_failure_value(bad: object) -> None:
    exc = ValueError("primary")
    add_failure_note(exc, bad, "cuStreamDestroy", HANDLE)
    [note] = exc.__notes__
    assert "cuStreamDestroy" in note
    assert "internal cuguard error, please report" in note


# report: W1, W2 ------------------------------------------------------------------------------


@pytest.mark.contract("W1")
def test_cuda_warning_is_a_runtime_warning() -> None:
    assert issubclass(CUDAWarning, RuntimeWarning)
    assert not issubclass(CUDAWarning, CUDAError)


@pytest.mark.contract("W1")
def test_report_names_call_handle_error_and_description() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report(INVALID_CONTEXT, "cuStreamDestroy", HANDLE)
    assert len(caught) == 1
    assert caught[0].category is CUDAWarning
    assert str(caught[0].message) == W1_EXAMPLE
    # The warning points at the code that reported, not into cuguard.errors.
    assert Path(caught[0].filename).resolve() == Path(__file__).resolve()


@pytest.mark.contract("W1")
def test_report_renders_driver_handle_objects_and_detail() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report(INVALID_CONTEXT, "cuStreamDestroy", cu.CUstream(0x1234))
        report(INVALID_CONTEXT, "cuMemFreeAsync", cu.CUdeviceptr(0xABC0), detail="leaked 4096 bytes")
        report(INVALID_CONTEXT, "cuCtxSynchronize")
    assert _cuda_warnings(caught) == [
        "cuStreamDestroy(0x1234) failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context",
        "cuMemFreeAsync(0xabc0) failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context; leaked 4096 bytes",
        "cuCtxSynchronize failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context",
    ]
    assert format_handle(None) == "NULL"
    assert format_handle(0) == "0x0"


@pytest.mark.contract("W1")
def test_report_error_reports_a_caught_exception() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report_error(CUDAError(INVALID_CONTEXT, "cuStreamDestroy"), HANDLE)
        report_error(internal_error("double release"), HANDLE, detail="leaked")
    assert _cuda_warnings(caught) == [
        W1_EXAMPLE,
        "0x55d0c1a2b3c0: internal cuguard error, please report: double release; leaked",
    ]


@pytest.mark.contract("W1")
def test_report_is_shown_under_the_interpreters_default_filters(run_json: Callable[..., Any]) -> None:
    shown = run_json(
        """
        import json, warnings
        from cuguard.errors import report
        with warnings.catch_warnings(record=True) as caught:  # keeps the interpreter's default filters
            report(201, "cuStreamDestroy", 0x10)
        print(json.dumps([(w.category.__name__, str(w.message)) for w in caught]))
        """
    )
    assert shown == [
        ["CUDAWarning", "cuStreamDestroy(0x10) failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context"]
    ]


@pytest.mark.contract("W2")
def test_independent_failures_give_independent_warnings() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's default: once per message and location
        for handle in (0x1000, 0x2000, 0x1000):
            report(INVALID_CONTEXT, "cuStreamDestroy", handle)
    # Both handles are shown although they were reported from the same line; the registry
    # collapses only a repeat of the same failure of the same handle.
    assert _cuda_warnings(caught) == [
        "cuStreamDestroy(0x1000) failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context",
        "cuStreamDestroy(0x2000) failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context",
    ]


@pytest.mark.contract("W1", "E3")
@pytest.mark.parametrize("bad", [None, "x", True, 1.5])
def test_report_rejects_what_is_not_a_status(bad: object) -> None:
    with pytest.raises(TypeError):
        report(bad, "cuTest", HANDLE)


# W4: DEINITIALIZED is never reported ----------------------------------------------------------


@pytest.mark.contract("W4")
def test_deinitialized_is_never_reported(escalated: None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report(DEINITIALIZED, "cuStreamDestroy", HANDLE)
        report(4, "cuMemFree", HANDLE, "leaked")
        report_error(CUDAError(DEINITIALIZED, "cuEventDestroy"), HANDLE)
    assert caught == []
    # And with the warning escalated, nothing is raised either.
    report(DEINITIALIZED, "cuStreamDestroy", HANDLE)
    report_error(CUDAError(DEINITIALIZED, "cuEventDestroy"), HANDLE)


# W3: escalation reaches sys.unraisablehook once, from destructors and callbacks ----------------


class _Resource:
    """Stands for a cuguard resource whose release fails during garbage collection."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __del__(self) -> None:
        report(INVALID_CONTEXT, "cuStreamDestroy", self.handle)


@pytest.mark.contract("W3")
def test_escalated_report_raises_to_its_caller(escalated: None) -> None:
    with pytest.raises(CUDAWarning, match=r"^cuStreamDestroy\(0x55d0c1a2b3c0\) failed: CUDA_ERROR_INVALID_CONTEXT"):
        report(INVALID_CONTEXT, "cuStreamDestroy", HANDLE)


@pytest.mark.contract("W3")
def test_escalated_report_from_a_destructor_reaches_unraisablehook_once(unraisable: list[Any], escalated: None) -> None:
    resource = _Resource(HANDLE)
    steps = ["before"]
    del resource  # the release fails here, inside __del__
    steps.append("user code continues")
    assert steps == ["before", "user code continues"]
    assert len(unraisable) == 1
    [args] = unraisable
    assert args.exc_type is CUDAWarning
    assert isinstance(args.exc_value, CUDAWarning)
    assert str(args.exc_value) == W1_EXAMPLE
    assert args.object == _Resource.__del__


@pytest.mark.contract("W3")
def test_escalated_report_from_a_callback_reaches_unraisablehook_once(unraisable: list[Any], escalated: None) -> None:
    ran: list[int] = []

    def host_callback(handle: int) -> None:
        ran.append(handle)
        report(INVALID_CONTEXT, "cuStreamDestroy", handle)
        ran.append(-1)  # not reached: the escalated warning left the callback

    assert call_unraisable(host_callback, HANDLE, what="a CUDA host callback") is None
    assert ran == [HANDLE]
    assert len(unraisable) == 1
    [args] = unraisable
    assert args.exc_type is CUDAWarning
    assert str(args.exc_value) == W1_EXAMPLE
    assert args.exc_traceback is not None
    assert args.object is host_callback
    assert "a CUDA host callback" in args.err_msg


@pytest.mark.contract("W3", "W6")
def test_call_unraisable_routes_any_exception_and_carries_on(unraisable: list[Any]) -> None:
    def failing() -> None:
        raise ZeroDivisionError("user bug")

    def fine(results: list[str]) -> None:
        results.append("ran")

    results: list[str] = []
    call_unraisable(failing)
    call_unraisable(fine, results)
    assert results == ["ran"]
    assert [type(args.exc_value) for args in unraisable] == [ZeroDivisionError]


@pytest.mark.contract("W3")
@pytest.mark.parametrize(("strict", "passed"), [(False, True), (True, False)])
def test_pytest_turns_an_escalated_destructor_warning_into_a_failure(
    tmp_path: Path, child_env: dict[str, str], strict: bool, passed: bool
) -> None:
    (tmp_path / "test_inner.py").write_text(
        "import warnings\n"
        "from cuguard.errors import CUDAWarning, report\n"
        "class Resource:\n"
        "    def __del__(self):\n"
        "        report(201, 'cuStreamDestroy', 0x10)\n"
        "def test_inner():\n"
        "    warnings.filterwarnings('error', category=CUDAWarning)\n"
        "    Resource()\n"
        "    assert True  # user code carries on\n",
        "utf-8",
    )
    options = ["-W", "error::pytest.PytestUnraisableExceptionWarning"] if strict else []
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--junitxml=out.xml", *options, "test_inner.py"],
        cwd=tmp_path,
        env={**child_env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # pytest's own behaviour only
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    suite = ElementTree.parse(tmp_path / "out.xml").getroot().find("testsuite")
    assert suite is not None, done.stdout
    assert (suite.get("tests"), suite.get("errors")) == ("1", "0"), done.stdout
    assert suite.get("failures") == ("0" if passed else "1"), done.stdout
    assert done.returncode == (0 if passed else 1), done.stdout


# S1: silent once the interpreter is finalizing ------------------------------------------------


@pytest.mark.contract("S1")
def test_nothing_is_reported_or_called_while_finalizing(
    monkeypatch: pytest.MonkeyPatch, unraisable: list[Any], escalated: None
) -> None:
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    called: list[int] = []
    report(INVALID_CONTEXT, "cuStreamDestroy", HANDLE)
    report_error(CUDAError(INVALID_CONTEXT, "cuStreamDestroy"), HANDLE)
    call_unraisable(called.append, 1)
    resource = _Resource(HANDLE)
    del resource
    assert called == []
    assert unraisable == []


_SHUTDOWN_SCRIPT = """
import sys, warnings
from cuguard.errors import CUDAWarning, call_unraisable, report

if "escalate" in sys.argv:
    warnings.filterwarnings("error", category=CUDAWarning)
if "control" in sys.argv:  # hide finalization from cuguard: the reports must then show
    sys.is_finalizing = bool  # bool() is False; a builtin, so it keeps no module alive

class Stream:  # released by the module teardown at shutdown
    def __del__(self):
        report(201, "cuStreamDestroy", 0xDEAD)

class Graph:  # in a reference cycle, released by the last collection at shutdown
    def __init__(self):
        self.cycle = self
    def __del__(self):
        call_unraisable(report, 201, "cuGraphDestroy", 0xBEEF)

stream = Stream()
Graph()
sys.exit(7)
"""


@pytest.mark.contract("S1")
@pytest.mark.parametrize("mode", ["plain", "escalate"])
def test_reports_at_interpreter_shutdown_print_nothing(run_python: Callable[..., Any], mode: str) -> None:
    done = run_python(_SHUTDOWN_SCRIPT, mode)
    assert (done.returncode, done.stdout, done.stderr) == (7, "", "")
    # The control: with finalization hidden from cuguard, both objects do report at shutdown
    # (the handles are unique tokens of the two reports), so the test above is not vacuous.
    control = run_python(_SHUTDOWN_SCRIPT, mode, "control")
    assert control.returncode == 7
    assert "0xdead" in control.stderr
    assert "0xbeef" in control.stderr


# S2: internal errors ----------------------------------------------------------------------------


@pytest.mark.contract("S2")
def test_internal_error_is_a_runtime_error_asking_for_a_report() -> None:
    error = internal_error("stream 0x10 released twice")
    assert type(error) is RuntimeError
    assert str(error) == "internal cuguard error, please report: stream 0x10 released twice"
    assert str(error).startswith("internal cuguard error, please report:")
    assert error.__traceback__ is None  # built, not raised: the caller raises it


class _Finding(CUDAWarning):
    """A layer's own kind of finding (a race, say)."""


@pytest.mark.contract("W1")
def test_report_warning_issues_the_layers_warning_at_the_callers_line() -> None:
    def layer_code() -> None:
        report_warning(_Finding("two operations race"), stacklevel=2)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer_code()
        line = sys._getframe().f_lineno - 1
    assert [(w.category, str(w.message)) for w in caught] == [(_Finding, "two operations race")]
    assert caught[0].filename == __file__
    assert caught[0].lineno == line
    with warnings.catch_warnings():
        warnings.simplefilter("error", _Finding)
        with pytest.raises(_Finding):
            layer_code()  # escalated by the user's filter: raised (W3)
