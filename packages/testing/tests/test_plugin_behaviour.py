"""The pytest plugin's behaviour across tests and phases (B3), its fault plans (B1) and leak checks.

Each test runs a small project with pytest's ``pytester`` and looks at the outcome: fixture
order leaves no closed simulator installed, leak checks collect garbage and wait for
cuguard's release thread before judging (and say so), the contract summary counts an error at
teardown as a failure, and a project's own ``filterwarnings`` for ``CUDAWarning`` wins over
the plugin's default (W3). ``nothing_left_behind`` and ``leak_check`` themselves wait for
deferred graph releases, wherever the simulator runs user-object destructors (inside the
releasing call, as observed, or on its driver thread, as CUDA may).
"""

from __future__ import annotations

import json
import textwrap
import time

import pytest

pytest.importorskip("cuguard.graphs")  # these tests drive every layer

from cuguard.errors import install_driver, installed_driver
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device
from cuguard.testing import leak_check, nothing_left_behind, simulated_driver

pytest_plugins = ["pytester"]


def _run(pytester: pytest.Pytester, request: pytest.FixtureRequest, *args: str) -> pytest.RunResult:
    """Run the pytester project in this process with the cuguard plugin (entry point or ``-p``)."""
    installed = request.config.pluginmanager.has_plugin("cuguard")
    plugin = [] if installed else ["-p", "cuguard.testing.plugin"]
    try:
        return pytester.runpytest_inprocess(*plugin, "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args)
    finally:
        # A regression of what these tests prove (a closed simulator left installed) must fail
        # the test that shows it, not every later test of this session.
        left = installed_driver()
        if left is not None:
            install_driver(None)
            pytest.fail(f"the in-process run left a driver installed: {left!r}")


def _phases(result: pytest.RunResult) -> dict[str, dict[str, str]]:
    """Each test's outcome per phase: ``{test name: {"setup": ..., "call": ..., "teardown": ...}}``."""
    phases: dict[str, dict[str, str]] = {}
    for report in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        phases.setdefault(report.nodeid.split("::")[-1], {})[report.when] = report.outcome
    return phases


# --- 1. fixture order: no closed simulator left installed -------------------------------------

_ORDER_PROJECT = """
    import pytest
    from cuguard.errors import CUDAError, active_driver, installed_driver
    from cuguard.resources import Device
    from cuguard.testing import FaultProxy

    def test_first({fixtures}):
        plan = cuguard_faults.inject("cuStreamCreate", 2)
        assert isinstance(installed_driver(), FaultProxy)
        assert installed_driver().inner is sim
        with pytest.raises(CUDAError) as info:
            Device(0).create_stream()
        assert info.value.code == 2
        assert plan.fired == 1

    def test_nothing_installed_after():
        assert installed_driver() is None, f"left installed: {{installed_driver()!r}}"

    def test_a_fresh_simulator_works_after(sim, cuguard_faults):
        assert installed_driver() is sim
        Device(0).create_stream().close()
        cuguard_faults.inject("cuStreamCreate", 2)
        assert active_driver().inner is sim
        with pytest.raises(CUDAError):
            Device(0).create_stream()
        Device(0).create_stream().close()

    def test_nothing_installed_at_the_end():
        assert installed_driver() is None, f"left installed: {{installed_driver()!r}}"
"""


@pytest.mark.contract("B3", "B1")
@pytest.mark.parametrize("fixtures", ["cuguard_faults, sim", "sim, cuguard_faults"])
def test_fault_proxy_over_sim_leaves_no_closed_simulator_installed(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, fixtures: str
) -> None:
    pytester.makepyfile(textwrap.dedent(_ORDER_PROJECT.format(fixtures=fixtures)))
    result = _run(pytester, request, "-p", "no:randomly")
    result.assert_outcomes(passed=4)
    assert installed_driver() is None


# --- 2. leak check: collected garbage and the release thread first --------------------------

_LEAK_PROJECT = """
    import pathlib

    import pytest
    from cuguard.resources import Device

    KEPT = []

    class Holder:
        pass

    @pytest.fixture
    def drops_a_cycle_at_teardown(sim):
        # Torn down before sim (it depends on it): only the leak check's own collection frees this.
        yield
        holder = Holder()
        holder.stream = Device(0).create_stream()
        holder.me = holder

    @pytest.mark.leak_check
    def test_stream_dropped_in_a_traceback_cycle(sim):
        stream = Device(0).create_stream()
        with pytest.raises(ZeroDivisionError) as excinfo:
            1 / 0
        # excinfo -> traceback -> this frame -> excinfo: the frame (and the stream) sit in a cycle.
        assert excinfo.type is ZeroDivisionError
        del stream

    @pytest.mark.leak_check
    def test_stream_left_in_a_cycle_by_a_fixture(drops_a_cycle_at_teardown):
        pass

    @pytest.mark.leak_check
    def test_really_leaks(sim):
        stream = Device(0).create_stream()
        KEPT.append(stream)
        (pathlib.Path(__file__).parent / "leaked.txt").write_text(hex(int(stream.handle)))
"""


@pytest.mark.contract("B3")
def test_leak_check_waits_for_garbage_and_the_release_thread_and_names_a_real_leak(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(textwrap.dedent(_LEAK_PROJECT))
    result = _run(pytester, request)
    passed = {"setup": "passed", "call": "passed", "teardown": "passed"}
    assert _phases(result) == {
        "test_stream_dropped_in_a_traceback_cycle": passed,
        "test_stream_left_in_a_cycle_by_a_fixture": passed,
        "test_really_leaks": {**passed, "teardown": "failed"},
    }, result.stdout.str()
    handle = (pytester.path / "leaked.txt").read_text()
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_really_leaks*",
            "*left the simulated CUDA driver changed*release thread*",
            "*created and not released:*",
            f"*stream {handle} from cuStreamCreate*",
        ]
    )
    # The leak is the stream alone: nothing else is listed (not the held primary context, O2).
    # Only the teardown report is read: the short summary may repeat the message after it.
    section = result.stdout.str().split("ERROR at teardown of test_really_leaks", 1)[1]
    section = section.split("short test summary info", 1)[0]
    listed = [line for line in section.splitlines() if line.lstrip("E ").startswith("- ")]
    assert len(listed) == 1, section
    assert handle in listed[0]


