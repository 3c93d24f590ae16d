"""Stream capture: :class:`GraphBuilder` records the work queued on a stream as a graph definition.

A builder wraps a :class:`~cuguard.resources.Stream`. Between
:meth:`GraphBuilder.begin_building` and :meth:`GraphBuilder.end_building` the
driver turns the work queued on that stream (and on the builder's forks) into
graph nodes instead of running it; :meth:`GraphBuilder.end_building` adopts
the captured graph as a :class:`~cuguard.graphs.GraphDefinition` that keeps
what the builder's own operations used alive (G5, W5).

Failure rules: a capture that the driver ended without a graph (invalidated,
or a fork left unjoined) leaves nothing behind; a graph the driver returned
beside an error is destroyed once; the fork streams the builder made are
destroyed once the capture has ended, whatever happened to their joins; the
wrapped stream is never closed and is usable again once the capture ended.

The nodes a builder adds itself are the capture-work module's, its forks and
conditional nodes the capture-branches module's: bases of :class:`GraphBuilder`,
found through its class as its own.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from cuguard.context import Context, init_driver
from cuguard.errors import (
    CUDAError,
    ResourceClosedError,
    add_failure_note,
    driver,
    driver_token,
    format_handle,
    raise_status,
    report,
    report_error,
)
from cuguard.errors.lowlevel import wrong_kind
from cuguard.graphs._capture_branches import CaptureBranches, _close_noting
from cuguard.graphs._common import _UNINSTALLED, _types
from cuguard.graphs._conditional import GraphCondition
from cuguard.graphs._definition import GraphDefinition
from cuguard.graphs._executable import Graph
from cuguard.graphs._nodes import Collected
from cuguard.resources import Event, Stream
from cuguard.resources.lowlevel import (
    OwnerTable,
    capture_began,
    capture_ended,
    capture_left,
    graph_let_go,
    retain,
    split_written,
    stream_undestroyed,
)

__all__ = ["CAPTURE_MODES", "GraphBuilder", "capture_mode", "exchange_capture_mode"]

#: The capture modes, as ``CUstreamCaptureMode`` values.
CAPTURE_MODES: Final[dict[str, int]] = {"global": 0, "thread_local": 1, "relaxed": 2}
_MODE_NAMES: Final[dict[int, str]] = {v: k for k, v in CAPTURE_MODES.items()}
_STATUS_NAMES: Final[dict[int, str]] = {0: "none", 1: "active", 2: "invalidated"}
_ENDED_WITHOUT_GRAPH = (901, 904)  # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, _UNJOINED: the driver ended the capture


def _mode_value(mode: object, param: str = "mode") -> int:
    if not isinstance(mode, str):
        raise wrong_kind(param, "one of 'global', 'thread_local', 'relaxed'", mode)
    value = CAPTURE_MODES.get(mode)
    if value is None:
        raise ValueError(f"{param} must be one of 'global', 'thread_local', 'relaxed', not {mode!r}")
    return value


def exchange_capture_mode(mode: str) -> str:
    """Set the calling thread's capture mode (``cuThreadExchangeStreamCaptureMode``); return the previous one.

    The thread's mode decides whether a capture in progress prohibits this
    thread's potentially unsafe calls (allocations, synchronous copies,
    context synchronization): ``"global"`` (the default) is prohibited by its
    own captures and by other threads' global-mode captures,
    ``"thread_local"`` only by its own, ``"relaxed"`` never. A prohibited
    call fails with ``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`` and invalidates
    the capture. A mode that is not one of the three raises ``ValueError``
    (a non-str ``TypeError``) before the driver; a refusal raises
    :class:`~cuguard.errors.CUDAError` with the mode unchanged.
    """
    value = _mode_value(mode)
    init_driver()
    err, old = driver.cuThreadExchangeStreamCaptureMode(_types().CUstreamCaptureMode(value))
    if err:
        raise_status(err, "cuThreadExchangeStreamCaptureMode")
    return _MODE_NAMES.get(int(old), "global")


@contextmanager
def capture_mode(mode: str) -> Iterator[str]:
    """Run the block with the calling thread's capture mode set to ``mode``; restore the previous mode after.

    Yields the previous mode. Raises as :func:`exchange_capture_mode`; a failure
    to restore is raised when the block succeeded and attached as a note to the
    block's exception otherwise (G4).
    """
    previous = exchange_capture_mode(mode)
    try:
        yield previous
    except BaseException as exc:
        try:
            exchange_capture_mode(previous)
        except Exception as failure:  # noqa: BLE001 - attached as a note (G4)
            add_failure_note(exc, failure)
        raise
    exchange_capture_mode(previous)


def _end_capture(handle: Any) -> tuple[Any, Any]:
    """``cuStreamEndCapture``; a graph the driver returned beside an error is destroyed (once)."""
    err, graph = driver.cuStreamEndCapture(handle)
    if err and graph is not None and int(graph):
        (destroy_err,) = driver.cuGraphDestroy(graph)
        if destroy_err:
            report(destroy_err, "cuGraphDestroy", graph, "the graph of a failed capture was leaked")
    return err, graph


_WRONG_THREAD = 908  # CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD


def _abandon_capture(handle: Any) -> tuple[Any, str]:
    """End a capture nobody will use and destroy its graph; ``(status, call)`` of the first failure (status 0: none)."""
    err, graph = _end_capture(handle)
    if err:
        # an invalidated capture, or one with a fork left unjoined, ended with no graph: nothing is left
        if int(err) in _ENDED_WITHOUT_GRAPH:
            return 0, "cuStreamEndCapture"
        # Refused (from another thread than the one that began a global or thread-local capture, when
        # the builder is collected on cuguard's release thread, say): an H200 ends the capture anyway,
        # with no graph. Ask the driver: a capture that is over left nothing behind.
        if int(err) == _WRONG_THREAD:
            status_err, status = driver.cuStreamIsCapturing(handle)
            if not status_err and int(status) == 0:
                return 0, "cuStreamEndCapture"
        return err, "cuStreamEndCapture"
    (err,) = driver.cuGraphDestroy(graph)
    return err, "cuGraphDestroy"


class _Capture:
    """One capture begun by a builder: the conditions made during it, and the definition it became."""

    __slots__ = ("builder", "conditions", "counted_end", "definition", "ended")

    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder
        self.conditions: list[GraphCondition] = []
        self.definition: GraphDefinition | None = None
        self.ended = False
        self.counted_end = False  # capture_ended was told (once per capture)

    @property
    def _closed(self) -> bool:
        """Whether the conditions' graph is gone (or its builder closed)."""
        if self.definition is not None:
            return self.definition._closed
        return self.ended or self.builder._closed

    def _check_open(self) -> None:
        """Refuse use of a condition whose graph is gone (what a condition checks of its owner)."""
        if self.definition is not None:
            self.definition._check_open()
        elif self.ended:
            raise ResourceClosedError(f"the capture of {self.builder!r} ended without a graph: its conditions are gone")
        else:
            self.builder._check_open()

    def __repr__(self) -> str:
        return f"<capture of {self.builder!r}>"


