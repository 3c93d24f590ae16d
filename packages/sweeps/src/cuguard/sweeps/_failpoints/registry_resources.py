"""The failure-point sweep's scenarios of the resources layer: devices, streams, buffers, events, modules, launches.

Each function declares the scenarios of one area; the memory resources and typed views
are in :mod:`.registry_memory`. :data:`NO_DRIVER_CALL_RESOURCES` lists the layer's
public callables (outside the memory resources) that make no driver call, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cuguard.sweeps._failpoints.registry_base import (
    _KERNEL_ATTRIBUTES,
    SIZE,
    Env,
    Scenario,
    _buf_probe,
    _closed_stream_buffer,
    _ctx_probe,
    _extended_launch,
    _Foreign,
    _in_block,
    _kernel_attribute,
    _pinned,
    _release,
    _stream_probe,
    _with_other_ctx_resource,
    adder,
    dev_fresh,
    dev_only,
    nothing,
    with_buffers,
    with_cubin_module,
    with_event,
    with_module,
    with_object_code,
    with_recorded_events,
    with_stream,
    with_streams,
)

__all__ = [
    "NO_DRIVER_CALL_RESOURCES",
    "device_scenarios",
    "event_and_copy_scenarios",
    "module_scenarios",
    "stream_scenarios",
]

_NO_CALL_RESOURCE = "returns what the object recorded at creation"


def device_scenarios() -> list[Scenario]:
    """Devices and the system: properties, the primary context, the factories."""
    out: list[Scenario] = []
    add = adder(out)
    R = "resources."
    add(R + "Device()", nothing, lambda e, s: e.resources.Device(0))
    add(R + "Device.count", nothing, lambda e, s: e.resources.Device.count())
    add(R + "Device.name", dev_fresh, lambda e, s: s.dev.name)
    add(R + "Device.attribute", dev_fresh, lambda e, s: s.dev.attribute(16))
    add(R + "Device.compute_capability", dev_fresh, lambda e, s: s.dev.compute_capability)
    add(R + "Device.context", dev_fresh, lambda e, s: e.own(s.dev.context), probe=_ctx_probe)
    add(R + "Device.set_current", dev_only, lambda e, s: s.dev.set_current(), sets_context=True, probe=_ctx_probe)
    add(R + "Device.sync", dev_only, lambda e, s: s.dev.sync(), probe=_ctx_probe)
    add(R + "Device.create_stream", dev_only, lambda e, s: e.own(s.dev.create_stream()), probe=_ctx_probe)
    add(
        R + "Device.create_stream[priority]",
        dev_only,
        lambda e, s: e.own(s.dev.create_stream(non_blocking=True, priority=0)),
        covers=(R + "Device.create_stream",),
        probe=_ctx_probe,
    )
    add(R + "Device.create_event", dev_only, lambda e, s: e.own(s.dev.create_event()), probe=_ctx_probe)
    add(R + "Device.allocate", dev_only, lambda e, s: e.own(s.dev.allocate(SIZE)), probe=_ctx_probe)
    add(
        R + "Device.allocate[stream]",
        with_stream,
        lambda e, s: e.own(s.dev.allocate(SIZE, s.stream)),
        covers=(R + "Device.allocate",),
        probe=_stream_probe,
    )
    add(R + "Device.allocate_pinned", dev_only, lambda e, s: e.own(_pinned(e, s)), probe=_ctx_probe)
    add(R + "Device.load_module", dev_only, lambda e, s: e.own(s.dev.load_module(e.image)), probe=_ctx_probe)
    add(
        R + "Device()[current]",
        dev_only,
        lambda e, s: e.resources.Device(),
        covers=(R + "Device()",),
    )
    add(R + "Device.properties", dev_fresh, lambda e, s: s.dev.properties.multiprocessor_count)
    add(R + "Device.arch", dev_fresh, lambda e, s: s.dev.arch)
    add(R + "Device.uuid", dev_fresh, lambda e, s: s.dev.uuid)
    add(R + "Device.pci_bus_id", dev_fresh, lambda e, s: s.dev.pci_bus_id)
    add(
        R + "Device.__enter__",
        dev_only,
        lambda e, s: _in_block(s.dev),
        covers=(R + "Device.__enter__", R + "Device.__exit__"),
        probe=_ctx_probe,
    )
    add(
        R + "system.get_num_devices", nothing, lambda e, s: e.resources.system.get_num_devices(), covers=(R + "system",)
    )
    add(
        R + "system.get_user_mode_driver_version",
        nothing,
        lambda e, s: (e.resources.system.get_user_mode_driver_version(), e.resources.system.driver_version),
        covers=(R + "system",),
    )
    add(R + "Device.memory_info", dev_only, lambda e, s: s.dev.memory_info, probe=_ctx_probe)
    add(R + "Device.default_stream", dev_fresh, lambda e, s: e.own(s.dev.default_stream), probe=_ctx_probe)
    add(
        R + "Device.create_stream[obj]",
        with_stream,
        lambda e, s: s.dev.create_stream(_Foreign(s.stream)),
        covers=(R + "Device.create_stream",),
        probe=_stream_probe,
    )
    add(
        R + "Device.create_event[timing]",
        dev_only,
        lambda e, s: e.own(s.dev.create_event(timing=True)),
        covers=(R + "Device.create_event",),
        probe=_ctx_probe,
    )
    return out


def stream_scenarios() -> list[Scenario]:
    """Streams, and the release of every resource kind (close, ``with``, collection)."""
    out: list[Scenario] = []
    add = adder(out)
    R = "resources."
    add(
        R + "Stream.wrap",
        with_stream,
        lambda e, s: e.resources.Stream.wrap(s.stream, s.dev.context),
        probe=_stream_probe,
    )
    add(
        R + "as_stream",
        with_stream,
        lambda e, s: e.resources.as_stream(_Foreign(s.stream)),
        probe=_stream_probe,
    )
    add(R + "Stream.flags", with_stream, lambda e, s: s.stream.flags, probe=_stream_probe)
    add(R + "Stream.priority", with_stream, lambda e, s: s.stream.priority, probe=_stream_probe)
    add(R + "Stream.sync", with_stream, lambda e, s: s.stream.sync(), probe=_stream_probe)
    add(R + "Stream.query", with_stream, lambda e, s: s.stream.query(), probe=_stream_probe)
    add(R + "Stream.wait[event]", with_event, lambda e, s: s.stream.wait(s.event), covers=(R + "Stream.wait",))
    add(
        R + "Stream.wait[stream]",
        with_streams,
        lambda e, s: s.stream.wait(s.other),
        covers=(R + "Stream.wait",),
        probe=lambda e, s: (s.stream.wait(s.other), s.stream.sync()),
    )
    add(
        R + "Stream.record",
        with_stream,
        lambda e, s: e.own(s.stream.record()),
        probe=lambda e, s: s.stream.record().close(),
    )
    add(
        R + "Stream.record[event]",
        with_event,
        lambda e, s: s.stream.record(s.event),
        covers=(R + "Stream.record",),
        probe=lambda e, s: (s.stream.record(s.event), s.event.sync()),
    )
    add(
        R + "Stream.launch_host_func",
        with_stream,
        lambda e, s: s.stream.launch_host_func(lambda: None),
        probe=_stream_probe,
    )
    for cls, build in (
        ("Stream", lambda e, s: s.dev.create_stream()),
        ("Event", lambda e, s: s.dev.create_event()),
        ("Buffer", lambda e, s: s.dev.allocate(SIZE)),
        ("PinnedBuffer", _pinned),
        ("Module", lambda e, s: s.dev.load_module(e.image)),
    ):
        add(
            f"{R}{cls}.close",
            _with_other_ctx_resource(build),
            lambda e, s: s.obj.close(),
            releases=True,
            probe=lambda e, s: (s.obj.close(), _stream_probe(e, s)),
        )
        add(
            f"{R}{cls}.__exit__",
            _with_other_ctx_resource(build),
            lambda e, s: s.obj.__exit__(None, None, None),
            releases=True,
        )
        add(
            f"{R}{cls}.__del__",
            _with_other_ctx_resource(build),
            _release("obj"),
            kind="warn",
            releases=True,
            probe=_stream_probe,
        )
    add(
        R + "Buffer.close[stream]",
        _with_other_ctx_resource(lambda e, s: s.dev.allocate(SIZE, s.stream)),
        lambda e, s: s.obj.close(),
        covers=(R + "Buffer.close",),
        releases=True,
        probe=lambda e, s: (s.obj.close(), _stream_probe(e, s)),
    )
    add(
        R + "Buffer.close[on stream]",
        _with_other_ctx_resource(lambda e, s: s.dev.allocate(SIZE)),
        lambda e, s: s.obj.close(s.stream),
        covers=(R + "Buffer.close",),
        releases=True,
        probe=lambda e, s: (s.obj.close(), _stream_probe(e, s)),
    )
    add(
        R + "Buffer.from_handle",
        with_buffers,
        lambda e, s: e.resources.Buffer.from_handle(s.buf.ptr, SIZE, owner=s.buf).close(),
        probe=_buf_probe,
    )
    add(
        R + "Buffer.from_dlpack",
        with_buffers,
        lambda e, s: e.resources.Buffer.from_dlpack(s.buf, stream=s.stream).close(),
        probe=_buf_probe,
    )
    add(
        R + "Buffer.from_cuda_array_interface",
        _with_other_ctx_resource(lambda e, s: s.dev.allocate(SIZE, s.stream)),
        lambda e, s: e.resources.Buffer.from_cuda_array_interface(s.obj).close(),
        probe=_stream_probe,
    )
    add(
        R + "Buffer.close[stream closed]",
        _closed_stream_buffer,
        lambda e, s: s.obj.close(),
        covers=(R + "Buffer.close",),
        releases=True,
        probe=lambda e, s: (s.obj.close(), _stream_probe(e, s)),
    )
    add(
        R + "Buffer.__del__[stream]",
        _with_other_ctx_resource(lambda e, s: s.dev.allocate(SIZE, s.stream)),
        _release("obj"),
        covers=(R + "Buffer.__del__",),
        kind="warn",
        releases=True,
    )
    add(
        R + "Buffer.__del__[stream closed]",
        _closed_stream_buffer,
        _release("obj"),
        covers=(R + "Buffer.__del__",),
        kind="warn",
        releases=True,
    )
    return out


def event_and_copy_scenarios() -> list[Scenario]:
    """Events, and a buffer's copies and fills."""
    out: list[Scenario] = []
    add = adder(out)
    R = "resources."
    add(R + "Event.record", with_event, lambda e, s: s.event.record(s.stream), probe=lambda e, s: s.event.sync())
    add(R + "Event.sync", with_recorded_events, lambda e, s: s.end.sync(), probe=lambda e, s: s.end.sync())
    add(R + "Event.query", with_recorded_events, lambda e, s: s.end.query(), probe=lambda e, s: s.end.sync())
    add(
        R + "Event.elapsed_since",
        with_recorded_events,
        lambda e, s: s.end.elapsed_since(s.start),
        probe=lambda e, s: s.end.elapsed_since(s.start),
    )

    # --- resources: memory -----------------------------------------------------------------
    copies: list[tuple[str, str, Callable[[Env, Any], Any]]] = [
        ("copy_from", "buffer", lambda e, s: s.buf.copy_from(s.buf2)),
        ("copy_from", "buffer, stream", lambda e, s: s.buf.copy_from(s.buf2, s.stream)),
        ("copy_from", "host", lambda e, s: s.buf.copy_from(s.host)),
        ("copy_from", "host, stream", lambda e, s: s.buf.copy_from(s.host, s.stream)),
        ("copy_from", "pinned", lambda e, s: s.buf.copy_from(s.pinned)),
        ("copy_to", "host", lambda e, s: s.buf.copy_to(s.host)),
        ("copy_to", "host, stream", lambda e, s: s.buf.copy_to(s.host, s.stream)),
        ("copy_to", "pinned", lambda e, s: s.buf.copy_to(s.pinned)),
        ("copy_to", "buffer", lambda e, s: s.buf.copy_to(s.buf2)),
        ("fill", "", lambda e, s: s.buf.fill(3)),
        ("fill", "stream", lambda e, s: s.buf.fill(3, s.stream)),
    ]
    for method, variant, fn in copies:
        suffix = f"[{variant}]" if variant else ""
        add(f"{R}Buffer.{method}{suffix}", with_buffers, fn, covers=(f"{R}Buffer.{method}",), probe=_buf_probe)
    return out


