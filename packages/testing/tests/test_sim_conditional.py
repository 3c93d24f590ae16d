"""Conditional nodes and per-node updates of executable graphs, as the simulated driver models them.

Called through the simulator's own functions (the cuda-bindings signatures), so each CUDA rule
it encodes is checked where it is decided.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._bindings import EDGE_DATA
from cuguard.testing._sim import SimulatedDriver, simulated_driver

OK = cb.CUresult.CUDA_SUCCESS
INVALID = cb.CUresult.CUDA_ERROR_INVALID_VALUE
T = cb.CUgraphNodeType
C = cb.CUgraphConditionalNodeType
PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry set_condition(.param .u64 handle, .param .u32 value) { ret; }
\x00"""


@pytest.fixture
def drv() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=1) as sim:
        sim.cuInit(0)
        _, ctx = sim.cuDevicePrimaryCtxRetain(0)
        sim.cuCtxSetCurrent(ctx)
        sim.ctx = ctx  # type: ignore[attr-defined]
        yield sim
        sim.cuCtxSetCurrent(cb.CUcontext(0))


def _add(  # noqa: PLR0917 - the fields of the node parameters
    drv: SimulatedDriver, graph: Any, handle: Any, kind: Any, size: int, ctx: Any
) -> tuple[Any, Any, Any]:
    params = cb.CUgraphNodeParams()
    params.type = T.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = kind
    params.conditional.size = size
    params.conditional.ctx = ctx
    if EDGE_DATA:
        err, node = drv.cuGraphAddNode(graph, None, None, 0, params)
    else:
        err, node = drv.cuGraphAddNode(graph, None, 0, params)  # type: ignore[call-arg]
    return err, node, params


def _memset(drv: SimulatedDriver, graph: Any, ptr: Any, value: int, n: int) -> Any:
    p = cb.CUDA_MEMSET_NODE_PARAMS()
    p.dst, p.value, p.elementSize, p.width, p.height = ptr, value, 1, n, 1
    err, node = drv.cuGraphAddMemsetNode(graph, None, 0, p, drv.ctx)  # type: ignore[attr-defined]
    assert err == OK
    return node


@pytest.mark.contract("B2")
def test_a_conditional_node_fills_phgraph_out_with_bodies_it_owns(drv: SimulatedDriver) -> None:
    _, graph = drv.cuGraphCreate(0)
    err, handle = drv.cuGraphConditionalHandleCreate(graph, drv.ctx, 1, 1)  # type: ignore[attr-defined]
    assert err == OK
    err, node, params = _add(drv, graph, handle, C.CU_GRAPH_COND_TYPE_SWITCH, 3, drv.ctx)  # type: ignore[attr-defined]
    assert err == OK
    bodies = params.conditional.phGraph_out
    assert len(bodies) == 3
    assert drv.cuGraphNodeGetType(node) == (OK, T.CU_GRAPH_NODE_TYPE_CONDITIONAL)
    assert drv.cuGraphAddEmptyNode(bodies[0], None, 0)[0] == OK
    assert drv.cuGraphDestroyNode(node) == (OK,)
    # The bodies went with the node.
    assert drv.cuGraphAddEmptyNode(bodies[1], None, 0)[0] == INVALID
    assert [u.call for u in drv.use_after_release] == ["cuGraphAddEmptyNode"]
    drv.use_after_release.clear()
    drv.cuGraphDestroy(graph)


@pytest.mark.contract("B2")
@pytest.mark.parametrize(
    ("kind", "size"),
    [(C.CU_GRAPH_COND_TYPE_IF, 3), (C.CU_GRAPH_COND_TYPE_WHILE, 2), (C.CU_GRAPH_COND_TYPE_SWITCH, 0)],
)
def test_cuda_sizes_of_conditional_nodes_are_enforced(drv: SimulatedDriver, kind: Any, size: int) -> None:
    _, graph = drv.cuGraphCreate(0)
    _, handle = drv.cuGraphConditionalHandleCreate(graph, drv.ctx, 0, 0)  # type: ignore[attr-defined]
    assert _add(drv, graph, handle, kind, size, drv.ctx)[0] == INVALID  # type: ignore[attr-defined]
    assert drv.cuGraphGetNodes(graph, 0) == (OK, [], 0)
    drv.cuGraphDestroy(graph)


