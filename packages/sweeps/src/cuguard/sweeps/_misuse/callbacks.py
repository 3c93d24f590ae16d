"""The misuse sweep's callback steps: host functions on streams and callback nodes of graphs.

A callback does nothing, raises (W6: the exception must reach ``sys.unraisablehook``
only), drops the last references to objects (O5: they are released on cuguard's
release thread, never from the driver's thread, never reported), or, on the
simulator, calls cuguard itself (O5: cuguard must not call the driver from a host
function; the simulator records it if it does).
"""

from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Callable
from typing import Any

from cuguard.sweeps._misuse.checks import ALLOWED, describe
from cuguard.sweeps._misuse.choices import coin, pick
from cuguard.sweeps._misuse.model import CallbackBoom, Entry
from cuguard.sweeps._misuse.session import Outcome, Session

__all__ = ["graph_callback", "host_callback", "pick_entries"]


def pick_entries(s: Session, count: int) -> list[Entry]:
    """Up to ``count`` distinct pooled entries, drawn from the pool."""
    pool = s.model.pool
    if not pool:
        return []
    chosen: list[Entry] = []
    for _ in range(count):
        entry = pick(s.ch, pool)
        if entry not in chosen:
            chosen.append(entry)
    return chosen


Watched = list[tuple[weakref.ref[Any], int]]


def _callback(s: Session, kind: str, victims: list[Entry]) -> tuple[Callable[[], None], Watched]:
    """A callback of ``kind``; for ``drop`` it holds the last references to ``victims``.

    Also returns ``(weak reference, handle)`` of each usable resource among them, for the O5 check.
    """
    if kind == "boom":

        def boom() -> None:
            raise CallbackBoom("raised on purpose by a misuse-sweep callback")

        return boom, []
    if kind == "drop":
        held = [e.obj for e in victims]
        handles = [
            (weakref.ref(e.obj), int(e.obj._handle))
            for e in victims
            if e.kind in ("Stream", "Event", "Buffer", "PinnedBuffer", "Module") and s.model.unusable(e.obj) is None
        ]
        for e in victims:
            if e in s.model.pool:
                s.model.pool.remove(e)
        victims.clear()
        return held.clear, handles
    if kind == "cuguard":
        targets = [e for e in s.model.pool if e.kind in ("Stream", "Event", "Device") and e.driver == s.model.current]
        if targets:
            target = pick(s.ch, targets).obj
            outcomes = s.callback_outcomes

            def calls_cuguard() -> None:
                try:
                    if type(target).__name__ == "Device":
                        target.sync()
                    else:
                        target.query()
                except BaseException as exc:  # noqa: BLE001 - checked by the step
                    outcomes.append((repr(target), describe(exc), isinstance(exc, ALLOWED)))

            return calls_cuguard, []

    def noop() -> None:
        return None

    return noop, []


def _check_dropped(s: Session, op: str, handles: Watched, outcome: Outcome) -> None:
    """O5: objects whose last reference a callback dropped were released (never dropped, never reported).

    Only objects that were collected count (another object may keep one alive: a NumPy view its
    pinned buffer, a kernel its module).
    """
    sim = s.slot.sim
    if sim is None or not handles or outcome.exc is not None:
        return
    live = {o.handle for o in sim.live_objects()}
    kept = [f"{h:#x}" for ref, h in handles if ref() is None and h in live]
    if kept:
        s.flag("O5", op, f"objects whose last reference a callback dropped were never released: {kept}")


def _check_callback_outcomes(s: Session, op: str, mark: int) -> None:
    for target, what, allowed in s.callback_outcomes[mark:]:
        if not allowed:
            s.flag("E3", op, f"a cuguard call from a host function on {target} raised {what}")


def host_callback(s: Session) -> None:
    """A host function on a stream: it does nothing, raises (W6), drops the last references (O5) or calls cuguard."""
    streams = [e for e in s.model.pool if e.kind == "Stream"]
    if not streams:
        return
    entry = pick(s.ch, streams)
    kinds = ("noop", "boom", "drop", "drop", "cuguard") if s.callbacks_calling_cuguard else ("noop", "boom", "drop")
    kind = pick(s.ch, kinds)
    victims = pick_entries(s, s.ch.integer(1, 3)) if kind == "drop" else []
    labels = ", ".join(e.label for e in victims)
    if kind == "drop":
        s.quiesce()
    fn, handles = _callback(s, kind, victims)
    mark = len(s.callback_outcomes)
    label = entry.label
    stream = weakref.ref(entry.obj)  # the stream itself may be among what the host function drops
    launch = functools.partial(entry.obj.launch_host_func, fn)
    involved = [(label, entry.obj)]
    del fn, entry
    what = f"{kind}({labels})" if kind == "drop" else kind
    outcome = s.perform(
        "resources.Stream.launch_host_func",
        f"{label}.launch_host_func({what})",
        launch,
        involved=involved,
        warn_rule="O5",
        extra_errors=(RuntimeError,),  # documented: refused on a stream being captured
    )
    del launch, involved
    alive = stream()
    if alive is not None and s.model.find(alive) is not None and coin(s.ch, 60):
        s.perform("resources.Stream.sync", f"{label}.sync()", alive.sync, involved=[(label, alive)], warn_rule="O5")
    del alive
    gc.collect()
    s.settle()
    _check_dropped(s, "resources.Stream.launch_host_func", handles, outcome)
    _check_callback_outcomes(s, "resources.Stream.launch_host_func", mark)


