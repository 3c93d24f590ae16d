"""A driver finished for good takes its capture books with it (G6, O3).

A simulator closed while a capture is still counted (a test that failed mid-capture, say) must
not leave releases waiting for that capture for good: nothing can release them any more (their
driver is gone, O3), and a count of waiting releases that never falls would hide the next
driver's (a leak check that skips memory held back for a capture).
"""

from __future__ import annotations

import gc

import pytest

from cuguard.resources import Device, VirtualMemoryResource
from cuguard.resources.lowlevel import capture_began, waiting_count
from cuguard.testing import simulated_driver


@pytest.mark.contract("G6", "O3")
def test_a_closed_simulator_leaves_no_release_waiting_for_its_capture() -> None:
    with simulated_driver():
        dev = Device(0)
        stream = dev.create_stream()
        capture_began(stream, {})  # counted, never ended: the simulator is closed first
        vmm = VirtualMemoryResource(dev)
        buf = vmm.allocate(64)
        del buf  # its free synchronizes the context: it waits for the capture
        gc.collect()
        assert waiting_count() == 1
    assert waiting_count() == 0
    del stream, vmm
    gc.collect()
    with simulated_driver() as sim:
        dev = Device(0)
        vmm = VirtualMemoryResource(dev)
        buf = vmm.allocate(64)
        del buf
        gc.collect()
        assert waiting_count() == 0
        assert not [o for o in sim.live_objects() if o.kind == "physical_memory"]
