"""Every check of cuguard, one nox session each.

``nox`` runs the default sessions: every check, with each package's tests and the contract suite
on the default cuda-bindings major (13), the test suites on every core (pytest-xdist). ``nox -t long``
runs the rest: the same tests and contract suite on the other major (12.9.x), and the tests of the
compiled build on both majors. ``.ci/run`` runs both. ``nox -l`` lists them all (``[long]`` marks the
tagged ones).

Sessions
--------
- ``lint``: ruff (check and format) over the repository, then import-linter's layer
  contracts (``[tool.importlinter]`` in the root ``pyproject.toml``).
- ``typecheck``: ``mypy --strict`` over every package's ``src/`` and ``tests/typing/``.
- ``tests(<layer>-cuda<major>)``: one per package under ``packages/`` (found by their
  ``pyproject.toml``) and cuda-bindings major (12.9.x and 13.x, :data:`BINDINGS`), in a
  fresh environment holding only that package, the cuguard layers it depends on,
  cuguard-testing (once it exists), the test tools and, where the resources layer is
  installed, that major's NVRTC and nvJitLink; runs that package's ``tests/`` on every core.
  The simulated driver follows the signatures of the installed cuda-bindings. These are the
  tests of the pure-Python build (``CUGUARD_PURE_PYTHON=1``); the other major's are tagged ``long``.
- ``compiled(cuda<major>)`` (tagged long): the tests of the compiled build. The packages with a
  compiled build (cuguard-errors, cuguard-context, cuguard-resources, cuguard-graphs) are built as
  wheels with their compiled modules (``CUGUARD_REQUIRE_COMPILED=1``: no fallback), installed beside the other packages,
  and every package's tests and the contract suite run with them (``test_compiled.py`` runs the
  compiled driver calls against a no-op driver library; on the simulated driver every driver
  call goes through the seam, as in the pure build, while the compiled classes are used).
- ``demo``: runs the README's tour (``examples/tour.py``) with the runtime layers and
  cuguard-testing installed; with no GPU it runs on the simulated driver.
- ``differential(cuda<major>)``: runs the simulator-versus-driver scenarios
  (``scripts/differential``) with each cuda-bindings major on the simulator and compares
  their observations with the answers recorded on an H200 (``-- --real`` on a GPU machine
  compares with the driver instead).
- ``docs``: runs every Python example of the user guide (``docs/test_examples.py``: the
  contract page has one per clause) and the cuda.core-style programs of ``examples/cuda_core/``
  on the simulated driver with their stand-ins (``docs/test_cuda_core_examples.py``), and
  builds the guide and API reference with Sphinx, warnings as errors, with every package
  installed editable.
- ``install``: runs the README's install-from-a-clone line in a fresh environment and imports
  every layer.
- ``build``: builds the sdist and wheel of every package and of the meta-package in
  isolation (dependencies from the index, never from the tree), and the pure-Python wheel of
  each package with a compiled build (``CUGUARD_PURE_PYTHON=1``); ``.ci/check_dists.py``
  checks the built metadata against the tree and the wheels' tags and contents; then the
  compiled and the pure wheels are each installed, binaries only, in a fresh environment and
  imported (``cuguard.resources.compiled`` must say which build it is).
- ``wheels`` (tagged long): the compiled wheels for Python 3.11 to 3.13 (every one found on the
  machine), each installed, binaries only, in a fresh environment of its Python and imported.
- ``sweep``: the failure-point sweep (contract B5), ``scripts/sweep``, on a fixed seeded
  sample (:data:`SWEEP_SAMPLE`: every operation's fault-free run, one failure point of every
  operation in every failure mode, the rest at random; a few minutes on 2 cores);
  ``nox -s sweep -- --full`` runs every case (several times longer).
- ``sweep_full`` (tagged long): the same sweep with every case (9,322 cases, under a minute on 2 cores).
- ``gcsweep``: the garbage-collection point sweep (contract B6), ``scripts/gcsweep``, on a
  fixed seeded sample (:data:`GC_SWEEP_SAMPLE`: a collection of prepared garbage forced at one
  driver call and one lock acquisition of every operation, the rest at random; about three
  minutes on 2 cores); ``nox -s gcsweep -- --full`` runs every case. A hang fails it.
- ``misuse``: the misuse sweep (contract B6) on the simulated driver: its package
  test, then ``scripts/misuse`` with a fixed, derandomized budget (about a minute;
  ``-- --examples 1000 --seed 7`` for a longer seeded run).
- ``racecheck``: the README's tour and the user guide's examples with the race checker on
  (``CUGUARD_RACECHECK=1``, contract B7): a race reported in any of them fails the session
  (not in the default run: about two minutes; the cross-layer suite runs the tour so).
- ``contract(cuda<major>)``: installs the meta-package ``cuguard`` from the repository
  root (its dependencies name the runtime layers, resolved to the checkouts installed in
  the same command) with cuguard-testing and each cuda-bindings major (with that major's
  NVRTC and nvJitLink), and runs the cross-layer contract suite ``tests/`` (one
  end-to-end test per contract clause, and the misuse sweep with a moderate budget).

Adding a session (``docs``, ``demo``...): write it below the others
with ``@nox.session``, reuse ``_install_local`` to install the layers it needs, and add
its name to ``DEFAULT_SESSIONS`` if the default run must run it (keep that run within about
15 minutes on two cores), or tag it ``long`` (``.ci/run`` runs those too).

Arguments after ``--`` go to the session's main tool (pytest, mypy, ruff check).
"""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

