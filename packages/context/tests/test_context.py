"""Contract tests of the context layer (G1, G2, G4, C1-C4, S2, W1, E3).

They run on the simulated driver by default and on a GPU with
``--cuguard-driver=real``: two contexts created on device 0 (and device 1
when there is one) are enough to exercise every switch.
"""

from __future__ import annotations

import contextlib
import gc
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from cuguard.context import Context, call_in, cleanup_in
from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError, driver
from cuguard.testing import inject, leak_check, record_calls, restore_fault

INVALID_CONTEXT = 201
OUT_OF_MEMORY = 2

pytestmark = pytest.mark.usefixtures("cuguard_driver")


def _device_count() -> int:
    Context.primary(0).close()  # initializes the driver
    err, count = driver.cuDeviceGetCount()
    assert not err
    return int(count)


@pytest.fixture
def two() -> Iterator[tuple[Context, Context]]:
    """Two created contexts (on devices 0 and 1 when there are two); none current after."""
    before = Context.current()
    second_device = 1 if _device_count() > 1 else 0
    a = Context.create(0)
    b = Context.create(second_device)
    try:
        yield a, b
    finally:
        if before is None:
            driver.cuCtxSetCurrent(_null())
        else:
            before.set_current()
        b.close()
        a.close()


def _null() -> Any:
    from cuda.bindings.driver import CUcontext

    return CUcontext(0)


def _switches(log: list[Any]) -> list[str]:
    return [c.name for c in log if c.name in ("cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent")]


def _current_handle() -> int:
    ctx = Context.current()
    return 0 if ctx is None else int(ctx.handle)


def _make_stream() -> Any:
    err, stream = driver.cuStreamCreate(0)
    if err:
        raise CUDAError(err, "cuStreamCreate")
    return stream


def _destroy_stream(stream: Any) -> None:
    (err,) = driver.cuStreamDestroy(stream)
    if err:
        raise CUDAError(err, "cuStreamDestroy")


@pytest.mark.contract("G2")
def test_fresh_thread_has_no_current_context() -> None:
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(Context.current()))
    Context.primary(0).close()
    thread.start()
    thread.join()
    assert seen == [None]


@pytest.mark.contract("G2")
def test_set_current_returns_previous_and_switches(two: tuple[Context, Context]) -> None:
    a, b = two
    a.set_current()
    previous = b.set_current()
    assert previous == a
    assert Context.current() == b


@pytest.mark.contract("G2")
def test_create_restores_callers_context(two: tuple[Context, Context]) -> None:
    a, _ = two
    a.set_current()
    c = Context.create(0)
    assert Context.current() == a
    assert c != a
    c.close()
    driver.cuCtxSetCurrent(_null())
    Context.create(0).close()
    assert Context.current() is None


@pytest.mark.contract("C1")
def test_no_switch_when_target_is_current(two: tuple[Context, Context]) -> None:
    a, _ = two
    a.set_current()
    with record_calls() as log:
        stream = call_in(a, _make_stream, _destroy_stream)
    _destroy_stream(stream)
    assert _switches(log) == []
    assert [c.name for c in log] == ["cuCtxGetCurrent", "cuStreamCreate"]


@pytest.mark.contract("C1", "G2")
@pytest.mark.parametrize("caller", ["other", "none"])
def test_one_set_current_in_and_one_out(two: tuple[Context, Context], caller: str) -> None:
    a, b = two
    if caller == "other":
        b.set_current()
    else:
        driver.cuCtxSetCurrent(_null())
    before = _current_handle()
    with record_calls() as log:
        stream = call_in(a, _make_stream, _destroy_stream)
    call_in(a, _destroy_stream, None, stream)
    assert _switches(log) == ["cuCtxSetCurrent", "cuCtxSetCurrent"]
    assert [c.restore for c in log if c.name == "cuCtxSetCurrent"] == [False, True]
    assert _current_handle() == before


