"""The misuse sweep's operations of the resources layer: devices, streams, events and buffers.

The memory resources are in :mod:`.ops_memory`; modules, launches and code in :mod:`.ops_kernels`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from cuguard.sweeps._misuse.model import MEMORY_RESOURCES, SIZE
from cuguard.sweeps._misuse.ops_base import (
    CONTEXT,
    EVENT,
    HOST,
    MEMORY,
    STREAM,
    Op,
    Param,
    _allocate_through,
    _block,
    _boom,
    _exit,
    _noop,
    _p,
    _typed_views,
    _v,
    adder,
    image_param,
    ordinal_param,
    size_param,
)

__all__ = ["buffer_ops", "device_ops", "stream_and_event_ops"]


def device_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Devices and the system."""
    R = L.resources
    ops: list[Op] = []
    add = adder(ops)
    ordinal = ordinal_param()
    sizes = size_param()
    images = image_param(image)
    add("resources.Device()", None, R.Device, ordinal, weight=2)
    add("resources.Device.count", None, R.Device.count)
    add("resources.Device.name", "Device", lambda d: d.name)
    add(
        "resources.Device.attribute",
        "Device",
        lambda d, a: d.attribute(a),
        _v("attribute", 75, 76, 1, -5, "x", None, 10**6, good=2),
    )
    add("resources.Device.compute_capability", "Device", lambda d: d.compute_capability)
    add(
        "resources.Device.properties",
        "Device",
        lambda d, name: (getattr(d.properties, name), d.arch, d.uuid),
        _v("name", "multiprocessor_count", "warp_size", "integrated", "compute_capability_minor"),
    )
    add("resources.Device.memory_info", "Device", lambda d: d.memory_info)
    add("resources.Device.default_stream", "Device", lambda d: d.default_stream.__cuda_stream__())
    add(
        "resources.Device.create_stream[obj]",
        "Device",
        lambda d, obj: d.create_stream(obj),
        _p("obj", STREAM, "Stream", optional=True),
    )
    add("resources.Device.pci_bus_id", "Device", lambda d: d.pci_bus_id)
    add("resources.Device.__enter__", "Device", _block, _v("fail", False, True))
    add("resources.system.get_num_devices", None, R.system.get_num_devices)
    add(
        "resources.system.get_user_mode_driver_version",
        None,
        lambda: (R.system.get_user_mode_driver_version(), R.system.get_driver_version(), R.system.driver_version),
    )
    add("resources.Device.ordinal", "Device", lambda d: (d.ordinal, d.handle), uses_receiver=False)
    add("resources.Device.context", "Device", lambda d: d.context)
    add("resources.Device.set_current", "Device", lambda d: d.set_current(), sets_context=True, weight=2)
    add("resources.Device.sync", "Device", lambda d: d.sync())
    add(
        "resources.Device.create_stream",
        "Device",
        lambda d, nb, pr: d.create_stream(non_blocking=nb, priority=pr),
        _v("non_blocking", False, True),
        _v("priority", None, None, 0, -1, -5, 1, "x", 1.5, good=6),
        weight=3,
    )
    add(
        "resources.Device.create_event",
        "Device",
        lambda d, t: d.create_event(timing=t),
        _v("timing", True, False),
        weight=2,
    )
    sizes = _v("size", SIZE, SIZE, 0, 1, 128, -1, 1 << 52, 1.5, None, "64", good=2)
    add(
        "resources.Device.allocate",
        "Device",
        lambda d, size, stream: d.allocate(size, stream),
        sizes,
        _p("stream", STREAM, "Stream", optional=True),
        # documented: a stream being captured is refused, as by the pools (graph memory)
        extra_errors=(RuntimeError,),
        weight=4,
    )
    add("resources.Device.allocate_pinned", "Device", lambda d, size: d.allocate_pinned(size), sizes, weight=2)
    add(
        "resources.Device.memory_resource",
        "Device",
        _allocate_through,
        _p("memory_resource", frozenset(MEMORY_RESOURCES), "MemoryResource"),
        weight=2,
    )
    images = _v("image", image, image, lambda: image().decode(errors="replace"), b"garbage", None, 5, good=3)
    add("resources.Device.load_module", "Device", lambda d, img: d.load_module(img), images)
    return ops