nox.needs_version = ">=2024.10.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_external_run = True

ROOT = Path(__file__).resolve().parent
PACKAGES_DIR = ROOT / "packages"

# What the default run (`nox`) runs, in this order: every check, each package's tests and the contract
# suite with the default cuda-bindings major (DEFAULT_BINDINGS_MAJOR, below). The other major's test and
# contract sessions, the compiled build's test sessions and the full failure-point sweep are tagged "long":
# `nox -t long` runs them, and `.ci/run` runs both.
LONG_TAG = "long"

# Tool versions are pinned so that a new release of a checker cannot break a clean tree.
RUFF = "ruff==0.17.6"
MYPY = "mypy==2.4.1"
IMPORT_LINTER = "import-linter==2.17"
TEST_TOOLS = ["pytest>=8", "pytest-xdist>=3.6", "hypothesis>=6", "numpy>=1.26"]
# The test suites run on every core (one pytest-xdist worker each; a module's tests stay on one worker).
PARALLEL = ["-n", "auto", "--dist", "loadfile"]
DOCS_TOOLS = ["sphinx==9.0.4", "myst-parser==5.2.0"]

# cuda-bindings majors: every package's tests, the contract suite and the differential scenarios
# run once per major; the other sessions use the default one.
BINDINGS = {12: "cuda-bindings>=12.9,<13", 13: "cuda-bindings>=13,<14"}
DEFAULT_BINDINGS_MAJOR = 13

TESTING_DIST = "cuguard-testing"
# cuguard's own sweeps of its contract: above every layer and cuguard-testing, unpublished.
SWEEPS_DIST = "cuguard-sweeps"
# The packages with a compiled build (Cython extensions added to their wheels by their hatch_build.py), and
# the environment variables their builds and tests read: pure Python forced, the compiled build required.
COMPILED_DISTS = ("cuguard-errors", "cuguard-context", "cuguard-resources", "cuguard-graphs")
PURE_VARIABLE = "CUGUARD_PURE_PYTHON"
REQUIRE_COMPILED_VARIABLE = "CUGUARD_REQUIRE_COMPILED"
# Compiler and linker libraries: the contract suite's E2 test compiles and links on machines with no GPU.
# Each cuda-bindings major loads its own major of the libraries (12.x ships them as -cu12 wheels).
COMPILER_LIBRARIES = {
    12: ["nvidia-cuda-nvrtc-cu12>=12.9,<13", "nvidia-nvjitlink-cu12>=12.9,<13"],
    13: ["nvidia-cuda-nvrtc>=13,<14", "nvidia-nvjitlink>=13,<14"],
}
# The failure-point sweep's sample in `nox -s sweep` (`-- --full` runs every case): the runner picks one
# failure point of every operation and failure mode first (about 1,400 pairs), the rest at random.
SWEEP_SAMPLE = ["--sample", "2000"]
# The garbage-collection point sweep's sample in `nox -s gcsweep` (`-- --full` runs every case): one point of
# every operation and dimension (driver calls, lock acquisitions) first, the rest at random.
GC_SWEEP_SAMPLE = ["--sample", "600"]
# The misuse sweep's budget in `nox -s misuse` (examples x steps; well under 3 minutes on 2 cores).
MISUSE_BUDGET = ["--examples", "150", "--steps", "50"]


