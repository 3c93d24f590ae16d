"""The compiled build of cuguard-resources: a hatch build hook, and a script for building in place.

``pip install ./packages/resources`` (or ``python -m build``) builds a wheel through hatchling; this
hook compiles ``src/cuguard/resources/_native.pyx`` with Cython and the platform's C compiler and
puts the extension in the wheel, which then carries the interpreter's and platform's tag. When that
cannot be done (no C compiler, no Python headers) the wheel is the pure-Python one (``py3-none-any``)
and the build says why in its output. Every layer works as pure Python; the compiled build only
makes the hottest driver calls cheaper.

Environment variables read at build time:

- ``CUGUARD_PURE_PYTHON=1``: build the pure-Python wheel without trying to compile.
- ``CUGUARD_REQUIRE_COMPILED=1``: fail the build instead of falling back to pure Python (CI sets
  it where a compiled wheel is expected).

Editable installs (``pip install -e``) are pure Python. ``python hatch_build.py`` (from this folder,
with Cython and setuptools installed) builds the extension in place, next to the sources, for the
interpreter that runs it: an editable or source-tree checkout then runs the compiled build.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODULE = "cuguard.resources._native"
SOURCE = Path("src") / "cuguard" / "resources" / "_native.pyx"
PURE_VARIABLE = "CUGUARD_PURE_PYTHON"
REQUIRE_VARIABLE = "CUGUARD_REQUIRE_COMPILED"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "yes", "on", "true")


def compile_extension(root: Path, out: Path) -> Path:
    """Cythonize and compile the extension under ``out``; return the path of the built module.

    Raises whatever Cython or the compiler raise when it cannot be built.
    """
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extension = Extension(MODULE, [str(root / SOURCE)], extra_compile_args=["-O2"])
    modules = cythonize(
        [extension],
        build_dir=str(out / "cython"),
        compiler_directives={"language_level": 3, "embedsignature": True},
        quiet=True,
        force=True,
    )
    distribution = Distribution({"name": "cuguard-resources", "ext_modules": modules})
    command = build_ext(distribution)
    command.build_lib = str(out / "lib")
    command.build_temp = str(out / "temp")
    command.ensure_finalized()
    command.run()
    built = Path(command.get_ext_fullpath(MODULE))
    if not built.is_file():
        raise RuntimeError(f"the compiler reported success but {built} is missing")
    return built


class CompiledBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds the compiled extension to the wheel when it can be built (see the module's docstring)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        if _flag(PURE_VARIABLE):
            self.app.display_info(f"cuguard-resources: {PURE_VARIABLE} is set; building the pure-Python wheel")
            return
        self._scratch = tempfile.mkdtemp(prefix="cuguard-resources-build-")
        try:
            built = compile_extension(Path(self.root), Path(self._scratch))
        except Exception as exc:  # any failure to compile means the pure-Python wheel
            if _flag(REQUIRE_VARIABLE):
                raise RuntimeError(f"cuguard-resources: the compiled extension did not build ({exc})") from exc
            self.app.display_warning(
                f"cuguard-resources: the compiled extension did not build ({type(exc).__name__}: {exc}); "
                "building the pure-Python wheel (every operation works, the hottest ones are slower)"
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["force_include"][str(built)] = f"cuguard/resources/{built.name}"
        self.app.display_info(f"cuguard-resources: compiled {built.name}")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    """Build the extension in place (next to ``_native.pyx``) for this interpreter."""
    root = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="cuguard-resources-build-") as scratch:
        built = compile_extension(root, Path(scratch))
        target = root / SOURCE.parent / built.name
        shutil.copy2(built, target)
    print(f"built {target.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
