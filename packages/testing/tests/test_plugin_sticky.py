"""The plugin and sticky faults on the real driver (contract E5, B3), tested with ``pytester``.

The "real" driver of the inner runs is a simulated one put where the real
``cuda.bindings.driver`` would be, so ``--cuguard-driver=real`` behaves as on a
GPU (one process-wide driver that never recovers) on any machine.
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("cuguard.resources")  # the inner tests use devices

pytest_plugins = ["pytester"]

CONFTEST = """
from cuguard.errors import _seam
from cuguard.testing import SimulatedDriver

_seam._real = SimulatedDriver(devices=1, initialized=True)  # stands in for the GPU's driver
"""

TESTS = """
import pytest
from cuguard.errors import StickyCUDAError, attribute_faults
from cuguard.resources import Device, LaunchConfig, launch
from cuguard.testing import sticky

PTX = b'''.version 8.0
.target sm_90
.address_size 64
.visible .entry poke(.param .u64 address) { ret; }
'''


def test_a_fault_plan_makes_nothing_sticky(cuguard_driver):
    with sticky(700), pytest.raises(StickyCUDAError):
        Device(0).allocate(16)


def test_b_faults(cuguard_driver):
    cuguard_driver.register_kernel("poke", lambda sim, address: sim.write(address, b"x"))
    dev = Device(0)
    kernel = dev.load_module(PTX).get_kernel("poke")
    with attribute_faults(), pytest.raises(StickyCUDAError):
        launch(dev.create_stream(), LaunchConfig(), kernel, 8)


def test_c_after(cuguard_driver):
    Device(0).create_stream()


def test_d_on_the_simulator(sim):
    Device(0).create_stream().close()
"""


@pytest.mark.contract("E5", "B3")
def test_the_faulting_test_fails_and_later_real_driver_tests_are_errors_naming_it(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makeconftest(textwrap.dedent(CONFTEST))
    pytester.makepyfile(test_sticky_project=textwrap.dedent(TESTS))
    # Installed, the plugin loads through its entry point; from a source tree it needs -p.
    load = [] if request.config.pluginmanager.has_plugin("cuguard") else ["-p", "cuguard.testing.plugin"]
    result = pytester.runpytest_subprocess(*load, "-p", "no:cacheprovider", "--cuguard-driver=real", "-rA")
    text = result.stdout.str()
    summary = text.split("short test summary info")[-1]
    # a: passes (the plan's sticky status was made up, and ends with the plan)
    assert "PASSED test_sticky_project.py::test_a_fault_plan_makes_nothing_sticky" in summary, text
    # b: its call passes (it expected the error) but it fails at teardown, naming the first fault
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_b_faults*",
            "this test left the CUDA driver unusable with a sticky fault:*'poke'*",
        ]
    )
    # c: reported as an error at setup, naming the test and the fault
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_c_after*",
            "the CUDA driver of this process is unusable since *test_b_faults caused*",
        ]
    )
    # d: a simulator of its own is unaffected
    assert "PASSED test_sticky_project.py::test_d_on_the_simulator" in summary, text
    assert result.ret != 0
