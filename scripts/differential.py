#!/usr/bin/env python3
"""Differential check: the simulated driver against the real one (the scenarios are in ``differential/``).

Usage: differential.py [--real | --sim-only | --recorded [FILE]] [--record FILE] [--only NAME] [--json FILE]
Runs the package ``scripts/differential`` (the same as ``python scripts/differential``); its
``cli`` module describes the modes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from differential.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
