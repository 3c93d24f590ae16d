"""Public-API usage of memory pools, IPC and memory accounting that ``mypy --strict`` must accept
(type-checked, not run).

If a change to cuguard.resources makes this file fail to type-check, users' code would too.
"""

from __future__ import annotations

from typing import Any, assert_type

from cuguard.resources import (
    Buffer,
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    Event,
    IPCAllocationHandle,
    IPCBufferDescriptor,
    IPCEventDescriptor,
    MemoryPoolAttributes,
    MemoryRecord,
    MemoryReport,
    MemoryResource,
    PinnedBuffer,
    PinnedMemoryResource,
    PinnedMemoryResourceOptions,
    Stream,
    memory_in_use,
)


def pools(device: Device, stream: Stream) -> None:
    mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions(max_size=1 << 30, release_threshold=0))
    current = DeviceMemoryResource(device.ordinal)
    buf = mr.allocate(1 << 20, stream)
    assert_type(buf, Buffer)
    assert_type(buf.memory_resource, MemoryResource[Any] | None)
    mr.deallocate(buf, stream)
    attrs = mr.attributes
    assert_type(attrs, MemoryPoolAttributes)
    attrs.release_threshold = 1 << 20
    assert_type(attrs.used_mem_high, int)
    attrs.reset_high_watermarks()
    mr.trim(keep=0)
    assert_type(mr.held, int)
    assert_type(mr.device_id, int)
    assert_type(current.owned, bool)
    pmr = PinnedMemoryResource(device, PinnedMemoryResourceOptions(numa_id=0))
    pbuf = pmr.allocate(4096)
    assert_type(pbuf, PinnedBuffer)
    assert_type(pmr.device_id, None)
    pbuf.close(stream)
    with mr, pmr:
        pass


def ipc(device: Device, mr: DeviceMemoryResource, buf: Buffer) -> None:
    handle = mr.get_allocation_handle()
    assert_type(handle, IPCAllocationHandle)
    assert_type(handle.fd, int)
    imported = DeviceMemoryResource.from_allocation_handle(device, handle)
    desc = buf.get_ipc_descriptor()
    assert_type(desc, IPCBufferDescriptor)
    mapped = Buffer.from_ipc_descriptor(imported, desc)
    assert_type(mapped, Buffer)
    event = device.create_event(ipc_enabled=True)
    edesc = event.get_ipc_descriptor()
    assert_type(edesc, IPCEventDescriptor)
    assert_type(Event.from_ipc_descriptor(edesc, device), Event)
    handle.close()


def accounting() -> None:
    report = memory_in_use()
    assert_type(report, MemoryReport)
    assert_type(report.total, int)
    assert_type(report.by_device, dict[int | None, int])
    for record in report:
        assert_type(record, MemoryRecord)
