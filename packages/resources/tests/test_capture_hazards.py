"""Host functions on a stream being captured are refused: the bindings would make the graph crash (S2, E3)."""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors import driver
from cuguard.resources import Device
from cuguard.testing import record_calls


@pytest.mark.contract("S2", "E3", "G3")
def test_launch_host_func_refuses_a_capturing_stream(cuguard_driver: Any, device: Device) -> None:
    from cuda.bindings.driver import CUstreamCaptureMode

    stream = device.create_stream(non_blocking=True)
    ran: list[int] = []
    device.set_current()
    (err,) = driver.cuStreamBeginCapture(stream.handle, CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    assert not err
    with record_calls() as log, pytest.raises(RuntimeError, match="captured"):
        stream.launch_host_func(lambda: ran.append(1))
    assert [c.name for c in log] == ["cuStreamIsCapturing"]
    err, graph = driver.cuStreamEndCapture(stream.handle)
    assert not err
    _, _, count = driver.cuGraphGetNodes(graph, 0)
    assert count == 0  # nothing was captured
    (err,) = driver.cuGraphDestroy(graph)
    assert not err
    # Outside a capture the stream takes host functions as before (G3).
    stream.launch_host_func(lambda: ran.append(1))
    stream.sync()
    assert ran == [1]
    stream.close()


@pytest.mark.contract("E3", "G1")
def test_a_pool_refuses_to_allocate_on_a_capturing_stream(cuguard_driver: Any, device: Device) -> None:
    from cuda.bindings.driver import CUstreamCaptureMode

    from cuguard.resources import DeviceMemoryResource

    mr = DeviceMemoryResource(device)
    stream = device.create_stream(non_blocking=True)
    device.set_current()
    (err,) = driver.cuStreamBeginCapture(stream.handle, CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    assert not err
    with record_calls() as log, pytest.raises(RuntimeError, match="graph memory"):
        mr.allocate(64, stream)
    assert [c.name for c in log] == ["cuStreamIsCapturing"]
    assert mr.held == 0
    err, graph = driver.cuStreamEndCapture(stream.handle)
    assert not err
    (err,) = driver.cuGraphDestroy(graph)
    assert not err
    buf = mr.allocate(64, stream)  # outside a capture, as before (G3)
    buf.close()
    stream.sync()
    stream.close()
