"""The helpers every layer uses to turn a driver status into Python.

- :func:`check` raises :class:`CUDAError` for a failure status (E1).
- :func:`add_failure_note` attaches a secondary failure to the exception being
  handled (G4).
- :func:`report` issues a :class:`CUDAWarning` where nothing can be raised (W1, W2);
  failures with a sticky status are reported once per context and fault (W7, see
  :mod:`cuguard.errors._onefault`).
- :func:`call_unraisable` runs code on behalf of CUDA (a callback, a deferred
  release) and routes anything it raises to ``sys.unraisablehook`` (W3, W6).
- :func:`internal_error` builds the exception for a broken cuguard invariant (S2).

``CUDA_ERROR_DEINITIALIZED`` is never reported or attached (W4): it means the
driver is shutting down and there is nothing left to release. Once the
interpreter is finalizing nothing is reported at all (S1).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from cuguard.errors._exceptions import CUDAError, CUDAWarning, _status_code
from cuguard.errors._locks import deferring_lock
from cuguard.errors._onefault import fold
from cuguard.errors._table import DEINITIALIZED, STICKY_CODES, driver_entry

__all__ = [
    "add_failure_note",
    "call_unraisable",
    "check",
    "format_handle",
    "internal_error",
    "raise_status",
    "report",
    "report_error",
    "report_warning",
]


def format_handle(handle: object) -> str:
    """Render a driver handle (``CUstream``, ``CUdeviceptr``, int...) as ``0x...``.

    Never raises: ``None`` renders as ``NULL``, and anything without an integer value as its ``repr``.
    """
    if handle is None:
        return "NULL"
    try:
        return hex(int(handle))  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - rendering a handle for a report must never raise
        pass
    try:
        return repr(handle)
    except Exception:  # noqa: BLE001
        return object.__repr__(handle)


def raise_status(status: object, call: str, detail: str | None = None) -> NoReturn:
    """Raise :class:`CUDAError` for ``status`` (a failure) from ``call``.

    For hot paths, which test the status inline and call this only on failure::

        err, stream = driver.cuStreamCreate(0)
        if err:
            raise_status(err, "cuStreamCreate")
    """
    raise CUDAError(status, call, detail)


def check(status: object, call: str) -> None:
    """Raise :class:`CUDAError` if ``status`` is not success; return otherwise.

    ``status`` must be a ``CUresult``, ``cudaError_t`` or ``int``; anything else
    (including ``bool`` and ``None``) raises ``TypeError``.
    """
    if _status_code(status):
        raise CUDAError(status, call)


def _failure_text(status: object, call: str, handle: object) -> str:
    code = _status_code(status)
    name, description = driver_entry(code)
    target = f"({format_handle(handle)})" if handle is not None else ""
    return f"{call}{target} failed: {name}: {description}"


def add_failure_note(exc: BaseException, failure: object, call: str | None = None, handle: object = None) -> None:
    """Attach a secondary failure to ``exc``, the exception already propagating (G4).

    ``failure`` is a status (``CUresult``/int, then ``call`` names the driver
    function) or an exception raised by the secondary step (a failed undo or
    restore). ``CUDA_ERROR_DEINITIALIZED`` is dropped (W4). Never raises.
    """
    if isinstance(failure, CUDAError):
        if _deinitialized(failure):
            return
        text = str(failure)
        if handle is not None:
            text = f"{text} (handle {format_handle(handle)})"
    elif isinstance(failure, BaseException):
        text = f"{type(failure).__name__}: {failure}"
    else:
        try:
            code = _status_code(failure)
        except TypeError:
            # A caller passed something that is not a status: say so, but never let it
            # replace the exception that is propagating.
            text = str(internal_error(f"{call or 'a CUDA call'} failed with {failure!r}, which is not a CUDA status"))
        else:
            if code == DEINITIALIZED:
                return
            text = _failure_text(code, call or "CUDA call", handle)
    exc.add_note(f"while handling this error, cleanup also failed: {text}")


def report(
    status: object, call: str, handle: object = None, detail: str | None = None, *, context: object = None
) -> None:
    """Report a failure that cannot be raised as a :class:`CUDAWarning` (W1).

    The message reads ``"<call>(<handle>) failed: <name>: <description>"`` and
    then ``detail``, e.g. what was leaked. Distinct handles give distinct
    messages, so the warning registry never collapses independent failures (W2).
    ``CUDA_ERROR_DEINITIALIZED`` is dropped (W4), and nothing is reported once
    the interpreter is finalizing (S1). A non-status ``status`` raises
    ``TypeError``. Otherwise this never raises, except when the user escalated
    ``CUDAWarning`` to an error (W3): the escalated warning propagates to the
    caller, which is a destructor or :func:`call_unraisable`, so it reaches
    ``sys.unraisablehook``.

    A sticky status (the driver refuses all work after a kernel fault) is
    reported once per context (W7): ``context`` names the context the failed
    release ran in (a ``Context``; ``None`` when unknown). The first such
    failure in a context issues a :class:`~cuguard.errors.StickyFaultWarning`
    naming the first fault; later ones are counted, and the count comes in one
    summary warning when that context's last cuguard object is gone, or at exit.
    """
    if sys.is_finalizing():
        return
    code = _status_code(status)
    if code == DEINITIALIZED:
        return
    text = _failure_text(code, call, handle)
    if detail:
        text = f"{text}; {detail}"
    if code in STICKY_CODES:
        warning = fold(text, f"{call} failed with {driver_entry(code)[0]}", context)
        if warning is not None:
            warnings.warn(warning, stacklevel=2)
        return
    warnings.warn(CUDAWarning(text), stacklevel=2)


def report_warning(warning: CUDAWarning, stacklevel: int = 2) -> None:
    """Issue ``warning`` (a :class:`CUDAWarning`, or a subclass of the layer's own) through the one channel.

    For a finding that is no driver failure (for example a race the race checker
    proved). Nothing is issued once the interpreter is finalizing (S1).
    ``stacklevel`` counts as for :func:`warnings.warn` from the caller's frame.
    Never raises, except when the user escalated the warning to an error (W3).
    """
    if sys.is_finalizing():
        return
    warnings.warn(warning, stacklevel=stacklevel + 1)


def _deinitialized(error: CUDAError) -> bool:
    """Whether ``error`` is the driver's CUDA_ERROR_DEINITIALIZED (not a library status of the same value)."""
    return error.name == "CUDA_ERROR_DEINITIALIZED"


def report_error(
    error: BaseException, handle: object = None, detail: str | None = None, *, context: object = None
) -> None:
    """Report an exception caught where nothing can be raised (W1).

    A :class:`CUDAError` is reported like :func:`report` (a sticky one once per
    ``context``, W7); any other exception (a reason such as a closed context, or
    an internal error) becomes a :class:`CUDAWarning` carrying the handle and
    the exception's text.
    """
    if sys.is_finalizing():
        return
    own = None  # a sticky error's call and status (W7)
    if isinstance(error, CUDAError) and error.call is not None and error.code != 0:
        if _deinitialized(error):
            return
        # The error's own name and description: a compiler or linker status is not a CUresult.
        target = f"({format_handle(handle)})" if handle is not None else ""
        text = f"{error.call}{target} failed: {error.name}: {error.description}"
        if error.detail:
            text = f"{text}; {error.detail}"
        if error.is_sticky:
            own = f"{error.call} failed with {error.name}"
    else:
        # The reason itself, never an exception class name where a call belongs (W1).
        text = f"{format_handle(handle)}: {error}" if handle is not None else str(error)
    if detail:
        text = f"{text}; {detail}"
    if own is not None:
        warning = fold(text, own, context)
        if warning is not None:
            warnings.warn(warning, stacklevel=2)
        return
    warnings.warn(CUDAWarning(text), stacklevel=2)


def internal_error(detail: str) -> RuntimeError:
    """The exception for a broken cuguard invariant (S2); the caller raises it.

    cuguard never aborts: the resource concerned is leaked and this is raised
    (or reported as a :class:`CUDAWarning` where nothing can be raised).
    """
    return RuntimeError(f"internal cuguard error, please report: {detail}")


def call_unraisable(fn: Callable[..., Any], *args: Any, what: str = "CUDA callback") -> None:
    """Call ``fn(*args)`` on behalf of CUDA; route any exception to ``sys.unraisablehook``.

    Used for host callbacks, user-object destructors and deferred releases:
    code that CUDA or a cleanup thread calls, where an exception has nowhere to
    go. The exception (including an escalated :class:`CUDAWarning`, W3) reaches
    ``sys.unraisablehook`` once, and the caller carries on (W6). Once the
    interpreter is finalizing, ``fn`` is not called at all (S1).
    """
    if sys.is_finalizing():
        return
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into the driver
        if sys.is_finalizing():
            return
        args_type = _unraisable_args_type()
        sys.unraisablehook(args_type((type(exc), exc, exc.__traceback__, f"Exception ignored in {what}", fn)))


_ARGS_TYPE: list[Any] = []
_ARGS_LOCK = deferring_lock()


class _ProbeError(Exception):
    pass


class _Probe:
    def __del__(self) -> None:
        raise _ProbeError


def _unraisable_args_type() -> Any:
    """The interpreter's ``UnraisableHookArgs`` type, which is not exported.

    Learned once by letting a probe object fail in ``__del__`` under a temporary
    hook; any other unraisable exception arriving meanwhile is passed on to the
    previous hook untouched.
    """
    if _ARGS_TYPE:
        return _ARGS_TYPE[0]
    with _ARGS_LOCK:
        if not _ARGS_TYPE:
            previous = sys.unraisablehook

            def probe_hook(args: Any) -> None:
                if isinstance(args.exc_value, _ProbeError):
                    _ARGS_TYPE.append(type(args))
                else:
                    previous(args)

            sys.unraisablehook = probe_hook
            try:
                _Probe()
            finally:
                sys.unraisablehook = previous
    return _ARGS_TYPE[0]
