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

import gc
import importlib
import importlib.util
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FunctionType, SimpleNamespace
from typing import Any

from cuguard.errors import LibraryNotFoundError
from cuguard.sweeps._misuse.model import MEMORY_RESOURCES, POOL_RESOURCES, SIZE, CallbackBoom, Opaque

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


def _allocate_through(device: Any, mr: Any) -> Any:
    """``Device.memory_resource``: read the default, set ``mr``, allocate through the device, put the default back."""
    default = device.memory_resource
    try:
        device.memory_resource = mr
        return device.allocate(SIZE)
    finally:
        device.memory_resource = default


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


KERNEL_ATTRIBUTES = (
    "num_regs",
    "max_threads_per_block",
    "shared_size_bytes",
    "cluster_size_must_be_set",
    "binary_version",
    "cache_mode_ca",
    "cluster_scheduling_policy_preference",
    "const_size_bytes",
    "local_size_bytes",
    "max_dynamic_shared_size_bytes",
    "non_portable_cluster_size_allowed",
    "preferred_shared_memory_carveout",
    "ptx_version",
    "required_cluster_depth",
    "required_cluster_height",
    "required_cluster_width",
)


def _error(E: Any, code: Any, call: Any) -> tuple[Any, bool, str]:
    """A ``CUDAError`` made directly, its ``is_sticky`` and its text."""
    error = E.CUDAError(code, call)
    return error, error.is_sticky, str(error)


def _allocation_handle(mr: Any) -> tuple[int, bool]:
    """Export ``mr``'s pool, read the handle and close it (``close()`` twice: idempotent)."""
    handle = mr.get_allocation_handle()
    fd = handle.fd
    handle.close()
    handle.close()
    return fd, handle.closed


def _import_pool(R: Any, mr: Any, device: Any) -> Any:
    """Import ``mr``'s own pool in this process; the import is pooled (a second handle on one pool)."""
    if not mr.is_ipc_enabled:  # no handle to import: the device is still checked first (E3)
        return R.DeviceMemoryResource.from_allocation_handle(device, -1)
    handle = mr.get_allocation_handle()
    try:
        return R.DeviceMemoryResource.from_allocation_handle(device, handle)
    finally:
        handle.close()


def _memory_report(report: Any) -> tuple[int, int, int]:
    return report.total, len(report.by_device), len(report.by_source)


def _object_code_state(code: Any) -> tuple[Any, ...]:
    return (len(code.code), code.code_type, code.name, dict(code.symbol_mapping))


def _compile(R: Any, cache: Any, code_type: Any, target: Any, names: Any) -> Any:
    """Compile the tiny program (through ``cache``), read what a Program reports, close it."""
    program = R.Program(_TINY_CU, code_type, R.ProgramOptions(std="c++17"))
    try:
        key = R.ProgramCache.key(program, target, names) if isinstance(target, str) else None
        code = program.compile(target, names, cache=cache)
        if key is not None:
            cache.put(key, code)
            cache.get(key)
        return (code, program.backend, program.code_type, len(program.code), program.options)
    finally:
        program.close()


def _link_with(R: Any, data: bytes, arch: Any, target: Any) -> Any:
    """Link ``data`` for ``arch``; read the linker's logs and backend; close it."""
    linker = R.Linker(_object_code(R, data), options=R.LinkerOptions(arch=arch))
    try:
        code = linker.link(target)
        return (code, linker.backend, linker.get_error_log(), linker.get_info_log())
    finally:
        linker.close()


def _attributed_launch(  # noqa: PLR0917
    E: Any, R: Any, stream: Any, config: Any, kernel: Any, args: tuple[Any, ...]
) -> bool:
    with E.attribute_faults():
        R.launch(stream, config, kernel, *args)
        return bool(E.attributing())


def _collect_under_lock(E: Any, reentrant: Any) -> bool:
    """Collect garbage while holding a lock of cuguard's kind; whether collection was deferred meanwhile."""
    lock = E.deferring_lock(reentrant=reentrant)
    with lock:
        gc.collect()
        return bool(E.collection_deferred())


def _describe() -> str:
    return "a launch of the misuse sweep"


def _in_capture_mode(G: Any, mode: Any) -> str:
    """``with capture_mode(mode)`` around nothing; returns the previous mode (restored by the block's end)."""
    with G.capture_mode(mode) as previous:
        return str(previous)


