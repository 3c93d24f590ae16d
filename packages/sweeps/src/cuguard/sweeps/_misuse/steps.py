"""The step kinds of the misuse sweep, and the set-up and tear-down of an example.

Each step is one function of a :class:`~cuguard.sweeps._misuse.session.Session`:

- ``call``: any public operation with arguments of every kind (good ones, other
  cuguard objects, foreign objects, ``None``, numbers, closed objects, objects
  of another device, context or driver);
- ``fault``: the same under a fault plan (:func:`~cuguard.testing.inject`,
  :func:`~cuguard.testing.restore_fault`, :func:`~cuguard.testing.sticky`,
  :func:`~cuguard.testing.deinitialized`);
- ``close``, ``drop`` (drop the last references, collect or not), ``cycle`` (a
  reference cycle, with a created context and resources of it for O6);
- ``copy`` (copy, deepcopy, pickle: O1) and ``construct`` (direct construction: O1);
- ``switch`` (install a new simulated driver or an earlier one: O3);
- ``foreign_current`` (another library changes the current context);
- ``host_callback`` and ``graph_callback`` (callbacks that do nothing, raise,
  drop the last references to objects, or, on the simulator, call cuguard: O5, W6);
- ``thread`` (an operation on a fresh thread: G2 per thread, O2);
- ``collect`` (a garbage collection).
"""

from __future__ import annotations

import copy
import functools
import gc
import pickle
import threading
import weakref
from collections.abc import Callable
from typing import Any

from cuguard.resources.lowlevel import waiting_count
from cuguard.sweeps._misuse import captures
from cuguard.sweeps._misuse.callbacks import graph_callback, host_callback, pick_entries
from cuguard.sweeps._misuse.choices import coin, pick
from cuguard.sweeps._misuse.model import SIZE, UNIQUE_KINDS, Entry, ForeignStream
from cuguard.sweeps._misuse.session import Session
from cuguard.testing import deinitialized, inject, restore_fault, sticky
from cuguard.testing.lowlevel import known_function

__all__ = ["STEPS", "drop", "setup", "teardown", "weighted"]

_WEIGHTS = {
    "call": 14,
    "fault": 5,
    "close": 2,
    "drop": 2,
    "copy": 1,
    "construct": 1,
    "cycle": 1,
    "switch": 1,
    "foreign_current": 1,
    "host_callback": 2,
    "graph_callback": 1,
    "thread": 2,
    "collect": 1,
    "capture": 4,
    "second_thread": 4,
}

