"""What the misuse sweep's catalog is made of: :class:`Op`, :class:`Param`, the kinds and shared values.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cuguard.sweeps._misuse.model import SIZE, CallbackBoom

__all__ = ["ANY", "CTX_HANDLE", "EDGE", "KERNEL_ARGS", "Op", "Param", "adder"]

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


def adder(ops: list[Op]) -> Callable[..., None]:
    """``add(name, receiver, run, *params, **fields)``: append an :class:`Op` to ``ops``."""

    def add(name: str, receiver: str | None, run: Callable[..., Any], *params: Param, **kw: Any) -> None:
        ops.append(Op(name, receiver, run, tuple(params), **kw))

    return add


def ordinal_param() -> Param:
    """A device ordinal: the two devices, None (the current device) and wrong ones."""
    return _v("ordinal", 0, 1, None, 2, -1, 1.5, True, "0", good=3)


def size_param() -> Param:
    """A size in bytes: good ones first, then wrong ones."""
    return _v("size", SIZE, SIZE, 0, 1, 128, -1, 1 << 52, 1.5, None, "64", good=2)


def image_param(image: Callable[[], bytes]) -> Param:
    """A kernel image: the driver's own (bytes, or read by ``image()`` at the draw), then wrong ones."""
    return _v("image", image, image, lambda: image().decode(errors="replace"), b"garbage", None, 5, good=3)


#: The kernel arguments of a launch (drawn specially: see ``session``).
KERNEL_ARGS_PARAM = Param("args", special=KERNEL_ARGS, star=True, naming=False)
