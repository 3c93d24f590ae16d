"""Differences between cuda-bindings 12.9 and 13.x signatures used by the graph layer.

13.x added an ``edgeData`` argument to the edge functions and to
``cuGraphAddNode`` and an ``edgeData`` output to the edge queries; these
helpers hide that. Each returns what the
driver returned, status first.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cuguard.errors import driver

__all__ = ["add_edge", "add_node", "get_edges", "node_dependencies", "node_dependents", "remove_edge"]


@lru_cache(maxsize=1)
def _bindings_major() -> int:
    try:
        import cuda.bindings
    except ImportError:  # pragma: no cover - cuda-bindings is a dependency of cuguard-errors
        return 13
    return int(str(cuda.bindings.__version__).split(".")[0])


_NEW_EDGE_API = _bindings_major() >= 13  # decided once: the bindings cannot change in a process


def add_edge(graph: Any, a: Any, b: Any) -> Any:
    """Add the one edge ``a -> b``; returns the status."""
    if _NEW_EDGE_API:
        return driver.cuGraphAddDependencies(graph, [a], [b], None, 1)[0]
    return driver.cuGraphAddDependencies(graph, [a], [b], 1)[0]


def add_node(graph: Any, dependencies: list[Any] | None, count: int, params: Any) -> tuple[Any, Any]:
    """``(status, node)`` of ``cuGraphAddNode`` with default edges to ``dependencies``."""
    if _NEW_EDGE_API:
        return driver.cuGraphAddNode(graph, dependencies, None, count, params)  # type: ignore[no-any-return]
    return driver.cuGraphAddNode(graph, dependencies, count, params)  # type: ignore[no-any-return]


def remove_edge(graph: Any, a: Any, b: Any) -> Any:
    """Remove the one edge ``a -> b``; returns the status."""
    if _NEW_EDGE_API:
        return driver.cuGraphRemoveDependencies(graph, [a], [b], None, 1)[0]
    return driver.cuGraphRemoveDependencies(graph, [a], [b], 1)[0]


def get_edges(graph: Any, count: int) -> tuple[Any, list[Any], list[Any], int]:
    """``(status, from, to, total)`` of ``cuGraphGetEdges`` asked for ``count`` edges."""
    result = driver.cuGraphGetEdges(graph, count)
    return result[0], list(result[1] or []), list(result[2] or []), int(result[-1] or 0)


def node_dependencies(node: Any, count: int) -> tuple[Any, list[Any], int]:
    """``(status, dependencies, total)`` of ``cuGraphNodeGetDependencies``."""
    result = driver.cuGraphNodeGetDependencies(node, count)
    return result[0], list(result[1] or []), int(result[-1] or 0)


def node_dependents(node: Any, count: int) -> tuple[Any, list[Any], int]:
    """``(status, dependents, total)`` of ``cuGraphNodeGetDependentNodes``."""
    result = driver.cuGraphNodeGetDependentNodes(node, count)
    return result[0], list(result[1] or []), int(result[-1] or 0)