# --- 3. nothing_left_behind / leak_check wait for deferred graph releases ---------------------


def _graph_round(dev: Device) -> None:
    """A graph whose memset node keeps a buffer alive; everything closed and dropped."""
    stream = dev.create_stream()
    buf = dev.allocate(256)
    g = GraphDefinition(dev)
    g.memset(buf, 0)
    graph = g.instantiate()
    graph.launch(stream)
    stream.sync()
    graph.close()
    g.close()
    stream.close()
    # The last reference to the buffer is now the graphs' payload, released by CUDA later
    # (a user object) through cuguard's release thread.
    del buf, g, graph, stream


@pytest.mark.contract("B3", "W5")
def test_nothing_left_behind_waits_for_deferred_graph_releases() -> None:
    with simulated_driver() as sim:
        dev = Device(0)
        dev.context  # noqa: B018 - the held primary context is not counted anyway (O2)
        for _ in range(10):
            with nothing_left_behind(sim):
                _graph_round(dev)


@pytest.mark.contract("B3", "W5")
def test_leak_check_waits_for_deferred_graph_releases() -> None:
    with simulated_driver():
        dev = Device(0)
        dev.context  # noqa: B018
        for _ in range(10):
            with leak_check():
                _graph_round(dev)


class _SlowToDie:
    """A host callback that holds a buffer and is slow to be collected (so is the buffer's release)."""

    def __init__(self, buf: object) -> None:
        self.buf = buf

    def __call__(self) -> None:
        pass

    def __del__(self) -> None:
        time.sleep(0.2)


