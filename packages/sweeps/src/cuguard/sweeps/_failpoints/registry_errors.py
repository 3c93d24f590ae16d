"""The failure-point sweep and the errors layer: its public callables make no driver call of their own.

The errors layer holds the status helpers, the driver seam and the release thread; none
of them calls the driver through the seam, so the layer has no scenario.
:data:`NO_DRIVER_CALL_ERRORS` lists each of its public callables with the reason.
"""

from __future__ import annotations

__all__ = ["NO_DRIVER_CALL_ERRORS"]

#: Public callables of errors that make no driver call, with the reason (keys as in ``Scenario.covers``).
NO_DRIVER_CALL_ERRORS: dict[str, str] = {
    "errors.compiled": "a flag fixed at import: which build runs",
    # errors: helpers and the seam; they never call the driver through the seam
    **{
        f"errors.{name}": "status helper or seam plumbing: makes no driver call through the seam"
        for name in (
            "active_driver",
            "add_failure_note",
            "call_unraisable",
            "check",
            "default_driver_choice",
            "driver",
            "driver_token",
            "error_description",
            "error_name",
            "format_handle",
            "install_driver",
            "internal_error",
            "is_sticky",
            "raise_status",
            "real_driver",
            "report",
            "report_error",
            "report_warning",
            "use_driver",
            "DriverSeam",
            "DriverSeam()",
            "RESTORE_CONTEXT",
            "DRIVER_VARIABLE",
            "driver_state",
            "forget_driver",
            "on_driver_change",
            "refuse_construction",
            "enter_driver_callback",
            "exit_driver_callback",
            "in_driver_callback",
            "installed_driver",
            "first_sticky_fault",
            "forget_sticky_fault",
            "attribute_faults",
            "attributing",
            "wrong_kind",
        )
    },
    "errors.StickyCUDAError": "an exception class: no driver call",
    "errors.Unique()": "ownership base class (no copies, no pickles): no driver call",
    "errors.defer": "queues work for cuguard's release thread; makes no driver call itself",
    "errors.deferred_count": "reads a counter of the release thread: no driver call",
    "errors.flush_deferred": "waits for cuguard's release thread; makes no driver call itself",
    **dict.fromkeys(
        (
            "errors.Transaction()",
            "errors.Transaction.append",
            "errors.Transaction.commit",
            "errors.Transaction.pending",
            "errors.Transaction.rollback",
        ),
        "an undo helper: runs the caller's undo steps, makes no driver call of its own",
    ),
    "errors.deferring_lock": "makes a lock for cuguard's own bookkeeping: no driver call",
    "errors.collection_deferred": "reads a thread-local counter: no driver call",
    **{
        f"errors.{name}": "checks an integer argument or a status code against a table: no driver call"
        for name in ("int_argument", "is_integer", "out_of_range", "status_argument", "is_driver_status")
    },
    **{
        f"errors.{name}": "a constant (a C type's limit): no driver call"
        for name in ("INT_LIMIT", "SIZE_LIMIT", "UINT_LIMIT")
    },
}
