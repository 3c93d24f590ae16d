"""cuguard.errors: CUDA failures as Python exceptions and warnings, and the driver seam.

Public surface:

- exceptions: :class:`CUDAError` (``code``, ``name``, ``description``, ``call``,
  ``is_sticky``), :class:`StickyCUDAError` (``launch``, ``first_fault``; E5),
  :class:`CUDADriverNotFoundError`, :class:`NVRTCError`,
  :class:`NVJitLinkError`, :class:`NVVMError`, :class:`ResourceClosedError`,
  :class:`LibraryNotFoundError`;
- the warning :class:`CUDAWarning` (a ``RuntimeWarning``), and :class:`StickyFaultWarning`, the one
  report of the releases a sticky fault refused in a context (W7);
- status tables: :func:`error_name`, :func:`error_description`, :func:`is_sticky`;
- reporting, for code of its own that calls the driver: :func:`check`, :func:`raise_status`,
  :func:`add_failure_note`, :func:`report`, :func:`report_error`, :func:`report_warning`,
  :func:`call_unraisable`, :func:`internal_error`, :func:`format_handle`;
- the driver seam: :data:`driver`, :func:`use_driver`, :func:`driver_token`, :func:`install_driver`,
  :func:`installed_driver`, :func:`active_driver`, :func:`real_driver`, :data:`RESTORE_CONTEXT`;
- sticky faults (E5): :func:`first_sticky_fault`, :func:`forget_sticky_fault`, and fault
  attribution with :func:`attribute_faults` / ``CUGUARD_ATTRIBUTE_FAULTS=1``;
- the release thread (O5): :func:`flush_deferred`;
- all-or-nothing operations of several steps (G1, G4): :class:`Transaction`.

What the layers built on this one use beyond that (argument checks, ownership,
locks, per-driver state) is :mod:`cuguard.errors.lowlevel`. Its names are also
importable from here, as aliases kept for one release (0.1.x): they are not
in ``__all__``; import them from :mod:`cuguard.errors.lowlevel`.
"""

from __future__ import annotations

from cuguard.errors import owners as _owners
from cuguard.errors._arguments import INT_LIMIT as INT_LIMIT
from cuguard.errors._arguments import SIZE_LIMIT as SIZE_LIMIT
from cuguard.errors._arguments import UINT_LIMIT as UINT_LIMIT
from cuguard.errors._arguments import int_argument as int_argument
from cuguard.errors._arguments import is_driver_status as is_driver_status
from cuguard.errors._arguments import is_integer as is_integer
from cuguard.errors._arguments import out_of_range as out_of_range
from cuguard.errors._arguments import status_argument as status_argument
from cuguard.errors._exceptions import CUDADriverNotFoundError as CUDADriverNotFoundError
from cuguard.errors._exceptions import CUDAError as CUDAError
from cuguard.errors._exceptions import CUDAWarning as CUDAWarning
from cuguard.errors._exceptions import LibraryNotFoundError as LibraryNotFoundError
from cuguard.errors._exceptions import NVJitLinkError as NVJitLinkError
from cuguard.errors._exceptions import NVRTCError as NVRTCError
from cuguard.errors._exceptions import NVVMError as NVVMError
from cuguard.errors._exceptions import ResourceClosedError as ResourceClosedError
from cuguard.errors._exceptions import StickyCUDAError as StickyCUDAError
from cuguard.errors._locks import collection_deferred as collection_deferred
from cuguard.errors._locks import deferring_lock as deferring_lock
from cuguard.errors._onefault import StickyFaultWarning as StickyFaultWarning
from cuguard.errors._ownership import defer as defer
from cuguard.errors._ownership import deferred_count as deferred_count
from cuguard.errors._ownership import enter_driver_callback as enter_driver_callback
from cuguard.errors._ownership import exit_driver_callback as exit_driver_callback
from cuguard.errors._ownership import flush_deferred as flush_deferred
from cuguard.errors._ownership import in_driver_callback as in_driver_callback
from cuguard.errors._ownership import refuse_construction as refuse_construction
from cuguard.errors._ownership import wrong_kind as wrong_kind
from cuguard.errors._report import add_failure_note as add_failure_note
from cuguard.errors._report import call_unraisable as call_unraisable
from cuguard.errors._report import check as check
from cuguard.errors._report import format_handle as format_handle
from cuguard.errors._report import internal_error as internal_error
from cuguard.errors._report import raise_status as raise_status
from cuguard.errors._report import report as report
from cuguard.errors._report import report_error as report_error
from cuguard.errors._report import report_warning as report_warning
from cuguard.errors._seam import DRIVER_VARIABLE as DRIVER_VARIABLE
from cuguard.errors._seam import RESTORE_CONTEXT as RESTORE_CONTEXT
from cuguard.errors._seam import DriverSeam as DriverSeam
from cuguard.errors._seam import active_driver as active_driver
from cuguard.errors._seam import default_driver_choice as default_driver_choice
from cuguard.errors._seam import driver as driver
from cuguard.errors._seam import driver_state as driver_state
from cuguard.errors._seam import driver_token as driver_token
from cuguard.errors._seam import first_sticky_fault as first_sticky_fault
from cuguard.errors._seam import forget_driver as forget_driver
from cuguard.errors._seam import forget_sticky_fault as forget_sticky_fault
from cuguard.errors._seam import install_driver as install_driver
from cuguard.errors._seam import installed_driver as installed_driver
from cuguard.errors._seam import on_driver_change as on_driver_change
from cuguard.errors._seam import real_driver as real_driver
from cuguard.errors._seam import use_driver as use_driver
from cuguard.errors._sticky import attribute_faults as attribute_faults
from cuguard.errors._sticky import attributing as attributing
from cuguard.errors._table import STICKY_CODES as _STICKY_CODES
from cuguard.errors._table import driver_entry as _driver_entry
from cuguard.errors._transaction import Transaction as Transaction
from cuguard.errors.owners import Unique as Unique

