"""The misuse sweep's operations of the resources layer's memory resources."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from cuguard.sweeps._misuse.model import MEMORY_RESOURCES, POOL_RESOURCES, SIZE
from cuguard.sweeps._misuse.ops_base import (
    DEVICE,
    MEMORY,
    POOL_ATTRIBUTES,
    STREAM,
    Op,
    _allocation_handle,
    _exit,
    _import_pool,
    _memory_report,
    _p,
    _v,
    adder,
    size_param,
)

__all__ = ["memory_resource_ops", "pool_ops"]


def memory_resource_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """The memory resources' constructors, and allocation through each."""
    R = L.resources
    ops: list[Op] = []
    add = adder(ops)
    sizes = size_param()
    device_arg = _p("device", DEVICE | {"int"}, "Device", values=(0, 1, -1, 7))
    add(
        "resources.DeviceMemoryResource()",
        None,
        R.DeviceMemoryResource,
        device_arg,
        _v(
            "options",
            None,
            lambda: R.DeviceMemoryResourceOptions(max_size=1 << 24),
            lambda: R.DeviceMemoryResourceOptions(release_threshold=1 << 20, reuse_allow_opportunistic=False),
            lambda: R.DeviceMemoryResourceOptions(ipc_enabled=True),
            lambda: R.DeviceMemoryResourceOptions(max_size=-1),
            lambda: R.DeviceMemoryResourceOptions(ipc_enabled="yes"),
            lambda: R.PinnedMemoryResourceOptions(),  # noqa: PLW0108 - a class value is passed, not called
            5,
            good=4,
        ),
        weight=2,
    )
    add(
        "resources.PinnedMemoryResource()",
        None,
        R.PinnedMemoryResource,
        device_arg,
        _v(
            "options",
            None,
            lambda: R.PinnedMemoryResourceOptions(max_size=1 << 24),
            lambda: R.PinnedMemoryResourceOptions(release_threshold=-5),
            lambda: R.DeviceMemoryResourceOptions(),  # noqa: PLW0108 - a class value is passed, not called
            "x",
            good=2,
        ),
    )
    add(
        "resources.ManagedMemoryResource()",
        None,
        lambda dev, attach: R.ManagedMemoryResource(dev, attach=attach),
        device_arg,
        _v("attach", "global", "host", "single", None, good=2),
    )
    add(
        "resources.VirtualMemoryResource()",
        None,
        R.VirtualMemoryResource,
        device_arg,
        _v("options", None, lambda: R.VirtualMemoryResourceOptions(), 5, "x", good=2),  # noqa: PLW0108 - as above
    )
    add(
        "resources.LegacyPinnedMemoryResource()",
        None,
        lambda dev, portable: R.LegacyPinnedMemoryResource(dev, portable=portable),
        _p("device", DEVICE | {"int"}, "Device", values=(0, 1, -1), optional=True),
        _v("portable", False, True),
    )
    for cls in MEMORY_RESOURCES:
        add(
            f"resources.{cls}.allocate",
            cls,
            lambda mr, size, stream: mr.allocate(size, stream),
            sizes,
            _p("stream", STREAM, "Stream", optional=True),
            # documented for pools: a stream being captured is refused (its allocation would be graph memory)
            extra_errors=(RuntimeError,) if cls in POOL_RESOURCES else (),
            weight=3,
        )
        add(
            f"resources.{cls}.deallocate",
            cls,
            lambda mr, buf, stream: mr.deallocate(buf, stream),
            _p("buffer", MEMORY, "Buffer", uses=False),
            _p("stream", STREAM, "Stream", optional=True),
            frees_memory=True,
            weight=2,
        )
        add(
            f"resources.{cls}.held[accounting]",
            cls,
            lambda mr: (
                mr.held,
                mr.leaked,
                len(mr.buffers),
                mr.device_id,
                mr.is_device_accessible,
                mr.is_host_accessible,
                repr(mr),
            ),
            uses_receiver=False,
        )
    return ops


