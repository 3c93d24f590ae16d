"""CUDA's rules for what a graph uses, as the simulated driver encodes them.

CUDA requires the events and modules a graph uses to outlive every launch of it; what the real
driver does otherwise is undefined, so the simulator records such a launch as misuse instead of
skipping the node silently.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._sim import SimulatedDriver, simulated_driver

OK = cb.CUresult.CUDA_SUCCESS
PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry empty() { ret; }
\x00"""


@pytest.fixture
def drv() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=1) as sim:
        sim.cuInit(0)
        _, ctx = sim.cuDevicePrimaryCtxRetain(0)
        sim.cuCtxSetCurrent(ctx)
        yield sim
        sim.cuCtxSetCurrent(cb.CUcontext(0))


@pytest.mark.contract("B2", "S2")
@pytest.mark.parametrize("kind", ["record", "wait"])
def test_event_node_launched_after_its_event_was_destroyed_is_misuse(drv: SimulatedDriver, kind: str) -> None:
    _, stream = drv.cuStreamCreate(0)
    _, event = drv.cuEventCreate(0)
    _, graph = drv.cuGraphCreate(0)
    add = drv.cuGraphAddEventRecordNode if kind == "record" else drv.cuGraphAddEventWaitNode
    assert add(graph, None, 0, event)[0] == OK
    _, exe = drv.cuGraphInstantiate(graph, 0)
    assert drv.cuGraphLaunch(exe, stream) == (OK,)  # fine while the event lives
    assert drv.misuse == []
    assert drv.cuEventDestroy(event) == (OK,)
    drv.cuGraphLaunch(exe, stream)
    assert [(m.call, "destroyed" in m.description) for m in drv.misuse] == [("cuGraphLaunch", True)]
    drv.cuGraphExecDestroy(exe)
    drv.cuGraphDestroy(graph)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2", "S2")
def test_kernel_node_launched_after_its_module_was_unloaded_is_misuse(drv: SimulatedDriver) -> None:
    drv.register_kernel("empty", lambda sim: None)
    _, stream = drv.cuStreamCreate(0)
    _, module = drv.cuModuleLoadData(PTX)
    _, function = drv.cuModuleGetFunction(module, b"empty")
    params = cb.CUDA_KERNEL_NODE_PARAMS()
    params.func = function
    params.gridDimX = params.gridDimY = params.gridDimZ = 1
    params.blockDimX = params.blockDimY = params.blockDimZ = 1
    _, graph = drv.cuGraphCreate(0)
    assert drv.cuGraphAddKernelNode(graph, None, 0, params)[0] == OK
    _, exe = drv.cuGraphInstantiate(graph, 0)
    assert drv.cuGraphLaunch(exe, stream) == (OK,)
    assert drv.misuse == []
    assert drv.cuModuleUnload(module) == (OK,)
    drv.cuGraphLaunch(exe, stream)
    assert [(m.call, "unloaded" in m.description) for m in drv.misuse] == [("cuGraphLaunch", True)]
    drv.cuGraphExecDestroy(exe)
    drv.cuGraphDestroy(graph)
    drv.cuStreamDestroy(stream)
