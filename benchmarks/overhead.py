"""cuguard's overhead over raw cuda-bindings, next to cuda.core's (issues 8 and 16).

For each operation, in one process, the median nanoseconds per operation of

  (a) raw cuda-bindings calls doing the same driver work (with a minimal status check),
  (b) cuguard, pure Python (``cuguard``: the compiled build's calls turned off),
  (b') cuguard's compiled build (``cuguard_fast``: its compiled calls on; ``null`` with the
       reason when the pure-Python build is installed),
  (c) cuda.core, where it has the operation (``null`` with the reason where not),

and the ratios (b)/(a), (b')/(a) and (c)/(a). The two cuguard variants run in the same process,
interleaved with the others: before each of its batches a variant turns the compiled calls off (b)
or on (b') with ``cuguard.resources.lowlevel.use_compiled()``. Every variant is warmed up, then timed in
batches sized so that one batch takes about ``--target-ms`` milliseconds; the
variants of an operation are interleaved batch by batch (a, b, c, a, b, c...)
so that drift in clocks or driver state hits them alike; the figure is the
median over the repeats, and a ratio is the median over the repeats of each
batch's figure over the raw batch's of the same repeat (a slow phase of the
machine that spans a repeat slows both sides alike; a single repeat's ratio
does not move the median). The garbage collector is off during a batch (as in
``timeit``). Work that queues on a stream is drained after each batch, outside
the timed region.

Usage::

    python benchmarks/overhead.py                       # the real GPU, JSON under benchmarks/results/
    python benchmarks/overhead.py --quick --out x.json  # shorter batches (~5 ms instead of ~25 ms)
    python benchmarks/overhead.py --driver sim --quick  # cuguard vs. the simulated driver (CPU only)
    python benchmarks/overhead.py --profile             # also cProfile the cuguard side of each operation
    python benchmarks/overhead.py --racecheck           # cuguard's variants with the race checker on (B7)

With ``--racecheck`` (or ``CUGUARD_RACECHECK=1`` in the environment) the cuguard
variants run with the race checker on, so its cost can be read against a run
without it; the report says ``"racecheck": true``. Without, the checker is off, as
it is by default: the hot paths then read one flag.

With ``--driver sim`` the "raw" variant calls the simulated driver's functions
directly and cuda.core is skipped; those results are marked ``"simulated": true``
and are for comparing commits on CPU machines, never GPU figures.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import datetime
import gc
import io
import itertools
import json
import os
import platform
import pstats
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

# Targets of issue 8, as cuguard/raw ratios (plus: at or below cuda.core's ratio where it has one).
TARGETS = {
    "stream_create_close": 1.05,
    "event_create_close": 1.35,
    "alloc_async_256B": 1.35,
    "graph_build_16": 2.0,
}
# Issue 30. Pure Python alone: these ratios. The compiled build: every operation at or below
# cuda.core's ratio in the same run, and at or below these.
PURE_TARGETS = {"alloc_async_256B": 1.6, "switch_restore_event": 1.35, "graph_build_16": 2.0}
FAST_TARGETS = {
    "event_create_close": 0.6,
    "stream_create_close": 1.0,
    "event_record_query": 0.5,
    "alloc_async_256B": 1.0,
    "h2d_copy_4B": 0.9,
    "kernel_launch_empty": 0.9,
    "switch_restore_event": 1.0,
    "graph_build_16": 1.2,
    "graph_instantiate_launch_16": 1.45,
}

KERNEL_SOURCE = 'extern "C" __global__ void empty() {}\n'
NOT_READY = 600  # CUDA_ERROR_NOT_READY
GRAPH_NODES = 16


class RawError(RuntimeError):
    """A raw driver call failed (the raw variants check every status, nothing more)."""


def _fail(err: Any, call: str) -> None:
    raise RawError(f"{call} failed: {err!r}")


# --- variants and operations ------------------------------------------------------------


@dataclass
class Variant:
    """One way of doing an operation: ``fn()`` does it once; ``after()`` drains, untimed."""

    fn: Callable[[], object] | None = None
    after: Callable[[], object] | None = None
    cleanup: Callable[[], object] | None = None
    reason: str | None = None  # why fn is None
    note: str | None = None
    prepare: Callable[[], object] | None = None  # before each batch (turns the fast path on or off)


@dataclass
class Operation:
    name: str
    description: str
    variants: dict[str, Variant] = field(default_factory=dict)
    setup: Callable[[], object] | None = None
    teardown: Callable[[], object] | None = None


KINDS = ("raw", "cuguard", "cuguard_fast", "cuda_core")
# Diagnostic variants, measured beside the others and listed under the table (they explain gaps):
#   compiled_floor: the compiled build's functions called straight from a Python function, no
#                   cuguard object made or checked: what is left of a compiled call; cuguard_fast minus it
#                   is the cost of cuguard's Python objects and checks.
#   raw_user_object: the raw calls on a graph that holds a CUDA user object, as every instantiated cuguard
#                   definition does (it keeps what the nodes use alive, W5): the driver's share of a gap.
#   raw_no_switch, cuguard_no_switch: (switch_restore_event only) the same event create+close with the device's
#                   context current: what the switch itself costs each side is its variant minus these.
#   object_floor:   (event_create_close only) compiled_floor plus the compiled Event object itself, made by its
#                   factory and dropped closed, with no check, no method call and no context test: what one
#                   Python object per event costs over the bare calls.
#   python_floor:   (the operations with a pure-Python target) the raw calls made through the least pure Python
#                   an API of objects needs: one method frame per call the user makes, the result an object of a
#                   __slots__ class holding the fields cuguard's keeps, with a __del__ (it must release what is
#                   collected unclosed) that returns at once for a closed object; no argument, state or
#                   context check. The floor of the pure-Python build: its ratio minus this one is the cost of
#                   cuguard's checks and of the frames of the layers it crosses.
#   contract_floor: (switch_restore_event only) python_floor plus, each at its least, what the contract and the
#                   layering rule add to a switched create: the API's keyword (``timing=``), a test that the
#                   device's context was not destroyed (O3, S2), a comparison with the current context so that
#                   it switches only when needed (C1), the switch, create and restore in a function of its own
#                   (only the context layer switches) that reads S2's flag (was any context ever destroyed?),
#                   the restore before a failed create raises (G4) naming the create (E1), the create undone
#                   when the restore fails after it (C2), the event's own fields, and a close that tests its
#                   context first. What the pure-Python build can reach without giving up a clause or the
#                   layering.
#   design_floor:   (switch_restore_event only) contract_floor plus, each at its least, what cuguard's design
#                   and API add: every driver call through the driver seam (``cuguard.errors.driver``, where
#                   the simulator, fault plans and call recording see it); one source for two builds (issue
#                   30): the test for the compiled calls before the create and before the destroy, the choice
#                   of the objects' factory; one ``__del__`` for every resource, which reads the
#                   deferred-release slot of memory (W5); the second keyword (``ipc_enabled=``) and its test;
#                   the test for a device's first use (its primary context is retained then); the event's
#                   device read from the device. What the pure-Python build can reach keeping its clauses, its
#                   layering, its seam, its single source and its API.
DIAGNOSTICS = (
    "compiled_floor",
    "object_floor",
    "python_floor",
    "contract_floor",
    "design_floor",
    "raw_user_object",
    "raw_no_switch",
    "cuguard_no_switch",
)
#: How the floors make their objects without ``__init__``: ``__new__`` read once into a global, as cuguard's
#: pure-Python build reads it (``cuguard.errors.lowlevel.source_new``); reading ``X.__new__`` at each call is
#: not specialized by the interpreter and would cost a floor about 0.3k instructions per object more.
_new_floor = object.__new__
#: ctypes destructors of the benchmark's raw user objects: the driver may call them until the process ends.
_DESTRUCTORS: list[Any] = []


def _native() -> Any:
    """``cuguard.resources._native.CALLS`` when the compiled calls can be on (entry points resolved), else ``None``.

    Leaves them off: the cuguard variants put them in their state before each batch.
    """
    compiled = _compiled_build()
    if compiled is None:
        return None
    can = compiled.enable()
    compiled.disable()
    if not can:
        return None
    from cuguard.resources import _native as native  # type: ignore[attr-defined, unused-ignore]

    return native.CALLS


def _floor(env: Env, builder: Callable[[Any], Variant], name: str = "compiled_floor") -> Variant:
    """The ``compiled_floor`` variant (or another of the compiled build, ``name``: ``builder(native)``), or a null
    with the reason."""
    if env.simulated:
        return Variant(reason="the compiled functions call the real driver's entry points only")
    native = _native()
    if native is None:
        return Variant(reason="the pure-Python build of cuguard-resources is installed")
    return _build(name, lambda: builder(native))


class _CompiledBuild:
    """The compiled build's switch (``cuguard.resources.lowlevel.use_compiled``), as the variants use it."""

    def __init__(self) -> None:
        import cuguard.resources
        from cuguard.resources import lowlevel

        self._lowlevel = lowlevel
        self.__version__ = cuguard.resources.__version__
        self.__file__ = cuguard.resources.__file__

    def enable(self) -> bool:
        return bool(self._lowlevel.use_compiled(True))

    def disable(self) -> None:
        self._lowlevel.use_compiled(False)

    def status(self) -> str:
        return str(self._lowlevel.compiled_status())


