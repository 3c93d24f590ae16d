"""Kernel stand-ins: Python functions the simulated driver runs in place of a kernel.

The simulator holds device memory but cannot execute GPU code. A stand-in is a
Python function registered under a kernel's name (its ``extern "C"`` or mangled
entry name, or the C++ name expression a program was compiled with, such as
``"saxpy<float>"``); when that kernel executes on any simulated driver, the
stand-in runs once for the whole launch with the launch's shape (grid, block,
cluster) and the kernel's arguments, decoded as the kernel would read them from
its parameter list.

A name expression reaches the simulator with the image compiled from it: loading
a module from an ``ObjectCode`` whose ``symbol_mapping`` maps ``"saxpy<float>"``
to its lowered name ``"_Z5saxpyIfEvT_PKS0_PS0_m"`` teaches every simulated
driver that the two name one kernel (:func:`learn_lowered_names`), so a stand-in
registered under either is found.

A stand-in that raises fails its launch as a faulting kernel would (a sticky
``CUDA_ERROR_LAUNCH_FAILED`` at the next synchronization), and the error names
the kernel and chains the stand-in's exception as its ``__cause__``.

A kernel whose PTX body does nothing (``{ ret; }``) needs no stand-in. Launching
any other kernel that has none raises :class:`MissingStandInError`: the
simulator never pretends that a kernel ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cuguard.errors.lowlevel import deferring_lock

if TYPE_CHECKING:
    from cuguard.testing._sim.core import SimCore

__all__ = [
    "DevicePointer",
    "KernelLaunch",
    "MissingStandInError",
    "kernel_names",
    "learn_lowered_names",
    "register_stand_in",
    "remove_stand_in",
    "stand_in",
    "stand_in_for",
]

StandIn = Callable[..., object]
S = TypeVar("S", bound=StandIn)

_lock = deferring_lock()
_registry: dict[str, StandIn] = {}
# The names of one kernel: a lowered (entry) name and the name expressions that lower to it, both ways.
# Written under _lock with new frozensets, read without it (launches look names up).
_aliases: dict[str, frozenset[str]] = {}


class MissingStandInError(NotImplementedError):
    """A kernel was launched on the simulated driver and nothing can run in its place.

    Raised by the launch (``cuLaunchKernel``, or ``cuGraphLaunch`` for a graph
    with such a kernel node) before anything is queued. ``kernel`` is the
    kernel's entry name; ``names`` the name expressions known to lower to it
    (``("saxpy<float>",)`` for ``"_Z5saxpyIfEvT_PKS0_PS0_m"``), which the
    message suggests registering under.
    """

    def __init__(self, kernel: str, names: tuple[str, ...] = ()) -> None:
        suggested = names[0] if names else kernel
        known = f" (the lowered name of {', '.join(repr(n) for n in names)})" if names else ""
        super().__init__(
            f"kernel {kernel!r}{known} has no stand-in on the simulated CUDA driver, which cannot run GPU code: "
            f"register a Python function that does its work with @cuguard.testing.stand_in({suggested!r}) "
            "(see cuguard.testing.register_stand_in)"
        )
        self.kernel = kernel
        self.names = tuple(names)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kernel, self.names))


@dataclass(frozen=True, slots=True)
class KernelLaunch:
    """The launch a stand-in runs for: the first argument of every stand-in.

    ``kernel`` is the entry name, ``grid`` (in blocks) and ``block`` the three
    dimensions of each, ``shared_mem`` the dynamic shared memory in bytes, and
    ``driver`` the :class:`~cuguard.testing.SimulatedDriver` it runs on (its
    ``read`` and ``write`` reach any memory; ``fault()`` makes the launch fail
    as a faulting kernel would). ``cluster`` is the thread-block cluster's
    three dimensions in blocks, as the launch gave them
    (``LaunchConfig(cluster=...)``, the ``CLUSTER_DIMENSION`` attribute of
    ``cuLaunchKernelEx``), also when the launch was captured into a graph;
    ``(1, 1, 1)`` for a launch without one, where each block is a cluster of
    its own. ``cooperative`` says whether it is a cooperative launch. The last
    two have defaults, so a ``KernelLaunch`` made with the first five fields
    alone is still valid.
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    driver: Any
    cluster: tuple[int, int, int] = (1, 1, 1)
    cooperative: bool = False

    @property
    def threads(self) -> int:
        """How many threads the launch has in all (grid size times block size)."""
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]

    @property
    def clusters(self) -> tuple[int, int, int]:
        """How many clusters the grid has along each dimension (the grid divided by ``cluster``)."""
        return (
            self.grid[0] // self.cluster[0],
            self.grid[1] // self.cluster[1],
            self.grid[2] // self.cluster[2],
        )

    @property
    def cluster_blocks(self) -> int:
        """How many blocks one cluster has (1 without a cluster)."""
        c = self.cluster
        return c[0] * c[1] * c[2]


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

    ``kernel`` is the kernel's entry name (``extern "C"`` or mangled) or a C++
    name expression a program was compiled with (``"saxpy<float>"``), found
    once the image compiled from it is loaded (see :func:`learn_lowered_names`).
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
    """The stand-in that runs for ``kernel``, or ``None``. ``TypeError`` for a non-str.

    One registered under ``kernel`` itself comes first; else one registered
    under another name of the same kernel (a name expression of a lowered
    name, or the lowered name of a name expression, see
    :func:`learn_lowered_names`), the first of those names in sorted order.
    """
    _check_name(kernel)
    for name in _names_of(kernel):
        found = _registry.get(name)
        if found is not None:
            return found
    return None


def learn_lowered_names(mapping: Mapping[str, str]) -> None:
    """Record that each name expression of ``mapping`` lowers to its value, for every simulated driver.

    ``mapping`` is an ``ObjectCode``'s ``symbol_mapping`` (``{"saxpy<float>":
    "_Z5saxpyIfEvT_PKS0_PS0_m"}``); a simulated driver is given it when a
    module is loaded from such an ``ObjectCode``. From then on a stand-in
    registered under either name runs for the kernel, and
    ``SimulatedDriver.register_kernel`` finds its emulation under either.
    Process-wide, as the stand-ins are; learning a pair again changes nothing.
    ``TypeError`` (and nothing recorded) for a mapping that is not one of
    non-empty str to non-empty str.
    """
    if not isinstance(mapping, Mapping):
        raise TypeError(f"lowered names must be a mapping of str to str, not {type(mapping).__name__}")
    pairs = list(mapping.items())
    for expression, lowered in pairs:
        _check_name(expression)
        _check_name(lowered)
    with _lock:
        for expression, lowered in pairs:
            if expression != lowered:
                _aliases[lowered] = _aliases.get(lowered, frozenset()) | {expression}
                _aliases[expression] = _aliases.get(expression, frozenset()) | {lowered}


def kernel_names(kernel: str) -> tuple[str, ...]:
    """``kernel`` and the other names it is known by (name expressions or lowered names), sorted after it.

    ``TypeError`` for a name that is not a non-empty str.
    """
    _check_name(kernel)
    return tuple(_names_of(kernel))


def _names_of(kernel: str) -> Iterator[str]:
    """``kernel``, then its aliases in sorted order."""
    yield kernel
    yield from sorted(_aliases.get(kernel, ()))


def _check_name(kernel: object) -> None:
    if not isinstance(kernel, str) or not kernel:
        raise TypeError(f"a kernel name must be a non-empty str, not {kernel!r}")
