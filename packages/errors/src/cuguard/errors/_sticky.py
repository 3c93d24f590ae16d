"""Fault attribution (contract E5): which launch caused a sticky fault.

A kernel fault surfaces later, at some unrelated call. With attribution on,
cuguard waits for every kernel and graph launch right after queuing it
(``cuStreamSynchronize`` on the launch's stream), so a fault surfaces at the
launch that caused it, and the :class:`~cuguard.errors.StickyCUDAError` names
the kernel, its grid and block and a summary of its arguments. Every launch
becomes synchronous: it is for finding a fault, not for production.

A launch queued on a stream that is being captured into a graph is not waited
for (it runs nothing yet, and waiting would invalidate the capture, G6): the
launch path asks ``cuStreamIsCapturing`` first. The captured work is
attributed when the graph runs: the launch of the executable graph is waited
for, and a fault inside it names that graph launch.

Turn it on for the whole process with the environment variable
``CUGUARD_ATTRIBUTE_FAULTS=1`` (read when cuguard is imported), or for a block
with :func:`attribute_faults`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from cuguard.errors._locks import deferring_lock

__all__ = ["attribute_faults", "attributing"]

#: Read by the launch paths on every launch: a list, so the hot path is one index.
ON = [os.environ.get("CUGUARD_ATTRIBUTE_FAULTS", "").strip().lower() not in ("", "0", "false", "no", "off")]
_lock = deferring_lock()


def attributing() -> bool:
    """Whether fault attribution is on now (see :func:`attribute_faults`)."""
    return ON[0]


@contextmanager
def attribute_faults(enabled: bool = True) -> Iterator[None]:
    """Turn fault attribution on (or off, with ``enabled=False``) inside the ``with`` block.

    Process-wide, like the installed driver: launches from every thread are
    attributed while the block runs. The previous setting comes back on exit,
    also when the block raises. Never raises itself. Each attributed launch
    waits for its kernel (an empty kernel's launch went from 6.4 to 11.5 µs
    on an H200), so keep it for finding a fault.
    """
    with _lock:
        previous = ON[0]
        ON[0] = bool(enabled)
    try:
        yield
    finally:
        with _lock:
            ON[0] = previous