def _compiled_build() -> _CompiledBuild | None:
    """The compiled build's switch, or ``None`` when the pure-Python build of cuguard-resources is installed."""
    try:
        import cuguard.resources
    except ImportError:
        return None
    return _CompiledBuild() if cuguard.resources.compiled else None


def _cuguard_pair(make: Callable[[], Variant]) -> dict[str, Variant]:
    """The cuguard variant, pure Python, and the same with the compiled build's calls on.

    ``make()`` builds (and tries once) a variant; it runs once with the compiled calls on and once off.
    Each variant's ``prepare`` puts the compiled calls in its state before every batch.
    """
    compiled = _compiled_build()
    if compiled is None:
        return {"cuguard": make(), "cuguard_fast": Variant(reason="the pure-Python build is installed")}
    if not compiled.enable():
        return {"cuguard": make(), "cuguard_fast": Variant(reason=f"the compiled calls are off: {compiled.status()}")}
    try:
        fast = make()
    finally:
        compiled.disable()
    pure = make()
    fast.prepare, pure.prepare = compiled.enable, compiled.disable
    return {"cuguard": pure, "cuguard_fast": fast}


def _build(kind: str, builder: Callable[[], Variant]) -> Variant:
    """Run a variant's builder and try its operation once; a failure becomes a null with the reason."""
    try:
        variant = builder()
        if variant.fn is not None:
            variant.fn()
            if variant.after is not None:
                variant.after()
        return variant
    except Exception as exc:  # noqa: BLE001 - recorded as the reason for a null figure
        tb = traceback.format_exc(limit=6)
        return Variant(reason=f"{kind} variant failed: {type(exc).__name__}: {exc}", note=tb)


# --- the environment: driver, cuguard objects, cuda.core objects --------------------------


class Env:
    """What the operations share: the raw driver, cuguard's device and stream, cuda.core's."""

    def __init__(self, raw: Any, simulated: bool) -> None:
        from cuguard.resources import Device

        self.D = raw
        self.simulated = simulated
        self.dev = Device(0)
        self.dev.set_current()
        self.ctx = self.dev.context
        self.stream = self.dev.create_stream()
        # The raw variants queue on a stream of their own, made with the same flags as
        # cuguard's (blocking, default priority). Reading ``self.stream.handle`` instead
        # would hand the handle out, and cuguard then has to assume someone else may
        # capture that stream (a ``cuStreamIsCapturing`` query before each
        # stream-ordered allocation and free), which a program that keeps to cuguard's
        # API never pays.
        err, self.hstream = raw.cuStreamCreate(0)
        if err:
            _fail(err, "cuStreamCreate")
        self.core: Any = None
        self.core_reason = "skipped on the simulated driver" if simulated else None
        self.cdev: Any = None
        self.cstream: Any = None
        if not simulated:
            try:
                from cuda import core

                self.core = core
                self.cdev = core.Device(0)
                self.cdev.set_current()
                self.cstream = self.cdev.create_stream()
            except Exception as exc:  # noqa: BLE001 - cuda.core missing: its column is null
                self.core = None
                self.core_reason = f"cuda.core unavailable: {type(exc).__name__}: {exc}"
            # cuda.core's set_current made the same primary context current; make sure.
            self.dev.set_current()
        self.kernel_image: bytes | None = None
        self.kernel_kind = ""
        self.kernel_note = ""
        self.switch_other: dict[str, Any] = {}

    def close(self) -> None:
        """Release what the run holds while its driver is still installed."""
        self.dev.set_current()
        other = self.switch_other.get("other")
        if other is not None:
            other.close()
        self.stream.close()
        (err,) = self.D.cuStreamDestroy(self.hstream)
        if err:
            _fail(err, "cuStreamDestroy")
        if self.cstream is not None:
            with contextlib.suppress(Exception):
                self.cstream.close()
        gc.collect()

    def sync(self) -> None:
        """Drain the raw variants' stream and cuguard's (untimed, after each batch)."""
        (err,) = self.D.cuStreamSynchronize(self.hstream)
        if err:
            _fail(err, "cuStreamSynchronize")
        self.stream.sync()

    def csync(self) -> None:
        self.cstream.sync()

    def need_core(self) -> Any:
        if self.core is None:
            raise LookupError(self.core_reason or "cuda.core unavailable")
        return self.core


def _core_variant(env: Env, builder: Callable[[], Variant]) -> Variant:
    if env.core is None:
        return Variant(reason=env.core_reason or "cuda.core unavailable")
    return _build("cuda_core", builder)


# --- operations -------------------------------------------------------------------------


# --- pure-Python floors (python_floor, see DIAGNOSTICS) ----------------------------------------

#: The driver module the floor objects call, looked up per call as cuguard looks up its seam's functions.
_floor_driver: Any = None


class _FloorBuffer:
    """A buffer object as small as a pure-Python guarded one can be: cuguard's Buffer fields, a close, a __del__."""

    __slots__ = (
        "_closed",
        "_context",
        "_device",
        "_graph_used",
        "_handle",
        "_lender",
        "_mr",
        "_owned",
        "_release_deferred",
        "_size",
        "_stream",
    )
    _closed: Any
    _context: Any
    _device: Any
    _graph_used: Any
    _handle: Any
    _lender: Any
    _mr: Any
    _owned: Any
    _release_deferred: Any
    _size: Any
    _stream: Any

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        (err,) = _floor_driver.cuMemFreeAsync(self._handle, self._stream._handle)
        if err:
            _fail(err, "cuMemFreeAsync")

    def __del__(self) -> None:
        if self._closed:
            return
        self.close()


class _FloorEvent:
    """An event object as small as a pure-Python guarded one can be: cuguard's Event fields, a close, a __del__."""

    __slots__ = ("_closed", "_context", "_device", "_handle", "_owned", "_timing")
    _closed: Any
    _context: Any
    _device: Any
    _handle: Any
    _owned: Any
    _timing: Any

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        (err,) = _floor_driver.cuEventDestroy(self._handle)
        if err:
            _fail(err, "cuEventDestroy")

    def __del__(self) -> None:
        if self._closed:
            return
        self.close()


class _FloorNode:
    """A node object as small as a pure-Python one can be: cuguard's Node fields and a join."""

    __slots__ = ("_graph", "_h", "_info", "_key", "_kind", "_order", "_state")
    _graph: Any
    _h: Any
    _info: Any
    _key: Any
    _kind: Any
    _order: Any
    _state: Any

    def join(self) -> _FloorNode:
        graph = self._graph
        err, h = _floor_driver.cuGraphAddEmptyNode(graph._handle, [self._h], 1)
        if err:
            _fail(err, "cuGraphAddEmptyNode")
        return _floor_node(graph, h)


def _floor_node(graph: _FloorGraph, h: Any) -> _FloorNode:
    node = _new_floor(_FloorNode)
    node._graph = graph
    node._h = h
    node._info = None
    node._key = None
    node._kind = "empty"
    node._order = 0
    node._state = None
    return node


class _FloorGraph:
    """A graph definition as small as a pure-Python one can be: its handle, an empty(), a close, a __del__."""

    __slots__ = ("_closed", "_handle")
    _closed: Any
    _handle: Any

    def __init__(self) -> None:
        err, handle = _floor_driver.cuGraphCreate(0)
        if err:
            _fail(err, "cuGraphCreate")
        self._handle, self._closed = handle, False

    def empty(self) -> _FloorNode:
        err, h = _floor_driver.cuGraphAddEmptyNode(self._handle, None, 0)
        if err:
            _fail(err, "cuGraphAddEmptyNode")
        return _floor_node(self, h)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        (err,) = _floor_driver.cuGraphDestroy(self._handle)
        if err:
            _fail(err, "cuGraphDestroy")

    def __del__(self) -> None:
        if self._closed:
            return
        self.close()


class _FloorDevice:
    """The user's device object of the python_floor variants: one method frame per call made."""

    __slots__ = ("_context", "_primary")
    _context: Any
    _primary: Any

    def __init__(self, D: Any, context: Any) -> None:
        global _floor_driver
        _floor_driver = D
        self._context, self._primary = context, context.handle

    def allocate(self, size: int, stream: Any) -> _FloorBuffer:
        err, ptr = _floor_driver.cuMemAllocAsync(size, stream._handle)
        if err:
            _fail(err, "cuMemAllocAsync")
        buf = _new_floor(_FloorBuffer)
        buf._handle = ptr
        buf._context = self._context
        buf._owned = True
        buf._device = 0
        buf._size = size
        buf._stream = stream
        buf._graph_used = False
        buf._release_deferred = False
        buf._lender = None
        buf._mr = None
        buf._closed = False
        return buf

    def create_event(self) -> _FloorEvent:
        """Switch to the device's context, create, restore: the raw calls of switch_restore_event."""
        d = _floor_driver
        err, previous = d.cuCtxGetCurrent()
        if err:
            _fail(err, "cuCtxGetCurrent")
        (err,) = d.cuCtxSetCurrent(self._primary)
        if err:
            _fail(err, "cuCtxSetCurrent")
        err, h = d.cuEventCreate(2)
        if err:
            _fail(err, "cuEventCreate")
        (err,) = d.cuCtxSetCurrent(previous)
        if err:
            _fail(err, "cuCtxSetCurrent")
        event = _new_floor(_FloorEvent)
        event._handle = h
        event._context = self._context
        event._owned = True
        event._device = 0
        event._timing = False
        event._closed = False
        return event


