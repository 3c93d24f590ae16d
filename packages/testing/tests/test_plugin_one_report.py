"""The plugin reports a test that hit a sticky fault once, with the first fault's text (contract W7, B3).

Inner test runs with ``pytester``: on the simulated driver (the ``sim`` fixture)
and on a "real" driver that is a simulated one put where ``cuda.bindings.driver``
would be, so that ``--cuguard-driver=real`` behaves as on a GPU on any machine.
"""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("cuguard.resources")  # the inner tests use devices

pytest_plugins = ["pytester"]

COMMON = """
import gc
import warnings

import pytest
from cuguard.errors import StickyCUDAError, StickyFaultWarning
from cuguard.resources import Device, LaunchConfig, launch

PTX = b'''.version 8.0
.target sm_90
.address_size 64
.visible .entry poke(.param .u64 address) { ret; }
'''


def fault(driver):
    driver.register_kernel("poke", lambda sim, address: sim.write(address, b"x"))
    dev = Device(0)
    module = dev.load_module(PTX)
    stream = dev.create_stream()
    objects = [dev.create_stream() for _ in range(10)] + [dev.create_event() for _ in range(10)]
    objects += [dev.allocate(64) for _ in range(10)]
    launch(stream, LaunchConfig(), module.get_kernel("poke"), 8)
    return stream, module, objects
"""

SIM_TESTS = """
def test_drops_what_the_fault_leaks(sim):
    stream, module, objects = fault(sim)
    with pytest.raises(StickyCUDAError):
        stream.sync()
    del stream, module, objects  # thirty-two refused releases
    gc.collect()


def test_fails_with_the_fault_itself(sim):
    stream, module, objects = fault(sim)
    stream.sync()  # raises the first fault, and the objects are dropped


def test_records_the_reports_itself(sim):
    stream, module, objects = fault(sim)
    with pytest.raises(StickyCUDAError):
        stream.sync()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del stream, module, objects
        gc.collect()
    first, summary = [w.message for w in seen]
    assert isinstance(first, StickyFaultWarning)
    assert summary.leaked == 31


def test_after(sim):
    Device(0).create_stream().close()
"""


def _load(request: pytest.FixtureRequest) -> list[str]:
    # Installed, the plugin loads through its entry point; from a source tree it needs -p.
    return [] if request.config.pluginmanager.has_plugin("cuguard") else ["-p", "cuguard.testing.plugin"]


@pytest.mark.contract("W7", "B3")
def test_a_test_whose_dropped_objects_a_sticky_fault_leaked_fails_once_naming_the_fault(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(test_project=textwrap.dedent(COMMON) + textwrap.dedent(SIM_TESTS))
    result = pytester.runpytest_subprocess(*_load(request), "-p", "no:cacheprovider", "-rA")
    text = result.stdout.str()
    # The short summary repeats a report's first line, cut to the terminal's width: count in the report itself.
    body, _, summary = text.partition("short test summary info")
    # Dropped after the fault: the call passes, and the test fails once, at teardown, with the first fault.
    assert "PASSED test_project.py::test_drops_what_the_fault_leaks" in summary, text
    assert "ERROR test_project.py::test_drops_what_the_fault_leaks" in summary, text
    fault = "this test hit a sticky fault: cuStreamSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS"
    assert body.count(fault) == 1, text
    assert "CUDAWarning raised where nothing could catch it" not in text  # no listing of each refused release
    # Failed with the fault itself: that failure is the one report.
    assert "FAILED test_project.py::test_fails_with_the_fault_itself" in summary, text
    assert "ERROR test_project.py::test_fails_with_the_fault_itself" not in summary, text
    # A test that records the reports itself passes, and so do the tests after it.
    assert "PASSED test_project.py::test_records_the_reports_itself" in summary, text
    assert "PASSED test_project.py::test_after" in summary, text
    result.assert_outcomes(passed=3, failed=1, errors=1)


REAL_CONFTEST = """
from cuguard.errors import _seam
from cuguard.testing import SimulatedDriver

_seam._real = SimulatedDriver(devices=1, initialized=True)  # stands in for the GPU's driver
"""

REAL_TESTS = """
def test_faults_on_the_real_driver(cuguard_driver):
    stream, module, objects = fault(cuguard_driver)
    with pytest.raises(StickyCUDAError):
        stream.sync()
    del stream, module, objects
    gc.collect()
"""


@pytest.mark.contract("W7", "B3", "E5")
def test_on_the_real_driver_the_faulting_test_is_reported_once(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makeconftest(textwrap.dedent(REAL_CONFTEST))
    pytester.makepyfile(test_real=textwrap.dedent(COMMON) + textwrap.dedent(REAL_TESTS))
    result = pytester.runpytest_subprocess(*_load(request), "-p", "no:cacheprovider", "--cuguard-driver=real", "-rA")
    text = result.stdout.str()
    body = text.partition("short test summary info")[0]  # the summary repeats the report, cut to the terminal's width
    assert body.count("cuStreamSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS") == 1, text
    assert "this test left the CUDA driver unusable with a sticky fault" in text
    assert "this test hit a sticky fault" not in text
    result.assert_outcomes(passed=1, errors=1)
