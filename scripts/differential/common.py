"""What the scenarios share: the registry, status names, the set-up they begin with, host functions.

A scenario is a function of the driver (``cuda.bindings.driver`` or a ``SimulatedDriver``) that
returns its observations, registered with :func:`scenario` (or :func:`two_devices` when it needs
a second device on both drivers).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as B

from cuguard.testing.lowlevel import ctx_create

Obs = list[Any]
SCENARIOS: dict[str, Callable[[Any], Obs]] = {}
TWO_DEVICE: set[str] = set()  # scenarios that need two devices on both drivers
HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

R = B.CUresult


PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty() { ret; }
\x00"""


def scenario(fn: Callable[[Any], Obs]) -> Callable[[Any], Obs]:
    SCENARIOS[fn.__name__] = fn
    return fn


def name(status: Any) -> str:
    """The name of a ``CUresult``."""
    return str(R(int(status)).name)


def ok(result: Any) -> Any:
    """The value of a successful call (raises on failure so the scenario stops)."""
    if int(result[0]):
        raise RuntimeError(f"unexpected {name(result[0])}")
    return result[1] if len(result) == 2 else result[1:]


def must(result: Any) -> None:
    """Stop the scenario when a call that returns only a status fails."""
    if int(result[0]):
        raise RuntimeError(f"unexpected {name(result[0])}")


class Setup:
    """The set-up most scenarios begin with: a context of their own made current, and what they make in it.

    ``with Setup(d) as env`` creates a context on device 0 (on ``device``) and makes it current
    (``env.ctx``); ``Setup(d, primary=True)`` retains the device's primary context and makes it
    current instead. ``env.stream()``, ``env.event()``, ``env.alloc()`` and ``env.kernel()`` make
    a stream, an event, device memory and the empty kernel of :data:`PTX` in the order the scenario
    asks for them. On exit each is released, the last made first, with the context current as the
    scenario leaves it and without looking at the statuses (the scenario has observed what it
    compares, and a failed scenario is reported by its exception); then the context is destroyed
    (or released) and the thread is left with none current. What a scenario releases itself, to
    observe the release, it makes itself.
    """

    def __init__(self, d: Any, *, device: int = 0, primary: bool = False) -> None:
        self.d = d
        self.device = device
        self.primary = primary
        self._undo: list[Callable[[], object]] = []

    def __enter__(self) -> Setup:
        d = self.d
        self.dev = ok(d.cuDeviceGet(self.device))
        if self.primary:
            self.ctx = ok(d.cuDevicePrimaryCtxRetain(self.dev))
            must(d.cuCtxSetCurrent(self.ctx))
        else:
            self.ctx = ok(ctx_create(d, 0, self.dev))
        return self

    def __exit__(self, *exc: object) -> None:
        d = self.d
        while self._undo:
            self._undo.pop()()
        d.cuCtxSetCurrent(B.CUcontext(0))
        if self.primary:
            d.cuDevicePrimaryCtxRelease(self.dev)
        else:
            d.cuCtxDestroy(self.ctx)
            d.cuCtxSetCurrent(B.CUcontext(0))

    def stream(self, flags: int = 0) -> Any:
        """A stream (``cuStreamCreate`` with ``flags``), destroyed on exit."""
        s = ok(self.d.cuStreamCreate(flags))
        self._undo.append(lambda: self.d.cuStreamDestroy(s))
        return s

    def event(self, flags: int = 0) -> Any:
        """An event (``cuEventCreate`` with ``flags``), destroyed on exit."""
        ev = ok(self.d.cuEventCreate(flags))
        self._undo.append(lambda: self.d.cuEventDestroy(ev))
        return ev

    def alloc(self, size: int) -> Any:
        """``size`` bytes of device memory (``cuMemAlloc``), freed on exit."""
        p = ok(self.d.cuMemAlloc(size))
        self._undo.append(lambda: self.d.cuMemFree(p))
        return p

    def kernel(self) -> Any:
        """The ``empty`` kernel of :data:`PTX` (its module loaded with ``cuModuleLoadData``), unloaded on exit."""
        mod = ok(self.d.cuModuleLoadData(PTX))
        self._undo.append(lambda: self.d.cuModuleUnload(mod))
        return ok(self.d.cuModuleGetFunction(mod, b"empty"))


class HostFunction:
    """A Python callable as a ``CUhostFn`` (``handle``); the object keeps its C thunk alive."""

    def __init__(self, fn: Callable[[Any], object]) -> None:
        self.thunk = HOSTFN(fn)
        self.handle = B.CUhostFn(ctypes.cast(self.thunk, ctypes.c_void_p).value)


def two_devices(fn: Callable[[Any], Obs]) -> Callable[[Any], Obs]:
    TWO_DEVICE.add(fn.__name__)
    return scenario(fn)


A = B.CUdevice_attribute


def status_or_raise(call: Callable[[], Any]) -> Any:
    """The status name of a call, or the name of the exception cuda-bindings raised before the driver."""
    try:
        result = call()
    except (TypeError, ValueError, OverflowError) as exc:
        return type(exc).__name__
    return name(result[0])


def release_if(d: Any, result: Any, free: str) -> str:
    """The status name of an allocation; what it allocated is freed with ``free``."""
    status = name(result[0])
    if not int(result[0]) and int(result[1]):
        getattr(d, free)(result[1])
    return status


def mem_location(kind: str, ident: int = 0) -> Any:
    loc = B.CUmemLocation()
    loc.type = getattr(B.CUmemLocationType, "CU_MEM_LOCATION_TYPE_" + kind)
    loc.id = ident
    return loc


def device_location(ident: int = 0) -> Any:
    return mem_location("DEVICE", ident)


def access_descs(devices: list[int]) -> list[Any]:
    descs = []
    for ordinal in devices:
        desc = B.CUmemAccessDesc()
        desc.location.type = B.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = ordinal
        desc.flags = B.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        descs.append(desc)
    return descs
