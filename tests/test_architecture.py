"""The layering rules (``scripts/check_architecture.py``) hold over the repository, and the checker finds breaches.

Layers reach each other only through their user API and their declared
``lowlevel`` interfaces, so a patch release of a lower layer cannot break an
upper one (the packages are versioned apart).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_architecture", ROOT / "scripts" / "check_architecture.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_no_module_reaches_into_another_package() -> None:
    assert _checker().check(ROOT) == []


def _tree(tmp_path: Path, package: str, source: str) -> Path:
    """A repository of the real layers' interfaces (errors, context) and one module of ``package`` with ``source``."""
    for layer in ("errors", "context"):
        interface = Path("packages") / layer / "src" / "cuguard" / layer / "lowlevel.py"
        (tmp_path / interface).parent.mkdir(parents=True)
        (tmp_path / interface).write_text((ROOT / interface).read_text("utf-8"), "utf-8")
    module = tmp_path / "packages" / package / "src" / "cuguard" / package / "_mod.py"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(source, "utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("source", "finding"),
    [
        ("from cuguard.errors._seam import on_route_change\n", "a private module of cuguard.errors"),
        ("from cuguard.resources import _race\n", "a private name of cuguard.resources"),
        ("import cuguard.context._context\n", "a private module of cuguard.context"),
        ("import importlib\nimportlib.import_module('cuguard.resources._captures')\n", "through importlib"),
        ("LOCKS = 'cuguard.errors._locks'\n", "names cuguard.errors._locks"),
        ("from cuguard.errors import wrong_kind\n", "import it from cuguard.errors.lowlevel"),
        ("def f(context):\n    return context._why\n", "reads Context._why"),
        ("def f(stream):\n    return stream._context._handle2\n", "reads Context._handle2"),
    ],
)
def test_the_checker_finds_each_kind_of_breach(tmp_path: Path, source: str, finding: str) -> None:
    found = _checker().check(_tree(tmp_path, "graphs", source))
    assert len(found) == 1, found
    assert finding in found[0]


@pytest.mark.parametrize(
    "source",
    [
        "from cuguard.errors.lowlevel import wrong_kind\n",
        "from cuguard.resources.lowlevel import race\n",
        "from cuguard.graphs._capture import GraphBuilder\n",  # its own package's private module
        "def f(stream):\n    return stream._context._closed\n",  # a declared field
    ],
)
def test_the_checker_accepts_declared_interfaces(tmp_path: Path, source: str) -> None:
    assert _checker().check(_tree(tmp_path, "graphs", source)) == []
