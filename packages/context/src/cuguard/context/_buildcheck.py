"""Refuse a mixed build before the compiled ``Context`` loads (imported first by the package).

The compiled ``Context`` is laid out on the errors layer's compiled ``Unique``. Over the pure-Python
errors layer it would not fit: the extension's loader may refuse it with a ``ValueError`` about a
size, or not notice at all. So when this layer is the compiled build and the errors layer is not,
importing it raises ``ImportError`` naming both. This module is pure Python in both builds.
"""

from __future__ import annotations

from importlib.util import find_spec

from cuguard.errors import compiled as errors_compiled

__all__: list[str] = []

_spec = find_spec("cuguard.context.contexts")
if _spec is not None and not str(_spec.origin).endswith(".py") and not errors_compiled:
    raise ImportError(
        "cuguard-context is the compiled build but cuguard-errors is the pure-Python one: install both "
        "from the same checkout in one command (or both with CUGUARD_PURE_PYTHON=1 set while installing)"
    )
