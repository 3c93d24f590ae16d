"""One fault, one report (contract W7), on the simulated driver.

After a kernel fault the driver refuses every release in the context. The first
refused release warns, naming the first fault; the later ones are counted and
reported once, in one summary, when the context's last cuguard object is gone
(or at exit). An explicit ``close()`` still raises, and warns nothing. The
real-GPU counterpart is ``scripts/gpu-sticky.py`` (its ``flood`` scenario).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import KERNELS_PTX, _emulate

from cuguard.errors import (
    CUDAWarning,
    StickyCUDAError,
    StickyFaultWarning,
    attribute_faults,
    first_sticky_fault,
    flush_deferred,
)
from cuguard.resources import Device, LaunchConfig, Module, Stream, launch
from cuguard.testing import SimulatedDriver

FIRST = "cuStreamSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS"


@pytest.fixture
def faulting(sim: SimulatedDriver) -> Iterator[tuple[Device, Module, Stream]]:
    """Device 0, a module with a kernel that writes through a bad address, and a stream to launch it on."""
    _emulate(sim)
    dev = Device(0)
    yield dev, dev.load_module(KERNELS_PTX), dev.create_stream()
    sim.poison(None)  # a test convenience only: a real driver never recovers


def _fault(module: Module, stream: Stream) -> None:
    """A kernel writes through a bad address; the next synchronization raises the first fault."""
    launch(stream, LaunchConfig(), module.get_kernel("poke"), 8)
    with pytest.raises(StickyCUDAError):
        stream.sync()
    assert first_sticky_fault() == FIRST


def _close_raising(*objects: Any) -> None:
    """Explicit closes still raise after the fault (S3) and warn nothing (W7)."""
    for obj in objects:
        with pytest.raises(StickyCUDAError):
            obj.close()
        assert obj.closed


def _sixty(dev: Device) -> list[Any]:
    streams = [dev.create_stream() for _ in range(20)]
    events = [dev.create_event() for _ in range(20)]
    buffers = [dev.allocate(64, stream=streams[i]) for i in range(20)]
    return [*streams, *events, *buffers]


def _settle() -> None:
    """Collect garbage and wait for the releases handed to cuguard's release thread."""
    gc.collect()
    flush_deferred()


def _cuda_warnings(seen: list[warnings.WarningMessage]) -> list[CUDAWarning]:
    return [w.message for w in seen if isinstance(w.message, CUDAWarning)]


@pytest.mark.contract("W7", "W5")
def test_sixty_objects_dropped_after_a_kernel_fault_give_one_warning_and_one_summary(
    sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]
) -> None:
    dev, module, stream = faulting
    assert not dev.memory_resource.owned  # kept by the device for good: it owns nothing, so it holds nothing back
    objects = _sixty(dev)
    handles = {int(obj.handle) for obj in objects}
    _fault(module, stream)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _close_raising(stream, module)
        assert seen == []  # a close that raises warns nothing
        del objects
        _settle()
    first, summary = _cuda_warnings(seen)
    assert isinstance(first, StickyFaultWarning)
    assert isinstance(summary, StickyFaultWarning)
    assert not first.summary
    assert first.leaked == 1
    assert first.first_fault == FIRST
    assert FIRST in str(first)
    assert "failed: CUDA_ERROR_ILLEGAL_ADDRESS" in str(first)  # the refused release itself (W1)
    assert "without a warning each" in str(first)
    assert first.context == repr(dev.context)
    assert first.context in str(first)
    assert summary.summary
    assert summary.leaked == 59
    assert str(summary).startswith("59 more releases refused in")
    assert FIRST in str(summary)
    # Each refused release leaked its object (W5): all sixty are still alive in the driver.
    assert handles <= {live.handle for live in sim.live_objects()}


@pytest.mark.contract("W7")
def test_the_summary_comes_when_the_contexts_last_object_is_gone(
    sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]
) -> None:
    dev, module, stream = faulting
    objects = _sixty(dev)
    last = dev.create_event()
    _fault(module, stream)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _close_raising(stream, module)
        del objects
        _settle()
        [first] = _cuda_warnings(seen)  # the event is still alive: no summary yet
        assert not first.summary  # type: ignore[attr-defined]
        del last
        [_, summary] = _cuda_warnings(seen)
    assert isinstance(summary, StickyFaultWarning)
    assert summary.summary
    assert summary.leaked == 60


@pytest.mark.contract("W7")
def test_objects_collected_in_a_reference_cycle_give_one_warning_and_one_summary(
    sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]
) -> None:
    dev, module, stream = faulting
    objects: list[Any] = _sixty(dev)
    objects.append(objects)  # a cycle: only the garbage collector frees them, weak references first
    _fault(module, stream)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _close_raising(stream, module)
        del objects
        _settle()
    first, summary = _cuda_warnings(seen)
    assert isinstance(summary, StickyFaultWarning)
    assert summary.summary
    assert summary.leaked == 59
    assert isinstance(first, StickyFaultWarning)
    assert not first.summary


@pytest.mark.contract("W7")
def test_no_summary_when_nothing_was_counted(sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]) -> None:
    dev, module, stream = faulting
    event = dev.create_event()
    _fault(module, stream)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _close_raising(stream, module)
        del event
        _settle()
    [only] = _cuda_warnings(seen)
    assert isinstance(only, StickyFaultWarning)
    assert not only.summary


