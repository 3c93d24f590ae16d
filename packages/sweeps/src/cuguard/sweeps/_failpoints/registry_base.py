"""What the sweep's scenarios are made of: :class:`Scenario`, :class:`Env`, the shared set-ups and probes.

A :class:`Scenario` builds what the operation needs (its *set-up*), then makes
exactly one public call (its *operation*). The sweep records the driver calls
of the operation and fails each of them in turn (see
:mod:`cuguard.sweeps._failpoints.runner`). The scenarios themselves are
declared per layer (``registry_context``, ``registry_resources``,
``registry_memory``, ``registry_graphs``; the errors layer makes no driver
call: ``registry_errors``) and collected by :mod:`.registry`.
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

__all__ = ["KERNELS_CU", "KERNELS_PTX", "LAYERS", "SIZE", "Env", "Scenario", "adder"]

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
    """A Device whose primary context is not retained yet, whose properties are read afresh, and
    whose default memory resource is made afresh.

    A driver that serves the whole sweep (a GPU) keeps one Device per ordinal, and with it the
    properties it read and the default memory resource it made (which owns nothing): they are
    forgotten here, so that every case reads them as the first did.
    """
    dev = env.resources.Device(0)
    dev._properties = None  # the cache Device.properties fills on first use
    if dev._memory_resource is None:
        dev._default_mr = None  # made by the first read of Device.memory_resource
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


def adder(out: list[Scenario]) -> Callable[..., None]:
    """``add(name, setup, op, covers=None, **fields)``: append a :class:`Scenario` to ``out``.

    The layer is the name's first part (``resources.Stream.sync`` is a scenario of ``resources``);
    ``covers`` defaults to the name itself.
    """

    def add(
        name: str,
        setup: Callable[[Env], Any],
        op: Callable[[Env, Any], Any],
        covers: tuple[str, ...] | None = None,
        **kw: Any,
    ) -> None:
        layer = name.split(".", 1)[0]
        out.append(Scenario(name, layer, covers if covers is not None else (name,), setup, op, **kw))

    return add
