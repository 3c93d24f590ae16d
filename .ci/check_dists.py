#!/usr/bin/env python3
"""Check built cuguard distributions against the source tree.

Usage: check_dists.py DIST_DIR [PURE_DIR]

DIST_DIR holds the sdists and wheels of every package under packages/ and of the
meta-package (``nox -s build`` puts them there); PURE_DIR, the wheels of the packages with a
compiled build (a ``hatch_build.py`` beside their ``pyproject.toml``) built pure
(``CUGUARD_PURE_PYTHON=1``). Checks, for each distribution in the tree:

- exactly one wheel and one sdist were built, at the version the tree declares
  (``__version__`` in the file named by ``[tool.hatch.version] path``, or a static
  ``project.version``);
- every ``cuguard-*`` requirement in the wheel's METADATA names a package of the tree
  and its specifier is satisfied by that package's in-tree version;
- the meta-package requires every runtime layer (every package but cuguard-testing and
  cuguard-sweeps) and ships no code; each layer's wheel ships ``cuguard/<layer>/__init__.py`` and
  ``py.typed`` and no ``cuguard/__init__.py`` (``cuguard`` is a namespace package);
- a package with a compiled build: its wheel in DIST_DIR is tagged for this interpreter and
  platform and ships its compiled modules (``cuguard/<layer>/*.so``), its wheel in PURE_DIR is
  ``py3-none-any`` and ships none; every other wheel is ``py3-none-any``; no wheel
  ships the extension's sources (``.pyx``, ``.c``).

Needs ``packaging``. Exits 1 and lists every problem when a check fails.
"""

from __future__ import annotations

import re
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# Not required by the meta-package: the test tools and cuguard's own sweeps (unpublished).
NOT_RUNTIME = {"cuguard-testing", "cuguard-sweeps"}
_VERSION_RE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def _tree_version(project_dir: Path, pyproject: dict[str, object]) -> Version:
    project = pyproject["project"]
    assert isinstance(project, dict)
    if "version" in project:
        return Version(str(project["version"]))
    tool = pyproject.get("tool", {})
    assert isinstance(tool, dict)
    path = tool["hatch"]["version"]["path"]
    match = _VERSION_RE.search((project_dir / path).read_text("utf-8"))
    if match is None:
        raise SystemExit(f"no __version__ in {project_dir / path}")
    return Version(match.group(1))


def tree() -> dict[str, tuple[Path, Version]]:
    """Distribution name -> (project directory, in-tree version), meta-package included."""
    found: dict[str, tuple[Path, Version]] = {}
    for pyproject_path in [ROOT / "pyproject.toml", *sorted((ROOT / "packages").glob("*/pyproject.toml"))]:
        pyproject = tomllib.loads(pyproject_path.read_text("utf-8"))
        name = canonicalize_name(pyproject["project"]["name"])
        found[name] = (pyproject_path.parent, _tree_version(pyproject_path.parent, pyproject))
    return found