class GraphBuilder(Collected, CaptureBranches):
    """Builds a graph definition by capturing the work queued on a stream (cuda.core's ``GraphBuilder``).

    ``GraphBuilder(stream)`` wraps ``stream`` (a :class:`~cuguard.resources.Stream`;
    never closed by the builder) and starts nothing: call :meth:`begin_building`
    (it returns the builder, so ``GraphBuilder(s).begin_building()`` reads as
    cuda.core's ``stream.create_graph_builder().begin_building()``). While
    building, the builder is itself a stream (``__cuda_stream__``): pass it to
    :func:`~cuguard.resources.launch`, to copies and fills, to anything that
    takes a stream; that work becomes nodes. :meth:`launch` and
    :meth:`callback` queue work the definition keeps alive, and so do
    cuguard's own ``launch``, copies and fills queued through the builder:
    from the moment the work is captured, the memory it uses counts as used
    by a graph, and ``close()`` frees it only once no graph uses it (G6, W5).
    What other code queues through the builder's handle is captured but not
    kept alive by cuguard (pass those objects to :meth:`keep`). :meth:`split` forks the capture onto new
    streams, :meth:`join` joins forks back, :meth:`embed` adds a child graph.
    :meth:`end_building` ends the capture and makes :attr:`definition`;
    :meth:`complete` instantiates it.

    Once its stream is closed (or the stream's context refuses use), every
    operation but :meth:`close` raises ``ResourceClosedError``. A builder is
    not thread-safe: use it from one thread at a time (with the
    ``"relaxed"`` mode another thread may end the capture). :meth:`close` (or
    ``with``, or garbage collection) ends a capture still in progress,
    destroys its graph, closes the forks' streams and the definition.
    """

    __slots__ = (
        "__weakref__",
        "_bodies",
        "_body",
        "_building",
        "_capture",
        "_closed",
        "_context",
        "_definition",
        "_driver",
        "_events",
        "_filled",
        "_forks",
        "_joined",
        "_mode",
        "_owners",
        "_parent",
        "_root",
        "_stream",
    )

    _stream: Stream
    _context: Context
    _driver: Any
    _closed: bool
    _building: bool
    _mode: str
    _root: GraphBuilder | None  # the builder that began the capture, for a fork; None for a root
    # A root's forks (weakly: a fork refers to its root, and no cycle may let a fork's stream be
    # collected before the root has ended the capture) with their streams, in the order made.
    _forks: list[tuple[weakref.ref[GraphBuilder], Stream]]
    _events: list[Event]  # a root's fork and join events: the capture's waits use them until it ends
    _joined: bool
    _owners: dict[int, object]
    _definition: GraphDefinition | None
    _capture: _Capture | None  # the capture this root began last
    # A body builder (of a conditional node added during a capture): the root builder of that capture,
    # the capture, and the body graph (CUDA's, owned by the node). None for other builders.
    _parent: GraphBuilder | None
    _body: Any
    _filled: bool  # a body builder's capture was added to its body
    _bodies: list[weakref.ref[GraphBuilder]]  # a root's body builders

    def __init__(self, stream: Stream, *, mode: str = "global") -> None:
        if not isinstance(stream, Stream):
            raise wrong_kind("stream", "a Stream", stream)
        _mode_value(mode)
        stream._check_open()
        self._setup(stream, mode, None)

    def _setup(self, stream: Stream, mode: str, root: GraphBuilder | None) -> None:
        self._stream = stream
        self._context = stream._context
        self._driver = driver_token()
        self._mode = mode
        self._root = root
        self._forks = []
        self._events = []
        self._joined = False
        self._owners = {}
        self._definition = None
        self._capture = None
        self._parent = None
        self._body = None
        self._filled = False
        self._bodies = []
        self._building = root is not None
        self._closed = False

    # --- state ---

    @property
    def stream(self) -> Stream:
        """The stream this builder captures on (a fork's own stream for a fork)."""
        return self._stream

    @property
    def mode(self) -> str:
        """The capture mode the next :meth:`begin_building` uses (``"global"``, ``"thread_local"``, ``"relaxed"``)."""
        return self._mode

    @property
    def is_building(self) -> bool:
        """Whether a capture begun by this builder (or, for a fork, its root) is in progress."""
        root = self._root
        if root is not None:
            return root._building and not self._joined
        return self._building

    @property
    def status(self) -> str:
        """The stream's capture status from the driver (``cuStreamIsCapturing``): none, active or invalidated."""
        self._check_open()
        err, status = driver.cuStreamIsCapturing(self._stream.handle)
        if err:
            raise_status(err, "cuStreamIsCapturing")
        return _STATUS_NAMES.get(int(status), f"status{int(status)}")

    @property
    def definition(self) -> GraphDefinition:
        """The definition the last :meth:`end_building` made; ``RuntimeError`` before one exists.

        The builder owns it: the next successful :meth:`end_building` closes it and
        makes a new one (a failure to destroy the old graph is a ``CUDAWarning``: it
        is leaked), and :meth:`close` closes it (executable graphs made from it are
        unaffected).
        """
        self._check_open()
        if self._parent is not None:
            raise RuntimeError(f"{self!r} captures a conditional body: its work is part of {self._parent!r}'s capture")
        if self._definition is None:
            raise RuntimeError(f"{self!r} has no graph definition yet: call end_building() first")
        return self._definition

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the builder was collected)."""
        return self._closed

    def _check_open(self) -> None:
        """Refuse a closed builder, one of an uninstalled driver, and one whose stream refuses use."""
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")
        if self._driver is not driver_token():
            raise ResourceClosedError(_UNINSTALLED.format(self))
        self._stream._check_open()

    def _check_capturing(self, action: str) -> None:
        self._check_open()
        if not self.is_building:
            what = "its join ended its part" if self._joined else "no capture is in progress"
            raise RuntimeError(f"{self!r} cannot {action}: {what}")

    def __repr__(self) -> str:
        kind = "fork" if self._root is not None else "builder"
        state = " closed" if self._closed else (" building" if self.is_building else "")
        stream = getattr(self, "_stream", None)
        handle = format_handle(int(stream._handle)) if stream is not None else "?"
        return f"<GraphBuilder {kind} on stream {handle}{state}>"

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: the captured stream, ``(0, handle address)``.

        A closed builder (or one whose stream refuses use) raises
        ``ResourceClosedError``: it is no longer a stream.
        """
        if self._closed or self._driver is not driver_token():
            self._check_open()
        return (0, int(self._stream.handle))

    def _as_cuguard_stream(self) -> Stream:
        """The captured :class:`~cuguard.resources.Stream` itself, for cuguard's layers (no driver call).

        Raises ``ResourceClosedError`` as ``__cuda_stream__`` does.
        """
        if self._closed or self._driver is not driver_token():
            self._check_open()
        return self._stream

    # --- begin and end ---

    def begin_building(self, mode: str | None = None) -> GraphBuilder:
        """Begin capturing on the stream (``cuStreamBeginCapture``); return the builder.

        ``mode`` (default: the builder's) becomes the builder's mode. Raises
        ``RuntimeError`` for a fork or while building, ``ValueError``/``TypeError``
        for a bad mode, before the driver; :class:`~cuguard.errors.CUDAError` if
        the driver refuses (a stream already capturing is
        ``CUDA_ERROR_ILLEGAL_STATE``): nothing begins then. The definition of an
        earlier capture stays until this capture ends.
        """
        self._check_open()
        if self._root is not None:
            raise RuntimeError(f"{self!r} is a fork: only the builder that began the capture begins one")
        if self._building:
            raise RuntimeError(f"{self!r} is building already: call end_building() first")
        value = _mode_value(mode if mode is not None else self._mode)
        if self._parent is not None:
            self._check_parent("begin building")
            if self._filled:
                raise RuntimeError(f"{self!r} captured its body already: a body is captured once")
        handle = self._stream.handle
        (err,) = driver.cuStreamBeginCapture(handle, _types().CUstreamCaptureMode(value))
        if err:
            raise_status(err, "cuStreamBeginCapture")
        if mode is not None:
            self._mode = mode
        self._owners = OwnerTable()
        # What work captured from now on uses counts as used by a graph, and releases that would meet
        # the capture wait for its end (G6, W5).
        capture_began(self._stream, self._owners)
        self._capture = _Capture(self)
        self._building = True
        return self

    def _check_parent(self, action: str) -> None:
        """A body builder needs the capture that made its conditional node to go on (``RuntimeError``)."""
        parent = self._parent
        assert parent is not None
        if parent._capture is None or parent._capture.ended or not parent._building:
            raise RuntimeError(f"{self!r} cannot {action}: the capture of its conditional node has ended")

    def end_building(self) -> GraphBuilder:
        """End the capture (``cuStreamEndCapture``) and adopt its graph as :attr:`definition`; return the builder.

        The definition keeps what :meth:`launch`, :meth:`callback`, :meth:`embed`
        and :meth:`keep` gave it alive. The forks' streams are closed once the
        capture has ended.

        On failure :class:`~cuguard.errors.CUDAError` is raised and the previous
        definition stays. When the driver ended the capture anyway (it was
        invalidated: ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``; a fork was not
        joined: ``CUDA_ERROR_STREAM_CAPTURE_UNJOINED``) nothing is left behind (a
        graph returned beside the error is destroyed), the builder is no longer
        building and the stream is usable (the H200's driver also ends the
        capture when it refuses ``CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD``, from
        another thread in a mode that is not relaxed; the driver is asked
        whether the capture goes on). Otherwise the capture goes on and the
        builder is still building. After a successful end the forks' streams and events are
        destroyed and the graph adopted (``cuUserObjectCreate``,
        ``cuGraphRetainUserObject`` when something is kept alive); when one of
        those fails the captured graph is destroyed and the error raised: nothing
        is made, the builder is no longer building, and what could not be
        destroyed is leaked (W5). Raises ``RuntimeError`` for a fork or when not
        building.
        """
        self._check_open()
        if self._root is not None:
            raise RuntimeError(f"{self!r} is a fork: end_building() belongs to the builder that began the capture")
        if not self._building:
            raise RuntimeError(f"{self!r} is not building: call begin_building() first")
        for ref in self._bodies:
            body = ref()
            if body is not None and body._building:
                raise RuntimeError(f"{self!r} cannot end its capture while {body!r} is building: end the body first")
        if self._parent is not None:
            self._check_parent("end building")
        handle = self._stream.handle
        err, graph = _end_capture(handle)
        if err:
            try:
                raise_status(err, "cuStreamEndCapture")
            except CUDAError as exc:
                if self._capture_ended(exc):
                    self._finish(exc)
                raise
        owners = self._owners
        capture = self._capture
        try:
            self._adopt_capture(graph, owners, capture)
        finally:
            if capture is not None and not capture.counted_end:
                capture.counted_end = True
                capture_ended(self._stream)  # after adoption: what the work uses was never unprotected (G6)
            graph_let_go(list(owners.values()))  # frees only what no graph took (adoption failed)
        return self

    def _adopt_capture(self, graph: Any, owners: dict[int, object], capture: _Capture | None) -> None:
        """After a successful end: close the forks, then make the definition (or fill the body) from ``graph``."""
        failure = self._finish(None, adopting=True)
        if failure is not None:  # a fork's stream or event could not be closed: make nothing (G1)
            (undo,) = driver.cuGraphDestroy(graph)
            if undo:
                add_failure_note(failure, undo, "cuGraphDestroy", graph)
            raise failure
        if self._parent is not None:
            self._fill_body(graph, owners)
            return
        definition = GraphDefinition._adopt(graph, self._context, owners, 0)  # destroys the graph if it raises
        if capture is not None and capture.conditions:
            capture.definition = definition
            for cond in capture.conditions:
                definition._add_condition(cond)
        previous, self._definition = self._definition, definition
        if previous is not None:
            _close_into(previous, None)

    def _fill_body(self, graph: Any, owners: dict[int, object]) -> None:
        """Put a body builder's captured ``graph`` into its body (a child graph node); destroy ``graph``.

        The capture ran into a graph of its own: a capture into an existing graph
        that is invalidated takes that graph with it (seen on an H200), and a body
        belongs to its node. When adding the node fails, the body stays as it was
        and the error is raised; the builder may capture again. When the captured
        graph cannot be destroyed, it is leaked, the new node is taken out again
        and the error raised (if that fails too, the body keeps the work).
        """
        parent = self._parent
        assert parent is not None
        err, node = driver.cuGraphAddChildGraphNode(self._body, None, 0, graph)
        (destroy_err,) = driver.cuGraphDestroy(graph)  # the node holds its own copy
        if err or destroy_err:
            try:
                if err:
                    raise_status(err, "cuGraphAddChildGraphNode")
                raise CUDAError(destroy_err, "cuGraphDestroy", f"the captured graph {format_handle(graph)} was leaked")
            except CUDAError as exc:
                if err and destroy_err:
                    add_failure_note(exc, destroy_err, "cuGraphDestroy", graph)
                elif not err:  # take the node out again: the body stays as it was (G1)
                    (undo,) = driver.cuGraphDestroyNode(node)
                    if undo:
                        add_failure_note(exc, undo, "cuGraphDestroyNode", node)
                        self._filled = True  # the body holds the work after all: it is not captured twice
                        retain(parent._owners, *split_written(owners))  # and keeps what the work uses alive (W5)
                raise
        self._filled = True
        retain(parent._owners, *split_written(owners))  # the capture's definition keeps what the body uses (G5)

    def _abandon_capture(self) -> tuple[Any, str]:
        """End this root's capture and destroy its graph (``(status, call)`` of a failure, status 0 when none).

        A stream cuguard destroyed, or whose context refuses use, is not touched: its capture
        went with it (the driver ends a capture whose stream is destroyed), and a stream of a
        destroyed context must never reach the driver (S2). A closed wrapper of a foreign
        stream it keeps alive is ended: closing the wrapper destroyed nothing; so is a stream
        closed whose destroy was refused (leaked, it still captures).
        """
        stream = self._stream
        if stream._context._closed:
            return 0, "cuStreamEndCapture"
        if stream._closed and (stream._owned or stream._lender is None) and not stream_undestroyed(stream):
            return 0, "cuStreamEndCapture"
        # Open, or a closed wrapper of a stream made elsewhere that it still keeps alive (its lender):
        # closing the wrapper destroyed nothing, so the capture goes on in the driver until ended here.
        return _abandon_capture(stream._handle)

    def _capture_goes_on(self) -> None:
        """The capture could not be ended: it stays counted for good (G6).

        The driver goes on capturing on the stream (leaked with it, W5): the
        releases that would break that capture (a ``cuCtxSynchronize`` in its
        context, a free queued on its stream) keep waiting rather than break it.
        """
        if self._capture is not None:
            self._capture.counted_end = True  # _finish must not count its end

    def _abandon(self, exc: BaseException) -> None:
        """End this root's capture after ``exc``: destroy its graph, close the forks; failures are notes."""
        try:
            err, call = self._abandon_capture()
        except Exception as failure:  # noqa: BLE001 - attached as a note (G4)
            add_failure_note(exc, failure)
        else:
            if err:
                if call == "cuStreamEndCapture":
                    self._capture_goes_on()
                add_failure_note(exc, err, call, self._stream._handle)
        self._finish(exc)

    def _capture_ended(self, exc: BaseException) -> bool:
        """Whether the stream no longer captures after a failed end (asked from the driver; unknown means ongoing)."""
        try:
            err, status = driver.cuStreamIsCapturing(self._stream.handle)
        except Exception as failure:  # noqa: BLE001 - attached as a note (G4)
            add_failure_note(exc, failure)
            return False
        if err:
            add_failure_note(exc, err, "cuStreamIsCapturing", self._stream.handle)
            return False
        return int(status) == 0

    def _finish(self, exc: BaseException | None, *, warn: bool = False, adopting: bool = False) -> BaseException | None:
        """The capture has ended: close the forks' streams and the fork and join events.

        Failures are notes on ``exc`` when given; otherwise the first is returned (the
        others its notes) for the caller to raise; with ``warn`` each is a
        ``CUDAWarning`` of its own (W1, W2). What failed to close is leaked (W5).
        With ``adopting`` the caller ends the capture's count itself once the
        graph holds what its work uses (:func:`capture_ended`).
        """
        self._building = False
        dropped, self._owners = self._owners, {}
        capture = self._capture
        if capture is not None:
            capture.ended = True
            if not adopting and not capture.counted_end:
                capture.counted_end = True
                capture_ended(self._stream)  # once per capture: the releases that waited for it run (G6)
        if dropped and not adopting:
            graph_let_go(list(dropped.values()))  # no graph came of it: memory closed meanwhile is freed (W5)
        forks, self._forks = self._forks, []
        events, self._events = self._events, []
        bodies, self._bodies = self._bodies, []
        first = exc
        resources: list[Stream | Event] = []
        for ref in bodies:  # the capture of their conditional nodes ended: they end with it
            body = ref()
            if body is None or body._closed:
                continue
            body._closed = True
            if body._building:
                failure: CUDAError | None = None
                err, call = body._abandon_capture()
                if err:
                    try:
                        raise_status(err, call)
                    except CUDAError as raised:
                        failure = raised
                if warn:
                    if failure is not None:
                        report_error(
                            failure,
                            body._stream._handle,
                            "the body's capture was leaked",
                            context=body._stream._context,
                        )
                    body._finish(None, warn=True)
                else:
                    if failure is not None and first is not None:
                        add_failure_note(first, failure)
                    elif failure is not None:
                        first = failure
                    first = body._finish(first) or first
                if failure is not None:
                    continue  # a stream whose capture could not be ended is leaked with it (W5)
            resources.append(body._stream)
        for ref, stream in forks:
            fork = ref()
            if fork is not None and fork is not self:
                fork._joined = True
            capture_left(stream)
            resources.append(stream)
        resources.extend(events)
        for resource in resources:
            if warn:
                _close_into(resource, None)
            else:
                first = _close_noting(resource, first)
        return None if first is exc else first

    def complete(self) -> Graph:
        """An executable :class:`~cuguard.graphs.Graph` of :attr:`definition` (see ``GraphDefinition.instantiate``).

        Call :meth:`end_building` first (``RuntimeError`` otherwise, and for a
        fork, before the driver). Raises as ``GraphDefinition.instantiate``
        does; creates nothing when it raises (G1) and the definition stays.
        """
        self._check_open()
        if self._root is not None:
            raise RuntimeError(f"{self!r} is a fork: complete() belongs to the builder that began the capture")
        if self._parent is not None:
            raise RuntimeError(f"{self!r} captures a conditional body: complete the builder that began the capture")
        if self._building:
            raise RuntimeError(f"{self!r} is still building: call end_building() first")
        return self.definition.instantiate()

    # --- the capture's root ---

    def _root_builder(self) -> GraphBuilder:
        return self._root if self._root is not None else self

    # --- release ---

    def close(self) -> None:
        """End a capture still in progress and destroy its graph, close the forks' streams and the definition.

        Idempotent; the wrapped stream stays open. For a fork, only marks it
        closed (its root closes its stream). A failure raises the first
        :class:`~cuguard.errors.CUDAError` after everything else was released
        (what failed is leaked); later failures are its notes.
        """
        if self._driver is not driver_token():
            raise ResourceClosedError(_UNINSTALLED.format(self) + "; nothing was released")
        if self._closed:
            return
        self._closed = True
        if self._root is not None:
            return
        first: BaseException | None = None
        if self._building:
            err, call = self._abandon_capture()
            if err:
                if call == "cuStreamEndCapture":
                    self._capture_goes_on()
                try:
                    raise_status(err, call)
                except CUDAError as exc:
                    first = exc
        failure = self._finish(first)
        if first is None:
            first = failure
        if self._parent is not None:  # a body builder's stream is its own
            first = _close_noting(self._stream, first)
        definition, self._definition = self._definition, None
        if definition is not None:
            try:
                definition.close()
            except CUDAError as exc:
                if first is None:
                    first = exc
                else:
                    add_failure_note(first, exc)
        if first is not None:
            raise first

    def _collect(self) -> None:
        """End a collected builder's capture and release what it made; failures are warnings (W1)."""
        if self._closed or self._root is not None:
            self._closed = True
            return
        self._closed = True
        try:
            if self._building:
                err, call = self._abandon_capture()
                if err:
                    if call == "cuStreamEndCapture":
                        self._capture_goes_on()
                    report(
                        err, call, self._stream._handle, "the capture's graph was leaked", context=self._stream._context
                    )
            self._finish(None, warn=True)
            if self._parent is not None:  # a body builder's stream is its own
                _close_into(self._stream, None)
        except CUDAError as exc:
            report_error(exc, self._stream._handle, "what the builder made was leaked", context=self._stream._context)
        self._definition = None  # collected by itself


def _close_into(resource: Stream | Event | GraphDefinition, exc: BaseException | None) -> None:
    """Close ``resource``; a failure is a note on ``exc``, or a warning when nothing propagates (W1)."""
    try:
        resource.close()
    except CUDAError as failure:
        if exc is not None:
            add_failure_note(exc, failure)
        else:
            report_error(failure, resource._handle, "it was leaked", context=resource._context)
    except ResourceClosedError:
        pass  # closed by its owner already, or of an uninstalled driver: nothing of it is released here