@pytest.mark.contract("B2")
def test_a_node_takes_any_live_handle_in_the_handles_context(drv: SimulatedDriver) -> None:
    _, graph = drv.cuGraphCreate(0)
    _, other = drv.cuGraphCreate(0)
    _, mine = drv.cuGraphConditionalHandleCreate(graph, drv.ctx, 1, 1)  # type: ignore[attr-defined]
    _, theirs = drv.cuGraphConditionalHandleCreate(other, drv.ctx, 1, 1)  # type: ignore[attr-defined]
    # A handle of another graph is taken (the H200's driver answered success).
    assert _add(drv, graph, theirs, C.CU_GRAPH_COND_TYPE_IF, 1, drv.ctx)[0] == OK  # type: ignore[attr-defined]
    assert drv.cuGraphGetNodes(graph, 0)[-1] == 1
    err, _, params = _add(drv, graph, mine, C.CU_GRAPH_COND_TYPE_IF, 1, drv.ctx)  # type: ignore[attr-defined]
    assert err == OK
    (body,) = params.conditional.phGraph_out
    _, inner = drv.cuGraphConditionalHandleCreate(graph, drv.ctx, 1, 1)  # type: ignore[attr-defined]
    assert _add(drv, body, inner, C.CU_GRAPH_COND_TYPE_WHILE, 1, drv.ctx)[0] == OK  # type: ignore[attr-defined]
    _, spare = drv.cuGraphConditionalHandleCreate(graph, drv.ctx, 1, 1)  # type: ignore[attr-defined]
    assert _add(drv, graph, spare, C.CU_GRAPH_COND_TYPE_IF, 1, cb.CUcontext(0))[0] != OK  # not the handle's context
    drv.cuGraphDestroy(graph)
    drv.cuGraphDestroy(other)


@pytest.mark.contract("B2")
def test_a_node_in_a_body_takes_handles_of_the_body_or_a_graph_holding_it_only(drv: SimulatedDriver) -> None:
    # As the H200's driver answered: in a body, a handle of an unrelated graph is refused (at the top
    # level any live graph's handle is taken); handles of the body and of the enclosing graphs are taken.
    ctx = drv.ctx  # type: ignore[attr-defined]
    _, graph = drv.cuGraphCreate(0)
    _, unrelated = drv.cuGraphCreate(0)
    _, outer = drv.cuGraphConditionalHandleCreate(graph, ctx, 1, 1)
    _, _, params = _add(drv, graph, outer, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)
    (body,) = params.conditional.phGraph_out
    _, theirs = drv.cuGraphConditionalHandleCreate(unrelated, ctx, 1, 1)
    assert _add(drv, body, theirs, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)[0] == INVALID
    assert drv.cuGraphGetNodes(body, 0)[-1] == 0
    _, of_body = drv.cuGraphConditionalHandleCreate(body, ctx, 1, 1)
    err, _, inner = _add(drv, body, of_body, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)
    assert err == OK
    (nested,) = inner.conditional.phGraph_out
    # Two levels down: the root's handle is still one of a graph holding the body.
    _, of_root = drv.cuGraphConditionalHandleCreate(graph, ctx, 1, 1)
    assert _add(drv, nested, of_root, C.CU_GRAPH_COND_TYPE_WHILE, 1, ctx)[0] == OK
    assert _add(drv, nested, theirs, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)[0] == INVALID
    drv.cuGraphDestroy(graph)
    drv.cuGraphDestroy(unrelated)


@pytest.mark.contract("B2")
@pytest.mark.parametrize("shape", ["never_used", "node_destroyed", "in_a_body"])
def test_instantiate_refuses_a_handle_no_live_node_uses(drv: SimulatedDriver, shape: str) -> None:
    # The H200's driver refused (CUDA_ERROR_INVALID_VALUE) a graph holding a handle made and never used,
    # and one whose conditional node was destroyed; handles made on bodies are held to the same rule.
    ctx = drv.ctx  # type: ignore[attr-defined]
    _, graph = drv.cuGraphCreate(0)
    _, handle = drv.cuGraphConditionalHandleCreate(graph, ctx, 1, 1)
    _, _, params = _add(drv, graph, handle, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)
    (body,) = params.conditional.phGraph_out
    _, elsewhere = drv.cuGraphCreate(0)
    drv.cuGraphConditionalHandleCreate(elsewhere, ctx, 0, 0)  # not in the tree: no matter
    err, exe = drv.cuGraphInstantiate(graph, 0)
    assert err == OK
    drv.cuGraphExecDestroy(exe)
    if shape == "never_used":
        drv.cuGraphConditionalHandleCreate(graph, ctx, 0, 0)
    elif shape == "node_destroyed":
        _, spare = drv.cuGraphConditionalHandleCreate(graph, ctx, 0, 0)
        _, node, _ = _add(drv, graph, spare, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)
        assert drv.cuGraphDestroyNode(node) == (OK,)
    else:
        drv.cuGraphConditionalHandleCreate(body, ctx, 0, 0)
    assert drv.cuGraphInstantiate(graph, 0) == (INVALID, None)
    drv.cuGraphDestroy(graph)
    drv.cuGraphDestroy(elsewhere)


