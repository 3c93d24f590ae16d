"""C1-C4 across layers: switching to the device's context and back, for resources and graphs together."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning, format_handle
from cuguard.graphs import GraphDefinition
from cuguard.resources import Device, Kernel, LaunchConfig, Stream
from cuguard.testing import inject, leak_check, record_calls, restore_fault

INVALID_CONTEXT = 201


def switches(calls: list[Any]) -> list[str]:
    return [("restore" if c.restore else "switch") for c in calls if c.name == "cuCtxSetCurrent"]


@pytest.mark.contract("C1")
def test_C1_one_switch_and_one_restore_and_none_when_already_current(
    dev: Device, kernels: dict[str, Kernel], config: LaunchConfig, image: bytes, other_context: Context
) -> None:
    stream = dev.create_stream()
    g = GraphDefinition(dev)
    buf = dev.allocate(64)
    operations: list[tuple[str, Callable[[], Any]]] = [
        ("allocate", lambda: dev.allocate(64)),
        ("create_event", dev.create_event),
        ("load_module", lambda: dev.load_module(image)),
        ("kernel node", lambda: g.launch(config, kernels["fill_u8"], buf, 1, 64)),
        ("instantiate", g.instantiate),
        ("sync", dev.sync),
    ]
    kept = []  # what the operations made (dropping it here would release it inside the recording)
    for name, op in operations:
        with record_calls() as calls:
            kept.append(op())
        assert switches(calls) == ["switch", "restore"], (name, [c.name for c in calls])
        assert not any(c.name in ("cuCtxPushCurrent", "cuCtxPopCurrent") for c in calls), name
    dev.set_current()
    for name, op in operations:
        with record_calls() as calls:
            kept.append(op())
        assert switches(calls) == [], (name, [c.name for c in calls])
    other_context.set_current()
    for obj in (g, buf, stream):
        obj.close()
    kept.clear()


@pytest.mark.contract("C2")
def test_C2_a_failed_restore_destroys_what_was_created_and_says_what_is_current(
    dev: Device, kernels: dict[str, Kernel], config: LaunchConfig, image: bytes, other_context: Context
) -> None:
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    g.memset(buf, 1)
    creating: list[tuple[str, Callable[[], Any]]] = [
        ("stream", dev.create_stream),
        ("buffer", lambda: dev.allocate(64)),
        ("module", lambda: dev.load_module(image)),
        ("executable graph", g.instantiate),
        ("kernel node", lambda: g.launch(config, kernels["fill_u8"], buf, 1, 64)),
    ]
    nodes_before = len(g.nodes)
    for what, op in creating:
        with leak_check(), restore_fault(INVALID_CONTEXT), pytest.raises(CUDAError) as info:
            op()
        text = str(info.value)
        assert "could not be restored" in text, what
        assert format_handle(dev.context.handle) in text, (what, text)  # names the context now current
        assert "set_current()" in text, what
        assert Context.current() == dev.context  # the restore did fail: the device's context is current
        other_context.set_current()
    assert len(g.nodes) == nodes_before  # the kernel node was removed again
    # the operation fails and the restore fails too: the operation's error, with the restore as a note
    with inject("cuGraphInstantiate", 2), restore_fault(INVALID_CONTEXT), pytest.raises(CUDAError) as info:
        g.instantiate()
    assert info.value.call == "cuGraphInstantiate"
    assert any("could not be restored" in note for note in info.value.__notes__)
    other_context.set_current()
    g.close()
    buf.close()


@pytest.mark.contract("C3")
def test_C3_a_failed_restore_in_a_collection_is_a_warning_and_keeps_the_cleanup_context(
    dev: Device, image: bytes, other_context: Context
) -> None:
    module = dev.load_module(image)
    buf = dev.allocate(64)
    pinned = dev.allocate_pinned(64)
    for victim in ("module", "buf", "pinned"):
        other_context.set_current()
        with warnings.catch_warnings(record=True) as caught, restore_fault(INVALID_CONTEXT):
            warnings.simplefilter("always")
            if victim == "module":
                del module
            elif victim == "buf":
                del buf
            else:
                del pinned
            gc.collect()
        messages = [str(w.message) for w in caught if issubclass(w.category, CUDAWarning)]
        assert len(messages) == 1, (victim, messages)
        assert "could not be restored" in messages[0]
        assert Context.current() == dev.context, victim  # the thread keeps the context the cleanup used


@pytest.mark.contract("C4")
def test_C4_nothing_is_retried(
    dev: Device, stream: Stream, kernels: dict[str, Kernel], config: LaunchConfig, other_context: Context
) -> None:
    buf = dev.allocate(64)
    g = GraphDefinition(dev)
    g.memset(buf, 1).launch(config, kernels["add_u8"], buf, 1, 64)
    for function in ("cuGraphInstantiate", "cuMemAlloc", "cuStreamCreate", "cuCtxSynchronize", "cuCtxSetCurrent"):
        for code in (INVALID_CONTEXT, 4, 700):  # INVALID_CONTEXT, DEINITIALIZED, ILLEGAL_ADDRESS
            op = {
                "cuGraphInstantiate": g.instantiate,
                "cuMemAlloc": lambda: dev.allocate(64),
                "cuStreamCreate": dev.create_stream,
                "cuCtxSynchronize": dev.sync,
                "cuCtxSetCurrent": g.instantiate,
            }[function]
            with record_calls() as calls, inject(function, code, every=True), pytest.raises(CUDAError):
                op()
            failed = [c for c in calls if c.injected]
            assert len(failed) == 1, (function, code, [c.name for c in calls])
            other_context.set_current()
    with record_calls() as calls, restore_fault(INVALID_CONTEXT, every=True), pytest.raises(CUDAError):
        g.instantiate()
    assert sum(c.restore for c in calls) == 1
    other_context.set_current()
    g.close()
    buf.close()
