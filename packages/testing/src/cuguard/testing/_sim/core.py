"""The simulated driver's core: devices, contexts, streams, events, memory, modules.

:class:`SimCore` combines one class per area, each in its own module:

- :mod:`~cuguard.testing._sim.base`: the state, the ``api`` decorator, statuses, handles and
  addresses, the init and sticky gate, faults and live accounting (:class:`~.base.SimBase`);
- :mod:`~cuguard.testing._sim.devices`: initialization, version, error strings, devices;
- :mod:`~cuguard.testing._sim.streams`: streams, events and the stream-ordered work queue;
- :mod:`~cuguard.testing._sim.contexts`: primary and created contexts, the context stack;
- :mod:`~cuguard.testing._sim.memory`: allocations, copies, memsets, reads and writes;
- :mod:`~cuguard.testing._sim.modules`: modules, libraries, kernels and launches, reading
  images with :mod:`~cuguard.testing._sim.parsers`.

Graphs and user objects are in :mod:`cuguard.testing._sim.graphs`, which builds on
:class:`SimCore`.
"""

from __future__ import annotations

from cuguard.testing._sim.base import (
    DEVICE_BASE,
    SYNCHRONIZING_CALLS,
    Status,
    _address_lock,  # noqa: F401  # found here by name (the resources layer's lock tests)
    api,
    h,
)
from cuguard.testing._sim.contexts import SimContexts
from cuguard.testing._sim.devices import SimDevices
from cuguard.testing._sim.memory import SimMemory
from cuguard.testing._sim.modules import SimModules

__all__ = ["DEVICE_BASE", "SYNCHRONIZING_CALLS", "SimCore", "Status", "api", "h"]


class SimCore(SimModules, SimMemory, SimContexts, SimDevices):
    """Devices, contexts, streams, events, memory and modules of the simulated driver."""
