"""cuguard.testing: test CUDA code's failure paths, with or without a GPU.

- :func:`simulated_driver` installs a CPU-only CUDA driver (:class:`SimulatedDriver`)
  with the functions of ``cuda.bindings.driver``, real bytes in device memory
  and accounting of what exists, leaked, dangled or was misused. Where the real
  driver would crash the process, it raises :class:`SimulatedCrash` instead.
- :func:`inject`, :func:`restore_fault`, :func:`sticky`, :func:`deinitialized`
  make chosen driver calls fail, on the simulated or the real driver;
  :func:`record_calls` shows which driver calls a block made.
- ``CUGUARD_DRIVER=sim`` runs a whole program, unchanged, on a simulated driver
  (``CUGUARD_SIM_DEVICES`` devices). Kernels run there through stand-ins: Python
  functions registered with :func:`stand_in` / :func:`register_stand_in` that
  receive a :class:`KernelLaunch` and the kernel's arguments (pointers as
  :class:`DevicePointer`); a kernel with none raises :class:`MissingStandInError`.
- :func:`nothing_left_behind` asserts that a block created nothing, leaked
  nothing and left nothing dangling; :func:`settle` lets every due release
  happen, :func:`assert_no_misuse` checks the simulator's books and
  :func:`run_bounded` turns a hang into a failure.
- The pytest plugin (:mod:`cuguard.testing.plugin`) is registered automatically.

It depends on ``cuguard.errors`` alone. cuguard's own sweeps of its contract over
every layer are ``cuguard.sweeps``; what tools built on this package may use
beyond its user API is :mod:`cuguard.testing.lowlevel`.
"""

from __future__ import annotations

from cuguard.testing._faults import DriverCall as DriverCall
from cuguard.testing._faults import FaultPlan as FaultPlan
from cuguard.testing._faults import FaultProxy as FaultProxy
from cuguard.testing._faults import deinitialized as deinitialized
from cuguard.testing._faults import inject as inject
from cuguard.testing._faults import leak_check as leak_check
from cuguard.testing._faults import record_calls as record_calls
from cuguard.testing._faults import restore_fault as restore_fault
from cuguard.testing._faults import sticky as sticky
from cuguard.testing._settle import assert_no_misuse as assert_no_misuse
from cuguard.testing._settle import run_bounded as run_bounded
from cuguard.testing._settle import settle as settle
from cuguard.testing._sim import DevicePointer as DevicePointer
from cuguard.testing._sim import KernelLaunch as KernelLaunch
from cuguard.testing._sim import LiveObject as LiveObject
from cuguard.testing._sim import MissingStandInError as MissingStandInError
from cuguard.testing._sim import SimulatedCrash as SimulatedCrash
from cuguard.testing._sim import SimulatedDriver as SimulatedDriver
from cuguard.testing._sim import nothing_left_behind as nothing_left_behind
from cuguard.testing._sim import register_stand_in as register_stand_in
from cuguard.testing._sim import remove_stand_in as remove_stand_in
from cuguard.testing._sim import simulated_driver as simulated_driver
from cuguard.testing._sim import stand_in as stand_in

__all__ = [
    "DevicePointer",
    "DriverCall",
    "FaultPlan",
    "FaultProxy",
    "KernelLaunch",
    "LiveObject",
    "MissingStandInError",
    "SimulatedCrash",
    "SimulatedDriver",
    "assert_no_misuse",
    "deinitialized",
    "inject",
    "leak_check",
    "nothing_left_behind",
    "record_calls",
    "register_stand_in",
    "remove_stand_in",
    "restore_fault",
    "run_bounded",
    "settle",
    "simulated_driver",
    "stand_in",
    "sticky",
]

__version__ = "0.1.0"