@pytest.mark.contract("G2", "G4")
def test_body_failure_restores_and_propagates(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with inject("cuStreamCreate", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        call_in(a, _make_stream, _destroy_stream)
    assert info.value.call == "cuStreamCreate"
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert not getattr(info.value, "__notes__", [])
    assert Context.current() == b


@pytest.mark.contract("C2", "G1")
def test_failed_restore_undoes_and_raises(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    undone: list[tuple[Any, int]] = []

    def undo(stream: Any) -> None:
        undone.append((stream, _current_handle()))
        _destroy_stream(stream)

    with leak_check(), restore_fault(INVALID_CONTEXT), pytest.raises(CUDAError) as info:
        call_in(a, _make_stream, undo)
    text = str(info.value)
    assert "could not be restored" in text
    assert f"context now current is context {hex(int(a.handle))}" in text
    assert "set_current()" in text
    assert info.value.name == "CUDA_ERROR_INVALID_CONTEXT"
    # The undo ran while the work's context was still current.
    assert len(undone) == 1
    assert undone[0][1] == int(a.handle)
    # The thread keeps the context the work used until the user fixes it.
    assert Context.current() == a
    b.set_current()
    assert Context.current() == b


@pytest.mark.contract("C2", "G4")
def test_failed_restore_after_failed_body_keeps_body_error(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with (
        inject("cuStreamCreate", OUT_OF_MEMORY),
        restore_fault(INVALID_CONTEXT),
        pytest.raises(CUDAError) as info,
    ):
        call_in(a, _make_stream, _destroy_stream)
    assert info.value.call == "cuStreamCreate"
    notes = info.value.__notes__
    assert len(notes) == 1
    assert "could not be restored" in notes[0]
    assert "CUDA_ERROR_INVALID_CONTEXT" in notes[0]


@pytest.mark.contract("C2", "G4")
def test_failed_undo_is_a_note_on_the_restore_error(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    created: list[Any] = []

    def make() -> Any:
        created.append(_make_stream())
        return created[-1]

    with (
        restore_fault(INVALID_CONTEXT),
        inject("cuStreamDestroy", OUT_OF_MEMORY),
        pytest.raises(CUDAError) as info,
    ):
        call_in(a, make, _destroy_stream)
    assert "could not be restored" in str(info.value)
    assert any("cuStreamDestroy" in note and "CUDA_ERROR_OUT_OF_MEMORY" in note for note in info.value.__notes__)
    _destroy_stream(created[0])


@pytest.mark.contract("C3")
def test_cleanup_restore_failure_warns_and_keeps_cleanup_context(two: tuple[Context, Context]) -> None:
    a, b = two
    stream = call_in(a, _make_stream, _destroy_stream)
    b.set_current()
    with restore_fault(INVALID_CONTEXT), pytest.warns(CUDAWarning, match="could not be restored"):
        cleanup_in(a, _destroy_stream, stream)
    assert Context.current() == a


@pytest.mark.contract("C3")
def test_cleanup_switch_in_failure_warns_and_runs_nothing(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    ran: list[int] = []
    with inject("cuCtxSetCurrent", INVALID_CONTEXT), pytest.warns(CUDAWarning, match="cuCtxSetCurrent"):
        assert cleanup_in(a, ran.append, 1) is None
    assert ran == []
    assert Context.current() == b


@pytest.mark.contract("C4")
def test_nothing_is_retried(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with record_calls() as log, restore_fault(INVALID_CONTEXT, every=True), pytest.raises(CUDAError):
        call_in(a, lambda: None, None)
    restores = [c for c in log if c.restore]
    assert len(restores) == 1
    assert _switches(log) == ["cuCtxSetCurrent", "cuCtxSetCurrent"]
    b.set_current()
    with record_calls() as log, inject("cuCtxSetCurrent", INVALID_CONTEXT, every=True), pytest.raises(CUDAError):
        call_in(a, lambda: None, None)
    assert _switches(log) == ["cuCtxSetCurrent"]


@pytest.mark.contract("G1", "G2")
def test_create_failure_creates_nothing(two: tuple[Context, Context]) -> None:
    a, _ = two
    a.set_current()
    with leak_check(), inject("cuCtxCreate", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        Context.create(0)
    assert info.value.call == "cuCtxCreate"
    assert Context.current() == a


@pytest.mark.contract("G1", "C2")
def test_create_with_failed_restore_destroys_the_new_context(two: tuple[Context, Context]) -> None:
    a, _ = two
    a.set_current()
    with (
        leak_check(),
        inject("cuCtxPopCurrent", INVALID_CONTEXT),
        pytest.raises(CUDAError, match="could not be restored"),
    ):
        Context.create(0)
    # The destroyed context was popped off the thread's stack: the caller's is current again.
    assert Context.current() == a


@pytest.mark.contract("E3", "S2")
def test_closed_context_is_refused_before_the_driver(two: tuple[Context, Context]) -> None:
    c = Context.create(0)
    c.close()
    c.close()  # idempotent
    with record_calls() as log:
        with pytest.raises(ResourceClosedError, match="closed"):
            call_in(c, lambda: None, None)
        with pytest.raises(ResourceClosedError):
            c.set_current()
    assert log == []


@pytest.mark.contract("S3")
def test_close_failure_raises_once(two: tuple[Context, Context]) -> None:
    c = Context.create(0)
    with inject("cuCtxDestroy", INVALID_CONTEXT), pytest.raises(CUDAError):
        c.close()
    c.close()  # the context is considered gone: never released twice


@pytest.mark.contract("W1")
def test_garbage_collected_context_release_failure_warns(two: tuple[Context, Context]) -> None:
    c = Context.create(0)
    handle = hex(int(c.handle))
    with inject("cuCtxDestroy", INVALID_CONTEXT), pytest.warns(CUDAWarning, match=f"cuCtxDestroy\\({handle}\\)"):
        del c


@pytest.mark.contract("O2")
def test_primary_is_one_object_held_for_good() -> None:
    p1 = Context.primary(0)
    p2 = Context.primary(0)
    assert p1 is p2
    assert p1.is_primary
    assert not p1.owned
    assert p1.device == 0
    wrapped = Context.wrap(p1.handle)
    assert wrapped == p1
    assert hash(wrapped) == hash(p1)
    assert not wrapped.owned
    assert wrapped.device == 0


@pytest.mark.contract("O2", "G1")
def test_primary_close_releases_nothing_and_foreign_close_releases_nothing() -> None:
    p = Context.primary(0)
    with record_calls() as log:
        Context.wrap(p.handle).close()
        p.close()
    assert [c.name for c in log] == []
    assert not p.closed
    p.synchronize()  # still usable


def test_bad_ordinals_are_refused() -> None:
    with pytest.raises(TypeError):
        Context.primary("0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="0 or more"):
        Context.create(-1)
    with pytest.raises(CUDAError) as info:
        Context.primary(64)
    assert info.value.call == "cuDeviceGet"


@pytest.mark.contract("G2", "C1", "C2")
def test_threads_keep_their_own_context_under_restore_failures(two: tuple[Context, Context]) -> None:
    a, b = two
    contexts = [a, b]
    failures: list[str] = []
    local = threading.local()

    def fail_this_thread(_args: tuple[Any, ...]) -> bool:
        return bool(getattr(local, "fail", False))

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        home = contexts[seed % 2]
        home.set_current()
        for i in range(150):
            target = rng.choice(contexts)
            local.fail = rng.random() < 0.2
            expected = _current_handle()
            try:
                stream = call_in(target, _make_stream, _destroy_stream)
            except CUDAError as exc:
                if not local.fail or target == home:
                    failures.append(f"thread {seed} call {i}: unexpected {exc}")
                elif _current_handle() != int(target.handle):
                    failures.append(f"thread {seed} call {i}: after a failed restore the work's context is not kept")
                home.set_current()
                continue
            finally:
                local.fail = False
            call_in(target, _destroy_stream, None, stream)
            if _current_handle() != expected:
                failures.append(f"thread {seed} call {i}: context changed")

    with restore_fault(INVALID_CONTEXT, every=True, when=fail_this_thread):
        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


@pytest.mark.contract("O2")
def test_collecting_the_primary_context_object_releases_nothing() -> None:
    p = Context.primary(0)
    handle = int(p.handle)
    with record_calls() as log:
        del p
        gc.collect()
    assert [c.name for c in log] == []
    assert int(Context.primary(0).handle) == handle


@pytest.mark.contract("C2")
def test_create_whose_pop_and_destroy_fail_names_the_leaked_context(two: tuple[Context, Context]) -> None:
    # Found by the failure-point sweep: the message said the new context was destroyed when it was not.
    pop_fails = inject("cuCtxPopCurrent", OUT_OF_MEMORY)
    with pop_fails, inject("cuCtxDestroy", INVALID_CONTEXT), pytest.raises(CUDAError) as info:
        Context.create(0)
    current = Context.current()
    assert current is not None
    assert hex(int(current.handle)) in str(info.value)
    assert "was destroyed" not in str(info.value)
    assert any("cuCtxDestroy" in note for note in info.value.__notes__)
    driver.cuCtxDestroy(current.handle)  # the leaked context, released by the test


# --- The switch path the layers above inline (cuguard.context.lowlevel.call_switched) ------------------------


def _switched(context: Context, fn: Any) -> Any:
    """``call_switched`` as the resources layer calls it: after reading the current context itself."""
    from cuguard.context.lowlevel import call_switched

    err, previous = driver.cuCtxGetCurrent()
    assert not err
    return call_switched(context, previous, fn, "cuStreamCreate", _destroy_stream, 0)


@pytest.mark.contract("G2", "G4")
@pytest.mark.parametrize("restore", ["ok", "fails"])
def test_switched_call_that_raises_restores_the_callers_context(two: tuple[Context, Context], restore: str) -> None:
    # The bindings raise (rather than return a status) for an argument they refuse: the caller's
    # context comes back all the same, and a failed restore is a note on what propagates.
    a, b = two
    b.set_current()

    def refuse(flags: int) -> Any:
        raise TypeError(f"refused {flags}")

    plan = restore_fault(INVALID_CONTEXT) if restore == "fails" else contextlib.nullcontext()
    with plan, pytest.raises(TypeError, match="refused 0") as info:
        _switched(a, refuse)
    notes = getattr(info.value, "__notes__", [])
    if restore == "ok":
        assert notes == []
        assert Context.current() == b
    else:
        assert len(notes) == 1
        assert "could not be restored" in notes[0]
        assert Context.current() == a


@pytest.mark.contract("C2", "G4")
def test_switched_call_failure_keeps_a_failed_restore_as_its_note(two: tuple[Context, Context]) -> None:
    a, b = two
    b.set_current()
    with (
        leak_check(),
        inject("cuStreamCreate", OUT_OF_MEMORY),
        restore_fault(INVALID_CONTEXT),
        pytest.raises(CUDAError) as info,
    ):
        _switched(a, driver.cuStreamCreate)
    assert info.value.call == "cuStreamCreate"
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    notes = info.value.__notes__
    assert len(notes) == 1
    assert "could not be restored" in notes[0]
    assert "CUDA_ERROR_INVALID_CONTEXT" in notes[0]


@pytest.mark.contract("C2")
@pytest.mark.parametrize("how", ["call_in", "call_switched"])
def test_failed_restore_never_undoes_in_a_context_that_is_no_longer_current(
    two: tuple[Context, Context], how: str
) -> None:
    # The restore fails and, before cuguard looks, the thread's current context changed (another
    # switch on this thread: here the fault plan's own check makes it). Undoing there would release
    # the new object in the wrong context: it is leaked instead, and the error says so.
    a, b = two
    b.set_current()
    third = Context.create(0)
    undone: list[Any] = []
    created: list[Any] = []

    def make(*_: Any) -> Any:
        created.append(_make_stream())
        return (0, created[-1]) if how == "call_switched" else created[-1]

    def elsewhere(_: tuple[Any, ...]) -> bool:
        driver.cuCtxSetCurrent(third.handle)
        return True

    def run() -> object:
        if how == "call_in":
            return call_in(a, make, undone.append)
        from cuguard.context.lowlevel import call_switched

        _, previous = driver.cuCtxGetCurrent()
        return call_switched(a, previous, make, "cuStreamCreate", undone.append, 0)

    try:
        with restore_fault(INVALID_CONTEXT, when=elsewhere), pytest.raises(CUDAError) as info:
            run()
        assert "could not be restored" in str(info.value)
        assert undone == []
        assert any("was leaked" in note for note in info.value.__notes__)
        assert Context.current() == third
    finally:
        for stream in created:
            call_in(a, _destroy_stream, None, stream)
        b.set_current()
        third.close()


@pytest.mark.contract("C3", "S2")
def test_cleanup_in_a_destroyed_context_warns_and_calls_nothing(two: tuple[Context, Context]) -> None:
    _, b = two
    b.set_current()
    doomed = Context.create(0)
    doomed.close()
    ran: list[int] = []
    with record_calls() as log, pytest.warns(CUDAWarning, match="destroyed"):
        assert cleanup_in(doomed, ran.append, 1) is None
    assert ran == []
    assert log == []
    assert Context.current() == b
