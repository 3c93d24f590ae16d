"""cuguard-resources' pytest plugin, registered through the ``pytest11`` entry point.

It adds what needs this layer to the options and fixtures of cuguard-testing's
plugin (:mod:`cuguard.testing.plugin`), in the same ``cuguard`` option group:

- ``--cuguard-racecheck`` turns cuguard's race checker on for the run (contract
  B7; it sets ``CUGUARD_RACECHECK=1`` for code that reads it): a test during
  which two operations race fails with the :class:`~cuguard.resources.RaceWarning`
  naming both, raised by the operation that completed the race (from a host
  function or a collection, through the unraisable hook as cuguard-testing's
  plugin reports those), also when the project's ini ignores ``CUDAWarning``
  (a ``-W`` on the command line has the last word).
- The fixture ``no_memory_leaks`` fails a test that leaves cuguard memory
  allocated (:func:`~cuguard.resources.memory_in_use`), naming each buffer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

_RACECHECK_KEY = pytest.StashKey[ExitStack]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("cuguard").addoption(
        "--cuguard-racecheck",
        action="store_true",
        default=False,
        help="turn cuguard's race checker on for the run: a test in which two operations race fails",
    )


def pytest_configure(config: pytest.Config) -> None:
    """``--cuguard-racecheck``: the race checker on until the run ends, and a race an error in every test."""
    if not config.getoption("--cuguard-racecheck"):
        return
    from cuguard.resources import racecheck  # the layer is imported when a run asks for it, not at every start

    os.environ["CUGUARD_RACECHECK"] = "1"
    stack = ExitStack()
    stack.enter_context(racecheck())
    config.stash[_RACECHECK_KEY] = stack
    config.addinivalue_line("filterwarnings", "error::cuguard.resources.RaceWarning")


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_RACECHECK_KEY, None)
    if stack is not None:
        stack.close()


def _memory_keys() -> set[tuple[str, int, int, str]]:
    from cuguard.resources import memory_in_use

    return {(r.kind, r.address, r.size, r.source) for r in memory_in_use()}


@pytest.fixture
def no_memory_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves cuguard memory allocated (:func:`~cuguard.resources.memory_in_use`).

    Memory held before the test is not counted. After the test, garbage is
    collected (so dropped buffers are freed, and reported if their release
    fails) and every buffer still holding memory that the test allocated is
    listed in the failure: something still references it (a cache, a
    global, a closure). Use it with ``@pytest.mark.usefixtures("no_memory_leaks")``
    or as a test argument; it works on either driver. The driver fixture the test uses
    (``sim``, ``cuguard_driver``) is set up before it and torn down after the check, so that
    memory left on a simulator is still seen.
    """
    for name in ("sim", "cuguard_driver"):
        if name in request.fixturenames:
            request.getfixturevalue(name)
    before = _memory_keys()
    yield
    from cuguard.resources import memory_in_use

    left = [r for r in memory_in_use() if (r.kind, r.address, r.size, r.source) not in before]
    if left:
        listing = "\n".join(f"  {record}" for record in left)
        pytest.fail(f"the test left {sum(r.size for r in left)} bytes of cuguard memory allocated:\n{listing}")
