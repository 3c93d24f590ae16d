"""The failure-point sweep (contract B5); see :mod:`cuguard.sweeps.failpoints` for the public entry points.

The registry (:mod:`.registry`) imports cuguard's upper layers at call time
only, so importing cuguard.testing never imports them (import-linter's
``testing-*`` contracts).
"""

from __future__ import annotations
