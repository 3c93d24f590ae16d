"""``python -m cuguard.sweeps._misuse``: the misuse sweep's command line (see :func:`main`)."""

from __future__ import annotations

import sys

from cuguard.sweeps._misuse.runner import main

if __name__ == "__main__":
    sys.exit(main())
