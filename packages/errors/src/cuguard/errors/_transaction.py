"""All-or-nothing operations of several steps: the undo steps of what succeeded, run when a later step fails."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from cuguard.errors._ownership import wrong_kind
from cuguard.errors._report import add_failure_note
from cuguard.errors.owners import Unique

__all__ = ["Transaction"]


class Transaction(Unique):
    """The undo steps of an operation made of several driver calls (G1, G4).

    After each step that changed something, :meth:`append` how to undo it;
    when every step succeeded, :meth:`commit`. If the block raises, or ends
    without :meth:`commit`, the undo steps run, newest first::

        with Transaction() as undo:
            address = reserve(size)
            undo.append(address_free, address, size)
            handle = create(size)
            undo.append(release, handle)
            map_memory(address, size, handle)  # raises: release(handle), then address_free(...)
            undo.commit()

    An undo step that raises does not stop the others: its failure is a note on
    the exception that is propagating (G4), and what it should have undone is
    leaked, never undone twice. When the block ended without an exception and
    without :meth:`commit`, the undo steps still run, and the first failure
    among them is raised once all have run (the others as its notes).
    :meth:`rollback` runs them outside a ``with`` block. Undo steps run once:
    after a rollback or a commit the transaction is empty and can be used
    again. A transaction cannot be copied or pickled (``TypeError``): a copy
    would run the same undo steps, releasing what they release, a second time.
    """

    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def append(self, undo: Callable[..., object], *args: Any) -> None:
        """Add the step ``undo(*args)``, to run if the operation fails; ``TypeError`` if ``undo`` is not callable."""
        if not callable(undo):
            raise wrong_kind("undo", "a callable", undo)
        self._steps.append((undo, args))

    def commit(self) -> None:
        """The operation succeeded: forget the undo steps (none will run)."""
        self._steps.clear()

    def rollback(self, exc: BaseException | None = None) -> None:
        """Run the undo steps, newest first, and forget them.

        With ``exc`` (the exception the operation is raising), each failed
        step is a note on it and nothing is raised here. Without, the first
        failure is raised once every step has run, the later ones as its notes.
        """
        steps, self._steps = self._steps, []
        first: Exception | None = None
        for undo, args in reversed(steps):
            try:
                undo(*args)
            except Exception as failure:  # noqa: BLE001 - a note on the propagating exception, or raised below
                if exc is not None:
                    add_failure_note(exc, failure)
                elif first is None:
                    first = failure
                else:
                    add_failure_note(first, failure)
        if first is not None:
            raise first

    @property
    def pending(self) -> int:
        """How many undo steps would run now."""
        return len(self._steps)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._steps:
            self.rollback(exc)

    def __repr__(self) -> str:
        return f"<Transaction: {len(self._steps)} undo step(s) pending>"
