"""The sweep's registry: one scenario per public operation of every cuguard layer.

A :class:`Scenario` builds what the operation needs (its *set-up*), then makes
exactly one public call (its *operation*). The sweep records the driver calls
of the operation and fails each of them in turn (see
:mod:`cuguard.sweeps._failpoints.runner`).

:data:`NO_DRIVER_CALL` lists the public callables that make no driver call,
each with the reason; ``tests/test_sweep.py`` checks that every public callable
of every layer is in the registry or in that list.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import cuguard.context as _context_layer
import cuguard.errors as _errors_layer
import cuguard.graphs as _graphs_layer
import cuguard.resources as _resources_layer

__all__ = ["LAYERS", "NO_DRIVER_CALL", "Env", "Scenario", "scenarios"]

#: The layers swept, bottom-up.
LAYERS = ("errors", "context", "resources", "graphs")

# Kernels for the module and launch scenarios: PTX for the simulator (which runs
# Python emulations), CUDA C++ compiled with NVRTC for a real GPU.
KERNELS_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill_u8(.param .u64 out, .param .u32 value, .param .u64 n) { ret; }
"""

KERNELS_CU = r"""
extern "C" __global__ void fill_u8(unsigned char* out, unsigned int value, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned char)value;
}
"""

SIZE = 64


@dataclass(frozen=True)
class Scenario:
    """One public operation, with the set-up it needs.

    ``covers`` names the public callables the operation exercises
    (``"resources.Stream.sync"``; a constructor is ``"resources.Device()"``).
    ``kind`` is ``"raise"`` for an ordinary call (a failure must raise) or
    ``"warn"`` for an implicit release (a failure must be reported as a
    ``CUDAWarning``). ``releases``: the operation releases driver objects on
    purpose. ``sets_context``: it changes the current context on purpose.
    ``state`` returns a value that must be the same before the operation and
    after it failed (all-or-nothing); ``probe`` uses the touched objects once
    faults are off (G3). ``real``: it can run on a real GPU.
    """

    name: str
    layer: str
    covers: tuple[str, ...]
    setup: Callable[[Env], Any]
    op: Callable[[Env, Any], Any]
    probe: Callable[[Env, Any], None] | None = None
    state: Callable[[Env, Any], Any] | None = None
    kind: str = "raise"
    releases: bool = False
    sets_context: bool = False
    real: bool = True


@dataclass
class Env:
    """What a scenario works with: the layers' modules and the objects to release afterwards."""

    real: bool
    image: bytes
    context: Any = field(default=None)
    resources: Any = field(default=None)
    graphs: Any = field(default=None)
    errors: Any = field(default=None)
    keep: list[Any] = field(default_factory=list)
    sim: Any = None

    def __post_init__(self) -> None:
        self.errors = _errors_layer
        self.context = _context_layer
        self.resources = _resources_layer
        self.graphs = _graphs_layer

    def own(self, obj: Any) -> Any:
        """Release ``obj`` (``close()`` or a callable) at the end of the case; return it."""
        self.keep.append(obj)
        return obj

    def device(self) -> Any:
        """Device 0 with its primary context retained (kept for the case)."""
        dev = self.resources.Device(0)
        self.own(dev.context)
        return dev


class _Foreign:
    """A stream of another library: only ``__cuda_stream__``."""

    def __init__(self, stream: Any) -> None:
        self._address = int(stream.handle)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._address)


