"""Shutdown (S1), escalation on the release thread (W3), graphs spanning two devices, clones of leaked nodes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import pytest

from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Stream
from cuguard.testing import SimulatedDriver, inject, record_calls, settle

OUT_OF_MEMORY = 2

# --- S1: the interpreter exits with graphs, launches and payloads still around ----------------------

_SHUTDOWN_PROGRAM = textwrap.dedent(
    """
    import time
    from cuguard.errors import install_driver
    from cuguard.graphs import GraphDefinition
    from cuguard.resources import Device
    from cuguard.testing import SimulatedDriver

    sim = SimulatedDriver(2, destructors_on_driver_thread={on_thread})
    install_driver(sim)
    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    out = dev.allocate_pinned(64)
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    # The host callback keeps the launch in flight while the interpreter shuts down.
    g.callback(lambda: time.sleep(30)).memset(buf, 7).memcpy(out, buf).callback(lambda: None)
    graph = g.instantiate()
    graph.launch(stream)
    graph.launch(stream)
    copy = g.clone()  # a second definition with its own payload
    del buf
    # Exit now: nothing synchronized, nothing closed.
    """
)


@pytest.mark.contract("S1")
@pytest.mark.parametrize("on_thread", [False, True])
def test_exit_with_graphs_pending_launches_and_payloads_is_silent(on_thread: bool) -> None:
    # The launches never finish: the interpreter does not wait for CUDA's (the simulator's) driver thread.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("PYTHONWARNINGS", None)
    result = subprocess.run(
        [sys.executable, "-c", _SHUTDOWN_PROGRAM.format(on_thread=on_thread)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


# --- W3: an escalated CUDAWarning on cuguard's release thread ----------------------------------------


@pytest.mark.contract("W3", "W1")
def test_escalated_warning_on_the_release_thread_reaches_unraisablehook_once(
    sim: SimulatedDriver, dev: Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    g = GraphDefinition(dev)
    buf = dev.allocate(16)
    g.memset(buf, 1)
    del buf
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=CUDAWarning)
        with inject("cuMemFree", 999):
            g.close()  # the payload's release runs on cuguard's daemon thread
            settle(sim)
    escalated = [args for args in seen if isinstance(args.exc_value, CUDAWarning)]
    assert len(escalated) == 1, seen
    assert "cuMemFree" in str(escalated[0].exc_value)
    assert len(seen) == 1  # nothing else went to the hook


# --- a graph whose nodes use buffers of two devices -------------------------------------------------


@pytest.mark.contract("G5")
def test_graph_with_nodes_on_two_devices(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    if Device.count() < 2:
        pytest.skip("needs two devices")
    dev1 = Device(1)
    dev1.context  # noqa: B018 - retain the primary context up front
    a = dev.allocate(64)
    b = dev1.allocate(64)
    c = dev.allocate(64)
    out_a = dev.allocate_pinned(64)
    out_c = dev.allocate_pinned(64)
    g = GraphDefinition(dev)
    set_a = g.memset(a, 0x11)
    set_b = g.memset(b, 0x22)
    copy = g.memcpy(c, b, deps=(set_b,))  # device 1 -> device 0
    g.memcpy(out_a, a, deps=(set_a,))
    g.memcpy(out_c, c, deps=(copy,))
    assert {n.type for n in g.nodes} == {"memset", "memcpy"}
    assert len(g.edges) == 3
    graph = g.instantiate()
    del a, b, c  # the graph keeps the buffers of both devices alive
    g.close()
    for _ in range(2):
        out_a.numpy()[:] = 0
        out_c.numpy()[:] = 0
        graph.launch(stream)
        stream.sync()
        assert bytes(out_a.numpy()) == b"\x11" * 64
        assert bytes(out_c.numpy()) == b"\x22" * 64
    graph.close()
    settle(cuguard_driver)
    if isinstance(cuguard_driver, SimulatedDriver):
        assert not cuguard_driver.dangling
        assert not cuguard_driver.use_after_release
    out_a.close()
    out_c.close()


# --- cloning a definition that holds a leaked node --------------------------------------------------


@pytest.mark.contract("S2", "G3")
def test_clone_of_a_definition_with_a_leaked_node(cuguard_driver: Any, dev: Device, stream: Stream) -> None:
    with GraphDefinition(dev) as g:
        a = g.empty()
        b = a.empty()
        c = b.empty()
        with inject("cuGraphDestroyNode", OUT_OF_MEMORY), pytest.raises(CUDAError, match="leaked"):
            b.destroy()
        assert b.closed
        with record_calls() as log:
            copy = g.clone()
        # The leaked handle was never passed to the driver again (not even to find its copy).
        assert not [call for call in log if any(int(arg) == b._int for arg in call.args if _is_handle(arg))]
        with copy:
            ta, tc = copy.find_node(a), copy.find_node(c)
            with pytest.raises(ValueError, match="not a node"):
                copy.find_node(b)
            (tb,) = copy.nodes - {ta, tc}  # the leaked node's copy, wrapped when listed
            assert not tb.closed  # a node of the copy like any other
            assert copy.edges == {(ta, tb), (tb, tc)}
            tb.destroy()  # the copy's node can be destroyed; the original stays leaked
            assert copy.edges == set()
            assert g.edges == {(a, b), (b, c)}
            with copy.instantiate() as graph:
                graph.launch(stream)
                stream.sync()
        with pytest.raises(ResourceClosedError):
            b.handle  # noqa: B018


def _is_handle(arg: object) -> bool:
    try:
        int(arg)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return False
    return not isinstance(arg, bool | float)
