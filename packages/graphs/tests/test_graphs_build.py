"""The compiled build of the graphs layer: which build runs, and a mixed install refused (contract O1).

In the compiled build, ``Node`` and the definitions' building state (``cuguard.graphs._nodes``) are
compiled classes laid out on the errors layer's compiled bases, and the empty-node builder calls the
resources layer's compiled driver calls in C. Over a pure-Python resources layer that module cannot
work, so the package refuses to load. In the pure-Python build the test that needs the compiled module
skips; ``CUGUARD_REQUIRE_COMPILED=1`` (the nox sessions of the compiled build set it) makes it fail.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import cuguard.graphs
from cuguard.graphs import _executable, _nodes

REQUIRED = os.environ.get("CUGUARD_REQUIRE_COMPILED") == "1"


def _load_as_source(*layers: str) -> str:
    """Python code that makes the next imports of ``layers`` load their modules from the ``.py`` sources.

    The resources layer's compiled driver calls (``_native``) then refuse to load, as in a pure-Python install.
    """
    return (
        "import importlib.machinery, importlib.util, pathlib, sys\n"
        "import cuguard\n"
        "folders = {}\n"
        f"for layer in {layers!r}:\n"
        "    spec = importlib.machinery.PathFinder.find_spec('cuguard.' + layer, cuguard.__path__)\n"
        "    folders['cuguard.' + layer] = pathlib.Path(spec.submodule_search_locations[0])\n"
        "class Missing:\n"
        "    @staticmethod\n"
        "    def create_module(spec):\n"
        "        return None\n"
        "    @staticmethod\n"
        "    def exec_module(module):\n"
        "        raise ImportError('no compiled driver calls in this build')\n"
        "class FromSource:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name == 'cuguard.resources._native':\n"
        "            return importlib.util.spec_from_loader(name, Missing)\n"
        "        head, _, tail = name.rpartition('.')\n"
        "        if head in folders and (folders[head] / (tail + '.py')).is_file():\n"
        "            return importlib.util.spec_from_file_location(name, folders[head] / (tail + '.py'))\n"
        "        return None\n"
        "sys.meta_path.insert(0, FromSource)\n"
    )


def test_the_flag_says_which_build_runs() -> None:
    """``cuguard.graphs.compiled`` is true exactly when the module defining ``Node`` is an extension."""
    assert isinstance(cuguard.graphs.compiled, bool)
    assert cuguard.graphs.compiled is not (_nodes.__file__ or "").endswith(".py")
    assert cuguard.graphs.Node is _nodes.Node
    # Both compiled modules come from one build: the executable graph's module is compiled exactly when Node's is.
    assert cuguard.graphs.compiled is not (_executable.__file__ or "").endswith(".py")
    assert cuguard.graphs.Graph is _executable.Graph
    if REQUIRED:
        assert cuguard.graphs.compiled


def test_compiled_graphs_refuse_the_pure_resources() -> None:
    """The compiled graphs layer over the pure-Python resources layer refuses to load, naming it (O1)."""
    if not cuguard.graphs.compiled:
        if REQUIRED:
            pytest.fail("the compiled build is required here, but cuguard.graphs._nodes is pure Python")
        pytest.skip("the pure-Python build of the graphs layer: nothing to refuse")
    # The resources layer's compiled modules load from their .py sources; its driver calls are missing.
    code = (
        _load_as_source("resources") + "import cuguard.resources\n"
        "from cuguard.resources import _base\n"
        "assert _base.__file__.endswith('.py'), 'the pure resources did not load'\n"
        "assert not cuguard.resources.compiled, 'the driver calls loaded'\n"
        "try:\n"
        "    import cuguard.graphs\n"
        "except ImportError as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith(
        "refused: cuguard-graphs is the compiled build but cuguard-resources is the pure-Python one"
    ), out


@pytest.mark.contract("G1", "O1")
def test_pure_upper_layers_over_the_compiled_errors_layer_make_their_objects() -> None:
    """Pure-Python resources and graphs over the compiled errors layer create, use and release (G1, O1).

    Allowed (an editable install of the upper layers over compiled wheels is one): their classes
    derive from the compiled ``Owned``/``Unique``, and the hot factories must make their objects
    with those bases' ``__new__``, never leaving a created driver object without its owner.
    """
    import cuguard.errors

    if not cuguard.errors.compiled:
        if REQUIRED:
            pytest.fail("the compiled build is required here, but cuguard.errors.owners is pure Python")
        pytest.skip("the pure-Python build of the errors layer: no compiled base")
    code = (
        _load_as_source("resources", "graphs") + "import cuguard.errors\n"
        "import cuguard.resources, cuguard.graphs\n"
        "from cuguard.resources import Device\n"
        "from cuguard.graphs import GraphDefinition\n"
        "from cuguard.testing import simulated_driver\n"
        "assert cuguard.errors.compiled and not cuguard.resources.compiled and not cuguard.graphs.compiled\n"
        "with simulated_driver() as sim:\n"
        "    dev = Device(0)\n"
        "    dev.set_current()  # retains the primary context, which stays\n"
        "    before = len(sim.live_objects())\n"
        "    stream = dev.create_stream()\n"
        "    event = dev.create_event()\n"
        "    buf = dev.allocate(256, stream)\n"
        "    g = GraphDefinition(dev)\n"
        "    g.empty().join().join()\n"
        "    with g.instantiate() as graph:\n"
        "        graph.launch(stream)\n"
        "    stream.sync()\n"
        "    for obj in (buf, event, stream, g):\n"
        "        obj.close()\n"
        "    print('made and released', [o.kind for o in sim.live_objects()][before:])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "made and released []", result.stdout
