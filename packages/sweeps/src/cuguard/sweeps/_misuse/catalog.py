"""The misuse sweep's catalog: every public operation of every layer, with what each parameter takes.

An :class:`Op` names one public operation (``"resources.Stream.wait"``, in the
operation-naming scheme of :mod:`cuguard.sweeps`), the kind of its receiver
(``None`` for functions, constructors and class methods) and its parameters. A
:class:`Param` says which kinds of value it accepts: the cuguard kinds for
parameters that take cuguard objects (E3: any other kind, ``None`` or a number
must raise ``TypeError`` naming the parameter, the expected kind and what was
given), or a list of candidate values for plain parameters (sizes, flags,
names), which mix good and bad values and are only held to the general rules
(only the documented exception types, with a message).

``uses`` marks parameters (and, per operation, the receiver) whose object must
be usable: an object of an uninstalled driver (O3), of a destroyed context (O4)
or a closed one (E3) must be refused with ``ResourceClosedError``.

The operations are declared as data per layer: :mod:`.ops_errors`,
:mod:`.ops_context`, :mod:`.ops_resources`, :mod:`.ops_memory` and
:mod:`.ops_kernels` (the resources layer by area), :mod:`.ops_graphs` and
:mod:`.ops_capture`; :func:`build_ops` collects them. :data:`COVERAGE`
(:mod:`.coverage`) says how the callables without an operation of their own are
drawn, or why they are not; :func:`coverage_problems` checks it.
"""

from __future__ import annotations

import importlib
import importlib.util
import types
from collections.abc import Callable
from types import FunctionType, GetSetDescriptorType, SimpleNamespace

from cuguard.sweeps._misuse import (
    ops_capture,
    ops_context,
    ops_errors,
    ops_graphs,
    ops_kernels,
    ops_memory,
    ops_resources,
)
from cuguard.sweeps._misuse.coverage import COVERAGE
from cuguard.sweeps._misuse.ops_base import ANY, CTX_HANDLE, EDGE, KERNEL_ARGS, Op, Param

__all__ = [
    "ANY",
    "COVERAGE",
    "CTX_HANDLE",
    "EDGE",
    "KERNEL_ARGS",
    "LAYERS",
    "Op",
    "Param",
    "build_ops",
    "coverage_problems",
    "public_callables",
]

#: The tables of the catalog, in the order the sweep draws from (a seeded run depends on it).
_TABLES: tuple[Callable[[SimpleNamespace, Callable[[], bytes]], list[Op]], ...] = (
    ops_errors.errors_ops,
    ops_context.context_ops,
    ops_resources.device_ops,
    ops_resources.stream_and_event_ops,
    ops_resources.buffer_ops,
    ops_memory.memory_resource_ops,
    ops_memory.pool_ops,
    ops_kernels.launch_ops,
    ops_kernels.code_ops,
    ops_graphs.definition_ops,
    ops_graphs.node_builder_ops,
    ops_graphs.definition_use_ops,
    ops_graphs.node_ops,
    ops_graphs.graph_ops,
    ops_capture.capture_ops,
)


