"""The simulated CUDA driver: :class:`SimulatedDriver` and :func:`simulated_driver`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cuguard.errors import flush_deferred, use_driver
from cuguard.testing._sim.graphs import SimGraphs

__all__ = ["SIM_DEVICES_VARIABLE", "SimulatedDriver", "driver_from_environment", "simulated_driver"]

#: Environment variable with the device count of the driver ``CUGUARD_DRIVER=sim`` makes.
SIM_DEVICES_VARIABLE = "CUGUARD_SIM_DEVICES"


class SimulatedDriver(SimGraphs):
    """A CPU-only CUDA driver with the functions of ``cuda.bindings.driver`` 13.x.

    Every driver function has the name, parameters and return convention of
    cuda-bindings: it returns a tuple whose first element is a real
    ``CUresult`` and whose other elements are real cuda-bindings handles
    (``CUcontext``, ``CUstream``, ``CUdeviceptr``, ...), or ``None`` each when
    the status is a failure. Handle arguments may be cuda-bindings objects or
    ints. A function the simulator does not implement raises
    ``AttributeError`` naming it.

    Failure semantics follow what a real H200 did (``shared/driver-facts``):
    calls that crashed the real process raise :class:`SimulatedCrash` and are
    recorded in :attr:`misuse`; releases the real driver answers with a status
    return it and are recorded in :attr:`double_release`; uses of released
    objects that return a status are recorded in :attr:`use_after_release`;
    memory freed while in-flight work or an executable graph uses it is
    recorded in :attr:`dangling`. :meth:`live_objects`, :meth:`snapshot` and
    :meth:`changes_since` report what exists.

    Model: ``devices`` H200-like devices of ``memory_per_device`` bytes each;
    device memory holds real bytes; work on streams runs at once unless it is
    queued behind a host function, which runs on the simulator's driver thread
    (work behind it follows on that thread, in order). Work stays in flight
    until a synchronization retires it. User-object destructors run on the
    releasing thread (as observed) or, with
    ``destructors_on_driver_thread=True``, on the driver thread. With
    ``initialized=True`` no ``cuInit`` is needed. Thread-safe.
    """

    def __repr__(self) -> str:
        return f"<SimulatedDriver devices={self._devices}>"


@contextmanager
def simulated_driver(devices: int = 2, **kwargs: Any) -> Iterator[SimulatedDriver]:
    """Install a fresh :class:`SimulatedDriver` as the active driver for the block.

    Keyword arguments go to the constructor. On exit the previous driver is
    restored and the simulator's driver thread is joined (queued host
    functions run first), also when the block raises; releases handed to
    cuguard's release thread are carried out first. Nothing is checked on
    exit; use :func:`nothing_left_behind` for that.
    """
    sim = SimulatedDriver(devices, **kwargs)
    try:
        with use_driver(sim):
            try:
                yield sim
            finally:
                # Releases handed to cuguard's release thread reach this driver, not the next one.
                flush_deferred()
    finally:
        sim.close()


def driver_from_environment() -> SimulatedDriver:
    """The simulated driver ``CUGUARD_DRIVER=sim`` installs for the whole process.

    It has ``CUGUARD_SIM_DEVICES`` devices (1 when unset). Raises ``ValueError``
    when that is not an int of 0 or more; cuguard reports it as a
    :class:`~cuguard.errors.CUDADriverNotFoundError` at the first driver call.
    Registered as the ``sim`` provider of the ``cuguard.drivers`` entry points.
    """
    text = os.environ.get(SIM_DEVICES_VARIABLE, "").strip() or "1"
    try:
        devices = int(text)
    except ValueError:
        devices = -1
    if devices < 0:
        raise ValueError(f"{SIM_DEVICES_VARIABLE}={text!r} is not a device count (an int of 0 or more)")
    return SimulatedDriver(devices)
