"""Branches of a capture: forks (:meth:`~cuguard.graphs.GraphBuilder.split`, :meth:`~cuguard.graphs.GraphBuilder.join`)
and conditional nodes, whose bodies are captured by builders of their own.

:class:`CaptureBranches` is a base of :class:`~cuguard.graphs.GraphBuilder`,
found through the builder's class as its own. Each branch captures on a new
non-blocking stream of the builder's context; the streams (and the fork and
join events) are closed when the capture ends. What a step made before a
refusal is destroyed again, as each method says (G1).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from cuguard.context import call_in
from cuguard.errors import CUDAError, ResourceClosedError, Transaction, add_failure_note, driver, raise_status
from cuguard.errors.lowlevel import UINT_LIMIT, int_argument, wrong_kind
from cuguard.graphs import _compat, _conditional
from cuguard.graphs._capture_work import CapturedWork
from cuguard.graphs._conditional import GraphCondition
from cuguard.resources import Event, Stream
from cuguard.resources.lowlevel import capture_joined

if TYPE_CHECKING:
    from cuguard.context import Context
    from cuguard.graphs._capture import GraphBuilder

__all__ = ["CaptureBranches"]

_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING


class CaptureBranches(CapturedWork):
    """The forks and conditional nodes of a graph builder's capture (see :class:`~cuguard.graphs.GraphBuilder`).

    A base of :class:`~cuguard.graphs.GraphBuilder` only, as :class:`CapturedWork`.
    """

    if TYPE_CHECKING:
        _context: Context
        _mode: str

    else:
        __slots__ = ()  # the state is the builder's

    # --- conditional nodes ---

    def create_condition(self, default: int | None = None) -> GraphCondition:
        """A condition handle of the graph being captured (``cuGraphConditionalHandleCreate``).

        For :meth:`if_then`, :meth:`if_else`, :meth:`while_loop` and
        :meth:`switch` of this capture (this builder or its forks); ``default``
        as in :meth:`GraphDefinition.create_condition`. Once the capture ends
        the condition belongs to :attr:`definition`; a capture that ends
        without a graph takes it along (its use then raises
        ``ResourceClosedError``). Each condition needs its conditional node
        before the definition is instantiated (a CUDA rule, checked by
        ``instantiate``). Raises ``TypeError``/``ValueError`` for a bad
        ``default``, ``RuntimeError`` when not building and ``ValueError`` in a
        body builder (cuguard captures bodies into child graphs, which CUDA
        does not allow to hold conditional nodes: nest conditionals in a
        :class:`~cuguard.graphs.GraphDefinition` instead), all before the
        driver; :class:`~cuguard.errors.CUDAError` if the driver refuses
        (nothing is made: CUDA frees handles with their graph).
        """
        default = _conditional.check_default(default)
        self._check_capturing("create a condition")
        self._not_in_body("conditional")
        capture = self._root_builder()._capture
        assert capture is not None  # set while building
        graph, _ = self._capture_tail()
        cond = _conditional.new_condition(graph, self._context, default, capture)
        capture.conditions.append(cond)
        return cond

    def if_then(self, condition: GraphCondition) -> GraphBuilder:
        """Capture an if node after the work so far; return the builder of its body (cuda.core's ``if_cond``).

        The body runs when ``condition`` (of :meth:`create_condition`) is
        non-zero. The returned builder captures on a stream of its own: call
        its :meth:`begin_building`, queue the body's work through it (it is a
        stream), then its :meth:`end_building`, all before this capture ends
        (:meth:`end_building` refuses while a body is building). The body
        holds what was captured as a child graph node. Work captured next here
        follows the conditional node. Bodies take what CUDA allows there:
        kernels, copies, fills, child graphs (no host callbacks, events or
        memory nodes: the driver refuses them at the body's end, and
        :meth:`callback` refuses before).

        Steps: ``cuStreamCreate`` per body, then as :meth:`embed`
        (``cuStreamGetCaptureInfo``, ``cuGraphAddNode``,
        ``cuStreamUpdateCaptureDependencies``); when the last step fails the
        whole capture is abandoned as for :meth:`embed`. On an earlier failure
        :class:`~cuguard.errors.CUDAError` is raised and nothing is left (the
        streams are destroyed again). Raises ``TypeError`` for another kind of
        ``condition``, ``ValueError`` for a condition of another capture or one
        used by a node already, ``RuntimeError`` when not building, before the
        driver.
        """
        return self._conditional("if", condition, 1)[0]

    def if_else(self, condition: GraphCondition) -> tuple[GraphBuilder, GraphBuilder]:
        """Capture an if-else node; return the builders of its two bodies (then, else).

        Arguments, steps and failures as in :meth:`if_then`.
        """
        then, other = self._conditional("if", condition, 2)
        return then, other

    def while_loop(self, condition: GraphCondition) -> GraphBuilder:
        """Capture a while node (its body runs while ``condition`` is non-zero); return its body's builder.

        A kernel in the body must set the condition to 0 to end the loop.
        Arguments, steps and failures as in :meth:`if_then`.
        """
        return self._conditional("while", condition, 1)[0]

    def switch(self, condition: GraphCondition, count: int) -> tuple[GraphBuilder, ...]:
        """Capture a switch node with ``count`` bodies (body ``n`` runs when ``condition`` is ``n``).

        Returns the bodies' builders. ``count`` must be an int of 1 or more
        (``TypeError``/``ValueError`` before the driver); otherwise as
        :meth:`if_then`.
        """
        return self._conditional("switch", condition, _conditional.conditional_size(count))

    def _conditional(self, kind: str, condition: object, size: int) -> tuple[GraphBuilder, ...]:
        if not isinstance(condition, GraphCondition):
            raise wrong_kind("condition", "a GraphCondition", condition)
        self._check_capturing("capture a conditional node")
        self._not_in_body("conditional")
        root = self._root_builder()
        capture = root._capture
        if capture is None or condition._graph is not capture:
            raise ValueError(f"{condition!r} was not made by this capture's create_condition()")
        capture._check_open()
        _conditional.check_unused(condition)
        context, device = self._context, self._stream._device
        params = _conditional.node_params(kind, condition, size, context)
        streams: list[Stream] = []
        undo = Transaction()  # the bodies' streams are closed again if the node cannot be added (G1, G4)
        try:
            for _ in range(size):
                streams.append(Stream._make(call_in(context, _create_stream, _destroy_stream), context, device))
                undo.append(streams[-1].close)
            self._add_at_tail(
                lambda graph, deps, count: _compat.add_node(graph, deps, count, params), "cuGraphAddNode", []
            )
        except BaseException as exc:
            undo.rollback(exc)
            raise
        condition._node = _conditional.CAPTURED
        from cuguard.graphs._capture import GraphBuilder  # it imports this module

        made: list[GraphBuilder] = []
        for stream, body in zip(streams, list(params.conditional.phGraph_out)[:size], strict=True):
            builder = GraphBuilder.__new__(GraphBuilder)
            builder._setup(stream, self._mode, None)
            builder._parent = root
            builder._body = body
            root._bodies.append(weakref.ref(builder))  # its stream is closed when this capture ends
            made.append(builder)
        return tuple(made)

    # --- forks ---

    def split(self, count: int) -> tuple[GraphBuilder, ...]:
        """Fork the capture: ``(self, fork, ...)``, ``count`` builders in all, each following the work so far.

        Each fork captures on a new non-blocking stream of this builder's
        context. Steps: ``cuStreamCreate`` per fork and one ``cuEventCreate``
        (all made first), ``cuEventRecord`` here, then ``cuStreamWaitEvent`` per
        fork (its stream joins the capture); the event is closed with the capture. Join the
        forks back with :meth:`join` before :meth:`end_building` (otherwise it
        fails with ``CUDA_ERROR_STREAM_CAPTURE_UNJOINED``). The fork streams are
        closed when the capture ends.

        Raises ``TypeError``/``ValueError`` for a count that is not an int of 1
        or more and ``RuntimeError`` when not building, before the driver. On a
        driver refusal :class:`~cuguard.errors.CUDAError` is raised, no fork is
        returned and the streams and the event made are destroyed again (G1),
        except, for ``count`` above 2, the streams whose wait succeeded before
        the one that failed: a stream that took part in a capture leaves it only
        when the capture ends, so they are kept, take no further part (no work
        follows their fork point, so the capture can still end) and are closed
        with the capture.
        """
        count = int_argument("count", count, 1, UINT_LIMIT)
        self._check_capturing("split")
        if count == 1:
            return (self,)  # type: ignore[return-value]
        root = self._root_builder()
        context, device = self._context, self._stream._device
        streams: list[Stream] = []
        event: Event | None = None
        joined = 0
        try:
            for _ in range(count - 1):
                streams.append(Stream._make(call_in(context, _create_stream, _destroy_stream), context, device))
            event = Event._create(context, device, timing=False)
            event.record(self._stream)
            for stream in streams:
                (err,) = driver.cuStreamWaitEvent(stream._handle, event._handle, 0)
                if err:
                    raise_status(err, "cuStreamWaitEvent")
                joined += 1
        except BaseException as exc:
            for stream in streams[:joined]:
                root._forks.append((weakref.ref(root), stream))  # in the capture now: closed when it ends
                capture_joined(stream, root._owners)
            for stream in streams[joined:]:
                _close_noting(stream, exc)
            if event is not None:
                _close_noting(event, exc)
            raise
        root._events.append(event)  # closed when the capture ends
        from cuguard.graphs._capture import GraphBuilder  # it imports this module

        made: list[GraphBuilder] = [self]  # type: ignore[list-item]
        for stream in streams:
            fork = GraphBuilder.__new__(GraphBuilder)
            fork._setup(stream, self._mode, root)
            root._forks.append((weakref.ref(fork), stream))  # its stream is closed with the capture
            capture_joined(stream, root._owners)  # what work captured on it uses belongs to the capture (G6)
            made.append(fork)
        return tuple(made)

    def join(self, *forks: GraphBuilder) -> GraphBuilder:
        """Make this builder's next work wait for everything ``forks`` captured; return this builder.

        Per fork, in order: ``cuEventCreate``, ``cuEventRecord`` on the fork,
        ``cuStreamWaitEvent`` here (the event is closed with the capture). A joined
        fork takes no further part (its use raises ``RuntimeError``); its stream
        is closed when the capture ends. Not all-or-nothing: when a join fails,
        :class:`~cuguard.errors.CUDAError` is raised, the forks before it are
        joined, and it and those after are not (they stay usable: join them
        again, or end the capture, which fails with
        ``CUDA_ERROR_STREAM_CAPTURE_UNJOINED`` when they captured work, and
        closes them); the failed join's event is destroyed. Raises ``TypeError``
        for something that is not a builder, ``ValueError`` for this builder
        itself, a builder that is not an open fork of this capture, a fork given
        twice or one joined already, before the driver.
        """
        from cuguard.graphs._capture import GraphBuilder  # it imports this module

        for fork in forks:  # the arguments' kinds before the builder's state (E3)
            if not isinstance(fork, GraphBuilder):
                raise wrong_kind("forks", "GraphBuilders", fork)
        self._check_capturing("join")
        root = self._root_builder()
        seen: set[int] = set()
        for fork in forks:
            if fork is self:
                raise ValueError(f"{self!r} cannot join itself")
            if fork._root is not root or fork._closed:
                raise ValueError(f"{fork!r} is not an open fork of this capture")
            if fork._joined or id(fork) in seen:
                raise ValueError(f"{fork!r} is joined already (or given twice)")
            seen.add(id(fork))
        for fork in forks:
            event = Event._create(self._context, self._stream._device, timing=False)
            try:
                event.record(fork._stream)
                (err,) = driver.cuStreamWaitEvent(self._stream.handle, event._handle, 0)
                if err:
                    raise_status(err, "cuStreamWaitEvent")
            except BaseException as exc:
                _close_noting(event, exc)
                raise
            fork._joined = True
            root._events.append(event)  # closed when the capture ends
        return self  # type: ignore[return-value]


def _close_noting(resource: Stream | Event, exc: BaseException | None) -> BaseException | None:
    """Close ``resource``; a failure becomes a note on ``exc``, or is returned when ``exc`` is None."""
    try:
        resource.close()
    except CUDAError as failure:
        if exc is None:
            return failure
        add_failure_note(exc, failure)
    except ResourceClosedError:
        pass  # closed already, or of an uninstalled driver: nothing of it is released here
    return exc


def _create_stream() -> Any:
    err, handle = driver.cuStreamCreate(_NON_BLOCKING)
    if err:
        raise_status(err, "cuStreamCreate")
    return handle


def _destroy_stream(handle: Any) -> None:
    (err,) = driver.cuStreamDestroy(handle)
    if err:
        raise_status(err, "cuStreamDestroy")
