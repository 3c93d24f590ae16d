"""Conditional nodes: condition handles and if / if-else / while / switch nodes with their bodies.

A :class:`GraphCondition` is a CUDA condition handle (``cuGraphConditionalHandleCreate``)
of a definition: a 32-bit value that kernels set on the device
(``cudaGraphSetConditional``), with an optional default that each launch
assigns first. A conditional node (``cuGraphAddNode`` with
``CU_GRAPH_NODE_TYPE_CONDITIONAL``) owns one or more body graphs, created with
it; each is a :class:`ConditionalBody`, filled with the same builders as a
definition. CUDA allows kernel, empty, memset, memcpy, child-graph and
conditional nodes in bodies (recursively), all in the condition's context; the
builders of other kinds raise ``ValueError`` in a body before the driver.

What body nodes use is kept alive by the definition that holds the node (its
*root*, through the root's CUDA user object), exactly as for its own nodes. A
body is destroyed with its node: once the node is destroyed or the definition
closed, the body refuses use (``ResourceClosedError``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, NoReturn, Self

from cuguard.context import Context
from cuguard.errors import ResourceClosedError, driver, format_handle, raise_status
from cuguard.errors import driver_token as _driver_token
from cuguard.errors.lowlevel import UINT_LIMIT, Unique, int_argument, is_integer, refuse_construction, wrong_kind
from cuguard.graphs import _compat
from cuguard.graphs._common import _types
from cuguard.graphs._definition import GraphDefinition
from cuguard.graphs._nodes import _DESTROYED, Node

if TYPE_CHECKING:
    from cuguard.graphs._executable import Graph

__all__ = ["ConditionalBody", "GraphCondition"]

_ASSIGN_DEFAULT = 1  # CU_GRAPH_COND_ASSIGN_DEFAULT
#: What a condition's ``_node`` holds once a conditional node added during a capture uses it.
CAPTURED: Final = "captured"


class GraphCondition(Unique):
    """A condition handle of a graph definition, made by :meth:`GraphDefinition.create_condition`.

    ``handle`` (also ``int(condition)``) is the 64-bit ``CUgraphConditionalHandle``
    to pass to the kernels that set it (a ``cudaGraphConditionalHandle``
    parameter, ``.u64`` in PTX); on the simulated driver their stand-ins set it
    with ``launch.driver.set_conditional(handle, value)``. ``default`` is the
    value each launch assigns before any node runs, or ``None`` (then the value
    persists between launches; CUDA leaves it undefined at the first launch).
    CUDA frees the handle with its graph. A condition belongs to one
    conditional node (a second is refused with ``ValueError``), and CUDA
    refuses to instantiate a graph holding a condition no live node uses:
    :meth:`GraphDefinition.instantiate` raises ``ValueError`` for it first.
    A condition made by :meth:`GraphBuilder.create_condition` belongs to that
    capture and, once it ended, to the definition it became.
    """

    __slots__ = ("_default", "_graph", "_handle", "_int", "_node")

    _graph: Any  # the GraphDefinition (or body) it was created in, or the capture that made it
    _handle: Any
    _int: int
    _default: int | None
    _node: object  # the node that uses it (a Node, or CAPTURED for a captured node), or None

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(GraphCondition, "GraphDefinition.create_condition()")

    @property
    def handle(self) -> int:
        """The ``CUgraphConditionalHandle`` as an int (a kernel argument).

        Raises ``ResourceClosedError`` once its graph is gone.
        """
        self._graph._check_open()
        return self._int

    def __int__(self) -> int:
        return self.handle

    @property
    def default(self) -> int | None:
        """The value each launch assigns first, or ``None``."""
        return self._default

    @property
    def graph(self) -> GraphDefinition:
        """The definition (or body) the handle was created in.

        For a condition a :class:`GraphBuilder` made, the definition its capture
        became; ``RuntimeError`` while that capture goes on (or when it ended
        without a graph).
        """
        owner = self._graph
        if isinstance(owner, GraphDefinition):
            return owner
        definition: GraphDefinition | None = owner.definition
        if definition is None:
            raise RuntimeError(f"{self!r} belongs to a capture that has not made a definition")
        return definition

    def _used(self) -> bool:
        """Whether a live conditional node uses the condition (a captured node always counts)."""
        node = self._node
        if node is None:
            return False
        return node is CAPTURED or not isinstance(node, Node) or node._state != _DESTROYED

    def __repr__(self) -> str:
        default = "" if self._default is None else f" default={self._default}"
        return f"<GraphCondition {self._int:#x}{default}>"


class ConditionalBody(GraphDefinition):
    """A body graph of a conditional node (``node.branches``): a graph definition the node owns.

    It has the builders, topology queries and edge operations of
    :class:`GraphDefinition`; what its nodes use is kept alive by the root
    definition. It cannot be instantiated, cloned, embedded, closed or used to
    update an executable graph (``TypeError``): it is part of its node's
    definition and goes with it. Host-callback, event and memory-allocation
    nodes are refused (``ValueError``): CUDA does not allow them in bodies.
    """

    __slots__ = ("_node", "_owner_root")

    _node: Node
    _owner_root: GraphDefinition

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(ConditionalBody, "the conditional builders (if_then, if_else, while_loop, switch)")

    @classmethod
    def _of(cls, node: Node, handle: Any, root: GraphDefinition, context: Context) -> ConditionalBody:
        self = cls.__new__(cls)
        self._closed = True
        self._setup(handle, context, {}, 0)
        self._node = node
        self._owner_root = root
        root._bodies.append(self)
        return self

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<ConditionalBody {format_handle(getattr(self, '_int', 0))} of {self._node!r}{state}>"

    def _root(self) -> GraphDefinition:
        return self._owner_root

    def _check_open(self) -> None:
        if self._closed:
            raise ResourceClosedError(f"{self!r} was destroyed with its conditional node or its definition")
        self._owner_root._check_open()

    # What body nodes use lives in the root's payload.
    def _retain(self, owners: Iterable[object], read: Iterable[object] = ()) -> tuple[Any, list[int]]:
        return self._owner_root._retain(owners, read)

    def _unretain(self, retained: tuple[Any, list[int]], exc: BaseException) -> None:
        self._owner_root._unretain(retained, exc)

    def _close_with_node(self) -> None:
        """The node (or the definition) was destroyed: CUDA destroyed this body and its nested ones."""
        if self._closed:
            return
        self._closed = True
        for node in list(self._nodes.values()):
            for body in node._info.get("branches", ()):
                body._close_with_node()
        self._nodes = {}
        self._fresh = []
        root = self._owner_root
        if self in root._bodies:
            root._bodies.remove(self)
        if root._conditions:  # CUDA destroyed the conditions made in the body with it
            root._conditions = [cond for cond in root._conditions if cond._graph is not self]

    def _refuse(self, what: str) -> NoReturn:
        raise TypeError(f"{self!r} cannot {what}: it is part of its conditional node's definition")

    def _not_in_body(self, kind: str) -> NoReturn:
        raise ValueError(f"CUDA does not allow {kind} nodes in a conditional body ({self!r})")

    def instantiate(self) -> Graph:
        """Refused: instantiate the definition that holds the conditional node."""
        self._refuse("be instantiated")

    def clone(self) -> GraphDefinition:
        """Refused: clone the definition that holds the conditional node."""
        self._refuse("be cloned")

    def close(self) -> None:
        """Refused: a body is destroyed with its conditional node."""
        self._refuse("be closed")

    def __enter__(self) -> Self:
        self._refuse("be used as a context manager")

    def _collect(self) -> None:
        """Nothing to release: CUDA destroys a body with its node."""
        self._closed = True

    def callback(self, fn: Callable[[], object], *, deps: Iterable[Node] = ()) -> Node:
        """Refused with ``ValueError``: no host nodes in conditional bodies (a CUDA rule)."""
        self._not_in_body("host-callback")

    def record(self, event: Any, *, deps: Iterable[Node] = ()) -> Node:
        """Refused with ``ValueError``: no event nodes in conditional bodies (a CUDA rule)."""
        self._not_in_body("event-record")

    def wait(self, event: Any, *, deps: Iterable[Node] = ()) -> Node:
        """Refused with ``ValueError``: no event nodes in conditional bodies (a CUDA rule)."""
        self._not_in_body("event-wait")

    def allocate(self, size: int, *, device: Any = None, deps: Iterable[Node] = ()) -> Node:
        """Refused with ``ValueError``: no memory nodes in conditional bodies (a CUDA rule)."""
        self._not_in_body("memory-allocation")

    def deallocate(self, ptr: int | Node, *, deps: Iterable[Node] = ()) -> Node:
        """Refused with ``ValueError``: no memory nodes in conditional bodies (a CUDA rule)."""
        self._not_in_body("memory-free")


def _condition_context(definition: GraphDefinition) -> Context:
    context = definition._root()._context
    if context is None:
        raise ValueError(
            f"{definition!r} has no context: create it with a device (GraphDefinition(device)) to use conditions"
        )
    if context._closed:
        raise context._refusal()
    return context


def check_default(default: object) -> int | None:
    """``default`` checked: an integer of 0..2**32-1 (NumPy's too, as a plain int) or None.

    ``TypeError`` for a bool, a float or another object, ``ValueError`` out of range.
    """
    if default is None:
        return None
    if not is_integer(default):
        raise wrong_kind("default", "an int or None", default)
    return int_argument("default", default, 0, UINT_LIMIT)  # a 32-bit unsigned value


def new_condition(graph: Any, context: Context, default: int | None, owner: object) -> GraphCondition:
    """``cuGraphConditionalHandleCreate`` on ``graph`` for ``context``, recorded as belonging to ``owner``.

    The context is an argument of the call: none needs to be current (the H200
    created handles with no context and with another one current), so no switch
    is made and nothing can be left half done.
    """
    flags = 0 if default is None else _ASSIGN_DEFAULT
    err, handle = driver.cuGraphConditionalHandleCreate(graph, context.handle, default or 0, flags)
    if err:
        raise_status(err, "cuGraphConditionalHandleCreate")
    cond = GraphCondition.__new__(GraphCondition)
    cond._graph = owner
    cond._handle = handle
    cond._int = int(handle)
    cond._default = default
    cond._node = None
    return cond


def create_condition(definition: GraphDefinition, default: int | None) -> GraphCondition:
    """A new condition handle of ``definition``; see :meth:`GraphDefinition.create_condition`."""
    definition._check_open()
    default = check_default(default)
    context = _condition_context(definition)
    cond = new_condition(definition._handle, context, default, definition)
    definition._root()._add_condition(cond)
    return cond


def check_instantiable(definition: GraphDefinition) -> None:
    """Refuse, before the driver, what CUDA refuses to instantiate in a graph with conditions.

    A condition no live node uses (``ValueError``: ``CUDA_ERROR_INVALID_VALUE``
    from the driver), and a second executable graph while one made from this
    definition lives (``RuntimeError``: the H200 answers ``CUDA_ERROR_NOT_SUPPORTED``).
    """
    unused = [cond for cond in definition._conditions or () if not cond._used()]
    if unused:
        names = ", ".join(repr(cond) for cond in unused)
        raise ValueError(
            f"{definition!r} cannot be instantiated: no live conditional node uses {names} "
            "(CUDA refuses a graph holding an unused condition; give each one a node)"
        )
    for ref in definition._executables or ():
        graph = ref()
        if graph is not None and not graph._closed:
            raise RuntimeError(
                f"{definition!r} holds conditional nodes and {graph!r} made from it is still open: "
                "CUDA allows one executable graph of such a graph at a time (close it first)"
            )


def node_params(kind: str, condition: GraphCondition, size: int, context: Context) -> Any:
    """The ``CUgraphNodeParams`` of a conditional node of ``kind`` with ``size`` bodies."""
    types = _types()
    params = types.CUgraphNodeParams()
    params.type = types.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = condition._handle
    params.conditional.type = getattr(types.CUgraphConditionalNodeType, _TYPES[kind])
    params.conditional.size = size
    params.conditional.ctx = context.handle
    return params


def check_unused(condition: GraphCondition) -> None:
    """``ValueError`` when a live conditional node already uses ``condition`` (one node per handle: a CUDA rule)."""
    if condition._used():
        raise ValueError(f"{condition!r} is used by a conditional node already: a condition belongs to one node")


_TYPES = {"if": "CU_GRAPH_COND_TYPE_IF", "while": "CU_GRAPH_COND_TYPE_WHILE", "switch": "CU_GRAPH_COND_TYPE_SWITCH"}


def add_conditional(
    definition: GraphDefinition, kind: str, condition: object, size: int, deps: Iterable[object]
) -> Node:
    """A conditional node of ``kind`` (``"if"``, ``"while"``, ``"switch"``) with ``size`` bodies after ``deps``.

    One driver call (``cuGraphAddNode``), in the condition's context: the node
    and its bodies exist with all their edges, or nothing does.
    """
    if definition._closed or definition._driver is not _driver_token():
        definition._check_open()
    if not isinstance(condition, GraphCondition):
        raise TypeError(f"condition must be a GraphCondition, not {type(condition).__name__}")
    deps = definition._deps(deps)  # kinds before values (E3)
    holder: GraphDefinition | None = definition
    while holder is not None and holder is not condition._graph:
        holder = holder._node._graph if isinstance(holder, ConditionalBody) else None
    if holder is None:
        raise ValueError(f"{condition!r} belongs to {condition._graph!r}, not to {definition!r} or a graph holding it")
    condition._graph._check_open()
    check_unused(condition)
    context = _condition_context(definition)
    params = node_params(kind, condition, size, context)
    info: dict[str, Any] = {"condition": condition, "kind": kind, "branches": ()}
    try:
        node = definition._add(
            "conditional", deps, _compat.add_node, "cuGraphAddNode", params, info=info, context=context, run_in=context
        )
    except BaseException:
        # A node the driver made but could not remove again stays in the definition: it uses the condition.
        for left in definition._nodes.values():
            if left._info is info:
                condition._node = left
        raise
    condition._node = node
    # The driver filled phGraph_out (read only now: before success it points nowhere).
    handles = list(params.conditional.phGraph_out)[:size]
    root = definition._root()
    info["branches"] = tuple(ConditionalBody._of(node, handle, root, context) for handle in handles)
    return node


def conditional_size(count: object) -> int:
    """The number of bodies of a switch node: an integer of 1 or more below ``2**32`` (the driver's
    unsigned int), as a plain int (``TypeError``/``ValueError`` otherwise)."""
    return int_argument("count", count, 1, UINT_LIMIT)