class _ContractContext:
    """A context as the contract floor sees one: its handle, its address and whether it was destroyed."""

    __slots__ = ("_closed", "_handle", "_int")

    def __init__(self, handle: Any) -> None:
        self._handle, self._int, self._closed = handle, int(handle), False


class _ContractEvent(_FloorEvent):
    """python_floor's event with the rest of cuguard's Event fields and a close that first tests its context."""

    __slots__ = ("_release_deferred",)
    _release_deferred: Any

    def close(self) -> None:
        if self._closed:
            return
        if self._context._closed:  # O3, S2: never destroyed in a destroyed context (leaked)
            raise RawError("the event's context was destroyed: leaked")
        self._closed = True
        (err,) = _floor_driver.cuEventDestroy(self._handle)
        if err:
            _fail(err, "cuEventDestroy")


#: S2's flag: whether some context was ever destroyed (then a restore must not switch back to one). Never set here.
_contract_any_gone = False


def _switched_through(
    d: Any,
) -> Callable[[Any, Any, Callable[[Any], Any], str, Callable[[Any, Any], object], Any], Any]:
    """The switch, the create and the restore in a function of their own, as the context layer makes them,
    through driver ``d``: S2's flag read; the restore made before a failed create raises, also when the
    bindings raise (G4), a failed restore then a note; the create named in its error (E1); when the restore
    fails after a successful create, the create undone if its context is still current (C2)."""

    def switched(  # noqa: PLR0917  # positional, as the context layer's call_switched
        context: _ContractContext,
        previous: Any,
        fn: Callable[[Any], Any],
        call: str,
        undo: Callable[[Any, Any], object],
        arg: Any,
    ) -> Any:
        if _contract_any_gone:  # S2: never restore a context that was destroyed meanwhile
            raise RawError("a context was destroyed: the restore would need checking")
        (err,) = d.cuCtxSetCurrent(context._handle)
        if err:
            _fail(err, "cuCtxSetCurrent")
        try:
            err, value = fn(arg)
        except BaseException as exc:
            (rerr,) = d.cuCtxSetCurrent(previous)
            if rerr:
                exc.add_note(f"restoring the context failed: {rerr!r}")
            raise
        # (cuguard restores through the seam's cuguardRestoreContext, which is this function of the real driver)
        (rerr,) = d.cuCtxSetCurrent(previous)
        if err or rerr:
            _switched_failed(d, context, err, rerr, value, call, undo)
        return value

    return switched


def _switched_failed(  # noqa: PLR0917  # the failure path of _switched_through's function
    d: Any, context: _ContractContext, err: Any, rerr: Any, value: Any, call: str, undo: Callable[[Any, Any], object]
) -> None:
    if err:
        error = RawError(f"{call} failed: {err!r}")
        if rerr:
            error.add_note(f"restoring the context failed: {rerr!r}")
        raise error
    error = RawError(f"restoring the context failed: {rerr!r}")
    now_err, now = d.cuCtxGetCurrent()
    if not now_err and int(now) == context._int:
        try:
            undo(d, value)
        except Exception as undo_exc:  # noqa: BLE001 - a note on the restore's error
            error.add_note(f"undoing {call} failed: {undo_exc!r}")
    else:
        error.add_note(f"what {call} created was leaked: its context is no longer current")
    raise error


def _undo_event(d: Any, handle: Any) -> None:
    """What undoes a switched event create whose restore failed (C2), through the switch's driver ``d``."""
    (err,) = d.cuEventDestroy(handle)
    if err:
        _fail(err, "cuEventDestroy")


#: contract_floor's switch, through the raw driver: made by each _ContractDevice (the driver is known then).
_contract_switched: Any = None


class _ContractDevice(_FloorDevice):
    """The device of the contract_floor variant (see DIAGNOSTICS): python_floor's, with a context it can test."""

    __slots__ = ()

    def __init__(self, D: Any, context: Any) -> None:
        global _contract_switched
        super().__init__(D, context)
        self._context = _ContractContext(self._primary)
        _contract_switched = _switched_through(D)

    def create_event(self, *, timing: bool = False) -> _ContractEvent:
        context = self._context
        if context._closed:
            raise RawError("the device's context was destroyed")
        flags = 0 if timing else 2
        d = _floor_driver
        err, current = d.cuCtxGetCurrent()
        if err:
            _fail(err, "cuCtxGetCurrent")
        if current == context._handle:
            err, handle = d.cuEventCreate(flags)
            if err:
                _fail(err, "cuEventCreate")
        else:
            handle = _contract_switched(context, current, d.cuEventCreate, "cuEventCreate", _undo_event, flags)
        event = _new_floor(_ContractEvent)
        event._handle = handle
        event._context = context
        event._owned = True
        event._device = 0
        event._timing = timing
        event._release_deferred = False
        event._closed = False
        return event


#: The one-source branch of design_floor: the compiled build's calls where it is in use, ``None`` here (as in
#: cuguard's pure-Python build, whose hot paths test the same global before each driver call).
_design_fp: Any = None
#: design_floor's driver: cuguard's driver seam (``cuguard.errors.driver``), through which every driver call of
#: the pure-Python build goes so that the simulator, fault plans and call recording see it; set by _DesignDevice.
_design_driver: Any = None
#: design_floor's switch, through the seam: made by each _DesignDevice.
_design_switched: Any = None


class _DesignEvent(_ContractEvent):
    """contract_floor's event whose close tests for the compiled calls first (one source, two builds).

    Without the weak-reference slot cuguard's resources have (about 0.05k instructions per object): with it,
    under Python 3.12.1, the one more class layout changed which of cuguard's attribute reads miss the
    interpreter's type-attribute cache in this process, adding 0.8k instructions per operation to the
    cuguard variant itself.
    """

    __slots__ = ()

    def close(self) -> None:
        if self._closed:
            return
        if self._context._closed:
            raise RawError("the event's context was destroyed: leaked")
        self._closed = True
        fp = _design_fp
        if fp is not None:
            err = fp.event_destroy(self._handle)
        else:
            (err,) = _design_driver.cuEventDestroy(self._handle)
        if err:
            _fail(err, "cuEventDestroy")

    def __del__(self) -> None:
        # One __del__ for every kind of resource: memory may have its release deferred until a graph lets go
        # of it (W5), so a closed object reads that slot before returning.
        if self._closed:
            if not self._release_deferred:
                return
            self._release_deferred = False
            self._closed = False
        self.close()


#: The factory choice of design_floor (cuguard's ``source_new``: ``None`` in the compiled build).
_design_new: Any = _new_floor


class _DesignDevice(_ContractDevice):
    """design_floor's device (see DIAGNOSTICS): contract_floor's with cuguard's API and one-source branches."""

    __slots__ = ("_ordinal",)
    _ordinal: Any

    def __init__(self, D: Any, context: Any) -> None:
        global _design_driver, _design_switched
        from cuguard.errors import driver

        super().__init__(D, context)
        self._ordinal = 0
        _design_driver = driver
        _design_switched = _switched_through(driver)

    def create_event(self, *, timing: bool = False, ipc_enabled: bool = False) -> _DesignEvent:
        if ipc_enabled:
            raise RawError("not measured: an IPC event")
        context = self._context
        if context is None:  # the primary context is retained at the device's first use
            raise RawError("not measured: a device's first use")
        if context._closed:
            raise RawError("the device's context was destroyed")
        flags = 0 if timing else 2
        fp = _design_fp
        if fp is None:
            d = _design_driver
            err, current = d.cuCtxGetCurrent()
            if err:
                _fail(err, "cuCtxGetCurrent")
            if current == context._handle:
                err, handle = d.cuEventCreate(flags)
                if err:
                    _fail(err, "cuEventCreate")
            else:
                handle = _design_switched(context, current, d.cuEventCreate, "cuEventCreate", _undo_event, flags)
        else:
            err, handle = fp.event_create(context._int, flags)
            if err:
                _fail(err, "cuEventCreate")
        event = _new_floor(_DesignEvent) if _design_new is None else _design_new(_DesignEvent)
        event._handle = handle
        event._context = context
        event._owned = True
        event._device = self._ordinal
        event._timing = timing
        event._release_deferred = False
        event._closed = False
        return event


