"""The exception and warning types of cuguard.

Exception tree::

    Exception
     +-- CUDAError                  a CUDA driver or runtime call returned a failure status
          +-- StickyCUDAError           a status after which the driver refuses all work (E5)
          +-- CUDADriverNotFoundError   no CUDA driver could be loaded at all
          +-- NVRTCError                 NVRTC (runtime compilation) failed; carries the log
          +-- NVJitLinkError             nvJitLink (JIT linking) failed; carries the log
          +-- NVVMError                  libNVVM failed; carries the log
    RuntimeError
     +-- ResourceClosedError        a closed resource was used
     +-- LibraryNotFoundError       a CUDA library (NVRTC, nvJitLink) is not installed
    RuntimeWarning
     +-- CUDAWarning                a failure where nothing could be raised

Every exception pickles with all of its attributes and its notes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from cuguard.errors import _table

__all__ = [
    "CUDAError",
    "CUDADriverNotFoundError",
    "CUDAWarning",
    "LibraryNotFoundError",
    "NVJitLinkError",
    "NVRTCError",
    "NVVMError",
    "ResourceClosedError",
    "StickyCUDAError",
]


def _status_code(code: object) -> int:
    # bool is an int subclass but never a status.
    if isinstance(code, bool) or not isinstance(code, int):
        raise TypeError(f"a CUDA status must be a CUresult, cudaError_t or int, not {type(code).__name__}")
    return int(code)


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class CUDAError(Exception):
    """A CUDA driver or runtime call returned a failure status.

    Raised by every cuguard operation whose driver call fails, after the
    operation has undone what it created and restored the caller's context
    (see the contract's G clauses). It carries data, not only text:

    - ``code``: the status as an ``int`` (a ``CUresult``, or a ``cudaError_t``
      when a runtime status was given, which is then named from the runtime table);
    - ``name``: the status name, e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``;
    - ``description``: the driver's own sentence for the status;
    - ``call``: the driver function that failed, e.g. ``"cuMemAllocAsync"``,
      or ``None`` when not known;
    - ``is_sticky``: whether the status is one after which the driver refuses
      all further work in the process (an illegal address, a launch failure...).
      cuguard never retries or recovers from these; the application decides.

    ``str(error)`` reads ``"<call> failed: <name>: <description>"``, followed by
    ``"; <detail>"`` when cuguard has more to say (for example which context is
    current after a failed restore). Names and descriptions come from a table
    shipped with cuguard, so they are the same on machines with no driver.
    Secondary failures (a failed rollback or restore) are attached as notes.
    """

    code: int
    name: str
    description: str
    call: str | None
    detail: str | None

    def __new__(cls, code: object = 0, *args: Any, **kwargs: Any) -> CUDAError:
        # A sticky driver status is always a StickyCUDAError (E5), wherever it is raised.
        if (
            cls is CUDAError
            and type(code).__name__ != "cudaError_t"
            and not isinstance(code, bool)
            and isinstance(code, int)
            and int(code) in _table.STICKY_CODES
        ):
            return super().__new__(StickyCUDAError)
        return super().__new__(cls)

    def __init__(self, code: object, call: str | None = None, detail: str | None = None) -> None:
        value = _status_code(code)
        if type(code).__name__ == "cudaError_t":
            name, description = _table.runtime_entry(value)
        else:
            name, description = self._lookup(value)
        self.code = value
        self.name = name
        self.description = description
        self.call = call
        self.detail = detail
        super().__init__(self._render())

    @staticmethod
    def _lookup(code: int) -> tuple[str, str]:
        return _table.driver_entry(code)

    def _render(self) -> str:
        head = f"{self.call} failed: " if self.call else ""
        text = f"{head}{self.name}: {self.description}"
        if self.detail:
            text = f"{text}; {self.detail}"
        return text

    @property
    def is_sticky(self) -> bool:
        """True for statuses after which the driver refuses all work in this process."""
        return self.code in _table.STICKY_CODES

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def __str__(self) -> str:
        return self._render()


class StickyCUDAError(CUDAError):
    """A sticky status: after it the driver refuses all work in this process (contract E5).

    ``CUDAError(code, ...)`` with a sticky driver code (``CUDA_ERROR_ILLEGAL_ADDRESS``,
    ``CUDA_ERROR_LAUNCH_FAILED``...) makes one of these, so ``except CUDAError``
    still catches it. cuguard keeps the first sticky fault each driver reported
    (:func:`~cuguard.errors.first_sticky_fault`):

    - ``launch``: the kernel or graph launch the fault is attributed to, when
      known (fault attribution: :func:`~cuguard.errors.attribute_faults`);
    - ``first_fault``: on every later sticky error of the same driver, what the
      first fault was (its call and, when known, its launch), so the first cause
      is never lost behind later symptoms; ``None`` on the first one itself.

    Nothing is retried: every later call still asks the driver, which answers
    with the same status.
    """

    launch: str | None
    first_fault: str | None

    def __init__(
        self, code: object, call: str | None = None, detail: str | None = None, *, launch: str | None = None
    ) -> None:
        self.launch = launch
        self.first_fault = None
        cause = _driver_cause(code)
        if cause is not None:
            detail = cause[0] if not detail else f"{detail}; {cause[0]}"
            self.__cause__ = cause[1]
        super().__init__(code, call, detail)
        from cuguard.errors._seam import record_sticky_fault

        self.first_fault = record_sticky_fault(self._own_text())
        self.args = (self._render(),)

    def _own_text(self) -> str:
        head = f"{self.call} failed with {self.name}" if self.call else self.name
        return f"{head}, raised by {self.launch}" if self.launch else head

    def _render(self) -> str:
        text = super()._render()
        if getattr(self, "launch", None):
            text = f"{text}; the fault was raised by {self.launch}"
        first = getattr(self, "first_fault", None)
        if first:
            text = f"{text}; the driver refuses all work since the first fault: {first}"
        return text


def _driver_cause(code: object) -> tuple[str, BaseException] | None:
    """What the driver behind the seam says made it sticky with ``code``, or ``None``. Never raises.

    A driver may answer through a ``sticky_cause(code)`` method returning ``(text, exception)``:
    the simulated driver does when a kernel's stand-in raised (the text names the kernel), so the
    error names the kernel and chains the stand-in's exception as ``__cause__``. The real driver
    has no such method.
    """
    try:
        from cuguard.errors._seam import driver_token

        ask = getattr(driver_token(), "sticky_cause", None)
        if ask is None:
            return None
        found = ask(_status_code(code))
        if found is None:
            return None
        text, exc = found
        return (str(text), exc) if isinstance(exc, BaseException) else None
    except Exception:  # noqa: BLE001 - building an error must not fail because a driver's answer did
        return None


class CUDADriverNotFoundError(CUDAError):
    """No CUDA driver could be loaded (no ``libcuda``, or cuda-bindings missing).

    Raised by the first driver call cuguard makes on such a machine. Its code is
    ``CUDA_ERROR_NO_DEVICE``; ``detail`` says what could not be loaded. Nothing
    was created and no state changed.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(_table.NO_DEVICE, None, detail)

    def _render(self) -> str:
        return f"no CUDA driver was found: {self.detail}"


class _LibraryError(CUDAError):
    """A failure of a CUDA compiler or linker library; carries the library's log."""

    _library_names: ClassVar[dict[int, tuple[str, str]]] = {}
    _library: ClassVar[str] = ""
    log: str

    def __init__(self, code: object, call: str | None = None, log: str = "", detail: str | None = None) -> None:
        self.log = log
        super().__init__(code, call, detail)

    @classmethod
    def _lookup(cls, code: int) -> tuple[str, str]:
        entry = cls._library_names.get(code)
        if entry is None:
            return (f"{cls._library}_ERROR_{code}", f"unknown {cls._library} status {code}")
        return entry

    def _render(self) -> str:
        text = super()._render()
        if self.log:
            text = f"{text}\n{self.log.rstrip()}"
        return text

    @property
    def is_sticky(self) -> bool:
        """Compiler and linker failures never poison the driver."""
        return False


class NVRTCError(_LibraryError):
    """NVRTC failed to compile a program.

    ``name`` is the ``nvrtcResult`` name (``"NVRTC_ERROR_COMPILATION"``) and
    ``log`` the compiler's log (empty when NVRTC produced none). Raised by
    program compilation; nothing compiled is kept.
    """

    _library = "NVRTC"
    _library_names = _table.NVRTC_NAMES


class NVJitLinkError(_LibraryError):
    """nvJitLink failed to link; ``name`` is the ``nvJitLinkResult`` name and ``log`` the linker's error log."""

    _library = "NVJITLINK"
    _library_names = _table.NVJITLINK_NAMES


class NVVMError(_LibraryError):
    """libNVVM failed; ``name`` is the ``nvvmResult`` name and ``log`` the program log."""

    _library = "NVVM"
    _library_names = _table.NVVM_NAMES


class ResourceClosedError(RuntimeError):
    """A resource was used after ``close()`` (or after it was released).

    The message names the resource. Nothing reached the driver: cuguard checks
    before any call, so a released handle is never passed to CUDA.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class LibraryNotFoundError(RuntimeError):
    """A CUDA library cuguard needs for an operation (NVRTC, nvJitLink) could not be loaded.

    Raised before any call of that library was made, so it carries no library
    status: ``library`` names the library (``"NVRTC"``), ``package`` the pip
    package that provides it (``"nvidia-cuda-nvrtc"``) and ``reason`` what the
    loader said. Nothing was created. Not a :class:`CUDAError`: no CUDA call
    failed.
    """

    library: str
    package: str
    reason: str

    def __init__(self, library: str, package: str, reason: str) -> None:
        self.library = library
        self.package = package
        self.reason = reason
        super().__init__(
            f"the {library} library could not be loaded ({reason}); install the CUDA toolkit or the "
            f"{package!r} package (pip install {package} for CUDA 13, {package}-cu12 for CUDA 12)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class CUDAWarning(RuntimeWarning):
    """A CUDA failure that happened where no exception could be raised.

    Issued by cuguard for failures in garbage-collected releases, deferred
    graph cleanup, CUDA callbacks and cleanup after another failure. The message
    names the driver call, the handle, the error name and its description. The
    resource concerned was leaked, never freed while CUDA may still use it.
    ``CUDA_ERROR_DEINITIALIZED`` (driver shutting down) is never reported.
    Escalate with ``warnings.filterwarnings("error", category=CUDAWarning)``: from
    destructors and callbacks the escalated warning reaches ``sys.unraisablehook``.
    """
