"""B1-B6 across layers: fault injection, the simulator, the plugin, all-or-nothing graphs, both sweeps."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Kernel, LaunchConfig, Stream, launch
from cuguard.sweeps import run_misuse_sweep, run_sweep
from cuguard.testing import (
    FaultPlan,
    SimulatedDriver,
    deinitialized,
    inject,
    leak_check,
    restore_fault,
    sticky,
)
from cuguard.testing.plugin import Faults

OUT_OF_MEMORY = 2


@pytest.mark.contract("B1")
def test_B1_faults_can_fail_any_call_of_a_pipeline_on_either_driver(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig, other_context: Context
) -> None:
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 1, 64)
    graph = g.instantiate()
    # the n-th call of a function, with any code
    with inject("cuGraphLaunch", 999, nth=2) as plan:
        graph.launch(stream)
        with pytest.raises(CUDAError) as info:
            graph.launch(stream)
        graph.launch(stream)
    assert isinstance(plan, FaultPlan)
    assert plan.fired == 1
    assert info.value.code == 999
    # only calls whose arguments match
    with inject("cuLaunchKernel", OUT_OF_MEMORY, when=lambda args: args[1] == 2):
        launch(stream, config, kernels["add_u8"], buf, 1, 64)  # grid 1: goes through
        with pytest.raises(CUDAError):
            launch(stream, LaunchConfig(grid=2, block=32), kernels["add_u8"], buf, 1, 64)
    # the restore of the caller's context
    with restore_fault(), pytest.raises(CUDAError, match="could not be restored"):
        dev.allocate(64)  # runs in the device's context: switches, and the restore fails
    other_context.set_current()
    # a sticky driver, then a deinitialized one
    with sticky(700), pytest.raises(CUDAError) as info:
        graph.launch(stream)
    assert info.value.is_sticky
    with deinitialized(), pytest.raises(CUDAError) as info:
        dev.create_stream()
    assert info.value.name == "CUDA_ERROR_DEINITIALIZED"
    stream.sync()
    graph.close()
    g.close()
    buf.close()


@pytest.mark.contract("B2")
def test_B2_the_simulator_runs_kernels_graphs_and_copies_like_the_driver(
    cuguard_driver: Any, dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig
) -> None:
    # the same scenario gives the same observable results on the simulator and on a GPU
    out = dev.allocate_pinned(64)
    buf = dev.allocate(64, stream=stream)
    buf.fill(2, stream)
    launch(stream, config, kernels["add_u8"], buf, 3, 64)
    g = GraphDefinition(dev)
    g.launch(config, kernels["add_u8"], buf, 10, 64).memcpy(out, buf)
    with g.instantiate() as graph:
        graph.launch(stream)
        graph.launch(stream)
    stream.sync()
    assert bytes(out.numpy()) == bytes([25]) * 64
    # and the same failures (shared/driver-facts: what an H200 answered)
    facts: list[tuple[Callable[[], Any], str]] = [
        (lambda: dev.allocate(0), "CUDA_ERROR_INVALID_VALUE"),
        (lambda: dev.allocate(1 << 50), "CUDA_ERROR_OUT_OF_MEMORY"),
        (lambda: dev.load_module(b"garbage"), "CUDA_ERROR_INVALID_IMAGE"),
        (lambda: kernels["add_u8"].module.get_kernel("missing"), "CUDA_ERROR_NOT_FOUND"),
    ]
    for call, name in facts:
        with pytest.raises(CUDAError) as info:
            call()
        assert info.value.name == name
    assert dev.allocate(0, stream=stream).size == 0  # stream-ordered zero-size allocations succeed
    GraphDefinition().close()  # creating a graph needs no current context
    g.close()
    buf.close()
    out.close()


@pytest.mark.contract("B3")
@pytest.mark.leak_check
def test_B3_the_plugin_gives_drivers_faults_leak_checks_and_fails_on_warnings(
    request: pytest.FixtureRequest, cuguard_driver: Any, cuguard_faults: Faults, dev: Device, image: bytes
) -> None:
    assert request.config.getoption("--cuguard-driver") in ("sim", "real")
    assert isinstance(cuguard_driver, SimulatedDriver) == (request.config.getoption("--cuguard-driver") == "sim")
    plan = cuguard_faults.inject("cuGraphInstantiate", OUT_OF_MEMORY)
    module = dev.load_module(image)
    g = GraphDefinition(dev)
    buf = dev.allocate(64)
    g.memset(buf, 1).launch(LaunchConfig(1, 64), module.get_kernel("fill_u8"), buf, 3, 64)
    with pytest.raises(CUDAError):
        g.instantiate()  # the plan lasts until the end of the test
    assert plan.fired == 1
    # CUDAWarning is an error in tests: a failing implicit release escalates (to the unraisable hook)
    assert any(f.action == "error" and f.category is CUDAWarning for f in _filters()), (
        "the plugin makes CUDAWarning an error"
    )
    g.close()
    buf.close()
    del module  # collected once the graph's payload lets go of it
    # @pytest.mark.leak_check: this test must leave nothing behind, which it does


def _filters() -> list[Any]:
    from types import SimpleNamespace

    return [SimpleNamespace(action=f[0], category=f[2]) for f in warnings.filters]


@pytest.mark.contract("B4")
def test_B4_edge_mutations_of_a_kernel_graph_are_all_or_nothing(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig, read: Callable[[Any], bytes]
) -> None:
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    fill = g.memset(buf, 1)
    adds = [g.launch(config, kernels["add_u8"], buf, 1, 64) for _ in range(3)]
    chain = [fill, *adds]
    shape = g.edges
    for nth in (1, 2, 3):
        with inject("cuGraphAddDependencies", OUT_OF_MEMORY, nth=nth), pytest.raises(CUDAError):
            g.connect(*itertools.pairwise(chain))
        assert g.edges == shape
    g.connect(*itertools.pairwise(chain))
    shape = g.edges
    mutations: list[tuple[str, Callable[[], Any]]] = [
        ("cuGraphRemoveDependencies", adds[2].pred.clear),
        ("cuGraphAddDependencies", lambda: fill.succ.__ixor__({adds[0], adds[1]})),  # remove one, add one
        ("cuGraphAddDependencies", lambda: setattr(adds[2], "pred", {fill, adds[0]})),
        ("cuGraphRemoveDependencies", lambda: g.disconnect((fill, adds[0]), (adds[0], adds[1]))),
    ]
    for function, mutate in mutations:
        with inject(function, OUT_OF_MEMORY, nth=1), pytest.raises(CUDAError):
            mutate()
        assert g.edges == shape, function
    with leak_check(), g.instantiate() as graph:
        graph.launch(stream)
        stream.sync()
    assert read(buf) == bytes([4]) * 64
    g.close()
    buf.close()


@pytest.mark.contract("B5")
def test_B5_the_failure_point_sweep_of_the_kernel_and_graph_operations_finds_nothing() -> None:
    result = run_sweep(match="launch", sample=150, seed=1)
    assert {s.name for s in result.scenarios} >= {"resources.launch", "graphs.GraphDefinition.launch"}
    assert sum(s.cases for s in result.scenarios) > 0
    assert not result.violations, "\n".join(str(v) for v in result.violations[:30])


@pytest.mark.contract("B6", "E3", "G1", "G2", "O1", "O3", "O4", "O5", "O6", "S2")
def test_B6_the_misuse_sweep_over_every_layer_finds_nothing() -> None:
    result = run_misuse_sweep(examples=40, steps=40)
    assert result.examples >= 40
    assert result.crashes == 0
    assert not result.violations, "\n" + result.format_table(max_shown=40)