def op_stream(env: Env) -> Operation:
    D, dev = env.D, env.dev
    op = Operation("stream_create_close", "create and destroy a stream (flags 0)")

    def raw() -> Variant:
        create, destroy = D.cuStreamCreate, D.cuStreamDestroy

        def fn() -> None:
            err, h = create(0)
            if err:
                _fail(err, "cuStreamCreate")
            (err,) = destroy(h)
            if err:
                _fail(err, "cuStreamDestroy")

        return Variant(fn)

    def guarded() -> Variant:
        create = dev.create_stream

        def fn() -> None:
            create().close()

        return Variant(fn)

    def core() -> Variant:
        create = env.cdev.create_stream

        def fn() -> None:
            create().close()

        return Variant(fn)

    def floor(native: Any) -> Variant:
        create, destroy, ctx = native.stream_create, native.stream_destroy, env.ctx._int

        def fn() -> None:
            err, h = create(ctx, 0)
            if err:
                _fail(err, "stream_create")
            if destroy(h):
                _fail(err, "stream_destroy")

        return Variant(fn)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": _core_variant(env, core),
        "compiled_floor": _floor(env, floor),
    }
    return op


def op_event(env: Env) -> Operation:
    D, dev = env.D, env.dev
    op = Operation("event_create_close", "create and destroy an event without timing (CU_EVENT_DISABLE_TIMING)")

    def raw() -> Variant:
        create, destroy = D.cuEventCreate, D.cuEventDestroy

        def fn() -> None:
            err, h = create(2)
            if err:
                _fail(err, "cuEventCreate")
            (err,) = destroy(h)
            if err:
                _fail(err, "cuEventDestroy")

        return Variant(fn)

    def guarded() -> Variant:
        create = dev.create_event

        def fn() -> None:
            create(timing=False).close()

        return Variant(fn)

    def core() -> Variant:
        options = _core_event_options(env)
        create = env.cdev.create_event

        def fn() -> None:
            create(options).close()

        return Variant(fn)

    def floor(native: Any) -> Variant:
        create, destroy, ctx = native.event_create, native.event_destroy, env.ctx._int

        def fn() -> None:
            err, h = create(ctx, 2)
            if err:
                _fail(err, "event_create")
            if destroy(h):
                _fail(err, "event_destroy")

        return Variant(fn)

    def object_floor(native: Any) -> Variant:
        from cuguard.resources._stream import new_event

        create, destroy, ctx, context = native.event_create, native.event_destroy, env.ctx._int, env.ctx

        def fn() -> None:
            err, h = create(ctx, 2)
            if err:
                _fail(err, "event_create")
            event = new_event(h, context, 0, False)
            if destroy(h):
                _fail(err, "event_destroy")
            event._closed = True  # dropped closed: its finalizer returns at once

        return Variant(fn)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": _core_variant(env, core),
        "compiled_floor": _floor(env, floor),
        "object_floor": _floor(env, object_floor, "object_floor"),
    }
    return op


def _core_event_options(env: Env) -> Any:
    core = env.need_core()
    for kwargs in ({"enable_timing": False}, {"timing_enabled": False}):
        try:
            return core.EventOptions(**kwargs)
        except TypeError:
            continue
    return None  # cuda.core's default event has timing disabled


def op_event_record_query(env: Env) -> Operation:
    D, dev, s = env.D, env.dev, env.stream
    op = Operation("event_record_query", "record an event on a stream, then query it")
    events: list[Any] = []

    def raw() -> Variant:
        err, e = D.cuEventCreate(2)
        if err:
            _fail(err, "cuEventCreate")
        record, query, hs = D.cuEventRecord, D.cuEventQuery, env.hstream

        def fn() -> None:
            (err,) = record(e, hs)
            if err:
                _fail(err, "cuEventRecord")
            (err,) = query(e)
            if err and int(err) != NOT_READY:
                _fail(err, "cuEventQuery")

        return Variant(fn, after=env.sync, cleanup=lambda: D.cuEventDestroy(e))

    def guarded() -> Variant:
        e = dev.create_event(timing=False)
        events.append(e)

        def fn() -> None:
            e.record(s)
            e.query()

        return Variant(fn, after=env.sync, cleanup=e.close)

    def core() -> Variant:
        e = env.cdev.create_event(_core_event_options(env))
        cs = env.cstream

        def fn() -> None:
            cs.record(e)
            e.is_done  # noqa: B018 - the property queries the driver

        return Variant(fn, after=env.csync, cleanup=e.close)

    def floor(native: Any) -> Variant:
        e = dev.create_event(timing=False)
        events.append(e)
        record, query, he, hs = native.event_record, native.event_query, e._handle, int(env.hstream)

        def fn() -> None:
            if record(he, hs):
                _fail("?", "event_record")
            err = query(he)
            if err and err != NOT_READY:
                _fail(err, "event_query")

        return Variant(fn, after=env.sync, cleanup=e.close)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": _core_variant(env, core),
        "compiled_floor": _floor(env, floor),
    }
    return op


def op_alloc(env: Env) -> Operation:
    D, dev, s = env.D, env.dev, env.stream
    op = Operation("alloc_async_256B", "stream-ordered allocate and free of 256 bytes")

    def raw() -> Variant:
        alloc, free, hs = D.cuMemAllocAsync, D.cuMemFreeAsync, env.hstream

        def fn() -> None:
            err, p = alloc(256, hs)
            if err:
                _fail(err, "cuMemAllocAsync")
            (err,) = free(p, hs)
            if err:
                _fail(err, "cuMemFreeAsync")

        return Variant(fn, after=env.sync)

    def guarded() -> Variant:
        allocate = dev.allocate

        def fn() -> None:
            allocate(256, stream=s).close()

        return Variant(fn, after=env.sync)

    def core() -> Variant:
        allocate, cs = env.cdev.allocate, env.cstream

        def fn() -> None:
            allocate(256, stream=cs).close(cs)

        return Variant(fn, after=env.csync, note="cuda.core allocates from the device's memory pool")

    def floor(native: Any) -> Variant:
        alloc, free, hs = native.mem_alloc_async, native.mem_free_async, int(env.hstream)

        def fn() -> None:
            err, p = alloc(256, hs, False)
            if err:
                _fail(err, "mem_alloc_async")
            if free(p, hs):
                _fail("?", "mem_free_async")

        return Variant(fn, after=env.sync)

    def python_floor() -> Variant:
        device, stream = _FloorDevice(D, env.ctx), env.stream

        def fn() -> None:
            device.allocate(256, stream).close()

        return Variant(fn)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": _core_variant(env, core),
        "compiled_floor": _floor(env, floor),
        "python_floor": _build("python_floor", python_floor),
    }
    return op


def op_pinned(env: Env) -> Operation:
    D, dev = env.D, env.dev
    op = Operation("pinned_alloc_256B", "page-locked host allocate and free of 256 bytes")

    def raw() -> Variant:
        alloc, free = D.cuMemHostAlloc, D.cuMemFreeHost

        def fn() -> None:
            err, p = alloc(256, 0)
            if err:
                _fail(err, "cuMemHostAlloc")
            (err,) = free(p)
            if err:
                _fail(err, "cuMemFreeHost")

        return Variant(fn)

    def guarded() -> Variant:
        allocate = dev.allocate_pinned

        def fn() -> None:
            allocate(256).close()

        return Variant(fn)

    def core() -> Variant:
        mr = env.need_core().LegacyPinnedMemoryResource()
        allocate = mr.allocate
        try:
            allocate(256).close()
        except TypeError:  # a cuda.core that wants the stream
            cs = env.cstream

            def with_stream() -> None:
                allocate(256, stream=cs).close()

            return Variant(with_stream, note="LegacyPinnedMemoryResource (cuMemAllocHost), allocate(size, stream=)")

        def fn() -> None:
            allocate(256).close()

        return Variant(fn, note="LegacyPinnedMemoryResource (cuMemAllocHost)")

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": _core_variant(env, core),
    }
    return op