def module_scenarios() -> list[Scenario]:
    """Modules, kernels, launches, kernel attributes and occupancy, object code."""
    out: list[Scenario] = []
    add = adder(out)
    R = "resources."
    add(
        R + "Module.load",
        with_stream,
        lambda e, s: e.own(e.resources.Module.load(s.dev.context, e.image)),
        probe=_stream_probe,
    )
    add(
        R + "Module.get_kernel",
        with_module,
        lambda e, s: s.module.get_kernel("fill_u8"),
        probe=lambda e, s: s.module.get_kernel("fill_u8"),
    )
    add(
        R + "Module.get_kernel[cubin]",
        with_cubin_module,
        lambda e, s: s.module.get_kernel("fill_u8"),
        covers=(R + "Module.get_kernel",),
        probe=lambda e, s: s.module.get_kernel("fill_u8"),
    )
    add(
        R + "launch",
        with_module,
        lambda e, s: e.resources.launch(s.stream, s.config, s.kernel, s.buf, 5, SIZE),
        probe=lambda e, s: (e.resources.launch(s.stream, s.config, s.kernel, s.buf, 5, SIZE), s.stream.sync()),
    )
    for variant, extra in (
        ("cluster", {"cluster": 2}),
        ("cooperative", {"cooperative_launch": True}),
        ("priority", {"priority": -1}),
        ("programmatic", {"programmatic_stream_serialization": True}),
    ):
        add(
            f"{R}launch[{variant}]",
            with_module,
            _extended_launch(extra),
            covers=(R + "launch",),
            probe=lambda e, s: (e.resources.launch(s.stream, s.config, s.kernel, s.buf, 5, SIZE), s.stream.sync()),
        )
    for attribute in _KERNEL_ATTRIBUTES:
        add(
            f"{R}KernelAttributes.{attribute}",
            with_module,
            _kernel_attribute(attribute),
            probe=lambda e, s: s.kernel.attributes.num_regs(),
        )
    add(
        R + "KernelOccupancy.max_active_blocks_per_multiprocessor",
        with_module,
        lambda e, s: s.kernel.occupancy.max_active_blocks_per_multiprocessor(SIZE, 0),
        probe=lambda e, s: s.kernel.occupancy.max_active_blocks_per_multiprocessor(SIZE, 0),
    )
    add(
        R + "KernelOccupancy.available_dynamic_shared_memory_per_block",
        with_module,
        lambda e, s: s.kernel.occupancy.available_dynamic_shared_memory_per_block(2, SIZE),
        probe=lambda e, s: s.kernel.occupancy.available_dynamic_shared_memory_per_block(2, SIZE),
    )
    add(
        R + "KernelOccupancy.max_active_clusters",
        with_module,
        lambda e, s: s.kernel.occupancy.max_active_clusters(
            e.resources.LaunchConfig(grid=1, cluster=2, block=SIZE), s.stream
        ),
        probe=lambda e, s: s.kernel.occupancy.max_potential_block_size(0, 0),
    )
    add(
        R + "KernelOccupancy.max_potential_cluster_size",
        with_module,
        lambda e, s: s.kernel.occupancy.max_potential_cluster_size(e.resources.LaunchConfig(grid=1, block=SIZE)),
        probe=lambda e, s: s.kernel.occupancy.max_potential_block_size(0, 0),
    )
    add(
        R + "KernelOccupancy.max_potential_block_size",
        with_module,
        lambda e, s: s.kernel.occupancy.max_potential_block_size(0, 0),
        probe=lambda e, s: s.kernel.occupancy.max_potential_block_size(0, 0),
    )
    add(
        R + "ObjectCode.get_kernel",
        with_object_code,
        lambda e, s: s.code.get_kernel("fill_u8"),
        probe=lambda e, s: s.code.get_kernel("fill_u8"),
    )
    return out