def graph_callback(s: Session) -> None:
    """A graph with a callback node (and a memset and kernel node when possible), launched on a stream."""
    devices = [e for e in s.model.pool if e.kind == "Device" and e.driver == s.model.current]
    streams = [
        e
        for e in s.model.pool
        if e.kind == "Stream" and e.driver == s.model.current and s.model.unusable(e.obj) is None
    ]
    if not devices or not streams:
        return
    stream = pick(s.ch, streams)
    made, launched, handles = _build_graph(s, pick(s.ch, devices), stream)
    if made and coin(s.ch, 50):
        # drop the definition and the executable graph, maybe while the launch is in flight
        pool = s.model.pool
        labels = ", ".join(e.label for e in made)

        def release() -> None:
            for e in made:
                if e in pool:
                    pool.remove(e)
            made.clear()
            gc.collect()

        s.perform("del", f"del {labels}; gc.collect()", release, warn_rule="O5")
    made.clear()
    if coin(s.ch, 50):
        s.perform("resources.Stream.sync", f"{stream.label}.sync()", stream.obj.sync, warn_rule="O5")
    s.quiesce()
    s.perform("gc.collect", "gc.collect()", gc.collect, warn_rule="O5")
    if launched is not None:
        _check_dropped(s, "graphs.GraphDefinition.callback", handles, launched)


def _build_graph(s: Session, dev: Entry, stream: Entry) -> tuple[list[Entry], Outcome | None, Watched]:
    """Build, instantiate and launch a graph with a callback node; return the pooled graphs and the launch."""
    G = s.L.graphs
    outcome = s.perform("graphs.GraphDefinition()", f"GraphDefinition({dev.label})", lambda: G.GraphDefinition(dev.obj))
    g = s.model.add(outcome.result) if outcome.result is not None else None
    if g is None:
        return [], None, []
    s.trace[-1] += f"  -> {g.label}"
    kind = pick(s.ch, ("noop", "boom", "drop", "drop"))
    victims = [e for e in pick_entries(s, s.ch.integer(1, 3)) if e not in (g, dev, stream)] if kind == "drop" else []
    labels = ", ".join(e.label for e in victims)
    if kind == "drop":
        s.quiesce()
    fn, handles = _callback(s, kind, victims)
    what = f"{kind}({labels})" if kind == "drop" else kind
    gobj = g.obj
    add_callback = functools.partial(gobj.callback, fn)
    del fn  # the graph holds the last references once the call is made
    ok = s.perform("graphs.GraphDefinition.callback", f"{g.label}.callback({what})", add_callback).exc is None
    del add_callback
    ordinal = dev.obj.ordinal
    buffers = [
        e
        for e in s.model.pool
        if e.kind == "Buffer"
        and e.driver == s.model.current
        and s.model.unusable(e.obj) is None
        and e.obj._device == ordinal
    ]
    if ok and buffers and coin(s.ch, 60):
        buf = pick(s.ch, buffers).obj
        s.perform(
            "graphs.GraphDefinition.memset",
            f"{g.label}.memset({s.model.describe(buf)}, 5)",
            lambda: gobj.memset(buf, 5),
        )
        kernels = [
            e
            for e in s.model.pool
            if e.kind == "Kernel"
            and e.driver == s.model.current
            and s.model.unusable(e.obj) is None
            and e.obj.module._device == ordinal
        ]
        configs = s.model.entries("LaunchConfig")
        if kernels and configs and coin(s.ch, 60):
            k = pick(s.ch, kernels)
            cfg = pick(s.ch, configs)
            s.perform(
                "graphs.GraphDefinition.launch",
                f"{g.label}.launch({cfg.label}, {k.label}, {s.model.describe(buf)}, 9, {buf._size})",
                lambda: gobj.launch(cfg.obj, k.obj, buf, 9, buf._size),
            )
    outcome = s.perform("graphs.GraphDefinition.instantiate", f"{g.label}.instantiate()", gobj.instantiate)
    x = s.model.add(outcome.result) if outcome.result is not None else None
    if x is None:
        return [g], None, handles
    s.trace[-1] += f"  -> {x.label}"
    xobj = x.obj
    launched = s.perform(
        "graphs.Graph.launch",
        f"{x.label}.launch({stream.label})",
        lambda: xobj.launch(stream.obj),
        involved=[(x.label, xobj), (stream.label, stream.obj)],
        warn_rule="O5",
    )
    return [g, x], launched, handles
