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

__all__ = [
    "STICKY_EXEMPT",
    "Changes",
    "Incident",
    "LiveObject",
    "SimulatedCrash",
    "SimulatedDriver",
    "SimulatedFault",
    "Snapshot",
    "nothing_left_behind",
    "simulated_driver",
]
