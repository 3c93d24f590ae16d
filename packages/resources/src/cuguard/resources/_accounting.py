"""What memory cuguard holds now, for users to assert on: :func:`memory_in_use`."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass

from cuguard.resources._memory import Buffer, PinnedBuffer

__all__ = ["MemoryRecord", "MemoryReport", "memory_in_use"]


@dataclass(frozen=True)
class MemoryRecord:
    """One live allocation: what kind, where, how big, and who allocated it.

    ``kind`` is ``"device"`` (a :class:`Buffer`) or ``"pinned"`` (a
    :class:`PinnedBuffer`); ``device`` the ordinal of the device holding it
    (``None`` for host memory); ``address`` its address; ``source`` the
    ``repr`` of the memory resource that allocated it, or the factory
    (``"Device.allocate"``, ``"Device.allocate_pinned"``). The record holds no
    reference to the buffer.
    """

    kind: str
    device: int | None
    address: int
    size: int
    source: str

    def __str__(self) -> str:
        where = "host" if self.device is None else f"device {self.device}"
        return f"{self.size} bytes of {self.kind} memory at {self.address:#x} on {where}, from {self.source}"


@dataclass(frozen=True)
class MemoryReport:
    """The live memory cuguard allocated and has not freed, at one moment (:func:`memory_in_use`).

    Falsy when nothing is held. ``total`` is the bytes held, ``by_device``
    and ``by_source`` the same split by device ordinal (``None``: host) and by
    allocator. Iterating gives the :class:`MemoryRecord` entries.
    """

    records: tuple[MemoryRecord, ...]

    @property
    def total(self) -> int:
        """Bytes held."""
        return sum(record.size for record in self.records)

    @property
    def by_device(self) -> dict[int | None, int]:
        """Bytes held per device ordinal (``None`` for host memory)."""
        out: dict[int | None, int] = {}
        for record in self.records:
            out[record.device] = out.get(record.device, 0) + record.size
        return out

    @property
    def by_source(self) -> dict[str, int]:
        """Bytes held per allocator (a memory resource's ``repr``, or the factory's name)."""
        out: dict[str, int] = {}
        for record in self.records:
            out[record.source] = out.get(record.source, 0) + record.size
        return out

    def __iter__(self) -> Iterator[MemoryRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __bool__(self) -> bool:
        return bool(self.records)

    def __str__(self) -> str:
        if not self.records:
            return "no cuguard memory in use"
        lines = [f"{self.total} bytes of cuguard memory in use in {len(self.records)} allocations:"]
        lines += [f"  {record}" for record in self.records]
        return "\n".join(lines)


def _held(obj: Buffer | PinnedBuffer) -> bool:
    try:
        if not obj._owned or obj._context._closed:
            return False  # memory made elsewhere, or leaked with its context / of an uninstalled driver
        return not obj._closed or obj._release_deferred
    except AttributeError:  # construction never finished
        return False


def memory_in_use(*, collect: bool = True) -> MemoryReport:
    """The memory cuguard allocated in this process and has not freed: every live owned buffer.

    Covers :class:`Buffer` and :class:`PinnedBuffer` objects from every
    allocator (``Device.allocate``, ``Device.allocate_pinned``, each memory
    resource, imported IPC buffers) whose memory is not freed yet, including
    memory whose free waits for a CUDA graph (W5). Memory made elsewhere and
    wrapped, and memory already leaked (a refused release, a destroyed
    context: see ``MemoryResource.leaked``), are not in it. With ``collect``
    (the default) garbage is collected first, so that unreachable buffers are
    freed rather than reported. It asks no driver; it walks the objects the
    garbage collector tracks, so it is meant for tests and diagnostics, not
    hot paths.
    """
    if collect:
        gc.collect()
    records: list[MemoryRecord] = []
    for obj in gc.get_objects():
        if isinstance(obj, (Buffer, PinnedBuffer)):
            if not _held(obj):
                continue
            mr = obj._mr
            if isinstance(obj, Buffer):
                source = repr(mr) if mr is not None else "Device.allocate"
                records.append(MemoryRecord("device", obj._device, int(obj._handle), obj._size, source))
            else:
                source = repr(mr) if mr is not None else "Device.allocate_pinned"
                records.append(MemoryRecord("pinned", None, int(obj._handle), obj._size, source))
    records.sort(key=lambda r: (r.kind, -1 if r.device is None else r.device, r.address))
    return MemoryReport(tuple(records))
