"""Public-API usage of typed views that ``mypy --strict`` must accept (type-checked, not run)."""

from __future__ import annotations

from typing import Any, assert_type

from cuguard.resources import Device, Stream, StridedMemoryView, args_viewable_as_strided_memory


def views(device: Device, stream: Stream, producer: Any) -> None:
    buf = device.allocate(64)  # Buffer | PinnedBuffer: the device's memory resource decides
    view = StridedMemoryView.from_buffer(buf, (4, 4), dtype="float32", is_readonly=True)
    assert_type(view, StridedMemoryView)
    assert_type(view.ptr, int)
    assert_type(view.shape, tuple[int, ...])
    assert_type(view.strides, tuple[int, ...] | None)
    assert_type(view.size, int)
    assert_type(view.device_id, int)
    assert_type(view.is_device_accessible, bool)
    assert_type(view.readonly, bool)
    assert_type(view.stream_ptr, int | None)
    assert_type(StridedMemoryView.from_buffer(buf, 16, itemsize=4), StridedMemoryView)
    assert_type(StridedMemoryView(producer, stream.handle), StridedMemoryView)
    assert_type(StridedMemoryView.from_dlpack(producer, -1), StridedMemoryView)
    assert_type(StridedMemoryView.from_cuda_array_interface(producer, stream, device=device), StridedMemoryView)
    assert_type(StridedMemoryView.from_any_interface(producer), StridedMemoryView)
    capsule = view.__dlpack__(max_version=(1, 0))
    assert_type(view.__dlpack_device__(), tuple[int, int])
    assert_type(view.__cuda_array_interface__, dict[str, Any])
    del capsule


@args_viewable_as_strided_memory((0,))
def scaled(data: Any, factor: float) -> float:
    return factor


def call(producer: Any) -> None:
    assert_type(scaled(producer, 2.0), float)
