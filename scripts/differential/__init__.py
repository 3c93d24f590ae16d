"""Differential check: the simulated driver against the real one.

Each scenario is a short script of driver-level calls, including failing ones, written against
the ``cuda.bindings.driver`` interface. It runs on a fresh simulated driver and on the real
driver, and returns its observations (status names, handle relations, bytes read back). The two
lists must be equal; a disagreement is a bug in the simulator.

The scenarios live in one module per driver area (:data:`AREAS`); ``common`` holds what they
share (the registry, status names, and ``Setup``, the context and the streams, events, memory
and kernel most of them begin with), ``graphtools`` what the graph, capture and conditional
scenarios share. ``recorded/`` holds what a real GPU answered, so that a machine without one
still compares the simulator against it. ``cli`` runs them (``python scripts/differential``).

Importing the package puts the repository's ``packages/*/src`` folders on ``sys.path``, so it
needs nothing installed beyond cuda-bindings.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _src in sorted((ROOT / "packages").glob("*/src")):
    if str(_src) not in sys.path:
        sys.path.insert(0, str(_src))

# The driver areas, one module each; importing one registers its scenarios.
AREAS = (
    "contexts",
    "devices",
    "streams",
    "memory",
    "vmm",
    "pools",
    "ipc",
    "modules",
    "graphs",
    "captures",
    "conditionals",
)