def op_h2d(env: Env) -> Operation:
    D, dev, s = env.D, env.dev, env.stream
    op = Operation("h2d_copy_4B", "queue a 4-byte host-to-device copy from pinned memory on a stream")
    keep: list[Any] = []

    def raw() -> Variant:
        err, dptr = D.cuMemAlloc(4)
        if err:
            _fail(err, "cuMemAlloc")
        err, host = D.cuMemHostAlloc(4, 0)
        if err:
            _fail(err, "cuMemHostAlloc")
        copy, hs = D.cuMemcpyHtoDAsync, env.hstream

        def fn() -> None:
            (err,) = copy(dptr, host, 4, hs)
            if err:
                _fail(err, "cuMemcpyHtoDAsync")

        def cleanup() -> None:
            env.sync()
            D.cuMemFree(dptr)
            D.cuMemFreeHost(host)

        return Variant(fn, after=env.sync, cleanup=cleanup)

    def guarded() -> Variant:
        buf = dev.allocate(4)
        pinned = dev.allocate_pinned(4)
        keep.extend((buf, pinned))
        copy_from = buf.copy_from

        def fn() -> None:
            copy_from(pinned, stream=s)

        def cleanup() -> None:
            env.sync()
            buf.close()
            pinned.close()

        return Variant(fn, after=env.sync, cleanup=cleanup)

    def core() -> Variant:
        core_mod = env.need_core()
        cs = env.cstream
        buf = env.cdev.allocate(4, stream=cs)
        pinned = core_mod.LegacyPinnedMemoryResource().allocate(4)
        copy_from = buf.copy_from

        def fn() -> None:
            copy_from(pinned, stream=cs)

        def cleanup() -> None:
            cs.sync()
            buf.close(cs)
            pinned.close()

        return Variant(fn, after=env.csync, cleanup=cleanup)

    def floor(native: Any) -> Variant:
        buf = dev.allocate(4)
        pinned = dev.allocate_pinned(4)
        keep.extend((buf, pinned))
        copy, dst, src, hs = native.memcpy_htod_async, buf._handle, pinned.address, int(env.hstream)

        def fn() -> None:
            if copy(dst, src, 4, hs):
                _fail("?", "memcpy_htod_async")

        def cleanup() -> None:
            env.sync()
            buf.close()
            pinned.close()

        return Variant(fn, after=env.sync, cleanup=cleanup)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": _core_variant(env, core),
        "compiled_floor": _floor(env, floor),
    }
    return op


def op_switch(env: Env) -> Operation:
    """A Device method while another context is current: switch in, work, restore."""
    from cuguard.context import Context

    D, dev = env.D, env.dev
    op = Operation(
        "switch_restore_event",
        "Device.create_event + close while another context is current (switch in, create, restore; destroy)",
    )
    holder = env.switch_other

    def setup() -> None:
        other = holder.get("other")
        if other is None:
            other = holder["other"] = Context.create(0)
        other.set_current()

    def teardown() -> None:
        dev.set_current()

    def raw() -> Variant:
        get, set_, create, destroy = D.cuCtxGetCurrent, D.cuCtxSetCurrent, D.cuEventCreate, D.cuEventDestroy
        primary = env.ctx.handle

        def fn() -> None:
            err, previous = get()
            if err:
                _fail(err, "cuCtxGetCurrent")
            (err,) = set_(primary)
            if err:
                _fail(err, "cuCtxSetCurrent")
            err, h = create(2)
            if err:
                _fail(err, "cuEventCreate")
            (err,) = set_(previous)
            if err:
                _fail(err, "cuCtxSetCurrent")
            (err,) = destroy(h)
            if err:
                _fail(err, "cuEventDestroy")

        return Variant(fn)

    def guarded() -> Variant:
        create = dev.create_event

        def fn() -> None:
            create(timing=False).close()

        return Variant(fn)

    def raw_event() -> Variant:
        create, destroy = D.cuEventCreate, D.cuEventDestroy

        def fn() -> None:
            err, h = create(2)
            if err:
                _fail(err, "cuEventCreate")
            (err,) = destroy(h)
            if err:
                _fail(err, "cuEventDestroy")

        return Variant(fn)

    def python_floor() -> Variant:
        device = _FloorDevice(D, env.ctx)

        def fn() -> None:
            device.create_event().close()

        return Variant(fn)

    def contract_floor() -> Variant:
        create = _ContractDevice(D, env.ctx).create_event

        def fn() -> None:
            create(timing=False).close()

        return Variant(fn)

    def design_floor() -> Variant:
        create = _DesignDevice(D, env.ctx).create_event

        def fn() -> None:
            create(timing=False).close()

        return Variant(fn)

    def no_switch(variant: Variant, pure: bool = False) -> Variant:
        """``variant`` run with the device's context current (the other one current again after each batch)."""
        if variant.fn is None:
            return variant
        compiled = _compiled_build()

        def prepare() -> None:
            if pure and compiled is not None:
                compiled.disable()
            dev.set_current()

        variant.prepare, variant.after = prepare, setup
        return variant

    setup()
    try:
        op.variants = {
            "raw": _build("raw", raw),
            **_cuguard_pair(lambda: _build("cuguard", guarded)),
            "cuda_core": Variant(
                reason="cuda.core has no switch-and-restore: its Device methods work in the current context"
            ),
            "python_floor": _build("python_floor", python_floor),
            "contract_floor": _build("contract_floor", contract_floor),
            "design_floor": _build("design_floor", design_floor),
            "raw_no_switch": no_switch(_build("raw_no_switch", raw_event)),
            "cuguard_no_switch": no_switch(_build("cuguard_no_switch", guarded), pure=True),
        }
        _, now = D.cuCtxGetCurrent()
        if int(now) != int(holder["other"].handle):
            op.variants["cuguard"] = Variant(reason="cuguard did not restore the caller's context (G2 violated)")
    finally:
        teardown()

    def final_teardown() -> None:
        teardown()

    op.setup, op.teardown = setup, final_teardown
    return op


def _chain_raw(D: Any) -> Any:
    err, graph = D.cuGraphCreate(0)
    if err:
        _fail(err, "cuGraphCreate")
    add = D.cuGraphAddEmptyNode
    err, node = add(graph, None, 0)
    if err:
        _fail(err, "cuGraphAddEmptyNode")
    for _ in range(GRAPH_NODES - 1):
        err, node = add(graph, [node], 1)
        if err:
            _fail(err, "cuGraphAddEmptyNode")
    return graph


def _graph_definition_class(which: str) -> Any:
    if which == "cuguard":
        try:
            from cuguard.graphs import GraphDefinition  # type: ignore[import-not-found]
        except ImportError as exc:
            raise LookupError(f"not yet implemented (cuguard.graphs: {exc})") from None
        return GraphDefinition
    from cuda.core.graph import GraphDefinition as CoreDefinition

    return CoreDefinition


def _new_definition(cls: Any, env: Env) -> Any:
    try:
        return cls()
    except TypeError:
        return cls(env.dev)


def _chain(definition: Any) -> Any:
    node = definition.empty()
    for _ in range(GRAPH_NODES - 1):
        node = node.join()
    return node


def _dispose(definition: Any) -> None:
    close = getattr(definition, "close", None)
    if close is not None:
        close()


def op_graph_build(env: Env) -> Operation:
    D = env.D
    op = Operation("graph_build_16", f"build a {GRAPH_NODES}-node chain of empty nodes, then destroy the graph")

    def raw() -> Variant:
        destroy = D.cuGraphDestroy

        def fn() -> None:
            (err,) = destroy(_chain_raw(D))
            if err:
                _fail(err, "cuGraphDestroy")

        return Variant(fn)

    def graph_variant(which: str) -> Callable[[], Variant]:
        def builder() -> Variant:
            cls = _graph_definition_class(which)

            def fn() -> None:
                definition = _new_definition(cls, env)
                _chain(definition)
                _dispose(definition)  # cuda.core: none; dropping the last reference destroys it

            return Variant(fn)

        return builder

    def floor(native: Any) -> Variant:
        # The compiled build's driver calls alone: the graph created and destroyed through the bindings
        # (as cuguard does), each empty node through the compiled call, which returns its address.
        create, add, destroy = D.cuGraphCreate, native.graph_add_empty, D.cuGraphDestroy

        def fn() -> None:
            err, graph = create(0)
            if err:
                _fail(err, "cuGraphCreate")
            err, node = add(graph, None)
            if err:
                _fail(err, "graph_add_empty")
            for _ in range(GRAPH_NODES - 1):
                err, node = add(graph, node)
                if err:
                    _fail(err, "graph_add_empty")
            (err,) = destroy(graph)
            if err:
                _fail(err, "cuGraphDestroy")

        return Variant(fn)

    def python_floor() -> Variant:
        _FloorDevice(D, env.ctx)  # the driver the floor objects call

        def fn() -> None:
            definition = _FloorGraph()
            _chain(definition)
            _dispose(definition)

        return Variant(fn)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _graph_or_null("cuguard", graph_variant("cuguard"))),
        "cuda_core": _core_variant(env, graph_variant("cuda_core")),
        "compiled_floor": _floor(env, floor),
        "python_floor": _build("python_floor", python_floor),
    }
    return op


def _graph_or_null(kind: str, builder: Callable[[], Variant]) -> Variant:
    try:
        _graph_definition_class("cuguard")
    except LookupError as exc:
        return Variant(reason=str(exc))
    return _build(kind, builder)


