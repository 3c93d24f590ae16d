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


def _alloc_params(size: int) -> cb.CUDA_MEM_ALLOC_NODE_PARAMS:
    params = cb.CUDA_MEM_ALLOC_NODE_PARAMS()
    params.poolProps.allocType = cb.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    params.poolProps.location.type = cb.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    params.poolProps.location.id = 0
    params.bytesize = size
    return params


@pytest.mark.contract("B2")
def test_a_graph_holding_memory_nodes_cannot_be_a_child_graph(drv: SimulatedDriver) -> None:
    # As on the H200 (differential scenario child_graph_with_memory_nodes): CUDA_ERROR_NOT_SUPPORTED.
    _, child = drv.cuGraphCreate(0)
    params = _alloc_params(256)
    _, alloc = drv.cuGraphAddMemAllocNode(child, None, 0, params)
    assert drv.cuGraphAddMemFreeNode(child, [alloc], 1, params.dptr)[0] == OK
    _, parent = drv.cuGraphCreate(0)
    err, node = drv.cuGraphAddChildGraphNode(parent, None, 0, child)
    assert (err, node) == (cb.CUresult.CUDA_ERROR_NOT_SUPPORTED, None)
    assert drv.cuGraphGetNodes(parent, 0)[-1] == 0
    drv.cuGraphDestroy(parent)
    drv.cuGraphDestroy(child)


@pytest.mark.contract("B2")
def test_an_update_that_changes_a_child_graphs_layout_is_refused(drv: SimulatedDriver) -> None:
    # As on the H200 (differential scenario update_with_a_changed_child_graph_layout).
    parents = []
    for n in (1, 2):
        _, child = drv.cuGraphCreate(0)
        for _ in range(n):
            drv.cuGraphAddEmptyNode(child, None, 0)
        _, parent = drv.cuGraphCreate(0)
        drv.cuGraphAddChildGraphNode(parent, None, 0, child)
        drv.cuGraphDestroy(child)
        parents.append(parent)
    _, exe = drv.cuGraphInstantiate(parents[0], 0)
    assert drv.cuGraphExecUpdate(exe, parents[1]) == (cb.CUresult.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, None)
    drv.cuGraphExecDestroy(exe)
    for parent in parents:
        drv.cuGraphDestroy(parent)
