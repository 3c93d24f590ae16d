"""Run every Python example of the user guide, as a reader would.

Each ```` ```python ```` block of the pages below is one example:

- a block whose first line ends with ``test_<name>.py`` (``# test_x.py``, ``# B3: test_x.py``)
  is a pytest test file: it is written under that name to a fresh directory and run with
  pytest (cuguard's plugin active);
- any other block is a program: it is written to a fresh directory and run with the Python
  running these tests. It must exit with status 0 and write nothing to stderr (no stray
  warning, no traceback).

The contract page must have exactly one example per clause, labelled by a first line
``# <clause>`` (or ``# <clause>: test_<name>.py``), in the contract's order.

Run with ``nox -s docs`` (which also builds the documentation), or with pytest directly.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent
PAGES = [
    "getting-started.md",
    "contract.md",
    "testing.md",
    "without-a-gpu.md",
    "coming-from-cuda-core.md",
    "racecheck.md",
]
CLAUSES = [
    *(f"E{i}" for i in range(1, 6)),
    *(f"G{i}" for i in range(1, 7)),
    *(f"W{i}" for i in range(1, 8)),
    *(f"C{i}" for i in range(1, 5)),
    *(f"O{i}" for i in range(1, 7)),
    *(f"S{i}" for i in range(1, 4)),
    *(f"B{i}" for i in range(1, 8)),
]
_FENCE = re.compile(r"^```python\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_TEST_FILE = re.compile(r"#.*?\b(test_\w+\.py)")
_CLAUSE = re.compile(r"# ([A-Z]\d+)\b")
_TIMEOUT = 120


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    code: str

    @property
    def label(self) -> str:
        """The block's first line without ``# `` when it is a comment, else ``line <n>``."""
        first = self.code.split("\n", 1)[0]
        return first[2:].strip() if first.startswith("# ") else f"line {self.line}"

    @property
    def clause(self) -> str | None:
        match = _CLAUSE.match(self.code)
        return match.group(1) if match else None

    @property
    def test_file(self) -> str | None:
        match = _TEST_FILE.fullmatch(self.code.split("\n", 1)[0])
        return match.group(1) if match else None


def _examples(page: str) -> list[Example]:
    text = (DOCS / page).read_text("utf-8")
    return [Example(page, text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _FENCE.finditer(text)]


ALL = [example for page in PAGES for example in _examples(page)]


def _plugin_args() -> list[str]:
    """Load cuguard's pytest plugin explicitly when it is not installed (running from a source tree)."""
    installed = any(ep.name == "cuguard" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "cuguard.testing.plugin"]


def test_every_clause_has_one_example_in_order() -> None:
    assert [example.clause for example in _examples("contract.md")] == CLAUSES


@pytest.mark.parametrize("example", ALL, ids=[f"{e.page.removesuffix('.md')}:{e.label}" for e in ALL])
def test_example(example: Example, tmp_path: Path) -> None:
    name = example.test_file
    if name is not None:
        (tmp_path / name).write_text(example.code, "utf-8")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(), name]
    else:
        (tmp_path / "example.py").write_text(example.code, "utf-8")
        command = [sys.executable, "example.py"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
    where = f"{example.page}, the example at line {example.line}"
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, f"{where} failed (exit status {result.returncode})\n{output}"
    if name is None:
        assert result.stderr == "", f"{where} wrote to stderr\n{output}"
