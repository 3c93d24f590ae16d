"""Two devices: per-device primary contexts, switching between them, cross-device work (G2, C1).

On the simulator these run with two simulated devices; with ``--cuguard-driver=real``
they need a machine with two GPUs and are skipped on one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cuguard.context import Context
from cuguard.resources import Device
from cuguard.testing import record_calls


@pytest.fixture
def devices(device: Device) -> tuple[Device, Device]:
    if Device.count() < 2:
        pytest.skip("needs two CUDA devices")
    return device, Device(1)


def _switches(log: list[Any]) -> list[str]:
    return [c.name for c in log if c.name in ("cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent")]


@pytest.mark.contract("G2", "C1")
@pytest.mark.parametrize("current", [0, 1])
def test_methods_of_one_device_while_the_other_is_current(devices: tuple[Device, Device], current: int) -> None:
    here, there = devices[current], devices[1 - current]
    assert here.context != there.context
    here.set_current()
    with record_calls() as log:
        stream = there.create_stream()
        event = there.create_event()
        buf = there.allocate(64, stream=stream)
    # Stream and event are created in their device's context: one switch in and one out
    # each. Stream-ordered allocation needs no context, so no switch at all.
    assert _switches(log) == ["cuCtxSetCurrent", "cuCtxSetCurrent"] * 2
    assert Context.current() == here.context
    assert stream.device == there.ordinal
    assert buf.device == there.ordinal
    buf.close()
    event.close()
    stream.close()
    assert Context.current() == here.context


@pytest.mark.contract("G2")
def test_copies_between_devices(devices: tuple[Device, Device]) -> None:
    d0, d1 = devices
    data = np.arange(128, dtype=np.uint8)
    out = np.zeros_like(data)
    with d0.allocate(128) as a, d1.allocate(128) as b:
        a.copy_from(data)
        b.copy_from(a)
        b.copy_to(out)
    assert (out == data).all()
    assert Context.current() is None


def test_event_on_one_device_waited_from_the_other(devices: tuple[Device, Device]) -> None:
    d0, d1 = devices
    with d0.create_stream() as s0, d1.create_stream() as s1, d0.allocate(16, stream=s0) as buf:
        buf.fill(3, stream=s0)
        done = s0.record()
        s1.wait(done)
        s1.wait(s0)
        s1.sync()
        assert done.query()
        done.close()
    assert Context.current() is None


@pytest.mark.contract("E3")
def test_stream_of_another_device_is_refused_for_allocation(devices: tuple[Device, Device]) -> None:
    d0, d1 = devices
    assert d1.context is not None  # retained before the calls are recorded
    with d0.create_stream() as s0, record_calls() as log, pytest.raises(ValueError, match="belongs to device 0"):
        d1.allocate(8, stream=s0)
    assert log == []
