"""The misuse sweep's catalog: every public operation of every layer, with what each parameter takes.

An :class:`Op` names one public operation (``"Stream.wait"``), the kind of its
receiver (``None`` for functions, constructors and class methods) and its
parameters. A :class:`Param` says which kinds of value it accepts: the cuguard
kinds for parameters that take cuguard objects (E3: any other kind, ``None`` or a
number must raise ``TypeError`` naming the parameter, the expected kind and
what was given), or a list of candidate values for plain parameters (sizes,
flags, names), which mix good and bad values and are only held to the general
rules (only the documented exception types, with a message).

``uses`` marks parameters (and, per operation, the receiver) whose object must
be usable: an object of an uninstalled driver (O3), of a destroyed context (O4)
or a closed one (E3) must be refused with ``ResourceClosedError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from cuguard.errors import LibraryNotFoundError
from cuguard.testing._misuse.model import MEMORY_RESOURCES, POOL_RESOURCES, SIZE, CallbackBoom

__all__ = ["ANY", "CTX_HANDLE", "EDGE", "KERNEL_ARGS", "Op", "Param", "build_ops"]

#: What a stream parameter takes: any ``__cuda_stream__`` object, a GraphBuilder (its stream) included.
STREAM = frozenset({"Stream", "ForeignStream", "GraphBuilder"})
EVENT = frozenset({"Event"})
CONTEXT = frozenset({"Context"})
DEVICE = frozenset({"Device"})
NODE = frozenset({"Node"})
GRAPHDEF = frozenset({"GraphDefinition"})
GRAPHCOND = frozenset({"GraphCondition"})
BUILDER = frozenset({"GraphBuilder"})
KERNEL = frozenset({"Kernel"})
CONFIG = frozenset({"LaunchConfig"})
MEMORY = frozenset({"Buffer", "PinnedBuffer"})
POOL_ATTRIBUTES = (
    "release_threshold",
    "reuse_follow_event_dependencies",
    "reuse_allow_opportunistic",
    "reuse_allow_internal_dependencies",
    "reserved_mem_current",
    "reserved_mem_high",
    "used_mem_current",
    "used_mem_high",
)
HOST = frozenset({"bytearray", "bytes", "NumpyView"})
#: Accepts anything (``x in node.pred`` is ``False`` for a non-node, by set semantics).
ANY = frozenset({"any"})

#: Marks the kernel-argument parameter (drawn specially: see ``session``).
KERNEL_ARGS = "kernel arguments"
#: Marks an edge parameter: a ``(from, to)`` tuple of nodes.
EDGE = "edge"
#: Marks a context-handle parameter (``Context.wrap``): handles of the driver's contexts, destroyed ones too.
CTX_HANDLE = "context handle"


@dataclass(frozen=True)
class Param:
    """One parameter: its name, what it accepts and how a wrong value must be refused."""

    name: str
    accepts: frozenset[str] = frozenset()  # cuguard kinds; empty for plain parameters
    expect: str = ""  # the expected kind, as the TypeError must name it (case-insensitive)
    names: tuple[str, ...] = ()  # other spellings of the parameter a message may use
    optional: bool = False  # None is a good value
    values: tuple[Any, ...] = ()  # candidates of a plain parameter (callables are called for a fresh value)
    good: int | None = None  # how many of the first values are good ones (None: all)
    uses: bool = True  # an unusable object here must be refused
    star: bool = False  # *args: a tuple of values
    iterable: bool = False  # an iterable of accepted values (deps=...)
    keyword: bool = False  # passed by keyword
    special: str = ""  # KERNEL_ARGS or EDGE
    naming: bool = True  # a wrong kind must raise TypeError naming the parameter
    node_type: str = ""  # for nodes: the node type taken (e.g. "mem_alloc"); other nodes are a wrong kind

    @property
    def takes_objects(self) -> bool:
        return bool(self.accepts)

    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.names)

    @property
    def good_values(self) -> tuple[Any, ...]:
        return self.values if self.good is None else self.values[: self.good]


@dataclass(frozen=True)
class Op:
    """One public operation (see the module docstring)."""

    name: str
    receiver: str | None
    run: Callable[..., Any]
    params: tuple[Param, ...] = ()
    uses_receiver: bool = True
    sets_context: bool = False
    may_warn: bool = False  # documented to report (CUDAWarning) instead of raising
    extra_errors: tuple[type[BaseException], ...] = ()
    frees_memory: bool = False  # the sweep synchronizes first (a user's race is not cuguard's)
    receiver_type: str = ""  # for node receivers: the node type the operation needs (e.g. "kernel")
    destroys_context: bool = False
    real: bool = True  # safe on a real GPU
    idempotent_close: bool = False  # a close(): no use when the object was closed already
    exit: bool = False  # __exit__ with an exception propagating: a failed close must become a note (G4)
    weight: int = 1
    tags: tuple[str, ...] = field(default=())


_TINY_CU = "template <typename T> __global__ void tiny(T* out) { *out = T(1); }"


def _object_code(R: Any, data: bytes) -> Any:
    """``data`` (the driver's kernel image) as an ObjectCode of the right kind."""
    if isinstance(data, bytes) and data.startswith(b"\x7fELF"):
        return R.ObjectCode.from_cubin(data)
    return R.ObjectCode.from_ptx(data)


def _p(name: str, accepts: frozenset[str], expect: str, **kw: Any) -> Param:
    return Param(name, accepts, expect, **kw)


def _v(name: str, *values: Any, **kw: Any) -> Param:
    return Param(name, values=values, **kw)


def _deps(name: str = "deps") -> Param:
    return Param(
        name,
        NODE,
        "Node",
        names=("dependency", "dependencies", "dep"),
        iterable=True,
        keyword=True,
    )


def _noop() -> None:
    return None


def _boom() -> None:
    raise CallbackBoom("raised on purpose by a misuse-sweep callback")


def _exit(obj: Any) -> BaseException:
    """``obj.__exit__`` while the body's exception propagates; returns that exception (to read its notes)."""
    body = ValueError("the with-block body failed")
    obj.__exit__(ValueError, body, None)
    return body


def build_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Every operation of the catalog. ``L`` holds the layers; ``image()`` the kernel image of the driver now."""
    E, C, R, G = L.errors, L.context, L.resources, L.graphs
    ops: list[Op] = []

    def add(name: str, receiver: str | None, run: Callable[..., Any], *params: Param, **kw: Any) -> None:
        ops.append(Op(name, receiver, run, tuple(params), **kw))

    ordinal = _v("ordinal", 0, 1, None, 2, -1, 1.5, True, "0", good=3)
    codes = _v("code", 1, 2, 700, 0, -1, 2**40, None, 1.5, "x", good=3)

    # --- errors ------------------------------------------------------------------------------
    add("errors.error_name", None, E.error_name, codes)
    add("errors.error_description", None, E.error_description, codes)
    add("errors.is_sticky", None, E.is_sticky, codes)
    add("errors.CUDAError", None, E.CUDAError, codes, _v("call", "cuStreamCreate", None, 5, good=2))
    add("errors.format_handle", None, E.format_handle, _v("handle", None, 0, 12345, "x", 1.5))
    add("errors.flush_deferred", None, E.flush_deferred, _v("timeout", None, 0, 1.0, 5))
    add("graphs.flush_deferred", None, G.flush_deferred, _v("timeout", None, 0, 1.0))
    add("graphs.pending_payloads", None, G.pending_payloads)
    add("errors.default_driver_choice", None, E.default_driver_choice)

    # --- context -----------------------------------------------------------------------------
    add("context.init_driver", None, C.init_driver)
    add("Context.primary", None, C.Context.primary, ordinal)
    add("Context.create", None, C.Context.create, ordinal, _v("flags", 0, 1, -1, None, 1.5, good=2), weight=2)
    add(
        "Context.wrap",
        None,
        C.Context.wrap,
        Param(
            "handle",
            frozenset({"int", "CUcontext"}),
            "CUcontext",
            values=(None, 1.5, "x", 0),
            special=CTX_HANDLE,
        ),
        _v("device", None, 0, 1, "x", -1.5, good=3),
    )
    add("Context.current", None, C.Context.current)
    add("Context.set_current", "Context", lambda c: c.set_current(), sets_context=True, weight=2)
    add("Context.synchronize", "Context", lambda c: c.synchronize())
    add(
        "Context.close",
        "Context",
        lambda c: c.close(),
        idempotent_close=True,
        destroys_context=True,
        frees_memory=True,
    )
    add(
        "Context.__exit__",
        "Context",
        _exit,
        idempotent_close=True,
        exit=True,
        destroys_context=True,
        frees_memory=True,
    )
    add("Context.device", "Context", lambda c: c.device, uses_receiver=False)
    add("Context.handle", "Context", lambda c: c.handle)
    add("Context.is_primary", "Context", lambda c: (c.is_primary, c.owned, c.closed, c.stale), uses_receiver=False)

    def _query_device() -> Any:
        return E.driver.cuCtxGetDevice()

    add(
        "context.call_in",
        None,
        lambda ctx, op: C.call_in(ctx, op, None),
        _p("context", CONTEXT, "Context"),
        _v("op", lambda: _query_device, lambda: _noop, None, 5, good=2),
    )
    add(
        "context.cleanup_in",
        None,
        C.cleanup_in,
        # documented: an unusable context is reported (CUDAWarning), not raised
        _p("context", CONTEXT, "Context", uses=False),
        _v("op", lambda: _query_device, lambda: _noop),
        may_warn=True,
    )

    # --- resources: devices --------------------------------------------------------------------
    add("Device", None, R.Device, ordinal, weight=2)
    add("Device.count", None, R.Device.count)
    add("Device.name", "Device", lambda d: d.name)
    add(
        "Device.attribute",
        "Device",
        lambda d, a: d.attribute(a),
        _v("attribute", 75, 76, 1, -5, "x", None, 10**6, good=2),
    )
    add("Device.compute_capability", "Device", lambda d: d.compute_capability)
    add(
        "Device.properties",
        "Device",
        lambda d, name: (getattr(d.properties, name), d.arch, d.uuid),
        _v("name", "multiprocessor_count", "warp_size", "integrated", "compute_capability_minor"),
    )
    add("Device.memory_info", "Device", lambda d: d.memory_info)
    add("Device.default_stream", "Device", lambda d: d.default_stream.__cuda_stream__())
    add(
        "Device.create_stream[obj]",
        "Device",
        lambda d, obj: d.create_stream(obj),
        _p("obj", STREAM, "Stream", optional=True),
    )
    add("Device.ordinal", "Device", lambda d: (d.ordinal, d.handle), uses_receiver=False)
    add("Device.context", "Device", lambda d: d.context)
    add("Device.set_current", "Device", lambda d: d.set_current(), sets_context=True, weight=2)
    add("Device.sync", "Device", lambda d: d.sync())
    add(
        "Device.create_stream",
        "Device",
        lambda d, nb, pr: d.create_stream(non_blocking=nb, priority=pr),
        _v("non_blocking", False, True),
        _v("priority", None, None, 0, -1, -5, 1, "x", 1.5, good=6),
        weight=3,
    )
    add("Device.create_event", "Device", lambda d, t: d.create_event(timing=t), _v("timing", True, False), weight=2)
    sizes = _v("size", SIZE, SIZE, 0, 1, 128, -1, 1 << 52, 1.5, None, "64", good=2)
    add(
        "Device.allocate",
        "Device",
        lambda d, size, stream: d.allocate(size, stream),
        sizes,
        _p("stream", STREAM, "Stream", optional=True),
        # documented: a stream being captured is refused, as by the pools (graph memory)
        extra_errors=(RuntimeError,),
        weight=4,
    )
    add("Device.allocate_pinned", "Device", lambda d, size: d.allocate_pinned(size), sizes, weight=2)
    images = _v("image", image, image, lambda: image().decode(errors="replace"), b"garbage", None, 5, good=3)
    add("Device.load_module", "Device", lambda d, img: d.load_module(img), images)

    # --- resources: streams --------------------------------------------------------------------
    add(
        "Stream.wrap",
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
    add("Stream.flags", "Stream", lambda s: (s.flags, s.priority))
    add("Stream.sync", "Stream", lambda s: s.sync(), weight=2)
    add("Stream.query", "Stream", lambda s: s.query())
    add("Stream.wait", "Stream", lambda s, o: s.wait(o), _p("other", EVENT | STREAM, "Event"), weight=2)
    add("Stream.record", "Stream", lambda s, e: s.record(e), _p("event", EVENT, "Event", optional=True), weight=2)
    add(
        "Stream.launch_host_func",
        "Stream",
        lambda s, fn: s.launch_host_func(fn),
        _v("fn", lambda: _noop, lambda: _boom, None, 5, good=2),
        extra_errors=(RuntimeError,),  # documented: refused on a stream being captured
    )
    add("Stream.__cuda_stream__", "Stream", lambda s: s.__cuda_stream__())
    add("Stream.handle", "Stream", lambda s: s.handle)
    add("Stream.device", "Stream", lambda s: (s.device, s.context, s.closed), uses_receiver=False)
    for cls in ("Stream", "Event", "Buffer", "PinnedBuffer", "Module"):
        frees = cls in ("Buffer", "PinnedBuffer")
        add(f"{cls}.close", cls, lambda o: o.close(), idempotent_close=True, frees_memory=frees)
        add(
            f"{cls}.__exit__",
            cls,
            _exit,
            idempotent_close=True,
            exit=True,
            frees_memory=frees,
        )

    # --- resources: events -----------------------------------------------------------------------
    add("Event.record", "Event", lambda e, s: e.record(s), _p("stream", STREAM, "Stream"), weight=2)
    add("Event.sync", "Event", lambda e: e.sync())
    add("Event.query", "Event", lambda e: e.query())
    add("Event.elapsed_since", "Event", lambda e, s: e.elapsed_since(s), _p("start", EVENT, "Event"))
    add("Event.handle", "Event", lambda e: e.handle)
    add("Event.timing", "Event", lambda e: (e.timing, e.device, e.context), uses_receiver=False)

    # --- resources: memory -------------------------------------------------------------------
    data = _p("src", MEMORY | HOST, "Buffer", values=())
    add(
        "Buffer.copy_from",
        "Buffer",
        lambda b, src, s: b.copy_from(src, s),
        data,
        _p("stream", STREAM, "Stream", optional=True),
        weight=2,
    )
    add(
        "Buffer.copy_to",
        "Buffer",
        lambda b, dst, s: b.copy_to(dst, s),
        _p("dst", MEMORY | HOST, "Buffer"),
        _p("stream", STREAM, "Stream", optional=True),
        weight=2,
    )
    add(
        "Buffer.fill",
        "Buffer",
        lambda b, v, s: b.fill(v, s),
        _v("value", 0, 7, 255, 256, -1, 1.5, None, True, good=3),
        _p("stream", STREAM, "Stream", optional=True),
        weight=2,
    )
    add("Buffer.ptr", "Buffer", lambda b: (b.ptr, b.__cuda_array_interface__))
    add(
        "Buffer.size",
        "Buffer",
        lambda b: (b.size, b.device, b.stream, b.closed, b.owned, b.__dlpack_device__()),
        uses_receiver=False,
    )
    add(
        "Buffer.__dlpack__",
        "Buffer",
        lambda b, copy, dl_device, version: b.__dlpack__(copy=copy, dl_device=dl_device, max_version=version),
        _v("copy", None, False, True, good=2),
        _v("dl_device", None, (2, 0), (2, 1), (1, 0), good=2),
        _v("max_version", None, (1, 0), (0, 8), (1, 3)),
    )
    add(
        "PinnedBuffer.__dlpack__",
        "PinnedBuffer",
        lambda p, copy, version: (p.__dlpack__(copy=copy, max_version=version), p.__dlpack_device__()),
        _v("copy", None, False, True, good=2),
        _v("max_version", None, (1, 0), (0, 8)),
    )
    add(
        "Buffer.close[stream]",
        "Buffer",
        lambda b, s: b.close(s),
        _p("stream", STREAM, "Stream", optional=True),  # None: the buffer's own stream, as close()
        idempotent_close=True,
        frees_memory=True,
    )
    add(
        "Buffer.from_handle",
        "Buffer",
        lambda b, size: R.Buffer.from_handle(b.ptr, size, owner=b).close(),
        _v("size", SIZE, 0, -1, None, 1.5, good=2),
    )
    add(
        "Buffer.from_dlpack",
        None,
        lambda obj, s: R.Buffer.from_dlpack(obj, stream=s).close(),
        _p("obj", MEMORY, "__dlpack__"),
        _p("stream", STREAM, "Stream", optional=True),
    )
    add(
        "Buffer.from_cuda_array_interface",
        None,
        lambda obj: R.Buffer.from_cuda_array_interface(obj).close(),
        _p("obj", frozenset({"Buffer"}), "__cuda_array_interface__"),
    )
    add("PinnedBuffer.address", "PinnedBuffer", lambda p: p.address)
    add("PinnedBuffer.size", "PinnedBuffer", lambda p: (p.size, p.closed, p.context), uses_receiver=False)
    add(
        "PinnedBuffer.numpy",
        "PinnedBuffer",
        lambda p, t: p.numpy(t),
        _v("dtype", "uint8", "uint32", "float64", 5, good=3),
    )

    # --- resources: memory resources -----------------------------------------------------------
    device_arg = _p("device", DEVICE | {"int"}, "Device", values=(0, 1, -1, 7))
    add(
        "DeviceMemoryResource",
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
        "PinnedMemoryResource",
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
        "ManagedMemoryResource",
        None,
        lambda dev, attach: R.ManagedMemoryResource(dev, attach=attach),
        device_arg,
        _v("attach", "global", "host", "single", None, good=2),
    )
    add(
        "VirtualMemoryResource",
        None,
        R.VirtualMemoryResource,
        device_arg,
        _v("options", None, lambda: R.VirtualMemoryResourceOptions(), 5, "x", good=2),  # noqa: PLW0108 - as above
    )
    add(
        "LegacyPinnedMemoryResource",
        None,
        lambda dev, portable: R.LegacyPinnedMemoryResource(dev, portable=portable),
        _p("device", DEVICE | {"int"}, "Device", values=(0, 1, -1), optional=True),
        _v("portable", False, True),
    )
    for cls in MEMORY_RESOURCES:
        add(
            f"{cls}.allocate",
            cls,
            lambda mr, size, stream: mr.allocate(size, stream),
            sizes,
            _p("stream", STREAM, "Stream", optional=True),
            # documented for pools: a stream being captured is refused (its allocation would be graph memory)
            extra_errors=(RuntimeError,) if cls in POOL_RESOURCES else (),
            weight=3,
        )
        add(
            f"{cls}.deallocate",
            cls,
            lambda mr, buf, stream: mr.deallocate(buf, stream),
            _p("buffer", MEMORY, "Buffer", uses=False),
            _p("stream", STREAM, "Stream", optional=True),
            frees_memory=True,
            weight=2,
        )
        add(
            f"{cls}.accounting",
            cls,
            lambda mr: (mr.held, mr.leaked, len(mr.buffers), mr.device_id, mr.is_device_accessible, repr(mr)),
            uses_receiver=False,
        )
    for cls in POOL_RESOURCES:
        add(f"{cls}.trim", cls, lambda mr, keep: mr.trim(keep), _v("keep", 0, 1 << 20, -1, "x", None, good=2))
        add(
            f"{cls}.attributes",
            cls,
            lambda mr, name: getattr(mr.attributes, name),
            _v("name", *POOL_ATTRIBUTES),
        )
        add(
            f"{cls}.attributes.release_threshold=",
            cls,
            lambda mr, value: setattr(mr.attributes, "release_threshold", value),
            _v("value", 0, 1 << 20, -1, 1 << 70, "x", None, good=2),
        )
        add(
            f"{cls}.attributes.reuse=",
            cls,
            lambda mr, value: setattr(mr.attributes, "reuse_allow_opportunistic", value),
            _v("value", True, False, 2, None, good=2),
        )
        add(f"{cls}.reset_high_watermarks", cls, lambda mr: mr.attributes.reset_high_watermarks())
        add(f"{cls}.close", cls, lambda mr: mr.close(), idempotent_close=True, frees_memory=True)
        add(f"{cls}.__exit__", cls, _exit, idempotent_close=True, exit=True, frees_memory=True)
        add(
            f"{cls}.state",
            cls,
            lambda mr: (mr.owned, mr.closed, mr.is_ipc_enabled, mr.is_imported, mr.handle),
            uses_receiver=False,
        )
    add(
        "DeviceMemoryResource.get_allocation_handle",
        "DeviceMemoryResource",
        lambda mr: mr.get_allocation_handle().close(),
    )
    add(
        "VirtualMemoryResource.modify_allocation",
        "VirtualMemoryResource",
        lambda mr, buf, size: mr.modify_allocation(buf, size),
        _p("buffer", frozenset({"Buffer"}), "Buffer"),
        _v("new_size", 2 * SIZE, 1 << 22, SIZE, 0, -1, 1.5, None, good=3),
        frees_memory=True,
        weight=2,
    )
    add(
        "VirtualMemoryResource.granularity",
        "VirtualMemoryResource",
        lambda mr: (mr.granularity, mr.options),
        uses_receiver=False,
    )
    locations = _v("location", "host", 0, 1, None, -3, "x", good=2)
    add(
        "ManagedMemoryResource.prefetch",
        "ManagedMemoryResource",
        lambda mr, buf, loc, stream: mr.prefetch(buf, loc, stream),
        _p("buffer", frozenset({"Buffer"}), "Buffer"),
        locations,
        _p("stream", STREAM, "Stream"),
        weight=2,
    )
    add(
        "ManagedMemoryResource.advise",
        "ManagedMemoryResource",
        lambda mr, buf, advice, loc: mr.advise(buf, advice, loc),
        _p("buffer", frozenset({"Buffer"}), "Buffer"),
        _v("advice", "set_read_mostly", "set_preferred_location", "unset_read_mostly", "bogus", None, 3, good=3),
        locations,
    )
    add(
        "Buffer.get_ipc_descriptor",
        "Buffer",
        lambda b: b.get_ipc_descriptor(),
    )
    add(
        "Buffer.memory_resource",
        "Buffer",
        lambda b: (b.memory_resource, b.owned),
        uses_receiver=False,
    )
    add(
        "Device.create_event[ipc]",
        "Device",
        lambda d, ipc: d.create_event(ipc_enabled=ipc),
        _v("ipc_enabled", True, False, "yes", good=2),
    )
    add("Event.get_ipc_descriptor", "Event", lambda e: (e.is_ipc_enabled, e.get_ipc_descriptor()))
    add(
        "resources.memory_in_use",
        None,
        lambda collect: R.memory_in_use(collect=collect).total,
        _v("collect", True, False),
    )

    # --- resources: modules and launches -----------------------------------------------------
    add("Module.load", None, R.Module.load, _p("context", CONTEXT, "Context"), images)
    add(
        "Module.get_kernel",
        "Module",
        lambda m, name: m.get_kernel(name),
        _v("name", "fill_u8", "fill_u8", "missing", None, 5, good=2),
        weight=2,
    )
    add(
        "LaunchConfig",
        None,
        lambda grid, block: R.LaunchConfig(grid=grid, block=block),
        _v("grid", 1, 1, (1, 1), 0, -1, "x", (1, 2, 3, 4), 1.5, good=3),
        _v("block", SIZE, 1, (32, 2), 2048, 0, None, good=3),
    )
    kargs = Param("args", special=KERNEL_ARGS, star=True, naming=False)
    add(
        "launch",
        None,
        R.launch,
        _p("stream", STREAM, "Stream"),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        kargs,
        weight=3,
    )
    add("pack_args", None, lambda *args: R.pack_args(args), kargs)
    add("Kernel.pack", "Kernel", lambda k, *args: k.pack(args)[0], kargs)
    add("Kernel.parameters", "Kernel", lambda k: (k.parameters, k.name), uses_receiver=False)
    add(
        "LaunchConfig[cluster]",
        None,
        lambda grid, cluster, shmem, coop: R.LaunchConfig(
            grid=grid, block=SIZE, cluster=cluster, shmem_size=shmem, cooperative_launch=coop
        ),
        _v("grid", 1, (1, 2), 0, "x", good=2),
        _v("cluster", None, 2, (1, 2, 1), 0, (1, 1, 1, 1), 1.5, good=3),
        _v("shmem_size", 0, 16, -1, None, good=3),
        _v("cooperative_launch", False, True, 1, good=2),
    )
    add(
        "launch[cluster]",
        None,
        lambda stream, kernel, cooperative, *args: R.launch(
            stream,
            R.LaunchConfig(grid=1, block=SIZE, cluster=None if cooperative else 2, cooperative_launch=cooperative),
            kernel,
            *args,
        ),
        _p("stream", STREAM, "Stream"),
        _p("kernel", KERNEL, "Kernel"),
        _v("cooperative", False, True),
        kargs,
        weight=2,
    )
    add(
        "Kernel.attributes",
        "Kernel",
        lambda k, name: getattr(k.attributes, name)(),
        _v("name", "num_regs", "max_threads_per_block", "shared_size_bytes", "cluster_size_must_be_set"),
    )
    add(
        "Kernel.occupancy",
        "Kernel",
        lambda k, block_size, shmem: k.occupancy.max_active_blocks_per_multiprocessor(block_size, shmem),
        _v("block_size", SIZE, 32, 0, -1, None, 1.5, good=2),
        _v("dynamic_shared_memory_size", 0, 128, -1, None, good=2),
    )
    add(
        "Kernel.occupancy.max_potential_block_size",
        "Kernel",
        lambda k, shmem, limit: k.occupancy.max_potential_block_size(shmem, limit),
        _v("dynamic_shared_memory_needed", 0, 256, -1, None, good=2),
        _v("block_size_limit", 0, 128, -1, "x", good=2),
    )
    add(
        "Kernel.occupancy.available_dynamic_shared_memory_per_block",
        "Kernel",
        lambda k, blocks, block_size: k.occupancy.available_dynamic_shared_memory_per_block(blocks, block_size),
        _v("num_blocks_per_multiprocessor", 1, 4, 0, None, good=2),
        _v("block_size", SIZE, 1024, 0, "x", good=2),
    )
    add(
        "Kernel.occupancy.max_active_clusters",
        "Kernel",
        lambda k, cluster, stream: k.occupancy.max_active_clusters(
            R.LaunchConfig(grid=1, block=SIZE, cluster=cluster), stream
        ),
        _v("cluster", 2, 4, None, 32, good=2),
        _p("stream", STREAM, "Stream", optional=True),
    )
    add(
        "Kernel.occupancy.max_potential_cluster_size",
        "Kernel",
        lambda k, config: k.occupancy.max_potential_cluster_size(config),
        _p("config", CONFIG, "LaunchConfig"),
    )
    add(
        "ObjectCode.get_kernel",
        None,
        lambda data, name: _object_code(R, data).get_kernel(name),
        _v("image", image, image, b"garbage", good=2),
        _v("name", "fill_u8", "fill_u8", "missing", None, 5, good=2),
    )
    add(
        "ObjectCode.from_ptx",
        None,
        lambda data, name: R.ObjectCode.from_ptx(data, name=name).lowered_name("fill_u8"),
        _v("module", image, b"", None, 5, good=2),
        _v("name", "", "kernels", None, good=2),
    )
    program_cache = R.ProgramCache()  # repeated compilations come from memory
    add(
        "Program.compile",
        None,
        lambda code_type, target, names: R.Program(_TINY_CU, code_type, R.ProgramOptions(std="c++17")).compile(
            target, names, cache=program_cache
        ),
        _v("code_type", "c++", "c++", "fortran", None, good=2),
        _v("target_type", "ptx", "ptx", "bogus", None, good=2),
        _v("name_expressions", (), ("tiny<int>",), "tiny<int>", (5,), good=2),
        extra_errors=(LibraryNotFoundError,),  # documented: NVRTC is not installed
    )
    add(
        "Linker.link",
        None,
        lambda arch, target: R.Linker(_object_code(R, image()), options=R.LinkerOptions(arch=arch)).link(target),
        _v("arch", "sm_90", None, "x", 5, good=1),
        _v("target_type", "cubin", "bogus", None, good=1),
        extra_errors=(LibraryNotFoundError,),  # documented: nvJitLink is not installed
    )

    # --- graphs: definitions -------------------------------------------------------------------
    add(
        "GraphDefinition",
        None,
        G.GraphDefinition,
        _p("device", DEVICE | CONTEXT, "Device", optional=True),
        weight=2,
    )
    deps = _deps()
    for target in ("GraphDefinition", "Node"):
        on_def = target == "GraphDefinition"

        def kw(d: Any) -> dict[str, Any]:
            return {"deps": d}

        if on_def:
            add(
                "GraphDefinition.empty",
                target,
                lambda g, *d: g.empty(*d),
                Param("deps", NODE, "Node", names=("dependency", "dep"), star=True),
                weight=3,
            )
            add(
                "GraphDefinition.join",
                target,
                lambda g, *n: g.join(*n),
                Param("nodes", NODE, "Node", names=("node",), star=True),
            )
            add(
                "GraphDefinition.memset",
                target,
                lambda g, dst, value, d: g.memset(dst, value, **kw(d)),
                _p("dst", frozenset({"Buffer"}), "Buffer"),
                _v("value", 0, 7, 256, -1, None, good=2),
                deps,
                weight=2,
            )
            add(
                "GraphDefinition.memcpy",
                target,
                lambda g, dst, src, d: g.memcpy(dst, src, **kw(d)),
                _p("dst", MEMORY, "Buffer"),
                _p("src", MEMORY, "Buffer"),
                deps,
                weight=2,
            )
            add(
                "GraphDefinition.launch",
                target,
                lambda g, config, kernel, d, *args: g.launch(config, kernel, *args, **kw(d)),
                _p("config", CONFIG, "LaunchConfig"),
                _p("kernel", KERNEL, "Kernel"),
                deps,
                kargs,
                weight=2,
            )
            add(
                "GraphDefinition.callback",
                target,
                lambda g, fn, d: g.callback(fn, **kw(d)),
                _v("fn", lambda: _noop, lambda: _boom, None, 5, good=2),
                deps,
            )
            add(
                "GraphDefinition.record",
                target,
                lambda g, ev, d: g.record(ev, **kw(d)),
                _p("event", EVENT, "Event"),
                deps,
            )
            add("GraphDefinition.wait", target, lambda g, ev, d: g.wait(ev, **kw(d)), _p("event", EVENT, "Event"), deps)
            add(
                "GraphDefinition.allocate",
                target,
                lambda g, size, device, d: g.allocate(size, device=device, **kw(d)),
                _v("size", SIZE, 0, -1, None, 1.5, good=1),
                _p("device", DEVICE | {"int"}, "Device", optional=True, values=(0, 1, -1, 1.5, "x")),
                deps,
            )
            add(
                "GraphDefinition.deallocate",
                target,
                lambda g, ptr, d: g.deallocate(ptr, **kw(d)),
                Param(
                    "ptr",
                    NODE | {"int"},
                    "alloc",
                    names=("address",),
                    values=(0, -1, None, 1.5),
                    uses=False,
                    node_type="mem_alloc",
                ),
                deps,
            )
            add(
                "GraphDefinition.embed",
                target,
                lambda g, child, d: g.embed(child, **kw(d)),
                _p("child", GRAPHDEF, "GraphDefinition"),
                deps,
            )
        else:
            add("Node.empty", target, lambda n: n.empty(), weight=2)
            add(
                "Node.join",
                target,
                lambda n, *others: n.join(*others),
                Param("nodes", NODE, "Node", names=("node",), star=True),
            )
            add(
                "Node.memset",
                target,
                lambda n, dst, value: n.memset(dst, value),
                _p("dst", frozenset({"Buffer"}), "Buffer"),
                _v("value", 0, 7, 256, None, good=2),
            )
            add(
                "Node.memcpy",
                target,
                lambda n, dst, src: n.memcpy(dst, src),
                _p("dst", MEMORY, "Buffer"),
                _p("src", MEMORY, "Buffer"),
            )
            add(
                "Node.launch",
                target,
                lambda n, config, kernel, *args: n.launch(config, kernel, *args),
                _p("config", CONFIG, "LaunchConfig"),
                _p("kernel", KERNEL, "Kernel"),
                kargs,
            )
            add(
                "Node.callback", target, lambda n, fn: n.callback(fn), _v("fn", lambda: _noop, lambda: _boom, 5, good=2)
            )
            add("Node.record", target, lambda n, ev: n.record(ev), _p("event", EVENT, "Event"))
            add("Node.wait", target, lambda n, ev: n.wait(ev), _p("event", EVENT, "Event"))
            add(
                "Node.allocate",
                target,
                lambda n, size, device: n.allocate(size, device=device),
                _v("size", SIZE, 0, None, good=1),
                _p("device", DEVICE | {"int"}, "Device", optional=True, values=(0, -1, "x")),
            )
            add(
                "Node.deallocate",
                target,
                lambda n, ptr: n.deallocate(ptr),
                Param(
                    "ptr",
                    NODE | {"int"},
                    "alloc",
                    names=("address",),
                    values=(0, None),
                    uses=False,
                    node_type="mem_alloc",
                ),
            )
            add("Node.embed", target, lambda n, child: n.embed(child), _p("child", GRAPHDEF, "GraphDefinition"))

    edge = Param("edges", special=EDGE, accepts=frozenset({EDGE}), expect="Node", names=("edge",), star=True)
    add("GraphDefinition.connect", "GraphDefinition", lambda g, *e: g.connect(*e), edge, weight=2)
    add("GraphDefinition.disconnect", "GraphDefinition", lambda g, *e: g.disconnect(*e), edge)
    add("GraphDefinition.nodes", "GraphDefinition", lambda g: (g.nodes, g.edges))
    add("GraphDefinition.handle", "GraphDefinition", lambda g: g.handle)
    add("GraphDefinition.context", "GraphDefinition", lambda g: (g.context, g.closed), uses_receiver=False)
    add("GraphDefinition.clone", "GraphDefinition", lambda g: g.clone())
    add(
        "GraphDefinition.find_node",
        "GraphDefinition",
        lambda g, n: g.find_node(n),
        _p("original", NODE, "Node", uses=False),
    )
    add("GraphDefinition.instantiate", "GraphDefinition", lambda g: g.instantiate(), weight=3)
    add("GraphDefinition.close", "GraphDefinition", lambda g: g.close(), idempotent_close=True)
    add("GraphDefinition.__exit__", "GraphDefinition", _exit, idempotent_close=True, exit=True)

    # --- graphs: conditional nodes -------------------------------------------------------------
    add(
        "GraphDefinition.create_condition",
        "GraphDefinition",
        lambda g, d: g.create_condition(d),
        _v("default", 0, 1, None, 7, -1, 2**32, 1.5, "1", good=4),
        weight=2,
    )
    cond = _p("condition", GRAPHCOND, "GraphCondition")
    for target in ("GraphDefinition", "Node"):
        add(f"{target}.if_then", target, lambda t, c: t.if_then(c), cond, weight=2)
        add(f"{target}.if_else", target, lambda t, c: t.if_else(c), cond)
        add(
            f"{target}.switch",
            target,
            lambda t, c, n: t.switch(c, n),
            cond,
            _v("count", 1, 3, 0, -1, None, 1.5, good=2),
        )
        # Not on a GPU: nothing in the sweep clears a condition, so a while node whose value is not 0
        # would run its body until the launch is killed.
        add(f"{target}.while_loop", target, lambda t, c: t.while_loop(c), cond, real=False)
    add(
        "Node.branches",
        "Node",
        lambda n: [(b.nodes, b.edges) for b in n.branches],
        receiver_type="conditional",
    )
    add("GraphCondition.handle", "GraphCondition", lambda c: (c.handle, c.default, c.graph))

    # --- graphs: nodes and edges ---------------------------------------------------------------
    add("Node.set_args", "Node", lambda n, *args: n.set_args(*args), kargs, receiver_type="kernel")
    add(
        "Node.set_params",
        "Node",
        lambda n, config, kernel: n.set_params(config=config, kernel=kernel),
        _p("config", CONFIG, "LaunchConfig", optional=True),
        _p("kernel", KERNEL, "Kernel", optional=True),
        receiver_type="kernel",
    )
    add("Node.destroy", "Node", lambda n: n.destroy(), idempotent_close=True, weight=2)
    add("Node.handle", "Node", lambda n: n.handle)
    add("Node.type", "Node", lambda n: (n.type, n.graph, n.closed, n.params), uses_receiver=False)
    add("Node.ptr", "Node", lambda n: n.ptr, uses_receiver=False, receiver_type="mem_alloc")
    add("Node.pred", "Node", lambda n: (set(n.pred), len(n.succ)))
    nodes_it = Param("nodes", NODE, "Node", names=("node",), iterable=True)

    def assign(side: str) -> Callable[..., None]:
        def run(n: Any, nodes: Any) -> None:
            setattr(n, side, nodes)

        return run

    add("Node.pred=", "Node", assign("pred"), nodes_it)
    add("Node.succ=", "Node", assign("succ"), nodes_it)
    value = Param("value", NODE, "Node", names=("node", "item"))
    others = Param("others", NODE, "Node", names=("other", "node", "iterable"), iterable=True)
    key_error = (KeyError,)
    for side in ("pred", "succ"):

        def view(n: Any, side: str = side) -> Any:
            return getattr(n, side)

        add(f"Node.{side}.add", "Node", lambda n, v, view=view: view(n).add(v), value)
        add(f"Node.{side}.discard", "Node", lambda n, v, view=view: view(n).discard(v), value)
        add(f"Node.{side}.remove", "Node", lambda n, v, view=view: view(n).remove(v), value, extra_errors=key_error)
        add(f"Node.{side}.update", "Node", lambda n, o, view=view: view(n).update(o), others)
        add(f"Node.{side}.difference_update", "Node", lambda n, o, view=view: view(n).difference_update(o), others)
        add(f"Node.{side}.clear", "Node", lambda n, view=view: view(n).clear())
        add(f"Node.{side}.pop", "Node", lambda n, view=view: view(n).pop(), extra_errors=key_error)
        add(f"Node.{side}.__ixor__", "Node", lambda n, o, view=view: view(n).__ixor__(o), others)
        add(f"Node.{side}.__iand__", "Node", lambda n, o, view=view: view(n).__iand__(o), others)
        add(
            f"Node.{side}.__contains__",
            "Node",
            lambda n, v, view=view: v in view(n),
            Param("item", ANY, "Node", uses=False, naming=False),
            uses_receiver=False,  # set semantics: a non-node is simply not a member
        )

    # --- graphs: executable graphs ---------------------------------------------------------------
    add("Graph.launch", "Graph", lambda x, s: x.launch(s), _p("stream", STREAM, "Stream"), weight=3)
    add("Graph.upload", "Graph", lambda x, s: x.upload(s), _p("stream", STREAM, "Stream"))
    add("Graph.update", "Graph", lambda x, g: x.update(g), _p("definition", GRAPHDEF, "GraphDefinition"))
    add("Graph.handle", "Graph", lambda x: x.handle)

    # --- graphs: per-node changes of executable graphs --------------------------------------------
    def node_of(kind: str = "") -> Param:
        return _p("node", NODE, "Node", node_type=kind)

    add(
        "Graph.set_kernel_params",
        "Graph",
        lambda x, n, cfg, k: x.set_kernel_params(n, cfg, k),
        node_of("kernel"),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
    )
    add(
        "Graph.set_memset_params",
        "Graph",
        lambda x, n, dst, v: x.set_memset_params(n, dst, v),
        node_of("memset"),
        _p("dst", frozenset({"Buffer"}), "Buffer"),
        _v("value", 1, 0, 255, -1, 256, None, 1.5, good=3),
    )
    add(
        "Graph.set_memcpy_params",
        "Graph",
        lambda x, n, dst, src: x.set_memcpy_params(n, dst, src),
        node_of("memcpy"),
        _p("dst", MEMORY, "Buffer"),
        _p("src", MEMORY, "Buffer"),
    )
    add(
        "Graph.set_callback",
        "Graph",
        lambda x, n, fn: x.set_callback(n, fn),
        node_of("host"),
        _v("fn", lambda: _noop, lambda: _boom, 5, good=2),
    )
    # Record and wait nodes both take an event: the kind of node is checked, not typed.
    add("Graph.set_event", "Graph", lambda x, n, ev: x.set_event(n, ev), node_of(), _p("event", EVENT, "Event"))
    add(
        "Graph.set_child",
        "Graph",
        lambda x, n, child: x.set_child(n, child),
        node_of("graph"),
        _p("child", GRAPHDEF, "GraphDefinition"),
    )
    add(
        "Graph.set_enabled",
        "Graph",
        lambda x, n, on: x.set_enabled(n, on),
        node_of(),
        _v("enabled", False, True, 0, None, "yes", good=2),
    )
    add("Graph.is_enabled", "Graph", lambda x, n: x.is_enabled(n), node_of())
    add("Graph.close", "Graph", lambda x: x.close(), idempotent_close=True)
    add("Graph.__exit__", "Graph", _exit, idempotent_close=True, exit=True)

    # --- graphs: stream capture ------------------------------------------------------------------
    # Builders capture in relaxed mode: a capture in global mode prohibits the potentially unsafe
    # calls of every operation the sweep interleaves (a documented CUDAError, and an invalidated capture).
    state = (RuntimeError,)  # documented: an operation that needs a capture in progress (or ended) without one
    add(
        "GraphBuilder",
        None,
        lambda s, mode: G.GraphBuilder(s, mode=mode),
        _p("stream", frozenset({"Stream"}), "Stream"),
        _v("mode", "relaxed", "loose", None, 2, good=1),
        weight=2,
    )
    add("GraphBuilder.begin_building", "GraphBuilder", lambda b: b.begin_building(), extra_errors=state, weight=3)
    add("GraphBuilder.end_building", "GraphBuilder", lambda b: b.end_building(), extra_errors=state, weight=3)
    add("GraphBuilder.complete", "GraphBuilder", lambda b: b.complete(), extra_errors=state, weight=2)
    add(
        "GraphBuilder.split",
        "GraphBuilder",
        lambda b, n: b.split(n),
        _v("count", 2, 1, 0, "2", None, good=2),
        extra_errors=state,
    )
    add(
        "GraphBuilder.join",
        "GraphBuilder",
        lambda b, f: b.join(f),
        _p("forks", BUILDER, "GraphBuilder"),
        extra_errors=state,
    )
    add(
        "GraphBuilder.embed",
        "GraphBuilder",
        lambda b, c: b.embed(c),
        _p("child", GRAPHDEF | BUILDER, "GraphBuilder"),
        extra_errors=state,
    )
    add("GraphBuilder.callback", "GraphBuilder", lambda b: b.callback(_noop), extra_errors=(*state, ValueError))
    # Conditional nodes in a capture: ValueError is documented for a condition of another capture (or
    # one a node uses already) and for a body builder, which holds no conditional or host nodes.
    conditional = (RuntimeError, ValueError)
    add(
        "GraphBuilder.create_condition",
        "GraphBuilder",
        lambda b, d: b.create_condition(d),
        _v("default", 0, 1, None, -1, 2**32, 1.5, "1", good=3),
        extra_errors=conditional,
        weight=2,
    )
    bcond = _p("condition", GRAPHCOND, "GraphCondition")
    add("GraphBuilder.if_then", "GraphBuilder", lambda b, c: b.if_then(c), bcond, extra_errors=conditional)
    add("GraphBuilder.if_else", "GraphBuilder", lambda b, c: b.if_else(c), bcond, extra_errors=conditional)
    add(
        "GraphBuilder.switch",
        "GraphBuilder",
        lambda b, c, n: b.switch(c, n),
        bcond,
        _v("count", 1, 3, 0, None, good=2),
        extra_errors=conditional,
    )
    # Not on a GPU: nothing in the sweep clears a condition (see GraphDefinition.while_loop).
    add(
        "GraphBuilder.while_loop",
        "GraphBuilder",
        lambda b, c: b.while_loop(c),
        bcond,
        extra_errors=conditional,
        real=False,
    )
    add("GraphBuilder.status", "GraphBuilder", lambda b: (b.status, b.is_building, b.mode, b.stream))
    add("GraphBuilder.definition", "GraphBuilder", lambda b: b.definition, extra_errors=state)
    add("GraphBuilder.close", "GraphBuilder", lambda b: b.close(), idempotent_close=True)
    add("GraphBuilder.__exit__", "GraphBuilder", _exit, idempotent_close=True, exit=True)
    return ops
