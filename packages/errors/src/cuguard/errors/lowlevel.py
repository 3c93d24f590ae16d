"""The interface of ``cuguard.errors`` for the layers built on it: what they may use beyond the user API.

The layers above (``cuguard.context``, ``cuguard.resources``,
``cuguard.graphs``, ``cuguard.testing``, the sweeps) and libraries that build
their own layer on cuguard import these names from here and from nowhere else
in this package; every other module of ``cuguard.errors`` whose name starts
with an underscore is private and may change in any release. The names here
follow the package's version: they change only in a minor release, and a
patch release never removes or changes one.

- Argument checks, one message style for every layer (E3): :func:`wrong_kind`
  (the message of every check of an argument's kind), :func:`int_argument`
  (integers, NumPy's too, within the driver type's range: :data:`SIZE_LIMIT`,
  :data:`UINT_LIMIT`, :data:`INT_LIMIT`), :func:`is_integer`,
  :func:`out_of_range`, :func:`status_argument`, :func:`is_driver_status`.
- Ownership (O1, O5): :class:`Unique` (no copies, no pickles), :class:`Owned` (the
  lifecycle of an owner of driver objects: ``with``, close, collection),
  :func:`refuse_construction`, :func:`source_new` (how the factories of a
  module running as source make objects), the release thread (:func:`defer`,
  :func:`deferred_count`) and the marks of code running inside a CUDA
  callback (:func:`enter_driver_callback`, :func:`exit_driver_callback`,
  :func:`in_driver_callback`).
- cuguard's one kind of lock, under which a garbage collection defers its
  releases to the release thread (S2): :func:`deferring_lock`
  (:class:`DeferringLock`), :func:`collection_deferred`.
- What the layers keep per driver: :func:`driver_state`, :func:`forget_driver` (and
  :func:`on_driver_forgotten` for tables of their own), :func:`base_driver` (the driver under
  its wrappers),
  :func:`on_driver_change`; :data:`SETTLED_TOKEN`, :func:`~cuguard.errors.driver_token`'s answer as a
  one-element list for hot paths (``obj._driver is not SETTLED_TOKEN[0]`` is true whenever
  ``obj._driver is not driver_token()`` is, and also while the default driver is still to be
  chosen: check with the call then); the seam's route, for compiled driver calls:
  :func:`on_route_change`; the process's default driver:
  :data:`DRIVER_VARIABLE`, :func:`default_driver_choice`.
- Fault attribution's switch, read on each launch: :func:`attributing`, or
  ``ATTRIBUTING[0]`` (the same flag as a one-element list: no call on the hot path).
- For sweeps that collect garbage at each acquisition of a cuguard lock:
  :func:`set_acquire_hook`.
- The one table of facts about driver functions (what each creates, releases,
  waits for, queues; whether it is capture-unsafe, callback-safe, what it does
  once the driver is sticky): :data:`DRIVER_FACTS` of :class:`DriverFact`
  records, :func:`calls_where` for views of it, :data:`REFCOUNTED`.
"""

from __future__ import annotations

from cuguard.errors._arguments import (
    INT_LIMIT,
    SIZE_LIMIT,
    UINT_LIMIT,
    int_argument,
    is_driver_status,
    is_integer,
    out_of_range,
    status_argument,
)
from cuguard.errors._facts import DRIVER_FACTS, REFCOUNTED, DriverFact, calls_where
from cuguard.errors._locks import DeferringLock, collection_deferred, deferring_lock, set_acquire_hook
from cuguard.errors._ownership import (
    defer,
    deferred_count,
    enter_driver_callback,
    exit_driver_callback,
    in_driver_callback,
    refuse_construction,
    source_new,
    wrong_kind,
)
from cuguard.errors._seam import (
    DRIVER_VARIABLE,
    SETTLED_TOKEN,
    base_driver,
    default_driver_choice,
    driver_state,
    forget_driver,
    on_driver_change,
    on_driver_forgotten,
    on_route_change,
)
from cuguard.errors._sticky import ON as ATTRIBUTING
from cuguard.errors._sticky import attributing
from cuguard.errors.owners import Owned, Unique

__all__ = [
    "ATTRIBUTING",
    "DRIVER_FACTS",
    "DRIVER_VARIABLE",
    "INT_LIMIT",
    "SIZE_LIMIT",
    "UINT_LIMIT",
    "REFCOUNTED",
    "SETTLED_TOKEN",
    "DeferringLock",
    "DriverFact",
    "Owned",
    "Unique",
    "attributing",
    "base_driver",
    "calls_where",
    "collection_deferred",
    "default_driver_choice",
    "defer",
    "deferred_count",
    "deferring_lock",
    "driver_state",
    "enter_driver_callback",
    "exit_driver_callback",
    "forget_driver",
    "in_driver_callback",
    "int_argument",
    "is_driver_status",
    "is_integer",
    "on_driver_change",
    "on_driver_forgotten",
    "on_route_change",
    "out_of_range",
    "refuse_construction",
    "set_acquire_hook",
    "source_new",
    "status_argument",
    "wrong_kind",
]
