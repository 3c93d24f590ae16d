"""What every resource shares: handle, context, close(), ``with``, release on collection.

A resource records at creation its handle and its context. Release is
deterministic with :meth:`Resource.close` (an ordinary call, which raises on
failure, contract S3) or implicit when the object is garbage-collected (which
reports a ``CUDAWarning`` instead, W1). Either way the handle is marked
released *before* the driver is asked, so it is never released twice (S2);
a failed release leaks the object rather than risking a dangling one (W5).
Once the interpreter is finalizing, collection does nothing at all (S1).
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from cuguard.context import Context
from cuguard.errors import CUDAError, ResourceClosedError, add_failure_note, format_handle, report, report_error

__all__ = ["Resource"]


class Resource:
    """Base of every cuguard resource (streams, events, buffers, modules...)."""

    __slots__ = ("__weakref__", "_closed", "_context", "_handle", "_owned")

    _what: ClassVar[str] = "resource"
    _handle: Any
    _context: Context
    _closed: bool
    _owned: bool

    def _init(self, handle: Any, context: Context, owned: bool = True) -> None:
        self._handle = handle
        self._context = context
        self._owned = owned
        self._closed = False

    @property
    def handle(self) -> Any:
        """The driver handle. Raises :class:`~cuguard.errors.ResourceClosedError` once closed."""
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")
        return self._handle

    @property
    def context(self) -> Context:
        """The context the resource belongs to."""
        return self._context

    @property
    def closed(self) -> bool:
        """Whether the resource was closed (or released, or leaked after a failed release)."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ResourceClosedError(f"{self!r} is closed")

    def _release(self, raising: bool) -> tuple[Any, str]:
        """Release the driver object; return ``(status, call)``. Subclasses implement it.

        ``raising`` tells whether this is an explicit close (switch with
        ``call_in``) or a collection (switch with ``cleanup_in``).
        """
        raise NotImplementedError

    def _context_gone(self) -> None:
        """Raise for an explicit close whose context was closed first: the object is leaked."""
        raise RuntimeError(
            f"{self!r} cannot be released: its context {self._context!r} was closed first; it was leaked"
        )

    def _release_failed(self, status: Any, call: str) -> None:
        """Raise for an explicit release the driver refused: the object is leaked (S3, W5)."""
        raise CUDAError(status, call, f"{self._what} {format_handle(self._handle)} was leaked")

    def close(self) -> None:
        """Release the resource now. Idempotent.

        If the release fails, raises :class:`~cuguard.errors.CUDAError`; the
        object is then leaked on purpose (never released a second time). If
        its context was destroyed, nothing is released (that would crash the
        driver), and ``RuntimeError`` says the object was leaked.
        """
        if self._closed:
            return
        self._closed = True
        if not self._owned:
            return
        if self._context._closed:
            self._context_gone()
        status, call = self._release(True)
        if status:
            self._release_failed(status, call)

    def __enter__(self) -> Any:
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
            add_failure_note(exc, failure, handle=self._handle)

    def __del__(self) -> None:
        try:
            if self._closed:
                return
        except AttributeError:  # construction never finished: nothing to release
            return
        if sys.is_finalizing():
            return
        self._closed = True
        if not self._owned or self._context.stale:
            # A resource of an uninstalled driver has nothing left to release.
            return
        if self._context._closed:
            report_error(
                RuntimeError(f"its context {self._context!r} was closed first"),
                self._handle,
                f"the {self._what} was leaked",
            )
            return
        try:
            status, call = self._release(False)
        except CUDAError as exc:  # the driver itself is gone
            report_error(exc, self._handle, f"the {self._what} was leaked")
            return
        if status:
            report(status, call, self._handle, f"the {self._what} was leaked")

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {format_handle(self._handle)}{state}>"
