"""One fault, one report (contract W7) for graphs, on the simulated driver.

Executable graphs whose destroy a sticky fault refuses are counted with the
streams, events and buffers of their context: one warning for the first refused
release, one summary for the rest.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import KERNELS_PTX

from cuguard.errors import CUDAWarning, StickyCUDAError, StickyFaultWarning, flush_deferred
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, LaunchConfig, Module
from cuguard.testing import SimulatedDriver


@pytest.fixture
def faulting(sim: SimulatedDriver) -> Iterator[tuple[Device, Module]]:
    sim.register_kernel("add_u32", lambda s, address, value, n: s.write(int(address) + (1 << 40), b"x"))
    dev = Device(0)
    yield dev, dev.load_module(KERNELS_PTX)
    sim.poison(None)  # a test convenience only: a real driver never recovers


@pytest.mark.contract("W7")
def test_graphs_dropped_after_a_fault_in_their_launch_give_one_warning_and_one_summary(
    sim: SimulatedDriver, faulting: tuple[Device, Module]
) -> None:
    dev, module = faulting
    stream = dev.create_stream()
    definition = GraphDefinition(dev)
    definition.launch(LaunchConfig(), module.get_kernel("add_u32"), 8, 1, 1)
    graphs = [definition.instantiate() for _ in range(10)]
    objects: list[Any] = [*graphs, *(dev.create_event() for _ in range(10)), definition]
    del graphs, definition
    objects[0].launch(stream)
    with pytest.raises(StickyCUDAError):
        stream.sync()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for obj in (stream, module):
            with pytest.raises(StickyCUDAError):
                obj.close()  # raises, and warns nothing
        assert seen == []
        del objects
        gc.collect()
        flush_deferred()
        reports = [w.message for w in seen if isinstance(w.message, CUDAWarning)]
    first, summary = reports
    assert isinstance(first, StickyFaultWarning)
    assert not first.summary
    assert first.first_fault == "cuStreamSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS"
    assert isinstance(summary, StickyFaultWarning)
    assert summary.summary
    assert summary.context == first.context == repr(dev.context)
    assert summary.leaked == 19  # ten graphs and ten events: the first one warned
