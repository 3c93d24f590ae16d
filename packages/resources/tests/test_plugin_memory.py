"""The plugin's ``no_memory_leaks`` fixture: a test that leaves cuguard memory allocated fails, naming it."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("cuguard.resources")  # the fixture asks the resources layer what is held

from cuguard.errors import install_driver, installed_driver

pytest_plugins = ["pytester"]

_PROJECT = """
import pytest

from cuguard.resources import Device, DeviceMemoryResource

KEPT = []


@pytest.mark.usefixtures("no_memory_leaks")
def test_frees_what_it_allocates(sim):
    with DeviceMemoryResource(Device(0)) as mr:
        mr.allocate(256).close()
    Device(0).allocate(128)  # dropped: collected and freed before the check


@pytest.mark.usefixtures("no_memory_leaks")
def test_keeps_a_buffer_in_a_global(sim):
    KEPT.append(Device(0).allocate(4096))


def test_without_the_fixture_is_not_checked(sim):
    KEPT.append(Device(0).allocate_pinned(64))
"""


@pytest.mark.contract("W5")
def test_no_memory_leaks_fails_a_test_that_leaves_memory_allocated(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(textwrap.dedent(_PROJECT))
    # each plugin by its entry point where installed (the inner run loads it too), else named with -p
    plugin: list[str] = []
    plugins = (("cuguard", "cuguard.testing.plugin"), ("cuguard-resources", "cuguard.resources.pytest_plugin"))
    for entry_point, module in plugins:
        if not request.config.pluginmanager.has_plugin(entry_point):
            plugin += ["-p", module]
    try:
        result = pytester.runpytest_inprocess(*plugin, "-p", "no:cacheprovider", "-p", "no:randomly")
    finally:
        if installed_driver() is not None:
            install_driver(None)
    result.assert_outcomes(passed=3, errors=1)
    text = result.stdout.str()
    assert "test_keeps_a_buffer_in_a_global" in text
    assert "the test left 4096 bytes of cuguard memory allocated" in text
    assert "from Device.allocate" in text