def op_graph_launch(env: Env) -> Operation:
    D = env.D
    op = Operation(
        "graph_instantiate_launch_16",
        f"instantiate a {GRAPH_NODES}-node chain, launch it, sync the stream, destroy the executable graph",
    )

    def raw(user_object: bool = False) -> Variant:
        graph = _chain_raw(D)
        if user_object:
            # A user object moved into the graph, as cuguard's definition holds one once instantiated.
            destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: None)
            # The driver calls it when the graph is destroyed (the variant's cleanup, after the builder's
            # locals are gone): it must live as long as the process, or that call jumps into freed memory.
            _DESTRUCTORS.append(destructor)
            address = ctypes.cast(destructor, ctypes.c_void_p).value
            err, obj = D.cuUserObjectCreate(0, D.CUhostFn(address), 1, 1)  # CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
            if err:
                _fail(err, "cuUserObjectCreate")
            (err,) = D.cuGraphRetainUserObject(graph, obj, 1, 1)  # CU_GRAPH_USER_OBJECT_MOVE
            if err:
                _fail(err, "cuGraphRetainUserObject")
        inst, launch, sync, destroy, hs = (
            D.cuGraphInstantiate,
            D.cuGraphLaunch,
            D.cuStreamSynchronize,
            D.cuGraphExecDestroy,
            env.hstream,
        )

        def fn() -> None:
            err, exe = inst(graph, 0)
            if err:
                _fail(err, "cuGraphInstantiate")
            (err,) = launch(exe, hs)
            if err:
                _fail(err, "cuGraphLaunch")
            (err,) = sync(hs)
            if err:
                _fail(err, "cuStreamSynchronize")
            (err,) = destroy(exe)
            if err:
                _fail(err, "cuGraphExecDestroy")

        note = (
            "on a graph holding one CUDA user object (as an instantiated cuguard definition)" if user_object else None
        )
        return Variant(fn, cleanup=lambda: D.cuGraphDestroy(graph), note=note)

    def floor(native: Any) -> Variant:
        definition = _new_definition(_graph_definition_class("cuguard"), env)
        _chain(definition)
        definition.instantiate().close()  # attaches its user object, as the cuguard variants' definition
        inst, launch, sync, destroy = (
            native.graph_instantiate,
            native.graph_launch,
            native.stream_synchronize,
            native.graph_exec_destroy_relaxed,
        )
        graph, hs, ctx = definition._handle, int(env.hstream), env.ctx._int

        def fn() -> None:
            err, exe = inst(ctx, graph, 0)
            if err:
                _fail(err, "graph_instantiate")
            if launch(exe, hs) or sync(hs) or any(destroy(exe)):
                _fail("?", "graph_launch/stream_synchronize/graph_exec_destroy_relaxed")

        return Variant(fn, cleanup=definition.close)

    def graph_variant(which: str) -> Callable[[], Variant]:
        def builder() -> Variant:
            cls = _graph_definition_class(which)
            definition = _new_definition(cls, env)
            _chain(definition)
            stream = env.stream if which == "cuguard" else env.cstream

            def fn() -> None:
                exe = definition.instantiate()
                exe.launch(stream)
                stream.sync()
                exe.close()

            return Variant(fn, cleanup=lambda: _dispose(definition))

        return builder

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _graph_or_null("cuguard", graph_variant("cuguard"))),
        "cuda_core": _core_variant(env, graph_variant("cuda_core")),
        "raw_user_object": _build("raw_user_object", lambda: raw(user_object=True)),
        "compiled_floor": _floor(env, floor),
    }
    return op


PTX_TEMPLATE = ".version 7.8\n.target sm_{cc}\n.address_size 64\n\n.visible .entry empty()\n{{\n\tret;\n}}\n"


def _kernel_image(env: Env) -> tuple[bytes, str]:
    """An image holding ``empty``: a cubin from cuguard's NVRTC wrapper, or hand-written PTX."""
    if env.kernel_image is not None:
        return env.kernel_image, env.kernel_kind
    major, minor = env.dev.compute_capability
    # The simulator runs a PTX body of `ret;` as it is (a cubin would need a stand-in); --kernel ptx asks for the
    # same elsewhere (a no-op driver library, where NVRTC has no driver to ask).
    if env.simulated or env.kernel_kind == "ptx-asked":
        env.kernel_image, env.kernel_kind = PTX_TEMPLATE.format(cc=f"{major}{minor}").encode(), "ptx"
        return env.kernel_image, env.kernel_kind
    try:
        from cuguard.resources import Program

        image = Program(KERNEL_SOURCE, options=[f"-arch=sm_{major}{minor}"]).compile("cubin").code
        kind = "cubin"
    except Exception as exc:  # noqa: BLE001 - NVRTC missing: fall back to PTX, noted in the JSON
        env.kernel_note = f"NVRTC compile failed ({type(exc).__name__}: {exc}); used hand-written PTX"
        image = PTX_TEMPLATE.format(cc=f"{major}{minor}").encode()
        kind = "ptx"
    env.kernel_image, env.kernel_kind = image, kind
    return image, kind


def op_launch(env: Env) -> Operation:
    D, s = env.D, env.stream
    op = Operation("kernel_launch_empty", "launch an empty kernel, grid 1, block 1, no arguments")

    def raw() -> Variant:
        image, _ = _kernel_image(env)
        data = image if image.endswith(b"\x00") else image + b"\x00"
        err, module = D.cuModuleLoadData(data)
        if err:
            _fail(err, "cuModuleLoadData")
        err, func = D.cuModuleGetFunction(module, b"empty")
        if err:
            _fail(err, "cuModuleGetFunction")
        launch, hs = D.cuLaunchKernel, env.hstream

        def fn() -> None:
            (err,) = launch(func, 1, 1, 1, 1, 1, 1, 0, hs, 0, 0)
            if err:
                _fail(err, "cuLaunchKernel")

        def cleanup() -> None:
            env.sync()
            D.cuModuleUnload(module)

        return Variant(fn, after=env.sync, cleanup=cleanup)

    def guarded() -> Variant:
        from cuguard.resources import LaunchConfig, launch

        image, _ = _kernel_image(env)
        module = env.dev.load_module(image)
        kernel = module.get_kernel("empty")
        config = LaunchConfig(grid=1, block=1)

        def fn() -> None:
            launch(s, config, kernel)

        def cleanup() -> None:
            env.sync()
            module.close()

        return Variant(fn, after=env.sync, cleanup=cleanup)

    def core() -> Variant:
        core_mod = env.need_core()
        image, kind = _kernel_image(env)
        load = core_mod.ObjectCode.from_cubin if kind == "cubin" else core_mod.ObjectCode.from_ptx
        code = load(image)
        kernel = code.get_kernel("empty")
        config = core_mod.LaunchConfig(grid=1, block=1)
        launch, cs = core_mod.launch, env.cstream

        def fn() -> None:
            launch(cs, config, kernel)

        return Variant(fn, after=env.csync)

    def floor(native: Any) -> Variant:
        image, _ = _kernel_image(env)
        module = env.dev.load_module(image)
        kernel = module.get_kernel("empty")
        launch, hs, function = native.launch, int(env.hstream), kernel._handle

        def fn() -> None:
            if launch(function, 1, 1, 1, 1, 1, 1, 0, hs, 0):
                _fail("?", "launch")

        def cleanup() -> None:
            env.sync()
            module.close()

        return Variant(fn, after=env.sync, cleanup=cleanup)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": _core_variant(env, core),
        "compiled_floor": _floor(env, floor),
    }
    return op


def op_cheap_call(env: Env) -> Operation:
    D = env.D
    op = Operation("cheap_call_ctx_get_current", "one cuCtxGetCurrent with its status check: the price of the seam")

    def raw() -> Variant:
        get = D.cuCtxGetCurrent

        def fn() -> None:
            err, _ = get()
            if err:
                _fail(err, "cuCtxGetCurrent")

        return Variant(fn)

    def guarded() -> Variant:
        from cuguard.errors import driver, raise_status

        def fn() -> None:
            err, _ = driver.cuCtxGetCurrent()
            if err:
                raise_status(err, "cuCtxGetCurrent")

        return Variant(fn)

    op.variants = {
        "raw": _build("raw", raw),
        **_cuguard_pair(lambda: _build("cuguard", guarded)),
        "cuda_core": Variant(reason="cuda.core has no public call that is only cuCtxGetCurrent"),
    }
    return op


BUILDERS = [
    op_stream,
    op_event,
    op_event_record_query,
    op_alloc,
    op_pinned,
    op_h2d,
    op_switch,
    op_graph_build,
    op_graph_launch,
    op_launch,
    op_cheap_call,
]
# The operation each builder makes (``--ops`` builds only those asked for: a builder's fixtures cost time
# and some, e.g. the kernel's NVRTC compile, need more of the driver than others).
OP_NAMES = {
    op_stream: "stream_create_close",
    op_event: "event_create_close",
    op_event_record_query: "event_record_query",
    op_alloc: "alloc_async_256B",
    op_pinned: "pinned_alloc_256B",
    op_h2d: "h2d_copy_4B",
    op_switch: "switch_restore_event",
    op_graph_build: "graph_build_16",
    op_graph_launch: "graph_instantiate_launch_16",
    op_launch: "kernel_launch_empty",
    op_cheap_call: "cheap_call_ctx_get_current",
}


# --- timing -----------------------------------------------------------------------------


def _batch(fn: Callable[[], object], n: int) -> int:
    loop = itertools.repeat(None, n)
    start = time.perf_counter_ns()
    for _ in loop:
        fn()
    return time.perf_counter_ns() - start


