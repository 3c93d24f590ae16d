"""The compiled build of cuguard-graphs: the errors layer's build hook, shared by every layer.

The hook itself is ``packages/errors/hatch_build.py`` (its docstring says what it does); this file
loads it from there, or, in an sdist, from the copy the sdist carries (``build_hook.py``). What to
compile is named in this package's ``pyproject.toml``. ``python hatch_build.py`` in this folder
builds the extensions in place.
"""

from __future__ import annotations

import sys
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

_here = Path(__file__).resolve().parent
_source = next(p for p in (_here / "build_hook.py", _here.parent / "errors" / "hatch_build.py") if p.is_file())
_spec = spec_from_file_location("cuguard_build_hook", _source)
assert _spec is not None
assert _spec.loader is not None
_hook = module_from_spec(_spec)
_spec.loader.exec_module(_hook)

CompiledBuildHook = _hook.CompiledBuildHook

if __name__ == "__main__":
    sys.exit(_hook.main())
