"""The misuse sweep's arguments: a value of every kind for every parameter of an operation.

A call gets either no argument of a wrong kind (objects of the kinds each parameter
takes, closed, stale or of another device included, and any plain values), or exactly
one parameter with a value of a wrong kind while every other argument is good: then
the ``TypeError`` can only be about that parameter (E3). Values come from the session's
pool (see :mod:`cuguard.sweeps._misuse.model`) or are made on the spot (``FOREIGN``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cuguard.sweeps._misuse.catalog import CTX_HANDLE, EDGE, KERNEL_ARGS, Op, Param
from cuguard.sweeps._misuse.checks import WrongArg
from cuguard.sweeps._misuse.choices import coin, pick
from cuguard.sweeps._misuse.model import FOREIGN, POOLED_KINDS, Entry, Opaque, kind_of

if TYPE_CHECKING:
    from cuguard.sweeps._misuse.session import Session

__all__ = ["PACKABLE", "Arguments"]

#: Kinds a kernel argument may be (``pack_args``); anything else must be refused before the launch.
PACKABLE = frozenset({"Buffer", "PinnedBuffer", "int", "float", "bool"})

Drawn = tuple[list[Any], list[str], list[WrongArg], list[tuple[str, Any]]]


class Arguments:
    """Draws receivers and arguments for a :class:`~cuguard.sweeps._misuse.session.Session`."""

    def __init__(self, session: Session) -> None:
        self.s = session

    def receivers(self, kind: str) -> list[Entry]:
        entries = [e for e in self.s.model.pool if e.kind == kind]
        current = [e for e in entries if e.driver == self.s.model.current]
        if current and (len(current) == len(entries) or coin(self.s.ch, 85)):
            return current
        return entries

    def _usable_here(self, e: Entry) -> bool:
        return not (e.kind == "ForeignStream" and e.driver != self.s.model.current)

    @staticmethod
    def takes(p: Param, value: Any) -> bool:
        """Whether ``value`` is of a kind ``p`` takes."""
        if "any" in p.accepts or (p.optional and value is None):
            return True
        kind = kind_of(value)
        if kind not in p.accepts:
            return False
        return not (kind == "Node" and p.node_type and value._kind != p.node_type)

    def _good_entries(self, p: Param, graph: Any, exclude: Any) -> list[Entry]:
        out = [
            e
            for e in self.s.model.pool
            if self.takes(p, e.obj) and e.obj is not None and self._usable_here(e) and e.obj is not exclude
        ]
        if graph is not None and "Node" in p.accepts:
            same = [e for e in out if e.kind == "Node" and e.obj._graph is graph]
            if same and coin(self.s.ch, 80):
                return same
        current = [e for e in out if e.driver == self.s.model.current]
        if current and coin(self.s.ch, 85):
            return current
        return out

    def _wrong_value(self, p: Param) -> tuple[Any, str]:
        """A value of a kind ``p`` does not take."""
        for _ in range(6):
            others = [e for e in self.s.model.pool if not self.takes(p, e.obj) and self._usable_here(e)]
            if others and coin(self.s.ch, 45):
                entry = pick(self.s.ch, others)
                value, text = entry.obj, entry.label
            else:
                label, make = pick(self.s.ch, FOREIGN)
                value, text = make(), label
            if not self.takes(p, value):
                return value, text
        return Opaque(), "Opaque()"

    def _plain(self, p: Param, good: bool) -> tuple[Any, str]:
        value = pick(self.s.ch, p.good_values if good else p.values)
        if callable(value) and not isinstance(value, type):
            value = value()
        return value, self.s.model.describe(value)

    def _one(self, p: Param, graph: Any, mode: str, exclude: Any) -> tuple[Any, str] | None:
        """One value for ``p``: ``mode`` is "wrong", "good" or "any"; ``None`` when no good value exists."""
        if not p.accepts:
            return self._plain(p, good=mode != "any")
        if mode == "wrong":
            return self._wrong_value(p)
        if p.special == CTX_HANDLE:
            contexts = [e for e in self.s.model.pool if e.kind == "Context" and e.driver == self.s.model.current]
            if contexts:
                entry = pick(self.s.ch, contexts)
                return entry.raw, f"{entry.label}_handle"
            return None
        if p.optional and coin(self.s.ch, 20):
            return None, "None"
        if mode == "any":
            accepted = [v for v in p.values if kind_of(v) in p.accepts]
            if accepted and coin(self.s.ch, 25):
                value = pick(self.s.ch, accepted)
                return value, self.s.model.describe(value)
        # the receiver itself as an argument (a node depending on itself, a graph embedding itself) is
        # refused with ValueError: rare in "any" mode, never in "good" mode
        avoid = exclude if mode == "good" or coin(self.s.ch, 85) else None
        good = self._good_entries(p, graph, avoid)
        if good:
            entry = pick(self.s.ch, good)
            return entry.obj, entry.label
        if p.optional:
            return None, "None"
        return None

    def _nodes(self, graph: Any, exclude: Any = None) -> list[Entry]:
        nodes = [e for e in self.s.model.pool if e.kind == "Node" and e.obj is not exclude]
        same = [e for e in nodes if graph is not None and e.obj._graph is graph]
        return same if same and coin(self.s.ch, 85) else nodes

    def _edge(self, graph: Any, mode: str) -> tuple[Any, str] | None:
        nodes = self._nodes(graph)
        if mode != "wrong":
            if len(nodes) < 2:
                return None
            a = pick(self.s.ch, nodes)
            b = pick(self.s.ch, nodes)
            if mode == "good" and a is b:
                others = [e for e in nodes if e is not a]
                b = pick(self.s.ch, others)
            return (a.obj, b.obj), f"({a.label}, {b.label})"
        bad: list[tuple[Any, str]] = [(5, "5"), (None, "None")]
        if nodes:
            a = pick(self.s.ch, nodes)
            bad += [
                (a.obj, a.label),
                ((a.obj,), f"({a.label},)"),
                ((a.obj, a.obj, a.obj), f"({a.label}, {a.label}, {a.label})"),
                (("text", a.obj), f"('text', {a.label})"),
            ]
        return pick(self.s.ch, bad)

    def _kernel_args(self, kernel: Any, mode: str) -> tuple[list[Any], list[str]] | None:
        memory = [e for e in self.s.model.pool if e.kind in ("Buffer", "PinnedBuffer")]
        if self.s.kind == "real":
            # only arguments a real kernel can run with, or that cuguard must refuse before the launch
            device = getattr(getattr(kernel, "module", None), "_device", 0)
            memory = [e for e in memory if e.kind == "PinnedBuffer" or getattr(e.obj, "_device", None) == device]
        memory = [e for e in memory if e.obj._size > 0]
        if not memory:
            return None
        entry = pick(self.s.ch, memory)
        value = pick(self.s.ch, (0, 7, 255))
        args: list[Any] = [entry.obj, value, entry.obj._size]
        texts = [entry.label, str(value), str(entry.obj._size)]
        if mode == "wrong":
            choices: list[tuple[Any, str]] = [(None, "None"), ("text", "'text'"), ([], "[]")]
            others = [e for e in self.s.model.pool if e.kind not in PACKABLE and e.kind != "NumpyView"]
            if others:
                other = pick(self.s.ch, others)
                choices.append((other.obj, other.label))
            bad, text = pick(self.s.ch, choices)
            i = self.s.ch.integer(0, 2)
            args[i], texts[i] = bad, text
        return args, texts

    def draw_args(self, op: Op, receiver: Entry | None) -> Drawn | None:
        """Values for every parameter of ``op``: positional values, their labels, wrong kinds, used objects.

        ``None`` when the pool cannot provide good values where they are needed.
        """
        objects = [
            i for i, p in enumerate(op.params) if (p.accepts and "any" not in p.accepts) or p.special == KERNEL_ARGS
        ]
        wrong_at = pick(self.s.ch, objects) if objects and coin(self.s.ch, 40) else -1
        if receiver is not None and op.receiver_type and receiver.obj._kind != op.receiver_type:
            wrong_at = -1  # the receiver is refused first: no argument can be blamed
        drawn = self._draw(op, receiver, wrong_at)
        if drawn is None and wrong_at >= 0:
            drawn = self._draw(op, receiver, -1)
        return drawn

    def _draw(self, op: Op, receiver: Entry | None, wrong_at: int) -> Drawn | None:
        graph = None
        exclude = None if receiver is None else receiver.obj
        if receiver is not None:
            if receiver.kind == "GraphDefinition":
                graph = receiver.obj
            elif receiver.kind == "Node":
                graph = receiver.obj._graph
        values: list[Any] = []
        texts: list[str] = []
        wrong: list[WrongArg] = []
        involved: list[tuple[str, Any]] = []
        kernel: Any = None

        def use(p: Param, value: Any, text: str) -> None:
            if p.uses and kind_of(value) in POOLED_KINDS:
                involved.append((text, value))

        def wrong_arg(p: Param, value: Any) -> None:
            wrong.append(WrongArg(p.name, p.spellings(), p.expect, value, p.naming))

        for i, p in enumerate(op.params):
            mode = "wrong" if i == wrong_at else ("good" if wrong_at >= 0 else "any")
            if p.special == KERNEL_ARGS:
                kargs = self._kernel_args(kernel, mode)
                if kargs is None:
                    return None
                for value, text in zip(*kargs, strict=True):
                    if kind_of(value) not in PACKABLE:
                        wrong.append(WrongArg("args", ("args",), "", value, naming=False))
                    use(p, value, text)
                values.extend(kargs[0])
                texts.extend(kargs[1])
                continue
            if p.star:
                count = 1 if mode == "wrong" else self.s.ch.integer(0, 2)
                chosen: list[Any] = []
                for _ in range(count):
                    one = self._edge(graph, mode) if p.special == EDGE else self._one(p, graph, mode, exclude)
                    if one is None:
                        if mode == "good":
                            return None
                        break
                    value, text = one
                    if mode == "good" and any(value is c for c in chosen):
                        continue  # a node given twice is a ValueError: keep the good arguments good
                    chosen.append(value)
                    if mode == "wrong":
                        # a (from, to) pair with a non-node in it: the message may name that element
                        bad = [v for v in value if kind_of(v) != "Node"] if isinstance(value, tuple) else []
                        wrong_arg(p, bad[0] if bad and len(value) == 2 else value)
                    if p.special == EDGE and isinstance(value, tuple):
                        for v in value:
                            use(p, v, self.s.model.describe(v))
                    else:
                        use(p, value, text)
                    values.append(value)
                    texts.append(text)
                continue
            if p.iterable:
                value, text = self._iterable(p, graph, mode, exclude, wrong, use)
            else:
                one = self._one(p, graph, mode, exclude)
                if one is None:
                    return None
                value, text = one
                if mode == "wrong":
                    wrong_arg(p, value)
                use(p, value, text)
            if p.name == "kernel":
                kernel = value
            values.append(value)
            texts.append(f"{p.name}={text}" if p.keyword else text)
        return values, texts, wrong, involved

    def _iterable(  # noqa: PLR0917
        self,
        p: Param,
        graph: Any,
        mode: str,
        exclude: Any,
        wrong: list[WrongArg],
        use: Callable[[Param, Any, str], None],
    ) -> tuple[Any, str]:
        if mode != "wrong":
            nodes = self._nodes(graph, exclude if mode == "good" else None)
            unique: list[Entry] = []
            for _ in range(self.s.ch.integer(0, 2) if nodes else 0):
                e = pick(self.s.ch, nodes)
                if e not in unique:
                    unique.append(e)
            for e in unique:
                use(p, e.obj, e.label)
            return tuple(e.obj for e in unique), "(" + "".join(f"{e.label}, " for e in unique).rstrip(" ") + ")"
        nodes = self._nodes(graph)
        options: list[tuple[Any, str, Any]] = [(5, "5", 5), (None, "None", None), (1.5, "1.5", 1.5)]
        if nodes:
            a = pick(self.s.ch, nodes)
            options.append((a.obj, a.label, a.obj))
            element, element_text = self._wrong_value(p)
            options.append(((element, a.obj), f"({element_text}, {a.label})", element))
        value, text, culprit = pick(self.s.ch, options)
        wrong.append(WrongArg(p.name, p.spellings(), p.expect, culprit, p.naming))
        if isinstance(value, tuple):
            use(p, value[1], self.s.model.describe(value[1]))
        return value, text