def build_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Every operation of the catalog. ``L`` holds the layers; ``image()`` the kernel image of the driver now."""
    return [op for table in _TABLES for op in table(L, image)]


# --- completeness -------------------------------------------------------------------------------

#: The layers whose public callables the catalog must cover (their ``__all__``).
LAYERS = ("errors", "context", "resources", "graphs")


def _members(cls: type) -> list[str]:
    """The public methods and properties of ``cls`` (its own and those it inherits from cuguard classes)."""
    found: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("cuguard."):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_"):
                continue
            # A compiled class's properties are getset descriptors and its methods compiled functions.
            if isinstance(attr, FunctionType | classmethod | staticmethod | property | GetSetDescriptorType) or (
                hasattr(attr, "__get__") and callable(attr) and not isinstance(attr, type)
            ):
                found.add(name)
    return sorted(found)


def _home(value: type, exporter: str) -> str:
    """The layer a class belongs to: the one whose package defines it (else the one exporting it)."""
    module = getattr(value, "__module__", "")
    return next((layer for layer in LAYERS if module.startswith(f"cuguard.{layer}.")), exporter)


def public_callables(L: SimpleNamespace) -> list[str]:
    """Every public callable of every layer, in the naming scheme of :mod:`cuguard.sweeps`.

    ``layer.function``, ``layer.Class()`` (the class itself: constructing it) and
    ``layer.Class.member`` (its public methods and properties). A layer's declared
    interface for the layers above (its ``lowlevel`` module) counts as public: its
    names are keyed like the layer's own.
    """
    names: set[str] = set()
    for layer in LAYERS:
        module = getattr(L, layer)
        spec = importlib.util.find_spec(f"{module.__name__}.lowlevel")
        interface = None if spec is None else importlib.import_module(spec.name)
        exported = [(module, name) for name in module.__all__]
        exported += [(interface, name) for name in getattr(interface, "__all__", ())]
        for owner, name in exported:
            value = getattr(owner, name)
            if isinstance(value, types.ModuleType):
                continue
            if isinstance(value, type):
                home = _home(value, layer)
                names.add(f"{home}.{name}()")
                names.update(f"{home}.{name}.{member}" for member in _members(value))
            elif callable(value):
                names.add(f"{layer}.{name}")
    return sorted(names)


def _drawn(key: str, op_names: set[str]) -> bool:
    """Whether an operation of the catalog calls ``key``: its name, a variant ``key[...]``, or a part ``key.part``.

    A part is a member of what a member returns (``graphs.Node.pred.add`` draws ``graphs.Node.pred``).
    """
    for name in op_names:
        if name == key or name.startswith(key + "["):
            return True
        if not key.endswith("()") and name.startswith(key + "."):
            return True
    return False


def _resolves(L: SimpleNamespace, name: str) -> bool:
    """Whether ``name`` (without its ``[variant]``) starts with a public callable of its layer, as the scheme says.

    ``layer.function`` and ``layer.Class()`` name what the layer (or its ``lowlevel`` interface)
    exports; ``layer.Class.member[.part]`` a member of that class.
    """
    layer, _, rest = name.split("[", 1)[0].partition(".")
    if layer not in LAYERS or not rest:
        return False
    head, _, member = rest.partition(".")
    constructs = head.endswith("()")
    head = head.removesuffix("()")
    module = getattr(L, layer)
    spec = importlib.util.find_spec(f"{module.__name__}.lowlevel")
    owners = [module] if spec is None else [module, importlib.import_module(spec.name)]
    exported = [getattr(owner, head) for owner in owners if head in getattr(owner, "__all__", ())]
    if not exported:
        return False
    if constructs:
        return not member and isinstance(exported[0], type)
    if not member:
        return True
    member = member.split(".", 1)[0]
    return not isinstance(exported[0], type) or hasattr(exported[0], member)


def coverage_problems(L: SimpleNamespace, ops: list[Op], steps: frozenset[str]) -> list[str]:
    """What keeps the catalog from being complete: callables with neither an entry nor a reason, and bad rows.

    An operation whose name does not start with a public callable in the naming scheme of
    :mod:`cuguard.sweeps` is a problem too. A row of :data:`COVERAGE` names an operation of the catalog, a step kind
    (``"step:<kind>"``) or gives a written reason (a sentence) why the callable
    is not drawn.
    """
    op_names = {op.name for op in ops}
    public = public_callables(L)
    problems = [
        f"{name}: an operation name outside the naming scheme (layer.function, layer.Class(), layer.Class.member)"
        for name in sorted(op_names)
        if not _resolves(L, name)
    ]
    problems += [
        f"{key}: no catalog entry and no reason in COVERAGE"
        for key in public
        if key not in COVERAGE and not _drawn(key, op_names)
    ]
    for key, why in COVERAGE.items():
        if key not in public:
            problems.append(f"{key}: in COVERAGE but not a public callable of {', '.join(LAYERS)}")
        elif why.startswith("step:"):
            if why[5:] not in steps:
                problems.append(f"{key}: COVERAGE names the step kind {why[5:]!r}, which does not exist")
        elif why.startswith("op:"):
            if why[3:] not in op_names:
                problems.append(f"{key}: COVERAGE names the operation {why[3:]!r}, which is not in the catalog")
        elif len(why.split()) < 4:
            problems.append(f"{key}: the reason in COVERAGE is not a sentence: {why!r}")
    return problems