#: Driver functions cuguard calls, failed by the ``fault`` step.
FAULT_FUNCTIONS = tuple(
    name
    for name in (
        "cuInit",
        "cuDeviceGet",
        "cuDeviceGetCount",
        "cuDeviceGetName",
        "cuDeviceGetAttribute",
        "cuDevicePrimaryCtxRetain",
        "cuCtxCreate",
        "cuCtxPopCurrent",
        "cuCtxDestroy",
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuCtxSynchronize",
        "cuCtxGetDevice",
        "cuStreamCreate",
        "cuStreamCreateWithPriority",
        "cuStreamDestroy",
        "cuStreamSynchronize",
        "cuStreamQuery",
        "cuStreamWaitEvent",
        "cuStreamGetCtx",
        "cuLaunchHostFunc",
        "cuEventCreate",
        "cuEventRecord",
        "cuEventSynchronize",
        "cuEventQuery",
        "cuEventElapsedTime",
        "cuEventDestroy",
        "cuMemAlloc",
        "cuMemAllocAsync",
        "cuMemFree",
        "cuMemFreeAsync",
        "cuMemHostAlloc",
        "cuMemFreeHost",
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyDtoD",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemcpyDtoDAsync",
        "cuMemsetD8",
        "cuMemsetD8Async",
        "cuModuleLoadData",
        "cuModuleUnload",
        "cuModuleGetFunction",
        "cuLaunchKernel",
        "cuGraphCreate",
        "cuGraphDestroy",
        "cuGraphAddEmptyNode",
        "cuGraphAddKernelNode",
        "cuGraphAddMemsetNode",
        "cuGraphAddMemcpyNode",
        "cuGraphAddHostNode",
        "cuGraphAddEventRecordNode",
        "cuGraphAddEventWaitNode",
        "cuGraphAddMemAllocNode",
        "cuGraphAddMemFreeNode",
        "cuGraphAddChildGraphNode",
        "cuGraphAddDependencies",
        "cuGraphRemoveDependencies",
        "cuGraphDestroyNode",
        "cuGraphGetNodes",
        "cuGraphGetEdges",
        "cuGraphNodeGetDependencies",
        "cuGraphNodeGetDependentNodes",
        "cuGraphKernelNodeSetParams",
        "cuGraphClone",
        "cuGraphNodeFindInClone",
        "cuGraphInstantiate",
        "cuGraphExecDestroy",
        "cuGraphLaunch",
        "cuGraphUpload",
        "cuGraphExecUpdate",
        "cuUserObjectCreate",
        "cuUserObjectRelease",
        "cuGraphRetainUserObject",
        "cuGraphReleaseUserObject",
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuStreamIsCapturing",
        "cuStreamGetCaptureInfo",
        "cuStreamUpdateCaptureDependencies",
    )
    if known_function(name)
)
FAULT_CODES = (1, 2, 201, 400, 700, 999)

_CONSTRUCT = {
    "Context": ("context", "Context.primary"),
    "Stream": ("resources", "create_stream"),
    "Event": ("resources", "create_event"),
    "Buffer": ("resources", "allocate"),
    "PinnedBuffer": ("resources", "allocate_pinned"),
    "Module": ("resources", "load_module"),
    "Kernel": ("resources", "get_kernel"),
    "Resource": ("resources", "Device"),
    "Node": ("graphs", "GraphDefinition"),
    "Graph": ("graphs", "instantiate"),
    "GraphCondition": ("graphs", "create_condition"),
    "ConditionalBody": ("graphs", "conditional builders"),
}


def weighted(driver: str) -> list[str]:
    """The step kinds, each repeated by its weight."""
    out: list[str] = []
    for name, weight in _WEIGHTS.items():
        out.extend([name] * weight)
    return out


# --- set-up and tear-down --------------------------------------------------------------------------


def _make(s: Session, desc: str, op: str, fn: Callable[[], Any]) -> Any:
    outcome = s.perform(op, desc, fn)
    if outcome.exc is not None or outcome.result is None:
        return None
    entry = s.model.add(outcome.result, base=True)
    if entry is not None:
        s.trace[-1] += f"  -> {entry.label}"
    return outcome.result


def foreign_streams(s: Session, device: Any) -> None:
    """Streams "another library" made in ``device``'s primary context (accepted as streams, E3).

    A blocking and a non-blocking one: both are captured (the capture step), and a capture on a
    blocking stream makes the legacy stream's use refused (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
    """
    ctx = device._context
    if ctx is None or ctx._closed:
        return
    for flags in (0, 1):  # CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING
        handle = s.raw_stream(ctx, flags)
        if handle is not None:
            fs = ForeignStream(handle, s.model.label("ForeignStream"))
            entry = Entry(fs, "ForeignStream", s.model.current, fs.label, base=True)
            s.model.pool.append(entry)
            kind = "non-blocking" if flags else "blocking"
            s.note(f"{fs.label} = ForeignStream(a raw {kind} stream of {device!r})")


