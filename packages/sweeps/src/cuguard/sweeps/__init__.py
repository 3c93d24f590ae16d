"""cuguard.sweeps: cuguard's own sweeps of its failure contract, over every layer.

They stand above every runtime layer and the test toolkit (``cuguard.testing``)
and import them plainly; nothing imports them back.

- :func:`run_sweep` runs the failure-point sweep (contract B5): every public
  operation of every layer x every driver call it makes x each failure,
  checking the contract after each case (also ``python -m cuguard.sweeps.failpoints``
  and ``scripts/sweep``); it returns a :class:`SweepResult` listing each
  :class:`Violation` and each case that was not deterministic
  (:class:`NonDeterministic`).
- :func:`run_gc_sweep` runs the garbage-collection point sweep: each operation
  with a garbage collection forced at each of its driver calls and lock
  acquisitions (``scripts/gcsweep``); it returns a :class:`GcSweepResult`.
- :func:`run_misuse_sweep` runs the misuse sweep (B6): a stateful random
  exploration of the whole public API with every kind of wrong argument,
  copies, closes, collections, driver switches, threads, callbacks and faults,
  checked after every step (``scripts/misuse``); it returns a
  :class:`MisuseResult`.

Operation names. The failure-point registry, the misuse catalog, their coverage
tables and every report name public operations in one scheme:

- ``layer.function``: a function a layer exports (``context.call_in``,
  ``resources.launch``);
- ``layer.Class()``: constructing a class (``resources.Device()``); the class
  as a whole, in a reason that holds for all its members, is ``layer.Class``;
- ``layer.Class.member``: a method or property (``resources.Stream.sync``),
  ``layer.Class.member.part`` one of what a member returns
  (``graphs.Node.pred.add``);
- ``[variant]`` after any of these: one way of calling it among several
  (``resources.Buffer.close[stream]``); ``[set]`` assigns a property
  (``graphs.Node.pred[set]``).

``layer`` is the layer whose package defines the class (``errors``, ``context``,
``resources``, ``graphs``), and its declared interface (``lowlevel``) counts as
the layer. The misuse sweep's steps that are no cuguard call are named by what
they do (``del``, ``gc.collect``, ``teardown``). The registry and the catalog are
declared as data per layer (``_failpoints/registry_<layer>.py``,
``_misuse/ops_<layer>.py``).
"""

from __future__ import annotations

from cuguard.sweeps._failpoints.gc_points import GcSweepResult as GcSweepResult
from cuguard.sweeps._failpoints.gc_points import run_gc_sweep as run_gc_sweep
from cuguard.sweeps._misuse import MisuseResult as MisuseResult
from cuguard.sweeps._misuse import run_misuse_sweep as run_misuse_sweep
from cuguard.sweeps.failpoints import NonDeterministic as NonDeterministic
from cuguard.sweeps.failpoints import SweepResult as SweepResult
from cuguard.sweeps.failpoints import Violation as Violation
from cuguard.sweeps.failpoints import run_sweep as run_sweep

__all__ = [
    "GcSweepResult",
    "MisuseResult",
    "NonDeterministic",
    "SweepResult",
    "Violation",
    "run_gc_sweep",
    "run_misuse_sweep",
    "run_sweep",
]

__version__ = "0.1.0"
