"""E1-E4 across layers: what a failure raises when graphs, kernels, buffers and streams work together."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.errors import CUDAError, LibraryNotFoundError, NVJitLinkError, NVRTCError, ResourceClosedError
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Kernel, LaunchConfig, Program, Stream, launch, link
from cuguard.testing import inject, record_calls, sticky

OUT_OF_MEMORY = 2
ILLEGAL_ADDRESS = 700


class ForeignStream:
    """A stream of "another library" (cuda.core, CuPy...): only ``__cuda_stream__``."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    def __cuda_stream__(self) -> tuple[int, int]:
        return self._stream.__cuda_stream__()


@pytest.mark.contract("E1")
def test_E1_a_graph_launch_that_fails_raises_a_CUDAError_with_its_data(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig
) -> None:
    buf = dev.allocate(64)
    with GraphDefinition(dev) as g:
        g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 2, 64)
        with g.instantiate() as graph:
            with inject("cuGraphLaunch", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
                graph.launch(stream)
            error = info.value
            assert (error.code, error.name, error.call) == (OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "cuGraphLaunch")
            assert error.description == "out of memory"
            assert str(error).startswith("cuGraphLaunch failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
            assert not error.is_sticky
            error.add_note("while running the pipeline")
            copy = pickle.loads(pickle.dumps(error))
            assert (copy.code, copy.name, copy.description, copy.call) == (
                error.code,
                error.name,
                error.description,
                error.call,
            )
            assert copy.__notes__ == ["while running the pipeline"]
            graph.launch(stream)  # the graph, the stream and the buffer are unaffected
            stream.sync()


@pytest.mark.contract("E2")
def test_E2_compiler_and_linker_failures_raise_their_own_CUDAError_subclasses(dev: Device, is_sim: bool) -> None:
    major, minor = (9, 0) if is_sim else dev.compute_capability
    arch = f"sm_{major}{minor}"
    try:
        Program('extern "C" __global__ void ok() {}', options=[f"-arch={arch}"]).compile()
    except LibraryNotFoundError as missing:  # nothing was compiled or called: not a library failure
        pytest.skip(f"NVRTC is not installed here: {missing}")
    with pytest.raises(NVRTCError) as info:
        Program('extern "C" __global__ void broken() { this is not C++; }', options=[f"-arch={arch}"]).compile()
    error = info.value
    assert isinstance(error, CUDAError)
    assert error.name.startswith("NVRTC_ERROR_")
    assert error.call == "nvrtcCompileProgram"
    assert "error" in error.log  # the compiler's log
    assert not error.is_sticky
    assert pickle.loads(pickle.dumps(error)).log == error.log
    try:
        with pytest.raises(NVJitLinkError) as linked:
            link([b"this is neither PTX nor a cubin"], arch)
    except LibraryNotFoundError as missing:
        pytest.skip(f"nvJitLink is not installed here: {missing}")
    assert isinstance(linked.value, CUDAError)
    assert linked.value.name.startswith("NVJITLINK_")
    # the device and the caller's context are untouched
    with dev.create_stream() as s:
        s.sync()


@pytest.mark.contract("E3")
def test_E3_wrong_arguments_across_layers_raise_before_any_driver_call(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig
) -> None:
    event = dev.create_event()
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    node = g.memset(buf, 1)
    graph = g.instantiate()
    nodes = g.nodes
    refused: list[tuple[Callable[[], Any], str, str]] = [
        (lambda: graph.launch(event), "stream", "Event"),
        (lambda: launch(event, config, kernels["fill_u8"], buf, 1, 64), "stream", "Event"),
        (lambda: launch(stream, config, "fill_u8", buf, 1, 64), "kernel", "str"),
        (lambda: launch(stream, (1, 64), kernels["fill_u8"], buf, 1, 64), "config", "tuple"),
        (lambda: g.launch(config, kernels["fill_u8"], buf, 1, 64, deps=[buf]), "deps", "Buffer"),
        (lambda: g.memset(stream, 1), "dst", "Stream"),
        (lambda: g.record(None), "event", "None"),
        (lambda: event.record(buf), "stream", "Buffer"),
        (lambda: buf.copy_from(buf, stream=event), "stream", "Event"),
        (lambda: stream.wait(3), "other", "int"),
        (lambda: graph.update(nodes), "definition", "frozenset"),
        (lambda: dev.allocate(64, stream=event), "stream", "Event"),
        (lambda: node.pred.add(stream), "", "Stream"),
    ]
    problems = []
    for call, param, given in refused:
        with record_calls() as calls:
            try:
                call()
            except TypeError as error:
                text = str(error)
                if given not in text or param not in text:
                    problems.append(f"TypeError does not name {param or 'the parameter'} and {given}: {text!r}")
                if calls:
                    problems.append(f"{text!r} reached the driver: {[c.name for c in calls]}")
            except Exception as error:  # noqa: BLE001 - collected: every refusal is checked
                problems.append(f"{param}={given}: {type(error).__name__} instead of TypeError: {error}")
            else:
                problems.append(f"{param}={given} was accepted")
    # a kernel argument that cannot be passed raises before the launch: nothing is queued
    with record_calls() as calls, pytest.raises(TypeError):
        launch(stream, config, kernels["fill_u8"], buf, object(), 64)
    assert "cuLaunchKernel" not in [c.name for c in calls]
    # a closed resource is refused with ResourceClosedError naming it, also inside graph builders
    buf.close()
    for call in (lambda: g.memset(buf, 1), lambda: launch(stream, config, kernels["fill_u8"], buf, 1, 64)):
        with pytest.raises(ResourceClosedError, match="Buffer"):
            call()
    # where a stream is taken, an object with __cuda_stream__ is accepted
    foreign = ForeignStream(stream)
    other = dev.allocate(64)
    for name, call in (
        ("launch", lambda: launch(foreign, config, kernels["fill_u8"], other, 3, 64)),
        ("Event.record", lambda: event.record(foreign)),
        ("Graph.launch", lambda: graph.launch(foreign)),
        ("Graph.upload", lambda: graph.upload(foreign)),
        ("Buffer.fill", lambda: other.fill(5, foreign)),
        ("Device.allocate", lambda: dev.allocate(64, stream=foreign).close()),
    ):
        try:
            call()
        except TypeError as error:
            problems.append(f"{name} refused a stream with __cuda_stream__: {error}")
    stream.sync()
    graph.close()
    g.close()
    other.close()
    assert not problems, "\n".join(problems)


@pytest.mark.contract("E4")
def test_E4_a_sticky_fault_in_a_graph_raises_is_sticky_and_is_never_retried(
    *, cuguard_driver: Any, dev: Device, stream: Stream, kernels: dict[str, Kernel], is_sim: bool
) -> None:
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    node = g.memset(buf, 1)
    if is_sim:  # a kernel node writes to an invalid address: the simulated GPU faults for good
        node.launch(LaunchConfig(), kernels["poke"], 0x10)
    graph = g.instantiate()
    # On a GPU the fault is injected (a real one would poison the GPU for every later test).
    fault = contextlib.nullcontext() if is_sim else sticky(ILLEGAL_ADDRESS)
    with fault:
        if is_sim:
            graph.launch(stream)
        with record_calls() as calls, pytest.raises(CUDAError) as info:
            stream.sync()
        assert info.value.is_sticky
        assert info.value.code == ILLEGAL_ADDRESS
        assert [c.name for c in calls].count("cuStreamSynchronize") == 1  # asked once, never retried
        for later in (lambda: dev.allocate(64), dev.create_stream, lambda: graph.launch(stream)):
            with pytest.raises(CUDAError) as info:
                later()
            assert info.value.is_sticky
    # cuguard neither recovered nor ended the process: the test is still running
    if is_sim:
        cuguard_driver.poison(None)  # the simulator's test convenience; the real driver never recovers
