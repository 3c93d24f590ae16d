"""``with ctx:``: the context is current for the block, the caller's comes back after (G2, C1, C2, G4).

On the simulated driver by default and on a GPU with ``--cuguard-driver=real``:
contexts created on device 0 (and device 1 when there is one) are all they need.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, ResourceClosedError, driver
from cuguard.testing import inject, record_calls, restore_fault

INVALID_CONTEXT = 201

pytestmark = pytest.mark.usefixtures("cuguard_driver")


def _null() -> Any:
    from cuda.bindings.driver import CUcontext

    return CUcontext(0)


def _device_count() -> int:
    Context.primary(0).close()  # initializes the driver; a primary context's close releases nothing
    err, count = driver.cuDeviceGetCount()
    assert not err
    return int(count)


@pytest.fixture
def two() -> Iterator[tuple[Context, Context]]:
    """Two created contexts (devices 0 and 1 when there are two); no context current before and after."""
    second = 1 if _device_count() > 1 else 0
    a = Context.create(0)
    b = Context.create(second)
    driver.cuCtxSetCurrent(_null())
    try:
        yield a, b
    finally:
        driver.cuCtxSetCurrent(_null())
        b.close()
        a.close()


def _switches(log: list[Any]) -> list[str]:
    return [c.name for c in log if c.name in ("cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent")]


@pytest.mark.contract("G2")
def test_block_runs_in_the_context_and_restores_no_context(two: tuple[Context, Context]) -> None:
    a, _ = two
    assert Context.current() is None
    with a as entered:
        assert entered is a
        assert Context.current() == a
    assert Context.current() is None
    assert not a.closed  # leaving the block does not close the context


@pytest.mark.contract("G2")
def test_nested_and_reentered_blocks_restore_each_callers_context(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with a:
        assert Context.current() == a
        with b:
            assert Context.current() == b
            with a:
                assert Context.current() == a
                with a:
                    assert Context.current() == a
                assert Context.current() == a
            assert Context.current() == b
        assert Context.current() == a
    assert Context.current() == b


@pytest.mark.contract("G2")
def test_restored_after_an_exception_in_the_block(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with pytest.raises(KeyError) as info, a:
        raise KeyError("inside")
    assert Context.current() == b
    assert not getattr(info.value, "__notes__", None)


@pytest.mark.contract("G2")
def test_restored_after_the_block_changed_the_current_context(two: tuple[Context, Context]) -> None:
    a, b = two
    a.set_current()
    with a:  # already current: no switch in
        b.set_current()
    assert Context.current() == a
    with b:
        driver.cuCtxSetCurrent(_null())
    assert Context.current() == a


@pytest.mark.contract("C1")
def test_one_switch_in_and_one_restore(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with record_calls() as log, a:
        pass
    assert _switches(log) == ["cuCtxSetCurrent", "cuCtxSetCurrent"]
    assert Context.current() == b


@pytest.mark.contract("C1")
def test_no_switch_when_the_context_is_current(two: tuple[Context, Context]) -> None:
    a, _ = two
    a.set_current()
    with record_calls() as log, a:
        assert Context.current() == a
    assert _switches(log) == []
    assert Context.current() == a


@pytest.mark.contract("G2")
def test_blocks_are_per_thread(two: tuple[Context, Context]) -> None:
    a, b = two
    seen: list[Any] = []
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        seen.append(Context.current())
        with b:
            seen.append(Context.current())
            inside.set()
            leave.wait(30)
        seen.append(Context.current())

    with a:
        thread = threading.Thread(target=other)
        thread.start()
        assert inside.wait(30)
        assert Context.current() == a  # the other thread's block did not change this thread's context
        leave.set()
        thread.join(30)
        assert Context.current() == a
    assert Context.current() is None
    assert seen == [None, b, None]


@pytest.mark.contract("C2")
def test_failed_restore_raises_naming_the_context_now_current(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with pytest.raises(CUDAError) as info, restore_fault(INVALID_CONTEXT), a:
        pass
    error = info.value
    assert error.name == "CUDA_ERROR_INVALID_CONTEXT"
    assert "could not be restored" in str(error)
    assert "set_current()" in str(error)
    assert f"{int(a.handle):#x}" in str(error)  # the context now current: the block's
    assert Context.current() == a  # nothing retried (C4)


@pytest.mark.contract("G4")
def test_failed_restore_while_an_exception_propagates_is_a_note(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with pytest.raises(KeyError) as info, restore_fault(INVALID_CONTEXT), a:
        raise KeyError("inside")
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    assert "CUDA_ERROR_INVALID_CONTEXT" in notes[0]
    assert "could not be restored" in notes[0]


@pytest.mark.contract("G2")
def test_refused_switch_in_runs_no_block_and_changes_nothing(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    ran = False
    with pytest.raises(CUDAError) as info, inject("cuCtxSetCurrent", INVALID_CONTEXT, nth=1), a:
        ran = True
    assert info.value.call == "cuCtxSetCurrent"
    assert not ran
    assert Context.current() == b
    with a:  # nothing of the refused block is left behind on this thread
        assert Context.current() == a
    assert Context.current() == b


@pytest.mark.contract("E3")
def test_closed_context_is_refused_before_the_driver() -> None:
    _device_count()
    c = Context.create(0)
    c.close()
    with record_calls() as log, pytest.raises(ResourceClosedError), c:
        pass  # pragma: no cover
    assert log == []


@pytest.mark.contract("G2")
def test_context_closed_in_its_own_block_still_restores(two: tuple[Context, Context]) -> None:
    _, b = two
    b.set_current()
    c = Context.create(0)
    with c:
        c.close()
    assert Context.current() == b
    assert c.closed


@pytest.mark.contract("E3")
def test_exit_without_enter_is_refused(two: tuple[Context, Context]) -> None:
    a, _ = two
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        a.__exit__(None, None, None)
