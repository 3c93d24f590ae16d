"""What the misuse sweep knows about the objects it plays with: the pool, value kinds, usability.

The sweep keeps every object it made in a *pool* of :class:`Entry` records (the
object, its kind, the driver it was made under and the label it has in the
trace). Values handed to parameters are drawn from the pool or made on the spot
(:data:`FOREIGN`: ``None``, numbers, strings, host buffers, plain objects,
malformed stream-protocol objects). :func:`kind_of` names the kind of any
value; :meth:`Model.unusable` says, from the driver's own state where there is a
simulator, whether an object must refuse use and why (``"stale"``: made under a
driver that is not installed, O3; ``"destroyed"``: its context was destroyed,
O4; ``"closed"``: closed, E3).

cuguard.testing may import only cuguard.errors, so the upper layers are
imported at run time (:func:`layers`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from cuguard import context, errors, graphs, resources
from cuguard.sweeps._failpoints import registry as _registry

__all__ = [
    "FOREIGN",
    "KERNELS_CU",
    "KERNELS_PTX",
    "MEMORY_RESOURCES",
    "POOLED_KINDS",
    "POOL_RESOURCES",
    "SIZE",
    "BadStream",
    "CallbackBoom",
    "Entry",
    "ForeignStream",
    "Model",
    "emulate",
    "kind_of",
    "layers",
]

#: Size of the buffers the sweep makes by default.
SIZE = 64

# The one kernel of the sweep, shared with the failure-point sweep: PTX for the simulator (which runs
# the Python emulation registered by :func:`emulate`), CUDA C++ compiled with NVRTC for a real GPU.
KERNELS_PTX = _registry.KERNELS_PTX
KERNELS_CU = _registry.KERNELS_CU

#: The memory resources: pools (which own a driver handle and close), and the others.
POOL_RESOURCES = ("DeviceMemoryResource", "PinnedMemoryResource")
MEMORY_RESOURCES = (*POOL_RESOURCES, "ManagedMemoryResource", "VirtualMemoryResource", "LegacyPinnedMemoryResource")

#: Kinds of cuguard objects the pool holds (the class names), plus the sweep's own
#: foreign objects that behave like cuguard's inputs.
POOLED_KINDS = frozenset(
    {
        "Device",
        "Context",
        "Stream",
        "Event",
        "Buffer",
        "PinnedBuffer",
        "Module",
        "Kernel",
        "LaunchConfig",
        "GraphDefinition",
        "Node",
        "Graph",
        "GraphBuilder",
        "GraphCondition",
        "ForeignStream",
        "NumpyView",
        *MEMORY_RESOURCES,
    }
)

#: Kinds that own a driver handle: copies and pickles must be refused (O1).
UNIQUE_KINDS = frozenset(
    {
        "Context",
        "Stream",
        "Event",
        "Buffer",
        "PinnedBuffer",
        "Module",
        "Kernel",
        "GraphDefinition",
        "Node",
        "Graph",
        "GraphCondition",
        "GraphBuilder",
        *MEMORY_RESOURCES,
    }
)


def layers() -> SimpleNamespace:
    """The cuguard layers the sweep explores, by name."""
    return SimpleNamespace(errors=errors, context=context, resources=resources, graphs=graphs)


class CallbackBoom(Exception):
    """Raised on purpose by the sweep's host callbacks (W6: it must reach ``sys.unraisablehook`` only)."""


class ForeignStream:
    """A stream made by "another library": a raw driver stream behind ``__cuda_stream__``.

    cuguard must accept it wherever a stream is taken (E3); it never owns it.
    """

    def __init__(self, handle: int, label: str) -> None:
        self.raw_handle = handle
        self.label = label

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.raw_handle)

    def __repr__(self) -> str:
        return f"<ForeignStream {self.label}>"


class BadStream:
    """An object whose ``__cuda_stream__`` returns garbage: refused with ``TypeError`` (E3)."""

    def __cuda_stream__(self) -> tuple[str]:
        return ("not a stream",)

    def __repr__(self) -> str:
        return "<BadStream>"


class Opaque:
    """A plain foreign object."""

    def __repr__(self) -> str:
        return "<Opaque>"


def _noop() -> None:
    return None


#: Values that are not cuguard objects, made fresh for each use: (label, factory).
FOREIGN: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("None", lambda: None),
    ("0", lambda: 0),
    ("1", lambda: 1),
    ("-1", lambda: -1),
    ("2**64", lambda: 2**64),
    ("1.5", lambda: 1.5),
    ("True", lambda: True),
    ("'text'", lambda: "text"),
    ("bytes(64)", lambda: bytes(SIZE)),
    ("bytearray(64)", lambda: bytearray(SIZE)),
    ("Opaque()", Opaque),
    ("[]", list),
    ("noop", lambda: _noop),
    ("BadStream()", BadStream),
)


