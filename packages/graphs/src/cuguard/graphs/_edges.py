"""All-or-nothing edge changes of a graph definition, and the cycle check before them.

Every edge change that takes several driver calls is all-or-nothing (B4, G3):
edges of existing nodes are added and removed one driver call per edge (the
driver's bulk edge calls are not atomic), completed steps are undone in
reverse order when a later step fails, and a failed undo step becomes a note
on the raised exception (G4). An edge that would close a cycle is refused
before any edge changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuguard.errors import CUDAError, add_failure_note
from cuguard.graphs import _compat

if TYPE_CHECKING:
    from cuguard.graphs._definition import GraphDefinition
    from cuguard.graphs._nodes import Node

__all__ = ["apply_edges"]


def apply_edges(graph: GraphDefinition, removes: list[tuple[Node, Node]], adds: list[tuple[Node, Node]]) -> None:
    """Remove then add edges, one driver call each; undo in reverse on failure (B4, G3, G4)."""
    for a, b in (*removes, *adds):
        a._check_live()
        b._check_live()
    if removes:
        graph._check_no_memory_nodes("have edges removed")
    if adds:
        _refuse_cycles(graph, removes, adds)
    graph._version += 1
    done: list[tuple[bool, Node, Node]] = []
    try:
        for a, b in removes:
            err = _compat.remove_edge(graph._handle, a._handle, b._handle)
            if err:
                raise CUDAError(err, "cuGraphRemoveDependencies", f"removing the edge {a!r} -> {b!r}")
            done.append((False, a, b))
        for a, b in adds:
            err = _compat.add_edge(graph._handle, a._handle, b._handle)
            if err:
                raise CUDAError(err, "cuGraphAddDependencies", f"adding the edge {a!r} -> {b!r}")
            done.append((True, a, b))
    except BaseException as exc:
        _undo_edges(graph, done, exc)
        raise


def _refuse_cycles(graph: GraphDefinition, removes: list[tuple[Node, Node]], adds: list[tuple[Node, Node]]) -> None:
    """``ValueError`` naming the nodes when the edges after the change would form a cycle.

    Checked against the edges the driver lists (``cuGraphGetEdges``), before any edge
    changes: CUDA itself accepts such an edge and refuses only the instantiation, with a
    bare ``CUDA_ERROR_INVALID_VALUE``.
    """
    edges = (set(graph.edges) - set(removes)) | set(adds)
    successors: dict[Node, list[Node]] = {}
    for a, b in edges:
        successors.setdefault(a, []).append(b)
    for a, b in adds:
        path = _path(successors, b, a)
        if path is not None:
            loop = " -> ".join(repr(node) for node in (a, *path))
            raise ValueError(f"the edge {a!r} -> {b!r} would make a cycle: {loop}")


def _undo_edges(graph: GraphDefinition, done: list[tuple[bool, Node, Node]], exc: BaseException) -> None:
    for added, a, b in reversed(done):
        try:
            if added:
                err = _compat.remove_edge(graph._handle, a._handle, b._handle)
                call, left = "cuGraphRemoveDependencies", f"the added edge {a!r} -> {b!r} remains"
            else:
                err = _compat.add_edge(graph._handle, a._handle, b._handle)
                call, left = "cuGraphAddDependencies", f"the removed edge {a!r} -> {b!r} stays removed"
        except Exception as undo_exc:  # noqa: BLE001 - attached as a note (G4)
            add_failure_note(exc, undo_exc)
            continue
        if err:
            add_failure_note(exc, CUDAError(err, call, f"undo failed: {left}"))


def _path(successors: dict[Node, list[Node]], start: Node, goal: Node) -> list[Node] | None:
    """The nodes of a path ``start`` ... ``goal`` along ``successors`` (both ends included), or ``None``."""
    came_from: dict[Node, Node | None] = {start: None}
    stack = [start]
    while stack:
        node = stack.pop()
        if node is goal:
            path = [node]
            while (previous := came_from[path[-1]]) is not None:
                path.append(previous)
            return path[::-1]
        for nxt in successors.get(node, ()):
            if nxt not in came_from:
                came_from[nxt] = node
                stack.append(nxt)
    return None
