"""Small helpers shared by the graphs layer's modules: the refusal of objects of an uninstalled
driver (O3), the bindings' types, and the check of what a definition's nodes use (S2, O4).
Collection is ``_nodes.Collected``'s.
"""

from __future__ import annotations

from typing import Any

from cuguard.context import Context
from cuguard.errors import ResourceClosedError
from cuguard.resources import Event, Module

__all__: list[str] = []

_UNINSTALLED = (
    "{0!r} belongs to a CUDA driver that is no longer installed; its handle cannot reach the driver installed now"
)


def _types() -> Any:
    from cuda.bindings import driver as types

    return types


def _check_owners(what: object, owners: dict[int, object], action: str) -> None:
    """Refuse a definition whose nodes use a closed module or event (S2), or an object whose context refuses use (O4).

    The driver would read the unloaded module or the destroyed event (an instantiate of an
    event node of a destroyed event killed the process on an H200).
    """
    for owner in owners.values():
        if (type(owner) is Module or type(owner) is Event) and owner._closed:
            raise ResourceClosedError(
                f"{what!r} cannot be {action}: a node uses {owner!r}, which was closed "
                "(the driver would reach an unloaded module or a destroyed event)"
            )
        context = getattr(owner, "_context", None)
        if context is None:
            module = getattr(owner, "module", None)
            context = getattr(module, "_context", None)
        if isinstance(context, Context) and context._closed:
            raise ResourceClosedError(
                f"{what!r} cannot be {action}: a node uses {owner!r}, whose context {context!r} refuses use"
            )
