"""The simulated driver's own thread: runs host functions (and the work queued behind them) in order."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from cuguard.errors.lowlevel import deferring_lock

__all__ = ["Worker"]


class Worker:
    """A FIFO of tasks run by one daemon thread, started on first use.

    Tasks are numbered from 1; :meth:`wait` blocks until a task number has
    completed. Every stream shares the one FIFO, which keeps each stream's
    order (and is stricter than a GPU: a host function that blocks holds up
    work queued after it on every stream).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        # cuguard's re-entrant lock (a collection while it is held is deferred); Condition takes any
        # lock with acquire/release and the re-entrant lock's save/restore pair, which it has.
        self._cond = threading.Condition(cast(Any, deferring_lock(reentrant=True)))
        self._queue: deque[tuple[int, Callable[[], None]]] = deque()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.submitted = 0
        self.done = 0
        self.errors: list[BaseException] = []

    @property
    def ident(self) -> int | None:
        """The thread id of the driver thread (``None`` before it started)."""
        thread = self._thread
        return None if thread is None else thread.ident

    def on_worker(self) -> bool:
        thread = self._thread
        return thread is not None and threading.current_thread() is thread

    def submit(self, task: Callable[[], None]) -> int:
        with self._cond:
            if self._closed:
                raise RuntimeError("the simulated driver is closed: its driver thread has been joined")
            self.submitted += 1
            seq = self.submitted
            self._queue.append((seq, task))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return seq

    def wait(self, seq: int) -> None:
        """Block until task ``seq`` has run (no-op on the driver thread itself)."""
        if self.done >= seq or self.on_worker():
            return
        with self._cond:
            while self.done < seq:
                self._cond.wait()

    def drain(self) -> None:
        self.wait(self.submitted)

    def close(self) -> None:
        """Run what is queued, stop the thread and join it."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                seq, task = self._queue.popleft()
            try:
                task()
            except BaseException as exc:  # noqa: BLE001 - a task must never kill the driver thread
                self.errors.append(exc)
            with self._cond:
                self.done = seq
                self._cond.notify_all()
