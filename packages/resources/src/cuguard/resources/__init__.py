"""cuguard.resources: the CUDA objects users hold.

:class:`Device` creates :class:`Stream`, :class:`Event`, :class:`Buffer`
(device memory), :class:`PinnedBuffer` (page-locked host memory) and
:class:`Module` objects. As in ``cuda.core``, :class:`Program` compiles CUDA
C++ (NVRTC) or PTX with :class:`ProgramOptions` into an :class:`ObjectCode`,
:class:`Linker` links object codes with nvJitLink (:class:`LinkerOptions`;
:func:`link` is the bytes-in, bytes-out form), and :class:`ProgramCache` keeps
compiled results. :func:`launch` runs a :class:`Kernel` with a
:class:`LaunchConfig` (clusters and cooperative launches included), its
arguments checked against the kernel's parameter list
(:class:`KernelParameter`); ``kernel.attributes`` (:class:`KernelAttributes`)
and ``kernel.occupancy`` (:class:`KernelOccupancy`) answer the driver's
questions about a kernel.

Every resource has ``handle``, ``close()`` (idempotent, raises on failure)
and ``with`` support, and is released when garbage-collected (reporting a
``CUDAWarning`` on failure instead of raising). A failed creating call
creates nothing and leaves the current context as it was.

:attr:`Device.properties` (:class:`DeviceProperties`) reads the device's
attributes under cuda.core 1.2's names; :mod:`~cuguard.resources.system`
answers system-wide questions (``system.get_num_devices()``, the driver
version); ``with dev:`` makes a device current for a block; :attr:`Device.memory_info`
(:class:`MemoryInfo`), :attr:`Device.uuid`, :attr:`Device.arch` and
:attr:`Device.default_stream` answer the usual questions. Memory of other
libraries is wrapped without being owned (:meth:`Buffer.from_handle`,
:meth:`Buffer.from_dlpack`, :meth:`Buffer.from_cuda_array_interface`), and
cuguard memory is exported through DLPack (versioned and legacy capsules) and
the CUDA Array Interface. :class:`StridedMemoryView` is a typed view (shape,
strides, dtype, device, read-only flag) of any DLPack or CUDA Array Interface
producer or of a cuguard buffer; it exports itself with its type and passes to
kernels as its address (:func:`args_viewable_as_strided_memory` hands a
function's arguments over as views).

Every parameter that takes a cuguard object is checked before the driver sees
it: another kind of object, ``None`` or a number raises ``TypeError`` naming the
parameter (contract E3). Wherever a stream is taken, any object with
``__cuda_stream__`` is accepted (:func:`as_stream`).

The package is built two ways from one source: pure Python, and compiled (the
wheel's build compiles the hottest driver calls when a C compiler is there).
:data:`compiled` says which one is running; both behave the same, the
compiled one costs less per call.
"""

from __future__ import annotations

