"""Accounting records of the simulated driver: live objects, misuse, snapshots.

:class:`LiveObject` describes a driver object that exists now; :class:`Incident`
one recorded misuse (fatal misuse, use after release, double release, dangling
memory). :class:`SimulatedCrash` is raised where the real driver crashed the
process. :func:`nothing_left_behind` asserts that a block of code left the
driver as it found it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Changes",
    "Incident",
    "LiveObject",
    "SimulatedCrash",
    "SimulatedFault",
    "Snapshot",
    "nothing_left_behind",
    "settle",
]


@dataclass(frozen=True)
class LiveObject:
    """A driver object that exists now in the simulated driver.

    ``kind`` is one of ``"context"``, ``"stream"``, ``"event"``,
    ``"device_memory"``, ``"host_memory"``, ``"module"``, ``"library"``,
    ``"graph"``, ``"graph_exec"``, ``"user_object"``, and for virtual memory
    ``"address_range"``, ``"physical_memory"`` and ``"memory_mapping"`` (a
    mapping's handle is its address), and ``"memory_pool"`` for memory pools
    created or imported (a device's default pool is not one). ``handle`` is the handle (or address)
    as an int, ``context`` the handle of the context that was current (or
    owned the stream) when it was created, ``None`` when none was or for
    contexts themselves, and ``call`` the driver function that
    created it. ``refcount`` is the retain count of primary contexts and the
    total reference count of user objects (1 for everything else).
    """

    kind: str
    handle: int
    context: int | None
    call: str
    refcount: int = 1

    def __str__(self) -> str:
        ctx = "" if self.context is None else f" in context {self.context:#x}"
        count = "" if self.refcount == 1 else f" (refcount {self.refcount})"
        return f"{self.kind} {self.handle:#x} from {self.call}{ctx}{count}"


@dataclass(frozen=True)
class Incident:
    """One recorded misuse: the driver function called and what was wrong."""

    call: str
    description: str
    handle: int | None = None

    def __str__(self) -> str:
        return f"{self.call}: {self.description}"


class SimulatedCrash(BaseException):
    """The simulated driver refused a call that crashed the real driver.

    Raised (and recorded in ``SimulatedDriver.misuse``) where the real driver
    terminated the process: releasing a stream, event or graph node twice,
    using a released stream or event, switching to a destroyed context, or
    releasing or using anything whose context was destroyed. It derives from
    ``BaseException`` on purpose, so that rollback code catching ``Exception``
    does not swallow it and the test fails loudly. The driver state is left
    as it was before the call. ``call`` names the driver function,
    ``description`` says what was misused.
    """

    def __init__(self, call: str, description: str) -> None:
        super().__init__(f"{call}: {description} (the real CUDA driver crashes the process here)")
        self.call = call
        self.description = description

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.call, self.description))


class SimulatedFault(Exception):
    """A simulated kernel faulted (e.g. it accessed memory outside any allocation).

    Raised by ``SimulatedDriver.read``/``write``/``fault`` inside a kernel
    emulation; the launch machinery catches it and makes the driver sticky
    with ``code``. Outside a kernel it propagates to the caller.
    """

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code


@dataclass(frozen=True)
class Snapshot:
    """What the simulated driver held at one moment (see ``SimulatedDriver.snapshot``)."""

    live: dict[int, LiveObject]
    misuse: int
    dangling: int
    double_release: int
    use_after_release: int


@dataclass
class Changes:
    """What changed in a simulated driver since a :class:`Snapshot`.

    ``created``: live now and not then (or changed, e.g. a primary context
    retained once more); ``released``: live then and not now; the other lists
    hold the incidents recorded since. True when anything changed.
    """

    created: list[LiveObject] = field(default_factory=list)
    released: list[LiveObject] = field(default_factory=list)
    misuse: list[Incident] = field(default_factory=list)
    dangling: list[Incident] = field(default_factory=list)
    double_release: list[Incident] = field(default_factory=list)
    use_after_release: list[Incident] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.created
            or self.released
            or self.misuse
            or self.dangling
            or self.double_release
            or self.use_after_release
        )

    def __str__(self) -> str:
        parts: list[str] = []
        for title, items in (
            ("created and not released", self.created),
            ("released (was live before)", self.released),
            ("fatal misuse", self.misuse),
            ("dangling memory", self.dangling),
            ("double release", self.double_release),
            ("use after release", self.use_after_release),
        ):
            if items:
                parts.append(title + ":\n" + "\n".join(f"  - {item}" for item in items))
        return "\n".join(parts) if parts else "no changes"


def _find_simulator(candidate: Any) -> Any:
    """The simulated driver behind ``candidate`` (itself, or wrapped by proxies)."""
    seen = 0
    while candidate is not None and seen < 16:
        if hasattr(candidate, "changes_since") and hasattr(candidate, "snapshot"):
            return candidate
        candidate = getattr(candidate, "inner", None)
        seen += 1
    return None


@contextmanager
def nothing_left_behind(sim: Any = None) -> Iterator[Any]:
    """Assert that the block leaves the simulated driver exactly as it found it.

    On normal exit of the block: nothing created and not released, nothing
    that existed before released (live objects identical), no dangling memory,
    no fatal misuse, no double release and no use after release. Otherwise an
    ``AssertionError`` lists every difference. When the block raises, its
    exception propagates unchanged and nothing is checked. ``sim`` defaults to
    the active simulated driver (also when a fault proxy wraps it); with none
    active, ``RuntimeError``. Before it judges, garbage is collected and
    pending host functions and cuguard's release thread are waited for (at
    most :data:`SETTLE_TIMEOUT` seconds, see :func:`settle`; the message says
    what was waited for). A device's primary context retained once is not
    counted: cuguard holds it by design (contract O2). Yields the simulated
    driver.
    """
    if sim is None:
        from cuguard.errors import active_driver

        try:
            sim = _find_simulator(active_driver())
        except Exception:  # noqa: BLE001 - no driver at all: same as no simulator
            sim = None
        if sim is None:
            raise RuntimeError("nothing_left_behind(): no simulated driver is active; pass one")
    else:
        found = _find_simulator(sim)
        if found is None:
            raise TypeError(f"nothing_left_behind() needs a simulated driver, not {sim!r}")
        sim = found
    before = sim.snapshot()
    yield sim
    waited = settle(sim)
    changes = sim.changes_since(before)
    if changes:
        raise AssertionError(f"the block left the simulated CUDA driver changed ({waited}):\n" + str(changes))


#: How long a leak check waits for cuguard's release thread before it judges.
SETTLE_TIMEOUT = 10.0
_SETTLE_ROUNDS = 8


def settle(sim: Any = None) -> str:
    """Let pending releases happen before a leak check judges; say what was waited for.

    Runs a garbage collection (objects in reference cycles, exception
    tracebacks), waits for the simulator's queued host functions, then for
    cuguard's release thread (releases handed over by CUDA callbacks and graph
    user objects), at most :data:`SETTLE_TIMEOUT` seconds, and collects once
    more for what those releases dropped. Returns a short description for the
    check's message.
    """
    import gc

    from cuguard.errors import flush_deferred
    from cuguard.errors.lowlevel import deferred_count

    # Releases come in waves: a collection destroys a graph, whose user-object destructor (on the
    # driver's thread) hands its payload to the release thread, whose release drops buffers...
    # Repeat until a round carries out nothing new, at most _SETTLE_ROUNDS rounds.
    done = True
    for _ in range(_SETTLE_ROUNDS):
        before = deferred_count()
        if sim is not None:
            sim.drain()
        collected = gc.collect()
        done = flush_deferred(SETTLE_TIMEOUT)
        if sim is not None:
            sim.drain()
        done = flush_deferred(SETTLE_TIMEOUT) and done
        if not done or (deferred_count() == before and not collected):
            break
    if done:
        return "after garbage collection and cuguard's release thread had caught up"
    return f"after a garbage collection; cuguard's release thread had not caught up within {SETTLE_TIMEOUT:g} s"
