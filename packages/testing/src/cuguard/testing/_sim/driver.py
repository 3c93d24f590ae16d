"""The simulated CUDA driver: :class:`SimulatedDriver` and :func:`simulated_driver`."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cuguard.errors import flush_deferred, use_driver
from cuguard.testing._sim.capture import SimCapture
from cuguard.testing._sim.conditional import SimConditional
from cuguard.testing._sim.graphs import SimGraphs
from cuguard.testing._sim.launches import SimLaunches
from cuguard.testing._sim.pools import SimPools
from cuguard.testing._sim.queries import SimQueries
from cuguard.testing._sim.updates import SimExecUpdates
from cuguard.testing._sim.vmm import SimVmm

__all__ = [
    "SIM_DEVICES_VARIABLE",
    "SIM_STAND_INS_VARIABLE",
    "SimulatedDriver",
    "driver_from_environment",
    "simulated_driver",
]

#: Environment variable with the device count of the driver ``CUGUARD_DRIVER=sim`` makes.
SIM_DEVICES_VARIABLE = "CUGUARD_SIM_DEVICES"
#: Environment variable naming modules (comma-separated) that register kernel stand-ins.
SIM_STAND_INS_VARIABLE = "CUGUARD_SIM_STAND_INS"


class SimulatedDriver(SimCapture, SimConditional, SimExecUpdates, SimVmm, SimGraphs, SimLaunches, SimQueries, SimPools):
    """A CPU-only CUDA driver with the functions of ``cuda.bindings.driver``.

    Every driver function has the name, parameters and return convention of
    the installed cuda-bindings, 12.9.x or 13.x (they differ in
    ``cuCtxCreate`` and the graph edge functions, which gained ``edgeData`` in
    13.x): it returns a tuple whose first element is a real
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
    until a synchronization retires it. Work queued on a capturing stream
    becomes graph nodes instead of running, with the capture rules of the real
    driver (``capture.py`` lists them). User-object destructors run on the
    releasing thread (as observed) or, with
    ``destructors_on_driver_thread=True``, on the driver thread. With
    ``initialized=True`` no ``cuInit`` is needed. ``missing_entry_points``
    names driver functions that this driver lacks although the bindings have
    them (a driver older than the bindings, such as a CUDA 13.0 driver under
    cuda-bindings 13.1 or newer, which has no ``cuFuncGetParamCount``): each
    raises ``RuntimeError`` as cuda-bindings does. Thread-safe.
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

    It has ``CUGUARD_SIM_DEVICES`` devices (1 when unset). The modules named in
    ``CUGUARD_SIM_STAND_INS`` (comma-separated, e.g. ``myproject.stand_ins``)
    are imported first, so that the kernel stand-ins they register exist
    without a change to the program. Raises ``ValueError`` when the device
    count is not an int of 0 or more and ``ImportError`` for a module that
    cannot be imported; cuguard reports either as a
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
    for name in os.environ.get(SIM_STAND_INS_VARIABLE, "").split(","):
        if name.strip():
            importlib.import_module(name.strip())
    return SimulatedDriver(devices)
