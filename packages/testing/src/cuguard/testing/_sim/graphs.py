"""Graphs, executable graphs and user objects of the simulated driver.

:class:`SimGraphs` combines the graph classes, each in its own module:

- :mod:`~cuguard.testing._sim.graphstate`: the records (nodes, graphs, node specs, executable
  graphs, user objects);
- :mod:`~cuguard.testing._sim.graphbase`: registries, lookups, user objects and the
  synchronizations that release their references;
- :mod:`~cuguard.testing._sim.graphtopology`: edges, listings and node removal;
- :mod:`~cuguard.testing._sim.graphbuild`: creation, destruction, cloning and node adders;
- :mod:`~cuguard.testing._sim.graphlaunch`: instantiation, update and launch.
"""

from __future__ import annotations

from cuguard.testing._sim.graphlaunch import SimGraphLaunch

__all__ = ["SimGraphs"]


class SimGraphs(SimGraphLaunch):
    """Adds graphs, executable graphs and user objects to :class:`~cuguard.testing._sim.core.SimCore`."""
