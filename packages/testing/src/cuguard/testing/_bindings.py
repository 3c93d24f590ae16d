"""The differences between the cuda-bindings majors (12.9.x and 13.x) that cuguard.testing follows.

The simulated driver has the signatures and return conventions of the
installed ``cuda.bindings.driver``, decided once at import (the bindings cannot
change in a process). Where they differ:

- ``cuCtxCreate``: 13.x takes ``(ctxCreateParams, flags, dev)``; 12.x takes
  ``(flags, dev)``.
- ``cuGraphAddDependencies`` and ``cuGraphRemoveDependencies``: 13.x takes
  ``(hGraph, from_, to, edgeData, numDependencies)``; 12.x has no ``edgeData``.
- ``cuGraphGetEdges``, ``cuGraphNodeGetDependencies`` and
  ``cuGraphNodeGetDependentNodes``: 13.x returns an ``edgeData`` list before the
  count; 12.x does not.

The helpers below call a driver object (the real module, a simulator, a fault
proxy) with the installed signature, for the tools and tests that call the
driver directly.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "BINDINGS_MAJOR",
    "CTX_CREATE_PARAMS",
    "EDGE_DATA",
    "add_dependencies",
    "ctx_create",
    "get_edges",
    "node_dependencies",
    "node_dependents",
    "remove_dependencies",
]


def _installed_major() -> int:
    try:
        import cuda.bindings
    except ImportError:  # pragma: no cover - cuda-bindings is a dependency of cuguard-errors
        return 13
    return int(str(cuda.bindings.__version__).split(".")[0])


#: The major version of the installed cuda-bindings (12 or 13).
BINDINGS_MAJOR: Final[int] = _installed_major()
#: Whether ``cuCtxCreate`` takes ``ctxCreateParams`` first (13.x).
CTX_CREATE_PARAMS: Final[bool] = BINDINGS_MAJOR >= 13
#: Whether the graph edge functions take and return ``edgeData`` (13.x).
EDGE_DATA: Final[bool] = BINDINGS_MAJOR >= 13


def ctx_create(drv: Any, flags: int, dev: Any) -> Any:
    """``drv.cuCtxCreate`` with no creation parameters; returns ``(status, context)``."""
    if CTX_CREATE_PARAMS:
        return drv.cuCtxCreate(None, flags, dev)
    return drv.cuCtxCreate(flags, dev)


def add_dependencies(drv: Any, graph: Any, from_: Any, to: Any, count: int) -> Any:
    """``drv.cuGraphAddDependencies`` with no edge data; returns ``(status,)``."""
    if EDGE_DATA:
        return drv.cuGraphAddDependencies(graph, from_, to, None, count)
    return drv.cuGraphAddDependencies(graph, from_, to, count)


def remove_dependencies(drv: Any, graph: Any, from_: Any, to: Any, count: int) -> Any:
    """``drv.cuGraphRemoveDependencies`` with no edge data; returns ``(status,)``."""
    if EDGE_DATA:
        return drv.cuGraphRemoveDependencies(graph, from_, to, None, count)
    return drv.cuGraphRemoveDependencies(graph, from_, to, count)


def get_edges(drv: Any, graph: Any, count: int = 0) -> tuple[Any, Any, Any, Any]:
    """``drv.cuGraphGetEdges`` as ``(status, from, to, total)``, without the edge data."""
    result = drv.cuGraphGetEdges(graph, count)
    return result[0], result[1], result[2], result[-1]


def node_dependencies(drv: Any, node: Any, count: int = 0) -> tuple[Any, Any, Any]:
    """``drv.cuGraphNodeGetDependencies`` as ``(status, dependencies, total)``."""
    result = drv.cuGraphNodeGetDependencies(node, count)
    return result[0], result[1], result[-1]


def node_dependents(drv: Any, node: Any, count: int = 0) -> tuple[Any, Any, Any]:
    """``drv.cuGraphNodeGetDependentNodes`` as ``(status, dependents, total)``."""
    result = drv.cuGraphNodeGetDependentNodes(node, count)
    return result[0], result[1], result[-1]
