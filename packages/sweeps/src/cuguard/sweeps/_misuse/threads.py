"""The misuse sweep's second thread and its watchdog: a step that does not finish in time is a hang (S2).

:class:`SecondThread` is one long-lived thread per example that acts between
the main thread's steps on the same objects (closing, collecting, querying,
launching, beginning and ending captures of its own). The main thread hands it
one call at a time and waits for it; a call that does not finish within the
step timeout is a hang: it is reported and the example stops (the thread is
left where it hangs, a daemon, and the run stops after that example: a lock it
holds would hang every later one).

:func:`deadline` bounds a step of the main thread the same way, with
``SIGALRM``: a hang inside cuguard (a lock taken twice) is interrupted by
:class:`Hang`, raised from the signal handler where the thread waits (lock
waits are interruptible by signals). Where no alarm can be set (not the main
thread, no ``SIGALRM``) steps run unbounded.
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["STEP_TIMEOUT", "Hang", "SecondThread", "deadline"]

#: Seconds a step may take before it counts as a hang (simulated steps take milliseconds).
STEP_TIMEOUT = 60.0


class Hang(BaseException):
    """A step did not finish in time (raised in the main thread by :func:`deadline`).

    A ``BaseException``: no ``except Exception`` of cuguard or of the sweep may swallow it.
    """


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread if the block runs longer than ``seconds``."""
    usable = (
        seconds > 0
        and hasattr(signal, "SIGALRM")
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"the step did not finish within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    old_timer = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_timer[0]:
            signal.setitimer(signal.ITIMER_REAL, *old_timer)


class SecondThread:
    """A long-lived thread that runs calls handed to it, one at a time (see the module docstring)."""

    def __init__(self, name: str = "cuguard-misuse-second") -> None:
        self.name = name
        self.hung = False
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    @property
    def ident(self) -> int | None:
        return None if self._thread is None else self._thread.ident

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed back to the main thread
                box.append((False, exc))
            finally:
                done.set()
                del fn, box, done, job  # the result is the main thread's now: hold nothing between calls

    def run(self, fn: Callable[[], Any], timeout: float = STEP_TIMEOUT) -> tuple[bool, Any]:
        """Run ``fn()`` on the thread; ``(True, result)``, ``(False, exception)``, or ``(False, Hang)`` on a hang.

        After a hang the thread is not used again (:attr:`hung`).
        """
        if self.hung:
            return False, Hang(f"{self.name} hangs already")
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(timeout):
            self.hung = True
            return False, Hang(f"a call on {self.name} did not finish within {timeout:g} s")
        ok, value = box[0]
        return bool(ok), value

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread (unless it hangs: then it is left as it is)."""
        thread, self._thread = self._thread, None
        if thread is None or self.hung:
            return
        self._jobs.put(None)
        thread.join(timeout)
