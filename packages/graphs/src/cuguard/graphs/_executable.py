"""Executable graphs: launch, upload, update from a definition of the same shape, close."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from cuguard.context import Context
from cuguard.errors import (
    CUDAError,
    ResourceClosedError,
    add_failure_note,
    attributing,
    driver,
    driver_token,
    format_handle,
    raise_status,
    refuse_construction,
    report,
    report_error,
    wrong_kind,
)
from cuguard.graphs._common import _UNINSTALLED, _check_owners, _Collected
from cuguard.resources import Event, Module, Stream, as_stream, wait_attributed

if TYPE_CHECKING:
    from cuguard.graphs._definition import GraphDefinition
    from cuguard.graphs._nodes import Node

__all__ = ["Graph", "GraphUpdateError"]

_GRAPH_EXEC_UPDATE_FAILURE = 910  # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE


class GraphUpdateError(CUDAError, ValueError):
    """An executable graph could not be updated from a definition.

    Raised by :meth:`Graph.update`. ``reason`` is the name of the
    ``CUgraphExecUpdateResult`` that explains why (for example
    ``"CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED"``), or
    ``"CU_GRAPH_EXEC_UPDATE_ERROR"`` when the driver refused for a reason
    cuguard could not determine (cuda-bindings does not return the driver's
    result info on failure). The message says what differs. It is both a
    :class:`~cuguard.errors.CUDAError` (code ``CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE``)
    and a ``ValueError``. The executable graph is unchanged and usable.
    """

    reason: str

    def __init__(self, reason: str, detail: str, call: str | None = "cuGraphExecUpdate") -> None:
        self.reason = reason
        super().__init__(_GRAPH_EXEC_UPDATE_FAILURE, call, f"{reason}: {detail}")


class Graph(_Collected):
    """An executable graph (a ``CUgraphExec``), made by :meth:`GraphDefinition.instantiate`.

    :meth:`launch` queues it on a stream; :meth:`upload` prepares it;
    :meth:`update` changes its parameters to those of another definition of
    the same shape. It keeps what its nodes use alive (through the CUDA user
    object it inherited), also while launches are in flight after it is
    closed. :meth:`close` (or ``with``, or garbage collection) destroys it.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_context",
        "_driver",
        "_handle",
        "_int",
        "_owners",
        "_released_with_close",
        "_signature",
    )

    _handle: Any
    _int: int
    _driver: Any  # the driver_token() it was made under
    _closed: bool
    _context: Context | None
    _owners: dict[int, object]
    _signature: tuple[tuple[str, ...], frozenset[tuple[int, int]]]

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(Graph, "GraphDefinition.instantiate()")

    @classmethod
    def _make(
        cls,
        handle: Any,
        context: Context | None,
        owners: dict[int, object],
        signature: tuple[tuple[str, ...], frozenset[tuple[int, int]]],
    ) -> Graph:
        self = object.__new__(cls)
        self._handle = handle
        self._int = int(handle)
        self._driver = driver_token()
        self._closed = False
        self._context = context
        self._owners = owners
        self._released_with_close = _released_with_close(owners)
        self._signature = signature
        return self

    @property
    def handle(self) -> Any:
        """The ``CUgraphExec``; raises ``ResourceClosedError`` once closed."""
        self._check_open()
        return self._handle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")
        if self._driver is not driver_token():
            raise ResourceClosedError(_UNINSTALLED.format(self))
        context = self._context
        if context is not None and context._closed:
            raise ResourceClosedError(f"{self!r} cannot be used: its context {context!r} was closed")

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<Graph {format_handle(self._int)}{state}>"

    def launch(self, stream: Stream) -> None:
        """Queue one run of the graph on ``stream``; raises :class:`~cuguard.errors.CUDAError` if refused.

        Raises ``ResourceClosedError`` before the driver when a module or event
        its nodes use was closed since (the run would reach an unloaded module
        or a destroyed event; memory closed meanwhile stays allocated for the
        graph, W5).

        With fault attribution on (:func:`~cuguard.errors.attribute_faults`) it waits
        for the run, and a kernel fault inside it raises
        :class:`~cuguard.errors.StickyCUDAError` naming this launch.
        """
        self._check_open()
        if type(stream) is not Stream:
            stream = as_stream(stream)
        hstream = stream.handle  # checked before the driver is looked up (O3)
        for owner in self._released_with_close:
            if owner._closed:  # S2: its nodes would reach an unloaded module or a destroyed event
                raise ResourceClosedError(f"{self!r} uses {owner!r}, which was closed: the graph cannot run any more")
        (err,) = driver.cuGraphLaunch(self._handle, hstream)
        if err:
            raise_status(err, "cuGraphLaunch")
        if attributing():
            kinds = self._signature[0]
            wait_attributed(
                stream, lambda: f"the launch of executable graph {format_handle(self._int)} ({len(kinds)} nodes)"
            )

    def upload(self, stream: Stream) -> None:
        """Upload the graph's work to the device ahead of a launch, ordered on ``stream``.

        Raises ``ResourceClosedError`` once closed, ``TypeError`` for a non-stream and
        :class:`~cuguard.errors.CUDAError` if the driver refuses; the graph is unchanged and usable
        then.
        """
        self._check_open()
        if type(stream) is not Stream:
            stream = as_stream(stream)
        hstream = stream.handle
        (err,) = driver.cuGraphUpload(self._handle, hstream)
        if err:
            raise_status(err, "cuGraphUpload")

    def update(self, definition: GraphDefinition) -> None:
        """Take the node parameters of ``definition``, which must have the same shape (``cuGraphExecUpdate``).

        Same shape: the same node kinds in the same creation order, with the
        same edges (a clone of the instantiated definition, changed with
        :meth:`Node.set_params`, has it). cuguard checks this first and raises
        :class:`GraphUpdateError` (a ``ValueError`` and a ``CUDAError``)
        saying what differs, before any driver call. If the driver refuses
        for another reason, :class:`GraphUpdateError` is raised too. Either
        way this graph is unchanged and usable. What ``definition``'s nodes
        use is kept alive by this graph from before the driver call; after a
        refused update it stays alive until the graph is gone (a leak, never a
        dangle).
        """
        from cuguard.graphs._definition import GraphDefinition  # it imports this module

        self._check_open()
        if not isinstance(definition, GraphDefinition):
            raise wrong_kind("definition", "a GraphDefinition", definition)
        definition._check_open()
        _check_owners(definition, definition._owners, "used for an update")
        kinds, edges, nodes = definition._signature()
        _explain_mismatch(self._signature, (kinds, edges), nodes)
        for key, owner in list(definition._owners.items()):
            self._owners.setdefault(key, owner)
        result = driver.cuGraphExecUpdate(self._handle, definition._handle)
        err = result[0]
        if err:
            if int(err) == _GRAPH_EXEC_UPDATE_FAILURE:
                info = result[1] if len(result) > 1 else None
                reason = _result_name(getattr(info, "result", None)) if info is not None else None
                raise GraphUpdateError(
                    reason or "CU_GRAPH_EXEC_UPDATE_ERROR",
                    "the driver refused the update for a reason other than the graph's shape (e.g. a kernel or "
                    "context changed in a way CUDA cannot apply)",
                )
            raise_status(err, "cuGraphExecUpdate")
        self._signature = (kinds, edges)
        self._released_with_close = _released_with_close(definition._owners)

    def close(self) -> None:
        """Destroy the executable graph now (``cuGraphExecDestroy``). Idempotent.

        Launches in flight complete; what they use stays alive until then.
        If the driver refuses, :class:`~cuguard.errors.CUDAError` is raised
        and the executable graph is leaked (never destroyed again).
        """
        if self._driver is not driver_token():  # O3 before idempotence: as every other close()
            raise ResourceClosedError(_UNINSTALLED.format(self) + "; nothing was released")
        if self._closed:
            return
        self._closed = True
        context = self._context
        if context is not None and context._closed:
            raise ResourceClosedError(
                f"{self!r} cannot be released: its context {context!r} was closed first; it was leaked"
            )
        (err,) = driver.cuGraphExecDestroy(self._handle)
        if err:
            raise CUDAError(err, "cuGraphExecDestroy", f"executable graph {format_handle(self._int)} was leaked")

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as failure:  # noqa: BLE001 - attached as a note (G4)
            add_failure_note(exc, failure)

    def _collect(self) -> None:
        """Destroy a collected executable graph; failures are warnings (W1)."""
        if self._closed or self._driver is not driver_token():
            return
        self._closed = True
        context = self._context
        if context is not None and context._closed:
            report_error(
                ResourceClosedError(f"executable graph not released: its context {context!r} was closed before it"),
                self._handle,
                "it was leaked",
            )
            return
        try:
            (err,) = driver.cuGraphExecDestroy(self._handle)
        except CUDAError as exc:
            report_error(exc, self._handle, "the executable graph was leaked")
            return
        if err:
            report(err, "cuGraphExecDestroy", self._handle, "the executable graph was leaked")


