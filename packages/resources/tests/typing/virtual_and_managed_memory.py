"""Public-API usage of the virtual, managed and legacy pinned memory resources that ``mypy --strict``
must accept (type-checked, not run).

If a change to cuguard.resources makes this file fail to type-check, users' code would too.
"""

from __future__ import annotations

from typing import assert_type

from cuguard.resources import (
    Buffer,
    Device,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    MemoryResource,
    PinnedBuffer,
    Stream,
    VirtualMemoryResource,
    VirtualMemoryResourceOptions,
)


def virtual(device: Device) -> None:
    options = VirtualMemoryResourceOptions(granularity="minimum", peers=(1,), peer_access="r", addr_align=1 << 21)
    mr = VirtualMemoryResource(device, options)
    assert_type(mr.granularity, int)
    assert_type(mr.options, VirtualMemoryResourceOptions)
    buf = mr.allocate(1 << 20)
    assert_type(buf, Buffer)
    assert_type(mr.modify_allocation(buf, 4 << 20), Buffer)
    assert_type(mr.held, int)
    assert_type(mr.buffers, tuple[Buffer, ...])
    assert_type(mr.device_id, int)
    generic: MemoryResource[Buffer] = mr
    generic.deallocate(buf)


def managed(device: Device, stream: Stream) -> None:
    mr = ManagedMemoryResource(device, attach="host")
    buf = mr.allocate(4096, stream)
    assert_type(buf, Buffer)
    mr.prefetch(buf, device, stream)
    mr.prefetch(buf, "host", stream)
    mr.advise(buf, "set_preferred_location", 0)
    mr.advise(buf, "set_read_mostly")
    assert_type(mr.is_host_accessible, bool)
    mr.deallocate(buf)


def legacy_pinned() -> None:
    mr = LegacyPinnedMemoryResource(portable=True)
    pinned = mr.allocate(256)
    assert_type(pinned, PinnedBuffer)
    assert_type(mr.device_id, None)
    generic: MemoryResource[PinnedBuffer] = mr
    generic.deallocate(pinned)
