"""The shared test helpers: settle, assert_no_misuse, run_bounded (B2: what a test suite checks with them)."""

from __future__ import annotations

import threading

import pytest

from cuguard.errors import defer
from cuguard.testing import assert_no_misuse, inject, run_bounded, settle, simulated_driver

pytestmark = pytest.mark.contract("B2")


def test_settle_waits_for_the_release_thread() -> None:
    done = threading.Event()
    with simulated_driver():
        defer(done.set)  # a release handed to cuguard's release thread
        settle()
        assert done.is_set()


def test_settle_finds_the_simulator_under_a_fault_proxy() -> None:
    with simulated_driver() as sim, inject("cuMemAlloc", 2):
        (err,) = sim.cuInit(0)
        assert not err
        settle()  # the installed driver is a proxy over the simulator: its callbacks are delivered


def test_settle_raises_when_the_release_thread_does_not_catch_up() -> None:
    release = threading.Event()
    with simulated_driver():
        defer(release.wait, 30)  # holds the release thread
        try:
            with pytest.raises(TimeoutError, match="did not catch up"):
                settle(timeout=0.05)
        finally:
            release.set()
        settle()


def test_assert_no_misuse_lists_what_the_simulator_recorded() -> None:
    with simulated_driver() as sim:
        (err,) = sim.cuInit(0)
        assert not err
        assert_no_misuse()
        err, ctx = sim.cuDevicePrimaryCtxRetain(0)
        assert not err
        assert not sim.cuCtxSetCurrent(ctx)[0]
        err, ptr = sim.cuMemAlloc(64)
        assert not err
        assert not sim.cuMemFree(ptr)[0]
        sim.cuMemFree(ptr)  # freed twice: a double release
        with pytest.raises(AssertionError, match="double release"):
            assert_no_misuse(sim)


def test_assert_no_misuse_checks_nothing_on_a_driver_without_books() -> None:
    assert_no_misuse(object())


def test_run_bounded_returns_raises_or_reports_a_hang() -> None:
    seen: list[int] = []
    run_bounded(lambda: seen.append(1), 5)
    assert seen == [1]
    with pytest.raises(ZeroDivisionError):
        run_bounded(lambda: 1 / 0, 5)
    stuck = threading.Event()
    try:
        with pytest.raises(AssertionError, match="the wait hung"):
            run_bounded(lambda: stuck.wait(30), 0.05, "the wait")
    finally:
        stuck.set()


def test_the_helpers_refuse_wrong_arguments_before_doing_anything() -> None:
    with pytest.raises(TypeError, match="timeout"):
        settle(timeout="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        settle(timeout=0)
    ran: list[int] = []
    with pytest.raises(TypeError, match="fn"):
        run_bounded(42, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seconds"):
        run_bounded(lambda: ran.append(1), True)
    with pytest.raises(ValueError, match="seconds"):
        run_bounded(lambda: ran.append(1), -1)
    assert ran == []  # nothing ran
    with simulated_driver() as sim, pytest.raises(TypeError, match="address"):
        sim.allocation_pool("0x1000")  # type: ignore[arg-type]