@dataclass(frozen=True)
class Package:
    """One distribution under ``packages/``: ``packages/<layer>`` holds ``cuguard.<layer>``."""

    layer: str
    dist: str
    path: Path
    requires: tuple[str, ...]  # the cuguard-* distributions it depends on

    @property
    def module(self) -> str:
        return f"cuguard.{self.layer}"


def _discover() -> dict[str, Package]:
    """Every package under ``packages/``, keyed by distribution name, dependencies first."""
    found: dict[str, Package] = {}
    for pyproject in sorted(PACKAGES_DIR.glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text("utf-8"))["project"]
        requires = tuple(
            sorted(
                {
                    canonicalize_name(Requirement(spec).name)
                    for spec in project.get("dependencies", [])
                    if canonicalize_name(Requirement(spec).name).startswith("cuguard-")
                }
            )
        )
        dist = canonicalize_name(project["name"])
        found[dist] = Package(pyproject.parent.name, dist, pyproject.parent, requires)
    ordered: dict[str, Package] = {}

    def visit(dist: str, trail: tuple[str, ...]) -> None:
        if dist in ordered:
            return
        if dist in trail:
            raise RuntimeError(f"dependency cycle between packages: {' -> '.join((*trail, dist))}")
        for dependency in found[dist].requires:
            if dependency in found:  # a missing sibling fails at install time, with pip's message
                visit(dependency, (*trail, dist))
        ordered[dist] = found[dist]

    for dist in found:
        visit(dist, ())
    return ordered


PACKAGES = _discover()
BY_LAYER = {package.layer: package for package in PACKAGES.values()}

DEFAULT_SESSIONS = [
    "lint",
    "typecheck",
    *(f"tests({p.layer}-cuda{DEFAULT_BINDINGS_MAJOR})" for p in PACKAGES.values()),
    f"contract(cuda{DEFAULT_BINDINGS_MAJOR})",
    "demo",
    "differential",
    "sweep",
    "gcsweep",
    "misuse",
    "docs",
    "build",
    "install",
]
nox.options.sessions = DEFAULT_SESSIONS


def _closure(dists: list[str]) -> list[Package]:
    """The packages named and every cuguard package they depend on, dependencies first."""
    wanted: set[str] = set()
    pending = [dist for dist in dists if dist in PACKAGES]
    while pending:
        dist = pending.pop()
        if dist not in wanted:
            wanted.add(dist)
            pending.extend(dep for dep in PACKAGES[dist].requires if dep in PACKAGES)
    return [package for dist, package in PACKAGES.items() if dist in wanted]


def _install_local(session: nox.Session, packages: list[Package], *extra: str, deps: bool = True) -> None:
    """Install ``packages`` editable, one ``-e`` each, in a single command with ``extra``.

    One command lets the sibling specifiers (``cuguard-errors>=0.1,<0.2``) resolve to the
    editable checkouts instead of an index.
    """
    editables = [arg for package in packages for arg in ("-e", str(package.path))]
    session.install(*([] if deps else ["--no-deps"]), *editables, *extra)


def _tags(major: int) -> list[str]:
    """``["long"]`` for a session outside the default run: another major than the default."""
    return [LONG_TAG] if major != DEFAULT_BINDINGS_MAJOR else []


def _test_params() -> list[object]:
    return [
        nox.param(package.layer, major, id=f"{package.layer}-cuda{major}", tags=_tags(major))
        for package in PACKAGES.values()
        for major in sorted(BINDINGS)
    ]


def _major_params(long_other: bool = True) -> list[object]:
    """One param per cuda-bindings major; with ``long_other`` the other major's is tagged ``long``."""
    return [nox.param(major, id=f"cuda{major}", tags=_tags(major) if long_other else []) for major in sorted(BINDINGS)]


