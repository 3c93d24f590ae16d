"""Resources meet stream capture across layers: a GraphBuilder as a stream, and collection during a capture."""

from __future__ import annotations

import gc

import pytest

from cuguard.errors import CUDAError, ResourceClosedError
from cuguard.graphs import GraphBuilder
from cuguard.resources import Device, Stream
from cuguard.testing import record_calls

SIZE = 64


@pytest.mark.contract("E1", "E3")
def test_a_builder_is_its_stream_and_a_copy_on_an_invalidated_capture_says_so(dev: Device, stream: Stream) -> None:
    buf = dev.allocate(SIZE)
    builder = GraphBuilder(stream, mode="relaxed").begin_building()
    with pytest.raises(CUDAError):
        stream.sync()  # synchronizing a capturing stream invalidates its capture
    assert builder.status == "invalidated"
    with record_calls() as log, pytest.raises(CUDAError) as info:
        buf.copy_from(bytes(SIZE), stream=builder)
    # The copy itself is refused with the driver's status, never a lookup of the builder's stream.
    assert info.value.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert info.value.call == "cuMemcpyHtoDAsync"
    assert "cuStreamGetCtx" not in [c.name for c in log]
    with pytest.raises(CUDAError):
        builder.end_building()
    builder.close()
    with record_calls() as log, pytest.raises(ResourceClosedError, match="GraphBuilder"):
        buf.copy_from(bytes(SIZE), stream=builder)  # a closed builder is no stream (E3), before the driver
    assert [c.name for c in log] == []
    buf.close()


@pytest.mark.contract("O6")
def test_collecting_a_buffer_leaves_a_global_capture_of_the_thread_alone(dev: Device, stream: Stream) -> None:
    buf = dev.allocate(SIZE)
    pinned = dev.allocate_pinned(SIZE)
    builder = GraphBuilder(stream, mode="global").begin_building()
    del buf, pinned
    gc.collect()  # their frees would be prohibited in this thread's global mode
    assert builder.status == "active"
    builder.end_building()  # ends with a graph
    builder.close()


@pytest.mark.contract("O6", "W5")
def test_collecting_memory_that_needs_a_context_sync_waits_for_the_builders_capture(
    dev: Device, stream: Stream
) -> None:
    other = dev.create_stream()
    buf = dev.allocate(SIZE, other)
    other.close()  # freeing buf now synchronizes its context first: refused during any capture of it
    builder = GraphBuilder(stream, mode="global").begin_building()
    with record_calls() as log:
        del buf
        gc.collect()
    assert "cuCtxSynchronize" not in [c.name for c in log]  # deferred until the capture ends
    assert builder.status == "active"
    with record_calls() as log:
        builder.end_building()  # ends with a graph; the deferred collection runs after it
    names = [c.name for c in log]
    assert names.index("cuStreamEndCapture") < names.index("cuCtxSynchronize") < names.index("cuMemFree")
    assert all(c.status == 0 for c in log), [(c.name, c.status) for c in log]
    builder.close()
