"""Fault attribution names a faulting graph launch (contract E5), on the simulated driver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import KERNELS_PTX

from cuguard.errors import StickyCUDAError, attribute_faults
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, LaunchConfig, Module
from cuguard.testing import SimulatedDriver


@pytest.fixture
def faulting(sim: SimulatedDriver) -> Iterator[tuple[Device, Module]]:
    sim.register_kernel("add_u32", lambda s, address, value, n: s.write(int(address) + (1 << 40), b"x"))
    dev = Device(0)
    yield dev, dev.load_module(KERNELS_PTX)
    sim.poison(None)  # a test convenience only: a real driver never recovers


@pytest.mark.contract("E5")
def test_attribution_names_a_faulting_graph_launch(sim: SimulatedDriver, faulting: tuple[Device, Module]) -> None:
    dev, module = faulting
    stream = dev.create_stream()
    g = GraphDefinition(dev)
    g.launch(LaunchConfig(), module.get_kernel("add_u32"), 8, 1, 1)
    graph = g.instantiate()
    with attribute_faults(), pytest.raises(StickyCUDAError) as info:
        graph.launch(stream)
    assert "executable graph" in (info.value.launch or "")
    sim.poison(None)  # a test convenience only, so that what the test made can be released
    graph.close()
    g.close()
    stream.close()
