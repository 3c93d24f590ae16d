"""What user code asks the simulated driver around cuguard's calls.

Primary-context state, flags and reset, context flags, PCI bus ids, function
attributes, and the allocation functions cuguard itself does not call
(``cuMemAllocManaged``, ``cuMemAllocPitch``). :class:`SimQueries` builds on
:class:`~cuguard.testing._sim.core.SimCore`; the rules it follows, and where
each comes from, are in :mod:`cuguard.testing._sim.facts`.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.attributes import PCI_BUSES
from cuguard.testing._sim.base import OK, SUCCESS, Status, api
from cuguard.testing._sim.core import SimCore
from cuguard.testing._sim.facts import (
    FUNCTION_ATTRIBUTE_DEFAULTS,
    MANAGED_ATTACH_FLAGS,
    PITCH_ALIGNMENT,
    PITCH_ELEMENT_SIZES,
    context_flags_valid,
)

__all__ = ["SimQueries"]

R = cb.CUresult
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE

_FUNC_PREFIX = "CU_FUNC_ATTRIBUTE_"
#: The device's limit on static plus dynamic shared memory per block
#: (``CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`` of an H200).
_SHARED_OPTIN = 232448
_MAX_PITCH = 2147483647


def _function_attribute(attrib: Any) -> str:
    """The name of a ``CUfunction_attribute`` without its prefix; ``INVALID_VALUE`` if it is none."""
    try:
        member = cb.CUfunction_attribute(int(attrib))
    except ValueError:
        raise Status(INVALID_VALUE) from None
    name = str(member.name).removeprefix(_FUNC_PREFIX)
    if name not in FUNCTION_ATTRIBUTE_DEFAULTS:
        raise Status(INVALID_VALUE)  # CU_FUNC_ATTRIBUTE_MAX, or one this simulator does not know
    return name


def _enum_values(name: str) -> frozenset[int]:
    enum = getattr(cb, name, None)
    return frozenset(int(m) for m in enum) if enum is not None else frozenset({0})


def _settable(name: str, value: int, static_shared: int) -> bool:
    """Whether ``cuFuncSetAttribute`` accepts ``value`` for the attribute ``name``.

    Documented: only these attributes can be set (the others are read-only:
    ``CUDA_ERROR_INVALID_VALUE``); dynamic plus static shared memory may not
    exceed the device's opt-in limit. Assumed: the carveout is a percentage or
    -1 (the default), cluster dimensions are not negative, flags are 0 or 1,
    and enum-valued attributes take their enum's values.
    """
    if name == "MAX_DYNAMIC_SHARED_SIZE_BYTES":
        return value >= 0 and value + static_shared <= _SHARED_OPTIN
    if name == "PREFERRED_SHARED_MEMORY_CARVEOUT":
        return -1 <= value <= 100
    if name in ("REQUIRED_CLUSTER_WIDTH", "REQUIRED_CLUSTER_HEIGHT", "REQUIRED_CLUSTER_DEPTH"):
        return value >= 0
    if name == "NON_PORTABLE_CLUSTER_SIZE_ALLOWED":
        return value in (0, 1)
    if name == "CLUSTER_SCHEDULING_POLICY_PREFERENCE":
        return value in _enum_values("CUclusterSchedulingPolicy")
    if name == "SHARED_MEMORY_MODE":
        return value in _enum_values("CUsharedMemoryMode")
    return False


class SimQueries(SimCore):
    """Adds primary-context state, flags and reset, function attributes and more allocators."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # cuFuncSetAttribute's values, by function handle and attribute name.
        self._function_attributes: dict[int, dict[str, int]] = {}

    # --- primary contexts ----------------------------------------------------------------------

    @api(2)
    def cuDevicePrimaryCtxGetState(self, dev: Any) -> tuple[Any, ...]:
        """``(status, flags, active)``: the flags, and 1 while the primary context is retained.

        As on the H200: a reset leaves a retained primary context reported inactive until it is
        retained again.
        """
        ctx = self._primary[self._device(dev)]
        return (SUCCESS, ctx.flags, int(ctx.refcount > 0 and not ctx.reset))

    @api(0)
    def cuDevicePrimaryCtxSetFlags(self, dev: Any, flags: int) -> tuple[Any, ...]:
        """Set the primary context's flags, also while it is active (as the 13.x driver documents).

        The flags outlive resets; the release of the last retain forgets them (as on the H200).
        """
        ctx = self._primary[self._device(dev)]
        if not context_flags_valid(int(flags)):
            raise Status(INVALID_VALUE)
        ctx.flags = int(flags)
        return OK

    @api(0, locked=False)
    def cuDevicePrimaryCtxReset(self, dev: Any) -> tuple[Any, ...]:
        """Destroy everything of the primary context (streams, events, memory, modules).

        Everything it owned is released by the driver (gone from
        :meth:`live_objects`, not reported as a leak); using any of it
        afterwards is using a resource of a destroyed context. A retained
        primary context stays retained and usable, with the same handle and
        flags, and is reported inactive until it is retained again (as on the
        H200); one that is not retained is left as it is.
        """
        with self._lock:
            ctx = self._primary[self._device(dev)]
        self._worker.drain()  # the reset waits for the device, host functions included
        with self._lock:
            if ctx.refcount > 0:
                self._teardown(ctx)
                self._activate(ctx)
                ctx.reset = True
        return OK

    @api(1)
    def cuCtxGetFlags(self) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        # A primary context always maps host memory (CU_CTX_MAP_HOST), as the H200 reports.
        return (SUCCESS, ctx.flags | 8 if ctx.primary else ctx.flags)

    # --- devices ---------------------------------------------------------------------------------

    @api(1, locked=False)
    def cuDeviceGetPCIBusId(self, length: int, dev: Any) -> tuple[Any, ...]:
        """``domain:bus:device.function`` in hex (13 bytes with the NUL), in a buffer of ``length`` bytes."""
        ordinal = self._device(dev)
        length = int(length)
        if length <= 0:
            raise Status(INVALID_VALUE)
        text = b"%04X:%02X:00.0" % (ordinal // 8, PCI_BUSES[ordinal % 8])
        return (SUCCESS, (text[: length - 1] + b"\0").ljust(length, b" "))

    # --- functions -------------------------------------------------------------------------------

    @api(1)
    def cuFuncGetAttribute(self, attrib: Any, hfunc: Any) -> tuple[Any, ...]:
        """A function attribute: what :meth:`cuFuncSetAttribute` set, else the default of the facts."""
        fn = self._function(hfunc, "cuFuncGetAttribute")
        name = _function_attribute(attrib)
        value = self._function_attributes.get(fn.handle, {}).get(name)
        return (SUCCESS, FUNCTION_ATTRIBUTE_DEFAULTS[name] if value is None else value)

    @api(0)
    def cuFuncSetAttribute(self, hfunc: Any, attrib: Any, value: int) -> tuple[Any, ...]:
        fn = self._function(hfunc, "cuFuncSetAttribute")
        name = _function_attribute(attrib)
        if not _settable(name, int(value), FUNCTION_ATTRIBUTE_DEFAULTS["SHARED_SIZE_BYTES"]):
            raise Status(INVALID_VALUE)
        self._function_attributes.setdefault(fn.handle, {})[name] = int(value)
        return OK

    # --- memory ----------------------------------------------------------------------------------

    @api(1)
    def cuMemAllocManaged(self, bytesize: int, flags: int) -> tuple[Any, ...]:
        """Managed memory, counted as device memory of the current context's device.

        0 bytes and flags other than ``CU_MEM_ATTACH_GLOBAL`` or
        ``CU_MEM_ATTACH_HOST`` are ``CUDA_ERROR_INVALID_VALUE`` (documented).
        The memory is freed with ``cuMemFree``. The simulator does not map it
        into the host's address space: host code cannot dereference it.
        """
        size = int(bytesize)
        if size == 0 or int(flags) not in MANAGED_ATTACH_FLAGS:
            raise Status(INVALID_VALUE)
        ctx = self._require_ctx()
        alloc = self._new_device_alloc(size, ctx, ctx.device, "cuMemAllocManaged")
        return (SUCCESS, cb.CUdeviceptr(alloc.base))

    @api(2)
    def cuMemAllocPitch(self, WidthInBytes: int, Height: int, ElementSizeBytes: int) -> tuple[Any, ...]:
        """``(status, dptr, pitch)``: ``Height`` rows of ``pitch`` bytes, freed with ``cuMemFree``.

        The pitch is ``WidthInBytes`` rounded up to 512 bytes. An element size
        other than 4, 8 or 16, a width or height of 0, or a pitch above the
        device's ``MAX_PITCH`` is ``CUDA_ERROR_INVALID_VALUE``.
        """
        width, height = int(WidthInBytes), int(Height)
        if int(ElementSizeBytes) not in PITCH_ELEMENT_SIZES or width == 0 or height == 0:
            raise Status(INVALID_VALUE)
        pitch = -(-width // PITCH_ALIGNMENT) * PITCH_ALIGNMENT
        if pitch > _MAX_PITCH:
            raise Status(INVALID_VALUE)
        ctx = self._require_ctx()
        alloc = self._new_device_alloc(pitch * height, ctx, ctx.device, "cuMemAllocPitch")
        return (SUCCESS, cb.CUdeviceptr(alloc.base), pitch)
