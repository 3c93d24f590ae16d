"""The race checker (B7): racy programs are reported, the same programs with the ordering edge are not.

Every ordering edge the checker knows comes as a pair: the racy program (no
edge: exactly one RaceWarning naming both operations) and the correct one
(the edge: none). They run on the simulated driver and on the real one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cuguard.errors import CUDAWarning
from cuguard.resources import (
    Buffer,
    Device,
    LaunchConfig,
    Module,
    PinnedBuffer,
    RaceWarning,
    Stream,
    StridedMemoryView,
    launch,
    racecheck,
    racecheck_enabled,
)

pytestmark = pytest.mark.contract("B7")

SIZE = 256
ONE = LaunchConfig(grid=1, block=1)


@pytest.fixture
def checked(device: Device) -> Iterator[Device]:
    """The device, with the race checker on for the test."""
    with racecheck():
        yield device


def races(program: Callable[[], object]) -> list[str]:
    """The race reports ``program`` gives (its other warnings pass through)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RaceWarning)
        program()
    found = [str(w.message) for w in caught if issubclass(w.category, RaceWarning)]
    for w in caught:
        if not issubclass(w.category, RaceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return found


def write(module: Module, stream: Stream, buf: Buffer) -> None:
    """A kernel that writes all of ``buf`` (a whole-buffer access: its pointer argument)."""
    launch(stream, ONE, module.get_kernel("fill_u32"), buf, 7, SIZE // 4)


def read(module: Module, stream: Stream, buf: Buffer) -> None:
    """The same kernel, with its buffer argument declared read-only."""
    launch(stream, ONE, module.get_kernel("fill_u32"), buf, 7, SIZE // 4, read_only=[0])


# --- off by default ----------------------------------------------------------------------


def test_off_by_default_reports_nothing(device: Device, module: Module) -> None:
    if os.environ.get("CUGUARD_RACECHECK", "") not in ("", "0"):
        pytest.skip("CUGUARD_RACECHECK turns the checker on for this run")
    assert not racecheck_enabled()
    s1, s2 = device.create_stream(), device.create_stream()
    buf = device.allocate(SIZE)
    assert races(lambda: (write(module, s1, buf), write(module, s2, buf))) == []
    s1.sync()
    s2.sync()


def test_racecheck_block_turns_on_and_restores(device: Device) -> None:
    before = racecheck_enabled()
    with racecheck():
        assert racecheck_enabled()
        with racecheck(False):
            assert not racecheck_enabled()
        assert racecheck_enabled()
    assert racecheck_enabled() is before
    with pytest.raises(TypeError, match="enabled"), racecheck(1):  # type: ignore[arg-type]
        pass


def test_the_hot_modules_copies_of_the_flag_follow_it(device: Device) -> None:
    """A follower (as each hot module keeps the flag) gets the flag at once and every change after, in order."""
    from cuguard.resources.lowlevel import race

    seen: list[bool] = []
    race.follow(seen.append)
    assert seen == [racecheck_enabled()]
    with racecheck(True):
        assert seen[-1] is True
        with racecheck(False):
            assert seen[-1] is False
        assert seen[-1] is True
    assert seen[-1] is racecheck_enabled()


def test_race_warning_is_a_cuda_warning() -> None:
    assert issubclass(RaceWarning, CUDAWarning)


# --- stream order --------------------------------------------------------------------------


def test_two_streams_race_and_the_report_names_both_operations(checked: Device, module: Module) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    kernel = module.get_kernel("fill_u32")
    first = sys._getframe().f_lineno + 1
    launch(s1, ONE, kernel, buf, 7, SIZE // 4)
    found = races(lambda: buf.fill(0, s2))
    assert len(found) == 1
    text = found[0]
    assert f"device memory 0x{buf.ptr:x} ({SIZE} bytes), bytes 0..{SIZE}" in text
    assert f"cuMemsetD8Async on stream 0x{int(s2.handle):x} (writes, queued at {__file__}:{first + 1})" in text
    assert f"cuLaunchKernel (fill_u32) on stream 0x{int(s1.handle):x} (writes, queued at {__file__}:{first})" in text
    checked.sync()


def test_one_stream_is_ordered(checked: Device, module: Module) -> None:
    s1 = checked.create_stream()
    buf = checked.allocate(SIZE)
    assert races(lambda: (write(module, s1, buf), write(module, s1, buf), buf.fill(1, s1))) == []
    s1.sync()


def test_a_race_is_reported_once(checked: Device, module: Module) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    other = checked.allocate(SIZE)
    checked.sync()
    other.copy_from(buf, s1)  # reads buf, writes other
    # Reads other (against s1's write) and writes buf (against s1's read): one pair of operations, one report.
    found = races(lambda: buf.copy_from(other, s2))
    assert len(found) == 1
    checked.sync()


# --- reads ---------------------------------------------------------------------------------


def test_reads_do_not_race_and_read_only_says_which(checked: Device, module: Module) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    checked.sync()
    assert races(lambda: (read(module, s1, buf), read(module, s2, buf))) == []
    assert len(races(lambda: write(module, s1, buf))) == 1  # after s2's read, not ordered
    checked.sync()


def test_read_only_view_only_reads(checked: Device, module: Module) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    view = StridedMemoryView.from_buffer(buf, shape=(SIZE,), dtype="uint8", is_readonly=True)
    kernel = module.get_kernel("fill_u32")
    assert races(lambda: (launch(s1, ONE, kernel, view, 7, 1), launch(s2, ONE, kernel, view, 7, 1))) == []
    assert len(races(lambda: launch(s1, ONE, kernel, buf, 7, 1))) == 1
    checked.sync()


def test_read_only_is_checked(checked: Device, module: Module) -> None:
    s1 = checked.create_stream()
    buf = checked.allocate(SIZE)
    kernel = module.get_kernel("fill_u32")
    with pytest.raises(TypeError, match="read_only"):
        launch(s1, ONE, kernel, buf, 7, 1, read_only=["0"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="argument 3"):
        launch(s1, ONE, kernel, buf, 7, 1, read_only=[3])
    with pytest.raises(TypeError, match="read_only"):
        launch(s1, ONE, kernel, buf, 7, 1, read_only=0)  # type: ignore[arg-type]


# --- events ------------------------------------------------------------------------------


@pytest.mark.parametrize("edge", [False, True])
def test_event_record_and_wait(checked: Device, module: Module, edge: bool) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    write(module, s1, buf)
    event = s1.record()
    if edge:
        s2.wait(event)
    assert len(races(lambda: write(module, s2, buf))) == (0 if edge else 1)
    checked.sync()


def test_an_event_waits_for_its_record_only(checked: Device, module: Module) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    event = s1.record()
    write(module, s1, buf)  # after the record: the wait does not order it
    s2.wait(event)
    assert len(races(lambda: write(module, s2, buf))) == 1
    checked.sync()


@pytest.mark.parametrize("edge", [False, True])
def test_stream_waits_for_stream(checked: Device, module: Module, edge: bool) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    write(module, s1, buf)
    if edge:
        s2.wait(s1)
    assert len(races(lambda: buf.fill(3, s2))) == (0 if edge else 1)
    checked.sync()


# --- the host: synchronizations and host accesses ----------------------------------------


def _to_pinned(checked: Device, stream: Stream) -> tuple[Buffer, PinnedBuffer]:
    buf = checked.allocate(SIZE)
    pinned = checked.allocate_pinned(SIZE)
    buf.fill(1, stream)
    buf.copy_to(pinned, stream)
    return buf, pinned


@pytest.mark.parametrize("sync", ["none", "stream", "event", "event-query", "stream-query", "device", "context"])
def test_host_view_after_a_copy_needs_a_synchronization(checked: Device, sync: str) -> None:
    s1 = checked.create_stream()
    _, pinned = _to_pinned(checked, s1)
    event = s1.record()
    if sync == "stream":
        s1.sync()
    elif sync == "event":
        event.sync()
    elif sync == "event-query":
        event.sync()
        assert event.query()
    elif sync == "stream-query":
        s1.sync()
        assert s1.query()
    elif sync == "device":
        checked.sync()
    elif sync == "context":
        checked.context.synchronize()  # the context layer's synchronization is an ordering edge too
    found = races(pinned.numpy)
    assert len(found) == (1 if sync == "none" else 0)
    if found:
        assert "PinnedBuffer.numpy on the host" in found[0]
        assert "cuMemcpyDtoHAsync" in found[0]
    checked.sync()


def test_query_that_answers_done_orders_only_what_it_saw(checked: Device) -> None:
    s1 = checked.create_stream()
    event = s1.record()
    event.sync()
    assert event.query()
    _, pinned = _to_pinned(checked, s1)  # queued after the record
    assert len(races(pinned.numpy)) == 1
    checked.sync()


@pytest.mark.parametrize("edge", [False, True])
def test_dlpack_export_of_pinned_memory_is_a_host_access(checked: Device, edge: bool) -> None:
    s1 = checked.create_stream()
    _, pinned = _to_pinned(checked, s1)
    if edge:
        s1.sync()
    found = races(pinned.__dlpack__)
    assert len(found) == (0 if edge else 1)
    checked.sync()


@pytest.mark.parametrize("edge", [False, True])
def test_host_write_then_stream_copy(checked: Device, edge: bool) -> None:
    # The host's accesses come before what it queues afterwards (host program order).
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    pinned = checked.allocate_pinned(SIZE)
    buf.copy_from(pinned, s1)  # reads the pinned memory on s1
    if edge:
        s1.sync()
    found = races(pinned.numpy)  # a host write
    assert len(found) == (0 if edge else 1)
    fresh = checked.allocate(SIZE)
    assert races(lambda: fresh.copy_from(pinned, s2)) == []  # queued after the host's view: ordered
    checked.sync()


def test_synchronous_copy_to_host_waits(checked: Device) -> None:
    s1 = checked.create_stream()
    buf = checked.allocate(SIZE)
    pinned = checked.allocate_pinned(SIZE)
    buf.fill(5, s1)
    s1.sync()
    buf.copy_to(pinned)  # synchronous: the host has the data when it returns
    assert races(pinned.numpy) == []


# --- the legacy default stream and the per-thread default stream ---------------------------


@pytest.mark.parametrize("non_blocking", [True, False])
def test_legacy_default_stream_orders_blocking_streams(checked: Device, module: Module, non_blocking: bool) -> None:
    with checked:
        legacy = checked.default_stream
        s1 = checked.create_stream(non_blocking=non_blocking)
        buf = checked.allocate(SIZE)
        write(module, s1, buf)
        assert len(races(lambda: write(module, legacy, buf))) == (1 if non_blocking else 0)
        checked.sync()
        write(module, legacy, buf)  # and the other way round
        assert len(races(lambda: write(module, s1, buf))) == (1 if non_blocking else 0)
        checked.sync()


@pytest.mark.parametrize("non_blocking", [True, False])
def test_synchronous_memset_is_legacy_stream_work(checked: Device, module: Module, non_blocking: bool) -> None:
    with checked:
        s1 = checked.create_stream(non_blocking=non_blocking)
        buf = checked.allocate(SIZE)
        write(module, s1, buf)
        assert len(races(lambda: buf.fill(0))) == (1 if non_blocking else 0)
        checked.sync()


def test_per_thread_default_stream(checked: Device, module: Module, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "1")
    with checked:
        buf = checked.allocate(SIZE)
        mine = checked.default_stream
        write(module, mine, buf)
        assert races(lambda: write(module, mine, buf)) == []  # one stream of this thread
        theirs: list[Stream] = []
        found: list[str] = []

        def other() -> None:
            with checked:
                stream = checked.default_stream
                theirs.append(stream)
                found.extend(races(lambda: write(module, stream, buf)))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(found) == 1  # another thread's per-thread default stream: not ordered
        assert "per-thread default stream" in found[0]
        checked.sync()


# --- host functions ------------------------------------------------------------------------


@pytest.mark.parametrize("same_stream", [True, False])
def test_host_function_runs_as_a_step_of_its_stream(
    checked: Device, same_stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    _, pinned = _to_pinned(checked, s1)
    reached: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reached.append)
    views: list[Any] = []
    (s1 if same_stream else s2).launch_host_func(lambda: views.append(pinned.numpy()))
    checked.sync()
    got = [args.exc_value for args in reached]
    assert all(isinstance(value, RaceWarning) for value in got)
    assert len(got) == (0 if same_stream else 1)
    if got:
        assert "a host function" in str(got[0])
    assert len(views) == (1 if same_stream else 0)
    del views[:]


# --- stream-ordered allocation and free ----------------------------------------------------


@pytest.mark.parametrize("edge", [False, True])
def test_stream_ordered_allocation_is_a_write_on_its_stream(checked: Device, module: Module, edge: bool) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE, s1)
    if edge:
        s2.wait(s1)
    assert len(races(lambda: read(module, s2, buf))) == (0 if edge else 1)
    checked.sync()


@pytest.mark.parametrize("edge", [False, True])
def test_free_is_a_write(checked: Device, module: Module, edge: bool) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE, s1)
    s2.wait(s1)
    read(module, s2, buf)
    if edge:
        s1.wait(s2)
    found = races(buf.close)  # freed on s1, its allocation stream
    assert len(found) == (0 if edge else 1)
    if found:
        assert "cuMemFreeAsync" in found[0]
    checked.sync()


def test_freed_memory_is_forgotten(checked: Device, module: Module) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    buf = checked.allocate(SIZE)
    write(module, s1, buf)
    checked.sync()
    buf.close()  # synchronous free
    again = checked.allocate(SIZE, s2)
    assert races(lambda: write(module, s2, again)) == []
    checked.sync()


# --- copies --------------------------------------------------------------------------------


@pytest.mark.parametrize("edge", [False, True])
def test_device_to_device_copy(checked: Device, module: Module, edge: bool) -> None:
    s1, s2 = checked.create_stream(), checked.create_stream()
    a, b = checked.allocate(SIZE), checked.allocate(SIZE)
    checked.sync()
    write(module, s1, a)
    if edge:
        s2.wait(s1)
    found = races(lambda: b.copy_from(a, s2))
    assert len(found) == (0 if edge else 1)
    assert races(lambda: write(module, s2, b)) == []  # b: only ever s2's
    checked.sync()


# --- the environment variable ---------------------------------------------------------------

_PROGRAM = """
import warnings
from cuguard.resources import Device, RaceWarning, racecheck_enabled
from cuguard.testing import simulated_driver
with simulated_driver():
    dev = Device(0)
    s1, s2 = dev.create_stream(), dev.create_stream()
    buf = dev.allocate(64)
    buf.fill(1, s1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        buf.fill(2, s2)
    dev.sync()
    print(racecheck_enabled(), sum(issubclass(w.category, RaceWarning) for w in caught))
    buf.close()
    s1.close()
    s2.close()
"""


@pytest.mark.parametrize("value", ["1", "0", ""])
def test_environment_variable_turns_it_on_for_a_whole_program(value: str) -> None:
    env = dict(os.environ, CUGUARD_RACECHECK=value)
    done = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == (["True", "1"] if value == "1" else ["False", "0"])