def setup(s: Session) -> None:
    """A few objects of every kind, made through checked calls."""
    s.start()
    R, C, G = s.L.resources, s.L.context, s.L.graphs
    devices = []
    for ordinal in (0, 1):
        dev = _make(s, f"Device({ordinal})", "resources.Device()", functools.partial(R.Device, ordinal))
        if dev is not None:
            devices.append(dev)
            _make(
                s, f"Device({ordinal}).context", "resources.Device.context", functools.partial(getattr, dev, "context")
            )
    if not devices:
        return
    dev0 = devices[0]
    s0 = _make(s, "dev0.create_stream()", "resources.Device.create_stream", dev0.create_stream)
    if len(devices) > 1:
        _make(s, "dev1.create_stream()", "resources.Device.create_stream", devices[1].create_stream)
    _make(s, "dev0.create_event()", "resources.Device.create_event", dev0.create_event)
    _make(s, "dev0.allocate(64)", "resources.Device.allocate", lambda: dev0.allocate(SIZE))
    if s0 is not None:
        _make(s, "dev0.allocate(64, stream=s0)", "resources.Device.allocate", lambda: dev0.allocate(SIZE, s0))
    _make(s, "dev0.allocate_pinned(64)", "resources.Device.allocate_pinned", lambda: dev0.allocate_pinned(SIZE))
    memory_resources(s, dev0, s0)
    mod = _make(s, "dev0.load_module(IMAGE)", "resources.Device.load_module", lambda: dev0.load_module(s.image()))
    if mod is not None:
        _make(s, "mod0.get_kernel('fill_u8')", "resources.Module.get_kernel", lambda: mod.get_kernel("fill_u8"))
    _make(s, "LaunchConfig(grid=1, block=64)", "resources.LaunchConfig()", lambda: R.LaunchConfig(grid=1, block=SIZE))
    ctx = _make(s, "Context.create(0)", "context.Context.create", lambda: C.Context.create(0))
    if ctx is not None:
        _make(s, "Module.load(ctx, IMAGE)", "resources.Module.load", lambda: R.Module.load(ctx, s.image()))
    _make(s, "GraphDefinition()", "graphs.GraphDefinition()", G.GraphDefinition)
    g = _make(s, "GraphDefinition(dev0)", "graphs.GraphDefinition()", lambda: G.GraphDefinition(dev0))
    if g is not None:
        n0 = _make(s, "g0.empty()", "graphs.GraphDefinition.empty", g.empty)
        if n0 is not None:
            _make(s, "n0.empty()", "graphs.Node.empty", n0.empty)
    builders(s, dev0)
    foreign_streams(s, dev0)
    for _ in range(s.ch.integer(0, 2)):  # captures in progress from the start (any mode, stream, thread)
        captures.begin(s, pick(s.ch, ("main", "second")))


def builders(s: Session, dev0: Any) -> None:
    """A graph builder (relaxed mode) on a stream of its own, capturing."""
    G = s.L.graphs
    stream = _make(s, "dev0.create_stream()", "resources.Device.create_stream", dev0.create_stream)
    if stream is None:
        return
    builder = _make(
        s,
        "GraphBuilder(stream, mode='relaxed')",
        "graphs.GraphBuilder()",
        lambda: G.GraphBuilder(stream, mode="relaxed"),
    )
    if builder is not None:
        s.perform("graphs.GraphBuilder.begin_building", "gb0.begin_building()", builder.begin_building)


