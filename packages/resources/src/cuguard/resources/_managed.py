"""Managed memory (:class:`ManagedMemoryResource`) and legacy pinned memory (:class:`LegacyPinnedMemoryResource`).

Managed memory comes from ``cuMemAllocManaged``: one address that both the
host and the devices use, migrated by the driver. :meth:`ManagedMemoryResource.prefetch`
moves it ahead of use (``cuMemPrefetchAsync``) and :meth:`ManagedMemoryResource.advise`
tells the driver how it will be used (``cuMemAdvise``). Legacy pinned memory
comes from ``cuMemHostAlloc``, as :meth:`Device.allocate_pinned`'s does, but
through the memory-resource interface.
"""

from __future__ import annotations

from typing import Any

from cuguard.context import call_in
from cuguard.errors import driver, raise_status
from cuguard.errors.lowlevel import INT_LIMIT, int_argument, is_integer, wrong_kind
from cuguard.resources import _captures, _compat
from cuguard.resources._base import driver_types
from cuguard.resources._memory import Buffer, PinnedBuffer, _free_status, _host_free_status
from cuguard.resources._memres import DeviceBoundResource, stream_argument
from cuguard.resources._stream import Stream, as_stream

__all__ = ["LegacyPinnedMemoryResource", "ManagedMemoryResource"]

_ATTACH = {"global": 1, "host": 2}  # CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST
#: The advice ``advise`` takes, as ``CUmem_advise`` values, and whether each needs a location.
_ADVICE: dict[str, tuple[int, bool]] = {
    "set_read_mostly": (1, False),
    "unset_read_mostly": (2, False),
    "set_preferred_location": (3, True),
    "unset_preferred_location": (4, False),
    "set_accessed_by": (5, True),
    "unset_accessed_by": (6, True),
}


def _device_of(device: Any, param: str) -> Any:
    from cuguard.resources._device import Device

    if not isinstance(device, Device) and not is_integer(device):
        raise wrong_kind(param, "a Device or a device ordinal", device)
    dev = device if isinstance(device, Device) else Device(int_argument(param, device, 0, INT_LIMIT))
    dev._check_driver()  # a Device of a driver no longer installed is refused here (O3), not at first use
    return dev


def _location(location: Any) -> Any:
    """A ``CUmemLocation`` for ``"host"``, a :class:`Device` or a device ordinal."""
    from cuguard.resources._device import Device

    cu = driver_types()
    loc = cu.CUmemLocation()
    if isinstance(location, str):
        if location != "host":
            raise ValueError(f"location must be 'host', a Device or a device ordinal, not {location!r}")
        loc.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
        loc.id = 0
        return loc
    if isinstance(location, Device):
        ordinal = location.ordinal
    elif not is_integer(location):
        raise wrong_kind("location", "'host', a Device or a device ordinal", location)
    else:
        ordinal = int_argument("location", location, 0, INT_LIMIT)
    loc.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    loc.id = ordinal
    return loc


def _alloc_managed(size: int, flags: int) -> Any:
    err, ptr = driver.cuMemAllocManaged(size, flags)
    if err:
        raise_status(err, "cuMemAllocManaged")
    return ptr


def _free(ptr: Any) -> None:
    (err,) = driver.cuMemFree(ptr)
    if err:
        raise_status(err, "cuMemFree")


def _advise(ptr: Any, size: int, advice: Any, location: Any) -> None:
    err = _compat.mem_advise(ptr, size, advice, location)
    if err:
        raise_status(err, _compat.ADVISE_CALL)