@nox.session
@nox.parametrize(("layer", "bindings"), _test_params())
def tests(session: nox.Session, layer: str, bindings: int) -> None:
    """Run one package's tests/ with only that package and the layers below it installed.

    The testing package's tests get every runtime layer: they test the simulator and the plugin
    on cuguard programs. The sweeps package depends on every layer and cuguard-testing. Every
    layer is installed editable: the pure-Python build (``compiled`` runs the other), with
    ``CUGUARD_PURE_PYTHON=1`` keeping the compiled driver calls off even where extensions were
    built in place in the checkout (compiled classes built in place would still be used: build
    in place only in checkouts you test as compiled).
    """
    package = BY_LAYER[layer]
    wanted = [package.dist] + ([TESTING_DIST] if TESTING_DIST in PACKAGES else [])
    if layer == "testing":
        # cuguard-testing itself depends on the errors layer only (import-linter checks that in
        # lint), but its tests drive every runtime layer through the simulator: the plugin and
        # the leak checks are tested on real cuguard programs.
        wanted = [p.dist for p in PACKAGES.values() if p.dist != SWEEPS_DIST]
    installed = _closure(wanted)
    # Where the resources layer is installed, tests compile kernels (Program) with no GPU: they
    # need the compiler and linker libraries of the cuda-bindings major under test.
    compilers = COMPILER_LIBRARIES[bindings] if any(p.layer == "resources" for p in installed) else []
    _install_local(session, installed, BINDINGS[bindings], *compilers, *TEST_TOOLS)
    session.run("python", "-c", "import cuda.bindings; print('cuda-bindings', cuda.bindings.__version__)")
    session.chdir(package.path)
    session.run("pytest", *PARALLEL, "tests", *session.posargs, env={PURE_VARIABLE: "1"})


@nox.session(tags=[LONG_TAG])
@nox.parametrize("bindings", _major_params(long_other=False))
def compiled(session: nox.Session, bindings: int) -> None:
    """The tests of the compiled build: every package's, and the contract suite.

    The packages with a compiled build (``COMPILED_DISTS``) are installed as wheels built
    compiled (``CUGUARD_REQUIRE_COMPILED=1``: a build that cannot compile fails instead of
    falling back; a C compiler is needed), in one command with every other package editable.
    Then every package's tests and the cross-layer contract suite run, with the compiled build
    required (its own tests fail rather than skip).
    """
    others = [p for p in PACKAGES.values() if p.dist not in COMPILED_DISTS]
    required = {REQUIRE_COMPILED_VARIABLE: "1"}
    editables = [arg for package in others for arg in ("-e", str(package.path))]
    session.install(
        *editables,
        *(str(PACKAGES[dist].path) for dist in COMPILED_DISTS),
        str(ROOT),
        BINDINGS[bindings],
        *COMPILER_LIBRARIES[bindings],
        *TEST_TOOLS,
        env=required,
    )
    status = (
        "import cuguard.errors as e, cuguard.context as c, cuguard.resources as r, cuguard.graphs as g, "
        "cuguard.resources.lowlevel as l; "
        "print('errors', e.compiled, 'context', c.compiled, 'resources', r.compiled, l.compiled_status(), "
        "'graphs', g.compiled); "
        "raise SystemExit(0 if e.compiled and c.compiled and r.compiled and g.compiled else 1)"
    )
    session.run("python", "-c", status, env=required)
    for package in PACKAGES.values():
        session.chdir(package.path)
        session.run("pytest", "-q", *PARALLEL, "tests", *session.posargs, env=required)
    session.chdir(ROOT)
    session.run("pytest", "-q", *PARALLEL, "tests", *session.posargs, env=required)


def _contract_modules(config: dict[str, object]) -> set[str]:
    """Every module named by the import-linter contracts (optional layers included)."""
    named: set[str] = set()
    contracts = config.get("contracts", [])
    assert isinstance(contracts, list)
    for contract in contracts:
        for key in ("layers", "modules", "source_modules", "forbidden_modules"):
            for entry in contract.get(key, []):
                for part in str(entry).replace(":", "|").split("|"):
                    named.add(part.strip().strip("()").strip())
    return named


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the import-linter contracts."""
    session.install(RUFF, IMPORT_LINTER)
    # import-linter reads the source; the packages only need to be importable.
    _install_local(session, list(PACKAGES.values()), deps=False)
    session.run("ruff", "check", *(session.posargs or ["."]))
    session.run("ruff", "format", "--check", ".")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["importlinter"]
    unnamed = sorted(p.module for p in PACKAGES.values() if p.module not in _contract_modules(config))
    if unnamed:
        session.error(f"import-linter contracts in pyproject.toml do not name {', '.join(unnamed)}")
    session.run("lint-imports", "--no-cache")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's src/ (and tests/typing/ where present)."""
    session.install(MYPY, *TEST_TOOLS)
    # Editable installs are the pure-Python build; the compiled extension is typed by its .pyi.
    _install_local(session, list(PACKAGES.values()), BINDINGS[DEFAULT_BINDINGS_MAJOR])
    targets = [str(p.path / "src") for p in PACKAGES.values()]
    targets += [str(p.path / "tests" / "typing") for p in PACKAGES.values() if (p.path / "tests" / "typing").is_dir()]
    session.run("mypy", "--strict", *targets, *session.posargs)