def memory_resources(s: Session, dev0: Any, s0: Any) -> None:
    """One memory resource of each kind on device 0, with a buffer from each."""
    R = s.L.resources
    makers: tuple[tuple[str, str, Callable[[], Any]], ...] = (
        ("DeviceMemoryResource(dev0)", "resources.DeviceMemoryResource()", lambda: R.DeviceMemoryResource(dev0)),
        (
            "DeviceMemoryResource(dev0, options)",
            "resources.DeviceMemoryResource()",
            lambda: R.DeviceMemoryResource(dev0, R.DeviceMemoryResourceOptions(max_size=1 << 24)),
        ),
        ("PinnedMemoryResource(dev0)", "resources.PinnedMemoryResource()", lambda: R.PinnedMemoryResource(dev0)),
        ("ManagedMemoryResource(dev0)", "resources.ManagedMemoryResource()", lambda: R.ManagedMemoryResource(dev0)),
        ("VirtualMemoryResource(dev0)", "resources.VirtualMemoryResource()", lambda: R.VirtualMemoryResource(dev0)),
        (
            "LegacyPinnedMemoryResource(dev0)",
            "resources.LegacyPinnedMemoryResource()",
            lambda: R.LegacyPinnedMemoryResource(dev0),
        ),
    )
    for label, op, make in makers:
        mr = _make(s, label, op, make)
        if mr is not None:
            stream = s0 if s0 is not None and coin(s.ch, 50) else None
            _make(s, f"{label}.allocate(64)", f"{op}.allocate", functools.partial(mr.allocate, SIZE, stream))


def teardown(s: Session) -> None:
    """Drop everything (while its driver is installed), collect, and check what is left behind."""
    s.steps += 1
    s.quiesce()
    pool = s.model.pool

    def drop_all() -> None:
        pool.clear()
        gc.collect()

    s.perform("teardown", "del everything; gc.collect()", drop_all, warn_rule="O6")
    gc.collect()
    s.settle()
    if captures.end_foreign_captures(s):  # what cuguard deferred until they end is released now
        gc.collect()
        s.settle()
    slot = s.slot
    if slot.sim is not None and not slot.uninstalled and not s.interrupted:
        left = []
        # Releases cuguard holds back because a capture it could not end (refused under a fault, and
        # reported then) still runs in the driver: freeing them would break that capture (G6 over W5).
        held_back = bool(waiting_count())
        # A pool one of whose allocations was leaked after a refused free (raised or warned then)
        # is leaked with it, never destroyed under it (W5).
        kept_pools = {slot.sim.allocation_pool(handle) for handle in slot.failed_releases} - {None}
        for obj in slot.sim.live_objects():
            if obj.kind == "memory_pool" and obj.handle in kept_pools:
                continue
            if held_back and obj.kind in _MEMORY_KINDS:
                continue
            if obj.kind == "context" and obj.call == "cuDevicePrimaryCtxRetain" and obj.refcount == 1:
                continue  # a device's primary context, held for good (O2)
            if obj.handle in slot.failed_releases or obj.handle in slot.raw_streams:
                continue  # leaked on purpose after a failed release (W5), or the sweep's own
            if obj.context is not None and obj.context in slot.failed_releases:
                continue  # lives in a context whose destroy failed: leaked with it, and that leak was raised
            holder = _holder(obj.handle)
            if slot.failed_releases and (obj.kind == "user_object" or "still alive" in holder):
                continue  # kept by something leaked on purpose (a graph whose destroy failed keeps its payload)
            left.append(f"{obj} ({holder})")
        if left:
            s.flag("W5", "teardown", "left behind after every object was dropped: " + "; ".join(left))
    elif slot.sim is None:
        for handle in slot.raw_streams:
            slot.raw.cuStreamDestroy(handle)


def _holder(handle: int) -> str:
    """Whether a cuguard object of ``handle`` is still alive (and what holds it), or was collected unreleased."""
    for obj in gc.get_objects():
        if type(obj).__name__ in _OWNER_CLASSES and getattr(obj, "_handle", None) is not None:
            try:
                if int(obj._handle) != handle:
                    continue
            except (TypeError, ValueError):
                continue
            holders = [type(r).__name__ for r in gc.get_referrers(obj) if not isinstance(r, list | dict)]
            return f"its {type(obj).__name__} is still alive, held by {holders or 'a list or dict'}"
    return "no Python object has it any more: collected without being released"


_MEMORY_KINDS = frozenset(
    {"device_memory", "host_memory", "memory_pool", "physical_memory", "address_range", "memory_mapping"}
)
_OWNER_CLASSES = frozenset({"Stream", "Event", "Buffer", "PinnedBuffer", "Module", "GraphDefinition", "Graph"})


