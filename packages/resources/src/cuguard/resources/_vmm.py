"""Virtual memory: :class:`VirtualMemoryResource` and :class:`VirtualMemoryResourceOptions`.

A buffer of a virtual memory resource is built in steps: an address range is
reserved (``cuMemAddressReserve``), physical memory is created (``cuMemCreate``),
mapped into the range (``cuMemMap``) and made accessible (``cuMemSetAccess``).
Growing it (:meth:`VirtualMemoryResource.modify_allocation`) adds steps of the
same kinds. Every such operation is all-or-nothing: when a step fails, the
steps done before it are undone in reverse order (a failed undo is a note on
the exception, G4), so that nothing is left behind (G1) and the buffer is as it
was (G3). Release is the reverse: the context is synchronized, then every
mapping is unmapped, every physical allocation released and every address
range freed; a failure stops there and leaks the rest, reported (W1, W5),
never leaving memory freed under a mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cuguard.context import Context, call_in
from cuguard.errors import CUDAError, Transaction, driver, raise_status
from cuguard.errors.lowlevel import INT_LIMIT, SIZE_LIMIT, int_argument, is_integer, wrong_kind
from cuguard.resources._base import driver_types
from cuguard.resources._memory import Buffer
from cuguard.resources._memres import DeviceBoundResource, stream_argument
from cuguard.resources._stream import Stream

__all__ = ["VirtualMemoryResource", "VirtualMemoryResourceOptions"]

_ACCESS = {"rw": 3, "r": 1}  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE, _READ
_GRANULARITY = {"minimum": 0, "recommended": 1}  # CU_MEM_ALLOC_GRANULARITY_*


@dataclass(frozen=True)
class VirtualMemoryResourceOptions:
    """How a :class:`VirtualMemoryResource` allocates.

    - ``granularity``: ``"recommended"`` (default) or ``"minimum"``: which
      granularity of the device sizes are rounded up to;
    - ``peers``: ordinals of other devices that get access to every buffer
      (``peer_access``), besides the resource's own device (``self_access``);
    - ``self_access``, ``peer_access``: ``"rw"`` (default) or ``"r"``;
    - ``addr_align``: alignment of the reserved address ranges (a power of two;
      ``None``: the granularity);
    - ``gpu_direct_rdma``: ask for memory usable by GPUDirect RDMA.

    Wrong kinds raise ``TypeError`` and wrong values ``ValueError``, naming the
    option, when the options are made.
    """

    granularity: str = "recommended"
    peers: tuple[int, ...] = ()
    self_access: str = "rw"
    peer_access: str = "rw"
    addr_align: int | None = None
    gpu_direct_rdma: bool = False

    def __post_init__(self) -> None:
        if self.granularity not in _GRANULARITY:
            raise ValueError(f"granularity must be 'recommended' or 'minimum', not {self.granularity!r}")
        for name in ("self_access", "peer_access"):
            if getattr(self, name) not in _ACCESS:
                raise ValueError(f"{name} must be 'rw' or 'r', not {getattr(self, name)!r}")
        if not isinstance(self.peers, tuple):
            raise wrong_kind("peers", "a tuple of device ordinals", self.peers)
        for peer in self.peers:
            if not is_integer(peer):
                raise wrong_kind("peers", "a tuple of device ordinals", peer)
        object.__setattr__(self, "peers", tuple(int_argument("peers", peer, 0, INT_LIMIT) for peer in self.peers))
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"peers names a device twice: {self.peers}")
        align = self.addr_align
        if align is not None:
            if not is_integer(align):
                raise wrong_kind("addr_align", "an int power of two or None", align)
            align = int_argument("addr_align", align, 1)
            object.__setattr__(self, "addr_align", align)
            if align & (align - 1):
                raise ValueError(f"addr_align must be a power of two, not {align}")
        if not isinstance(self.gpu_direct_rdma, bool):
            raise wrong_kind("gpu_direct_rdma", "a bool", self.gpu_direct_rdma)


class _Layout:
    """What one buffer of a virtual memory resource holds (``buffer._mr_data``).

    The lists shrink as a release goes: what is left after a failed release is
    what was leaked.
    """

    __slots__ = ("mapped", "maps", "physicals", "ranges")

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []  # reserved address ranges (address, size), oldest first
        self.physicals: list[tuple[Any, int]] = []  # physical allocations (handle, size), in address order
        self.maps: list[tuple[int, int]] = []  # mappings (address, size), oldest first
        self.mapped = 0  # bytes mapped contiguously at the buffer's address


# --- driver steps (run inside the device's context); each raises CUDAError naming its call ----


def _reserve(size: int, align: int, hint: int) -> int:
    err, ptr = driver.cuMemAddressReserve(size, align, hint, 0)
    if err:
        raise_status(err, "cuMemAddressReserve")
    return int(ptr)


def _address_free(address: int, size: int) -> None:
    (err,) = driver.cuMemAddressFree(address, size)
    if err:
        raise_status(err, "cuMemAddressFree")


def _create(size: int, prop: Any) -> Any:
    err, handle = driver.cuMemCreate(size, prop, 0)
    if err:
        raise_status(err, "cuMemCreate")
    return handle


def _mem_release(handle: Any) -> None:
    (err,) = driver.cuMemRelease(handle)
    if err:
        raise_status(err, "cuMemRelease")


def _map(address: int, size: int, handle: Any) -> None:
    (err,) = driver.cuMemMap(address, size, 0, handle, 0)
    if err:
        raise_status(err, "cuMemMap")


def _unmap(address: int, size: int) -> None:
    (err,) = driver.cuMemUnmap(address, size)
    if err:
        raise_status(err, "cuMemUnmap")


def _set_access(address: int, size: int, descs: list[Any]) -> None:
    (err,) = driver.cuMemSetAccess(address, size, descs, len(descs))
    if err:
        raise_status(err, "cuMemSetAccess")


def _granularity(prop: Any, option: Any) -> int:
    err, value = driver.cuMemGetAllocationGranularity(prop, option)
    if err:
        raise_status(err, "cuMemGetAllocationGranularity")
    return int(value)


def _teardown(layout: _Layout, synchronize: bool = True) -> tuple[Any, str]:
    """Release everything ``layout`` holds, newest first; stop at the first refusal (the rest is leaked).

    ``synchronize`` first waits for the context's work (nothing queued may still use the memory
    once unmapped: W5); memory made by the very call that undoes it was never used, and needs no
    wait (which a capture going on in the context would refuse: G6).
    """
    if synchronize:
        (err,) = driver.cuCtxSynchronize()
        if err:
            return err, "cuCtxSynchronize"
    while layout.maps:
        address, size = layout.maps[-1]
        (err,) = driver.cuMemUnmap(address, size)
        if err:
            return err, "cuMemUnmap"
        layout.maps.pop()
    while layout.physicals:
        (err,) = driver.cuMemRelease(layout.physicals[-1][0])
        if err:
            return err, "cuMemRelease"
        layout.physicals.pop()
    while layout.ranges:
        address, size = layout.ranges[-1]
        (err,) = driver.cuMemAddressFree(address, size)
        if err:
            return err, "cuMemAddressFree"
        layout.ranges.pop()
    return 0, ""


def _undo_layout(layout: _Layout) -> None:
    """Release what ``layout`` holds, raising the first refusal (for a failed restore of the caller's context).

    The layout was made by the call being undone: no work can use it yet, so nothing is waited for.
    """
    status, call = _teardown(layout, synchronize=False)
    if status:
        raise_status(status, call)


class _Growth:
    """What a growth added, published onto the layout only once the whole call succeeded."""

    __slots__ = ("base", "maps", "physicals", "ranges")

    def __init__(self, base: int) -> None:
        self.base = base
        self.ranges: list[tuple[int, int]] = []
        self.physicals: list[tuple[Any, int]] = []
        self.maps: list[tuple[int, int]] = []


class VirtualMemoryResource(DeviceBoundResource[Buffer]):
    """Device memory through the CUDA virtual memory management API: buffers that can grow.

    ``VirtualMemoryResource(device, options=None)``: ``device`` is a
    :class:`~cuguard.resources.Device` or an ordinal, ``options`` a
    :class:`VirtualMemoryResourceOptions`. Making one asks the driver for the
    device's allocation granularity (:attr:`granularity`): a refusal raises
    :class:`~cuguard.errors.CUDAError`; wrong kinds raise ``TypeError`` (E3).

    Each buffer is an address range of its own with physical memory mapped
    into it, sizes rounded up to the granularity (``buffer.size``, and so
    :attr:`held`, count the bytes asked for). :meth:`modify_allocation` grows
    a buffer, in place when the driver reserves the addresses right after it
    (asked as a hint, which an H200 did not follow), otherwise at a
    new address (each former address stays mapped to the same memory until
    the buffer is released, so nothing that still uses it dangles). Growing
    one buffer from several threads at once is not supported. Memory is not stream-ordered: a buffer is
    released after its context is synchronized. The memory is accessible
    from the device and from ``options.peers``, not from the host. The
    resource frees its buffers, so it cannot be copied or pickled (O1).
    """

    def __init__(self, device: Any, options: VirtualMemoryResourceOptions | None = None) -> None:
        from cuguard.resources._device import Device

        if not isinstance(device, Device) and not is_integer(device):
            raise wrong_kind("device", "a Device or a device ordinal", device)
        if options is None:
            options = VirtualMemoryResourceOptions()
        elif not isinstance(options, VirtualMemoryResourceOptions):
            raise wrong_kind("options", "a VirtualMemoryResourceOptions or None", options)
        dev = device if isinstance(device, Device) else Device(int_argument("device", device, 0, INT_LIMIT))
        if dev.ordinal in options.peers:
            raise ValueError(f"options.peers names the resource's own device {dev.ordinal}")
        super().__init__()
        self._dev = dev
        self._options = options
        cu = driver_types()
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = dev.ordinal
        if options.gpu_direct_rdma:
            prop.allocFlags.gpuDirectRDMACapable = 1
        self._prop = prop
        descs = []
        for ordinal, access in [(dev.ordinal, options.self_access)] + [(p, options.peer_access) for p in options.peers]:
            desc = cu.CUmemAccessDesc()
            desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            desc.location.id = ordinal
            desc.flags = cu.CUmemAccess_flags(_ACCESS[access])
            descs.append(desc)
        self._descs = descs
        option = cu.CUmemAllocationGranularity_flags(_GRANULARITY[options.granularity])
        self._granularity = call_in(dev.context, _granularity, None, prop, option)
        self._align = options.addr_align or 0

    # --- properties -----------------------------------------------------------------------

    @property
    def device_id(self) -> int:
        """The ordinal of the device the physical memory is on."""
        return self._dev.ordinal

    @property
    def is_device_accessible(self) -> bool:
        """Always ``True``: kernels and copies on the device (and on ``options.peers``) use the memory."""
        return True

    @property
    def is_host_accessible(self) -> bool:
        """Always ``False``: the host cannot dereference the memory."""
        return False

    @property
    def granularity(self) -> int:
        """The granularity sizes are rounded up to (bytes), as the driver reported it."""
        return self._granularity

    @property
    def options(self) -> VirtualMemoryResourceOptions:
        """The options the resource was made with."""
        return self._options

    @property
    def _context(self) -> Context:
        return self._dev.context

    def _round(self, size: int) -> int:
        g = self._granularity
        return (size + g - 1) // g * g

    def _rounded(self, size: object, param: str) -> tuple[int, int]:
        """``size`` checked (E3), and rounded up to the granularity; both below ``2**64`` or ``ValueError``."""
        size = int_argument(param, size, 1)
        total = self._round(size)
        if total >= SIZE_LIMIT:
            raise ValueError(
                f"{param} must be 1 or more and below 2**64 once rounded up to the granularity "
                f"({self._granularity}), not {size}"
            )
        return size, total

    # --- allocate ---------------------------------------------------------------------------

    def allocate(self, size: int, stream: Stream | None = None) -> Buffer:
        """A new buffer of ``size`` bytes (physical memory rounded up to :attr:`granularity`).

        Reserves an address range, creates physical memory, maps it and sets
        the access of the device and its peers, in the device's context. If
        any step fails, the steps before it are undone in reverse order and
        :class:`~cuguard.errors.CUDAError` naming the failed call is raised:
        nothing is left behind (G1), the current context is unchanged (G2).
        ``stream`` is accepted for the interface's sake and only checked (E3):
        the memory is not stream-ordered. ``size`` must be an integer (NumPy's
        too) above 0 whose rounded size is below ``2**64``: ``TypeError`` for a
        bool, a float or another object, ``ValueError`` out of range, before
        the driver is asked.
        """
        size, total = self._rounded(size, "size")
        stream = stream_argument(stream)
        self._check_usable()
        context = self._dev.context
        layout = call_in(context, self._build, _undo_layout, total)
        buffer = Buffer._made(driver_types().CUdeviceptr(layout.ranges[0][0]), context, self._dev.ordinal, size)
        return self._adopt(buffer, layout)

    def _build(self, total: int) -> _Layout:
        undo = Transaction()
        try:
            address = _reserve(total, self._align, 0)
            undo.append(_address_free, address, total)
            handle = _create(total, self._prop)
            undo.append(_mem_release, handle)
            _map(address, total, handle)
            undo.append(_unmap, address, total)
            _set_access(address, total, self._descs)
        except BaseException as exc:
            undo.rollback(exc)
            raise
        layout = _Layout()
        layout.ranges.append((address, total))
        layout.physicals.append((handle, total))
        layout.maps.append((address, total))
        layout.mapped = total
        return layout

    # --- grow -------------------------------------------------------------------------------

    def modify_allocation(self, buffer: Buffer, new_size: int) -> Buffer:
        """Grow ``buffer`` (a buffer of this resource) to ``new_size`` bytes; returns ``buffer``.

        The bytes already there keep their values. When the rounded size still
        fits the physical memory the buffer has, only ``buffer.size`` changes.
        Otherwise new physical memory is created and mapped after the old:
        at the addresses right after the buffer when the driver reserves
        them where asked (``buffer.ptr`` stays; the address is only a hint,
        which a driver may not follow: an H200 did not), or else in a new, larger address range
        where the old physical memory is mapped again first (``buffer.ptr``
        changes; the old address keeps showing the same memory until the
        buffer is released).

        All-or-nothing: if any step fails, the steps before it are undone in
        reverse order and :class:`~cuguard.errors.CUDAError` naming the failed
        call is raised; ``buffer`` keeps its address, size and bytes and stays
        usable (G1, G3). A ``new_size`` below ``buffer.size`` raises
        ``ValueError`` (buffers do not shrink); another kind of ``buffer``
        ``TypeError``, a buffer of another resource ``ValueError``, a closed
        one ``ResourceClosedError``, all before the driver is asked.
        """
        if not isinstance(buffer, Buffer):
            raise wrong_kind("buffer", "a Buffer", buffer)
        new_size, total = self._rounded(new_size, "new_size")
        self._check_usable()
        if buffer._mr is not self:
            raise ValueError(f"{buffer!r} was not allocated by {self!r}")
        if buffer._closed or buffer._context._closed:
            buffer._check_open()
        if new_size < buffer._size:
            raise ValueError(f"new_size {new_size} is below the buffer's size {buffer._size}: buffers do not shrink")
        layout: _Layout = buffer._mr_data  # type: ignore[assignment]
        if total > layout.mapped:
            base = int(buffer._handle)
            growth = call_in(buffer._context, self._grow, self._undo_growth, layout, base, total)
            # Published only now that every step and the restore succeeded (G5).
            layout.ranges.extend(growth.ranges)
            layout.physicals.extend(growth.physicals)
            layout.maps.extend(growth.maps)
            layout.mapped = total
            if growth.base != base:
                buffer._handle = driver_types().CUdeviceptr(growth.base)
        buffer._size = new_size
        return buffer

    def _grow(self, layout: _Layout, base: int, total: int) -> _Growth:
        needed = total - layout.mapped
        end = base + layout.mapped
        undo = Transaction()
        try:
            address = _reserve(needed, self._align, end)
            in_place = address == end
            if in_place:  # the addresses right after the buffer: grow there
                undo.append(_address_free, address, needed)
                growth = _Growth(base)
                growth.ranges.append((address, needed))
                start, offset = end, 0
            else:  # elsewhere: give those back and move to a new range that holds the whole buffer
                try:
                    _address_free(address, needed)
                except CUDAError as exc:
                    exc.add_note(f"the address range {address:#x} of {needed} bytes reserved for the growth was leaked")
                    raise
                start = _reserve(total, self._align, 0)
                undo.append(_address_free, start, total)
                growth = _Growth(start)
                growth.ranges.append((start, total))
                offset = 0
                for old, size in layout.physicals:
                    _map(start + offset, size, old)
                    undo.append(_unmap, start + offset, size)
                    growth.maps.append((start + offset, size))
                    offset += size
            handle = _create(needed, self._prop)
            undo.append(_mem_release, handle)
            new_map = (start + offset, needed)
            _map(*new_map, handle)
            undo.append(_unmap, *new_map)
            if in_place:
                _set_access(start, needed, self._descs)
            else:
                _set_access(start, total, self._descs)
        except BaseException as exc:
            undo.rollback(exc)
            raise
        growth.physicals.append((handle, needed))
        growth.maps.append(new_map)
        return growth

    @staticmethod
    def _undo_growth(growth: _Growth) -> None:
        layout = _Layout()
        layout.ranges, layout.physicals, layout.maps = growth.ranges, growth.physicals, growth.maps
        _undo_layout(layout)

    # --- release ----------------------------------------------------------------------------

    def _free_syncs_context(self, buffer: Buffer) -> bool:
        return True  # _teardown synchronizes the context before unmapping

    def _free(self, buffer: Buffer, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        layout: _Layout = buffer._mr_data  # type: ignore[assignment]
        return buffer._release_in_context(raising, lambda handle: _teardown(layout))