@pytest.mark.contract("B2")
def test_graphs_with_conditional_nodes_are_neither_cloned_nor_embedded(drv: SimulatedDriver) -> None:
    _, graph = drv.cuGraphCreate(0)
    _, parent = drv.cuGraphCreate(0)
    _, handle = drv.cuGraphConditionalHandleCreate(graph, drv.ctx, 1, 1)  # type: ignore[attr-defined]
    assert _add(drv, graph, handle, C.CU_GRAPH_COND_TYPE_IF, 1, drv.ctx)[0] == OK  # type: ignore[attr-defined]
    assert drv.cuGraphClone(graph) == (cb.CUresult.CUDA_ERROR_NOT_SUPPORTED, None)
    assert drv.cuGraphAddChildGraphNode(parent, None, 0, graph) == (cb.CUresult.CUDA_ERROR_NOT_SUPPORTED, None)
    assert drv.cuGraphGetNodes(parent, 0)[-1] == 0
    drv.cuGraphDestroy(parent)
    drv.cuGraphDestroy(graph)


@pytest.mark.contract("B2")
def test_conditions_are_assigned_their_default_at_each_launch_and_set_by_kernels(drv: SimulatedDriver) -> None:
    drv.register_kernel("set_condition", lambda s, handle, value: s.set_conditional(handle, value))
    _, stream = drv.cuStreamCreate(0)
    _, dev_ptr = drv.cuMemAlloc(4)
    _, module = drv.cuModuleLoadData(PTX)
    _, function = drv.cuModuleGetFunction(module, b"set_condition")
    _, graph = drv.cuGraphCreate(0)
    _, handle = drv.cuGraphConditionalHandleCreate(graph, drv.ctx, 0, 1)  # type: ignore[attr-defined]
    _, _node, params = _add(drv, graph, handle, C.CU_GRAPH_COND_TYPE_IF, 2, drv.ctx)  # type: ignore[attr-defined]
    then, otherwise = params.conditional.phGraph_out
    _memset(drv, then, dev_ptr, 1, 4)
    _memset(drv, otherwise, dev_ptr, 2, 4)
    _, exe = drv.cuGraphInstantiate(graph, 0)
    assert drv.cuGraphLaunch(exe, stream) == (OK,)
    drv.cuStreamSynchronize(stream)
    assert drv.read(int(dev_ptr), 4) == b"\x02" * 4  # the default, 0: the else body
    # A kernel before the node sets it; the next launch assigns the default again first.
    kp = cb.CUDA_KERNEL_NODE_PARAMS()
    kp.func = function
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1
    cells = [ctypes.c_uint64(int(handle)), ctypes.c_uint32(1)]
    array = (ctypes.c_void_p * 2)(*[ctypes.addressof(c) for c in cells])
    kp.kernelParams = ctypes.addressof(array)
    _, graph2 = drv.cuGraphCreate(0)
    _, handle2 = drv.cuGraphConditionalHandleCreate(graph2, drv.ctx, 0, 1)  # type: ignore[attr-defined]
    cells[0].value = int(handle2)
    _, setter = drv.cuGraphAddKernelNode(graph2, None, 0, kp)
    params2 = cb.CUgraphNodeParams()
    params2.type = T.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params2.conditional.handle = handle2
    params2.conditional.type = C.CU_GRAPH_COND_TYPE_IF
    params2.conditional.size = 1
    params2.conditional.ctx = drv.ctx  # type: ignore[attr-defined]
    if EDGE_DATA:
        err, _ = drv.cuGraphAddNode(graph2, [setter], None, 1, params2)
    else:
        err, _ = drv.cuGraphAddNode(graph2, [setter], 1, params2)  # type: ignore[call-arg]
    assert err == OK
    _memset(drv, params2.conditional.phGraph_out[0], dev_ptr, 9, 4)
    _, exe2 = drv.cuGraphInstantiate(graph2, 0)
    assert drv.cuGraphLaunch(exe2, stream) == (OK,)
    drv.cuStreamSynchronize(stream)
    assert drv.read(int(dev_ptr), 4) == b"\x09" * 4
    with pytest.raises(RuntimeError):
        drv.set_conditional(int(handle2), 0)  # device code only
    for e in (exe, exe2):
        drv.cuGraphExecDestroy(e)
    for g in (graph, graph2):
        drv.cuGraphDestroy(g)
    drv.cuModuleUnload(module)
    drv.cuMemFree(dev_ptr)
    drv.cuStreamDestroy(stream)


