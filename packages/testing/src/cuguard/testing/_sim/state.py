"""State records of the simulated driver (one small class per driver object kind)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Alloc",
    "Ctx",
    "Event",
    "Function",
    "Module",
    "Op",
    "Stream",
]


@dataclass(eq=False, slots=True)
class Op:
    """One unit of stream work that stays in flight until a sync point retires it."""

    seq: int
    refs: frozenset[int]
    call: str


@dataclass(eq=False, slots=True)
class Ctx:
    handle: int
    device: int
    primary: bool
    call: str
    refcount: int = 1
    gen: int = 1
    destroyed: bool = False
    null: Stream | None = None
    owned: set[int] = field(default_factory=set)
    flags: int = 0  # cuCtxCreate's flags; for a primary context, cuDevicePrimaryCtxSetFlags's
    reset: bool = False  # a primary context reset since its last retain: reported inactive (as on the H200)

    def alive(self, gen: int) -> bool:
        return not self.destroyed and self.gen == gen


@dataclass(eq=False, slots=True)
class Stream:
    key: int
    handle: int
    ctx: Ctx
    gen: int
    flags: int = 0
    priority: int = 0
    destroyed: bool = False
    inflight: list[Op] = field(default_factory=list)
    last_task: int = 0
    ordered_after: dict[int, int] = field(default_factory=dict)
    capture: Any = None  # the capture sequence this stream takes part in (see capture.py), or None


@dataclass(eq=False, slots=True)
class Event:
    handle: int
    ctx: Ctx
    gen: int
    flags: int
    destroyed: bool = False
    stream: Stream | None = None
    seq: int = 0
    task: int = 0
    after: dict[int, int] = field(default_factory=dict)
    time: float | None = None


@dataclass(eq=False, slots=True)
class Alloc:
    base: int
    size: int
    host: bool
    ctx: Ctx | None
    gen: int
    call: str
    data: bytearray | memoryview | None = None  # memoryview: a shareable pool's memory file
    buffer: Any = None  # the ctypes array behind host memory
    freed: bool = False
    graph_owned: bool = False

    def contains(self, addr: int) -> bool:
        return self.base <= addr < self.base + max(self.size, 1)

    def read(self, offset: int, n: int) -> bytes:
        if self.host:
            return ctypes.string_at(self.base + offset, n)
        if self.data is None:
            return bytes(n)
        return bytes(self.data[offset : offset + n])

    def write(self, offset: int, payload: bytes | bytearray | memoryview) -> None:
        n = len(payload)
        if self.host:
            ctypes.memmove(self.base + offset, bytes(payload), n)
            return
        if self.data is None:
            self.data = bytearray(self.size)
        self.data[offset : offset + n] = payload


@dataclass(eq=False, slots=True)
class Module:
    handle: int
    ctx: Ctx | None
    gen: int
    call: str
    entries: dict[str, tuple[Any, ...] | None]
    functions: dict[str, int] = field(default_factory=dict)
    unloaded: bool = False
    trivial: frozenset[str] = frozenset()  # PTX entries whose body is only ``ret;``
    library: bool = False


@dataclass(eq=False, slots=True)
class Function:
    handle: int
    module: Module
    name: str
    ctx: Ctx | None
    kernel: bool = False


HostTask = Callable[[], None]