def _metadata(wheel: zipfile.ZipFile) -> tuple[str, Version, list[Requirement]]:
    [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    message = Parser().parsestr(wheel.read(name).decode("utf-8"))
    requires = [Requirement(spec) for spec in message.get_all("Requires-Dist") or []]
    return canonicalize_name(message["Name"]), Version(message["Version"]), requires


def _compiled_files(files: set[str], layer: str) -> list[str]:
    return sorted(f for f in files if f.startswith(f"cuguard/{layer}/") and f.endswith((".so", ".pyd")))


def _is_pure_tag(wheel: Path) -> bool:
    tags = parse_wheel_filename(wheel.name)[3]
    return all(tag.abi == "none" and tag.platform == "any" for tag in tags)


def check_builds(dist_dir: Path, pure_dir: Path | None) -> list[str]:
    """The compiled and pure-Python wheels (see the module's docstring)."""
    problems: list[str] = []
    for name, (project_dir, _version) in sorted(tree().items()):
        if project_dir == ROOT:
            continue
        layer = project_dir.name
        compiled = (project_dir / "hatch_build.py").is_file()
        for where, folder in (("", dist_dir), (" (pure)", pure_dir)):
            if folder is None or (where and not compiled):
                continue
            found = [p for p in folder.glob("*.whl") if canonicalize_name(parse_wheel_filename(p.name)[0]) == name]
            if len(found) != 1:
                problems.append(f"{name}{where}: expected one wheel in {folder}, found {[p.name for p in found]}")
                continue
            with zipfile.ZipFile(found[0]) as wheel:
                files = set(wheel.namelist())
            extension = _compiled_files(files, layer)
            sources = sorted(f for f in files if f.endswith((".pyx", ".c")))
            if sources:
                problems.append(f"{name}{where}: the wheel ships the extension's sources {sources}")
            if compiled and not where:
                if _is_pure_tag(found[0]) or not extension:
                    problems.append(f"{name}: the wheel {found[0].name} is not the compiled build ({extension})")
            elif not _is_pure_tag(found[0]) or extension:
                problems.append(f"{name}{where}: the wheel {found[0].name} is not pure Python ({extension})")
    return problems


def check(dist_dir: Path) -> list[str]:
    in_tree = tree()
    meta = canonicalize_name(tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["name"])
    problems: list[str] = []
    wheels: dict[str, list[Path]] = {}
    sdists: dict[str, list[Path]] = {}
    for path in sorted(dist_dir.iterdir()):
        if path.name.endswith(".whl"):
            wheels.setdefault(canonicalize_name(parse_wheel_filename(path.name)[0]), []).append(path)
        elif path.name.endswith(".tar.gz"):
            sdists.setdefault(canonicalize_name(parse_sdist_filename(path.name)[0]), []).append(path)
    for name in sorted((set(wheels) | set(sdists)) - set(in_tree)):
        problems.append(f"{name}: built, but no such package in the tree")

    for name, (project_dir, version) in sorted(in_tree.items()):
        for kind, built in (("wheel", wheels.get(name, [])), ("sdist", sdists.get(name, []))):
            if len(built) != 1:
                problems.append(f"{name}: expected one {kind}, found {[p.name for p in built]}")
        if len(wheels.get(name, [])) != 1:
            continue
        with zipfile.ZipFile(wheels[name][0]) as wheel:
            wheel_name, wheel_version, requires = _metadata(wheel)
            files = set(wheel.namelist())
        if wheel_name != name or wheel_version != version:
            problems.append(f"{name}: wheel says {wheel_name} {wheel_version}, the tree says {name} {version}")
        for requirement in requires:
            sibling = canonicalize_name(requirement.name)
            if not (sibling.startswith("cuguard-") or sibling == meta):
                continue
            if sibling not in in_tree:
                problems.append(f"{name}: requires {requirement}, but {sibling} is not in the tree")
            elif not requirement.specifier.contains(in_tree[sibling][1], prereleases=True):
                problems.append(f"{name}: requires {requirement}, but the tree has {sibling} {in_tree[sibling][1]}")
        code = sorted(f for f in files if f.endswith(".py"))
        if name == meta:
            required = {canonicalize_name(r.name) for r in requires}
            for layer in sorted(set(in_tree) - NOT_RUNTIME - {meta} - required):
                problems.append(f"{name}: the meta-package does not require the runtime layer {layer}")
            if code:
                problems.append(f"{name}: the meta-package ships code: {code}")
            continue
        layer = project_dir.name
        for expected in (f"cuguard/{layer}/__init__.py", f"cuguard/{layer}/py.typed"):
            if expected not in files:
                problems.append(f"{name}: the wheel lacks {expected}")
        if "cuguard/__init__.py" in files:
            problems.append(f"{name}: the wheel ships cuguard/__init__.py (cuguard is a namespace package)")
        outside = sorted(f for f in files if not f.startswith(f"cuguard/{layer}/") and ".dist-info/" not in f)
        if outside:
            problems.append(f"{name}: the wheel ships files outside cuguard/{layer}/: {outside}")
        for sdist in sdists.get(name, []):
            with tarfile.open(sdist) as archive:
                if not any(member.endswith("/pyproject.toml") for member in archive.getnames()):
                    problems.append(f"{name}: the sdist {sdist.name} has no pyproject.toml")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    dist_dir = Path(argv[1])
    problems = check(dist_dir) + check_builds(dist_dir, Path(argv[2]) if len(argv) == 3 else None)
    for problem in problems:
        print(f"check_dists: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"check_dists: {len(list(dist_dir.iterdir()))} distributions match the tree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
