"""The simulated CUDA driver of cuguard.testing (re-exported from :mod:`cuguard.testing`)."""

from __future__ import annotations

from cuguard.testing._sim.accounting import Changes as Changes
from cuguard.testing._sim.accounting import Incident as Incident
from cuguard.testing._sim.accounting import LiveObject as LiveObject
from cuguard.testing._sim.accounting import SimulatedCrash as SimulatedCrash
from cuguard.testing._sim.accounting import SimulatedFault as SimulatedFault
from cuguard.testing._sim.accounting import Snapshot as Snapshot
from cuguard.testing._sim.accounting import nothing_left_behind as nothing_left_behind
from cuguard.testing._sim.driver import SimulatedDriver as SimulatedDriver
from cuguard.testing._sim.driver import simulated_driver as simulated_driver
from cuguard.testing._sim.facts import STICKY_EXEMPT as STICKY_EXEMPT
from cuguard.testing._sim.standins import DevicePointer as DevicePointer
from cuguard.testing._sim.standins import KernelLaunch as KernelLaunch
from cuguard.testing._sim.standins import MissingStandInError as MissingStandInError
from cuguard.testing._sim.standins import register_stand_in as register_stand_in
from cuguard.testing._sim.standins import remove_stand_in as remove_stand_in
from cuguard.testing._sim.standins import stand_in as stand_in

__all__ = [
    "STICKY_EXEMPT",
    "Changes",
    "DevicePointer",
    "Incident",
    "KernelLaunch",
    "LiveObject",
    "MissingStandInError",
    "SimulatedCrash",
    "SimulatedDriver",
    "SimulatedFault",
    "Snapshot",
    "nothing_left_behind",
    "register_stand_in",
    "remove_stand_in",
    "simulated_driver",
    "stand_in",
]
