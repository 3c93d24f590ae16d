"""The bases of every owner of driver objects (contract O1, G4, O5, W1).

- :class:`Unique`: the base of every class whose objects own a driver handle.
  Such an object has exactly one Python owner: copying, deep-copying or
  pickling it raises ``TypeError`` naming the class (O1).
- :class:`Owned`: the lifecycle every owner shares: ``with`` closes the object,
  a failure to close while an exception propagates becomes a note on that
  exception (G4), and collection releases it now or on the release thread
  (O5), reporting failures as warnings (W1).

The layers import both from :mod:`cuguard.errors.lowlevel`. This module is
where they are defined because the compiled builds declare their classes on
them: Cython's pure-Python mode compiles this same source, ``owners.pxd``
declaring both as compiled classes, and a layer's compiled classes
(``cuguard.resources.Resource``) derive from ``Owned`` by importing it from
here (a compiled base must be imported from the module that defines it).
"""

from __future__ import annotations

from typing import NoReturn, Self

from cuguard.errors._locks import collection_deferred
from cuguard.errors._ownership import defer

__all__ = ["Owned", "Unique"]


class Unique:
    """Base of classes whose objects are the one Python owner of a driver handle (O1).

    ``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise ``TypeError`` naming
    the class: a second Python object for the same handle would release it a
    second time, which crashes the real driver. Share the object itself.
    """

    __slots__ = ()

    def _refuse_copy(self) -> NoReturn:
        name = type(self).__name__
        raise TypeError(
            f"{name} objects cannot be copied or pickled: each owns a CUDA driver handle, "
            f"and a second {name} for the same handle would release it twice; share the object itself"
        )

    def __copy__(self) -> NoReturn:
        self._refuse_copy()

    def __deepcopy__(self, memo: object) -> NoReturn:
        self._refuse_copy()

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        self._refuse_copy()

    def __reduce__(self) -> NoReturn:
        self._refuse_copy()


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
        from cuguard.errors._report import add_failure_note  # here: _report's imports stand on this module

        try:
            self.close()
        except Exception as failure:  # noqa: BLE001 - attached to the propagating exception
            add_failure_note(exc, failure, handle=self._failure_handle())

    def _collected(self) -> None:
        """Release a collected object: now, or on the release thread where CUDA must not be called (O5).

        Called from ``__del__``: an exception (a ``CUDAWarning`` escalated to an
        error, W3) goes to ``sys.unraisablehook`` once, as the release thread's
        do, in both builds (a compiled finalizer would otherwise print it).
        """
        if collection_deferred():
            defer(self._collect)
            return
        from cuguard.errors._report import call_unraisable  # here: _report's imports stand on this module

        call_unraisable(self._collect, what="the collection of a CUDA resource")