def pool_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Memory pools (attributes, trimming, release, export and import), virtual and managed memory, IPC."""
    R = L.resources
    ops: list[Op] = []
    add = adder(ops)
    for cls in POOL_RESOURCES:
        add(f"resources.{cls}.trim", cls, lambda mr, keep: mr.trim(keep), _v("keep", 0, 1 << 20, -1, "x", None, good=2))
        add(
            f"resources.{cls}.attributes",
            cls,
            lambda mr, name: getattr(mr.attributes, name),
            _v("name", *POOL_ATTRIBUTES),
        )
        add(
            f"resources.{cls}.attributes.release_threshold[set]",
            cls,
            lambda mr, value: setattr(mr.attributes, "release_threshold", value),
            _v("value", 0, 1 << 20, -1, 1 << 70, "x", None, good=2),
        )
        add(
            f"resources.{cls}.attributes.reuse_allow_opportunistic[set]",
            cls,
            lambda mr, value: setattr(mr.attributes, "reuse_allow_opportunistic", value),
            _v("value", True, False, 2, None, good=2),
        )
        add(f"resources.{cls}.attributes.reset_high_watermarks", cls, lambda mr: mr.attributes.reset_high_watermarks())
        add(f"resources.{cls}.close", cls, lambda mr: mr.close(), idempotent_close=True, frees_memory=True)
        add(f"resources.{cls}.__exit__", cls, _exit, idempotent_close=True, exit=True, frees_memory=True)
        add(
            f"resources.{cls}.owned[state]",
            cls,
            lambda mr: (mr.owned, mr.closed, mr.is_ipc_enabled, mr.is_imported, mr.context, mr.handle),
            uses_receiver=False,
        )
    add(
        "resources.DeviceMemoryResource.get_allocation_handle",
        "DeviceMemoryResource",
        _allocation_handle,
    )
    # The same process imports its own pool: one pool, one owner (the import shares the exporter's pool).
    add(
        "resources.DeviceMemoryResource.from_allocation_handle",
        "DeviceMemoryResource",
        lambda mr, device: _import_pool(R, mr, device),
        _p("device", DEVICE | {"int"}, "Device", values=(0, 1, -1)),
    )
    add(
        "resources.VirtualMemoryResource.modify_allocation",
        "VirtualMemoryResource",
        lambda mr, buf, size: mr.modify_allocation(buf, size),
        _p("buffer", frozenset({"Buffer"}), "Buffer"),
        _v("new_size", 2 * SIZE, 1 << 22, SIZE, 0, -1, 1.5, None, good=3),
        frees_memory=True,
        weight=2,
    )
    add(
        "resources.VirtualMemoryResource.granularity",
        "VirtualMemoryResource",
        lambda mr: (mr.granularity, mr.options),
        uses_receiver=False,
    )
    locations = _v("location", "host", 0, 1, None, -3, "x", good=2)
    add(
        "resources.ManagedMemoryResource.prefetch",
        "ManagedMemoryResource",
        lambda mr, buf, loc, stream: mr.prefetch(buf, loc, stream),
        _p("buffer", frozenset({"Buffer"}), "Buffer"),
        locations,
        _p("stream", STREAM, "Stream"),
        weight=2,
    )
    add(
        "resources.ManagedMemoryResource.advise",
        "ManagedMemoryResource",
        lambda mr, buf, advice, loc: mr.advise(buf, advice, loc),
        _p("buffer", frozenset({"Buffer"}), "Buffer"),
        _v("advice", "set_read_mostly", "set_preferred_location", "unset_read_mostly", "bogus", None, 3, good=3),
        locations,
    )
    add(
        "resources.Buffer.get_ipc_descriptor",
        "Buffer",
        lambda b: b.get_ipc_descriptor(),
    )
    add(
        "resources.Buffer.memory_resource",
        "Buffer",
        lambda b: (b.memory_resource, b.owned),
        uses_receiver=False,
    )
    add(
        "resources.Device.create_event[ipc]",
        "Device",
        lambda d, ipc: d.create_event(ipc_enabled=ipc),
        _v("ipc_enabled", True, False, "yes", good=2),
    )
    add("resources.Event.get_ipc_descriptor", "Event", lambda e: (e.is_ipc_enabled, e.get_ipc_descriptor()))
    add(
        "resources.memory_in_use",
        None,
        lambda collect: _memory_report(R.memory_in_use(collect=collect)),
        _v("collect", True, False),
    )
    return ops