def _calibrate(variant: Variant, target_ns: int) -> int:
    """Warm up and find the iteration count for a batch of about ``target_ns``."""
    assert variant.fn is not None
    if variant.prepare is not None:
        variant.prepare()
    n = 1
    while True:
        gc.disable()
        try:
            elapsed = _batch(variant.fn, n)
        finally:
            gc.enable()
        if variant.after is not None:
            variant.after()
        if elapsed >= target_ns or n >= 10_000_000:
            break
        n = max(n * 2, int(n * target_ns / max(elapsed, 1) * 1.1))
    # One more batch at the final size, discarded: the warm-up.
    gc.disable()
    try:
        _batch(variant.fn, n)
    finally:
        gc.enable()
    if variant.after is not None:
        variant.after()
    return n


def measure(op: Operation, repeats: int, target_ns: int) -> dict[str, Any]:
    live = {k: v for k, v in op.variants.items() if v.fn is not None}
    samples: dict[str, list[float]] = {k: [] for k in live}
    counts: dict[str, int] = {}
    errors: dict[str, str] = {}
    if op.setup is not None:
        op.setup()
    try:
        for kind, variant in list(live.items()):
            try:
                counts[kind] = _calibrate(variant, target_ns)
            except Exception as exc:  # noqa: BLE001 - recorded, the variant is dropped
                errors[kind] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
                del live[kind]
        for _ in range(repeats):
            for kind, variant in list(live.items()):
                assert variant.fn is not None
                if variant.prepare is not None:
                    variant.prepare()
                gc.collect()
                gc.disable()
                try:
                    elapsed = _batch(variant.fn, counts[kind])
                except Exception as exc:  # noqa: BLE001 - recorded, the variant is dropped
                    errors[kind] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
                    del live[kind]
                    continue
                finally:
                    gc.enable()
                if variant.after is not None:
                    variant.after()
                samples[kind].append(elapsed / counts[kind])
    finally:
        if op.teardown is not None:
            op.teardown()
        for variant in op.variants.values():
            if variant.cleanup is not None:
                try:
                    variant.cleanup()
                except Exception as exc:  # noqa: BLE001 - cleanup of a benchmark fixture
                    print(f"warning: cleanup of {op.name} failed: {exc}", file=sys.stderr)

    result: dict[str, Any] = {"description": op.description}
    kinds = list(dict.fromkeys([*KINDS, *op.variants]))
    for kind in kinds:
        values = samples.get(kind) or []
        result[f"{kind}_ns"] = round(statistics.median(values), 1) if kind in live and values else None
    raw = result["raw_ns"]
    raw_samples = samples.get("raw") or []
    for kind in kinds[1:]:
        value = result[f"{kind}_ns"]
        paired = [v / r for v, r in zip(samples.get(kind) or [], raw_samples, strict=False) if r]
        if value is None or not raw:
            result[f"{kind}_ratio"] = None
        elif paired:
            # Each repeat's batch against the raw batch of the same repeat (they ran back to back), then the
            # median: a slow phase of the machine that spans a repeat slows both sides of the ratio alike.
            result[f"{kind}_ratio"] = round(statistics.median(paired), 3)
            result.setdefault("ratios_per_repeat", {})[kind] = [round(x, 3) for x in paired]
            # The ratio of the ns medians can disagree when the machine changed phase during the run (bimodal
            # samples: each median may come from another phase); then only the paired ratio compares like with like.
            of_medians = value / raw
            if abs(of_medians - result[f"{kind}_ratio"]) > 0.1 * result[f"{kind}_ratio"]:
                result.setdefault("phase_warnings", {})[kind] = (
                    f"ratio of the ns medians {of_medians:.2f}, paired ratio {result[f'{kind}_ratio']:.2f}: "
                    f"raw samples {min(raw_samples):,.0f}-{max(raw_samples):,.0f} ns (phases); the paired ratio counts"
                )
        else:
            result[f"{kind}_ratio"] = round(value / raw, 3)
    result["target_ratio"] = TARGETS.get(op.name)
    result["pure_target_ratio"] = PURE_TARGETS.get(op.name)
    result["fast_target_ratio"] = FAST_TARGETS.get(op.name)
    result["iterations_per_repeat"] = counts
    result["samples_ns"] = {k: [round(x, 1) for x in v] for k, v in samples.items() if v}
    notes = {k: v.reason for k, v in op.variants.items() if v.reason}
    notes.update({f"{k}_note": v.note for k, v in op.variants.items() if v.note and v.fn is not None})
    notes.update({f"{k}_traceback": v.note for k, v in op.variants.items() if v.note and v.fn is None})
    notes.update({f"{k}_error": msg for k, msg in errors.items()})
    if notes:
        result["notes"] = notes
    return result


def call_overhead_ns(repeats: int, target_ns: int) -> float:
    """What the timing loop itself costs per call of an empty function (included in every figure)."""

    def nothing() -> None:
        return None

    variant = Variant(nothing)
    n = _calibrate(variant, target_ns)
    return round(statistics.median(_batch(nothing, n) / n for _ in range(repeats)), 1)


# --- profiling ----------------------------------------------------------------------------


def profile(op: Operation, which: str = "cuguard", seconds: float = 0.3, top: int = 10) -> list[dict[str, Any]] | str:
    variant = op.variants.get(which)
    if variant is None or variant.fn is None:
        return f"no {which} variant"
    fn = variant.fn
    if op.setup is not None:
        op.setup()
    if variant.prepare is not None:
        variant.prepare()
    try:
        n = 1
        while True:
            start = time.perf_counter()
            _batch(fn, n)
            if variant.after is not None:
                variant.after()
            if time.perf_counter() - start > seconds / 4 or n > 1_000_000:
                break
            n *= 2
        n *= 4
        profiler = cProfile.Profile()
        profiler.enable()
        _batch(fn, n)
        profiler.disable()
        if variant.after is not None:
            variant.after()
    finally:
        if op.teardown is not None:
            op.teardown()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename == __file__ or ncalls == 0 or name.startswith("<method 'disable'"):
            continue
        short = filename
        for marker in ("/src/", "site-packages/"):
            if marker in filename:
                short = filename.split(marker, 1)[1]
                break
        rows.append(
            {
                "function": f"{short}:{line}({name})",
                "calls_per_op": round(ncalls / n, 2),
                "tottime_ns_per_op": round(tottime / n * 1e9, 1),
                "cumtime_ns_per_op": round(cumtime / n * 1e9, 1),
            }
        )
    rows.sort(key=lambda r: -r["tottime_ns_per_op"])
    return rows[:top]


# --- machine and versions -------------------------------------------------------------------


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def describe(env: Env) -> tuple[dict[str, Any], dict[str, Any]]:
    D = env.D
    machine: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    with contextlib.suppress(Exception):
        machine["gpu"] = env.dev.name
    with contextlib.suppress(Exception):
        machine["compute_capability"] = ".".join(map(str, env.dev.compute_capability))
    with contextlib.suppress(Exception):
        err, version = D.cuDriverGetVersion()
        if not err:
            machine["cuda_driver_version"] = f"{int(version) // 1000}.{int(version) % 1000 // 10}"
            machine["cuda_driver_version_int"] = int(version)
    if not env.simulated:
        with contextlib.suppress(Exception):
            import subprocess

            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            ).stdout.strip()
            if out:
                machine["nvidia_smi"] = out.splitlines()[0]
    import cuda.bindings

    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "cuda_bindings": getattr(cuda.bindings, "__version__", None) or _dist_version("cuda-bindings"),
        "cuda_core": None,
        "numpy": _dist_version("numpy"),
        "cuguard": {},
        "cuguard_compiled": {},  # which build of each layer this process runs (its `compiled` flag)
    }
    if env.core is not None:
        versions["cuda_core"] = getattr(env.core, "__version__", None) or _dist_version("cuda-core")
    for layer in ("errors", "context", "resources", "graphs", "testing"):
        with contextlib.suppress(Exception):
            module = __import__(f"cuguard.{layer}", fromlist=["__version__"])
            versions["cuguard"][layer] = getattr(module, "__version__", "?")
            if hasattr(module, "compiled"):
                versions["cuguard_compiled"][layer] = bool(module.compiled)
    with contextlib.suppress(Exception):
        import subprocess

        # "-dirty" when the tree measured differs from that commit (a copied tree whose repository lags it)
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=7"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if commit:
            versions["cuguard_commit"] = commit
    return machine, versions


# --- output -------------------------------------------------------------------------------


def _scrub(text: str) -> str:
    """``text`` with the machine's folders left out: paths relative to the repository, Python's as <python>."""
    for prefix, name in (
        (str(ROOT) + os.sep, ""),
        (sys.base_prefix + os.sep, "<python>/"),
        (sys.prefix + os.sep, "<python>/"),
    ):
        text = text.replace(json.dumps(prefix)[1:-1], name).replace(prefix, name)
    return text


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _met(ratio: float | None, bounds: list[float | None]) -> str:
    limits = [b for b in bounds if b is not None]
    return "-" if ratio is None or not limits else ("yes" if ratio <= min(limits) else "NO")


