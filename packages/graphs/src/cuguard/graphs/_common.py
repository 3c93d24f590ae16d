"""Small helpers shared by the graphs layer's modules: the refusal of objects of an uninstalled
driver (O3), the bindings' types, collection of definitions and executable graphs (W1, O5, S1),
and the check of what a definition's nodes use (S2, O4).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from cuguard.context import Context
from cuguard.errors import ResourceClosedError, driver_token
from cuguard.errors.lowlevel import Owned
from cuguard.resources import Event, Module

__all__: list[str] = []

_UNINSTALLED = (
    "{0!r} belongs to a CUDA driver that is no longer installed; its handle cannot reach the driver installed now"
)


def _types() -> Any:
    from cuda.bindings import driver as types

    return types


class _Collected(Owned):
    """Collection of a capture's builder: destroyed by ``_collect``, or not at all.

    Definitions (``DefinitionFields``) and executable graphs (``Graph``) have the same finalizer written in
    their own classes, which are compiled classes in the compiled build and cannot derive from this one.
    """

    __slots__ = ()

    _closed: bool
    _driver: Any

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # sys.is_finalizing is bound at definition: at the very end of finalization the sys
        # module may be cleared while this object is still alive (S1).
        if getattr(self, "_closed", True) or _finalizing():
            return
        if self._driver is not driver_token():
            return  # its driver was uninstalled: nothing of it is released here or said (O3)
        self._collected()


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
