"""``relaxed_failed``: on_own_behalf's failures, raised from a compiled call's three statuses (G4, G6).

The compiled build makes the switch to relaxed capture mode, a release and the restore in one call
(an executable graph's close); what it raises when one of them is refused must be what
``on_own_behalf`` raises on the Python path. The compiled call itself is checked on the no-op driver
(``compiled_scenario.py``); these checks need no driver.
"""

from __future__ import annotations

import pytest

from cuguard.errors import CUDAError
from cuguard.resources.lowlevel import relaxed_failed

pytestmark = pytest.mark.contract("G6")

MODE = "cuThreadExchangeStreamCaptureMode"


def leaked(status: int) -> CUDAError:
    return CUDAError(status, "cuGraphExecDestroy", "leaked")


def test_a_refused_switch_names_the_switch() -> None:
    with pytest.raises(CUDAError) as caught:
        relaxed_failed(1, 0, 0, leaked)
    assert caught.value.call == MODE


def test_a_failed_step_raises_its_own_error_with_a_refused_restore_as_a_note() -> None:
    with pytest.raises(CUDAError) as caught:
        relaxed_failed(0, 2, 3, leaked)
    assert caught.value.call == "cuGraphExecDestroy"
    assert any(MODE in note and "relaxed" in note for note in caught.value.__notes__)


def test_a_failed_step_alone_has_no_note() -> None:
    with pytest.raises(CUDAError) as caught:
        relaxed_failed(0, 2, 0, leaked)
    assert caught.value.call == "cuGraphExecDestroy"
    assert not getattr(caught.value, "__notes__", [])


def test_a_refused_restore_after_the_step_says_the_thread_stays_relaxed() -> None:
    with pytest.raises(CUDAError, match="stays in relaxed capture mode") as caught:
        relaxed_failed(0, 0, 3, leaked)
    assert caught.value.call == MODE


def test_three_zero_statuses_are_a_caller_error() -> None:
    with pytest.raises(RuntimeError, match="three zero statuses"):
        relaxed_failed(0, 0, 0, leaked)
