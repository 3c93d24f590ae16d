"""Regressions found by the failure-point sweep (G1, S2)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from cuguard.errors import CUDAError
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device
from cuguard.testing import SimulatedDriver, inject, leak_check, simulated_driver


@pytest.mark.contract("G1")
def test_failed_first_owner_node_leaves_no_user_object(dev: Device, cuguard_driver: Any) -> None:
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("counts user objects with the simulator's accounting")
    sim = cuguard_driver
    with dev.allocate(64) as buf, GraphDefinition(dev) as g:
        before = [o for o in sim.live_objects() if o.kind == "user_object"]
        with inject("cuGraphAddMemsetNode", 2), pytest.raises(CUDAError):
            g.memset(buf, 0)
        after = [o for o in sim.live_objects() if o.kind == "user_object"]
        assert after == before
        assert g.nodes == frozenset()
        g.memset(buf, 1)  # G3: still usable, and now it keeps the buffer alive


@pytest.mark.contract("S2")
def test_definition_of_an_uninstalled_driver_is_never_destroyed_elsewhere() -> None:
    with simulated_driver():
        first_graph = GraphDefinition()
    with simulated_driver() as second, leak_check():
        other = GraphDefinition()  # may get the same handle number in the new simulator
        del first_graph
        gc.collect()
        assert not second.double_release
        assert not second.misuse
        other.close()


@pytest.mark.contract("S2", "G2")
def test_kernel_node_added_with_no_context_current(dev: Device, module: Any) -> None:
    from cuguard.context import Context
    from cuguard.resources import LaunchConfig

    assert Context.current() is None
    with GraphDefinition(dev) as g:
        node = g.launch(LaunchConfig(), module.get_kernel("fill_u32"), dev.allocate(16), 7, 4)
        node.set_args(dev.allocate(16), 8, 4)
    assert Context.current() is None


@pytest.mark.contract("E3", "G3")
def test_definition_with_memory_nodes_refuses_removal_and_clone_before_the_driver(dev: Device) -> None:
    from cuguard.testing import record_calls

    with GraphDefinition(dev) as g:
        a = g.empty()
        b = a.empty()
        alloc = b.allocate(256)
        with record_calls() as log:
            with pytest.raises(ValueError, match="memory allocation or free nodes"):
                a.destroy()
            with pytest.raises(ValueError, match="memory allocation or free nodes"):
                b.pred.discard(a)
            with pytest.raises(ValueError, match="memory allocation or free nodes"):
                g.clone()
        assert [c.name for c in log if c.name.startswith("cuGraph") and "Get" not in c.name] == []
        assert len(g.nodes) == 3
        alloc.deallocate(alloc)
        with g.instantiate():  # G3: still usable
            pass
