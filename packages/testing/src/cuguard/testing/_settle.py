"""Test helpers every cuguard test suite needs: settle the releases, check the simulator's books, bound a hang.

- :func:`settle` waits until every release that is due has been carried out: garbage collected,
  the simulated driver's callbacks delivered, cuguard's release thread caught up.
- :func:`assert_no_misuse` fails when the simulated driver recorded a misuse, a double release, a
  use after release or a dangling reference (on a real driver it checks nothing: there are no books).
- :func:`run_bounded` runs a callable on a thread of its own and fails when it does not finish in
  time: a hang becomes a test failure instead of a stuck test run.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

from cuguard.errors import flush_deferred, installed_driver
from cuguard.errors.lowlevel import base_driver, wrong_kind
from cuguard.testing._sim import SimulatedDriver

__all__ = ["assert_no_misuse", "run_bounded", "settle"]


def _simulator(drv: Any) -> SimulatedDriver | None:
    """The simulated driver ``drv`` is or wraps (a fault proxy over it), else ``None``."""
    base = base_driver(drv)
    return base if isinstance(base, SimulatedDriver) else None


def _seconds(name: str, value: object) -> float:
    """``value`` as a positive number of seconds: ``TypeError`` for another kind, ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong_kind(name, "a number of seconds", value)
    if not value > 0:
        raise ValueError(f"{name} must be above 0 seconds, not {value!r}")
    return float(value)


def settle(drv: Any = None, timeout: float = 10.0) -> None:
    """Let every release that is due happen: collect garbage, let the simulated driver deliver
    its callbacks (user-object destructors, host functions), and wait for cuguard's release thread.

    ``drv`` is the driver to settle (a :class:`SimulatedDriver`, a proxy over one, or the real
    driver); ``None`` means the installed one. Repeated three times, since a release can make
    garbage of its own (a graph dropping the buffers it kept). Raises ``TimeoutError`` when the
    release thread has not caught up within ``timeout`` seconds of a round; a ``timeout`` that is
    not a number raises ``TypeError``, one not above 0 ``ValueError``, before anything is done.
    """
    timeout = _seconds("timeout", timeout)
    sim = _simulator(installed_driver() if drv is None else drv)
    for _ in range(3):
        gc.collect()
        if sim is not None:
            sim.drain()
        if not flush_deferred(timeout):
            raise TimeoutError(f"cuguard's release thread did not catch up within {timeout} s")


def assert_no_misuse(drv: Any = None) -> None:
    """Fail (``AssertionError``, listing them) when the simulated driver recorded a misuse, a double
    release, a use after release or a dangling reference.

    ``drv`` as for :func:`settle`. On the real driver there are no books: nothing is checked.
    """
    sim = _simulator(installed_driver() if drv is None else drv)
    if sim is None:
        return
    found = {
        "misuse": list(sim.misuse),
        "double release": list(sim.double_release),
        "use after release": list(sim.use_after_release),
        "dangling": list(sim.dangling),
    }
    bad = {kind: items for kind, items in found.items() if items}
    if bad:
        raise AssertionError(
            "the simulated driver recorded: " + "; ".join(f"{kind}: {items}" for kind, items in bad.items())
        )


def run_bounded(fn: Callable[[], object], seconds: float, what: str = "the call") -> None:
    """Run ``fn()`` on a daemon thread; fail with ``AssertionError`` when it has not returned after
    ``seconds`` (a hang: the thread is left behind), and raise what ``fn`` raised otherwise.

    An ``fn`` that is not callable or ``seconds`` that are not a number raise ``TypeError``,
    ``seconds`` not above 0 ``ValueError``, before the thread starts.
    """
    if not callable(fn):
        raise wrong_kind("fn", "a callable", fn)
    seconds = _seconds("seconds", seconds)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="cuguard-bounded", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"{what} hung: it had not returned after {seconds:g} s")
    if failure:
        raise failure[0]