def _released_with_close(owners: dict[int, object]) -> tuple[Any, ...]:
    """What an executable graph uses whose ``close()`` releases it at once: its modules and events.

    (Memory closed while a graph uses it stays allocated until the graph goes, W5.)
    """
    return tuple(o for o in owners.values() if type(o) is Module or type(o) is Event)


def _result_name(value: object) -> str | None:
    if value is None:
        return None
    name = getattr(value, "name", None)
    return str(name) if name else None


def _explain_mismatch(
    old: tuple[tuple[str, ...], frozenset[tuple[int, int]]],
    new: tuple[tuple[str, ...], frozenset[tuple[int, int]]],
    nodes: list[Node],
) -> None:
    """Raise :class:`GraphUpdateError` saying how ``new``'s shape differs from ``old``'s; nothing if equal."""
    old_kinds, old_edges = old
    new_kinds, new_edges = new
    if len(old_kinds) != len(new_kinds):
        _refuse(
            "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED",
            f"the definition has {len(new_kinds)} nodes, the executable graph {len(old_kinds)}",
        )
    for i, (was, now) in enumerate(zip(old_kinds, new_kinds, strict=True)):
        if was != now:
            _refuse(
                "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED",
                f"node {i} in creation order ({nodes[i]!r}) is a {now} node, in the executable graph a {was} node",
            )
    if old_edges != new_edges:
        extra = sorted(new_edges - old_edges)
        missing = sorted(old_edges - new_edges)
        parts = []
        if extra:
            parts.append(
                "edges only in the definition: " + ", ".join(f"{nodes[a]!r} -> {nodes[b]!r}" for a, b in extra)
            )
        if missing:
            parts.append(
                "edges missing from the definition (by creation index): " + ", ".join(f"{a} -> {b}" for a, b in missing)
            )
        _refuse("CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED", "; ".join(parts))


def _refuse(reason: str, detail: str) -> NoReturn:
    raise GraphUpdateError(reason, detail, call=None)