def stream_and_event_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Streams and events, and the release of every resource kind."""
    R = L.resources
    ops: list[Op] = []
    add = adder(ops)
    add(
        "resources.Stream.wrap",
        None,
        R.Stream.wrap,
        # plain ints would be garbage handles: the caller's responsibility, not drawn
        Param(
            "obj",
            STREAM | {"int", "CUstream"},
            "Stream",
            names=("__cuda_stream__", "CUstream"),
            values=(None, 1.5, "x"),
        ),
        _p("context", CONTEXT, "Context"),
    )
    add("resources.Stream.flags", "Stream", lambda s: (s.flags, s.priority))
    add("resources.Stream.sync", "Stream", lambda s: s.sync(), weight=2)
    add("resources.Stream.query", "Stream", lambda s: s.query())
    add("resources.Stream.wait", "Stream", lambda s, o: s.wait(o), _p("other", EVENT | STREAM, "Event"), weight=2)
    add(
        "resources.Stream.record",
        "Stream",
        lambda s, e: s.record(e),
        _p("event", EVENT, "Event", optional=True),
        weight=2,
    )
    add(
        "resources.Stream.launch_host_func",
        "Stream",
        lambda s, fn: s.launch_host_func(fn),
        _v("fn", lambda: _noop, lambda: _boom, None, 5, good=2),
        extra_errors=(RuntimeError,),  # documented: refused on a stream being captured
    )
    add("resources.Stream.__cuda_stream__", "Stream", lambda s: s.__cuda_stream__())
    add("resources.Stream.handle", "Stream", lambda s: s.handle)
    add("resources.Stream.device", "Stream", lambda s: (s.device, s.context, s.closed), uses_receiver=False)
    for cls in ("Stream", "Event", "Buffer", "PinnedBuffer", "Module"):
        frees = cls in ("Buffer", "PinnedBuffer")
        add(f"resources.{cls}.close", cls, lambda o: o.close(), idempotent_close=True, frees_memory=frees)
        add(
            f"resources.{cls}.__exit__",
            cls,
            _exit,
            idempotent_close=True,
            exit=True,
            frees_memory=frees,
        )

    # --- resources: events -----------------------------------------------------------------------
    add("resources.Event.record", "Event", lambda e, s: e.record(s), _p("stream", STREAM, "Stream"), weight=2)
    add("resources.Event.sync", "Event", lambda e: e.sync())
    add("resources.Event.query", "Event", lambda e: e.query())
    add("resources.Event.elapsed_since", "Event", lambda e, s: e.elapsed_since(s), _p("start", EVENT, "Event"))
    add("resources.Event.handle", "Event", lambda e: e.handle)
    add("resources.Event.timing", "Event", lambda e: (e.timing, e.device, e.context, e.closed), uses_receiver=False)
    return ops


def buffer_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Buffers and pinned buffers: copies, fills, exports, typed views."""
    R = L.resources
    ops: list[Op] = []
    add = adder(ops)
    data = _p("src", MEMORY | HOST, "Buffer", values=())
    add(
        "resources.Buffer.copy_from",
        "Buffer",
        lambda b, src, s: b.copy_from(src, s),
        data,
        _p("stream", STREAM, "Stream", optional=True),
        weight=2,
    )
    add(
        "resources.Buffer.copy_to",
        "Buffer",
        lambda b, dst, s: b.copy_to(dst, s),
        _p("dst", MEMORY | HOST, "Buffer"),
        _p("stream", STREAM, "Stream", optional=True),
        weight=2,
    )
    for method, param in (("copy_from", "src"), ("copy_to", "dst")):
        add(
            f"resources.PinnedBuffer.{method}",
            "PinnedBuffer",
            lambda p, other, s, method=method: getattr(p, method)(other, s),
            _p(param, MEMORY, "Buffer"),
            _p("stream", STREAM, "Stream", optional=True),
            weight=2,
        )
    add(
        "resources.Buffer.fill",
        "Buffer",
        lambda b, v, s: b.fill(v, s),
        _v("value", 0, 7, 255, 256, -1, 1.5, None, True, good=3),
        _p("stream", STREAM, "Stream", optional=True),
        weight=2,
    )
    add("resources.Buffer.ptr", "Buffer", lambda b: (b.ptr, b.handle, b.__cuda_array_interface__))
    add(
        "resources.Buffer.size",
        "Buffer",
        lambda b: (b.size, b.device, b.stream, b.closed, b.owned, b.context, b.__dlpack_device__()),
        uses_receiver=False,
    )
    add(
        "resources.Buffer.__dlpack__",
        "Buffer",
        lambda b, copy, dl_device, version: b.__dlpack__(copy=copy, dl_device=dl_device, max_version=version),
        _v("copy", None, False, True, good=2),
        _v("dl_device", None, (2, 0), (2, 1), (1, 0), good=2),
        _v("max_version", None, (1, 0), (0, 8), (1, 3)),
    )
    add(
        "resources.PinnedBuffer.__dlpack__",
        "PinnedBuffer",
        lambda p, copy, version: (p.__dlpack__(copy=copy, max_version=version), p.__dlpack_device__()),
        _v("copy", None, False, True, good=2),
        _v("max_version", None, (1, 0), (0, 8)),
    )
    add(
        "resources.Buffer.close[stream]",
        "Buffer",
        lambda b, s: b.close(s),
        _p("stream", STREAM, "Stream", optional=True),  # None: the buffer's own stream, as close()
        idempotent_close=True,
        frees_memory=True,
    )
    add(
        "resources.Buffer.from_handle",
        "Buffer",
        lambda b, size: R.Buffer.from_handle(b.ptr, size, owner=b).close(),
        _v("size", SIZE, 0, -1, None, 1.5, good=2),
    )
    add(
        "resources.Buffer.from_dlpack",
        None,
        lambda obj, s: R.Buffer.from_dlpack(obj, stream=s).close(),
        _p("obj", MEMORY, "__dlpack__"),
        _p("stream", STREAM, "Stream", optional=True),
    )
    add(
        "resources.Buffer.from_cuda_array_interface",
        None,
        lambda obj: R.Buffer.from_cuda_array_interface(obj).close(),
        _p("obj", frozenset({"Buffer"}), "__cuda_array_interface__"),
    )
    add(
        "resources.StridedMemoryView.from_buffer",
        "Buffer",
        lambda b, shape, dtype: _typed_views(R, b, shape, dtype),
        _v("shape", 4, (2, 2), (), (0,), -1, (1.5,), None, "4", good=4),
        _v("dtype", "uint8", "float32", "int64", None, 5, "S4", good=3),
    )
    add("resources.PinnedBuffer.address", "PinnedBuffer", lambda p: (p.address, p.handle))
    add(
        "resources.PinnedBuffer.size",
        "PinnedBuffer",
        lambda p: (p.size, p.closed, p.context, p.memory_resource),
        uses_receiver=False,
    )
    add(
        "resources.PinnedBuffer.numpy",
        "PinnedBuffer",
        lambda p, t: p.numpy(t),
        _v("dtype", "uint8", "uint32", "float64", 5, good=3),
    )
    return ops