from cuguard.resources import _buildcheck  # noqa: F401 - first: refuses a mixed build before it loads
from cuguard.resources import system as system
from cuguard.resources._accounting import MemoryRecord as MemoryRecord
from cuguard.resources._accounting import MemoryReport as MemoryReport
from cuguard.resources._accounting import memory_in_use as memory_in_use
from cuguard.resources._base import Resource as Resource
from cuguard.resources._device import Device as Device
from cuguard.resources._device import MemoryInfo as MemoryInfo
from cuguard.resources._fast import loaded as _loaded
from cuguard.resources._ipc import IPCAllocationHandle as IPCAllocationHandle
from cuguard.resources._ipc import IPCBufferDescriptor as IPCBufferDescriptor
from cuguard.resources._ipc import IPCEventDescriptor as IPCEventDescriptor
from cuguard.resources._launch import KernelAttributes as KernelAttributes
from cuguard.resources._launch import KernelOccupancy as KernelOccupancy
from cuguard.resources._launch import MaxPotentialBlockSizeOccupancyResult as MaxPotentialBlockSizeOccupancyResult
from cuguard.resources._managed import LegacyPinnedMemoryResource as LegacyPinnedMemoryResource
from cuguard.resources._managed import ManagedMemoryResource as ManagedMemoryResource
from cuguard.resources._memory import Buffer as Buffer
from cuguard.resources._memory import PinnedBuffer as PinnedBuffer
from cuguard.resources._memres import MemoryResource as MemoryResource
from cuguard.resources._module import Kernel as Kernel
from cuguard.resources._module import LaunchConfig as LaunchConfig
from cuguard.resources._module import Module as Module
from cuguard.resources._module import describe_launch as describe_launch
from cuguard.resources._module import launch as launch
from cuguard.resources._module import pack_args as pack_args
from cuguard.resources._module import wait_attributed as wait_attributed
from cuguard.resources._objectcode import ObjectCode as ObjectCode
from cuguard.resources._params import KernelParameter as KernelParameter
from cuguard.resources._pools import DeviceMemoryResource as DeviceMemoryResource
from cuguard.resources._pools import DeviceMemoryResourceOptions as DeviceMemoryResourceOptions
from cuguard.resources._pools import MemoryPoolAttributes as MemoryPoolAttributes
from cuguard.resources._pools import PinnedMemoryResource as PinnedMemoryResource
from cuguard.resources._pools import PinnedMemoryResourceOptions as PinnedMemoryResourceOptions
from cuguard.resources._program import Linker as Linker
from cuguard.resources._program import LinkerOptions as LinkerOptions
from cuguard.resources._program import Program as Program
from cuguard.resources._program import ProgramCache as ProgramCache
from cuguard.resources._program import ProgramOptions as ProgramOptions
from cuguard.resources._program import link as link
from cuguard.resources._properties import DeviceProperties as DeviceProperties
from cuguard.resources._race import RaceWarning as RaceWarning
from cuguard.resources._race import racecheck as racecheck
from cuguard.resources._race import racecheck_enabled as racecheck_enabled
from cuguard.resources._stream import Event as Event
from cuguard.resources._stream import Stream as Stream
from cuguard.resources._stream import as_stream as as_stream
from cuguard.resources._view import StridedMemoryView as StridedMemoryView
from cuguard.resources._view import args_viewable_as_strided_memory as args_viewable_as_strided_memory
from cuguard.resources._vmm import VirtualMemoryResource as VirtualMemoryResource
from cuguard.resources._vmm import VirtualMemoryResourceOptions as VirtualMemoryResourceOptions

__all__ = [
    "Buffer",
    "Device",
    "DeviceMemoryResource",
    "DeviceMemoryResourceOptions",
    "DeviceProperties",
    "Event",
    "IPCAllocationHandle",
    "IPCBufferDescriptor",
    "IPCEventDescriptor",
    "Kernel",
    "KernelAttributes",
    "KernelOccupancy",
    "KernelParameter",
    "LaunchConfig",
    "LegacyPinnedMemoryResource",
    "Linker",
    "LinkerOptions",
    "ManagedMemoryResource",
    "MaxPotentialBlockSizeOccupancyResult",
    "MemoryPoolAttributes",
    "MemoryRecord",
    "MemoryReport",
    "MemoryResource",
    "Module",
    "ObjectCode",
    "PinnedBuffer",
    "PinnedMemoryResource",
    "PinnedMemoryResourceOptions",
    "Program",
    "ProgramCache",
    "ProgramOptions",
    "RaceWarning",
    "Resource",
    "Stream",
    "StridedMemoryView",
    "VirtualMemoryResource",
    "VirtualMemoryResourceOptions",
    "args_viewable_as_strided_memory",
    "as_stream",
    "compiled",
    "describe_launch",
    "launch",
    "link",
    "memory_in_use",
    "pack_args",
    "racecheck",
    "racecheck_enabled",
    "system",
    "wait_attributed",
]

__version__ = "0.1.0"

#: Whether this process runs the compiled build: ``True`` when the compiled extension of this
#: installation loaded and found every driver entry point it needs; ``False`` for the pure-Python
#: build (installed without a C compiler, or with ``CUGUARD_PURE_PYTHON=1`` at build time), when
#: ``CUGUARD_PURE_PYTHON=1`` is set at import, or when the extension cannot be used
#: (:func:`cuguard.resources.lowlevel.compiled_status` says why). Fixed at import.
compiled: bool = _loaded
