#!/usr/bin/env python3
"""The layering rules the import-linter contracts cannot state, checked over every package's source.

1. **Declared interfaces.** A module of one cuguard package imports nothing
   private of another: no module whose dotted path has a part starting with an
   underscore (``cuguard.errors._seam``), no underscore name
   (``from cuguard.resources import _race``), and no such module through
   ``importlib.import_module("...")`` (no string naming such a module at all). What a layer offers the layers above
   beyond its user API is its ``lowlevel`` module (``cuguard.errors.lowlevel``,
   ``cuguard.context.lowlevel``, ``cuguard.resources.lowlevel``).
2. **No deprecated aliases inside.** The names of ``cuguard.errors.lowlevel``
   are imported from there by cuguard's own code (the aliases some of them
   keep in ``cuguard.errors`` are for users, for one release).
3. **Declared Context fields.** Outside ``cuguard.context``, a private
   attribute read on a context object (an expression named ``context``,
   ``ctx``, ``_context`` or ending in ``.context``/``._context``) is one of
   ``cuguard.context.lowlevel.CONTEXT_FIELDS``.

Usage: check_architecture.py [ROOT]  (ROOT: the repository, default this script's parent's parent).
Prints one line per finding; exit status 1 when there is any.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

_CONTEXT_NAMES = frozenset({"context", "ctx", "_context"})
_MODULE_PATH = re.compile(r"cuguard(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _package_of(module: str) -> str | None:
    """``cuguard.resources._race`` -> ``resources``; None for anything outside cuguard."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "cuguard" else None


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[2:])


def _strings_assigned(root: Path, layer: str, name: str) -> frozenset[str]:
    """The strings in the assignment to ``name`` in ``cuguard.<layer>.lowlevel`` (read from its source)."""
    source = root / "packages" / layer / "src" / "cuguard" / layer / "lowlevel.py"
    for node in ast.walk(ast.parse(source.read_text("utf-8"))):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return frozenset(
                    c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    raise SystemExit(f"{source}: no {name}")


def _names_context(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _CONTEXT_NAMES
    return isinstance(node, ast.Attribute) and node.attr in {"context", "_context"}


def _owner(path: Path) -> str:
    parts = path.parts
    return parts[len(parts) - 1 - parts[::-1].index("cuguard") + 1]


def check_file(package: str, path: Path, fields: frozenset[str], lowlevel: frozenset[str]) -> list[str]:
    """The findings in one module of ``package``."""
    found: list[str] = []
    tree = ast.parse(path.read_text("utf-8"))

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{path}:{getattr(node, 'lineno', 0)}: {what}")

    named: set[int] = set()  # the strings import_module calls were given (reported with the call)
    for node in ast.walk(tree):  # breadth first: a call before its arguments
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            target = _package_of(node.module)
            if target is None or target == package:
                continue
            if _private(node.module):
                report(node, f"imports {node.module}, a private module of cuguard.{target}")
                continue
            for alias in node.names:
                if alias.name.startswith("_"):
                    report(node, f"imports {alias.name} from {node.module}, a private name of cuguard.{target}")
                elif node.module == "cuguard.errors" and alias.name in lowlevel:
                    report(node, f"imports {alias.name} from cuguard.errors: import it from cuguard.errors.lowlevel")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = _package_of(alias.name)
                if target is not None and target != package and _private(alias.name):
                    report(node, f"imports {alias.name}, a private module of cuguard.{target}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
                module = str(node.args[0].value)
                named.add(id(node.args[0]))
                target = _package_of(module)
                if target is not None and target != package and _private(module):
                    report(node, f"imports {module} through importlib, a private module of cuguard.{target}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _MODULE_PATH.fullmatch(node.value)
            and _package_of(node.value) not in (None, package)
            and _private(node.value)
            and id(node) not in named
        ):
            report(node, f"names {node.value}, a private module of cuguard.{_package_of(node.value)}")
        elif (
            package != "context"
            and isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and _names_context(node.value)
            and node.attr not in fields
        ):
            report(node, f"reads Context.{node.attr}, which cuguard.context.lowlevel.CONTEXT_FIELDS does not declare")
    return found


def check(root: Path) -> list[str]:
    """Every finding in the repository at ``root``."""
    # CONTEXT_FIELDS: what a Context may be read for; errors.lowlevel's __all__: what to import from there.
    fields, lowlevel = (
        _strings_assigned(root, "context", "CONTEXT_FIELDS"),
        _strings_assigned(root, "errors", "__all__"),
    )
    found: list[str] = []
    for path in sorted((root / "packages").glob("*/src/cuguard/*/**/*.py")):
        found += check_file(_owner(path), path, fields, lowlevel)
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    found = check(root)
    for line in found:
        print(line)
    print(f"{len(found)} finding(s) in the layering rules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