#: Public callables of resources that make no driver call, with the reason (keys as in ``Scenario.covers``).
NO_DRIVER_CALL_RESOURCES: dict[str, str] = {
    "resources.compiled": "a flag fixed at import: which build runs",
    "resources.Device.ordinal": _NO_CALL_RESOURCE,
    "resources.Device.handle": _NO_CALL_RESOURCE,
    "resources.Resource": "abstract base: close/handle/context are swept through each subclass",
    "resources.Kernel": "a record of a module's function: no driver call",
    "resources.LaunchConfig": "validates and stores launch dimensions: no driver call",
    "resources.pack_args": "packs kernel arguments in Python: no driver call",
    "resources.Kernel.pack": "packs kernel arguments in Python: no driver call",
    "resources.Kernel.parameters": "returns what get_kernel recorded: no driver call",
    "resources.KernelParameter": "a record of one kernel parameter: no driver call",
    "resources.describe_launch": "formats a launch for fault attribution: no driver call",
    "resources.wait_attributed": "one cuStreamSynchronize, swept through launch with attribution on",
    "resources.Program": "NVRTC compiler, not the CUDA driver (no driver call)",
    "resources.link": "nvJitLink, not the CUDA driver (no driver call)",
    "resources.ProgramOptions()": "validates and stores compiler options: no driver call",
    "resources.ProgramOptions.as_options": "formats compiler options: no driver call",
    "resources.ProgramCache()": "an in-memory (and file) cache of compiled images: no driver call",
    "resources.ProgramCache.key": "hashes the program's code and options: no driver call",
    "resources.ProgramCache.get": "reads the cache: no driver call",
    "resources.ProgramCache.put": "writes the cache: no driver call",
    "resources.ProgramCache.clear": "empties the in-memory cache: no driver call",
    "resources.Linker()": "validates its inputs; nvJitLink, not the CUDA driver (no driver call)",
    "resources.Linker.link": "nvJitLink, not the CUDA driver (no driver call)",
    "resources.Linker.backend": "a constant: no driver call",
    "resources.Linker.close": "nothing to release: no driver call",
    "resources.Linker.get_error_log": "returns the last link's log: no driver call",
    "resources.Linker.get_info_log": "returns the last link's log: no driver call",
    "resources.LinkerOptions()": "validates and stores linker options: no driver call",
    "resources.LinkerOptions.as_options": "formats linker options: no driver call",
    "resources.ObjectCode()": "refused with TypeError naming the factories (O1)",
    "resources.ObjectCode.from_cubin": "wraps bytes (or reads a file): no driver call",
    "resources.ObjectCode.from_ptx": "wraps bytes (or reads a file): no driver call",
    "resources.ObjectCode.from_ltoir": "wraps bytes (or reads a file): no driver call",
    "resources.ObjectCode.from_fatbin": "wraps bytes (or reads a file): no driver call",
    "resources.ObjectCode.code": _NO_CALL_RESOURCE,
    "resources.ObjectCode.code_type": _NO_CALL_RESOURCE,
    "resources.ObjectCode.name": _NO_CALL_RESOURCE,
    "resources.ObjectCode.symbol_mapping": _NO_CALL_RESOURCE,
    "resources.ObjectCode.lowered_name": "looks up the recorded lowered names: no driver call",
    "resources.KernelAttributes()": "made by Kernel.attributes; its methods are swept",
    "resources.KernelOccupancy()": "made by Kernel.occupancy; its methods are swept",
    "resources.MaxPotentialBlockSizeOccupancyResult()": "a named tuple of two ints: no driver call",
    "resources.MaxPotentialBlockSizeOccupancyResult.min_grid_size": "a named tuple field: no driver call",
    "resources.MaxPotentialBlockSizeOccupancyResult.max_block_size": "a named tuple field: no driver call",
    "resources.MaxPotentialBlockSizeOccupancyResult.count": "tuple method: no driver call",
    "resources.MaxPotentialBlockSizeOccupancyResult.index": "tuple method: no driver call",
    "resources.PinnedBuffer.numpy": "a NumPy view over host memory: no driver call",
    "resources.DeviceProperties()": "refused with TypeError: use Device.properties (swept through it)",
    "resources.MemoryInfo": "a record of free and total bytes (Device.memory_info is swept): no driver call",
    "resources.Buffer.owned": _NO_CALL_RESOURCE,
    "resources.racecheck": "turns the race checker (B7) on or off for a block: no driver call",
    "resources.racecheck_enabled": "reads the race checker's flag (B7): no driver call",
}

for _attr in ("()", ".index", ".kind", ".name", ".offset", ".size", ".type"):
    NO_DRIVER_CALL_RESOURCES[f"resources.KernelParameter{_attr}"] = "a record of one kernel parameter: no driver call"
for _cls in ("Stream", "Event", "Buffer", "PinnedBuffer", "Module"):
    for _attr in ("handle", "context", "closed"):
        NO_DRIVER_CALL_RESOURCES[f"resources.{_cls}.{_attr}"] = _NO_CALL_RESOURCE
    NO_DRIVER_CALL_RESOURCES[f"resources.{_cls}()"] = "refused with TypeError naming the factory (O1)"
for _key in (
    "Stream.device",
    "Event.timing",
    "Event.device",
    "Buffer.size",
    "Buffer.device",
    "Buffer.stream",
    "Buffer.ptr",
    "PinnedBuffer.size",
    "PinnedBuffer.address",
):
    NO_DRIVER_CALL_RESOURCES[f"resources.{_key}"] = _NO_CALL_RESOURCE
