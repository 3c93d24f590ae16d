"""Copies between pinned and device memory of every kind queued on a capturing GraphBuilder: the graph keeps
both buffers (G6, W5), and what it copies is what the program wrote."""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.graphs import GraphBuilder
from cuguard.resources import Buffer, Device, LegacyPinnedMemoryResource, PinnedBuffer, PinnedMemoryResource, Stream
from cuguard.testing import SimulatedDriver, record_calls, settle

SIZE = 64


def _live(drv: Any, handle: int) -> bool:
    """Whether the simulator still has the allocation ``handle`` (True on a GPU: its books are not visible)."""
    if not isinstance(drv, SimulatedDriver):
        return True
    return any(o.handle == handle for o in drv.live_objects())


def _pinned(kind: str, dev: Device, stream: Stream, resources: list[Any]) -> PinnedBuffer:
    if kind == "pinned":
        return dev.allocate_pinned(SIZE)
    mr = PinnedMemoryResource(dev) if kind == "pinned pool" else LegacyPinnedMemoryResource(dev)
    resources.append(mr)
    buf = mr.allocate(SIZE, stream)
    stream.sync()
    return buf


@pytest.mark.contract("G6", "W5")
@pytest.mark.parametrize("src_kind", ["pinned", "pinned pool", "legacy pinned", "device"])
@pytest.mark.parametrize("dst_kind", ["pinned", "pinned pool", "legacy pinned"])
def test_a_captured_copy_into_pinned_memory_keeps_both_buffers_with_the_graph(
    cuguard_driver: Any, dev: Device, stream: Stream, src_kind: str, dst_kind: str
) -> None:
    resources: list[Any] = []
    src: Buffer | PinnedBuffer = (
        dev.allocate(SIZE, stream) if src_kind == "device" else _pinned(src_kind, dev, stream, resources)
    )
    dst = _pinned(dst_kind, dev, stream, resources)
    if isinstance(src, Buffer):
        src.fill(0x6B, stream)
        stream.sync()
    else:
        src.numpy()[:] = 0x6B
    dst.numpy()[:] = 0
    handles = [int(src._handle), int(dst._handle)]
    builder = GraphBuilder(stream).begin_building()
    dst.copy_from(src, stream=builder)
    with record_calls() as log:
        src.close()  # the capture uses it: nothing is freed, nothing enters the capture
    assert [c.name for c in log if "Free" in c.name] == []
    assert src.closed
    graph = builder.end_building().complete()
    builder.close()
    assert bytes(dst.numpy()) == bytes(SIZE)  # captured, not run
    graph.launch(stream)
    stream.sync()
    assert bytes(dst.numpy()) == b"\x6b" * SIZE
    settle(cuguard_driver)
    assert _live(cuguard_driver, handles[0])  # the executable graph still reads it
    graph.close()
    del graph
    settle(cuguard_driver)
    assert not _live(cuguard_driver, handles[0]) or not isinstance(cuguard_driver, SimulatedDriver)
    dst.close()
    stream.sync()
    for mr in resources:
        if isinstance(mr, PinnedMemoryResource):
            mr.close()
