"""cuguard.resources: the CUDA objects users hold.

:class:`Device` creates :class:`Stream`, :class:`Event`, :class:`Buffer`
(device memory), :class:`PinnedBuffer` (page-locked host memory) and
:class:`Module` objects; :class:`Program` compiles CUDA C++ with NVRTC,
:func:`link` links images with nvJitLink, :func:`launch` runs a
:class:`Kernel` with a :class:`LaunchConfig`, its arguments checked against the
kernel's parameter list (:class:`KernelParameter`).

Every resource has ``handle``, ``close()`` (idempotent, raises on failure)
and ``with`` support, and is released when garbage-collected (reporting a
``CUDAWarning`` on failure instead of raising). A failed creating call
creates nothing and leaves the current context as it was.

Every parameter that takes a cuguard object is checked before the driver sees
it: another kind of object, ``None`` or a number raises ``TypeError`` naming the
parameter (contract E3). Wherever a stream is taken, any object with
``__cuda_stream__`` is accepted (:func:`as_stream`).
"""

from __future__ import annotations

from cuguard.resources._base import Resource as Resource
from cuguard.resources._device import Device as Device
from cuguard.resources._memory import Buffer as Buffer
from cuguard.resources._memory import PinnedBuffer as PinnedBuffer
from cuguard.resources._module import Kernel as Kernel
from cuguard.resources._module import LaunchConfig as LaunchConfig
from cuguard.resources._module import Module as Module
from cuguard.resources._module import Program as Program
from cuguard.resources._module import describe_launch as describe_launch
from cuguard.resources._module import launch as launch
from cuguard.resources._module import link as link
from cuguard.resources._module import pack_args as pack_args
from cuguard.resources._module import wait_attributed as wait_attributed
from cuguard.resources._params import KernelParameter as KernelParameter
from cuguard.resources._stream import Event as Event
from cuguard.resources._stream import Stream as Stream
from cuguard.resources._stream import as_stream as as_stream

__all__ = [
    "Buffer",
    "Device",
    "Event",
    "Kernel",
    "KernelParameter",
    "LaunchConfig",
    "Module",
    "PinnedBuffer",
    "Program",
    "Resource",
    "Stream",
    "as_stream",
    "describe_launch",
    "launch",
    "link",
    "pack_args",
    "wait_attributed",
]

__version__ = "0.1.0"
