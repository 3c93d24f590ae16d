"""Refuse a mixed build before any compiled module of this layer loads (imported first by the package).

The compiled classes of this layer are laid out on the errors layer's compiled ``Owned`` and read the
context layer's compiled ``Context`` as C slots. Over a pure-Python layer below they would not fit:
the extension's loader may refuse them with a ``ValueError`` about a size, or not notice at all. So
when this layer is the compiled build and a layer below is not, importing it raises ``ImportError``
naming that layer. This module is pure Python in both builds.
"""

from __future__ import annotations

from importlib.util import find_spec

from cuguard.context import compiled as context_compiled
from cuguard.errors import compiled as errors_compiled

__all__: list[str] = []

_spec = find_spec("cuguard.resources._base")
#: Whether this installation of the layer is the compiled build (its compiled modules are there), whether
#: or not its compiled driver calls are in use (``CUGUARD_PURE_PYTHON=1`` at import turns those off).
built: bool = _spec is not None and not str(_spec.origin).endswith(".py")
if built and not (errors_compiled and context_compiled):
    _pure = "cuguard-context" if errors_compiled else "cuguard-errors"
    raise ImportError(
        f"cuguard-resources is the compiled build but {_pure} is the pure-Python one: install the layers "
        "from the same checkout in one command (or all with CUGUARD_PURE_PYTHON=1 set while installing)"
    )
