"""The compiled build of a cuguard layer: a hatch build hook, and a script for building in place.

One file serves every layer that has a compiled build (the other layers' ``hatch_build.py`` is a
link to this one). The layer's ``pyproject.toml`` names what to compile, in the hook's table::

    [tool.hatch.build.targets.wheel.hooks.custom]
    path = "hatch_build.py"
    modules = ["src/cuguard/errors/_ownership.py", ...]   # .py (with a .pxd beside it) or .pyx
    include = ["../errors/src", "pxd"]                    # where the .pxd files of other layers are

``pip install ./packages/<layer>`` (or ``python -m build``) builds a wheel through hatchling;
this hook compiles those modules with Cython (a ``.py`` module in Cython's pure-Python mode: the
same source is the pure-Python module, the ``.pxd`` beside it declares its compiled classes) and
the platform's C compiler, and adds the extensions to the wheel, which then carries the
interpreter's and platform's tag. When that cannot be done (no C compiler, no Python headers)
the wheel is the pure-Python one (``py3-none-any``) and the build says why in its output.

Environment variables read at build time:

- ``CUGUARD_PURE_PYTHON=1``: build the pure-Python wheel without trying to compile.
- ``CUGUARD_REQUIRE_COMPILED=1``: fail the build instead of falling back to pure Python (CI sets
  it where a compiled wheel is expected).

Editable installs (``pip install -e``) are pure Python. ``python hatch_build.py`` in a layer's
folder (with Cython, setuptools and hatchling installed) builds that layer's extensions in
place, next to their sources, for the interpreter that runs it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PURE_VARIABLE = "CUGUARD_PURE_PYTHON"
REQUIRE_VARIABLE = "CUGUARD_REQUIRE_COMPILED"
# Compiler directives of every compiled module: the sources' annotations stay documentation (the
# .pxd files declare the C types), and the classes keep their own refusals of pickling (O1).
DIRECTIVES = {
    "language_level": 3,
    "annotation_typing": False,
    "auto_pickle": False,
    "embedsignature": True,
    "binding": True,
}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "yes", "on", "true")


def _module_name(source: str) -> str:
    """``src/cuguard/errors/_lifecycle.py`` -> ``cuguard.errors._lifecycle``."""
    parts = Path(source).with_suffix("").parts
    return ".".join(parts[1:] if parts[0] == "src" else parts)


def compile_extensions(root: Path, out: Path, modules: list[str], include: list[str]) -> dict[str, Path]:
    """Cythonize and compile ``modules`` under ``out``; return ``{module name: built file}``.

    Raises whatever Cython or the compiler raise when they cannot be built.
    """
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    include_path = [str(root / "src"), *(str(root / folder) for folder in include)]
    extensions = [
        Extension(_module_name(source), [str(root / source)], extra_compile_args=["-O2"]) for source in modules
    ]
    compiled = cythonize(
        extensions,
        build_dir=str(out / "cython"),
        include_path=include_path,
        compiler_directives=DIRECTIVES,
        quiet=True,
        force=True,
    )
    distribution = Distribution({"name": root.name, "ext_modules": compiled})
    command = build_ext(distribution)
    command.build_lib = str(out / "lib")
    command.build_temp = str(out / "temp")
    command.ensure_finalized()
    command.run()
    built = {}
    for source in modules:
        name = _module_name(source)
        path = Path(command.get_ext_fullpath(name))
        if not path.is_file():
            raise RuntimeError(f"the compiler reported success but {path} is missing")
        built[name] = path
    return built


class CompiledBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds the compiled extensions to the wheel when they can be built (see the module's docstring)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        name = self.metadata.name
        if _flag(PURE_VARIABLE):
            self.app.display_info(f"{name}: {PURE_VARIABLE} is set; building the pure-Python wheel")
            return
        self._scratch = tempfile.mkdtemp(prefix=f"{name}-build-")
        modules = list(self.config.get("modules", []))
        include = list(self.config.get("include", []))
        try:
            built = compile_extensions(Path(self.root), Path(self._scratch), modules, include)
        except Exception as exc:  # any failure to compile means the pure-Python wheel
            if _flag(REQUIRE_VARIABLE):
                raise RuntimeError(f"{name}: the compiled build failed ({exc})") from exc
            self.app.display_warning(
                f"{name}: the compiled build failed ({type(exc).__name__}: {exc}); "
                "building the pure-Python wheel (every operation works, the hottest ones are slower)"
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        for module, path in built.items():
            target = "/".join(module.split(".")[:-1]) + "/" + path.name
            build_data["force_include"][str(path)] = target
        self.app.display_info(f"{name}: compiled {', '.join(sorted(built))}")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    """Build the layer's extensions in place (next to their sources) for this interpreter."""
    root = Path.cwd()
    config = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]
    with tempfile.TemporaryDirectory(prefix="cuguard-build-") as scratch:
        built = compile_extensions(root, Path(scratch), list(hook["modules"]), list(hook.get("include", [])))
        for module, path in built.items():
            target = root / "src" / Path(*module.split(".")[:-1]) / path.name
            shutil.copy2(path, target)
            print(f"built {target.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