__all__ = [
    "RESTORE_CONTEXT",
    "CUDADriverNotFoundError",
    "CUDAError",
    "CUDAWarning",
    "DriverSeam",
    "LibraryNotFoundError",
    "NVJitLinkError",
    "NVRTCError",
    "NVVMError",
    "ResourceClosedError",
    "StickyCUDAError",
    "StickyFaultWarning",
    "Transaction",
    "active_driver",
    "add_failure_note",
    "attribute_faults",
    "call_unraisable",
    "check",
    "compiled",
    "driver",
    "driver_token",
    "error_description",
    "error_name",
    "first_sticky_fault",
    "flush_deferred",
    "forget_sticky_fault",
    "format_handle",
    "install_driver",
    "installed_driver",
    "internal_error",
    "is_sticky",
    "raise_status",
    "real_driver",
    "report",
    "report_error",
    "report_warning",
    "use_driver",
]

__version__ = "0.1.0"


def error_name(code: int) -> str:
    """The driver's name for a ``CUresult`` code, e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``; needs no driver.

    ``code`` goes through ``int()``; an unknown code gets a generic name, and a value ``int()``
    refuses raises its ``TypeError`` or ``ValueError``.
    """
    return _driver_entry(int(code))[0]


def error_description(code: int) -> str:
    """The driver's description of a ``CUresult`` code, e.g. ``"out of memory"``; needs no driver.

    ``code`` goes through ``int()``; an unknown code gets a generic description, and a value ``int()``
    refuses raises its ``TypeError`` or ``ValueError``.
    """
    return _driver_entry(int(code))[1]


def is_sticky(code: int) -> bool:
    """Whether a ``CUresult`` code is one after which the driver refuses all further work.

    Needs no driver; ``code`` goes through ``int()``, whose ``TypeError`` or ``ValueError`` propagates.
    """
    return int(code) in _STICKY_CODES


#: Whether this process runs the compiled build of this layer: ``True`` when the owners' bases
#: (:mod:`cuguard.errors.owners`) are the compiled module of this installation, ``False`` for the
#: pure-Python build (installed without a C compiler, or with ``CUGUARD_PURE_PYTHON=1`` at build
#: time). Both behave the same. Fixed at import.
compiled: bool = not _owners.__file__.endswith(".py")