@nox.session
def install(session: nox.Session) -> None:
    """Run the README's install-from-a-clone line in a fresh environment, then import every layer.

    The line is read from the README (the command of its "Install from a clone" section), so the
    documented line is the tested one. Nothing is installed in editable mode.
    """
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Install from a clone", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("python -m pip install ")]
    if len(lines) != 1:
        session.error("the README's 'Install from a clone' section must hold exactly one install command")
    args = lines[0].split()[4:]
    session.install("pip")  # the README's line uses pip (the session's environment may come from uv)
    session.chdir(ROOT)
    session.run("python", "-m", "pip", "install", "--quiet", *args)
    # Every package the README installs: all but the unpublished sweeps.
    layers = ", ".join(f"cuguard.{p.layer}" for p in PACKAGES.values() if p.dist != SWEEPS_DIST)
    session.run("python", "-c", f"import {layers}; print('imported', {layers!r})")


@nox.session
def build(session: nox.Session) -> None:
    """Build every sdist and wheel in isolation, both builds of the compiled package; check and install them."""
    session.install("build[uv]>=1.2", "packaging>=24")
    tmp = Path(session.create_tmp())
    out, pure = tmp / "dist", tmp / "dist-pure"
    for folder in (out, pure):
        shutil.rmtree(folder, ignore_errors=True)
    # `python -m build` builds the sdist, then the wheel from the sdist: a file missing from
    # the sdist fails here. Build requirements come from the index, never from the tree.
    compiled_paths = [PACKAGES[dist].path for dist in COMPILED_DISTS]
    for path in [*(p.path for p in PACKAGES.values()), ROOT]:
        env = {REQUIRE_COMPILED_VARIABLE: "1"} if path in compiled_paths else {}
        session.run("python", "-m", "build", "--installer=uv", "--outdir", str(out), str(path), silent=True, env=env)
    for path in compiled_paths:
        session.run(
            "python", "-m", "build", "--installer=uv", "--wheel", "--outdir", str(pure), str(path),
            silent=True, env={PURE_VARIABLE: "1"},
        )  # fmt: skip
    session.run("python", str(ROOT / ".ci" / "check_dists.py"), str(out), str(pure))
    # Each build installs from its wheels alone (binaries only: no compiler is used) and says which it is.
    built_apart = tuple(f"{dist.replace('-', '_')}-" for dist in (*COMPILED_DISTS, SWEEPS_DIST))
    runtime = [w for w in out.glob("*.whl") if not w.name.startswith(built_apart)]
    probe = (
        "import cuguard.graphs as g, cuguard.errors as e, cuguard.context as c, cuguard.resources as r; "
        "print('compiled build:', e.compiled, c.compiled, r.compiled, g.compiled); "
        "raise SystemExit(0 if e.compiled == c.compiled == r.compiled == g.compiled == {} else 1)"
    )
    for label, folder, expected in (("compiled", out, True), ("pure", pure, False)):
        venv = tmp / f"venv-{label}"
        shutil.rmtree(venv, ignore_errors=True)
        base = str(Path(session.bin) / "python")
        session.run("uv", "venv", "--quiet", "--python", base, str(venv), external=True)
        python = str(venv / "bin" / "python")
        wheels = [*runtime, *(w for w in folder.glob("*.whl") if w.name.startswith(built_apart[:-1]))]
        session.run(
            "uv", "pip", "install", "--quiet", "--python", python, "--only-binary", ":all:",
            *map(str, wheels), BINDINGS[DEFAULT_BINDINGS_MAJOR], external=True,
        )  # fmt: skip
        session.run(python, "-c", probe.format(expected), external=True, env={PURE_VARIABLE: ""})


# The Python versions the compiled wheels are built for (`nox -s wheels`).
WHEEL_PYTHONS = ("3.11", "3.12", "3.13")