class ManagedMemoryResource(DeviceBoundResource[Buffer]):
    """Managed (unified) memory of ``cuMemAllocManaged``, usable from the host and the devices.

    ``ManagedMemoryResource(device, *, attach="global")``: ``device`` (a
    :class:`~cuguard.resources.Device` or an ordinal) is the device whose
    context allocates and frees; ``attach`` is ``"global"`` (any stream may
    use the memory) or ``"host"`` (``CU_MEM_ATTACH_HOST``). Wrong kinds raise
    ``TypeError``, other values ``ValueError``, before any driver call.
    Buffers are :class:`~cuguard.resources.Buffer` objects freed with
    ``cuMemFree`` (which waits for the work that uses them); memory is not
    stream-ordered. The resource frees its buffers, so it cannot be copied
    or pickled (O1).
    """

    def __init__(self, device: Any, *, attach: str = "global") -> None:
        dev = _device_of(device, "device")
        if attach not in _ATTACH:
            raise ValueError(f"attach must be 'global' or 'host', not {attach!r}")
        super().__init__()
        self._dev = dev
        self._flags = _ATTACH[attach]

    @property
    def device_id(self) -> int:
        """The ordinal of the device whose context allocates the memory."""
        return int(self._dev.ordinal)

    @property
    def is_device_accessible(self) -> bool:
        """Always ``True``."""
        return True

    @property
    def is_host_accessible(self) -> bool:
        """Always ``True``: the host may use the memory's address directly."""
        return True

    def allocate(self, size: int, stream: Stream | None = None) -> Buffer:
        """``size`` bytes of managed memory (``cuMemAllocManaged``), in the device's context.

        A refusal raises :class:`~cuguard.errors.CUDAError` and allocates
        nothing; the current context is unchanged. ``stream`` is only checked
        (E3): managed memory is not stream-ordered. ``size`` must be an integer
        (NumPy's too) from 1 to ``2**64 - 1``: ``TypeError`` for a bool, a float or
        another object, ``ValueError`` outside that range, before the driver.
        """
        size = int_argument("size", size, 1)
        stream = stream_argument(stream)
        self._check_usable()
        context = self._dev.context
        ptr = call_in(context, _alloc_managed, _free, size, self._flags)
        return self._adopt(Buffer._made(ptr, context, self._dev.ordinal, size))

    def _free(self, buffer: Buffer, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        return buffer._release_in_context(raising, _free_status)

    def _own(self, buffer: object) -> Buffer:
        if not isinstance(buffer, Buffer):
            raise wrong_kind("buffer", "a Buffer", buffer)
        if buffer._mr is not self:
            raise ValueError(f"{buffer!r} was not allocated by {self!r}: only its own managed memory is accepted")
        if buffer._closed or buffer._context._closed:
            buffer._check_open()
        return buffer

    def prefetch(self, buffer: Buffer, location: Any, stream: Any) -> None:
        """Queue a migration of ``buffer``'s memory to ``location`` on ``stream``.

        ``location`` is ``"host"``, a :class:`~cuguard.resources.Device` or a
        device ordinal; ``stream`` a :class:`~cuguard.resources.Stream` or any
        ``__cuda_stream__`` object. A refusal raises
        :class:`~cuguard.errors.CUDAError` (nothing was queued then). A buffer
        of another resource raises ``ValueError``, wrong kinds ``TypeError``, a
        closed buffer or stream ``ResourceClosedError``, before the driver is
        asked.
        """
        if type(stream) is not Stream:
            stream = as_stream(stream, "stream")
        if not isinstance(buffer, Buffer):
            raise wrong_kind("buffer", "a Buffer", buffer)
        self._check_usable()
        buf = self._own(buffer)
        loc = _location(location)
        if stream._closed or stream._context._closed:
            stream._check_open()
        err = _compat.mem_prefetch_async(buf.handle, buf._size, loc, stream.handle)
        if err:
            raise_status(err, _compat.PREFETCH_CALL)
        if _captures._tables:
            owners = _captures.captured_into(stream)
            if owners is not None:  # captured: the graph keeps the buffer (G6, W5)
                _captures.retain(owners, (buf,))

    def advise(self, buffer: Buffer, advice: str, location: Any = None) -> None:
        """Tell the driver how ``buffer``'s memory will be used (``cuMemAdvise``).

        ``advice`` is one of ``"set_read_mostly"``, ``"unset_read_mostly"``,
        ``"set_preferred_location"``, ``"unset_preferred_location"``,
        ``"set_accessed_by"``, ``"unset_accessed_by"``; the preferred-location
        and accessed-by advice need ``location`` (``"host"``, a
        :class:`~cuguard.resources.Device` or an ordinal), the others ignore
        it. A refusal raises :class:`~cuguard.errors.CUDAError` and changes
        nothing; other advice or a missing location raise ``ValueError``,
        wrong kinds ``TypeError``, before the driver is asked.
        """
        if not isinstance(buffer, Buffer):
            raise wrong_kind("buffer", "a Buffer", buffer)
        if not isinstance(advice, str):
            raise wrong_kind("advice", "an advice name (str)", advice)
        self._check_usable()
        buf = self._own(buffer)
        if advice not in _ADVICE:
            raise ValueError(f"advice must be one of {sorted(_ADVICE)}, not {advice!r}")
        code, needs_location = _ADVICE[advice]
        if needs_location and location is None:
            raise ValueError(f"advice {advice!r} needs a location")
        loc = _location(location if needs_location else buf._device)
        call_in(buf._context, _advise, None, buf.handle, buf._size, driver_types().CUmem_advise(code), loc)


_HOST_ALLOC_PORTABLE = 0x1
_HOST_ALLOC_WRITECOMBINED = 0x4


class LegacyPinnedMemoryResource(DeviceBoundResource[PinnedBuffer]):
    """Page-locked host memory of ``cuMemHostAlloc``, through the memory-resource interface.

    ``LegacyPinnedMemoryResource(device=None, *, portable=False,
    write_combined=False)``: ``device`` (a :class:`~cuguard.resources.Device`
    or an ordinal; default: ``Device()``) is the device whose context
    allocates and frees; ``portable`` makes the memory pinned for every
    context (``CU_MEMHOSTALLOC_PORTABLE``), ``write_combined`` asks for
    write-combined memory (fast to copy to a device, slow to read on the
    host). Buffers are :class:`~cuguard.resources.PinnedBuffer` objects freed
    with ``cuMemFreeHost``; the memory is not stream-ordered. The resource
    cannot be copied or pickled (O1).
    """

    def __init__(self, device: Any = None, *, portable: bool = False, write_combined: bool = False) -> None:
        from cuguard.resources._device import Device

        dev = _device_of(Device() if device is None else device, "device")
        for name, value in (("portable", portable), ("write_combined", write_combined)):
            if not isinstance(value, bool):
                raise wrong_kind(name, "a bool", value)
        super().__init__()
        self._dev = dev
        self._flags = (_HOST_ALLOC_PORTABLE if portable else 0) | (_HOST_ALLOC_WRITECOMBINED if write_combined else 0)

    @property
    def device_id(self) -> None:
        """``None``: host memory."""
        return None

    @property
    def is_device_accessible(self) -> bool:
        """Always ``True``: devices copy to and from it (and kernels may use it through unified addressing)."""
        return True

    @property
    def is_host_accessible(self) -> bool:
        """Always ``True``."""
        return True

    def allocate(self, size: int, stream: Stream | None = None) -> PinnedBuffer:
        """``size`` bytes of pinned host memory (``cuMemHostAlloc``), in the device's context.

        A refusal raises :class:`~cuguard.errors.CUDAError` and allocates
        nothing; the current context is unchanged. ``stream`` is only checked
        (E3). ``size`` must be an integer (NumPy's too) from 1 to ``2**64 - 1``:
        ``TypeError`` for a bool, a float or another object, ``ValueError``
        outside that range, before the driver.
        """
        size = int_argument("size", size, 1)
        stream = stream_argument(stream)
        self._check_usable()
        context = self._dev.context
        address = call_in(context, _host_alloc, _host_free, size, self._flags)
        return self._adopt(PinnedBuffer._made(address, context, size))

    def _free(self, buffer: PinnedBuffer, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        return buffer._release_in_context(raising, _host_free_status)


def _host_alloc(size: int, flags: int) -> Any:
    err, address = driver.cuMemHostAlloc(size, flags)
    if err:
        raise_status(err, "cuMemHostAlloc")
    return address


def _host_free(address: Any) -> None:
    (err,) = driver.cuMemFreeHost(address)
    if err:
        raise_status(err, "cuMemFreeHost")
