"""B7 across layers: the race checker follows a pipeline of copies, kernels, a graph and the host."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Kernel, LaunchConfig, RaceWarning, Stream, launch, racecheck

ROOT = Path(__file__).resolve().parent.parent


def _races(program: Callable[[], object]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RaceWarning)
        program()
    return [str(w.message) for w in caught if issubclass(w.category, RaceWarning)]


@pytest.mark.contract("B7")
@pytest.mark.parametrize("ordered", [True, False])
def test_B7_a_pipeline_over_two_streams_a_graph_and_the_host(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig, ordered: bool
) -> None:
    with racecheck():
        other = dev.create_stream()
        host = dev.allocate_pinned(64)
        buf = dev.allocate(64, stream=stream)
        buf.fill(2, stream)
        launch(stream, config, kernels["add_u8"], buf, 3, 64)
        g = GraphDefinition(dev)
        g.launch(config, kernels["add_u8"], buf, 10, 64)
        found: list[str] = []
        with g.instantiate() as graph:
            if ordered:
                other.wait(stream)
            found += _races(lambda: graph.launch(other))  # the graph writes buf, after stream's kernel?
            if ordered:
                stream.wait(other.record())
            found += _races(lambda: buf.copy_to(host, stream))  # after the graph?
            if ordered:
                stream.sync()
            found += _races(host.numpy)  # after the copy?
            dev.sync()
        if ordered:
            assert found == []
            assert bytes(host.numpy()) == bytes([15]) * 64
        else:
            assert len(found) == 3
            assert "cuGraphLaunch" in found[0]
            assert "cuLaunchKernel (add_u8)" in found[0]
            assert "cuMemcpyDtoHAsync" in found[1]
            assert "cuGraphLaunch" in found[1]
            assert "PinnedBuffer.numpy on the host" in found[2]
        g.close()
        buf.close()
        host.close()
        other.close()


@pytest.mark.contract("B7")
def test_B7_the_tour_runs_clean_under_the_checker() -> None:
    env = dict(os.environ, CUGUARD_RACECHECK="1")
    env.pop("CUGUARD_DRIVER", None)  # the tour picks its driver itself
    command = [sys.executable, "-W", "error::cuguard.resources.RaceWarning", str(ROOT / "examples" / "tour.py")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "RaceWarning" not in done.stderr
