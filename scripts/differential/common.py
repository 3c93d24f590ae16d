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

from cuguard.testing._bindings import ctx_create

Obs = list[Any]
SCENARIOS: dict[str, Callable[[Any], Obs]] = {}
TWO_DEVICE: set[str] = set()  # scenarios that need two devices on both drivers

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
    return R(int(status)).name


def ok(result: Any) -> Any:
    """The value of a successful call (raises on failure so the scenario stops)."""
    if int(result[0]):
        raise RuntimeError(f"unexpected {name(result[0])}")
    return result[1] if len(result) == 2 else result[1:]


def must(result: Any) -> None:
    """Stop the scenario when a call that returns only a status fails."""
    if int(result[0]):
        raise RuntimeError(f"unexpected {name(result[0])}")


class Ctx:
    """A created context on device 0, destroyed on exit; the thread ends with none current."""

    def __init__(self, d: Any) -> None:
        self.d = d

    def __enter__(self) -> Any:
        self.ctx = ok(ctx_create(self.d, 0, ok(self.d.cuDeviceGet(0))))
        return self.ctx

    def __exit__(self, *exc: object) -> None:
        self.d.cuCtxSetCurrent(B.CUcontext(0))
        self.d.cuCtxDestroy(self.ctx)
        self.d.cuCtxSetCurrent(B.CUcontext(0))


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


HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


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