def _find_python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine (uv's search, then pyenv's versions), or ``None``."""
    import os
    import subprocess

    found = subprocess.run(
        ["uv", "python", "find", "--no-python-downloads", version], capture_output=True, text=True, check=False
    )
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.strip()
    pyenv = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(Path(pyenv, "versions").glob(f"{version}.*/bin/python"))
    return str(candidates[-1]) if candidates else None


@nox.session(tags=[LONG_TAG])
def wheels(session: nox.Session) -> None:
    """Build the compiled wheels of the packages with a compiled build for Python 3.11 to 3.13.

    For each version found on the machine (``WHEEL_PYTHONS``; uv's search, then pyenv's
    versions; none is downloaded), the wheel is built in isolation with the compiled build
    required, installed, binaries only, in a fresh environment of that Python with the other
    layers' wheels, and imported (``cuguard.resources.compiled`` must be true). The wheels go to
    the session's tmp directory. A version not on the machine is named in the log and skipped
    (``-- --all`` fails instead); none found fails.
    """
    require_all = "--all" in session.posargs
    tmp = Path(session.create_tmp())
    out = tmp / "wheels"
    shutil.rmtree(out, ignore_errors=True)
    built, missing = [], []
    for version in WHEEL_PYTHONS:
        python = _find_python(version)
        if python is None:
            missing.append(version)
            continue
        folder = out / version
        for dist in COMPILED_DISTS:
            session.run(
                "uv", "build", "--quiet", "--wheel", "--python", python, "--out-dir", str(folder),
                str(PACKAGES[dist].path), external=True, env={REQUIRE_COMPILED_VARIABLE: "1"},
            )  # fmt: skip
        wheels = sorted(folder.glob("*.whl"))
        venv = tmp / f"venv-{version}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run("uv", "venv", "--quiet", "--python", python, str(venv), external=True)
        target = str(venv / "bin" / "python")
        session.run(
            "uv", "pip", "install", "--quiet", "--python", target, "--only-binary", ":all:", *map(str, wheels),
            BINDINGS[DEFAULT_BINDINGS_MAJOR], external=True,
        )  # fmt: skip
        probe = (
            "import cuguard.errors as e, cuguard.context as c, cuguard.resources as r, cuguard.graphs as g; "
            "print(r.__file__, e.compiled, c.compiled, r.compiled, g.compiled); "
            "raise SystemExit(0 if e.compiled and c.compiled and r.compiled and g.compiled else 1)"
        )
        session.run(target, "-c", probe, external=True, env={PURE_VARIABLE: ""})
        built.extend(wheel.name for wheel in wheels)
    session.log(f"built and imported: {', '.join(built) or 'none'}")
    if missing:
        session.log(f"not built: no Python {', '.join(missing)} on this machine")
    if not built or (missing and require_all):
        session.error(f"no Python {', '.join(missing)} on this machine to build for")


@nox.session
def demo(session: nox.Session) -> None:
    """Run the README's tour, as a new user would (the pure-Python install)."""
    _install_local(session, list(PACKAGES.values()), "numpy>=1.26")
    session.run("python", str(ROOT / "examples" / "tour.py"))


@nox.session
def racecheck(session: nox.Session) -> None:
    """The tour and the user guide's examples with the race checker on (B7): no race may be reported."""
    _install_local(
        session,
        list(PACKAGES.values()),
        "pytest>=8",
        "numpy>=1.26",
        *COMPILER_LIBRARIES[DEFAULT_BINDINGS_MAJOR],
    )
    tour = str(ROOT / "examples" / "tour.py")  # it picks its driver itself
    session.run("python", "-W", "error::cuguard.resources.RaceWarning", tour, env={"CUGUARD_RACECHECK": "1"})
    examples = str(ROOT / "docs" / "test_examples.py")
    env = {"CUGUARD_RACECHECK": "1", "CUGUARD_DRIVER": "sim"}
    session.run("pytest", "-q", "-p", "no:cacheprovider", examples, *session.posargs, env=env)


@nox.session
@nox.parametrize("bindings", _major_params(long_other=False))
def differential(session: nox.Session, bindings: int) -> None:
    """The differential scenarios with one cuda-bindings major, on the simulator against the H200's recorded answers.

    ``scripts/differential --recorded`` (``scripts/differential/recorded/h200.json``): a scenario
    whose observations differ fails the session, one with no recorded answer is listed. Arguments
    after ``--`` replace ``--recorded``: ``-- --real`` on a GPU machine compares with the driver
    (``-- --real --record FILE`` also writes its answers), ``-- --sim-only`` only runs the scenarios.
    """
    _install_local(session, _closure([TESTING_DIST]), BINDINGS[bindings])
    session.run("python", str(ROOT / "scripts" / "differential"), *(session.posargs or ["--recorded"]))


