"""The pytest plugin (B3) and fault injection as users see it (B1)."""

from __future__ import annotations

import pytest

from cuguard.errors import CUDAError, driver
from cuguard.testing import inject, record_calls

pytest_plugins = ["pytester"]


@pytest.mark.contract("B3")
def test_cuda_warning_fails_a_test_and_fixtures_work(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    pytester.makepyfile(
        """
        import warnings
        from cuguard.errors import CUDAWarning
        from cuguard.testing import SimulatedDriver

        def test_warns():
            warnings.warn(CUDAWarning("cuStreamDestroy(0x1) failed"))

        def test_sim_fixture(sim):
            assert isinstance(sim, SimulatedDriver)

        def test_driver_fixture(cuguard_driver, cuguard_faults):
            plan = cuguard_faults.inject("cuStreamCreate", 2)
            assert plan.fired == 0
        """
    )
    # Installed, the plugin loads through its entry point; from a source tree it needs -p.
    installed = request.config.pluginmanager.has_plugin("cuguard")
    result = pytester.runpytest(*([] if installed else ["-p", "cuguard.testing.plugin"]))
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*1 failed, 2 passed*"])


@pytest.mark.contract("B1")
def test_inject_fails_the_nth_call_and_unknown_names_are_refused(cuguard_driver: object) -> None:
    driver.cuInit(0)
    with inject("cuDeviceGetCount", 2, nth=2) as plan, record_calls() as log:
        assert not driver.cuDeviceGetCount()[0]
        err, _ = driver.cuDeviceGetCount()
        assert CUDAError(err).name == "CUDA_ERROR_OUT_OF_MEMORY"
        assert not driver.cuDeviceGetCount()[0]
    assert plan.fired == 1
    assert [c.injected for c in log] == [False, True, False]
    with pytest.raises(ValueError, match="cuNoSuchCall"):
        inject("cuNoSuchCall", 2)
