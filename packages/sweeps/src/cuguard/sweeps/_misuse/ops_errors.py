"""The misuse sweep's operations of the errors layer: status helpers, argument checks, the release thread.

``graphs.flush_deferred`` and ``graphs.pending_payloads`` (the graph layer's view of the release
thread) are drawn beside the errors layer's own.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from cuguard.sweeps._misuse.model import Opaque
from cuguard.sweeps._misuse.ops_base import (
    Op,
    _collect_under_lock,
    _error,
    _v,
    adder,
)

__all__ = ["errors_ops"]


def errors_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """The errors layer's status helpers, argument checks and release-thread helpers."""
    E, G = L.errors, L.graphs
    ops: list[Op] = []
    add = adder(ops)
    codes = _v("code", 1, 2, 700, 0, -1, 2**40, None, 1.5, "x", good=3)

    # --- errors ------------------------------------------------------------------------------
    add("errors.error_name", None, E.error_name, codes)
    add("errors.error_description", None, E.error_description, codes)
    add("errors.is_sticky", None, E.is_sticky, codes)
    add(
        "errors.CUDAError",
        None,
        lambda code, call: _error(E, code, call),
        codes,
        _v("call", "cuStreamCreate", None, 5, good=2),
    )
    add("errors.format_handle", None, E.format_handle, _v("handle", None, 0, 12345, "x", 1.5))
    add("errors.flush_deferred", None, E.flush_deferred, _v("timeout", None, 0, 1.0, 5))
    add("graphs.flush_deferred", None, G.flush_deferred, _v("timeout", None, 0, 1.0))
    add("graphs.pending_payloads", None, G.pending_payloads)
    add("errors.default_driver_choice", None, E.default_driver_choice)
    integers = _v("value", 0, 64, 2**63, -1, 2**64, True, 1.5, None, "1", good=3)
    add("errors.int_argument", None, lambda value: E.int_argument("size", value), integers)
    add("errors.is_integer", None, E.is_integer, integers)
    # no sticky codes: raising one records the process's first sticky fault (E5) for the rest of the example
    statuses = _v("status", 1, 2, 201, 0, -1, 12345, 2**40, None, "x", 1.5, good=3)
    add("errors.status_argument", None, lambda status: E.status_argument("code", status), statuses)
    add("errors.is_driver_status", None, E.is_driver_status, statuses)
    add("errors.check", None, lambda status: E.check(status, "cuStreamQuery"), statuses)
    add("errors.raise_status", None, lambda status: E.raise_status(status, "cuStreamQuery"), statuses)
    add(
        "errors.wrong_kind",
        None,
        lambda value: (E.wrong_kind("stream", "a Stream", value), E.out_of_range("size", 5, 0, 4)),
        _v("value", None, 5, "x", lambda: Opaque()),  # noqa: PLW0108 - a fresh object per draw
    )
    add("errors.internal_error", None, E.internal_error, _v("detail", "an invariant", "", None, good=2))
    add("errors.attributing", None, E.attributing)
    add("errors.collection_deferred", None, E.collection_deferred)
    # a collection while a cuguard lock is held: what it makes due goes to the release thread (S2, O5)
    add(
        "errors.deferring_lock",
        None,
        lambda reentrant: _collect_under_lock(E, reentrant),
        _v("reentrant", False, True, None, "yes", good=3),
    )
    return ops