@nox.session
def sweep(session: nox.Session) -> None:
    """The failure-point sweep (contract B5) on the simulated driver, one table per layer.

    First the registry's coverage tests (every public callable is swept or listed), then
    ``scripts/sweep`` (its cases in one process per CPU core) with :data:`SWEEP_SAMPLE`, a fixed
    seeded sample; the JSON goes to the session's tmp directory. Arguments after ``--`` go to the
    sweep, after the sample: ``-- --full`` for every case, ``-- --sample 500 --seed 3`` for another
    sample, ``-- --match Stream`` for some operations (every case of them when there are fewer
    than the sample). Fails on any violation.
    """
    wanted = [SWEEPS_DIST]
    _install_local(session, _closure(wanted), BINDINGS[DEFAULT_BINDINGS_MAJOR], *TEST_TOOLS)
    # The registry covers every public callable of every layer (its test fails otherwise); the
    # sweep's other tests run in the sweeps package's sessions.
    tests = BY_LAYER["sweeps"].path / "tests" / "test_sweep.py"
    session.run("pytest", "-q", str(tests), "-k", "every_public_callable or registry_names")
    tmp = Path(session.create_tmp()).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "sweep-sim.json"
    args = [*SWEEP_SAMPLE, *session.posargs]
    if "--json" not in args:
        args += ["--json", str(out)]
    session.run("python", str(ROOT / "scripts" / "sweep"), "--quiet", *args)


@nox.session(tags=[LONG_TAG])
def sweep_full(session: nox.Session) -> None:
    """The failure-point sweep (contract B5) on the simulated driver, every case (tagged long).

    ``scripts/sweep --full`` in one process per CPU core: every operation x every driver call it
    makes x each failure mode. Fails on any violation or non-deterministic case.
    """
    _install_local(session, _closure([SWEEPS_DIST]), BINDINGS[DEFAULT_BINDINGS_MAJOR], *TEST_TOOLS)
    tmp = Path(session.create_tmp()).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    args = ["--full", "--quiet", "--json", str(tmp / "sweep-full-sim.json"), *session.posargs]
    session.run("python", str(ROOT / "scripts" / "sweep"), *args)


@nox.session
def gcsweep(session: nox.Session) -> None:
    """The garbage-collection point sweep (contract B6) on the simulated driver, one table per layer.

    Runs ``scripts/gcsweep`` (its cases in one process per CPU core) with :data:`GC_SWEEP_SAMPLE`;
    the JSON goes to the session's tmp directory (the sweep's own tests, a planted hang and leak it
    must find, run in the sweeps package's test sessions). Arguments after ``--`` go to the sweep,
    after the sample: ``-- --full`` for every case, ``-- --sample 300 --seed 3`` for another sample,
    ``-- --match Stream`` for some operations. Fails on any violation or hang.
    """
    wanted = [SWEEPS_DIST]
    _install_local(session, _closure(wanted), BINDINGS[DEFAULT_BINDINGS_MAJOR], *TEST_TOOLS)
    tmp = Path(session.create_tmp()).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    args = [*GC_SWEEP_SAMPLE, *session.posargs]
    if "--json" not in args:
        args += ["--json", str(tmp / "gcsweep-sim.json")]
    session.run("python", str(ROOT / "scripts" / "gcsweep"), "--quiet", *args)


