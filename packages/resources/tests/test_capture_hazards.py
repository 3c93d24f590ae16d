"""Host functions on a stream being captured are refused: the bindings would make the graph crash (S2, E3)."""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors import CUDAError, ResourceClosedError, driver
from cuguard.resources import Device, Stream, as_stream
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


@pytest.mark.contract("E3", "G1")
def test_device_allocate_refuses_a_capturing_stream_as_the_pools_do(cuguard_driver: Any, device: Device) -> None:
    from cuda.bindings.driver import CUstreamCaptureMode

    stream = device.create_stream(non_blocking=True)
    device.set_current()
    (err,) = driver.cuStreamBeginCapture(stream.handle, CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    assert not err
    with record_calls() as log, pytest.raises(RuntimeError, match="graph memory"):
        device.allocate(64, stream)
    assert [c.name for c in log] == ["cuStreamIsCapturing"]  # the allocator was never asked
    err, graph = driver.cuStreamEndCapture(stream.handle)
    assert not err
    _, _, count = driver.cuGraphGetNodes(graph, 0)
    assert count == 0  # no allocation node: nothing reached the capture
    (err,) = driver.cuGraphDestroy(graph)
    assert not err
    buf = device.allocate(64, stream)  # outside a capture, as before (G3)
    buf.close()
    stream.sync()
    stream.close()


class _OwnStreamLike:
    """A stream-like of a layer above (as ``cuguard.graphs.GraphBuilder`` is): it hands over its Stream itself."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self.closed = False

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, int(self._stream.handle))

    def _as_cuguard_stream(self) -> Stream:
        if self.closed:
            raise ResourceClosedError(f"{self!r} is closed")
        return self._stream


@pytest.mark.contract("E3", "E1")
def test_a_stream_like_of_cuguard_is_its_stream_with_no_driver_call(cuguard_driver: Any, device: Device) -> None:
    from cuda.bindings.driver import CUstreamCaptureMode

    stream = device.create_stream(non_blocking=True)
    like = _OwnStreamLike(stream)
    with record_calls() as log:
        assert as_stream(like) is stream  # no foreign wrapper, no cuStreamGetCtx (the capture may refuse it)
    assert [c.name for c in log] == []
    buf = device.allocate(64)
    device.set_current()
    (err,) = driver.cuStreamBeginCapture(stream.handle, CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    assert not err
    (err,) = driver.cuStreamSynchronize(stream.handle)  # not allowed while capturing: invalidates the capture
    assert err
    # The copy itself reaches the stream and says what the driver said (E1), nothing from a stream lookup.
    with record_calls() as log, pytest.raises(CUDAError) as info:
        buf.copy_from(bytes(64), stream=like)
    assert info.value.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert info.value.call == "cuMemcpyHtoDAsync"
    assert "cuStreamGetCtx" not in [c.name for c in log]
    err, _ = driver.cuStreamEndCapture(stream.handle)
    assert info.value.name in repr(err)  # the capture ends with no graph
    like.closed = True
    with record_calls() as log, pytest.raises(ResourceClosedError, match="closed"):
        buf.copy_from(bytes(64), stream=like)  # the stream-like's refusal propagates, before the driver
    assert [c.name for c in log] == []
    buf.close()
    stream.close()
