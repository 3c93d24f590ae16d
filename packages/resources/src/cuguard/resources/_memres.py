"""The memory-resource interface every allocator of cuguard memory implements.

A :class:`MemoryResource` hands out buffers (:class:`~cuguard.resources.Buffer`
or :class:`~cuguard.resources.PinnedBuffer`) and frees them its own way: a
buffer remembers the resource it came from (``buffer.memory_resource``), and
its release (``close()``, ``with``, garbage collection) is carried out by that
resource while the rules of every buffer stay the same: marked released before
the driver is asked (S2), a refused release leaks the memory and says so
(S3, W1, W5), a graph that may still run keeps it (W5).

Each resource keeps count of what it holds: :attr:`MemoryResource.held` (bytes
of its live buffers), :attr:`MemoryResource.buffers` (those buffers) and
:attr:`MemoryResource.leaked` (bytes whose release failed or could not be
attempted). The accounting holds buffers weakly: it never keeps one alive.
A resource is the one owner of that account: copying or pickling it raises
``TypeError`` (O1); share the object itself.
"""

from __future__ import annotations

import abc
import weakref
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

from cuguard.errors import ResourceClosedError
from cuguard.errors.lowlevel import Unique, wrong_kind
from cuguard.resources import _captures
from cuguard.resources._memory import Buffer, PinnedBuffer
from cuguard.resources._stream import Stream

if TYPE_CHECKING:
    from cuguard.resources._device import Device

__all__ = ["MemoryResource"]

B = TypeVar("B", Buffer, PinnedBuffer)


def stream_argument(stream: object) -> Stream | None:
    """The ``stream`` argument of a memory resource's method: ``None``, or an open :class:`Stream`.

    Any ``__cuda_stream__`` object is accepted (:func:`~cuguard.resources.as_stream`); another
    kind raises ``TypeError`` naming ``stream`` (E3), a closed stream (or one of a destroyed
    context or an uninstalled driver) ``ResourceClosedError``, before the driver is asked.
    """
    if stream is None:
        return None
    if type(stream) is not Stream:
        from cuguard.resources._stream import as_stream

        stream = as_stream(stream, "stream")
    assert isinstance(stream, Stream)
    if stream._closed or stream._context._closed:
        stream._check_open()
    return stream