@pytest.mark.contract("B3", "W5")
@pytest.mark.parametrize("dropped", ["closed", "in a reference cycle"])
@pytest.mark.parametrize("on_driver_thread", [False, True], ids=["destructors inline", "destructors on driver thread"])
def test_nothing_left_behind_waits_for_a_slow_graph_release(dropped: str, on_driver_thread: bool) -> None:
    """Wherever CUDA runs the user-object destructor, and however the graph goes, the check waits for the release.

    The graph's payload holds a callback that keeps the buffer and takes a while to be
    collected on cuguard's release thread, so a check that does not wait for that thread after
    the last user-object destructor ran sees the buffer still allocated.
    """
    with simulated_driver(destructors_on_driver_thread=on_driver_thread) as sim:
        dev = Device(0)
        dev.context  # noqa: B018
        with nothing_left_behind(sim):
            buf = dev.allocate(256)
            g = GraphDefinition(dev)
            g.memset(buf, 0)
            g.callback(_SlowToDie(buf))
            graph = g.instantiate()
            if dropped == "closed":
                graph.close()
                g.close()
            else:
                cycle: list[object] = [g, graph]
                cycle.append(cycle)
                del cycle
            del buf, g, graph


def _keep_a_graph_holding_a_buffer(dev: Device, kept: list[GraphDefinition]) -> None:
    buf = dev.allocate(256)
    g = GraphDefinition(dev)
    g.memset(buf, 0)
    kept.append(g)


@pytest.mark.contract("B3")
def test_leak_check_still_finds_a_buffer_kept_by_a_live_graph() -> None:
    """The wait is no amnesty: a buffer that a graph still keeps is named, with what was waited for."""
    with simulated_driver() as sim:
        dev = Device(0)
        dev.context  # noqa: B018
        kept: list[GraphDefinition] = []
        with pytest.raises(AssertionError) as info, nothing_left_behind(sim):
            _keep_a_graph_holding_a_buffer(dev, kept)
        message = str(info.value)
        assert "release thread" in message
        assert "created and not released" in message
        assert "device_memory" in message
        assert "graph" in message
        kept[0].close()


# --- 4. contract summary: an error at teardown is a failure -----------------------------------

_SUMMARY_PROJECT = """
    import pytest
    from cuguard.resources import Device

    KEPT = []

    @pytest.fixture
    def breaks_at_teardown():
        yield
        raise RuntimeError("teardown broke")

    @pytest.fixture
    def breaks_at_setup():
        raise RuntimeError("setup broke")

    @pytest.mark.contract("T1")
    def test_fixture_teardown_raises(breaks_at_teardown):
        pass

    @pytest.mark.contract("T2")
    @pytest.mark.leak_check
    def test_plugin_leak_check_fails_at_teardown(sim):
        KEPT.append(Device(0).create_stream())

    @pytest.mark.contract("T3")
    def test_passes(sim):
        pass

    @pytest.mark.contract("T4")
    def test_fails():
        assert False

    @pytest.mark.contract("T5")
    def test_skipped():
        pytest.skip("not here")

    @pytest.mark.contract("T6")
    def test_setup_raises(breaks_at_setup):
        pass

    @pytest.mark.contract("T7", "T1")
    def test_two_clauses_pass():
        pass
"""


