"""cuguard.graphs: explicit CUDA graphs with all-or-nothing mutations and deferred cleanup.

- :class:`GraphDefinition`: a graph under construction. Builders add nodes
  (``empty``, ``join``, ``memset``, ``memcpy``, ``launch``, ``callback``,
  ``record``, ``wait``, ``allocate``, ``deallocate``, ``embed``); ``nodes`` and
  ``edges`` read the topology from the driver; ``connect``/``disconnect``
  change edges; ``clone``; ``instantiate``; ``create_condition`` and the
  conditional builders (``if_then``, ``if_else``, ``while_loop``, ``switch``).
- :class:`GraphCondition`: a condition handle; :class:`ConditionalBody`: a body
  of a conditional node (``node.branches``), filled like a definition.
- :class:`Node`: one node; ``pred``/``succ`` are live set-like views
  (:class:`EdgeView`) of its edges; the same builders make dependent nodes;
  ``set_params``/``set_args`` change a kernel node; ``destroy``.
- :class:`Graph`: an executable graph: ``launch``, ``upload``, ``update``
  (refusals raise :class:`GraphUpdateError` saying why), per-node changes
  (``set_kernel_params``, ``set_memset_params``, ``set_memcpy_params``,
  ``set_callback``, ``set_event``, ``set_child``, ``set_enabled``,
  ``is_enabled``), ``close``.
- :class:`GraphBuilder`: stream capture (``begin_building``, ``end_building``,
  ``complete``, ``split``, ``join``, ``embed``, ``callback``, ``launch``) and
  conditional nodes in it (``create_condition``; ``if_then``, ``if_else``,
  ``while_loop``, ``switch`` return body builders); the builder is a stream
  while it builds. :func:`exchange_capture_mode` and
  :func:`capture_mode` set the calling thread's capture mode.
- :func:`flush_deferred`: wait for the deferred release of what graphs kept alive.

Every multi-step mutation is all-or-nothing (contract B4, G3); nodes keep what
they use alive until CUDA has dropped every graph that may use it (G5, W5).

The layer is built two ways from one source: pure Python, and compiled (nodes,
the empty-node builder and executable graphs compiled, the definition's
building state in C slots). :data:`compiled` says which one is running; both behave the same.
"""

from __future__ import annotations

from cuguard.graphs import _buildcheck  # noqa: F401 - first: refuses a mixed build before it loads
from cuguard.graphs import _nodes as _nodes_module
from cuguard.graphs._capture import CAPTURE_MODES as CAPTURE_MODES
from cuguard.graphs._capture import GraphBuilder as GraphBuilder
from cuguard.graphs._capture import capture_mode as capture_mode
from cuguard.graphs._capture import exchange_capture_mode as exchange_capture_mode
from cuguard.graphs._conditional import ConditionalBody as ConditionalBody
from cuguard.graphs._conditional import GraphCondition as GraphCondition
from cuguard.graphs._definition import GraphDefinition as GraphDefinition
from cuguard.graphs._executable import Graph as Graph
from cuguard.graphs._executable import GraphUpdateError as GraphUpdateError
from cuguard.graphs._lifetime import flush_deferred as flush_deferred
from cuguard.graphs._lifetime import pending_payloads as pending_payloads
from cuguard.graphs._nodes import EdgeView as EdgeView
from cuguard.graphs._nodes import Node as Node

__all__ = [
    "CAPTURE_MODES",
    "ConditionalBody",
    "EdgeView",
    "Graph",
    "GraphBuilder",
    "GraphCondition",
    "GraphDefinition",
    "GraphUpdateError",
    "Node",
    "capture_mode",
    "compiled",
    "exchange_capture_mode",
    "flush_deferred",
    "pending_payloads",
]

__version__ = "0.1.0"

#: Whether this process runs the compiled build of this layer: ``True`` when the module defining
#: :class:`Node` is the compiled extension of this installation, ``False`` for the pure-Python build.
#: Either way the driver calls of the hot builders go through the resources layer's compiled calls only
#: while those are in use (:data:`cuguard.resources.compiled`). Fixed at import.
compiled: bool = not (_nodes_module.__file__ or "").endswith(".py")
