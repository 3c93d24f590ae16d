"""Public-API usage of device queries and memory interop that ``mypy --strict`` must accept (type-checked, not run).

If a change to cuguard.resources makes this file fail to type-check, users' code would too.
"""

from __future__ import annotations

from typing import Any, assert_type

from cuguard.resources import Buffer, Device, DeviceProperties, Event, MemoryInfo, PinnedBuffer, Stream


def queries() -> None:
    device = Device()
    assert_type(device.properties, DeviceProperties)
    assert_type(device.properties.multiprocessor_count, int)
    assert_type(device.arch, str)
    assert_type(device.uuid, str)
    info = device.memory_info
    assert_type(info, MemoryInfo)
    assert_type(info.free, int)
    assert_type(device.default_stream, Stream)
    assert_type(device.create_event(), Event)
    assert_type(device.create_event(timing=True), Event)


def interop(device: Device, foreign_stream: Any, array: Any) -> None:
    assert_type(device.create_stream(foreign_stream), Stream)
    buf = Buffer.from_handle(0x1000, 64, device=device, owner=array)
    assert_type(buf, Buffer)
    assert_type(buf.owned, bool)
    assert_type(Buffer.from_dlpack(array, stream=foreign_stream), Buffer)
    assert_type(Buffer.from_cuda_array_interface(array, stream=device.default_stream, device=0), Buffer)
    buf.close(device.default_stream)
    pinned: PinnedBuffer = device.allocate_pinned(16)
    assert_type(pinned.__dlpack_device__(), tuple[int, int])