@pytest.mark.contract("B3")
def test_contract_summary_counts_an_error_at_teardown_as_failed(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(textwrap.dedent(_SUMMARY_PROJECT))
    summary = pytester.path / "summary.json"
    result = _run(pytester, request, f"--cuguard-summary={summary}")
    result.assert_outcomes(passed=4, failed=1, skipped=1, errors=3)
    data = json.loads(summary.read_text(encoding="utf-8"))
    counts = {(row["clause"], row["driver"]): (row["passed"], row["failed"], row["skipped"]) for row in data}
    assert counts == {
        ("T1", "sim"): (1, 1, 0),  # the teardown error and the passing two-clause test
        ("T2", "sim"): (0, 1, 0),  # the plugin's own leak check failed at teardown
        ("T3", "sim"): (1, 0, 0),  # counted once, not once per phase
        ("T4", "sim"): (0, 1, 0),
        ("T5", "sim"): (0, 0, 1),
        ("T6", "sim"): (0, 1, 0),
        ("T7", "sim"): (1, 0, 0),
    }
    result.stdout.fnmatch_lines(["*cuguard contract clauses*", "T1   sim   passed    1  failed   1  skipped   0"])


# --- 5. the project's own filterwarnings for CUDAWarning win -----------------------------------

_WARNING_PROJECT = """
    import gc
    import warnings
    from cuguard.errors import CUDAWarning
    from cuguard.resources import Device

    def test_warning_in_the_test_body():
        warnings.warn(CUDAWarning("cuStreamDestroy(0x1) failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context"))

    def test_warning_from_garbage_collection(sim, cuguard_faults):
        plan = cuguard_faults.inject("cuStreamDestroy", 201)
        stream = Device(0).create_stream()
        del stream
        gc.collect()
        assert plan.fired == 1
"""

_IGNORE = "ignore::cuguard.errors.CUDAWarning"


def _configure(pytester: pytest.Pytester, where: str) -> list[str]:
    """Write the project's filter ``where`` it is asked for; return the extra command-line arguments."""
    if where == "pytest.ini":
        pytester.makeini(f"[pytest]\nfilterwarnings =\n    {_IGNORE}\n")
    elif where == "pyproject.toml":
        pytester.makepyprojecttoml(f'[tool.pytest.ini_options]\nfilterwarnings = ["{_IGNORE}"]\n')
    elif where == "-W":
        return ["-W", _IGNORE]
    elif where == "pytest.ini, other filters only":
        pytester.makeini("[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning\n")
    return []


@pytest.mark.contract("B3", "W3")
@pytest.mark.parametrize("where", ["pytest.ini", "pyproject.toml", "-W"])
def test_project_filter_ignoring_cuda_warning_wins(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, where: str
) -> None:
    pytester.makepyfile(textwrap.dedent(_WARNING_PROJECT))
    extra = _configure(pytester, where)
    result = _run(pytester, request, *extra)
    result.assert_outcomes(passed=2)


@pytest.mark.contract("B3", "W3")
def test_project_filter_with_another_action_for_cuda_warning_wins(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    """``default::...CUDAWarning`` in the ini: the warnings are shown, not raised, and the tests pass."""
    pytester.makepyfile(textwrap.dedent(_WARNING_PROJECT))
    pytester.makeini("[pytest]\nfilterwarnings =\n    default::cuguard.errors.CUDAWarning\n")
    result = _run(pytester, request)
    result.assert_outcomes(passed=2, warnings=2)
    result.stdout.fnmatch_lines(["*warnings summary*", "*CUDAWarning: cuStreamDestroy(0x1) failed*"])


@pytest.mark.contract("B3", "W3")
def test_filterwarnings_mark_ignoring_cuda_warning_wins(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    pytester.makepyfile(
        textwrap.dedent(_WARNING_PROJECT)
        .replace("\ndef test_", '\n@pytest.mark.filterwarnings("ignore::cuguard.errors.CUDAWarning")\ndef test_')
        .replace("import gc\n", "import gc\nimport pytest\n", 1)
    )
    result = _run(pytester, request)
    result.assert_outcomes(passed=2)


@pytest.mark.contract("B3", "W3")
@pytest.mark.parametrize("where", ["none", "pytest.ini, other filters only"])
def test_cuda_warning_fails_tests_by_default(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, where: str
) -> None:
    pytester.makepyfile(textwrap.dedent(_WARNING_PROJECT))
    extra = _configure(pytester, where)
    result = _run(pytester, request, *extra)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_warning_in_the_test_body _*",
            "E *CUDAWarning: cuStreamDestroy(0x1) failed*",
            "*_ test_warning_from_garbage_collection _*",
            "CUDAWarning raised where nothing could catch it*",
            "*cuStreamDestroy(0x*) failed: CUDA_ERROR_INVALID_CONTEXT*",
        ]
    )