# --- steps ---------------------------------------------------------------------------------------


def call(s: Session) -> None:
    go = s.prepare()
    if go is not None:
        go()


def fault(s: Session) -> None:
    kind = pick(s.ch, ("inject", "inject", "inject", "restore", "sticky", "deinitialized"))
    make: Callable[[], Any]
    if kind == "inject":
        name = pick(s.ch, FAULT_FUNCTIONS)
        code = pick(s.ch, FAULT_CODES)
        nth = pick(s.ch, (1, 1, 2))
        desc = f"inject({name!r}, {code}, nth={nth})"

        def make() -> Any:
            return inject(name, code, nth=nth)

    elif kind == "restore":
        nth = pick(s.ch, (1, 1, 2))
        desc = f"restore_fault(201, nth={nth})"

        def make() -> Any:
            return restore_fault(201, nth=nth)

    elif kind == "sticky":
        desc = "sticky(700)"

        def make() -> Any:
            return sticky(700)

    else:
        desc = "deinitialized()"
        make = deinitialized
    go = s.prepare()
    if go is not None:
        go(fault=make, fault_desc=desc)


#: The layer of each kind of object a close step closes (operation names start with it).
_HOME = {
    "Stream": "resources",
    "Event": "resources",
    "Buffer": "resources",
    "PinnedBuffer": "resources",
    "Module": "resources",
    "Context": "context",
    "GraphDefinition": "graphs",
    "Graph": "graphs",
    "GraphBuilder": "graphs",
}


def close_call(s: Session) -> Callable[..., Any] | None:
    """A close (or ``__exit__``, or ``destroy``) of a pooled object, ready to perform (``None``: nothing to close)."""
    kinds = (
        "Stream",
        "Event",
        "Buffer",
        "PinnedBuffer",
        "Module",
        "Context",
        "GraphDefinition",
        "Graph",
        "Node",
        "GraphBuilder",
    )
    entries = [e for e in s.model.pool if e.kind in kinds]
    if not entries:
        return None
    entry = pick(s.ch, entries)
    how = pick(s.ch, ("close", "close", "__exit__"))
    name = "graphs.Node.destroy" if entry.kind == "Node" else f"{_HOME[entry.kind]}.{entry.kind}.{how}"
    return s.prepare(s.by_name[name], entry)


def close(s: Session) -> None:
    go = close_call(s)
    if go is not None:
        go()


def drop(s: Session, count: int | None = None, runner: Callable[[Callable[[], Any]], Any] | None = None) -> None:
    """Drop the last references to some objects, then collect now or later (``runner``: on another thread)."""
    victims = pick_entries(s, count if count is not None else s.ch.integer(1, 3))
    if not victims:
        return
    labels = ", ".join(e.label for e in victims)
    now = count is not None or coin(s.ch, 60)
    s.quiesce()
    pool = s.model.pool

    def release() -> None:
        for entry in victims:
            if entry in pool:
                pool.remove(entry)
        victims.clear()
        if now:
            gc.collect()

    desc = f"del {labels}" + ("; gc.collect()" if now else "")
    if runner is None:
        s.perform("del", desc, release, warn_rule="O6")
    else:
        runner(lambda: s.perform("del", desc, release, warn_rule="O6"))


def collect(s: Session) -> None:
    s.perform("gc.collect", "gc.collect()", gc.collect, warn_rule="O6")


