"""Typed views as kernel arguments of graphs: the memory under a view belongs to the graph as a buffer does (W5).

On the simulator the driver's books show what was freed when; on a GPU the values the graph writes show that no
memory was handed out again under it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cuguard.errors import ResourceClosedError
from cuguard.graphs import GraphBuilder, GraphDefinition
from cuguard.resources import Device, LaunchConfig, Module, Stream, StridedMemoryView, launch
from cuguard.testing import SimulatedDriver, settle


def _live(drv: Any, handle: int) -> bool:
    """Whether the simulator still has the allocation ``handle`` (True on a GPU: its books are not visible)."""
    if not isinstance(drv, SimulatedDriver):
        return True
    return any(o.handle == handle for o in drv.live_objects())


def _u32(buf: Any) -> list[int]:
    host = np.zeros(buf.size // 4, dtype=np.uint32)
    buf.copy_to(host)
    return [int(v) for v in host]


@pytest.mark.contract("W5", "G6")
@pytest.mark.parametrize("how", ["builder.launch", "launch"])
def test_memory_under_a_captured_view_is_not_freed_before_the_graph_is_gone(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module, how: str
) -> None:
    buf = dev.allocate(16, stream)
    stream.sync()
    handle = int(buf._handle)
    view = StridedMemoryView.from_buffer(buf, (4,), dtype=np.uint32)
    kernel = module.get_kernel("fill_u32")
    config = LaunchConfig(grid=1, block=4)
    builder = GraphBuilder(stream).begin_building()
    if how == "builder.launch":
        builder.launch(config, kernel, view, np.uint32(7), 4)
    else:
        launch(builder, config, kernel, view, np.uint32(7), 4)
    graph = builder.end_building().complete()
    builder.close()
    del view
    buf.close()  # closed for use at once...
    with pytest.raises(ResourceClosedError):
        buf.handle  # noqa: B018
    settle(cuguard_driver)
    assert _live(cuguard_driver, handle)  # ...but the graph still writes to the memory under the view
    other = dev.allocate(16, stream)
    other.fill(0, stream)
    graph.launch(stream)
    stream.sync()
    assert _u32(other) == [0, 0, 0, 0]  # no new allocation got the memory the graph writes to
    graph.close()
    del graph
    settle(cuguard_driver)
    assert not _live(cuguard_driver, handle) or not isinstance(cuguard_driver, SimulatedDriver)
    other.close()


@pytest.mark.contract("W5")
def test_memory_under_a_view_of_a_kernel_node_is_not_freed_before_the_graph_is_gone(
    cuguard_driver: Any, dev: Device, stream: Stream, module: Module
) -> None:
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("the simulator's books show when the memory is freed")
    buf = dev.allocate(16)
    handle = int(buf._handle)
    definition = GraphDefinition(dev)
    definition.launch(
        LaunchConfig(grid=1, block=4),
        module.get_kernel("fill_u32"),
        StridedMemoryView.from_buffer(buf, (4,), dtype=np.uint32),
        np.uint32(7),
        4,
    )
    graph = definition.instantiate()
    buf.close()
    settle(cuguard_driver)
    try:
        assert _live(cuguard_driver, handle)
    finally:
        graph.close()
        definition.close()
