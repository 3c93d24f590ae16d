"""Property tests (hypothesis): rendering, pickling, check and report over arbitrary input.

Skipped where hypothesis is not installed (the GPU machine runs the tests from the source
tree with nothing to install).
"""

from __future__ import annotations

import pickle
import warnings

import pytest

pytest.importorskip("hypothesis")

from cuda.bindings import driver as cu
from hypothesis import given
from hypothesis import strategies as st

from cuguard.errors import (
    CUDAError,
    CUDAWarning,
    NVJitLinkError,
    NVRTCError,
    NVVMError,
    check,
    error_description,
    error_name,
    is_sticky,
    report,
)

DEINITIALIZED = cu.CUresult.CUDA_ERROR_DEINITIALIZED


def _state(error: BaseException) -> tuple[object, ...]:
    return (type(error), error.args, str(error), dict(error.__dict__), getattr(error, "__notes__", None))


def _cuda_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)]


@pytest.mark.contract("E1")
@given(st.integers(min_value=-(2**63), max_value=2**64))
def test_any_integer_status_renders_without_raising(code: int) -> None:
    error = CUDAError(code, "cuTest")
    assert error.code == code
    assert error.name
    assert error.description
    assert str(error) == f"cuTest failed: {error.name}: {error.description}"
    assert (error_name(code), error_description(code)) == (error.name, error.description)


@pytest.mark.contract("E1", "E2")
@given(
    st.sampled_from([CUDAError, NVRTCError, NVJitLinkError, NVVMError]),
    st.integers(min_value=-(2**31), max_value=2**32),
    st.none() | st.text(),
    st.text(),
)
def test_pickling_round_trips_any_error(cls: type[CUDAError], code: int, call: str | None, text: str) -> None:
    error = cls(code, call, log=text) if cls is not CUDAError else cls(code, call, detail=text or None)
    clone = pickle.loads(pickle.dumps(error))
    assert _state(clone) == _state(error)


@pytest.mark.contract("E1", "E3")
@given(st.integers(min_value=-(2**63), max_value=2**64))
def test_check_raises_exactly_for_nonzero_codes(code: int) -> None:
    if code == 0:
        assert check(code, "cuTest") is None
    else:
        with pytest.raises(CUDAError) as caught:
            check(code, "cuTest")
        assert caught.value.code == code
        assert caught.value.call == "cuTest"


@pytest.mark.contract("W1", "W4", "W7")
@given(
    st.integers(min_value=-(2**63), max_value=2**64) | st.sampled_from(list(cu.CUresult)),
    st.none() | st.integers() | st.floats() | st.text() | st.builds(object) | st.just(cu.CUstream(5)),
    st.none() | st.text(),
)
def test_report_never_raises_for_a_valid_status(status: int, handle: object, detail: str | None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report(status, "cuTest", handle, detail)
    reports = _cuda_warnings(caught)
    if int(status) == DEINITIALIZED:
        assert reports == []
    elif is_sticky(int(status)):
        # W7: one report per context and fault; the same refused release again is counted, not warned.
        assert len(reports) <= 1
    else:
        assert len(reports) == 1
