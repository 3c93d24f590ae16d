"""S1-S3 across layers: exiting with work in flight, never crashing the driver, deterministic release."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Kernel, LaunchConfig, Module
from cuguard.testing import SimulatedDriver, inject, sticky

OUT_OF_MEMORY = 2

_PROGRAM = textwrap.dedent(
    """
    import threading
    from cuguard.errors import install_driver
    from cuguard.graphs import GraphDefinition
    from cuguard.resources import Device, LaunchConfig
    from cuguard.testing import SimulatedDriver

    sim = SimulatedDriver(devices=1)
    install_driver(sim)
    sim.register_kernel("fill_u8", lambda s, out, value, n: s.write(out, bytes([value]) * n))
    dev = Device(0)
    stream = dev.create_stream()
    buf = dev.allocate(1 << 20, stream=stream)
    out = dev.allocate_pinned(64)
    kernel = dev.load_module(b".version 8.0\\n.target sm_90\\n.address_size 64\\n"
                             b".visible .entry fill_u8(.param .u64 a, .param .u32 b, .param .u64 c) {{ ret; }}\\n"
                             ).get_kernel("fill_u8")
    gate = threading.Event()
    g = GraphDefinition(dev)
    g.callback(lambda: gate.wait(0.5)).launch(LaunchConfig(1, 64), kernel, buf, 1, 64).memcpy(out, buf)
    graph = g.instantiate()
    graph.launch(stream)   # in flight behind a host callback that never returns before the exit
    stream.launch_host_func(lambda: None)
    cycle = [g, graph, buf, stream]
    cycle.append(cycle)
    raise SystemExit({status})
    """
)


@pytest.mark.contract("S1")
def test_S1_exiting_with_graphs_kernels_and_buffers_in_flight_is_silent_with_the_programs_status() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("PYTHONWARNINGS", None)
    result = subprocess.run(
        [sys.executable, "-c", _PROGRAM.format(status=3)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr == ""
    assert result.stdout == ""


@pytest.mark.contract("S2")
def test_S2_nothing_is_released_twice_or_into_a_destroyed_context(
    cuguard_driver: Any, dev: Device, image: bytes, kernels: dict[str, Kernel], config: LaunchConfig
) -> None:
    ctx = Context.create(0)
    module = Module.load(ctx, image)
    g = GraphDefinition(ctx)
    g.empty()
    graph = g.instantiate()
    stream = dev.create_stream()
    buf = dev.allocate(64, stream=stream)
    ctx.close()  # closed before what lives in it: those are leaked, never released into it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for obj in (module, graph):
            with pytest.raises(ResourceClosedError):
                obj.close()
        del module, graph
        gc.collect()
    assert all("leaked" in str(w.message) for w in caught if issubclass(w.category, CUDAWarning))
    # releases that fail leak the object: closing again, or collecting it, never releases it a second time
    with inject("cuStreamDestroy", OUT_OF_MEMORY), pytest.raises(CUDAError, match="leaked"):
        stream.close()
    stream.close()
    with inject("cuMemFree", OUT_OF_MEMORY), pytest.raises(CUDAError):
        buf.close()  # its stream is closed: freed synchronously
    buf.close()
    # after a sticky error every release fails: everything is leaked and reported, nothing crashes
    victims = [dev.create_stream(), dev.create_event(), dev.allocate(64), GraphDefinition(dev)]
    with warnings.catch_warnings(record=True), sticky(700):
        warnings.simplefilter("always")
        del victims
        gc.collect()
        with pytest.raises(CUDAError) as info:
            dev.allocate(64)
        assert info.value.is_sticky
    g.close()
    if isinstance(cuguard_driver, SimulatedDriver):
        assert cuguard_driver.misuse == []
        assert cuguard_driver.double_release == []
        assert cuguard_driver.use_after_release == []


@pytest.mark.contract("S3")
def test_S3_close_and_with_release_deterministically_across_layers(
    cuguard_driver: Any, dev: Device, kernels: dict[str, Kernel], config: LaunchConfig, settled: Callable[[], None]
) -> None:
    sim = cuguard_driver if isinstance(cuguard_driver, SimulatedDriver) else None

    def live() -> set[int]:
        return set() if sim is None else {o.handle for o in sim.live_objects()}

    with dev.create_stream() as stream, GraphDefinition(dev) as g:
        buf = dev.allocate(64, stream=stream)
        g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 1, 64)
        with g.instantiate() as graph:
            graph.launch(stream)
            stream.sync()
            handles = {int(stream.handle), int(graph.handle), int(g.handle)}
        assert graph.closed
    assert stream.closed
    assert g.closed
    if sim is not None:
        assert not handles & live()  # released at the end of the with-blocks, not later
    for obj in (stream, g, graph, buf):
        obj.close()  # idempotent
        obj.close()
    # an explicit close that fails raises; an implicit one (collection) warns instead
    event = dev.create_event()
    with inject("cuEventDestroy", OUT_OF_MEMORY), pytest.raises(CUDAError):
        event.close()
    other = dev.create_stream()
    with warnings.catch_warnings(record=True) as caught, inject("cuStreamDestroy", OUT_OF_MEMORY):
        warnings.simplefilter("always")
        del other
        gc.collect()
    assert any("cuStreamDestroy" in str(w.message) for w in caught if issubclass(w.category, CUDAWarning))
    settled()
