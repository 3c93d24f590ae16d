"""Initialization, the driver version, error strings and devices of the simulated driver.

:class:`SimDevices` builds on :class:`~cuguard.testing._sim.base.SimBase`.
"""

from __future__ import annotations

import ctypes
from typing import Any

from cuda.bindings import driver as cb

from cuguard.errors import error_description, error_name
from cuguard.testing._sim.attributes import PCI_BUS_ID, PCI_BUSES, PCI_DOMAIN_ID
from cuguard.testing._sim.base import (
    INVALID_VALUE,
    OK,
    SUCCESS,
    R,
    SimBase,
    Status,
    api,
)
from cuguard.testing._sim.facts import DRIVER_VERSION

__all__ = ["SimDevices"]


class SimDevices(SimBase):
    """``cuInit``, ``cuDriverGetVersion``, ``cuGetError*`` and the device queries (an H200 each)."""

    @api(0)
    def cuInit(self, Flags: int) -> tuple[Any, ...]:
        """Initialize the driver (``Flags`` must be 0, else CUDA_ERROR_INVALID_VALUE)."""
        if int(Flags) != 0:
            raise Status(INVALID_VALUE)
        self._initialized = True
        self._regate()
        return OK

    @api(1, locked=False)
    def cuDriverGetVersion(self) -> tuple[Any, ...]:
        return (SUCCESS, DRIVER_VERSION)

    @api(1, locked=False)
    def cuGetErrorName(self, error: Any) -> tuple[Any, ...]:
        try:
            code = R(int(error))
        except ValueError:
            raise Status(INVALID_VALUE) from None
        return (SUCCESS, error_name(int(code)).encode())

    @api(1, locked=False)
    def cuGetErrorString(self, error: Any) -> tuple[Any, ...]:
        try:
            code = R(int(error))
        except ValueError:
            raise Status(INVALID_VALUE) from None
        return (SUCCESS, error_description(int(code)).encode())

    # --- devices ---------------------------------------------------------------------------------

    @api(1, locked=False)
    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return (SUCCESS, self._devices)

    @api(1, locked=False)
    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUdevice(self._device(ordinal)))

    @api(1, locked=False)
    def cuDeviceGetName(self, length: int, dev: Any) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        name = b"NVIDIA H200 (simulated %d)" % ordinal
        length = int(length)
        if length == 0:
            # The H200's driver writes the name into cuda-bindings' empty buffer: SIGSEGV.
            raise self._crash("cuDeviceGetName", "a name buffer of 0 bytes (the real driver writes past it)")
        if length < 0:
            raise Status(INVALID_VALUE)
        raw = (name[: length - 1] + b"\0").ljust(length, b" ")
        return (SUCCESS, raw)

    @api(1, locked=False)
    def cuDeviceGetAttribute(self, attrib: Any, dev: Any) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        key = int(attrib)
        if key in (PCI_BUS_ID, PCI_DOMAIN_ID):
            return (SUCCESS, PCI_BUSES[ordinal % 8] if key == PCI_BUS_ID else ordinal // 8)
        value = self._attributes.get(key)
        if value is None:
            try:
                member = cb.CUdevice_attribute(key)
            except ValueError:
                raise Status(INVALID_VALUE) from None
            if member.name == "CU_DEVICE_ATTRIBUTE_MAX":
                raise Status(INVALID_VALUE)
            value = 0
        return (SUCCESS, value)

    @api(1, locked=False)
    def cuDeviceTotalMem(self, dev: Any) -> tuple[Any, ...]:
        self._device(dev)
        return (SUCCESS, self._memory_per_device)

    @api(1, locked=False)
    def cuDeviceGetUuid(self, dev: Any) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        uuid = cb.CUuuid()
        ctypes.memmove(uuid.getPtr(), b"cuguard-sim-" + ordinal.to_bytes(4, "big"), 16)  # one per device
        return (SUCCESS, uuid)