@pytest.mark.contract("B2")
def test_per_node_updates_follow_cudas_rules(drv: SimulatedDriver) -> None:
    _, stream = drv.cuStreamCreate(0)
    _, a = drv.cuMemAlloc(8)
    _, b = drv.cuMemAlloc(8)
    _, graph = drv.cuGraphCreate(0)
    memset = _memset(drv, graph, a, 1, 8)
    _, empty = drv.cuGraphAddEmptyNode(graph, None, 0)
    _, other_graph = drv.cuGraphCreate(0)
    foreign = _memset(drv, other_graph, b, 1, 8)
    _, exe = drv.cuGraphInstantiate(graph, 0)
    p = cb.CUDA_MEMSET_NODE_PARAMS()
    p.dst, p.value, p.elementSize, p.width, p.height = b, 5, 1, 8, 1
    assert drv.cuGraphExecMemsetNodeSetParams(exe, memset, p, drv.ctx) == (OK,)  # type: ignore[attr-defined]
    assert drv.cuGraphExecMemsetNodeSetParams(exe, foreign, p, drv.ctx) == (INVALID,)  # type: ignore[attr-defined]
    assert drv.cuGraphExecMemsetNodeSetParams(exe, empty, p, drv.ctx) == (INVALID,)  # type: ignore[attr-defined]
    p.height, p.pitch = 2, 8  # two-dimensional: refused
    assert drv.cuGraphExecMemsetNodeSetParams(exe, memset, p, drv.ctx) == (INVALID,)  # type: ignore[attr-defined]
    assert drv.cuGraphNodeSetEnabled(exe, empty, 0) == (INVALID,)  # only kernel, memset and memcpy nodes
    assert drv.cuGraphNodeSetEnabled(exe, memset, 0) == (OK,)
    assert drv.cuGraphNodeGetEnabled(exe, memset) == (OK, 0)
    drv.cuMemsetD8(b, 0, 8)
    drv.cuGraphLaunch(exe, stream)
    drv.cuStreamSynchronize(stream)
    assert drv.read(int(b), 8) == b"\x00" * 8  # disabled
    assert drv.cuGraphNodeSetEnabled(exe, memset, 1) == (OK,)
    drv.cuGraphLaunch(exe, stream)
    drv.cuStreamSynchronize(stream)
    assert drv.read(int(b), 8) == b"\x05" * 8  # the updated memset, not the definition's
    drv.cuGraphExecDestroy(exe)
    drv.cuGraphDestroy(graph)
    drv.cuGraphDestroy(other_graph)
    drv.cuMemFree(a)
    drv.cuMemFree(b)
    drv.cuStreamDestroy(stream)


def test_a_handle_belongs_to_one_conditional_node(drv: SimulatedDriver) -> None:
    # The H200 refused a second node with a handle, at the top level and in the first node's body.
    ctx = drv.ctx  # type: ignore[attr-defined]
    _, g = drv.cuGraphCreate(0)
    _, handle = drv.cuGraphConditionalHandleCreate(g, ctx, 1, 1)
    err, node, params = _add(drv, g, handle, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)
    assert err == OK
    (body,) = params.conditional.phGraph_out
    assert _add(drv, g, handle, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)[0] == INVALID
    assert _add(drv, body, handle, C.CU_GRAPH_COND_TYPE_WHILE, 1, ctx)[0] == INVALID
    assert drv.cuGraphDestroyNode(node)[0] == OK
    assert _add(drv, g, handle, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)[0] == OK  # its node is gone
    drv.cuGraphDestroy(g)


def test_a_graph_with_conditional_nodes_has_one_executable_graph_at_a_time(drv: SimulatedDriver) -> None:
    # The H200 answered CUDA_ERROR_NOT_SUPPORTED while the first lived, and took it once destroyed;
    # a graph without conditional nodes is instantiated any number of times.
    ctx = drv.ctx  # type: ignore[attr-defined]
    _, g = drv.cuGraphCreate(0)
    _, handle = drv.cuGraphConditionalHandleCreate(g, ctx, 1, 1)
    assert _add(drv, g, handle, C.CU_GRAPH_COND_TYPE_IF, 1, ctx)[0] == OK
    err, first = drv.cuGraphInstantiate(g, 0)
    assert err == OK
    assert drv.cuGraphInstantiate(g, 0)[0] == cb.CUresult.CUDA_ERROR_NOT_SUPPORTED
    assert drv.cuGraphExecDestroy(first)[0] == OK
    err, again = drv.cuGraphInstantiate(g, 0)
    assert err == OK
    _, plain = drv.cuGraphCreate(0)
    drv.cuGraphAddEmptyNode(plain, None, 0)
    execs = [drv.cuGraphInstantiate(plain, 0) for _ in range(2)]
    assert [e[0] for e in execs] == [OK, OK]
    for ex in (again, *(e[1] for e in execs)):
        drv.cuGraphExecDestroy(ex)
    drv.cuGraphDestroy(plain)
    drv.cuGraphDestroy(g)