class MemoryResource(Unique, abc.ABC, Generic[B]):
    """A source of memory: :meth:`allocate` hands out buffers, :meth:`deallocate` frees them.

    Subclasses implement :meth:`allocate` (publishing each new buffer with
    :meth:`_adopt`), the three properties :attr:`device_id`,
    :attr:`is_device_accessible` and :attr:`is_host_accessible`, and
    :meth:`_free` (the driver calls that free one buffer of theirs).

    Accounting: :attr:`held` is what the resource holds now (bytes of the
    buffers it allocated that are not freed yet, including those whose free
    waits for a CUDA graph to let go of them, W5); :attr:`leaked` the bytes of
    its buffers whose release the driver refused, or that could not be
    released because their context was destroyed first (they are no longer
    held, and never freed: W5).
    """

    _live: weakref.WeakKeyDictionary[Any, None]
    _leaked: int
    #: How many buffers this resource allocated are not released yet. A plain count, not the weak
    #: accounting: garbage collection clears the weak references of a cycle before it runs any
    #: release, so a resource collected together with its buffers must still see them (O6).
    _outstanding: int

    def __init__(self) -> None:
        self._live = weakref.WeakKeyDictionary()
        self._leaked = 0
        self._outstanding = 0

    # --- the interface -----------------------------------------------------------------

    @abc.abstractmethod
    def allocate(self, size: int, stream: Stream | None = None) -> B:
        """Allocate ``size`` bytes; with ``stream``, ordered on it (if the resource is stream-ordered).

        Raises :class:`~cuguard.errors.CUDAError` if the driver refuses
        (nothing is allocated then), ``TypeError``/``ValueError`` for a bad
        ``size`` or ``stream`` before the driver is asked (E3).
        """

    def deallocate(self, buffer: B, stream: Stream | None = None) -> None:
        """Free ``buffer``, a buffer this resource allocated: ``buffer.close(stream)``.

        Another kind of object raises ``TypeError``, a resource that refuses
        use (closed, or of a driver no longer installed)
        ``ResourceClosedError``, and a buffer of another resource
        ``ValueError``, before anything is freed. The rest is
        ``close()``'s rules: with ``stream`` stream-ordered memory is freed on
        it; a refused free raises :class:`~cuguard.errors.CUDAError` and the
        memory is leaked, never freed twice. Idempotent.
        """
        if not isinstance(buffer, (Buffer, PinnedBuffer)):
            raise wrong_kind("buffer", "a Buffer or a PinnedBuffer", buffer)
        stream = stream_argument(stream)
        self._check_usable()
        if buffer._mr is not self:
            raise ValueError(f"{buffer!r} was not allocated by {self!r}")
        buffer.close(stream)

    @property
    @abc.abstractmethod
    def device_id(self) -> int | None:
        """The ordinal of the device the memory lives on or belongs to; ``None`` for host-only memory."""

    @property
    @abc.abstractmethod
    def is_device_accessible(self) -> bool:
        """Whether kernels and copies on the device can use the memory."""

    @property
    @abc.abstractmethod
    def is_host_accessible(self) -> bool:
        """Whether the host can read and write the memory directly."""

    # --- accounting --------------------------------------------------------------------

    @property
    def buffers(self) -> tuple[B, ...]:
        """The live buffers this resource allocated and has not freed yet (oldest first)."""
        return tuple(buf for buf in list(self._live) if not buf._closed or buf._release_deferred)

    @property
    def held(self) -> int:
        """Bytes of the live buffers this resource allocated and has not freed yet."""
        total: int = sum(buf._size for buf in self.buffers)
        return total

    @property
    def leaked(self) -> int:
        """Bytes of this resource's buffers that were leaked (a refused release, or a destroyed context).

        A buffer closed for use whose free waits (for a graph to let go of it, or for a capture to
        end, G6) is not leaked: it is freed when that wait is over.
        """
        waiting = _captures.waiting_ids()
        gone: int = sum(
            buf._size
            for buf in list(self._live)
            if buf._closed and not buf._release_deferred and id(buf) not in waiting
        )
        return self._leaked + gone

    # --- hooks for subclasses and for the buffers --------------------------------------

    def _check_usable(self) -> None:
        """Raise :class:`~cuguard.errors.ResourceClosedError` if this resource refuses use; subclasses say when."""

    def _adopt(self, buffer: B, data: object = None) -> B:
        """Make ``buffer`` (just allocated, owned) one of this resource's: its release comes here.

        ``data`` is kept on the buffer (``buffer._mr_data``) for :meth:`_free`:
        what the resource needs to free it (never looked up in the weak
        accounting, which garbage collection may have cleared first).
        """
        buffer._mr = self
        buffer._mr_data = data
        self._live[buffer] = None
        self._outstanding += 1
        return buffer

    @abc.abstractmethod
    def _free(self, buffer: B, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        """Free ``buffer`` now; return ``(status, call)`` of the step that failed, or ``(0, "")``.

        ``stream`` is the open stream an explicit close asked for (or
        ``None``); ``raising`` is true for an explicit close (switch with
        ``call_in``, may raise the refusal from inside the switch, as
        ``Resource._release_in_context`` does) and false for a collection
        (switch with ``cleanup_in``, report, never raise).
        """

    def _free_stream(self, buffer: B) -> Stream | None:
        """The stream :meth:`_free` of ``buffer`` without a stream queues the free on, or None (not stream-ordered)."""
        return None

    def _free_syncs_context(self, buffer: B) -> bool:
        """Whether :meth:`_free` of ``buffer`` without a stream calls ``cuCtxSynchronize`` (its collection then waits
        for the captures of its context cuguard knows of, ``_captures.capture_began``)."""
        return False

    def _release_buffer(self, buffer: B, stream: Stream | None, raising: bool) -> tuple[Any, str]:
        """Called by a buffer's release (explicit or on collection): free it and keep the count."""
        self._live.pop(buffer, None)
        self._outstanding -= 1
        try:
            status, call = self._free(buffer, stream, raising)
        except BaseException:
            self._leaked += buffer._size
            raise
        if status:
            self._leaked += buffer._size
        return status, call

    def _refuse_copy(self) -> NoReturn:
        name = type(self).__name__
        raise TypeError(
            f"{name} objects cannot be copied or pickled: each is the one owner of what it allocated (the "
            f"account of its buffers, and for a pool its handle), which a copy would split; share the object itself"
        )

    def __repr__(self) -> str:
        device = "host" if self.device_id is None else f"device {self.device_id}"
        return f"<{type(self).__name__} {device}>"


class DeviceBoundResource(MemoryResource[B]):
    """A resource that holds no driver object of its own, only its device (``self._dev``).

    It is usable while that device's driver is installed: after the driver was uninstalled (a
    simulator of an earlier test), every use raises
    :class:`~cuguard.errors.ResourceClosedError` naming the resource, before any driver call (O3).
    The managed, legacy pinned and virtual memory resources are of this kind.
    """

    _dev: Device

    def _check_usable(self) -> None:
        try:
            self._dev._check_driver()
        except ResourceClosedError:
            raise ResourceClosedError(
                f"{self!r} cannot be used: its {self._dev!r} belongs to a CUDA driver that is no longer "
                f"installed; make a new resource for Device({self._dev.ordinal})"
            ) from None
