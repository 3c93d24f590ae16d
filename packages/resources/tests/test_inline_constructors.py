"""The hot creation paths build their objects inline; each sets every slot its class's constructor sets (O1).

``Device.create_stream()``, ``Device.create_event()`` and a stream-ordered ``Device.allocate``
build their objects field by field instead of calling the classes' constructors (a call layer
less on the operations the overhead benchmark measures). A slot the inline path forgot would
surface much later as an ``AttributeError`` in ``close()`` or a collection: these tests compare
each inline path with the constructor's path, slot by slot.
"""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.resources import Buffer, Device, Event, Stream

pytestmark = pytest.mark.contract("O1")


def _slots(cls: type) -> set[str]:
    return {s for k in cls.__mro__ for s in getattr(k, "__slots__", ()) if s != "__weakref__"}


def _state(obj: object, differ: set[str]) -> dict[str, Any]:
    """Every slot ``obj`` has set, with its value (only that it is set, for the slots in ``differ``)."""
    out: dict[str, Any] = {}
    for slot in _slots(type(obj)):
        if hasattr(obj, slot):
            value = getattr(obj, slot)
            out[slot] = "set" if slot in differ else value
    return out


def _compare(inline: object, constructed: object, differ: set[str], unset: frozenset[str] = frozenset()) -> None:
    """Both set every slot but the ``unset`` ones, to the same values (the ``differ`` ones to any)."""
    every = _slots(type(inline)) - unset
    # A compiled class's fields are never unset (None until set): only "at least these" can be asked.
    inline_state, constructed_state = _state(inline, differ), _state(constructed, differ)
    assert every <= set(inline_state), "the inline path leaves a slot unset"
    assert every <= set(constructed_state)
    assert {k: inline_state[k] for k in every} == {k: constructed_state[k] for k in every}


def test_create_stream(device: Device) -> None:
    with device.context:
        inline = device.create_stream()  # the device's context is current: the inline path
    constructed = device.create_stream(priority=0)  # a priority takes the constructor (Stream._make)
    _compare(inline, constructed, {"_handle"})
    for stream in (inline, constructed):
        stream.close()


def test_create_event(device: Device) -> None:
    with device.context:
        inline = device.create_event()
    constructed = Event._create(device.context, device.ordinal, False)
    _compare(inline, constructed, {"_handle"})
    for event in (inline, constructed):
        event.close()


def test_create_ipc_event(device: Device) -> None:
    shared = device.create_event(ipc_enabled=True)  # made through new_event, as Event._create's are
    constructed = Event._create(device.context, device.ordinal, False)
    _compare(shared, constructed, {"_handle"})
    assert shared.is_ipc_enabled
    assert not constructed.is_ipc_enabled
    for event in (shared, constructed):
        event.close()


def test_stream_ordered_allocate(device: Device) -> None:
    stream = device.create_stream()
    inline = device.allocate(64, stream)  # stream-ordered: the inline path
    constructed = device.allocate(64)  # synchronous: Buffer._made
    # The stream a buffer is freed on differs by design (None: freed synchronously); _mr_data is set
    # only for the buffers of a memory resource (_mr set).
    _compare(inline, constructed, {"_handle", "_stream"}, frozenset({"_mr_data"}))
    assert isinstance(inline, Buffer)
    for buf in (inline, constructed):
        buf.close()
    stream.sync()
    stream.close()


def test_the_compared_classes_are_the_inline_ones() -> None:
    # If a class gains a slot, the comparison above covers it: nothing to update here.
    assert {"_may_capture", "_lender", "_borrowers", "_release_deferred"} <= _slots(Stream)
    assert {"_timing", "_release_deferred"} <= _slots(Event)
    assert {"_graph_used", "_release_deferred", "_mr"} <= _slots(Buffer)
