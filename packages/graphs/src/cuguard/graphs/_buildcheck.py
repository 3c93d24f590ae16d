"""Refuse a mixed build before the compiled module of this layer loads (imported first by the package).

The compiled ``Node`` and the definitions' compiled base are laid out on the errors layer's compiled
``Unique`` and ``Owned``. Over a pure-Python layer below they would not fit (the extension's loader may
refuse them with a ``ValueError`` about a size, or not notice at all), and one compiled layer over pure
ones below is a mixed install in any case. So when this layer is the compiled build and a layer below
is not (the resources layer: :data:`cuguard.resources.lowlevel.compiled_build`), importing it raises
``ImportError`` naming that layer. This module is pure Python in both builds.
"""

from __future__ import annotations

from importlib.util import find_spec

from cuguard.context import compiled as context_compiled
from cuguard.errors import compiled as errors_compiled
from cuguard.resources.lowlevel import compiled_build as resources_compiled

__all__: list[str] = []

_spec = find_spec("cuguard.graphs._nodes")
if _spec is not None and not str(_spec.origin).endswith(".py"):
    _below = [
        name
        for name, built in (
            ("cuguard-errors", errors_compiled),
            ("cuguard-context", context_compiled),
            ("cuguard-resources", resources_compiled),
        )
        if not built
    ]
    if _below:
        raise ImportError(
            f"cuguard-graphs is the compiled build but {_below[0]} is the pure-Python one: install the layers "
            "from the same checkout in one command (or all with CUGUARD_PURE_PYTHON=1 set while installing)"
        )
