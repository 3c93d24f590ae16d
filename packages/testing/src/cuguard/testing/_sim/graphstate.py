"""The records of the simulated driver's graphs: nodes, graphs, node specs, executable graphs, user objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cuguard.testing._sim.state import Alloc, Ctx, Function, Stream

__all__ = ["CopySpec", "Exec", "Graph", "KernelSpec", "MemsetSpec", "Node", "UserObject"]


@dataclass(eq=False, slots=True)
class Node:
    handle: int
    graph: Graph
    type: Any
    spec: Any
    deps: list[Node] = field(default_factory=list)
    outs: list[Node] = field(default_factory=list)
    destroyed: bool = False


@dataclass(eq=False, slots=True)
class Graph:
    handle: int
    call: str
    nodes: dict[int, Node] = field(default_factory=dict)
    edges: dict[tuple[int, int], None] = field(default_factory=dict)
    user_refs: dict[int, int] = field(default_factory=dict)
    destroyed: bool = False
    child: bool = False
    # cuGraphClone: original node handle -> node of this clone (cuGraphNodeFindInClone).
    origin: dict[int, int] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class KernelSpec:
    fn: Function
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    args: tuple[Any, ...]
    params: Any
    # A captured cuLaunchKernelEx's cluster dimensions and cooperative flag (its node's launch attributes).
    cluster: tuple[int, int, int] | None = None
    cooperative: bool = False


@dataclass(eq=False, slots=True)
class MemsetSpec:
    dst: int
    value: int
    element: int
    width: int
    height: int
    pitch: int


@dataclass(eq=False, slots=True)
class CopySpec:
    src_type: int
    src: int
    src_x: int
    src_y: int
    src_z: int
    src_pitch: int
    src_height: int
    dst_type: int
    dst: int
    dst_x: int
    dst_y: int
    dst_z: int
    dst_pitch: int
    dst_height: int
    width: int
    height: int
    depth: int


@dataclass(eq=False, slots=True)
class Exec:
    handle: int
    ctx: Ctx | None
    steps: list[tuple[Any, Any]]
    signature: tuple[Any, ...]
    user_refs: dict[int, int]
    refs: frozenset[int]
    allocs: list[Alloc]
    destroyed: bool = False
    # (stream, last op seq) of each launch not yet known to have completed.
    launches: list[tuple[Stream, int]] = field(default_factory=list)
    # The graph it was instantiated from, and where each of that graph's nodes is in ``steps``
    # (first, end): the per-node updates and cuGraphNodeSetEnabled find their steps with it.
    origin: int = 0
    where: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Positions in ``steps`` of disabled nodes (cuGraphNodeSetEnabled): they run as empty nodes.
    disabled: set[int] = field(default_factory=set)


@dataclass(eq=False, slots=True)
class UserObject:
    handle: int
    fn: int
    ptr: int | None
    refs: int
    destroyed: bool = False
