"""``python scripts/differential [options]``: see :mod:`differential.cli`."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a folder: the package's parent makes it importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from differential.cli import main

raise SystemExit(main())