def _typed_views(R: Any, buffer: Any, shape: Any, dtype: Any) -> tuple[Any, ...]:
    """A typed view of ``buffer``, what it says, and views of its own exports (DLPack, the CUDA Array Interface)."""
    view = R.StridedMemoryView.from_buffer(buffer, shape, dtype=dtype)
    said: tuple[Any, ...] = (view.ptr, view.shape, view.strides, view.dtype, view.size, view.device_id, view.readonly)
    said += (view.is_device_accessible, view.exporting_obj is buffer, view.stream_ptr, view.__dlpack_device__())
    again = R.StridedMemoryView.from_dlpack(view, -1)
    interface = R.StridedMemoryView.from_cuda_array_interface(view, -1, device=buffer.device)
    proxied = R.args_viewable_as_strided_memory((0,))(lambda arg: arg.view(-1))(view)
    return (*said, again.shape, interface.strides, R.StridedMemoryView.from_any_interface(view, -1).dtype, proxied)


def _exit(obj: Any) -> BaseException:
    """``obj.__exit__`` while the body's exception propagates; returns that exception (to read its notes)."""
    body = ValueError("the with-block body failed")
    obj.__exit__(ValueError, body, None)
    return body


def _block(obj: Any, fail: bool) -> BaseException | None:
    """``with obj:`` (a Context or Device) around nothing, or around a body that raises; returns that exception."""
    body = ValueError("the with-block body failed")
    try:
        with obj:
            if fail:
                raise body
    except ValueError as exc:
        if exc is not body:
            raise
        return body
    return None


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
    add(
        "errors.CUDAError",
        None,
        lambda code, call: _error(E, code, call),
        codes,
        _v("call", "cuStreamCreate", None, 5, good=2),
    )
    add("errors.format_handle", None, E.format_handle, _v("handle", None, 0, 12345, "x", 1.5))
    add("errors.flush_deferred", None, E.flush_deferred, _v("timeout", None, 0, 1.0, 5))
    add("graphs.flush_deferred", None, G.flush_deferred, _v("timeout", None, 0, 1.0))
    add("graphs.pending_payloads", None, G.pending_payloads)
    add("errors.default_driver_choice", None, E.default_driver_choice)
    integers = _v("value", 0, 64, 2**63, -1, 2**64, True, 1.5, None, "1", good=3)
    add("errors.int_argument", None, lambda value: E.int_argument("size", value), integers)
    add("errors.is_integer", None, E.is_integer, integers)
    # no sticky codes: raising one records the process's first sticky fault (E5) for the rest of the example
    statuses = _v("status", 1, 2, 201, 0, -1, 12345, 2**40, None, "x", 1.5, good=3)
    add("errors.status_argument", None, lambda status: E.status_argument("code", status), statuses)
    add("errors.is_driver_status", None, E.is_driver_status, statuses)
    add("errors.check", None, lambda status: E.check(status, "cuStreamQuery"), statuses)
    add("errors.raise_status", None, lambda status: E.raise_status(status, "cuStreamQuery"), statuses)
    add(
        "errors.wrong_kind",
        None,
        lambda value: (E.wrong_kind("stream", "a Stream", value), E.out_of_range("size", 5, 0, 4)),
        _v("value", None, 5, "x", lambda: Opaque()),  # noqa: PLW0108 - a fresh object per draw
    )
    add("errors.internal_error", None, E.internal_error, _v("detail", "an invariant", "", None, good=2))
    add("errors.attributing", None, E.attributing)
    add("errors.collection_deferred", None, E.collection_deferred)
    # a collection while a cuguard lock is held: what it makes due goes to the release thread (S2, O5)
    add(
        "errors.deferring_lock",
        None,
        lambda reentrant: _collect_under_lock(E, reentrant),
        _v("reentrant", False, True, None, "yes", good=3),
    )

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
    # ``with ctx:`` makes it current for the block and restores the caller's context (it closes nothing)
    add("Context.__exit__", "Context", _block, _v("fail", False, True))
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
    add("Device.pci_bus_id", "Device", lambda d: d.pci_bus_id)
    add("Device.__enter__", "Device", _block, _v("fail", False, True))
    add("system.get_num_devices", None, R.system.get_num_devices)
    add(
        "system.get_user_mode_driver_version",
        None,
        lambda: (R.system.get_user_mode_driver_version(), R.system.get_driver_version(), R.system.driver_version),
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
    add(
        "Device.memory_resource",
        "Device",
        _allocate_through,
        _p("memory_resource", frozenset(MEMORY_RESOURCES), "MemoryResource"),
        weight=2,
    )
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
    add("Event.timing", "Event", lambda e: (e.timing, e.device, e.context, e.closed), uses_receiver=False)

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
    for method, param in (("copy_from", "src"), ("copy_to", "dst")):
        add(
            f"PinnedBuffer.{method}",
            "PinnedBuffer",
            lambda p, other, s, method=method: getattr(p, method)(other, s),
            _p(param, MEMORY, "Buffer"),
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
    add("Buffer.ptr", "Buffer", lambda b: (b.ptr, b.handle, b.__cuda_array_interface__))
    add(
        "Buffer.size",
        "Buffer",
        lambda b: (b.size, b.device, b.stream, b.closed, b.owned, b.context, b.__dlpack_device__()),
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
    add(
        "StridedMemoryView.from_buffer",
        "Buffer",
        lambda b, shape, dtype: _typed_views(R, b, shape, dtype),
        _v("shape", 4, (2, 2), (), (0,), -1, (1.5,), None, "4", good=4),
        _v("dtype", "uint8", "float32", "int64", None, 5, "S4", good=3),
    )
    add("PinnedBuffer.address", "PinnedBuffer", lambda p: (p.address, p.handle))
    add(
        "PinnedBuffer.size",
        "PinnedBuffer",
        lambda p: (p.size, p.closed, p.context, p.memory_resource),
        uses_receiver=False,
    )
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
            lambda mr: (mr.owned, mr.closed, mr.is_ipc_enabled, mr.is_imported, mr.context, mr.handle),
            uses_receiver=False,
        )
    add(
        "DeviceMemoryResource.get_allocation_handle",
        "DeviceMemoryResource",
        _allocation_handle,
    )
    # The same process imports its own pool: one pool, one owner (the import shares the exporter's pool).
    add(
        "DeviceMemoryResource.from_allocation_handle",
        "DeviceMemoryResource",
        lambda mr, device: _import_pool(R, mr, device),
        _p("device", DEVICE | {"int"}, "Device", values=(0, 1, -1)),
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
        lambda collect: _memory_report(R.memory_in_use(collect=collect)),
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
    # launch attributes: a priority outside the device's range is refused at the launch (ValueError)
    add(
        "LaunchConfig[attributes]",
        None,
        lambda priority, serialize: R.LaunchConfig(
            grid=1, block=SIZE, priority=priority, programmatic_stream_serialization=serialize
        ),
        _v("priority", None, 0, -1, -5, 1, -9, True, 1.5, "x", 2**31, good=6),
        _v("programmatic_stream_serialization", False, True, 1, None, good=2),
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
    # A launch with fault attribution on (E5): a launch on a capturing stream must not synchronize it (G6).
    add(
        "errors.attribute_faults",
        None,
        lambda stream, config, kernel, *args: _attributed_launch(E, R, stream, config, kernel, args),
        _p("stream", STREAM, "Stream"),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        kargs,
        weight=2,
    )
    add("pack_args", None, lambda *args: R.pack_args(args), kargs)
    add("Kernel.pack", "Kernel", lambda k, *args: k.pack(args)[0], kargs)
    add(
        "Kernel.parameters",
        "Kernel",
        lambda k: ([p.kind for p in k.parameters], k.name),
        uses_receiver=False,
    )
    add("Kernel.handle", "Kernel", lambda k: (k.handle, k.num_arguments))
    add("Module.handle", "Module", lambda m: (m.handle, m.context, m.closed))
    add("LaunchConfig.dims", "LaunchConfig", lambda c: (c.dims(), c.is_cooperative, c.shared_mem))
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
        _v("name", *KERNEL_ATTRIBUTES),
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
    for kind in ("cubin", "fatbin", "ltoir"):
        add(
            f"ObjectCode.from_{kind}",
            None,
            lambda data, name, kind=kind: _object_code_state(getattr(R.ObjectCode, f"from_{kind}")(data, name=name)),
            _v("module", image, b"garbage", "text", b"", None, 5, good=3),
            _v("name", "", "kernels", None, good=2),
            extra_errors=(OSError,),  # documented: a str is the path of a file to read
        )
    program_cache = R.ProgramCache()  # repeated compilations come from memory
    add(
        "Program.compile",
        None,
        lambda code_type, target, names: _compile(R, program_cache, code_type, target, names),
        _v("code_type", "c++", "c++", "fortran", None, good=2),
        _v("target_type", "ptx", "ptx", "bogus", None, good=2),
        _v("name_expressions", (), ("tiny<int>",), "tiny<int>", (5,), good=2),
        extra_errors=(LibraryNotFoundError,),  # documented: NVRTC is not installed
    )
    add(
        "Linker.link",
        None,
        lambda arch, target: _link_with(R, image(), arch, target),
        _v("arch", "sm_90", None, "x", 5, good=1),
        _v("target_type", "cubin", "bogus", None, good=1),
        extra_errors=(LibraryNotFoundError,),  # documented: nvJitLink is not installed
    )
    add(
        "link",
        None,
        R.link,
        _v("images", lambda: [image()], lambda: (image(),), lambda: [b"garbage"], (), None, 5, lambda: [5], good=2),
        _v("arch", "sm_90", None, 5, "x", good=1),
        extra_errors=(LibraryNotFoundError,),  # documented: nvJitLink is not installed
    )
    # A foreign stream (or a builder, or a Stream) as a cuguard Stream; the wrapper is pooled (not owned).
    # a Stream is returned as it is (a conversion, not a use): a closed or stale one is refused where it is used
    add("as_stream", None, R.as_stream, _p("stream", STREAM, "Stream", uses=False), weight=2)
    add(
        "wait_attributed",
        None,
        R.wait_attributed,
        _p("stream", STREAM, "Stream"),
        _v("describe", lambda: _describe, None, 5, good=1),
    )
    add(
        "describe_launch",
        None,
        lambda name, config, *args: R.describe_launch(name, config, args),
        _v("name", "fill_u8", None, 5, good=1),
        _p("config", CONFIG, "LaunchConfig"),
        Param("args", ANY, "", star=True, uses=False, naming=False),  # only described: any object, never used
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
        lambda n: ([(b.nodes, b.edges) for b in n.branches], n.condition),
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
    add("Graph.handle", "Graph", lambda x: (x.closed, x.handle))

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
    modes = _v("mode", "relaxed", "relaxed", "thread_local", "global", "loose", None, 2, good=4)
    add(
        "GraphBuilder",
        None,
        lambda s, mode: G.GraphBuilder(s, mode=mode),
        _p("stream", frozenset({"Stream"}), "Stream"),
        modes,
        weight=2,
    )
    add("GraphBuilder.begin_building", "GraphBuilder", lambda b: b.begin_building(), extra_errors=state, weight=3)
    add(
        "GraphBuilder.begin_building[mode]",
        "GraphBuilder",
        lambda b, mode: b.begin_building(mode),
        _v("mode", "relaxed", "thread_local", "global", None, "loose", 2, good=4),
        extra_errors=state,
        weight=2,
    )
    add(
        "GraphBuilder.launch",
        "GraphBuilder",
        lambda b, config, kernel, *args: b.launch(config, kernel, *args),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        kargs,
        extra_errors=state,
        weight=3,
    )
    # keep() takes any object: nothing is a wrong kind; closed objects and copies are kept as given.
    add(
        "GraphBuilder.keep",
        "GraphBuilder",
        lambda b, *objects: b.keep(*objects),
        Param("objects", ANY, "", star=True, uses=False, naming=False),
        extra_errors=state,
        weight=2,
    )
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
    capture_modes = _v("mode", "relaxed", "thread_local", "global", "loose", None, 2, good=3)
    add("exchange_capture_mode", None, G.exchange_capture_mode, capture_modes)
    add("capture_mode", None, lambda mode: _in_capture_mode(G, mode), capture_modes)
    add("GraphBuilder.status", "GraphBuilder", lambda b: (b.closed, b.status, b.is_building, b.mode, b.stream))
    add("GraphBuilder.definition", "GraphBuilder", lambda b: b.definition, extra_errors=state)
    add("GraphBuilder.close", "GraphBuilder", lambda b: b.close(), idempotent_close=True)
    add("GraphBuilder.__exit__", "GraphBuilder", _exit, idempotent_close=True, exit=True)
    return ops


# --- completeness -------------------------------------------------------------------------------

#: The layers whose public callables the catalog must cover (their ``__all__``).
LAYERS = ("errors", "context", "resources", "graphs")


def _members(cls: type) -> list[str]:
    """The public methods and properties of ``cls`` (its own and those it inherits from cuguard classes)."""
    found: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("cuguard."):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(attr, FunctionType | classmethod | staticmethod | property) or (
                hasattr(attr, "__get__") and callable(attr) and not isinstance(attr, type)
            ):
                found.add(name)
    return sorted(found)


def public_callables(L: SimpleNamespace) -> list[str]:
    """Every public callable of every layer: ``layer.function``, ``Class`` and ``Class.member``.

    A layer's declared interface for the layers above (its ``lowlevel`` module) counts as public:
    its names are keyed like the layer's own.
    """
    names: set[str] = set()
    for layer in LAYERS:
        module = getattr(L, layer)
        spec = importlib.util.find_spec(f"{module.__name__}.lowlevel")
        interface = None if spec is None else importlib.import_module(spec.name)
        exported = [(module, name) for name in module.__all__]
        exported += [(interface, name) for name in getattr(interface, "__all__", ())]
        for owner, name in exported:
            value = getattr(owner, name)
            if isinstance(value, types.ModuleType):
                continue
            if isinstance(value, type):
                names.add(name)
                names.update(f"{name}.{member}" for member in _members(value))
            elif callable(value):
                names.add(f"{layer}.{name}")
    return sorted(names)


def _drawn(key: str, op_names: set[str]) -> bool:
    """Whether an operation of the catalog calls ``key`` (its name, or a variant ``key[...]`` or ``key.part``)."""
    candidates = [key]
    head, _, rest = key.partition(".")
    if head in LAYERS:
        candidates.append(rest)  # layer functions are named without their layer in the catalog
    is_class = "." not in key and key[:1].isupper()
    for c in candidates:
        for name in op_names:
            if name == c or name.startswith(c + "["):
                return True
            if not is_class and name.startswith(c + "."):
                return True
    return False


def coverage_problems(L: SimpleNamespace, ops: list[Op], steps: frozenset[str]) -> list[str]:
    """What keeps the catalog from being complete: callables with neither an entry nor a reason, and bad rows.

    A row of :data:`COVERAGE` names an operation of the catalog, a step kind
    (``"step:<kind>"``) or gives a written reason (a sentence) why the callable
    is not drawn.
    """
    op_names = {op.name for op in ops}
    public = public_callables(L)
    problems = [
        f"{key}: no catalog entry and no reason in COVERAGE"
        for key in public
        if key not in COVERAGE and not _drawn(key, op_names)
    ]
    for key, why in COVERAGE.items():
        if key not in public:
            problems.append(f"{key}: in COVERAGE but not a public callable of {', '.join(LAYERS)}")
        elif why.startswith("step:"):
            if why[5:] not in steps:
                problems.append(f"{key}: COVERAGE names the step kind {why[5:]!r}, which does not exist")
        elif why.startswith("op:"):
            if why[3:] not in op_names:
                problems.append(f"{key}: COVERAGE names the operation {why[3:]!r}, which is not in the catalog")
        elif len(why.split()) < 4:
            problems.append(f"{key}: the reason in COVERAGE is not a sentence: {why!r}")
    return problems


#: The public callables the catalog draws under another name (``"op:<name>"``), through a step kind
#: (``"step:<kind>"``), or does not draw, with the reason. Everything else has an operation of its own
#: (see :func:`coverage_problems`; the completeness test keeps this table honest).
def _rows(why: str, *keys: str) -> dict[str, str]:
    return dict.fromkeys(keys, why)


def _members_of(cls: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{cls}.{name}" for name in names)


_ACCOUNTING = ("buffers", "device_id", "held", "is_device_accessible", "is_host_accessible", "leaked")
_POOL_STATE = ("closed", "context", "handle", "is_imported", "is_ipc_enabled", "owned")
_EXCEPTIONS = "an exception class: raised by the operations, and every step checks what it raised (E1-E5)"
_STICKY = "the is_sticky property CUDAError defines, inherited unchanged (drawn by errors.CUDAError)"
_RESULT = "a result type the drawn operations return; it is not constructed by users and holds no driver handle"
_OPTIONS = "an options value type; its values reach cuguard through the drawn constructor that takes it"
_SEAM = (
    "the driver seam used by cuguard.testing and the layers: the sweep installs drivers through it "
    "(the switch step) and reads it for every check; calling it at random would replace the sweep's own driver"
)
_CALLBACK = (
    "the layers' bracket around CUDA host functions and destructors; every host and graph callback step "
    "runs through it (O5, W6), and calling it outside a callback would mark the sweep's thread as one"
)
_REPORTING = (
    "a reporting helper of the layers' failure paths; each step checks what it produced (W1, G4) "
    "rather than calling it with made-up failures"
)
_BODY = (
    "a conditional body is a GraphDefinition (its subclass, with the same methods); the conditional "
    "builders and Node.branches reach bodies, but they are not pooled as receivers: closing and "
    "instantiating a body are refused by design"
)
_IPC_OTHER_PROCESS = (
    "opens what another process exported; the sweep runs in one process, and the failure-point sweep "
    "and the IPC tests cover it with the simulator's other-process view"
)

COVERAGE: dict[str, str] = {
    # --- errors ---
    **_rows("op:errors.CUDAError", "CUDAError", "CUDAError.is_sticky"),
    **_rows(
        _EXCEPTIONS,
        "CUDADriverNotFoundError",
        "GraphUpdateError",
        "LibraryNotFoundError",
        "NVJitLinkError",
        "NVRTCError",
        "NVVMError",
        "ResourceClosedError",
        "StickyCUDAError",
    ),
    **_rows(
        _STICKY,
        "CUDADriverNotFoundError.is_sticky",
        "GraphUpdateError.is_sticky",
        "NVJitLinkError.is_sticky",
        "NVRTCError.is_sticky",
        "NVVMError.is_sticky",
        "StickyCUDAError.is_sticky",
    ),
    "CUDAWarning": "a warning class: every step checks the CUDAWarnings it caused (W1, W4, O6)",
    "StickyFaultWarning": "a CUDAWarning class: the steps check it as every CUDAWarning they caused (W1, W7)",
    "RaceWarning": "a CUDAWarning class of the race checker (B7), which the misuse sweep leaves off",
    "resources.racecheck": "turns the process-wide race checker (B7) on or off; no driver call, left off by the sweep",
    "resources.racecheck_enabled": "reads the race checker's flag (B7): no driver call, nothing to misuse",
    "DriverSeam": "the type of cuguard.errors.driver, the seam every driver call goes through; never constructed",
    "Unique": "step:copy",
    # --- the layers' declared interfaces for the layers above (their lowlevel modules) ---
    **_rows(
        "a lock type the layers make with deferring_lock; its use is swept through every locked operation",
        "DeferringLock",
        "DeferringLock.acquire",
        "DeferringLock.locked",
        "DeferringLock.release",
    ),
    **_rows(
        "the owner table graphs and captures keep; every graph and capture operation of the catalog fills it",
        "OwnerTable",
        "OwnerTable.copy",
        "OwnerTable.keep",
        "OwnerTable.merge",
        "resources.retain",
        "resources.split_written",
        "resources.capture_began",
        "resources.capture_ended",
        "resources.capture_joined",
        "resources.capture_left",
        "resources.waiting_count",
        "resources.graph_let_go",
    ),
    **_rows(
        "registers a process-wide hook or observer for the life of the process; calling it would change every "
        "later example",
        "context.on_synchronized",
        "errors.on_route_change",
        "errors.set_acquire_hook",
        "resources.add_close_guard",
        "resources.follow_fastpath",
    ),
    **_rows(
        "a step of cuguard's own operations (their switch, relaxed-mode or argument path), drawn through them",
        "context.call_switched",
        "resources.on_own_behalf",
        "resources.unprohibited",
        "resources.check_read_only",
        "resources.memory_uses",
    ),
    "errors.install_driver": "step:switch",
    **_rows(
        _SEAM,
        "errors.active_driver",
        "errors.driver_state",
        "errors.driver_token",
        "errors.forget_driver",
        "errors.installed_driver",
        "errors.on_driver_change",
        "errors.real_driver",
        "errors.use_driver",
    ),
    **_rows(
        _CALLBACK,
        "errors.call_unraisable",
        "errors.enter_driver_callback",
        "errors.exit_driver_callback",
        "errors.in_driver_callback",
    ),
    "errors.defer": "step:host_callback",
    "errors.deferred_count": "op:errors.flush_deferred",
    **_rows(_REPORTING, "errors.add_failure_note", "errors.report", "errors.report_error", "errors.report_warning"),
    "errors.first_sticky_fault": "step:fault",
    "errors.forget_sticky_fault": "step:fault",
    "errors.out_of_range": "op:errors.wrong_kind",
    "errors.refuse_construction": "step:construct",
    # --- context ---
    "Context": "step:construct",
    **_rows("op:Context.is_primary", "Context.closed", "Context.owned", "Context.stale"),
    # --- resources: factory-made classes (direct construction is refused: O1) ---
    **_rows(
        "step:construct", "Buffer", "Event", "Kernel", "Module", "PinnedBuffer", "Resource", "Stream", "Graph", "Node"
    ),
    **_rows("op:Buffer.size", "Buffer.closed", "Buffer.context", "Buffer.device", "Buffer.owned", "Buffer.stream"),
    "Buffer.handle": "op:Buffer.ptr",
    "Buffer.from_ipc_descriptor": _IPC_OTHER_PROCESS,
    "Event.from_ipc_descriptor": _IPC_OTHER_PROCESS,
    "IPCAllocationHandle.from_fd": _IPC_OTHER_PROCESS,
    **_rows("op:Event.timing", "Event.closed", "Event.context", "Event.device"),
    "Event.is_ipc_enabled": "op:Event.get_ipc_descriptor",
    **_rows("op:Device.properties", "Device.arch", "Device.uuid"),
    "Device.handle": "op:Device.ordinal",
    **_rows("op:Stream.device", "Stream.closed", "Stream.context"),
    "Stream.priority": "op:Stream.flags",
    **_rows("op:Module.handle", "Module.closed", "Module.context"),
    "Kernel.num_arguments": "op:Kernel.handle",
    **_rows("op:PinnedBuffer.size", "PinnedBuffer.closed", "PinnedBuffer.context", "PinnedBuffer.memory_resource"),
    "PinnedBuffer.handle": "op:PinnedBuffer.address",
    **_rows("op:LaunchConfig.dims", "LaunchConfig.is_cooperative", "LaunchConfig.shared_mem"),
    "Resource.close": "the base class's close(), drawn as Stream.close, Event.close, Buffer.close and Module.close",
    **_rows(
        "properties of the base class, drawn on each subclass (Stream, Event, Buffer, PinnedBuffer, Module)",
        "Resource.closed",
        "Resource.context",
        "Resource.handle",
    ),
    # --- resources: typed views (a view owns no handle: made by its class methods, drawn on buffers) ---
    **_rows(
        "op:StridedMemoryView.from_buffer",
        "StridedMemoryView",
        "resources.args_viewable_as_strided_memory",
        *_members_of(
            "StridedMemoryView",
            "device_id",
            "dtype",
            "exporting_obj",
            "from_any_interface",
            "from_cuda_array_interface",
            "from_dlpack",
            "is_device_accessible",
            "ptr",
            "readonly",
            "shape",
            "size",
            "stream_ptr",
            "strides",
        ),
    ),
    # --- resources: memory resources ---
    **{key: f"op:{cls}.accounting" for cls in MEMORY_RESOURCES for key in _members_of(cls, *_ACCOUNTING)},
    **{key: f"op:{cls}.state" for cls in POOL_RESOURCES for key in _members_of(cls, *_POOL_STATE)},
    "VirtualMemoryResource.options": "op:VirtualMemoryResource.granularity",
    "MemoryResource": "the abstract base of the memory resources: each concrete resource is drawn instead",
    **_rows(
        "an abstract method of the base class, drawn on each concrete memory resource",
        *_members_of("MemoryResource", "allocate", "deallocate", *_ACCOUNTING),
    ),
    "MemoryPoolAttributes": _RESULT,
    **{
        f"MemoryPoolAttributes.{name}": "op:DeviceMemoryResource.attributes"
        for name in (
            "release_threshold",
            "reuse_follow_event_dependencies",
            "reuse_allow_opportunistic",
            "reuse_allow_internal_dependencies",
            "reserved_mem_current",
            "reserved_mem_high",
            "used_mem_current",
            "used_mem_high",
        )
    },
    "MemoryPoolAttributes.reset_high_watermarks": "op:DeviceMemoryResource.reset_high_watermarks",
    **_rows(
        "op:DeviceMemoryResource.get_allocation_handle",
        "IPCAllocationHandle.close",
        "IPCAllocationHandle.closed",
        "IPCAllocationHandle.fd",
    ),
    **_rows(_RESULT, "IPCAllocationHandle", "IPCBufferDescriptor", "IPCEventDescriptor"),
    **_rows(_OPTIONS, "DeviceMemoryResourceOptions", "PinnedMemoryResourceOptions", "VirtualMemoryResourceOptions"),
    **_rows(_RESULT, "MemoryRecord", "MemoryReport"),
    **_rows("op:resources.memory_in_use", "MemoryReport.by_device", "MemoryReport.by_source", "MemoryReport.total"),
    # --- resources: kernels, code, compilers ---
    **_rows(
        _RESULT,
        "DeviceProperties",
        "KernelAttributes",
        "KernelOccupancy",
        "KernelParameter",
        "MaxPotentialBlockSizeOccupancyResult",
    ),
    **{f"KernelAttributes.{name}": "op:Kernel.attributes" for name in KERNEL_ATTRIBUTES},
    "KernelOccupancy.max_active_blocks_per_multiprocessor": "op:Kernel.occupancy",
    "KernelOccupancy.max_potential_block_size": "op:Kernel.occupancy.max_potential_block_size",
    "KernelOccupancy.available_dynamic_shared_memory_per_block": (
        "op:Kernel.occupancy.available_dynamic_shared_memory_per_block"
    ),
    "KernelOccupancy.max_active_clusters": "op:Kernel.occupancy.max_active_clusters",
    "KernelOccupancy.max_potential_cluster_size": "op:Kernel.occupancy.max_potential_cluster_size",
    "KernelParameter.kind": "op:Kernel.parameters",
    "ObjectCode": "a value holding code bytes (no driver handle), made by its from_* methods, which are drawn",
    **_rows(
        "op:ObjectCode.from_cubin",
        "ObjectCode.code",
        "ObjectCode.code_type",
        "ObjectCode.name",
        "ObjectCode.symbol_mapping",
    ),
    "ObjectCode.lowered_name": "op:ObjectCode.from_ptx",
    **_rows(
        "op:Program.compile",
        "Program",
        "Program.backend",
        "Program.close",
        "Program.code",
        "Program.code_type",
        "Program.options",
        "ProgramOptions.as_options",
        "ProgramCache",
        "ProgramCache.get",
        "ProgramCache.key",
        "ProgramCache.put",
    ),
    "ProgramCache.clear": "it empties the sweep's own compilation cache, which would only make Program.compile slower",
    "ProgramOptions": _OPTIONS,
    "LinkerOptions": _OPTIONS,
    **_rows(
        "op:Linker.link",
        "Linker",
        "Linker.backend",
        "Linker.close",
        "Linker.get_error_log",
        "Linker.get_info_log",
        "LinkerOptions.as_options",
    ),
    # --- graphs ---
    "GraphDefinition.closed": "op:GraphDefinition.context",
    "GraphDefinition.edges": "op:GraphDefinition.nodes",
    "Graph.closed": "op:Graph.handle",
    **_rows("op:Node.type", "Node.closed", "Node.graph", "Node.params"),
    "Node.condition": "op:Node.branches",
    "GraphCondition": "step:construct",
    **_rows("op:GraphCondition.handle", "GraphCondition.default", "GraphCondition.graph"),
    **_rows(
        "op:GraphBuilder.status",
        "GraphBuilder.closed",
        "GraphBuilder.is_building",
        "GraphBuilder.mode",
        "GraphBuilder.stream",
    ),
    "EdgeView": "the type of Node.pred and Node.succ (never constructed by users); its methods are drawn through them",
    **{
        f"EdgeView.{name}": f"op:Node.pred.{name}"
        for name in ("add", "clear", "difference_update", "discard", "pop", "remove", "update")
    },
    "ConditionalBody": "step:construct",
    **_rows(
        _BODY,
        *_members_of(
            "ConditionalBody",
            "allocate",
            "callback",
            "clone",
            "close",
            "closed",
            "connect",
            "context",
            "create_condition",
            "deallocate",
            "disconnect",
            "edges",
            "embed",
            "empty",
            "find_node",
            "handle",
            "if_else",
            "if_then",
            "instantiate",
            "join",
            "launch",
            "memcpy",
            "memset",
            "nodes",
            "record",
            "switch",
            "wait",
            "while_loop",
        ),
    ),
}