def table(results: dict[str, Any], simulated: bool) -> str:
    header = (
        "operation",
        "raw ns",
        "python ns",
        "python x",
        "py target",
        "py met",
        "compiled ns",
        "compiled x",
        "c target",
        "c met",
        "cuda.core ns",
        "cuda.core x",
    )
    rows = [header]
    for name, r in results.items():
        ratio, fast, core = r.get("cuguard_ratio"), r.get("cuguard_fast_ratio"), r.get("cuda_core_ratio")
        pure_target, fast_target = r.get("pure_target_ratio"), r.get("fast_target_ratio")
        rows.append(
            (
                name,
                _fmt(r.get("raw_ns")),
                _fmt(r.get("cuguard_ns")),
                _fmt(ratio, 2),
                _fmt(pure_target, 2),
                _met(ratio, [pure_target]),
                _fmt(r.get("cuguard_fast_ns")),
                _fmt(fast, 2),
                _fmt(fast_target, 2),
                _met(fast, [fast_target, core]),
                _fmt(r.get("cuda_core_ns")),
                _fmt(core, 2),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(widths[i]) for i, cell in enumerate(row) if i]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    diagnostics = []
    for name, r in results.items():
        parts = [f"{kind} {r[f'{kind}_ratio']:.2f}" for kind in DIAGNOSTICS if r.get(f"{kind}_ratio") is not None]
        if parts:
            python, fast = r.get("cuguard_ratio"), r.get("cuguard_fast_ratio")
            shown = [f"python {python:.2f}"] if python is not None else []
            shown += [f"compiled {fast:.2f}"] if fast is not None else []
            tail = f" ({', '.join(shown)})" if shown else ""
            diagnostics.append(f"  {name}: {', '.join(parts)}{tail}")
    if diagnostics:
        lines.append("diagnostic variants, x as above (compiled_floor: the compiled calls alone, no cuguard objects;")
        lines.append("python_floor: the raw calls through the least pure Python an API of objects needs;")
        lines.append("contract_floor: python_floor plus the least the contract and the layering rule add;")
        lines.append("design_floor: contract_floor plus the least the seam, one source and the API add;")
        lines.append(
            "raw_user_object: raw on a graph holding a CUDA user object, as an instantiated cuguard definition):"
        )
        lines.extend(diagnostics)
    for name, r in results.items():
        for kind, text in (r.get("phase_warnings") or {}).items():
            lines.append(f"phases: {name} {kind}: {text}")
    if simulated:
        lines.append("SIMULATED DRIVER: relative figures for comparing commits, not GPU numbers.")
    lines.append(
        "python: cuguard pure Python; compiled: cuguard's compiled build (same process, interleaved).\n"
        "ns: median over the repeats; x: median over the repeats of the ratio to the raw batch of the same repeat.\n"
        "py met: python x <= py target (issue 30); "
        "c met: compiled x <= min(c target, cuda.core x) where either exists"
    )
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------


def _compiled_build_status() -> dict[str, Any]:
    compiled = _compiled_build()
    if compiled is None:
        return {"installed": False}
    return {"installed": True, "version": compiled.__version__, "status": compiled.status(), "file": compiled.__file__}


@contextlib.contextmanager
def _driver(kind: str) -> Iterator[Any]:
    if kind == "real":
        from cuguard.errors import real_driver

        yield real_driver()
        return
    try:
        from cuguard.testing import simulated_driver
    except ImportError as exc:
        raise SystemExit(f"--driver sim: cuguard.testing.simulated_driver is not importable ({exc})") from None
    with simulated_driver() as sim:
        yield sim


_OFF = ("", "0", "false", "no", "off")  # CUGUARD_RACECHECK values that leave the checker off


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", choices=("real", "sim"), default="real")
    parser.add_argument("--quick", action="store_true", help="15 repeats of ~5 ms batches instead of 15 of ~25 ms")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--target-ms", type=float, default=None, help="duration of one timed batch")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: benchmarks/results/...)")
    parser.add_argument("--ops", default="", help="comma-separated operation names (default: all)")
    parser.add_argument("--profile", action="store_true", help="also cProfile the cuguard side of each operation")
    parser.add_argument(
        "--kernel",
        choices=("cubin", "ptx"),
        default="cubin",
        help="the empty kernel as an NVRTC cubin (default) or hand-written PTX (for a no-op driver library)",
    )
    parser.add_argument(
        "--racecheck", action="store_true", help="run cuguard's variants with the race checker on (its cost)"
    )
    args = parser.parse_args(argv)
    if wanted_unknown := {n.strip() for n in args.ops.split(",") if n.strip()} - set(OP_NAMES.values()):
        parser.error(f"--ops: no operation {', '.join(sorted(wanted_unknown))} (known: {', '.join(OP_NAMES.values())})")

    repeats = args.repeats or 15
    if repeats < 7:
        parser.error("--repeats must be 7 or more (the median of at least 7 repeats)")
    target_ns = int((args.target_ms or (5.0 if args.quick else 25.0)) * 1e6)
    simulated = args.driver == "sim"
    wanted = {name.strip() for name in args.ops.split(",") if name.strip()}

    started = datetime.datetime.now(datetime.UTC)
    checking = contextlib.ExitStack()
    racechecking = args.racecheck or os.environ.get("CUGUARD_RACECHECK", "").strip().lower() not in _OFF
    if racechecking:
        from cuguard.resources import racecheck

        checking.enter_context(racecheck())
    with checking, _driver(args.driver) as raw:
        env = Env(raw, simulated)
        if args.kernel == "ptx":
            env.kernel_kind = "ptx-asked"
        machine, versions = describe(env)
        overhead = call_overhead_ns(repeats, target_ns)
        results: dict[str, Any] = {}
        profiles: dict[str, Any] = {}
        for builder in BUILDERS:
            if wanted and OP_NAMES[builder] not in wanted:
                continue
            try:
                op = builder(env)
            except Exception as exc:  # noqa: BLE001 - one broken operation must not hide the others
                name = builder.__name__.removeprefix("op_")
                results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                print(f"{name}: setup failed: {exc}", file=sys.stderr)
                continue
            print(f"measuring {op.name} ...", file=sys.stderr, flush=True)
            if args.profile:
                try:
                    profiles[op.name] = profile(op)
                    if op.variants.get("cuguard_fast") is not None:
                        profiles[op.name + " (compiled)"] = profile(op, "cuguard_fast")
                except Exception as exc:  # noqa: BLE001 - profiling is best effort
                    profiles[op.name] = f"{type(exc).__name__}: {exc}"
            results[op.name] = measure(op, repeats, target_ns)
        if env.kernel_note:
            machine["kernel_image_note"] = env.kernel_note
        env.close()

    report: dict[str, Any] = {
        "benchmark": "cuguard overhead (issues 8 and 16)",
        "date": started.isoformat(timespec="seconds"),
        "simulated": simulated,
        "racecheck": racechecking,
        "driver": "simulated (cuguard.testing)" if simulated else "real",
        "machine": machine,
        "versions": versions,
        "method": {
            "statistic": "median ns/op over repeats",
            "ratio_statistic": "median over repeats of the batch's ns/op over the raw batch's of the same repeat",
            "repeats": repeats,
            "target_batch_ms": target_ns / 1e6,
            "interleaved": True,
            "gc_during_batches": "disabled",
            "call_overhead_ns": overhead,
            "call_overhead_note": "per-op cost of the timing loop calling an empty function; included in every figure",
            "kernel_image": env.kernel_kind or None,
        },
        "targets": TARGETS,
        "pure_targets": PURE_TARGETS,
        "fast_targets": FAST_TARGETS,
        "compiled": _compiled_build_status(),
        "operations": results,
    }
    if profiles:
        report["profile_cuguard"] = profiles
    out = args.out
    if out is None:
        stamp = started.strftime("%Y%m%dT%H%M%SZ")
        out = RESULTS / f"overhead-{'sim' if simulated else 'gpu'}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_scrub(json.dumps(report, indent=2)) + "\n", encoding="utf-8")

    if profiles:
        for name, rows in profiles.items():
            print(f"\nprofile (cuguard) {name}:")
            if isinstance(rows, str):
                print(f"  {rows}")
                continue
            for row in rows:
                print(
                    f"  {row['tottime_ns_per_op']:>9,.0f} ns tot {row['cumtime_ns_per_op']:>9,.0f} ns cum "
                    f"{row['calls_per_op']:>5} calls  {row['function']}"
                )
    print()
    print(f"wrote {out.name}")
    print(
        f"machine: {machine.get('gpu', '?')}, driver {machine.get('cuda_driver_version', '?')}; versions: "
        f"python {versions['python']}, cuda-bindings {versions['cuda_bindings']}, cuda-core {versions['cuda_core']}"
    )
    print(table(results, simulated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
