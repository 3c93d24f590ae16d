"""The misuse sweep (contract B6): a stateful random exploration of cuguard's whole public API.

Every example installs a fresh simulated driver (or, with ``driver="real"``,
the GPU), makes objects of every kind and then takes random steps: it calls any
public operation of any layer with every kind of value for every parameter
(other cuguard objects, foreign objects, ``None``, numbers, closed objects,
objects of another device, context or driver), copies and pickles objects,
constructs classes directly, closes and collects objects in any order, builds
reference cycles, installs other drivers and comes back, runs host callbacks and
graph callback nodes (including callbacks that drop the last reference to
objects, or call cuguard), calls from fresh threads, and injects faults
(``inject``, ``restore_fault``, ``sticky``, ``deinitialized``).

Its state includes stream captures in progress (see
:mod:`cuguard.sweeps._misuse.captures`): in each mode (``"global"``,
``"thread_local"``, ``"relaxed"``), on the objects' own streams and on wrapped
foreign streams, begun by the main thread or by the example's second thread,
from the set-up on; steps begin, end, complete and abandon them, and every
other step runs while they go on. Between steps the second thread acts on the
shared objects (calls, closes, collections, launches, captures of its own). A
step that does not finish in time is a hang (S2): reported, and the run stops
(:mod:`cuguard.sweeps._misuse.threads`). The catalog covers every public
callable of every layer: each has an operation or a written reason in
:data:`cuguard.sweeps._misuse.catalog.COVERAGE` (a test keeps it so).

After every step it checks (see :mod:`cuguard.sweeps._misuse.checks`):

- E3: only ``TypeError``, ``ValueError``, ``ResourceClosedError``,
  ``BufferError`` or ``CUDAError`` escape, with a message that names what was
  wrong; a parameter that takes a cuguard object and got another kind raises
  ``TypeError`` naming the parameter, the expected kind and what was given,
  before any driver call;
- S2: no ``SimulatedCrash`` (the real driver would have crashed), and the
  simulator recorded no misuse, double release or use after release; W5:
  nothing dangles; O5: no driver call from a host function, and what a
  callback dropped is released;
- G1: a call that raised left no driver object behind;
- G2: the thread's current context is unchanged (but by ``set_current()``);
- O1: copies, deep copies and pickles of owners raise ``TypeError`` naming the
  class, direct construction names the factory; O2: one ``Device`` per ordinal;
- O3: objects of an uninstalled driver refuse every use, ``close()`` included,
  with ``ResourceClosedError``; O4: so do objects of a context cuguard destroyed;
- O6: collecting a cycle releases the resources before their context and
  reports nothing; no ``CUDAWarning`` when nothing failed, none about
  ``CUDA_ERROR_DEINITIALIZED`` (W4);
- G6: what cuguard does on its own behalf (bookkeeping, set-up, collection,
  deferred releases) neither fails because of a capture nor invalidates one,
  and no release is queued into a capture; what CUDA refuses of the user's own
  requested work (an allocation or synchronization during a global-mode
  capture, work queued on a capturing stream) is not a violation; W5: memory
  that work captured into a graph uses is not freed while that graph exists.

Run it with :func:`run_misuse_sweep`, ``nox -s misuse``, ``scripts/misuse`` or
``python -m cuguard.sweeps._misuse``; ``--driver real`` runs every example in
its own subprocess on the GPU (a crash is counted, not fatal).
"""

from __future__ import annotations

from cuguard.sweeps._misuse.checks import MisuseViolation as MisuseViolation
from cuguard.sweeps._misuse.runner import MisuseResult as MisuseResult
from cuguard.sweeps._misuse.runner import main as main
from cuguard.sweeps._misuse.runner import run_misuse_sweep as run_misuse_sweep

__all__ = ["MisuseResult", "MisuseViolation", "main", "run_misuse_sweep"]
