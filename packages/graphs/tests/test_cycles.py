"""An edge that would close a cycle is refused before the driver, naming the nodes (E3, G3)."""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors import CUDAError
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device
from cuguard.testing import inject, record_calls

MUTATING = {"cuGraphAddDependencies", "cuGraphRemoveDependencies"}


@pytest.mark.contract("E3", "G3")
def test_connect_refuses_a_cycle_and_names_its_nodes(dev: Device) -> None:
    with GraphDefinition(dev) as g:
        a = g.empty()
        b = a.empty()
        c = b.empty()
        before = g.edges
        with record_calls() as log, pytest.raises(ValueError, match="would make a cycle") as info:
            g.connect((c, a))
        message = str(info.value)
        for node in (a, b, c):
            assert repr(node) in message
        assert not [call for call in log if call.name in MUTATING]
        assert g.edges == before
        # The same through the set views, and in a batch whose other edges are fine: nothing changes.
        d = g.empty()
        with pytest.raises(ValueError, match="would make a cycle"):
            a.pred.add(c)
        with pytest.raises(ValueError, match="would make a cycle"):
            g.connect((c, d), (d, a))
        assert g.edges == before
        # Removing an edge in the same change can make room for the reverse one.
        b.succ.clear()
        c.succ.add(b)
        assert (c, b) in g.edges


@pytest.mark.contract("E1", "G3")
def test_a_failing_edge_listing_refuses_the_change(dev: Device) -> None:
    with GraphDefinition(dev) as g:
        a = g.empty()
        b = g.empty()
        with inject("cuGraphGetEdges", 2, nth=1), pytest.raises(CUDAError, match="cuGraphGetEdges"):
            g.connect((a, b))
        assert g.edges == frozenset()


@pytest.mark.contract("E3")
def test_a_kernel_node_refuses_launch_settings_it_cannot_carry(dev: Device, module: Any) -> None:
    from cuguard.resources import LaunchConfig

    kernel = module.get_kernel("fill_u32")
    with GraphDefinition(dev) as g, dev.allocate(64) as buf:
        configs = (
            LaunchConfig(1, 16, cluster=1),
            LaunchConfig(1, 16, cooperative_launch=True),
            LaunchConfig(1, 16, priority=-1),
            LaunchConfig(1, 16, programmatic_stream_serialization=True),
        )
        for config in configs:
            with record_calls() as log, pytest.raises(ValueError, match="cannot take a cluster, cooperative"):
                g.launch(config, kernel, buf, 1, 16)
            assert "cuGraphAddKernelNode" not in [c.name for c in log]


@pytest.mark.contract("S2")
def test_a_graph_whose_module_or_event_was_closed_refuses_to_launch(dev: Device, module: Any) -> None:
    from cuguard.errors import ResourceClosedError
    from cuguard.resources import LaunchConfig

    event = dev.create_event()
    with GraphDefinition(dev) as g, dev.allocate(64) as buf, dev.create_stream() as stream:
        g.launch(LaunchConfig(1, 16), module.get_kernel("fill_u32"), buf, 1, 16).record(event)
        with g.instantiate() as graph:
            graph.launch(stream)
            stream.sync()
            event.close()
            with record_calls() as log, pytest.raises(ResourceClosedError, match="was closed"):
                graph.launch(stream)
            assert "cuGraphLaunch" not in [c.name for c in log]
