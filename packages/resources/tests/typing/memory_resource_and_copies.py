"""Device.memory_resource and copies between buffers of every kind, as the type checker sees them."""

from __future__ import annotations

from typing import Any, assert_type

from cuguard.resources import Buffer, Device, MemoryResource, PinnedBuffer, PinnedMemoryResource, Stream


def memory_resource(device: Device, stream: Stream) -> None:
    default: MemoryResource[Any] = device.memory_resource
    pinned = PinnedMemoryResource(device)
    device.memory_resource = pinned
    buf = device.allocate(64, stream)
    assert_type(buf, Buffer | PinnedBuffer)
    device.memory_resource = default
    if isinstance(buf, PinnedBuffer):
        buf.close(stream)
    pinned.close()


def copies(device: Device, stream: Stream) -> None:
    host = device.allocate_pinned(64)
    other = device.allocate_pinned(64)
    plain = device.allocate(64)
    assert_type(host.copy_to(plain, stream=stream), None)
    assert_type(host.copy_from(plain), None)
    assert_type(host.copy_from(other, stream=stream), None)
    assert_type(other.copy_to(host), None)
    for buf in (host, other, plain):
        buf.close()