def copy_step(s: Session) -> None:
    """O1: copies, deep copies and pickles of an owner are refused, naming the class (Device: the same object)."""
    entries = [e for e in s.model.pool if e.kind in UNIQUE_KINDS or e.kind == "Device"]
    if not entries:
        return
    entry = pick(s.ch, entries)
    hows: tuple[tuple[str, Callable[[Any], Any]], ...] = (
        ("copy.copy", copy.copy),
        ("copy.deepcopy", copy.deepcopy),
        ("pickle.dumps", pickle.dumps),
    )
    how_name, how = pick(s.ch, hows)
    obj = entry.obj
    cls = type(obj).__name__
    if entry.kind == "Device":
        if how_name == "pickle.dumps":
            R = s.L.resources
            outcome = s.perform(
                "resources.Device.__reduce__",
                f"pickle.loads(pickle.dumps({entry.label}))",
                lambda: pickle.loads(pickle.dumps(obj)),
            )
            if outcome.exc is None:
                expected = R.Device(obj.ordinal)
                if outcome.result is not expected:
                    s.flag(
                        "O2",
                        "resources.Device.__reduce__",
                        "an unpickled Device is not Device(ordinal) of the driver installed",
                    )
            return
        outcome = s.perform("resources.Device.__copy__", f"{how_name}({entry.label})", lambda: how(obj))
        if outcome.exc is None and outcome.result is not obj:
            s.flag("O2", "resources.Device.__copy__", f"{how_name} of a Device returned another object")
        return
    op = f"{type(obj).__module__.split('.')[1]}.{cls}.{how_name}"  # cuguard.<layer>.<module>
    outcome = s.perform(op, f"{how_name}({entry.label})", lambda: how(obj))
    if outcome.exc is None:
        s.flag("O1", op, f"{how_name} of a {cls} succeeded: a second owner of its handle")
    elif not isinstance(outcome.exc, TypeError) or cls not in str(outcome.exc):
        s.flag("O1", op, f"refused without a TypeError naming {cls}: {outcome.exc!r}")
    if outcome.log:
        s.flag("O1", op, f"a refused copy called the driver: {[c.name for c in outcome.log]}")


def construct(s: Session) -> None:
    """O1: direct construction of factory-made classes is refused, naming the factory."""
    name = pick(s.ch, tuple(_CONSTRUCT))
    layer, hint = _CONSTRUCT[name]
    cls = getattr(getattr(s.L, layer), name)
    op = f"{layer}.{name}()"
    outcome = s.perform(op, f"{name}()", cls)
    if outcome.exc is None:
        s.flag("O1", op, f"{name}() constructed an object directly")
    elif not isinstance(outcome.exc, TypeError) or hint not in str(outcome.exc):
        s.flag("O1", op, f"refused without a TypeError naming the factory ({hint}): {outcome.exc!r}")


