"""Work a capture's graph keeps alive: the nodes a :class:`~cuguard.graphs.GraphBuilder` adds itself.

:class:`CapturedWork` is a base of :class:`~cuguard.graphs.GraphBuilder`: the
builder's :meth:`~cuguard.graphs.GraphBuilder.launch`,
:meth:`~cuguard.graphs.GraphBuilder.callback`,
:meth:`~cuguard.graphs.GraphBuilder.embed` and
:meth:`~cuguard.graphs.GraphBuilder.keep`, found through the builder's class as
its own. What they use is kept alive with the capture's graph (G5, W5, G6). A
node added at the capture's tail cannot be removed again (CUDA forbids removing
nodes from a graph being captured): when the last step fails, the capture is
abandoned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from cuguard.errors import CUDAError, driver, raise_status
from cuguard.errors.lowlevel import wrong_kind
from cuguard.graphs import _lifetime
from cuguard.graphs._common import _check_owners, _types
from cuguard.graphs._definition import GraphDefinition
from cuguard.resources import Kernel, LaunchConfig, Stream, launch
from cuguard.resources.lowlevel import check_read_only, retain, split_written

if TYPE_CHECKING:
    from cuguard.graphs._capture import GraphBuilder

__all__ = ["CapturedWork"]

_SET_DEPENDENCIES = 1  # CU_STREAM_SET_CAPTURE_DEPENDENCIES


def _bindings_major() -> int:
    import cuda.bindings

    return int(str(cuda.bindings.__version__).split(".")[0])


_EDGE_DATA: Final[bool] = _bindings_major() >= 13


class CapturedWork:
    """The work a graph builder captures itself (see :class:`~cuguard.graphs.GraphBuilder`).

    A base of :class:`~cuguard.graphs.GraphBuilder` only: these methods use the
    builder's state (its ``__slots__``) and its checks, declared below for the
    type checker.
    """

    if TYPE_CHECKING:
        _stream: Stream

        def _check_capturing(self, action: str) -> None: ...
        def _root_builder(self) -> GraphBuilder: ...

    else:
        __slots__ = ()  # the state is the builder's

    # --- work the definition keeps alive ---

    def keep(self, *objects: object) -> None:
        """Keep ``objects`` alive as long as any graph made from this capture may use them (W5).

        For what work queued through the builder's handle by other code uses.
        Memory among ``objects`` counts as used by a graph from now on:
        ``close()`` closes it for use and frees it only once no graph made from
        this capture may run (G6). Raises ``RuntimeError`` when not building.
        """
        self._check_capturing("keep objects")
        self._retain(list(objects))

    def launch(self, config: LaunchConfig, kernel: Kernel, *args: Any, read_only: Sequence[int] = ()) -> None:
        """Capture a launch of ``kernel`` (see :func:`~cuguard.resources.launch`); keep it and its buffers alive.

        ``read_only`` names the arguments the kernel only reads: the race
        checker counts a launch of the graph as reading them (B7).
        Raises as :func:`~cuguard.resources.launch` does (nothing is captured
        then) and ``RuntimeError`` when not building.
        """
        if not isinstance(config, LaunchConfig):
            raise wrong_kind("config", "a LaunchConfig", config)
        if not isinstance(kernel, Kernel):
            raise wrong_kind("kernel", "a Kernel", kernel)
        if read_only:
            check_read_only(read_only, len(args))  # an argument's kind before the builder's state (E3)
        self._check_capturing("launch")
        # The capture's table is the one of this builder's stream: the captured launch keeps the kernel, its
        # module and the memory it uses with the graph, with their write marks (G6, B7).
        launch(self._stream, config, kernel, *args, read_only=read_only)

    def _retain(self, owners: list[object], read: Sequence[object] = ()) -> None:
        """Keep ``owners`` (written) and ``read`` alive with the capture's graph (memory: graph-used, G6)."""
        retain(self._root_builder()._owners, owners, read)

    def callback(self, fn: Callable[[], object]) -> None:
        """Capture a host node calling ``fn()`` at each launch; ``fn`` lives as long as a graph may call it.

        The node is added to the capture's graph directly (``cuStreamGetCaptureInfo``,
        ``cuGraphAddHostNode``, ``cuStreamUpdateCaptureDependencies``), not with
        ``cuLaunchHostFunc``: cuda-bindings frees the data of a ``cuLaunchHostFunc``
        callback after its first call, so a captured one would crash the process
        when the graph runs a second time. When the last step fails the capture is
        abandoned, as for :meth:`embed`.

        An exception raised by ``fn`` goes to ``sys.unraisablehook`` and the
        graph carries on (W6); ``fn`` must not call CUDA. Raises ``TypeError``
        for a non-callable and ``RuntimeError`` when not building, before the
        driver; :class:`~cuguard.errors.CUDAError` if the driver refuses
        (nothing is captured then).
        """
        if not callable(fn):
            raise TypeError(f"a host callback must be callable, not {type(fn).__name__}")
        self._check_capturing("capture a callback")
        self._not_in_body("host-callback")
        entry = _lifetime.HostCallback(fn)
        types = _types()
        params = types.CUDA_HOST_NODE_PARAMS()
        params.fn = types.CUhostFn(_lifetime.host_thunk_address())
        params.userData = entry.token
        self._add_at_tail(
            lambda graph, deps, count: driver.cuGraphAddHostNode(graph, deps, count, params),
            "cuGraphAddHostNode",
            [entry],
        )

    def _add_at_tail(
        self,
        add: Callable[[Any, list[Any], int], Any],
        call: str,
        owners: list[object],
        read: Sequence[object] = (),
    ) -> None:
        """Add a node after the work captured so far and make the capture continue from it.

        ``add(graph, deps, count)`` adds the node (returning ``(status, node)``);
        ``owners`` (written by the node) and ``read`` (only read) are kept alive
        from then on (G5, B7). A refused last step abandons
        the capture: a node cannot be removed from a graph being captured.
        """
        stream = self._stream.handle
        graph, deps = self._capture_tail()
        err, node = add(graph, deps, len(deps))
        if err:
            raise_status(err, call)
        self._retain(owners, read)  # the node exists now, whatever follows (G5)
        if _EDGE_DATA:
            (err,) = driver.cuStreamUpdateCaptureDependencies(stream, [node], None, 1, _SET_DEPENDENCIES)
        else:
            (err,) = driver.cuStreamUpdateCaptureDependencies(stream, [node], 1, _SET_DEPENDENCIES)
        if err:
            try:
                raise_status(err, "cuStreamUpdateCaptureDependencies")
            except CUDAError as exc:
                self._root_builder()._abandon(exc)
                raise

    def embed(self, child: GraphBuilder | GraphDefinition) -> None:
        """Capture a child graph node running a copy of ``child`` (a definition, or a builder's :attr:`definition`).

        The node follows the work captured so far on this builder's stream and the
        work captured next follows it. Everything the child's nodes use is kept
        alive. Steps: ``cuStreamGetCaptureInfo``, ``cuGraphAddChildGraphNode``,
        ``cuStreamUpdateCaptureDependencies``. When the last step fails the node
        cannot be removed (CUDA forbids removing nodes from a graph being
        captured) and would run unordered with later work, so the whole capture
        is abandoned: it is ended and its graph destroyed, the forks' streams are
        closed, :class:`~cuguard.errors.CUDAError` is raised and the builder is
        no longer building (begin again to capture anew); nothing is left
        behind. Raises ``TypeError`` for another kind of ``child`` and
        ``RuntimeError`` when not building, before the driver;
        :class:`~cuguard.errors.CUDAError` if the driver refuses an earlier step
        (nothing is added then).
        """
        from cuguard.graphs._capture import GraphBuilder  # it imports this module

        if isinstance(child, GraphBuilder):
            definition = child.definition
        elif isinstance(child, GraphDefinition):
            definition = child
        else:
            raise wrong_kind("child", "a GraphBuilder or a GraphDefinition", child)
        self._check_capturing("embed a child graph")
        child_handle = definition.handle
        definition._check_no_memory_nodes("be embedded as a child graph")
        _check_owners(definition, definition._owners, "embedded")
        written, read = split_written(definition._owners)
        self._add_at_tail(
            lambda graph, deps, count: driver.cuGraphAddChildGraphNode(graph, deps, count, child_handle),
            "cuGraphAddChildGraphNode",
            written,
            read,
        )

    def _capture_tail(self) -> tuple[Any, list[Any]]:
        """``(graph, dependencies)`` of the capture on this builder's stream (``cuStreamGetCaptureInfo``)."""
        info = driver.cuStreamGetCaptureInfo(self._stream.handle)
        err = info[0]
        if err:
            raise_status(err, "cuStreamGetCaptureInfo")
        if int(info[1]) != 1:
            raise CUDAError(_types().CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamGetCaptureInfo")
        return info[3], list(info[4] or [])[: int(info[-1])]

    def _not_in_body(self, kind: str) -> None:
        if self._root_builder()._parent is not None:
            raise ValueError(f"{self!r} captures a conditional body: CUDA does not allow {kind} nodes there")