def _ns(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(**kw)


def _raw(env: Env) -> Any:
    return env.errors.driver


def _cu() -> Any:
    from cuda.bindings import driver as cb

    return cb


def _check(err: Any, call: str, env: Env) -> None:
    if err:
        env.errors.raise_status(err, call)


# --- set-ups --------------------------------------------------------------------------------


def nothing(env: Env) -> SimpleNamespace:
    return _ns()


def dev_only(env: Env) -> SimpleNamespace:
    return _ns(dev=env.device())


def dev_fresh(env: Env) -> SimpleNamespace:
    """A Device whose primary context is not retained yet, and whose properties are read afresh.

    A driver that serves the whole sweep (a GPU) keeps one Device per ordinal, and with it the
    properties it read: they are forgotten here, so that every case reads them as the first did.
    """
    dev = env.resources.Device(0)
    dev._properties = None  # the cache Device.properties fills on first use
    return _ns(dev=dev)


def with_stream(env: Env) -> SimpleNamespace:
    s = dev_only(env)
    s.stream = env.own(s.dev.create_stream())
    return s


def with_streams(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.other = env.own(s.dev.create_stream())
    return s


def with_event(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.event = env.own(s.dev.create_event())
    return s


def with_recorded_events(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.start = env.own(s.stream.record())
    s.end = env.own(s.stream.record())
    s.stream.sync()
    return s


def with_buffers(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.buf = env.own(s.dev.allocate(SIZE))
    s.buf2 = env.own(s.dev.allocate(SIZE))
    s.pinned = env.own(s.dev.allocate_pinned(SIZE))
    s.host = bytearray(SIZE)
    return s


def with_module(env: Env) -> SimpleNamespace:
    s = with_buffers(env)
    s.module = env.own(s.dev.load_module(env.image))
    s.kernel = s.module.get_kernel("fill_u8")
    s.config = env.resources.LaunchConfig(grid=1, block=SIZE)
    return s


def with_object_code(env: Env) -> SimpleNamespace:
    """An ObjectCode of the kernels, with device 0 current (ObjectCode.get_kernel loads into it)."""
    s = with_buffers(env)
    image = env.image
    objects = env.resources.ObjectCode
    s.code = objects.from_cubin(image) if env.real else objects.from_ptx(image)
    previous = s.dev.set_current()
    env.own(lambda: previous.set_current() if previous is not None else None)
    return s


def _extended_launch(extra: dict[str, Any]) -> Callable[[Env, Any], Any]:
    def op(env: Env, s: Any) -> Any:
        config = env.resources.LaunchConfig(grid=1, block=SIZE, **extra)
        return env.resources.launch(s.stream, config, s.kernel, s.buf, 5, SIZE)

    return op


def _kernel_attribute(attribute: str) -> Callable[[Env, Any], Any]:
    return lambda env, s: getattr(s.kernel.attributes, attribute)()


_KERNEL_ATTRIBUTES = (
    "max_threads_per_block",
    "shared_size_bytes",
    "const_size_bytes",
    "local_size_bytes",
    "num_regs",
    "ptx_version",
    "binary_version",
    "cache_mode_ca",
    "max_dynamic_shared_size_bytes",
    "preferred_shared_memory_carveout",
    "cluster_size_must_be_set",
    "required_cluster_width",
    "required_cluster_height",
    "required_cluster_depth",
    "non_portable_cluster_size_allowed",
    "cluster_scheduling_policy_preference",
)


# A binary image for the simulator: its kernel's parameter list comes from the driver
# (cuFuncGetParamInfo), as for a cubin on a real GPU.
FAKE_CUBIN = b"\x7fELF\x02cuguard sweep image\x00"


def with_cubin_module(env: Env) -> SimpleNamespace:
    s = with_buffers(env)
    if env.sim is not None:
        env.sim.register_image(FAKE_CUBIN, {"fill_u8": (ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64)})
    s.module = env.own(s.dev.load_module(env.image if env.real else FAKE_CUBIN))
    return s


def with_graph(env: Env) -> SimpleNamespace:
    """A definition with nodes a -> b, c (no edges to c), and the objects nodes use."""
    s = with_module(env)
    s.event = env.own(s.dev.create_event())
    g = s.g = env.own(env.graphs.GraphDefinition(s.dev))
    s.a = g.empty()
    s.b = s.a.empty()
    s.c = g.empty()
    return s


def with_exec(env: Env) -> SimpleNamespace:
    s = with_graph(env)
    s.b.memset(s.buf, 7)
    s.exec = env.own(s.g.instantiate())
    s.g2 = env.own(s.g.clone())
    return s


def _with_other_ctx_resource(build: Callable[[Env, SimpleNamespace], Any]) -> Callable[[Env], SimpleNamespace]:
    def setup(env: Env) -> SimpleNamespace:
        s = with_stream(env)
        s.obj = build(env, s)
        return s

    return setup


def _graph_state(env: Env, s: Any) -> Any:
    g = s.g
    nodes = sorted(g.nodes, key=lambda n: n._order)
    index = {n: i for i, n in enumerate(nodes)}
    return (tuple(n.type for n in nodes), frozenset((index[a], index[b]) for a, b in g.edges), len(g._owners))


def _probe_graph(env: Env, s: Any) -> None:
    g = s.g
    n = g.empty(*[x for x in (s.a, s.b, s.c) if not x.closed])
    if not any(node.type in ("mem_alloc", "mem_free") for node in g.nodes):
        n.destroy()  # graphs holding memory nodes refuse node removal (driver rule)
    with g.instantiate():
        pass


# --- operations -----------------------------------------------------------------------------


def _release(attr: str) -> Callable[[Env, Any], None]:
    """An implicit release: drop the last reference to ``s.<attr>`` and collect."""

    def op(env: Env, s: Any) -> None:
        setattr(s, attr, None)
        gc.collect()

    return op


def _stream_probe(env: Env, s: Any) -> object:
    s.stream.sync()
    with s.dev.create_stream() as st:
        st.sync()
    return None


def _in_block(obj: Any) -> object:
    """``with obj:`` (a Context or a Device) around a question to the driver; returns what it answered."""
    with obj:
        return obj.context if hasattr(obj, "ordinal") else obj.device


def _ctx_probe(env: Env, s: Any) -> object:
    s.dev.sync()
    s.dev.create_stream().close()
    return None


def _buf_probe(env: Env, s: Any) -> None:
    s.buf.fill(1)
    s.buf.copy_to(s.host)
    s.buf2.copy_from(s.buf, s.stream)
    s.stream.sync()


def _raw_stream(env: Env) -> Any:
    err, handle = _raw(env).cuStreamCreate(0)
    _check(err, "cuStreamCreate", env)
    return handle


def _raw_stream_destroy(env: Env) -> Callable[[Any], None]:
    def undo(handle: Any) -> None:
        (err,) = _raw(env).cuStreamDestroy(handle)
        _check(err, "cuStreamDestroy", env)

    return undo


def _cleanup_sync(env: Env) -> Any:
    (err,) = _raw(env).cuCtxSynchronize()
    return err


def _call_in(env: Env, s: Any) -> Any:
    handle = env.context.call_in(s.dev.context, _raw_stream, _raw_stream_destroy(env), env)
    env.own(lambda: _raw_stream_destroy(env)(handle))
    return handle


def _cleanup_in(env: Env, s: Any) -> None:
    err = env.context.cleanup_in(s.dev.context, _cleanup_sync, env)
    if err:
        env.errors.report(err, "cuCtxSynchronize", None, "in a cleanup")


def _closed_stream_buffer(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    st = s.dev.create_stream()
    s.obj = s.dev.allocate(SIZE, st)
    st.close()
    return s


def _pinned(env: Env, s: Any) -> Any:
    return s.dev.allocate_pinned(SIZE)


def _build() -> list[Scenario]:
    out: list[Scenario] = []

    def add(
        name: str,
        setup: Callable[[Env], Any],
        op: Callable[[Env, Any], Any],
        covers: tuple[str, ...] | None = None,
        **kw: Any,
    ) -> None:
        layer = name.split(".", 1)[0]
        out.append(Scenario(name, layer, covers if covers is not None else (name,), setup, op, **kw))

    # --- context -----------------------------------------------------------------------------
    add("context.init_driver", nothing, lambda e, s: e.context.init_driver())
    add(
        "context.Context.primary",
        nothing,
        lambda e, s: e.own(e.context.Context.primary(0)),
        probe=lambda e, s: e.context.Context.primary(0).close(),
        # On a real driver the primary context is held from its first use on (O2): later
        # calls make no driver call, so there is no failure point left to sweep there.
        real=False,
    )
    add(
        "context.Context.create",
        nothing,
        lambda e, s: e.own(e.context.Context.create(0)),
        probe=lambda e, s: e.context.Context.create(0).close(),
    )
    add("context.Context.current", dev_only, lambda e, s: e.context.Context.current())
    add(
        "context.Context.set_current",
        dev_only,
        lambda e, s: s.dev.context.set_current(),
        sets_context=True,
        probe=_ctx_probe,
    )
    add("context.Context.synchronize", dev_only, lambda e, s: s.dev.context.synchronize(), probe=_ctx_probe)
    add(
        "context.Context.device",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.wrap(e.device().context.handle)),
        lambda e, s: s.ctx.device,
        probe=lambda e, s: s.ctx.device,
    )
    add(
        "context.Context.close[primary]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.primary(0)),
        lambda e, s: s.ctx.close(),
        covers=("context.Context.close",),
        releases=True,
        probe=lambda e, s: (s.ctx.close(), _ctx_probe(e, s)),
    )
    add(
        "context.Context.close[created]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.create(0)),
        lambda e, s: s.ctx.close(),
        covers=("context.Context.close",),
        releases=True,
        probe=lambda e, s: (s.ctx.close(), _ctx_probe(e, s)),
    )
    add(
        "context.Context.__enter__",
        dev_only,
        lambda e, s: _in_block(s.dev.context),
        covers=("context.Context.__enter__", "context.Context.__exit__"),
        probe=_ctx_probe,
    )
    add(
        "context.Context.__enter__[created]",
        lambda e: _ns(dev=e.device(), ctx=e.own(e.context.Context.create(0))),
        lambda e, s: _in_block(s.ctx),
        covers=("context.Context.__enter__", "context.Context.__exit__"),
        probe=_ctx_probe,
    )
    add(
        "context.Context.__del__[primary]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.primary(0)),
        _release("ctx"),
        covers=("context.Context.__del__",),
        kind="warn",
        releases=True,
    )
    add(
        "context.Context.__del__[created]",
        lambda e: _ns(dev=e.device(), ctx=e.context.Context.create(0)),
        _release("ctx"),
        covers=("context.Context.__del__",),
        kind="warn",
        releases=True,
    )
    add("context.call_in", dev_only, _call_in, probe=_ctx_probe)
    add("context.cleanup_in", dev_only, _cleanup_in, kind="warn", probe=_ctx_probe)

    # --- resources: devices ----------------------------------------------------------------
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

    # --- resources: streams ----------------------------------------------------------------
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

    # --- resources: events -----------------------------------------------------------------
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

    # --- resources: modules and launches ---------------------------------------------------
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

    # --- graphs: definitions -----------------------------------------------------------------
    G = "graphs."
    gk: dict[str, Any] = {"probe": _probe_graph, "state": _graph_state}
    add(G + "GraphDefinition()", dev_only, lambda e, s: e.own(e.graphs.GraphDefinition(s.dev)))
    add(
        G + "GraphDefinition()[no device]",
        nothing,
        lambda e, s: e.own(e.graphs.GraphDefinition()),
        covers=(G + "GraphDefinition()",),
    )
    add(G + "GraphDefinition.nodes", with_graph, lambda e, s: s.g.nodes, **gk)
    add(G + "GraphDefinition.edges", with_graph, lambda e, s: s.g.edges, **gk)
    add(G + "GraphDefinition.connect", with_graph, lambda e, s: s.g.connect((s.a, s.c), (s.b, s.c)), **gk)

    def connected_graph(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.g.connect((s.a, s.c))
        return s

    add(G + "GraphDefinition.disconnect", connected_graph, lambda e, s: s.g.disconnect((s.a, s.b), (s.a, s.c)), **gk)
    builders: list[tuple[str, Callable[[Any, Any], Any]]] = [
        ("empty", lambda t, s: t.empty(*([s.c] if t is s.g else []))),
        ("join", lambda t, s: t.join(s.a, s.c) if t is s.g else t.join(s.a)),
        ("memset", lambda t, s: t.memset(s.buf, 1)),
        ("memcpy", lambda t, s: t.memcpy(s.buf, s.buf2)),
        ("launch", lambda t, s: t.launch(s.config, s.kernel, s.buf, 9, SIZE)),
        ("callback", lambda t, s: t.callback(lambda: None)),
        ("record", lambda t, s: t.record(s.event)),
        ("wait", lambda t, s: t.wait(s.event)),
        ("allocate", lambda t, s: t.allocate(SIZE)),
        ("deallocate", lambda t, s: t.deallocate(s.alloc)),
        ("embed", lambda t, s: t.embed(s.child)),
    ]

    def graph_with_child(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.child = env.own(env.graphs.GraphDefinition(s.dev))
        s.child.memset(s.buf2, 2)
        return s

    def graph_with_alloc(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.alloc = s.c.allocate(SIZE)
        return s

    def on(target: str, build: Callable[[Any, Any], Any]) -> Callable[[Env, Any], Any]:
        return lambda e, s: build(getattr(s, target), s)

    for method, build in builders:
        setup = {"embed": graph_with_child, "deallocate": graph_with_alloc}.get(method, with_graph)
        add(f"{G}GraphDefinition.{method}", setup, on("g", build), **gk)
        add(f"{G}Node.{method}", setup, on("b", build), **gk)
    add(
        G + "GraphDefinition.memcpy[pinned]",
        with_graph,
        lambda e, s: s.g.memcpy(s.pinned, s.buf, deps=(s.a, s.c)),
        covers=(G + "GraphDefinition.memcpy",),
        **gk,
    )
    add(G + "GraphDefinition.clone", with_graph, lambda e, s: e.own(s.g.clone()), **gk)
    add(G + "GraphDefinition.instantiate", with_graph, lambda e, s: e.own(s.g.instantiate()), **gk)
    add(
        G + "GraphDefinition.close",
        with_graph,
        lambda e, s: s.g.close(),
        releases=True,
        probe=lambda e, s: (s.g.close(), _stream_probe(e, s)),
    )
    add(G + "GraphDefinition.__exit__", with_graph, lambda e, s: s.g.__exit__(None, None, None), releases=True)

    def detached_graph(env: Env) -> SimpleNamespace:
        s = with_stream(env)
        s.g = env.graphs.GraphDefinition(s.dev)
        s.g.empty()
        return s

    add(G + "GraphDefinition.__del__", detached_graph, _release("g"), kind="warn", releases=True)

    # --- graphs: nodes and edges -----------------------------------------------------------
    def kernel_graph(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.k = s.a.launch(s.config, s.kernel, s.buf, 1, SIZE)
        return s

    add(G + "Node.set_args", kernel_graph, lambda e, s: s.k.set_args(s.buf2, 2, SIZE), **gk)
    add(G + "Node.set_params", kernel_graph, lambda e, s: s.k.set_params(config=s.config, args=(s.buf2, 3, 8)), **gk)
    add(G + "Node.destroy", with_graph, lambda e, s: s.b.destroy(), **gk)
    add(G + "Node.pred", with_graph, lambda e, s: set(s.b.pred), **gk)
    add(G + "Node.succ", with_graph, lambda e, s: len(s.a.succ), **gk)

    def set_pred(e: Env, s: Any) -> None:
        s.b.pred = {s.c}

    def set_succ(e: Env, s: Any) -> None:
        s.a.succ = {s.c}

    add(G + "Node.pred[set]", with_graph, set_pred, covers=(G + "Node.pred",), **gk)
    add(G + "Node.succ[set]", with_graph, set_succ, covers=(G + "Node.succ",), **gk)
    edge_ops: list[tuple[str, Callable[[Env, Any], Any]]] = [
        ("add", lambda e, s: s.c.pred.add(s.a)),
        ("discard", lambda e, s: s.b.pred.discard(s.a)),
        ("remove", lambda e, s: s.b.pred.remove(s.a)),
        ("update", lambda e, s: s.c.pred.update([s.a, s.b])),
        ("difference_update", lambda e, s: s.a.succ.difference_update([s.b])),
        ("clear", lambda e, s: s.a.succ.clear()),
        ("pop", lambda e, s: s.a.succ.pop()),
        ("isdisjoint", lambda e, s: s.a.succ.isdisjoint([s.c])),
        ("__ixor__", lambda e, s: s.a.succ.__ixor__([s.b, s.c])),
    ]
    for method, fn in edge_ops:
        add(f"{G}EdgeView.{method}", with_graph, fn, **gk)

    # --- graphs: executable graphs -------------------------------------------------------
    ek: dict[str, Any] = {"probe": lambda e, s: (s.exec.launch(s.stream), s.stream.sync())}
    add(G + "Graph.launch", with_exec, lambda e, s: s.exec.launch(s.stream), **ek)
    add(G + "Graph.upload", with_exec, lambda e, s: s.exec.upload(s.stream), **ek)
    add(G + "Graph.update", with_exec, lambda e, s: s.exec.update(s.g2), **ek)
    add(
        G + "Graph.close",
        with_exec,
        lambda e, s: s.exec.close(),
        releases=True,
        probe=lambda e, s: (s.exec.close(), _stream_probe(e, s)),
    )
    add(G + "Graph.__exit__", with_exec, lambda e, s: s.exec.__exit__(None, None, None), releases=True)

    def detached_exec(env: Env) -> SimpleNamespace:
        s = with_graph(env)
        s.exec = s.g.instantiate()
        return s

    add(G + "Graph.__del__", detached_exec, _release("exec"), kind="warn", releases=True)

    # --- resources: memory resources (registry_memory) ---------------------------------------
    from cuguard.sweeps._failpoints import registry_memory

    out.extend(registry_memory.vmm_scenarios())
    out.extend(registry_memory.pool_scenarios())
    out.extend(registry_memory.view_scenarios())

    # --- graphs: stream capture and the newer graph operations (registry_graphs) --------------
    from cuguard.sweeps._failpoints import registry_graphs

    out.extend(registry_graphs.capture_scenarios())
    out.extend(registry_graphs.conditional_scenarios())
    out.extend(registry_graphs.update_scenarios())
    return out


_SCENARIOS: list[Scenario] = []


def scenarios() -> list[Scenario]:
    """Every scenario of the registry (built on first use)."""
    if not _SCENARIOS:
        _SCENARIOS.extend(_build())
    return list(_SCENARIOS)


_NO_CALL_RESOURCE = "returns what the object recorded at creation"

#: Public callables that make no driver call, with the reason. Keys as in ``Scenario.covers``.
NO_DRIVER_CALL: dict[str, str] = {
    # errors: helpers and the seam; they never call the driver through the seam
    **{
        f"errors.{name}": "status helper or seam plumbing: makes no driver call through the seam"
        for name in (
            "active_driver",
            "add_failure_note",
            "call_unraisable",
            "check",
            "default_driver_choice",
            "driver",
            "driver_token",
            "error_description",
            "error_name",
            "format_handle",
            "install_driver",
            "internal_error",
            "is_sticky",
            "raise_status",
            "real_driver",
            "report",
            "report_error",
            "report_warning",
            "use_driver",
            "DriverSeam",
            "DriverSeam()",
            "RESTORE_CONTEXT",
            "DRIVER_VARIABLE",
            "driver_state",
            "forget_driver",
            "on_driver_change",
            "refuse_construction",
            "enter_driver_callback",
            "exit_driver_callback",
            "in_driver_callback",
            "installed_driver",
            "first_sticky_fault",
            "forget_sticky_fault",
            "attribute_faults",
            "attributing",
            "wrong_kind",
        )
    },
    "errors.StickyCUDAError": "an exception class: no driver call",
    "errors.Unique()": "ownership base class (no copies, no pickles): no driver call",
    "errors.defer": "queues work for cuguard's release thread; makes no driver call itself",
    "errors.deferred_count": "reads a counter of the release thread: no driver call",
    "errors.flush_deferred": "waits for cuguard's release thread; makes no driver call itself",
    "errors.deferring_lock": "makes a lock for cuguard's own bookkeeping: no driver call",
    "errors.collection_deferred": "reads a thread-local counter: no driver call",
    **{
        f"errors.{name}": "checks an integer argument or a status code against a table: no driver call"
        for name in ("int_argument", "is_integer", "out_of_range", "status_argument", "is_driver_status")
    },
    **{
        f"errors.{name}": "a constant (a C type's limit): no driver call"
        for name in ("INT_LIMIT", "SIZE_LIMIT", "UINT_LIMIT")
    },
    "context.Context()": "refused with TypeError: contexts come from the class methods",
    "context.Context.wrap": "wraps a handle; no driver call",
    "context.Context.handle": _NO_CALL_RESOURCE,
    "context.Context.is_primary": _NO_CALL_RESOURCE,
    "context.Context.owned": _NO_CALL_RESOURCE,
    "context.Context.closed": _NO_CALL_RESOURCE,
    "context.Context.stale": "compares driver tokens",
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
    "graphs.flush_deferred": "waits for cuguard's release thread; makes no driver call itself",
    "testing.run_misuse_sweep": "runs the misuse sweep (B6) on drivers of its own; swept by running it, not here",
    "testing.MisuseResult": "a record of what the misuse sweep found: no driver call",
    "graphs.pending_payloads": "counts registered payloads: no driver call",
    "graphs.Graph()": "refused with TypeError: use GraphDefinition.instantiate()",
    "graphs.Node()": "refused with TypeError: nodes come from builders",
    "graphs.EdgeView()": "made by Node.pred / Node.succ",
    "graphs.GraphDefinition.find_node": "looks up the clone's node table: no driver call",
    "graphs.GraphDefinition.handle": _NO_CALL_RESOURCE,
    "graphs.GraphDefinition.closed": _NO_CALL_RESOURCE,
    "graphs.GraphDefinition.context": _NO_CALL_RESOURCE,
    "graphs.Graph.handle": _NO_CALL_RESOURCE,
    "graphs.Graph.closed": _NO_CALL_RESOURCE,
    "graphs.Node.graph": _NO_CALL_RESOURCE,
    "graphs.Node.type": _NO_CALL_RESOURCE,
    "graphs.Node.handle": _NO_CALL_RESOURCE,
    "graphs.Node.closed": _NO_CALL_RESOURCE,
    "graphs.Node.ptr": _NO_CALL_RESOURCE,
    "graphs.Node.params": _NO_CALL_RESOURCE,
}
for _attr in ("()", ".index", ".kind", ".name", ".offset", ".size", ".type"):
    NO_DRIVER_CALL[f"resources.KernelParameter{_attr}"] = "a record of one kernel parameter: no driver call"
for _cls in ("Stream", "Event", "Buffer", "PinnedBuffer", "Module"):
    for _attr in ("handle", "context", "closed"):
        NO_DRIVER_CALL[f"resources.{_cls}.{_attr}"] = _NO_CALL_RESOURCE
    NO_DRIVER_CALL[f"resources.{_cls}()"] = "refused with TypeError naming the factory (O1)"
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
    NO_DRIVER_CALL[f"resources.{_key}"] = _NO_CALL_RESOURCE


def _merge_memory() -> None:
    from cuguard.sweeps._failpoints import registry_memory

    NO_DRIVER_CALL.update(registry_memory.NO_DRIVER_CALL_MEMORY)
    from cuguard.sweeps._failpoints import registry_graphs

    NO_DRIVER_CALL.update(registry_graphs.NO_DRIVER_CALL_GRAPHS)


_merge_memory()