def cycle(s: Session) -> None:
    """A reference cycle: a created context with a module and graph of it, and some pooled objects (O6)."""
    R, C, G = s.L.resources, s.L.context, s.L.graphs
    members: list[Entry] = []
    ctx = None
    mod = None
    if coin(s.ch, 70):
        outcome = s.perform("context.Context.create", "ctx = Context.create(0)", lambda: C.Context.create(0))
        ctx = outcome.result
        if ctx is not None:
            s.pool_result(ctx)
            e = s.model.find(ctx)
            if e is not None:
                members.append(e)
            outcome = s.perform(
                "resources.Module.load", "Module.load(ctx, IMAGE)", lambda: R.Module.load(ctx, s.image())
            )
            mod = outcome.result
            if mod is not None:
                s.pool_result(mod)
                e = s.model.find(mod)
                if e is not None:
                    members.append(e)
            if coin(s.ch, 50):
                outcome = s.perform("graphs.GraphDefinition()", "GraphDefinition(ctx)", lambda: G.GraphDefinition(ctx))
                if outcome.result is not None:
                    s.pool_result(outcome.result)
                    e = s.model.find(outcome.result)
                    if e is not None:
                        members.append(e)
    for e in pick_entries(s, s.ch.integer(0, 3)):
        if e not in members:
            members.append(e)
    if not members:
        return
    check = ctx is not None and mod is not None and all(s.model.unusable(e.obj) is None for e in members)
    ctx_handle = 0 if ctx is None else int(ctx._int)
    mod_handle = 0 if mod is None else int(mod._handle)
    refs = [weakref.ref(o) for o in (ctx, mod) if o is not None]
    ctx = mod = None  # the cycle must hold the last references
    labels = ", ".join(e.label for e in members)
    s.quiesce()
    pool = s.model.pool

    def collect_cycle() -> None:
        ring: list[Any] = [e.obj for e in members]
        ring.append(ring)
        for e in members:
            if e in pool:
                pool.remove(e)
        members.clear()
        del ring
        gc.collect()

    outcome = s.perform(
        "gc.collect[cycle]", f"cycle = [{labels}, cycle]; del cycle; gc.collect()", collect_cycle, warn_rule="O6"
    )
    sim = s.slot.sim
    if check and sim is not None and outcome.exc is None:
        names = [(c.name, int(c.args[0]) if c.args else 0) for c in outcome.log]
        unload = [i for i, (n, h) in enumerate(names) if n == "cuModuleUnload" and h == mod_handle]
        destroy = [i for i, (n, h) in enumerate(names) if n == "cuCtxDestroy" and h == ctx_handle]
        if destroy and unload and unload[0] > destroy[0]:
            s.flag("O6", "gc.collect[cycle]", "a context was destroyed before its module was unloaded")
        live = {o.handle for o in sim.live_objects()}
        collected = all(ref() is None for ref in refs)
        if collected and (ctx_handle in live or mod_handle in live):
            s.flag("O6", "gc.collect[cycle]", "a context or its module in a collected cycle was not released")


def switch(s: Session) -> None:
    """Install another driver (a new simulated driver, or one installed before): O3."""
    others = [slot for slot in s.slots if slot.index != s.model.current]
    if len(s.slots) < 3 and (not others or coin(s.ch, 50)):
        target = s.new_slot(real=False)
        what = f"install_driver({target.name}, new)"
    else:
        target = pick(s.ch, others)
        what = f"install_driver({target.name}, again)"
    s.quiesce()
    s.settle()

    def install() -> None:
        s.install(target)

    s.perform("errors.install_driver", what, install, sets_context=True)
    if not any(e.kind == "Device" and e.driver == target.index for e in s.model.pool):
        dev = _make(s, "Device(0)", "resources.Device()", lambda: s.L.resources.Device(0))
        if dev is not None:
            _make(s, "dev.create_stream()", "resources.Device.create_stream", dev.create_stream)
            foreign_streams(s, dev)


def foreign_current(s: Session) -> None:
    """Another library makes a context current (or none), behind cuguard's back."""
    contexts = [
        e for e in s.model.pool if e.kind == "Context" and e.driver == s.model.current and not s.context_gone(e.raw)
    ]
    if contexts and coin(s.ch, 70):
        entry = pick(s.ch, contexts)
        s.set_context(entry.raw)
        s.note(f"# another library: cuCtxSetCurrent({entry.label})")
    else:
        s.set_context(0)
        s.note("# another library: cuCtxSetCurrent(NULL)")


def thread(s: Session) -> None:
    """An operation on a fresh thread (which starts with no current context): G2 per thread, O2."""
    go = s.prepare()
    if go is None:
        return
    s.note("# on a new thread:")
    failure: list[BaseException] = []

    def run() -> None:
        try:
            go()
        except BaseException as exc:  # noqa: BLE001 - reported on the main thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="cuguard-misuse")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]


STEPS: dict[str, Callable[[Session], None]] = {
    "call": call,
    "fault": fault,
    "close": close,
    "drop": drop,
    "copy": copy_step,
    "construct": construct,
    "cycle": cycle,
    "switch": switch,
    "foreign_current": foreign_current,
    "host_callback": host_callback,
    "graph_callback": graph_callback,
    "thread": thread,
    "collect": collect,
    "capture": captures.capture,
    "second_thread": captures.second_thread,
}
