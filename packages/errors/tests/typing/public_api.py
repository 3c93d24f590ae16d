"""Public-API usage that ``mypy --strict`` must accept (checked by ``nox -s typecheck``, not run).

If a change to cuguard.errors makes this file fail to type-check, users' code would too.
"""

from __future__ import annotations

import warnings
from typing import Any, assert_type

from cuguard.errors import (
    CUDADriverNotFoundError,
    CUDAError,
    CUDAWarning,
    NVJitLinkError,
    NVRTCError,
    NVVMError,
    ResourceClosedError,
    add_failure_note,
    call_unraisable,
    check,
    driver,
    error_description,
    error_name,
    format_handle,
    install_driver,
    internal_error,
    is_sticky,
    report,
    report_error,
    use_driver,
)


def attributes(error: CUDAError) -> None:
    assert_type(error.code, int)
    assert_type(error.name, str)
    assert_type(error.description, str)
    assert_type(error.call, str | None)
    assert_type(error.is_sticky, bool)


def library_logs(error: NVRTCError | NVJitLinkError | NVVMError) -> str:
    return error.log


def handling() -> None:
    try:
        check(0, "cuInit")
    except CUDADriverNotFoundError as exc:
        attributes(exc)
    except CUDAError as exc:
        add_failure_note(exc, 201, "cuCtxSetCurrent", handle=0x10)
        report_error(exc, handle=0x10, detail="leaked")
        raise
    report(201, "cuStreamDestroy", 0x10, detail="leaked")
    assert_type(internal_error("broken invariant"), RuntimeError)
    assert_type(format_handle(None), str)
    assert_type(error_name(2), str)
    assert_type(error_description(2), str)
    assert_type(is_sticky(700), bool)
    call_unraisable(print, "from a callback", what="a host callback")
    warnings.filterwarnings("error", category=CUDAWarning)
    closed: RuntimeError = ResourceClosedError("Stream(0x10) is closed")
    del closed


def seam(fake: object) -> Any:
    with use_driver(fake):
        result = driver.cuStreamCreate(0)
    previous = install_driver(None)
    install_driver(previous)
    return result