def kind_of(value: Any) -> str:
    """The kind of ``value``: a cuguard class name, a sweep helper's name, or the Python type's name."""
    if value is None:
        return "None"
    name = type(value).__name__
    if name == "ndarray":
        return "NumpyView"
    if name == "function":
        return "function"
    return name


@dataclass(eq=False)
class Entry:
    """One pooled object: what it is, the driver it was made under, and its label in the trace."""

    obj: Any
    kind: str
    driver: int
    label: str
    raw: int = 0  # for contexts: the handle as an int, kept to wrap it again after it was destroyed
    base: bool = False  # made by the set-up (kept in the pool longer)


@dataclass
class Model:
    """The pool and what the sweep knows about the drivers (see the module docstring)."""

    L: SimpleNamespace = field(default_factory=layers)
    pool: list[Entry] = field(default_factory=list)
    current: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    #: per driver index: the simulated driver behind it, or None for the real driver
    sims: dict[int, Any] = field(default_factory=dict)
    #: per driver index: context handles (ints) known destroyed (real driver: by cuguard's own close)
    destroyed: dict[int, set[int]] = field(default_factory=dict)
    #: (driver index, handle) -> the created Context, weakly: on the real driver, a created context whose
    #: object was collected or closed is gone (the driver cannot be asked; switching to it aborts the process)
    created: dict[tuple[int, int], weakref.ref[Any]] = field(default_factory=dict)

    def label(self, kind: str) -> str:
        prefix = {
            "Device": "dev",
            "Context": "ctx",
            "Stream": "s",
            "Event": "ev",
            "Buffer": "buf",
            "PinnedBuffer": "pin",
            "Module": "mod",
            "Kernel": "k",
            "LaunchConfig": "cfg",
            "GraphDefinition": "g",
            "Node": "n",
            "Graph": "x",
            "GraphCondition": "cond",
            "GraphBuilder": "gb",
            "ForeignStream": "fs",
            "NumpyView": "view",
            "DeviceMemoryResource": "dmr",
            "PinnedMemoryResource": "pmr",
            "ManagedMemoryResource": "mmr",
            "VirtualMemoryResource": "vmr",
            "LegacyPinnedMemoryResource": "lmr",
        }.get(kind, "o")
        n = self.counters.get(prefix, 0)
        self.counters[prefix] = n + 1
        return f"{prefix}{n}"

    def find(self, obj: Any) -> Entry | None:
        for entry in self.pool:
            if entry.obj is obj:
                return entry
        return None

    def add(self, obj: Any, *, base: bool = False) -> Entry | None:
        """Pool ``obj`` if it is a cuguard object not pooled yet; return its entry."""
        kind = kind_of(obj)
        if kind not in POOLED_KINDS:
            return None
        found = self.find(obj)
        if found is not None:
            return found
        raw = 0
        if kind == "Context":
            raw = int(obj._int)
            if obj._kind == "created":
                self.created[(self.current, raw)] = weakref.ref(obj)
        entry = Entry(obj, kind, self._maker(obj), self.label(kind), raw, base)
        self.pool.append(entry)
        return entry

    def entries(self, *kinds: str) -> list[Entry]:
        return [e for e in self.pool if e.kind in kinds] if kinds else list(self.pool)

    def describe(self, value: Any) -> str:
        """The label of ``value`` in the trace."""
        entry = self.find(value)
        if entry is not None:
            return entry.label
        if isinstance(value, tuple):
            inner = ", ".join(self.describe(v) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if isinstance(value, list):
            return "[" + ", ".join(self.describe(v) for v in value) + "]"
        if isinstance(value, bytes | bytearray) and len(value) > 8:
            return f"{type(value).__name__}({len(value)})"
        if callable(value) and hasattr(value, "__name__"):
            return str(value.__name__)
        text = repr(value)
        return text if len(text) < 60 else text[:57] + "..."

    # --- usability ---------------------------------------------------------------------------

    def _maker(self, obj: Any) -> int:
        """The driver ``obj`` was made under: the one its recorded token names, else the current one.

        An object may surface again after it left the pool (a node's ``graph``), possibly while
        another driver is installed.
        """
        token = getattr(obj, "_driver", None)
        if token is not None:
            for index, sim in self.sims.items():
                if sim is token:
                    return index
        return self.current

    def driver_of(self, obj: Any) -> int | None:
        entry = self.find(obj)
        return None if entry is None else entry.driver

    def context_destroyed(self, ctx: Any, driver: int) -> bool:
        """Whether the context ``ctx`` (a cuguard Context) no longer exists in its driver."""
        sim = self.sims.get(driver)
        handle = int(ctx._int)
        if sim is not None:
            record = sim._ctxs.get(handle)
            return record is not None and bool(record.destroyed)
        return handle in self.destroyed.get(driver, set())

    def unusable(self, obj: Any, driver: int | None = None) -> str | None:
        """``"stale"``, ``"destroyed"`` or ``"closed"`` when ``obj`` must refuse use; ``None`` when usable."""
        found = self.why_unusable(obj, driver)
        return None if found is None else found[0]

    def why_unusable(self, obj: Any, driver: int | None = None) -> tuple[str, tuple[str, ...]] | None:
        """Like :meth:`unusable`, with the class names a refusal may name (the object's, or its cause's).

        The reason is ``"stale"`` (of a driver not installed, and nothing else wrong),
        ``"stale+"`` (of a driver not installed, and also closed or of a destroyed context),
        ``"destroyed"`` or ``"closed"``.
        """
        kind = kind_of(obj)
        if kind not in POOLED_KINDS or kind in ("LaunchConfig", "NumpyView", "ForeignStream"):
            return None
        if driver is None:
            driver = self.driver_of(obj)
        if driver is None:
            driver = self.current
        names = _CAUSES.get(kind, (kind,))
        if driver != self.current:
            own = self._own_state(obj, kind, driver)
            return ("stale" if own is None else "stale+", names)
        if kind == "Device":
            return None
        own = self._own_state(obj, kind, driver)
        return None if own is None else (own, names)

    def _own_state(self, obj: Any, kind: str, driver: int) -> str | None:
        """``"closed"`` or ``"destroyed"`` from the object's own state (whatever driver is installed)."""
        if kind == "Context":
            if self.context_destroyed(obj, driver):
                return "destroyed"
            return "closed" if obj._released else None
        if kind in ("Stream", "Event", "Buffer", "PinnedBuffer", "Module"):
            if obj._closed:
                return "closed"
            return self._own_state(obj._context, "Context", driver)
        if kind == "Kernel":
            return self._own_state(obj.module, "Module", driver)
        if kind in ("GraphDefinition", "Graph"):
            return "closed" if obj._closed else None
        if kind == "GraphBuilder":
            return "closed" if obj._closed else self._own_state(obj._stream, "Stream", driver)
        if kind in POOL_RESOURCES:
            if obj._closed:
                return "closed"
            return self._own_state(obj._context, "Context", driver)
        if kind == "Node":
            return "closed" if obj._state != 0 or obj._graph._closed else None
        if kind == "GraphCondition":
            return "closed" if obj._graph._closed else None
        return None


#: The class names a refusal of an object may give: its own, or those of what it depends on.
_CAUSES = {
    "Device": ("Device", "Context"),
    "Stream": ("Stream", "Context"),
    "Event": ("Event", "Context"),
    "Buffer": ("Buffer", "Context"),
    "PinnedBuffer": ("PinnedBuffer", "Context"),
    "Module": ("Module", "Context"),
    "Kernel": ("Kernel", "Module", "Context"),
    "Node": ("Node", "GraphDefinition"),
    "GraphCondition": ("GraphCondition", "GraphDefinition", "ConditionalBody", "GraphBuilder"),
    "GraphBuilder": ("GraphBuilder", "Stream", "Context"),
    # a resource refuses through what it uses: its context (pools) or its Device (the others)
    **{kind: (kind, "Context", "Device") for kind in MEMORY_RESOURCES},
}


def emulate(sim: Any) -> None:
    """Register the sweep's kernel on a simulated driver.

    The emulation never faults: a launch with arguments that do not fit is
    recorded in ``sim.misuse_bad_launches`` (the sweep checks that cuguard
    refused such launches before they reached the driver) instead of poisoning
    the driver for the rest of the example.
    """
    bad: list[str] = []
    sim.misuse_bad_launches = bad

    def fill_u8(s: Any, *args: Any) -> None:
        if len(args) != 3:
            bad.append(f"fill_u8 launched with {len(args)} arguments")
            return
        out, value, n = (int(a) if isinstance(a, int | float) else a for a in args)
        if not isinstance(out, int) or not isinstance(n, int) or n < 0 or n > 1 << 20:
            bad.append(f"fill_u8 launched with out={out!r}, n={n!r}")
            return
        try:
            s.write(out, bytes([int(value) & 0xFF]) * n)
        except Exception as exc:  # noqa: BLE001 - recorded, never a fault of the simulated GPU
            bad.append(f"fill_u8 wrote outside its buffer: {exc}")

    sim.register_kernel("fill_u8", fill_u8)
