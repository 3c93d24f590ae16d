"""The compiled build of the context layer: which build runs, and a mixed install refused (contract O1).

In the compiled build, ``Context`` (:mod:`cuguard.context.contexts`) is a compiled class laid out on
the errors layer's compiled ``Unique``. Over the pure-Python errors layer its layout would not match,
so the module refuses to load. In the pure-Python build the test that needs the compiled module
skips; ``CUGUARD_REQUIRE_COMPILED=1`` (the nox sessions of the compiled build set it) makes it fail.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import cuguard.context
from cuguard.context import contexts

REQUIRED = os.environ.get("CUGUARD_REQUIRE_COMPILED") == "1"


def test_the_flag_says_which_build_runs() -> None:
    """``cuguard.context.compiled`` is true exactly when the defining module is an extension."""
    assert isinstance(cuguard.context.compiled, bool)
    assert cuguard.context.compiled is not (contexts.__file__ or "").endswith(".py")
    assert cuguard.context.Context is contexts.Context
    if REQUIRED:
        assert cuguard.context.compiled


def test_compiled_context_refuses_the_pure_owners() -> None:
    """The compiled ``Context`` over the pure-Python ``Unique`` refuses to load, naming both layers (O1)."""
    if not cuguard.context.compiled:
        if REQUIRED:
            pytest.fail("the compiled build is required here, but cuguard.context.contexts is pure Python")
        pytest.skip("the pure-Python build of the context layer: nothing to refuse")
    code = (
        "import importlib.machinery, importlib.util, pathlib, sys\n"
        "import cuguard\n"
        "package = importlib.machinery.PathFinder.find_spec('cuguard.errors', cuguard.__path__)\n"
        "source = pathlib.Path(package.submodule_search_locations[0]) / 'owners.py'\n"
        "class PureOwners:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'cuguard.errors.owners':\n"
        "            return importlib.util.spec_from_file_location(name, source)\n"
        "        return None\n"
        "sys.meta_path.insert(0, PureOwners)\n"
        "import cuguard.errors\n"
        "assert not cuguard.errors.compiled, 'the pure owners did not load'\n"
        "try:\n"
        "    import cuguard.context\n"
        "except ImportError as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("refused: cuguard-context is the compiled build but cuguard-errors is the pure-Python one"), (
        out
    )