@nox.session
def misuse(session: nox.Session) -> None:
    """The misuse sweep (contract B6) on the simulated driver, bounded and derandomized.

    Runs ``scripts/misuse`` with :data:`MISUSE_BUDGET` (the same examples every run; the
    JSON goes to the session's tmp directory); the sweep's own tests (a small sweep, and planted
    defects it must find) run in the sweeps package's test sessions. Arguments after ``--`` go to ``scripts/misuse``
    (``-- --examples 1000 --steps 80 --seed 7`` for a longer seeded run, ``-- --shrink`` to
    stop at the first failing example and shrink it). Fails on any violation.
    """
    wanted = [SWEEPS_DIST]
    _install_local(
        session,
        _closure(wanted),
        BINDINGS[DEFAULT_BINDINGS_MAJOR],
        *COMPILER_LIBRARIES[DEFAULT_BINDINGS_MAJOR],  # compile and link are explored too
        *TEST_TOOLS,
    )
    tmp = Path(session.create_tmp()).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "misuse-sim.json"
    out.unlink(missing_ok=True)
    args = list(session.posargs) or list(MISUSE_BUDGET)
    if "--json" in args:
        out = Path(args[args.index("--json") + 1])
    else:
        args += ["--json", str(out)]
    # The sweep (its table and reproducers are the report), then the verdict.
    session.run("python", str(ROOT / "scripts" / "misuse"), "--quiet", *args, success_codes=[0, 1])
    found = json.loads(out.read_text("utf-8"))
    if found["violations"] or found["crashes"]:
        session.error(f"the misuse sweep found {found['violations']} violation(s) and {found['crashes']} crash(es)")


@nox.session
@nox.parametrize("bindings", _major_params())
def contract(session: nox.Session, bindings: int) -> None:
    """The cross-layer contract suite (``tests/``) against the installed meta-package ``cuguard``.

    The meta-package is installed from the repository root, not editable (it has no code),
    in one command with every layer editable: its dependencies name the layers
    (``cuguard-errors>=0.1,<0.2``...), and the installer resolves them to those checkouts,
    as ``_install_local`` does for siblings. Then ``importlib.metadata`` must see the
    meta-package and ``tests/`` runs on the simulated driver, once per cuda-bindings major
    (with that major's compiler and linker libraries). Arguments after ``--`` go to pytest.
    """
    layers = [p for p in PACKAGES.values() if p.dist not in {TESTING_DIST, SWEEPS_DIST}]
    testing = _closure([SWEEPS_DIST])
    extra = [
        str(ROOT),
        BINDINGS[bindings],
        *COMPILER_LIBRARIES.get(bindings, []),
        *TEST_TOOLS,
    ]
    _install_local(session, [*layers, *[p for p in testing if p not in layers]], *extra)
    session.run(
        "python",
        "-c",
        "import importlib.metadata as m; "
        "print('cuguard', m.version('cuguard'), 'requires', ', '.join(m.requires('cuguard') or []))",
    )
    session.chdir(ROOT)
    session.run("pytest", *PARALLEL, "tests", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The overhead benchmark on the simulated driver: relative figures between commits, never GPU numbers.

    Runs ``benchmarks/overhead.py --driver sim --quick``; the JSON goes to the session's tmp
    directory (arguments after ``--`` go to the benchmark, e.g. ``-- --out results.json``).
    Not part of the default run.
    """
    wanted = [dist for dist in ("cuguard-resources", "cuguard-graphs", TESTING_DIST) if dist in PACKAGES]
    _install_local(session, _closure(wanted), BINDINGS[DEFAULT_BINDINGS_MAJOR])
    out = Path(session.create_tmp()) / "overhead-sim.json"
    session.run(
        "python",
        str(ROOT / "benchmarks" / "overhead.py"),
        "--driver",
        "sim",
        "--quick",
        "--out",
        str(out),
        *session.posargs,
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Run the user guide's examples, then build the guide and API reference (warnings are errors).

    The HTML goes to the session's tmp directory. Arguments after ``--`` go to pytest.
    """
    _install_local(
        session,
        list(PACKAGES.values()),
        *DOCS_TOOLS,
        "pytest>=8",
        "numpy>=1.26",
        *COMPILER_LIBRARIES[DEFAULT_BINDINGS_MAJOR],  # the E2 example and examples/cuda_core compile with NVRTC
    )
    docs_dir = ROOT / "docs"
    # The guide's examples, then the programs of examples/cuda_core/ (on the simulator, with their stand-ins).
    examples = [str(docs_dir / "test_examples.py"), str(docs_dir / "test_cuda_core_examples.py")]
    session.run("pytest", "-q", "-p", "no:cacheprovider", *examples, *session.posargs)
    out = Path(session.create_tmp()) / "docs"
    shutil.rmtree(out, ignore_errors=True)
    session.run(
        "sphinx-build",
        "-W",
        "--keep-going",
        "-q",
        "-b",
        "html",
        "-d",
        str(out / "doctrees"),
        str(docs_dir),
        str(out / "html"),
    )
    session.log(f"HTML: {out / 'html' / 'index.html'}")
