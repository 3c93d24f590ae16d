"""The lifecycle every owner of driver objects shares (contract G4, O5, W1).

:class:`Owned`: ``with`` closes the object, a failure to close while an exception propagates
becomes a note on that exception (G4), and collection releases it now or on the release thread
(O5), reporting failures as warnings (W1).
"""

from __future__ import annotations

from typing import Self

from cuguard.errors._locks import collection_deferred
from cuguard.errors._ownership import Unique, defer
from cuguard.errors._report import add_failure_note

__all__ = ["Owned"]


class Owned(Unique):
    """Base of the classes whose objects release driver objects: closed, left, or collected.

    - ``with obj:`` returns ``obj`` and closes it when the block ends. When the
      block raised, a failure to close does not replace that exception: it is
      added to it as a note naming :meth:`_failure_handle` (G4).
    - :meth:`_collected` is what a subclass's ``__del__`` calls once it decided
      the object is its to release: :meth:`_collect` runs now, or on the release
      thread when collection happens where CUDA must not be called (a driver
      callback, a cuguard lock held: O5).

    Subclasses define ``close()`` (raising on failure) and ``_collect()``
    (warning on failure, W1).
    """

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def _collect(self) -> None:
        raise NotImplementedError

    def _failure_handle(self) -> object:
        """The handle a note about a failed close names (``None``: the failure's own text says it)."""
        return None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        else:
            self._discard(exc)

    def _discard(self, exc: BaseException) -> None:
        """Close while ``exc`` propagates: a failure to close becomes a note on ``exc`` (G4)."""
        try:
            self.close()
        except Exception as failure:  # noqa: BLE001 - attached to the propagating exception
            add_failure_note(exc, failure, handle=self._failure_handle())

    def _collected(self) -> None:
        """Release a collected object: now, or on the release thread where CUDA must not be called (O5)."""
        if collection_deferred():
            defer(self._collect)
            return
        self._collect()
