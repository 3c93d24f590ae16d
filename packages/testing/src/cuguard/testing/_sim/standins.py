"""Kernel stand-ins: Python functions the simulated driver runs in place of a kernel.

The simulator holds device memory but cannot execute GPU code. A stand-in is a
Python function registered under a kernel's name (its ``extern "C"`` or mangled
entry name); when that kernel executes on any simulated driver, the stand-in
runs once for the whole launch with the launch's shape and the kernel's
arguments, decoded as the kernel would read them from its parameter list.

A stand-in that raises fails its launch as a faulting kernel would (a sticky
``CUDA_ERROR_LAUNCH_FAILED`` at the next synchronization), and the error names
the kernel and chains the stand-in's exception as its ``__cause__``.

A kernel whose PTX body does nothing (``{ ret; }``) needs no stand-in. Launching
any other kernel that has none raises :class:`MissingStandInError`: the
simulator never pretends that a kernel ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cuguard.errors import deferring_lock

if TYPE_CHECKING:
    from cuguard.testing._sim.core import SimCore

__all__ = [
    "DevicePointer",
    "KernelLaunch",
    "MissingStandInError",
    "register_stand_in",
    "remove_stand_in",
    "stand_in",
    "stand_in_for",
]

StandIn = Callable[..., object]
S = TypeVar("S", bound=StandIn)

_lock = deferring_lock()
_registry: dict[str, StandIn] = {}


class MissingStandInError(NotImplementedError):
    """A kernel was launched on the simulated driver and nothing can run in its place.

    Raised by the launch (``cuLaunchKernel``, or ``cuGraphLaunch`` for a graph
    with such a kernel node) before anything is queued. ``kernel`` is the
    kernel's entry name.
    """

    def __init__(self, kernel: str) -> None:
        super().__init__(
            f"kernel {kernel!r} has no stand-in on the simulated CUDA driver, which cannot run GPU code: "
            f"register a Python function that does its work with @cuguard.testing.stand_in({kernel!r}) "
            "(see cuguard.testing.register_stand_in)"
        )
        self.kernel = kernel

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kernel,))


@dataclass(frozen=True, slots=True)
class KernelLaunch:
    """The launch a stand-in runs for: the first argument of every stand-in.

    ``kernel`` is the entry name, ``grid`` and ``block`` the three dimensions of
    each, ``shared_mem`` the dynamic shared memory in bytes, and ``driver`` the
    :class:`~cuguard.testing.SimulatedDriver` it runs on (its ``read`` and
    ``write`` reach any memory; ``fault()`` makes the launch fail as a faulting
    kernel would).
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    driver: Any

    @property
    def threads(self) -> int:
        """How many threads the launch has in all (grid size times block size)."""
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]


class DevicePointer(int):
    """A pointer-sized kernel argument (an ``int``), with access to the memory it points to.

    Every 64-bit unsigned or untyped parameter (``.u64``/``.b64`` in PTX, which
    is how pointers are declared) reaches a stand-in as a ``DevicePointer``:
    arithmetic works as on an int, and :meth:`read`, :meth:`write` and
    :meth:`array` reach the memory at ``self + offset``. An access outside every
    allocation faults the launch with ``CUDA_ERROR_ILLEGAL_ADDRESS`` (sticky),
    as the kernel would on a GPU.
    """

    _driver: SimCore

    def __new__(cls, value: int, driver: SimCore) -> DevicePointer:
        self = super().__new__(cls, value)
        self._driver = driver
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, (int(self),))

    def read(self, nbytes: int, offset: int = 0) -> bytes:
        """The ``nbytes`` bytes at ``self + offset``."""
        return self._driver.read(int(self) + offset, nbytes)

    def write(self, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Store ``data`` at ``self + offset``."""
        self._driver.write(int(self) + offset, data)

    def view(self, nbytes: int, offset: int = 0) -> memoryview:
        """A writable byte view of ``nbytes`` at ``self + offset``: writes reach the memory at once."""
        return self._driver.view(int(self) + offset, nbytes)

    def array(self, dtype: Any, count: int, offset: int = 0) -> Any:
        """A NumPy array of ``count`` items of ``dtype`` over the memory at ``self + offset`` (needs NumPy).

        The array is a view: assigning to it writes the memory.
        """
        import numpy as np

        kind = np.dtype(dtype)
        return np.frombuffer(self.view(kind.itemsize * count, offset), dtype=kind, count=count)

    def __repr__(self) -> str:
        return f"DevicePointer({int(self):#x})"


def stand_in(kernel: str) -> Callable[[S], S]:
    """Decorator: run the function whenever ``kernel`` executes on a simulated driver.

    The function is called as ``fn(launch, *args)``: ``launch`` is a
    :class:`KernelLaunch`; ``args`` follow the kernel's parameter list, each as
    the kernel reads it (``.u64``/``.b64`` as :class:`DevicePointer`, other
    integers as ``int``, ``.f32``/``.f64`` as ``float``, byte arrays as
    ``bytes``). It faults the launch (a sticky error at the next
    synchronization) by calling ``launch.driver.fault()``, by returning a
    non-zero status, or by raising: an exception makes the launch fail with
    ``CUDA_ERROR_LAUNCH_FAILED``, and the :class:`~cuguard.errors.StickyCUDAError`
    that reports it names the kernel and the exception and chains the exception
    as its ``__cause__`` (``SimulatedDriver.sticky_cause``). Registering
    a name again replaces the earlier stand-in. Returns the function unchanged.
    ``TypeError`` for a name that is not a non-empty str.
    """
    _check_name(kernel)

    def register(fn: S) -> S:
        register_stand_in(kernel, fn)
        return fn

    return register


def register_stand_in(kernel: str, fn: StandIn) -> None:
    """Run ``fn(launch, *args)`` whenever ``kernel`` executes (see :func:`stand_in`).

    Process-wide: every simulated driver uses it, now and later. A stand-in
    given to one driver with ``SimulatedDriver.register_kernel`` takes
    precedence there. ``TypeError`` for a name that is not a non-empty str or
    an ``fn`` that is not callable.
    """
    _check_name(kernel)
    if not callable(fn):
        raise TypeError(f"a stand-in must be callable, not {type(fn).__name__}")
    with _lock:
        _registry[kernel] = fn


def remove_stand_in(kernel: str) -> bool:
    """Forget the stand-in of ``kernel``; returns whether there was one. ``TypeError`` for a non-str."""
    _check_name(kernel)
    with _lock:
        return _registry.pop(kernel, None) is not None


def stand_in_for(kernel: str) -> StandIn | None:
    """The stand-in registered for ``kernel``, or ``None``. ``TypeError`` for a non-str."""
    _check_name(kernel)
    return _registry.get(kernel)


def _check_name(kernel: object) -> None:
    if not isinstance(kernel, str) or not kernel:
        raise TypeError(f"a kernel name must be a non-empty str, not {kernel!r}")
