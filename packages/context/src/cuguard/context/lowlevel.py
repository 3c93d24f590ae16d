"""The interface of ``cuguard.context`` for the layers built on it: what they may use beyond the user API.

The layers above (``cuguard.resources``, ``cuguard.graphs``, the sweeps)
import these names from here and from nowhere else in this package; the
package's other underscore modules are private and may change in any release.
The names here change only in a minor release, never in a patch release.

- :func:`call_switched`: :func:`~cuguard.context.call_in`'s switch path for
  one creating driver call of one argument, for hot paths that have just read the current
  context themselves; :func:`call_switched_by`, the same with the switch, the
  call and the restore made by one compiled function (the compiled build's).
- :func:`on_synchronized`: register an observer of every successful
  :meth:`~cuguard.context.Context.synchronize` (the race checker's ordering
  edge).
- :data:`CONTEXT_FIELDS`: the fields of a :class:`~cuguard.context.Context`
  the layers above may *read* on their hot paths instead of the public
  properties (never write): ``_handle`` (the ``CUcontext``), ``_int`` (its
  address), ``_closed`` (refuses use: destroyed, released, or of a driver no
  longer installed), ``_released`` (the object no longer holds the context),
  ``_kind`` (``"primary"``, ``"created"`` or ``"foreign"``), ``_device`` (the
  ordinal, or ``None`` when unknown) and ``_driver`` (the driver token it was
  made under); and the method ``_refusal()``, the
  :class:`~cuguard.errors.ResourceClosedError` that says why a context refuses
  use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from cuguard.context.contexts import Context, _synchronized, call_switched, call_switched_by

__all__ = ["CONTEXT_FIELDS", "call_switched", "call_switched_by", "on_synchronized"]

#: The fields (and the one method) of :class:`~cuguard.context.Context` the layers above may read.
CONTEXT_FIELDS: Final = frozenset(
    {"_closed", "_device", "_driver", "_handle", "_int", "_kind", "_refusal", "_released"}
)


def on_synchronized(observer: Callable[[Context], None]) -> None:
    """Call ``observer(context)`` after each successful :meth:`~cuguard.context.Context.synchronize`.

    ``observer`` must not raise (it runs on the caller's thread, after the
    synchronization returned). Observers are kept for the life of the process,
    in the order registered; registering one twice calls it twice. Never fails.
    """
    _synchronized.append(observer)