@pytest.mark.contract("W7")
def test_two_contexts_give_one_report_each(sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]) -> None:
    dev, module, stream = faulting
    other = Device(1)
    mine = _sixty(dev)
    theirs = [other.create_stream() for _ in range(5)] + [other.allocate(64) for _ in range(5)]
    other.set_current()
    dev.set_current()
    _fault(module, stream)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _close_raising(stream, module)
        del mine
        del theirs
        _settle()
    reports = _cuda_warnings(seen)
    assert all(isinstance(w, StickyFaultWarning) and w.first_fault == FIRST for w in reports)
    by_context: dict[str, list[tuple[bool, int]]] = {}
    for w in reports:
        assert isinstance(w, StickyFaultWarning)
        by_context.setdefault(w.context, []).append((w.summary, w.leaked))
    assert by_context == {repr(dev.context): [(False, 1), (True, 59)], repr(other.context): [(False, 1), (True, 9)]}


@pytest.mark.contract("W7", "S3")
def test_closes_that_raise_after_the_fault_warn_nothing(
    sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]
) -> None:
    from cuguard.resources import DeviceMemoryResource

    dev, module, stream = faulting
    pool = DeviceMemoryResource(dev)
    objects = [dev.create_stream(), dev.create_event(), dev.allocate(64), dev.allocate_pinned(64), pool.allocate(64)]
    _fault(module, stream)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _close_raising(*objects, stream, module)
        _settle()
        del objects
        _settle()
    assert seen == []


@pytest.mark.contract("W7", "E5")
def test_the_first_warning_names_the_launch_when_attribution_found_it(
    sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]
) -> None:
    dev, module, stream = faulting
    objects = _sixty(dev)
    with attribute_faults(), pytest.raises(StickyCUDAError):
        launch(stream, LaunchConfig(grid=2), module.get_kernel("poke"), 8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _close_raising(stream, module)
        del objects
    first, summary = _cuda_warnings(seen)
    assert isinstance(first, StickyFaultWarning)
    assert isinstance(summary, StickyFaultWarning)
    assert "'poke'" in first.first_fault
    assert "grid (2, 1, 1)" in first.first_fault
    assert first.first_fault in str(first)
    assert summary.first_fault == first.first_fault
    assert summary.leaked == 59


@pytest.mark.contract("W7", "W3")
def test_escalated_reports_reach_the_unraisable_hook_once_each(
    sim: SimulatedDriver, faulting: tuple[Device, Module, Stream]
) -> None:
    dev, module, stream = faulting
    objects = _sixty(dev)
    _fault(module, stream)
    caught: list[tuple[bool, int]] = []  # not the warnings: their tracebacks would keep objects alive

    def hook(args: Any) -> None:
        assert isinstance(args.exc_value, StickyFaultWarning)
        caught.append((args.exc_value.summary, args.exc_value.leaked))

    previous = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CUDAWarning)
            _close_raising(stream, module)
            del objects
            _settle()
    finally:
        sys.unraisablehook = previous
    assert caught == [(False, 1), (True, 59)]


# The program of the exit tests: faults, drops `drop` objects and keeps `keep` alive until exit;
# what reaches the warnings machinery, at exit included, is printed as JSON by an exit hook that
# runs after cuguard's (exit hooks run last registered, first run).
EXIT_PROGRAM = """
import atexit, json, sys, warnings

seen = []
warnings.simplefilter("always")
warnings.showwarning = lambda message, *args, **kwargs: seen.append(message)
atexit.register(lambda: print(json.dumps([
    {"summary": getattr(m, "summary", None), "leaked": getattr(m, "leaked", None), "text": str(m)} for m in seen
])))

from cuguard.errors import StickyCUDAError, install_driver
from cuguard.resources import Device, LaunchConfig, launch
from cuguard.testing import SimulatedDriver

sim = SimulatedDriver(devices=1, initialized=True)
sim.register_kernel("poke", lambda s, address: s.write(int(address), b"x"))
install_driver(sim)
dev = Device(0)
module = dev.load_module(PTX)
stream = dev.create_stream()
drop = [dev.create_event() for _ in range(int(sys.argv[1]))]
keep = [dev.create_stream() for _ in range(int(sys.argv[2]))]
launch(stream, LaunchConfig(), module.get_kernel("poke"), 8)
try:
    stream.sync()
except StickyCUDAError:
    pass
for obj in (stream, module):
    try:
        obj.close()
    except StickyCUDAError:
        pass
del drop
print(json.dumps([str(m) for m in seen]))
"""


def _run_exit_program(drop: int, keep: int) -> tuple[list[str], list[dict[str, Any]]]:
    code = f"PTX = {KERNELS_PTX!r}\n" + textwrap.dedent(EXIT_PROGRAM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("CUGUARD_DRIVER", None)
    out = subprocess.run(
        [sys.executable, "-c", code, str(drop), str(keep)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    during, at_exit = out.stdout.strip().splitlines()
    return json.loads(during), json.loads(at_exit)


@pytest.mark.contract("W7", "S1")
def test_the_summary_comes_at_exit_when_objects_are_still_pending() -> None:
    during, seen = _run_exit_program(drop=10, keep=5)
    assert len(during) == 1  # the first refused release; the context keeps 5 streams
    assert [(w["summary"], w["leaked"]) for w in seen] == [(False, 1), (True, 9)]
    assert "reported at exit, where 5 objects of that context are still alive" in seen[1]["text"]


@pytest.mark.contract("W7", "S1")
def test_exit_is_silent_when_nothing_is_pending() -> None:
    during, seen = _run_exit_program(drop=10, keep=0)  # the summary came when the last event went
    assert [(w["summary"], w["leaked"]) for w in seen] == [(False, 1), (True, 9)]
    assert len(during) == 2
    during, seen = _run_exit_program(drop=1, keep=3)  # one refused release: nothing was counted
    assert [(w["summary"], w["leaked"]) for w in seen] == [(False, 1)]
