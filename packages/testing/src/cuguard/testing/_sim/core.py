"""The simulated driver's core: devices, contexts, streams, events, memory, modules.

Graphs and user objects are in :mod:`cuguard.testing._sim.graphs`, which
builds on :class:`SimCore`.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from cuda.bindings import driver as cb

from cuguard.errors import deferring_lock, error_description, error_name, forget_driver
from cuguard.testing._bindings import CTX_CREATE_PARAMS
from cuguard.testing._sim.accounting import (
    Changes,
    Incident,
    LiveObject,
    SimulatedCrash,
    SimulatedFault,
    Snapshot,
)
from cuguard.testing._sim.arguments import argument_check
from cuguard.testing._sim.facts import (
    DRIVER_VERSION,
    HOST_ALLOC_FLAGS_MASK,
    PRE_INIT_CALLS,
    STICKY_EXEMPT,
    context_flags_valid,
    event_flags_valid,
)
from cuguard.testing._sim.standins import (
    DevicePointer,
    KernelLaunch,
    MissingStandInError,
    kernel_names,
    learn_lowered_names,
    stand_in_for,
)
from cuguard.testing._sim.state import Alloc, Ctx, Event, Function, Module, Op, Stream
from cuguard.testing._sim.worker import Worker

__all__ = ["DEVICE_BASE", "SYNCHRONIZING_CALLS", "SimCore", "Status", "api"]

R = cb.CUresult
SUCCESS = R.CUDA_SUCCESS
OK: tuple[Any, ...] = (SUCCESS,)
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
INVALID_HANDLE = R.CUDA_ERROR_INVALID_HANDLE
INVALID_CONTEXT = R.CUDA_ERROR_INVALID_CONTEXT

#: Device addresses start above the 47-bit user address space of x86-64 and
#: AArch64 Linux, so they never alias a host address.
DEVICE_BASE = 1 << 48
_HANDLE_BASE = 1 << 47  # above user space, below device addresses: never a host address
_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
NOT_PERMITTED = R.CUDA_ERROR_NOT_PERMITTED
#: Calls at which a pending kernel fault surfaces (they wait for the GPU, or are synchronous).
SYNCHRONIZING_CALLS = frozenset(
    {
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuStreamQuery",
        "cuEventQuery",
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyDtoD",
        "cuMemcpy",
        "cuMemsetD8",
        "cuMemsetD16",
        "cuMemsetD32",
        "cuMemFree",
        "cuMemFreeHost",
        "cuModuleUnload",
        "cuCtxDestroy",
        "cuDevicePrimaryCtxRelease",
    }
)
#: Calls that read static tables and so answer even inside a host function.
_CALLBACK_SAFE = frozenset({"cuGetErrorName", "cuGetErrorString"})

# Handles and device addresses are drawn from process-wide counters, so that a
# handle one simulator issued is never issued by another in the same process:
# a handle that outlived its simulator is always foreign to the next one.
_handle_counter = itertools.count(_HANDLE_BASE + 0x200, 0x200)
_address_lock = deferring_lock()
_next_address = [DEVICE_BASE]


def _reserve_addresses(size: int) -> int:
    """A fresh device address range of ``size`` bytes, never handed out before in this process."""
    with _address_lock:
        base = _next_address[0]
        _next_address[0] = (base + size + 1024 + 511) & ~511
    return base


_PTR = ctypes.sizeof(ctypes.c_void_p)


class Status(Exception):
    """Internal: return this status from the current driver call."""

    def __init__(self, code: Any) -> None:
        super().__init__(code)
        self.code = code


F = TypeVar("F", bound=Callable[..., Any])


def api(outputs: int = 0, *, locked: bool = True, callbacks: bool = False) -> Callable[[F], F]:
    """Make a method a driver function: init/sticky gate, lock, status tuples.

    ``outputs`` is the number of values after the status (``None`` each on
    failure, as cuda-bindings returns them).
    """

    def decorate(fn: F) -> F:
        name = fn.__name__
        pad = (None,) * outputs
        check = argument_check(name, fn)  # what cuda-bindings refuses before the driver

        def wrapper(self: SimCore, *args: Any, **kwargs: Any) -> Any:
            if check is not None:
                check(args, kwargs)
            if self._worker.on_worker() and name not in _CALLBACK_SAFE:
                # CUDA forbids API calls from host functions; the driver says so.
                self._note(self.misuse, name, "driver call from a host function, on the driver's thread")
                return (NOT_PERMITTED, *pad)
            if self._gated:
                code = self._gate_code(name)
                if code is not None:
                    return (code, *pad)
            try:
                if locked:
                    with self._lock:
                        return fn(self, *args, **kwargs)
                return fn(self, *args, **kwargs)
            except Status as st:
                return (st.code, *pad)
            finally:
                if callbacks:
                    self._run_after()

        wrapper.__name__ = name
        wrapper.__qualname__ = fn.__qualname__
        wrapper.__doc__ = fn.__doc__
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return cast(F, wrapper)

    return decorate


def _fewer_references(before: LiveObject | None, now: LiveObject) -> bool:
    """The same object as before with fewer references (some were released): nothing was created."""
    return before is not None and before.kind == now.kind and before.call == now.call and before.refcount > now.refcount


def _held_primary(obj: LiveObject) -> bool:
    """A primary context retained once: a device's process-wide context, held by design (O2), not a leak."""
    return obj.kind == "context" and obj.call == "cuDevicePrimaryCtxRetain" and obj.refcount == 1


def h(value: Any) -> int:
    """A handle argument (cuda-bindings object, int or None) as an int."""
    return 0 if value is None else int(value)


# --- device attributes (an H200) -----------------------------------------------------------

_ATTRIBUTES: dict[str, int] = {
    "MAX_THREADS_PER_BLOCK": 1024,
    "MAX_BLOCK_DIM_X": 1024,
    "MAX_BLOCK_DIM_Y": 1024,
    "MAX_BLOCK_DIM_Z": 64,
    "MAX_GRID_DIM_X": 2147483647,
    "MAX_GRID_DIM_Y": 65535,
    "MAX_GRID_DIM_Z": 65535,
    "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
    "TOTAL_CONSTANT_MEMORY": 65536,
    "WARP_SIZE": 32,
    "MAX_PITCH": 2147483647,
    "MAX_REGISTERS_PER_BLOCK": 65536,
    "CLOCK_RATE": 1980000,
    "TEXTURE_ALIGNMENT": 512,
    "GPU_OVERLAP": 1,
    "MULTIPROCESSOR_COUNT": 132,
    "KERNEL_EXEC_TIMEOUT": 0,
    "INTEGRATED": 0,
    "CAN_MAP_HOST_MEMORY": 1,
    "COMPUTE_MODE": 0,
    "CONCURRENT_KERNELS": 1,
    "ECC_ENABLED": 1,
    "PCI_BUS_ID": 0x19,
    "PCI_DEVICE_ID": 0,
    "PCI_DOMAIN_ID": 0,
    "TCC_DRIVER": 0,
    "MEMORY_CLOCK_RATE": 2619000,
    "GLOBAL_MEMORY_BUS_WIDTH": 6016,  # as the H200 reports (differential device_queries)
    "L2_CACHE_SIZE": 62914560,  # 60 MiB, as the H200 reports
    "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
    "ASYNC_ENGINE_COUNT": 5,
    "UNIFIED_ADDRESSING": 1,
    "COMPUTE_CAPABILITY_MAJOR": 9,
    "COMPUTE_CAPABILITY_MINOR": 0,
    "STREAM_PRIORITIES_SUPPORTED": 1,
    "GLOBAL_L1_CACHE_SUPPORTED": 1,
    "LOCAL_L1_CACHE_SUPPORTED": 1,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
    "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
    "MANAGED_MEMORY": 1,
    "MULTI_GPU_BOARD": 0,
    "HOST_NATIVE_ATOMIC_SUPPORTED": 0,
    "PAGEABLE_MEMORY_ACCESS": 0,
    "CONCURRENT_MANAGED_ACCESS": 1,
    "COMPUTE_PREEMPTION_SUPPORTED": 1,
    "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 1,
    "COOPERATIVE_LAUNCH": 1,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 32,
    "VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED": 1,
    "MEMORY_POOLS_SUPPORTED": 1,
    "GPU_DIRECT_RDMA_SUPPORTED": 1,
    "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": 1,
    "MAX_PERSISTING_L2_CACHE_SIZE": 82575360,
    "MAX_ACCESS_POLICY_WINDOW_SIZE": 134213632,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024,
    "READ_ONLY_HOST_REGISTER_SUPPORTED": 1,
    "CLUSTER_LAUNCH": 1,
    "DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED": 1,
    "IPC_EVENT_SUPPORTED": 1,
    "MEM_SYNC_DOMAIN_COUNT": 4,
    "NUMA_CONFIG": 0,
    "NUMA_ID": -1,
    "HOST_NUMA_ID": 0,
    "MAXIMUM_TEXTURE1D_WIDTH": 131072,
    "MAXIMUM_TEXTURE2D_WIDTH": 131072,
    "MAXIMUM_TEXTURE2D_HEIGHT": 65536,
    "MAXIMUM_TEXTURE3D_WIDTH": 16384,
    "MAXIMUM_TEXTURE3D_HEIGHT": 16384,
    "MAXIMUM_TEXTURE3D_DEPTH": 16384,
    "SURFACE_ALIGNMENT": 512,
    "TEXTURE_PITCH_ALIGNMENT": 32,
    "CAN_TEX2D_GATHER": 1,
    "SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO": 2,
    "CAN_FLUSH_REMOTE_WRITES": 0,
    "HOST_REGISTER_SUPPORTED": 1,
    "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES": 0,
    "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST": 0,
    "GENERIC_COMPRESSION_SUPPORTED": 1,
    "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED": 1,
    "SPARSE_CUDA_ARRAY_SUPPORTED": 1,
    "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED": 1,
    "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS": 1,
    "MEMPOOL_SUPPORTED_HANDLE_TYPES": 1,
    "CAN_USE_64_BIT_STREAM_MEM_OPS": 1,
    "CAN_USE_STREAM_WAIT_VALUE_NOR": 1,
    "TENSOR_MAP_ACCESS_SUPPORTED": 1,
    "MPS_ENABLED": 0,
    "GPU_PCI_DEVICE_ID": 0x233510DE,  # device 0x2335 (H200 SXM), vendor 0x10de
}

#: PCI bus numbers of the eight GPUs of an HGX H200 board: device ``n`` is on the
#: ``n % 8``-th, in PCI domain ``n // 8`` (what PCI_BUS_ID, PCI_DOMAIN_ID and
#: cuDeviceGetPCIBusId report).
PCI_BUSES = (0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB)
_PCI_BUS_ID = int(cb.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)
_PCI_DOMAIN_ID = int(cb.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)


def _attribute_table() -> dict[int, int]:
    table: dict[int, int] = {}
    for name, value in _ATTRIBUTES.items():
        member = getattr(cb.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name, None)
        if member is not None:
            table[int(member)] = value
    return table


# --- images -------------------------------------------------------------------------------

_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)\s*(\(([^)]*)\))?", re.S)
_PARAM_TYPE = re.compile(rb"\.([usbf])(8|16|32|64)\b")
_ARRAY = re.compile(rb"\[(\d+)\]")
_CTYPES: dict[tuple[bytes, bytes], Any] = {
    (b"u", b"8"): ctypes.c_uint8,
    (b"s", b"8"): ctypes.c_int8,
    (b"b", b"8"): ctypes.c_uint8,
    (b"u", b"16"): ctypes.c_uint16,
    (b"s", b"16"): ctypes.c_int16,
    (b"b", b"16"): ctypes.c_uint16,
    (b"f", b"16"): ctypes.c_uint16,
    (b"u", b"32"): ctypes.c_uint32,
    (b"s", b"32"): ctypes.c_int32,
    (b"b", b"32"): ctypes.c_uint32,
    (b"f", b"32"): ctypes.c_float,
    (b"u", b"64"): ctypes.c_uint64,
    (b"s", b"64"): ctypes.c_int64,
    (b"b", b"64"): ctypes.c_uint64,
    (b"f", b"64"): ctypes.c_double,
}


_ALIGN = re.compile(rb"\.align\s+(\d+)")
_TRIVIAL_BODY = re.compile(rb"\{\s*ret\s*;\s*\}")
_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)


def _byte_array(size: int, align: int) -> Any:
    """A ctypes array type of ``size`` bytes that remembers its PTX alignment."""
    array = ctypes.c_uint8 * size
    return type(f"b8x{size}_align{align}", (array,), {"ptx_align": align})


def parse_ptx(text: bytes) -> dict[str, tuple[Any, ...] | None]:
    """Kernel names of a PTX text and, where readable, the ctypes of their parameters."""
    entries: dict[str, tuple[Any, ...] | None] = {}
    for match in _ENTRY.finditer(text):
        name = match.group(1).decode()
        params = match.group(3)
        types: list[Any] = []
        ok = True
        if params is not None and params.strip():
            for param in params.split(b","):
                tm = _PARAM_TYPE.search(param)
                if tm is None:
                    ok = False
                    break
                ctype = _CTYPES[(tm.group(1), tm.group(2))]
                am = _ARRAY.search(param)
                if am is not None:
                    al = _ALIGN.search(param)
                    size = int(am.group(1)) * ctypes.sizeof(ctype)
                    ctype = _byte_array(size, int(al.group(1)) if al else ctypes.sizeof(ctype))
                types.append(ctype)
        entries[name] = tuple(types) if ok else None
    return entries


def ptx_trivial_entries(text: bytes) -> frozenset[str]:
    """The entries of a PTX text whose body is only ``ret;``: they do nothing on a GPU either."""
    bare = _COMMENTS.sub(b"", text)
    out: set[str] = set()
    for match in _ENTRY.finditer(bare):
        brace = bare.find(b"{", match.end())
        if brace >= 0 and _TRIVIAL_BODY.match(bare, brace):
            out.add(match.group(1).decode())
    return frozenset(out)


def param_layout(types: tuple[Any, ...]) -> list[tuple[int, int]]:
    """``(offset, size)`` of each parameter in a kernel's parameter buffer (natural alignment)."""
    layout: list[tuple[int, int]] = []
    offset = 0
    for ctype in types:
        size = ctypes.sizeof(ctype)
        align = int(getattr(ctype, "ptx_align", 0) or ctypes.alignment(ctype))
        offset = (offset + align - 1) // align * align
        layout.append((offset, size))
        offset += size
    return layout


def parse_elf_functions(image: bytes) -> dict[str, tuple[Any, ...] | None]:
    """Names of the global and weak function symbols of an ELF64 image (a cubin).

    NVRTC gives a template's instantiations (``saxpy<float>``) weak binding and
    ``extern "C"`` kernels global binding; the driver finds both by name.

    Raises ``ValueError`` when the image is not a readable ELF64 file (the real
    driver answers ``CUDA_ERROR_INVALID_IMAGE`` for such bytes).
    """
    out: dict[str, tuple[Any, ...] | None] = {}
    try:
        if image[4] != 2:  # ELFCLASS64 only
            raise ValueError("not an ELF64 image")
        e_shoff = struct.unpack_from("<Q", image, 0x28)[0]
        e_shentsize, e_shnum = struct.unpack_from("<HH", image, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", image, e_shoff + i * e_shentsize) for i in range(e_shnum)]
        for sec in sections:
            if sec[1] != 2:  # SHT_SYMTAB
                continue
            strtab = sections[sec[6]]
            str_off = strtab[4]
            for i in range(sec[5] // 24):
                st_name, st_info, _other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", image, sec[4] + i * 24)
                if st_info & 0xF == 2 and st_info >> 4 in (1, 2):  # STT_FUNC; STB_GLOBAL or STB_WEAK
                    end = image.index(b"\0", str_off + st_name)
                    out[image[str_off + st_name : end].decode(errors="replace")] = None
        names = sections[struct.unpack_from("<H", image, 0x3E)[0]][4]
        for sec in sections:
            end = image.index(b"\0", names + sec[0])
            section = image[names + sec[0] : end].decode(errors="replace")
            if section.startswith(_KERNEL_INFO) and section[len(_KERNEL_INFO) :] in out:
                out[section[len(_KERNEL_INFO) :]] = _kernel_params(image[sec[4] : sec[4] + sec[5]])
    except (IndexError, struct.error, ValueError) as exc:
        raise ValueError(f"malformed ELF image: {exc}") from None
    return out


_KERNEL_INFO = ".nv.info."
_KPARAM_INFO = 0x17  # the attribute that describes one kernel parameter
_SIZED = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}


def _kernel_params(info: bytes) -> tuple[Any, ...] | None:
    """Parameter ctypes (by size: a cubin keeps sizes and offsets, not types) from a ``.nv.info.<kernel>`` section."""
    found: dict[int, tuple[int, int]] = {}
    at = 0
    while at + 2 <= len(info):
        fmt, attr = info[at], info[at + 1]
        if fmt == 4:  # a value with a 16-bit length
            (size,) = struct.unpack_from("<H", info, at + 2)
            payload = info[at + 4 : at + 4 + size]
            at += 4 + size
        else:
            payload = info[at + 2 : at + 4] if fmt == 3 else b""
            at += 4 if fmt == 3 else 2
        if attr == _KPARAM_INFO and len(payload) >= 12:
            _index, ordinal, offset, packed = struct.unpack_from("<IHHI", payload)
            found[ordinal] = (offset, (packed >> 18) & 0x3FFF)
    if sorted(found) != list(range(len(found))):
        return None
    types: list[Any] = []
    for ordinal in range(len(found)):
        offset, size = found[ordinal]
        align = next(a for a in (8, 4, 2, 1) if offset % a == 0)
        types.append(_SIZED.get(size) or _byte_array(size, align))
    return tuple(types) if param_layout(tuple(types)) == [found[i] for i in range(len(found))] else None


class SimCore:
    """Devices, contexts, streams, events, memory and modules of the simulated driver."""

    def __init__(
        self,
        devices: int = 2,
        memory_per_device: int = 1 << 30,
        *,
        destructors_on_driver_thread: bool = False,
        initialized: bool = False,
        missing_entry_points: Iterable[str] = (),
    ) -> None:
        if devices < 0:
            raise ValueError("devices must be >= 0")
        if isinstance(missing_entry_points, str):
            raise TypeError("missing_entry_points must be an iterable of driver function names, not a str")
        #: Driver functions this driver library lacks although the bindings have them (an older
        #: driver than the bindings): cuda-bindings raises ``RuntimeError`` for each.
        self._missing = frozenset(missing_entry_points)
        self._lock = deferring_lock(reentrant=True)
        self._tls = threading.local()
        self._initialized = initialized
        self._poison: Any = None
        self._pending_fault: Any = None  # a kernel fault not yet surfaced (see SYNCHRONIZING_CALLS)
        self._gated = not initialized or bool(self._missing)
        self._worker = Worker("cuguard-sim-driver")
        self._destructors_on_driver_thread = destructors_on_driver_thread
        self._memory_per_device = memory_per_device
        self._op_seq = 0
        self._attributes = _attribute_table()
        # registries (entries stay after release, to detect double release and use after release)
        self._ctxs: dict[int, Ctx] = {}
        self._streams: dict[int, Stream] = {}
        self._stream_keys: dict[int, Stream] = {}
        self._events: dict[int, Event] = {}
        self._modules: dict[int, Module] = {}
        self._functions: dict[int, Function] = {}
        self._dev_bases: list[int] = []
        self._dev_allocs: list[Alloc] = []
        self._host_bases: list[int] = []
        self._host_allocs: dict[int, Alloc] = {}
        self._used: list[int] = [0] * devices
        self._busy: set[Stream] = set()
        self._images: dict[bytes, dict[str, tuple[Any, ...] | None]] = {}
        self._kernels: dict[str, tuple[Callable[..., Any], tuple[Any, ...] | None]] = {}
        self._live: dict[int, LiveObject] = {}
        #: Capture sequences in progress, by id (see capture.py); empty unless a stream is capturing.
        self._open_captures: dict[int, Any] = {}
        #: Misuse: calls that crash the real driver (each also raised as
        #: :class:`SimulatedCrash`), and calls that corrupt the process for every
        #: other user of the driver although the driver answers with a status
        #: (work in a primary context whose last retain was released, a switch to
        #: an unretained primary context, a driver call from a host function).
        self.misuse: list[Incident] = []
        #: Uses of released objects that the real driver answers with a status.
        self.use_after_release: list[Incident] = []
        #: Second releases that the real driver answers with a status.
        self.double_release: list[Incident] = []
        #: Memory freed while in-flight work or an executable graph referenced it, or accessed after free.
        self.dangling: list[Incident] = []
        #: Exceptions raised by kernel emulations (each also made the driver sticky).
        self.kernel_errors: list[BaseException] = []
        #: The kernel and the exception behind the sticky fault, when a stand-in raised it (sticky_cause).
        self._stand_in_cause: tuple[str, BaseException] | None = None
        self._devices = devices
        self._primary: list[Ctx] = []
        for ordinal in range(devices):
            ctx = Ctx(self._handle(), ordinal, True, "cuDevicePrimaryCtxRetain", refcount=0, gen=0, destroyed=True)
            self._ctxs[ctx.handle] = ctx
            self._primary.append(ctx)

    # --- plumbing -------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("cu"):
            raise AttributeError(f"the simulated CUDA driver does not implement {name!r}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _gate_code(self, name: str) -> Any:
        if name in self._missing:
            # What cuda-bindings does when the driver library has no entry point of that name.
            raise RuntimeError(f'Function "{name}" not found')
        if not self._initialized and name not in PRE_INIT_CALLS:
            return R.CUDA_ERROR_NOT_INITIALIZED
        pending = self._pending_fault
        if pending is not None and name in SYNCHRONIZING_CALLS:
            # A kernel fault surfaces at the next synchronizing call, as on a real GPU;
            # from then on the driver refuses all work.
            with self._lock:
                if self._pending_fault is not None:
                    self._poison = self._pending_fault
                    self._pending_fault = None
        if self._poison is not None and name not in STICKY_EXEMPT:
            return self._poison
        return None

    def _regate(self) -> None:
        self._gated = (
            not self._initialized or self._poison is not None or self._pending_fault is not None or bool(self._missing)
        )

    def _handle(self) -> int:
        return next(_handle_counter)

    def _stack(self) -> list[Ctx | None]:
        try:
            return cast("list[Ctx | None]", self._tls.stack)
        except AttributeError:
            stack: list[Ctx | None] = []
            self._tls.stack = stack
            return stack

    def _current(self) -> Ctx | None:
        stack = self._stack()
        return stack[-1] if stack else None

    def _require_ctx(self) -> Ctx:
        ctx = self._current()
        if ctx is None:
            raise Status(INVALID_CONTEXT)
        if ctx.destroyed:
            # The thread was left with a context that is gone (for a primary
            # context: its last retain was released while it was current).
            # Every library in the process then fails here: misuse.
            what = "primary context whose last retain was released" if ctx.primary else "destroyed context"
            self._note(self.misuse, "(any call)", f"work in {what} {ctx.handle:#x}, still current", ctx.handle)
            raise Status(R.CUDA_ERROR_CONTEXT_IS_DESTROYED)
        return ctx

    def _crash(self, call: str, description: str, handle: int | None = None) -> SimulatedCrash:
        self.misuse.append(Incident(call, description, handle))
        return SimulatedCrash(call, description)

    def _note(self, book: list[Incident], call: str, description: str, handle: int | None = None) -> None:
        book.append(Incident(call, description, handle))

    def _device(self, dev: Any) -> int:
        ordinal = h(dev)
        if not 0 <= ordinal < self._devices:
            raise Status(R.CUDA_ERROR_INVALID_DEVICE)
        return ordinal

    def _run_after(self) -> None:
        pending = getattr(self._tls, "after", None)
        if pending:
            self._tls.after = []
            for fn in pending:
                fn()

    def _defer_callback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the current driver call returns (outside the lock), or on the driver thread."""
        if self._destructors_on_driver_thread:
            self._worker.submit(fn)
            return
        pending = getattr(self._tls, "after", None)
        if pending is None:
            pending = []
            self._tls.after = pending
        pending.append(fn)

    @staticmethod
    def _call_host_fn(fn: int, user_data: int | None) -> None:
        _HOSTFN(fn)(user_data)

    @staticmethod
    def _user_data(value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, int):
            return value
        try:
            return int(value)
        except TypeError:
            return ctypes.addressof(ctypes.c_char.from_buffer(value))

    # --- public simulator API ---------------------------------------------------------------

    @property
    def driver_thread_id(self) -> int | None:
        """Thread id of the simulator's driver thread (``None`` until it first ran something)."""
        return self._worker.ident

    @property
    def poisoned(self) -> Any:
        """The sticky status the driver is stuck with (a ``CUresult``), or ``None``."""
        return self._poison

    def poison(self, code: Any) -> None:
        """Make the driver sticky with ``code``, as after a kernel fault.

        From now on every driver call returns ``code`` except those in
        :data:`~cuguard.testing._sim.facts.STICKY_EXEMPT` (as observed on a
        real GPU). ``poison(None)`` clears it (a test convenience; the real
        driver never recovers).
        """
        with self._lock:
            self._poison = None if code is None else R(int(code))
            if code is None:
                self._pending_fault = None
            self._stand_in_cause = None  # the fault now held is not a stand-in's
            self._regate()

    def fault_later(self, code: Any = R.CUDA_ERROR_ILLEGAL_ADDRESS) -> None:
        """A kernel fault that surfaces at the next synchronizing call, as on a real GPU.

        Calls go on succeeding until one of :data:`SYNCHRONIZING_CALLS` (a stream,
        event or context synchronization, a synchronous copy or free...) is made:
        that call returns ``code``, and from then on the driver is sticky
        (:meth:`poison`). Kernels queued meanwhile do not run. This is what a
        kernel emulation's :meth:`fault` does.
        """
        with self._lock:
            if self._poison is None and self._pending_fault is None:
                self._pending_fault = R(int(code))
                self._stand_in_cause = None
            self._regate()

    def _stand_in_raised(self, kernel: str, exc: BaseException) -> None:
        """A kernel emulation of ``kernel`` raised ``exc``: a launch failure naming both (see :meth:`sticky_cause`)."""
        with self._lock:
            first = self._poison is None and self._pending_fault is None
            self.fault_later(R.CUDA_ERROR_LAUNCH_FAILED)
            if first:
                self._stand_in_cause = (kernel, exc)

    def sticky_cause(self, code: Any) -> tuple[str, BaseException] | None:
        """What made this driver sticky with ``code``, when a kernel's stand-in raised: ``(text, exception)``.

        The text names the kernel and the exception; ``None`` when the sticky
        status held (or pending) is not ``code`` or did not come from a
        stand-in that raised. The errors layer asks this when it builds a
        :class:`~cuguard.errors.StickyCUDAError`, which then names the kernel
        and chains the exception as its ``__cause__``. Never raises.
        """
        cause = self._stand_in_cause
        held = self._poison if self._poison is not None else self._pending_fault
        if cause is None or held is None or int(held) != int(code):
            return None
        kernel, exc = cause
        return (
            f"kernel {kernel!r} failed on the simulated driver: its stand-in raised {type(exc).__name__}: {exc}",
            exc,
        )

    def register_kernel(self, name: str, fn: Callable[..., Any], argtypes: Any = None) -> None:
        """Run ``fn(sim, *args)`` whenever a kernel named ``name`` executes.

        ``argtypes`` (a sequence of ctypes types, ``None`` meaning a pointer-sized
        int) decodes ``kernelParams`` given as an address of a ``void**`` array;
        PTX parameter types are used when it is omitted. The emulation reads
        and writes device memory with :meth:`read`/:meth:`write`; it faults
        the driver (sticky) by returning a non-zero status, calling
        :meth:`fault` or raising; an exception other than a fault also
        lands in :attr:`kernel_errors`. ``name`` may also be a C++ name
        expression (``"saxpy<float>"``): it is found once the kernel's lowered
        name is known (see :meth:`learn_lowered_names`).
        """
        types = None if argtypes is None else tuple(argtypes)
        with self._lock:
            self._kernels[name] = (fn, types)

    def learn_lowered_names(self, mapping: Any) -> None:
        """Learn that each C++ name expression of ``mapping`` lowers to its value (a kernel's entry name).

        cuguard's resources layer calls this when it loads a module from an
        ``ObjectCode`` with a ``symbol_mapping``; afterwards a stand-in (or a
        :meth:`register_kernel` emulation) registered under the name
        expression runs for the kernel of the lowered name, and the other way
        round. Process-wide, as stand-ins are (every simulated driver learns
        it). ``TypeError`` (and nothing learned) for a mapping that is not one
        of non-empty str to non-empty str.
        """
        learn_lowered_names(mapping)

    def _registered(self, name: str) -> tuple[Callable[..., Any], tuple[Any, ...] | None] | None:
        """This driver's own emulation of the kernel ``name``, under that name or another name of it."""
        for known in kernel_names(name):
            found = self._kernels.get(known)
            if found is not None:
                return found
        return None

    def register_image(self, image: bytes, entries: Any) -> None:
        """Declare the kernels of a binary image (ELF/cubin or fatbin) for ``cuModuleLoadData``.

        ``entries`` is a sequence of kernel names, or a mapping of name to
        argument ctypes.
        """
        table: dict[str, tuple[Any, ...] | None]
        if isinstance(entries, dict):
            table = {str(k): (None if v is None else tuple(v)) for k, v in entries.items()}
        else:
            table = dict.fromkeys((str(e) for e in entries), None)
        with self._lock:
            self._images[bytes(image)] = table

    def read(self, ptr: Any, n: int) -> bytes:
        """The ``n`` bytes of device (or simulator-owned host) memory at ``ptr``.

        Raises :class:`SimulatedFault` (``CUDA_ERROR_ILLEGAL_ADDRESS``) when the
        range is not inside one allocation. Reading freed memory is recorded
        in :attr:`dangling` and returns zeros.
        """
        with self._lock:
            alloc, off = self._access(int(ptr), n, "read")
            return bytes(n) if alloc is None else alloc.read(off, n)

    def write(self, ptr: Any, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to device (or simulator-owned host) memory at ``ptr``.

        Raises :class:`SimulatedFault` like :meth:`read`; a write to freed
        memory is recorded in :attr:`dangling` and dropped.
        """
        payload = memoryview(data).cast("B")
        with self._lock:
            alloc, off = self._access(int(ptr), len(payload), "write")
            if alloc is not None:
                alloc.write(off, payload)

    def fault(self, code: Any = R.CUDA_ERROR_ILLEGAL_ADDRESS) -> None:
        """Fault like a GPU: make the driver sticky with ``code``.

        Inside a kernel emulation this raises :class:`SimulatedFault` to end
        the kernel; the fault then surfaces at the next synchronizing call, as
        on a real GPU (:meth:`fault_later`). Elsewhere it makes the driver
        sticky at once.
        """
        if getattr(self._tls, "in_kernel", False):
            raise SimulatedFault(int(code), f"kernel faulted with {error_name(int(code))}")
        self.poison(code)

    def _access(self, addr: int, n: int, what: str) -> tuple[Alloc | None, int]:
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else self._host_find(addr)
        if alloc is None or addr + n > alloc.base + alloc.size:
            raise SimulatedFault(
                int(R.CUDA_ERROR_ILLEGAL_ADDRESS), f"{what} of {n} bytes at {addr:#x} is outside any allocation"
            )
        if alloc.freed or (alloc.ctx is not None and not alloc.ctx.alive(alloc.gen)):
            self._note(self.dangling, "kernel", f"{what} of freed memory {addr:#x} (allocated by {alloc.call})", addr)
            return None, 0
        return alloc, addr - alloc.base

    def drain(self) -> None:
        """Wait until the driver thread has run everything queued so far."""
        self._worker.drain()

    def close(self) -> None:
        """Run what is queued on the driver thread, then stop and join it.

        cuguard forgets what it kept for this driver (its devices, its primary
        contexts); objects made under it keep refusing use.
        """
        self._worker.close()
        forget_driver(self)

    def live_objects(self) -> list[LiveObject]:
        """The driver objects that exist now (see :class:`LiveObject`)."""
        with self._lock:
            return list(self._live.values())

    def snapshot(self) -> Snapshot:
        """An opaque record of what exists and what was recorded so far."""
        with self._lock:
            return Snapshot(
                dict(self._live),
                len(self.misuse),
                len(self.dangling),
                len(self.double_release),
                len(self.use_after_release),
            )

    def changes_since(self, snapshot: Snapshot) -> Changes:
        """What was created and not released, released, or recorded since ``snapshot``."""
        with self._lock:
            now = dict(self._live)
            created = [
                obj
                for key, obj in now.items()
                if snapshot.live.get(key) != obj
                and not (key not in snapshot.live and _held_primary(obj))
                and not _fewer_references(snapshot.live.get(key), obj)
            ]
            released = [obj for key, obj in snapshot.live.items() if key not in now]
            return Changes(
                created,
                released,
                self.misuse[snapshot.misuse :],
                self.dangling[snapshot.dangling :],
                self.double_release[snapshot.double_release :],
                self.use_after_release[snapshot.use_after_release :],
            )

    # --- live accounting ---------------------------------------------------------------------

    def _add_live(self, kind: str, handle: int, ctx: Ctx | None, call: str, refcount: int = 1) -> None:
        self._live[handle] = LiveObject(kind, handle, None if ctx is None else ctx.handle, call, refcount)
        if ctx is not None and kind != "context":
            ctx.owned.add(handle)

    def _drop_live(self, handle: int, ctx: Ctx | None = None) -> None:
        self._live.pop(handle, None)
        if ctx is not None:
            ctx.owned.discard(handle)

    # --- stream work -------------------------------------------------------------------------

    def _enqueue(
        self,
        st: Stream,
        call: str,
        run: Callable[[], None] | None,
        refs: frozenset[int] = frozenset(),
        host: Callable[[], None] | None = None,
    ) -> int:
        """Queue one unit of work on ``st``: run it now, or on the driver thread behind pending host work."""
        if st.capture is not None:
            captured = self._captured(st, call, run, refs, host)
            if captured is not None:
                return captured
        self._op_seq += 1
        seq = self._op_seq
        st.inflight.append(Op(seq, refs, call))
        self._busy.add(st)
        if host is not None:
            st.last_task = self._worker.submit(host)
        elif run is not None:
            if st.last_task > self._worker.done:
                st.last_task = self._worker.submit(self._locked(run))
            else:
                run()
        return seq

    def _legacy_stream_used(self, null: Stream, call: str) -> None:
        """Overridden by the capture model: ``call`` uses the legacy stream while a capture is in progress."""

    def _captured(
        self,
        st: Stream,
        call: str,
        run: Callable[[], None] | None,
        refs: frozenset[int],
        host: Callable[[], None] | None,
    ) -> int | None:
        """Overridden by the capture model: work queued while a capture is in progress.

        Returns the work's sequence number when the capture took it (it runs nothing), or
        ``None`` when it is queued as usual.
        """
        return None

    def _locked(self, run: Callable[[], None]) -> Callable[[], None]:
        def task() -> None:
            with self._lock:
                run()

        return task

    def _retire(self, st: Stream, upto: int | None = None, depth: int = 0) -> None:
        if upto is None:
            st.inflight.clear()
        else:
            st.inflight = [op for op in st.inflight if op.seq > upto]
        if not st.inflight:
            self._busy.discard(st)
        if depth < 4:
            for key, seq in list(st.ordered_after.items()):
                if upto is None or seq <= upto:
                    other = self._stream_keys.get(key)
                    if other is not None:
                        self._retire(other, seq, depth + 1)

    def _check_free(self, alloc: Alloc, call: str, stream: Stream | None) -> None:
        """Record ``alloc`` as dangling if work not ordered before this free still uses it."""
        for other in list(self._busy):
            if other is stream:
                continue
            limit = 0 if stream is None else stream.ordered_after.get(other.key, 0)
            for op in other.inflight:
                if op.seq > limit and alloc.base in op.refs:
                    where = "stream 0" if other.handle == 0 else f"stream {other.handle:#x}"
                    self._note(
                        self.dangling,
                        call,
                        f"memory {alloc.base:#x} freed while {op.call} on {where} still in flight uses it",
                        alloc.base,
                    )
                    break
        self._check_free_graphs(alloc, call)

    def _check_free_graphs(self, alloc: Alloc, call: str) -> None:
        """Overridden by the graph layer: executable graphs that reference ``alloc``."""

    # --- init, version, errors -----------------------------------------------------------------

    @api(0)
    def cuInit(self, Flags: int) -> tuple[Any, ...]:
        """Initialize the driver (``Flags`` must be 0, else CUDA_ERROR_INVALID_VALUE)."""
        if int(Flags) != 0:
            raise Status(INVALID_VALUE)
        self._initialized = True
        self._regate()
        return OK

    @api(1, locked=False)
    def cuDriverGetVersion(self) -> tuple[Any, ...]:
        return (SUCCESS, DRIVER_VERSION)

    @api(1, locked=False)
    def cuGetErrorName(self, error: Any) -> tuple[Any, ...]:
        try:
            code = R(int(error))
        except ValueError:
            raise Status(INVALID_VALUE) from None
        return (SUCCESS, error_name(int(code)).encode())

    @api(1, locked=False)
    def cuGetErrorString(self, error: Any) -> tuple[Any, ...]:
        try:
            code = R(int(error))
        except ValueError:
            raise Status(INVALID_VALUE) from None
        return (SUCCESS, error_description(int(code)).encode())

    # --- devices ---------------------------------------------------------------------------------

    @api(1, locked=False)
    def cuDeviceGetCount(self) -> tuple[Any, ...]:
        return (SUCCESS, self._devices)

    @api(1, locked=False)
    def cuDeviceGet(self, ordinal: int) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUdevice(self._device(ordinal)))

    @api(1, locked=False)
    def cuDeviceGetName(self, length: int, dev: Any) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        name = b"NVIDIA H200 (simulated %d)" % ordinal
        length = int(length)
        if length == 0:
            # The H200's driver writes the name into cuda-bindings' empty buffer: SIGSEGV.
            raise self._crash("cuDeviceGetName", "a name buffer of 0 bytes (the real driver writes past it)")
        if length < 0:
            raise Status(INVALID_VALUE)
        raw = (name[: length - 1] + b"\0").ljust(length, b" ")
        return (SUCCESS, raw)

    @api(1, locked=False)
    def cuDeviceGetAttribute(self, attrib: Any, dev: Any) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        key = int(attrib)
        if key in (_PCI_BUS_ID, _PCI_DOMAIN_ID):
            return (SUCCESS, PCI_BUSES[ordinal % 8] if key == _PCI_BUS_ID else ordinal // 8)
        value = self._attributes.get(key)
        if value is None:
            try:
                member = cb.CUdevice_attribute(key)
            except ValueError:
                raise Status(INVALID_VALUE) from None
            if member.name == "CU_DEVICE_ATTRIBUTE_MAX":
                raise Status(INVALID_VALUE)
            value = 0
        return (SUCCESS, value)

    @api(1, locked=False)
    def cuDeviceTotalMem(self, dev: Any) -> tuple[Any, ...]:
        self._device(dev)
        return (SUCCESS, self._memory_per_device)

    @api(1, locked=False)
    def cuDeviceGetUuid(self, dev: Any) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        uuid = cb.CUuuid()
        ctypes.memmove(uuid.getPtr(), b"cuguard-sim-" + ordinal.to_bytes(4, "big"), 16)  # one per device
        return (SUCCESS, uuid)

    # --- contexts ----------------------------------------------------------------------------------

    def _activate(self, ctx: Ctx) -> None:
        ctx.destroyed = False
        ctx.gen += 1
        ctx.null = Stream(self._handle(), 0, ctx, ctx.gen)
        self._stream_keys[ctx.null.key] = ctx.null

    def _teardown(self, ctx: Ctx) -> None:
        """The context goes away with everything it owned (not leaks: the driver released them)."""
        for handle in list(ctx.owned):
            self._live.pop(handle, None)
            alloc = self._dev_find(handle) if handle >= DEVICE_BASE else self._host_allocs.get(handle)
            if alloc is not None and alloc.ctx is ctx and not alloc.freed:
                if not alloc.host:
                    self._used[ctx.device] -= alloc.size
                alloc.data = None
        ctx.owned.clear()
        for st in list(self._busy):
            if st.ctx is ctx:
                self._retire(st)
        ctx.destroyed = True
        ctx.null = None

    def _ctx_arg(self, ctx: Any, call: str) -> Ctx:
        handle = h(ctx)
        found = self._ctxs.get(handle)
        if found is None:
            raise Status(INVALID_CONTEXT)
        return found

    @api(1)
    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, ...]:
        ctx = self._primary[self._device(dev)]
        if ctx.refcount == 0:
            self._activate(ctx)
        ctx.reset = False
        ctx.refcount += 1
        self._add_live("context", ctx.handle, None, "cuDevicePrimaryCtxRetain", ctx.refcount)
        return (SUCCESS, cb.CUcontext(ctx.handle))

    @api(0, locked=False)
    def cuDevicePrimaryCtxRelease(self, dev: Any) -> tuple[Any, ...]:
        with self._lock:
            ctx = self._primary[self._device(dev)]
            if ctx.refcount == 0:
                self._note(
                    self.double_release, "cuDevicePrimaryCtxRelease", "primary context is not retained", ctx.handle
                )
                raise Status(INVALID_CONTEXT)
            last = ctx.refcount == 1
        if last:
            self._worker.drain()
        with self._lock:
            ctx.refcount -= 1
            if ctx.refcount == 0:
                self._drop_live(ctx.handle)
                self._teardown(ctx)
                ctx.flags = 0  # the H200 forgets the flags with the context (differential scenario)
            else:
                self._add_live("context", ctx.handle, None, "cuDevicePrimaryCtxRetain", ctx.refcount)
        return OK

    def _create_context(self, dev: Any, flags: int = 0) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        if not context_flags_valid(int(flags)):
            raise Status(INVALID_VALUE)
        ctx = Ctx(self._handle(), ordinal, False, "cuCtxCreate", gen=0, destroyed=True, flags=int(flags))
        self._activate(ctx)
        self._ctxs[ctx.handle] = ctx
        self._add_live("context", ctx.handle, None, "cuCtxCreate")
        self._stack().append(ctx)
        return (SUCCESS, cb.CUcontext(ctx.handle))

    # The signature of the installed cuda-bindings (see cuguard.testing._bindings).
    if CTX_CREATE_PARAMS:

        @api(1)
        def cuCtxCreate(self, ctxCreateParams: Any, flags: int, dev: Any) -> tuple[Any, ...]:
            return self._create_context(dev, flags)

    else:

        @api(1)
        def cuCtxCreate(self, flags: int, dev: Any) -> tuple[Any, ...]:  # type: ignore[misc]  # 12.x
            return self._create_context(dev, flags)

    @api(0, locked=False)
    def cuCtxDestroy(self, ctx: Any) -> tuple[Any, ...]:
        with self._lock:
            target = self._ctx_arg(ctx, "cuCtxDestroy")
            if target.primary:
                raise Status(INVALID_CONTEXT)
            if target.destroyed:
                self._note(self.double_release, "cuCtxDestroy", "context destroyed twice", target.handle)
                raise Status(R.CUDA_ERROR_CONTEXT_IS_DESTROYED)
        self._worker.drain()
        with self._lock:
            if target.destroyed:
                raise Status(R.CUDA_ERROR_CONTEXT_IS_DESTROYED)
            self._drop_live(target.handle)
            self._teardown(target)
            # The driver pops a destroyed current context off the thread's
            # stack (as cuCtxPopCurrent would): the context below becomes
            # current, or none (checked on an H200 in the differential run).
            stack = self._stack()
            if stack and stack[-1] is target:
                stack.pop()
        return OK

    @api(1)
    def cuCtxGetCurrent(self) -> tuple[Any, ...]:
        ctx = self._current()
        return (SUCCESS, cb.CUcontext(0 if ctx is None else ctx.handle))

    def _switch_target(self, ctx: Any, call: str) -> Ctx:
        target = self._ctx_arg(ctx, call)
        if target.destroyed:
            if not target.primary:
                raise self._crash(call, f"switch to destroyed context {target.handle:#x}", target.handle)
            self._note(
                self.misuse,
                call,
                f"switch to primary context {target.handle:#x} that is not retained",
                target.handle,
            )
        return target

    @api(0)
    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        stack = self._stack()
        if h(ctx) == 0:
            if stack:
                stack.pop()
            return OK
        target = self._switch_target(ctx, "cuCtxSetCurrent")
        if stack:
            stack[-1] = target
        else:
            stack.append(target)
        return OK

    def cuguardRestoreContext(self, ctx: Any) -> tuple[Any, ...]:
        """The context layer's restore of a caller's context: ``cuCtxSetCurrent``."""
        result: tuple[Any, ...] = self.cuCtxSetCurrent(ctx)
        return result

    @api(0)
    def cuCtxPushCurrent(self, ctx: Any) -> tuple[Any, ...]:
        if h(ctx) == 0:
            raise Status(INVALID_VALUE)
        self._stack().append(self._switch_target(ctx, "cuCtxPushCurrent"))
        return OK

    @api(1)
    def cuCtxPopCurrent(self) -> tuple[Any, ...]:
        stack = self._stack()
        if not stack:
            raise Status(INVALID_CONTEXT)
        ctx = stack.pop()
        return (SUCCESS, cb.CUcontext(0 if ctx is None else ctx.handle))

    @api(1)
    def cuCtxGetDevice(self) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUdevice(self._require_ctx().device))

    @api(1)
    def cuCtxGetApiVersion(self, ctx: Any) -> tuple[Any, ...]:
        target = self._current() if h(ctx) == 0 else self._ctx_arg(ctx, "cuCtxGetApiVersion")
        if target is None:
            raise Status(INVALID_CONTEXT)
        if target.destroyed:
            raise Status(R.CUDA_ERROR_CONTEXT_IS_DESTROYED)
        return (SUCCESS, 3020)

    @api(2)
    def cuCtxGetStreamPriorityRange(self) -> tuple[Any, ...]:
        self._require_ctx()  # CUDA_ERROR_INVALID_CONTEXT with none current, as on the H200
        return (SUCCESS, 0, -5)

    @api(0, locked=False)
    def cuCtxSynchronize(self) -> tuple[Any, ...]:
        with self._lock:
            ctx = self._require_ctx()
        self._worker.drain()
        with self._lock:
            for st in list(self._busy):
                if st.ctx is ctx:
                    self._retire(st)
            if self._poison is not None:
                return (self._poison,)
        return OK

    # --- streams ---------------------------------------------------------------------------------

    def _stream(self, value: Any, call: str) -> Stream:
        handle = h(value)
        if handle in (0, 1, 2):
            ctx = self._require_ctx()
            assert ctx.null is not None
            if self._open_captures and handle != 2:
                self._legacy_stream_used(ctx.null, call)
            return ctx.null
        st = self._streams.get(handle)
        if st is None:
            raise self._crash(call, f"stream {handle:#x} was never created by this driver", handle)
        if st.destroyed:
            raise self._crash(call, f"stream {handle:#x} used after cuStreamDestroy", handle)
        if not st.ctx.alive(st.gen):
            raise self._crash(call, f"stream {handle:#x} belongs to a destroyed context", handle)
        return st

    def _new_stream(self, flags: int, priority: int, call: str) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        handle = self._handle()
        st = Stream(handle, handle, ctx, ctx.gen, int(flags), max(-5, min(0, int(priority))))
        self._streams[handle] = st
        self._stream_keys[handle] = st
        self._add_live("stream", handle, ctx, call)
        return (SUCCESS, cb.CUstream(handle))

    @api(1)
    def cuStreamCreate(self, Flags: int) -> tuple[Any, ...]:
        if int(Flags) not in (0, 1):
            raise Status(INVALID_VALUE)
        return self._new_stream(Flags, 0, "cuStreamCreate")

    @api(1)
    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> tuple[Any, ...]:
        if int(flags) not in (0, 1):
            raise Status(INVALID_VALUE)
        return self._new_stream(flags, priority, "cuStreamCreateWithPriority")

    @api(0)
    def cuStreamDestroy(self, hStream: Any) -> tuple[Any, ...]:
        handle = h(hStream)
        if handle in (0, 1, 2):
            raise Status(INVALID_HANDLE)
        st = self._stream(hStream, "cuStreamDestroy")
        st.destroyed = True
        self._drop_live(handle, st.ctx)
        return OK

    @api(0, locked=False)
    def cuStreamSynchronize(self, hStream: Any) -> tuple[Any, ...]:
        with self._lock:
            st = self._stream(hStream, "cuStreamSynchronize")
            target = st.last_task
        self._worker.wait(target)
        with self._lock:
            self._retire(st)
            if self._poison is not None:
                return (self._poison,)
        return OK

    @api(0)
    def cuStreamQuery(self, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuStreamQuery")
        if st.last_task > self._worker.done:
            raise Status(R.CUDA_ERROR_NOT_READY)
        self._retire(st)
        return OK

    @api(0)
    def cuStreamWaitEvent(self, hStream: Any, hEvent: Any, Flags: int) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuStreamWaitEvent")
        ev = self._event(hEvent, "cuStreamWaitEvent")
        if ev.stream is not None and ev.stream is not st:
            st.last_task = max(st.last_task, ev.task)
            for key, seq in ev.after.items():
                if st.ordered_after.get(key, 0) < seq:
                    st.ordered_after[key] = seq
        return OK

    @api(1)
    def cuStreamGetFlags(self, hStream: Any) -> tuple[Any, ...]:
        return (SUCCESS, self._stream(hStream, "cuStreamGetFlags").flags)

    @api(1)
    def cuStreamGetPriority(self, hStream: Any) -> tuple[Any, ...]:
        return (SUCCESS, self._stream(hStream, "cuStreamGetPriority").priority)

    @api(1)
    def cuStreamGetCtx(self, hStream: Any) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUcontext(self._stream(hStream, "cuStreamGetCtx").ctx.handle))

    @api(0)
    def cuLaunchHostFunc(self, hStream: Any, fn: Any, userData: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuLaunchHostFunc")
        address = h(fn)
        if address == 0:
            raise Status(INVALID_VALUE)
        data = self._user_data(userData)
        self._enqueue(st, "cuLaunchHostFunc", None, host=lambda: self._call_host_fn(address, data))
        return OK

    # --- events ----------------------------------------------------------------------------------

    def _event(self, value: Any, call: str) -> Event:
        handle = h(value)
        ev = self._events.get(handle)
        if ev is None:
            raise self._crash(call, f"event {handle:#x} was never created by this driver", handle)
        if ev.destroyed:
            raise self._crash(call, f"event {handle:#x} used after cuEventDestroy", handle)
        if not ev.ctx.alive(ev.gen):
            raise self._crash(call, f"event {handle:#x} belongs to a destroyed context", handle)
        return ev

    @api(1)
    def cuEventCreate(self, Flags: int) -> tuple[Any, ...]:
        flags = int(Flags)
        if not event_flags_valid(flags):
            raise Status(INVALID_VALUE)
        ctx = self._require_ctx()
        handle = self._handle()
        self._events[handle] = Event(handle, ctx, ctx.gen, flags)
        self._add_live("event", handle, ctx, "cuEventCreate")
        return (SUCCESS, cb.CUevent(handle))

    @api(0)
    def cuEventRecord(self, hEvent: Any, hStream: Any) -> tuple[Any, ...]:
        ev = self._event(hEvent, "cuEventRecord")
        st = self._stream(hStream, "cuEventRecord")
        if st.ctx is not ev.ctx:
            raise Status(INVALID_HANDLE)
        self._record_event(ev, st, "cuEventRecord")
        return OK

    def _record_event(self, ev: Event, st: Stream, call: str) -> None:
        ev.time = None

        def run() -> None:
            ev.time = time.perf_counter()

        seq = self._enqueue(st, call, run)
        ev.stream = st
        ev.seq = seq
        ev.task = st.last_task
        ev.after = dict(st.ordered_after)
        ev.after[st.key] = seq

    @api(0, locked=False)
    def cuEventSynchronize(self, hEvent: Any) -> tuple[Any, ...]:
        with self._lock:
            ev = self._event(hEvent, "cuEventSynchronize")
            target = ev.task
        self._worker.wait(target)
        with self._lock:
            if ev.stream is not None:
                self._retire(ev.stream, ev.seq)
            if self._poison is not None:
                return (self._poison,)
        return OK

    @api(0)
    def cuEventQuery(self, hEvent: Any) -> tuple[Any, ...]:
        ev = self._event(hEvent, "cuEventQuery")
        if ev.task > self._worker.done:
            raise Status(R.CUDA_ERROR_NOT_READY)
        if ev.stream is not None:
            self._retire(ev.stream, ev.seq)
        return OK

    @api(1)
    def cuEventElapsedTime(self, hStart: Any, hEnd: Any) -> tuple[Any, ...]:
        start = self._event(hStart, "cuEventElapsedTime")
        end = self._event(hEnd, "cuEventElapsedTime")
        if (start.flags | end.flags) & 2 or start.stream is None or end.stream is None:
            raise Status(INVALID_HANDLE)
        if start.time is None or end.time is None:
            raise Status(R.CUDA_ERROR_NOT_READY)
        return (SUCCESS, float((end.time - start.time) * 1000.0))

    @api(0)
    def cuEventDestroy(self, hEvent: Any) -> tuple[Any, ...]:
        ev = self._event(hEvent, "cuEventDestroy")
        ev.destroyed = True
        self._drop_live(ev.handle, ev.ctx)
        return OK

    # --- memory ----------------------------------------------------------------------------------

    def _dev_find(self, addr: int) -> Alloc | None:
        i = bisect.bisect_right(self._dev_bases, addr) - 1
        if i < 0:
            return None
        alloc = self._dev_allocs[i]
        return alloc if alloc.contains(addr) else None

    def _host_find(self, addr: int) -> Alloc | None:
        i = bisect.bisect_right(self._host_bases, addr) - 1
        if i < 0:
            return None
        alloc = self._host_allocs[self._host_bases[i]]
        return alloc if alloc.contains(addr) else None

    def _new_device_alloc(self, size: int, ctx: Ctx | None, device: int, call: str, *, live: bool = True) -> Alloc:
        if size < 0:
            raise Status(INVALID_VALUE)
        if self._used[device] + size > self._memory_per_device:
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        base = _reserve_addresses(size)
        alloc = Alloc(base, size, False, ctx, 0 if ctx is None else ctx.gen, call)
        self._dev_bases.append(base)
        self._dev_allocs.append(alloc)
        if live:
            self._used[device] += size
            self._add_live("device_memory", base, ctx, call)
        return alloc

    def _release_alloc(self, alloc: Alloc) -> None:
        alloc.freed = True
        if alloc.host:
            self._drop_live(alloc.base, alloc.ctx)
            return
        if alloc.ctx is not None:
            self._used[alloc.ctx.device] -= alloc.size
        alloc.data = None
        self._drop_live(alloc.base, alloc.ctx)

    def _alloc_for_free(self, dptr: Any, call: str) -> Alloc:
        addr = h(dptr)
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
        if alloc is None or alloc.base != addr:
            raise Status(INVALID_VALUE)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash(call, f"memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.double_release, call, f"device memory {addr:#x} freed twice", addr)
            raise Status(INVALID_VALUE)
        return alloc

    @api(1)
    def cuMemAlloc(self, bytesize: int) -> tuple[Any, ...]:
        size = int(bytesize)
        if size == 0:
            raise Status(INVALID_VALUE)
        ctx = self._require_ctx()
        alloc = self._new_device_alloc(size, ctx, ctx.device, "cuMemAlloc")
        return (SUCCESS, cb.CUdeviceptr(alloc.base))

    @api(0)
    def cuMemFree(self, dptr: Any) -> tuple[Any, ...]:
        if h(dptr) == 0:
            return OK  # freeing NULL does nothing (assumed, as free(NULL); see differential.py)
        alloc = self._alloc_for_free(dptr, "cuMemFree")
        self._check_free(alloc, "cuMemFree", None)
        self._release_alloc(alloc)
        return OK

    @api(1)
    def cuMemAllocAsync(self, bytesize: int, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuMemAllocAsync")
        if int(bytesize) == 0:
            return (SUCCESS, cb.CUdeviceptr(0))  # nothing allocated, NULL returned (as on the H200)
        alloc = self._new_device_alloc(int(bytesize), st.ctx, st.ctx.device, "cuMemAllocAsync")
        self._enqueue(st, "cuMemAllocAsync", None)
        return (SUCCESS, cb.CUdeviceptr(alloc.base))

    @api(0)
    def cuMemFreeAsync(self, dptr: Any, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuMemFreeAsync")
        if h(dptr) == 0:
            return OK  # freeing NULL does nothing (assumed, as for cuMemFree)
        alloc = self._alloc_for_free(dptr, "cuMemFreeAsync")
        self._check_free(alloc, "cuMemFreeAsync", st)
        self._release_alloc(alloc)
        self._enqueue(st, "cuMemFreeAsync", None)
        return OK

    def _host_alloc(self, size: int, call: str) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        if size == 0:
            return (SUCCESS, 0)  # nothing allocated, NULL returned (assumed; see differential.py)
        if size < 0:
            raise Status(INVALID_VALUE)
        if size > self._memory_per_device:
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        buffer = (ctypes.c_char * size)()
        base = ctypes.addressof(buffer)
        alloc = Alloc(base, size, True, ctx, ctx.gen, call, buffer=buffer)
        bisect.insort(self._host_bases, base)
        self._host_allocs[base] = alloc
        self._add_live("host_memory", base, ctx, call)
        return (SUCCESS, base)

    @api(1)
    def cuMemAllocHost(self, bytesize: int) -> tuple[Any, ...]:
        return self._host_alloc(int(bytesize), "cuMemAllocHost")

    @api(1)
    def cuMemHostAlloc(self, bytesize: int, Flags: int) -> tuple[Any, ...]:
        if int(Flags) & ~HOST_ALLOC_FLAGS_MASK:
            raise Status(INVALID_VALUE)
        return self._host_alloc(int(bytesize), "cuMemHostAlloc")

    @api(0)
    def cuMemFreeHost(self, p: Any) -> tuple[Any, ...]:
        addr = h(p)
        if addr == 0:
            return OK  # freeing NULL does nothing (assumed, as for cuMemFree)
        alloc = self._host_allocs.get(addr)
        if alloc is None:
            raise Status(INVALID_VALUE)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash("cuMemFreeHost", f"host memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.double_release, "cuMemFreeHost", f"host memory {addr:#x} freed twice", addr)
            raise Status(INVALID_VALUE)
        self._check_free(alloc, "cuMemFreeHost", None)
        self._release_alloc(alloc)
        return OK

    @api(2)
    def cuMemGetInfo(self) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        return (SUCCESS, self._memory_per_device - self._used[ctx.device], self._memory_per_device)

    # copies: each side resolves to (alloc or None, offset or address); None means foreign host memory

    def _dev_side(self, addr: int, n: int, call: str) -> tuple[Alloc, int]:
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
        if alloc is None:
            raise Status(INVALID_VALUE)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash(call, f"memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.use_after_release, call, f"device memory {addr:#x} used after it was freed", addr)
            raise Status(INVALID_VALUE)
        off = addr - alloc.base
        if off + n > alloc.size:
            raise Status(INVALID_VALUE)
        return alloc, off

    def _host_addr_side(self, addr: int, n: int, call: str) -> Alloc | None:
        if addr == 0:
            raise Status(INVALID_VALUE)
        alloc = self._host_find(addr)
        if alloc is not None:
            if alloc.freed:
                self._note(self.use_after_release, call, f"host memory {addr:#x} used after it was freed", addr)
                raise Status(INVALID_VALUE)
            if addr + n > alloc.base + alloc.size:
                raise Status(INVALID_VALUE)
        return alloc

    def _host_source(self, src: Any, n: int, call: str) -> tuple[Callable[[], bytes], frozenset[int]]:
        if isinstance(src, int) or (not _is_buffer(src) and hasattr(src, "__int__")):
            addr = int(src)
            alloc = self._host_addr_side(addr, n, call)
            return (lambda: ctypes.string_at(addr, n)), (frozenset() if alloc is None else frozenset({alloc.base}))
        view = _byte_view(src)
        if len(view) < n:
            raise Status(INVALID_VALUE)
        return (lambda: bytes(view[:n])), frozenset()

    def _host_dest(self, dst: Any, n: int, call: str) -> tuple[Callable[[bytes], None], frozenset[int]]:
        if isinstance(dst, int) or (not _is_buffer(dst) and hasattr(dst, "__int__")):
            addr = int(dst)
            alloc = self._host_addr_side(addr, n, call)

            def put_addr(data: bytes) -> None:
                ctypes.memmove(addr, data, n)

            return put_addr, (frozenset() if alloc is None else frozenset({alloc.base}))
        view = _byte_view(dst)
        if view.readonly or len(view) < n:
            raise Status(INVALID_VALUE)

        def put_view(data: bytes) -> None:
            view[:n] = data

        return put_view, frozenset()

    def _copy(self, dst: Any, src: Any, n: int, stream: Any, call: str, kinds: str) -> tuple[Any, ...]:  # noqa: PLR0917
        """``kinds``: ``"hd"``, ``"dh"``, ``"dd"`` or ``"uu"`` (unified: decide by address)."""
        n = int(n)
        st = self._stream(stream, call)
        dkind, skind = kinds[0], kinds[1]
        if dkind == "u":
            dkind = "d" if h(dst) >= DEVICE_BASE else "h"
        if skind == "u":
            skind = "d" if h(src) >= DEVICE_BASE else "h"
        refs: set[int] = set()
        if skind == "d":
            salloc, soff = self._dev_side(h(src), n, call)
            refs.add(salloc.base)

            def get() -> bytes:
                return salloc.read(soff, n)

            source = get
        else:
            source, srefs = self._host_source(src, n, call)
            refs |= srefs
        if dkind == "d":
            dalloc, doff = self._dev_side(h(dst), n, call)
            refs.add(dalloc.base)

            def put(data: bytes) -> None:
                dalloc.write(doff, data)

            sink: Callable[[bytes], None] = put
        else:
            sink, drefs = self._host_dest(dst, n, call)
            refs |= drefs
        checks = [self._dev_find(r) or self._host_allocs.get(r) for r in refs]

        def run() -> None:
            for alloc in checks:
                if alloc is not None and alloc.freed:
                    self._note(self.dangling, call, f"{call} executed on freed memory {alloc.base:#x}", alloc.base)
                    return
            sink(source())

        if stream is None:
            run()
        else:
            self._enqueue(st, call, run, frozenset(refs))
        return OK

    @api(0)
    def cuMemcpyHtoD(self, dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcHost, ByteCount, None, "cuMemcpyHtoD", "dh")

    @api(0)
    def cuMemcpyDtoH(self, dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dstHost, srcDevice, ByteCount, None, "cuMemcpyDtoH", "hd")

    @api(0)
    def cuMemcpyDtoD(self, dstDevice: Any, srcDevice: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcDevice, ByteCount, None, "cuMemcpyDtoD", "dd")

    @api(0)
    def cuMemcpy(self, dst: Any, src: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dst, src, ByteCount, None, "cuMemcpy", "uu")

    @api(0)
    def cuMemcpyHtoDAsync(self, dstDevice: Any, srcHost: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcHost, ByteCount, _Strm(hStream), "cuMemcpyHtoDAsync", "dh")

    @api(0)
    def cuMemcpyDtoHAsync(self, dstHost: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dstHost, srcDevice, ByteCount, _Strm(hStream), "cuMemcpyDtoHAsync", "hd")

    @api(0)
    def cuMemcpyDtoDAsync(self, dstDevice: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcDevice, ByteCount, _Strm(hStream), "cuMemcpyDtoDAsync", "dd")

    @api(0)
    def cuMemcpyAsync(self, dst: Any, src: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dst, src, ByteCount, _Strm(hStream), "cuMemcpyAsync", "uu")

    def _memset(self, dst: Any, pattern: bytes, count: int, stream: Any, call: str) -> tuple[Any, ...]:
        count = int(count)
        st = self._stream(stream, call)
        addr = h(dst)
        if addr % len(pattern):
            raise Status(INVALID_VALUE)
        alloc, off = self._dev_side(addr, count * len(pattern), call)
        payload = pattern * count

        def run() -> None:
            if alloc.freed:
                self._note(self.dangling, call, f"{call} executed on freed memory {alloc.base:#x}", alloc.base)
                return
            alloc.write(off, payload)

        if stream is None:
            run()
        else:
            self._enqueue(st, call, run, frozenset({alloc.base}))
        return OK

    @api(0)
    def cuMemsetD8(self, dstDevice: Any, uc: int, N: int) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<B", int(uc) & 0xFF), N, None, "cuMemsetD8")

    @api(0)
    def cuMemsetD16(self, dstDevice: Any, us: int, N: int) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<H", int(us) & 0xFFFF), N, None, "cuMemsetD16")

    @api(0)
    def cuMemsetD32(self, dstDevice: Any, ui: int, N: int) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<I", int(ui) & 0xFFFFFFFF), N, None, "cuMemsetD32")

    @api(0)
    def cuMemsetD8Async(self, dstDevice: Any, uc: int, N: int, hStream: Any) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<B", int(uc) & 0xFF), N, _Strm(hStream), "cuMemsetD8Async")

    @api(0)
    def cuMemsetD16Async(self, dstDevice: Any, us: int, N: int, hStream: Any) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<H", int(us) & 0xFFFF), N, _Strm(hStream), "cuMemsetD16Async")

    @api(0)
    def cuMemsetD32Async(self, dstDevice: Any, ui: int, N: int, hStream: Any) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<I", int(ui) & 0xFFFFFFFF), N, _Strm(hStream), "cuMemsetD32Async")

    # --- modules, libraries, kernels ----------------------------------------------------------

    def _image_entries(self, image: Any) -> tuple[dict[str, tuple[Any, ...] | None], frozenset[str]]:
        """The kernels of an image (names and parameter ctypes) and those that do nothing."""
        data = self._image_data(image)
        registered = self._images.get(data)
        if registered is not None:
            return dict(registered), frozenset()
        if data.startswith(b"\x7fELF"):
            try:
                return parse_elf_functions(data), frozenset()
            except ValueError:
                raise Status(R.CUDA_ERROR_INVALID_IMAGE) from None
        if b".entry" in data or b".version" in data or b".target" in data:
            return parse_ptx(data), ptx_trivial_entries(data)
        raise Status(R.CUDA_ERROR_INVALID_IMAGE)

    def _image_data(self, image: Any) -> bytes:
        if isinstance(image, str):
            data = image.encode()
        elif isinstance(image, int) or (not _is_buffer(image) and hasattr(image, "__int__")):
            addr = int(image)
            if addr == 0:
                raise Status(INVALID_VALUE)
            head = ctypes.string_at(addr, 4)
            if head == b"\x7fELF":
                shoff = ctypes.c_uint64.from_address(addr + 0x28).value
                shentsize = ctypes.c_uint16.from_address(addr + 0x3A).value
                shnum = ctypes.c_uint16.from_address(addr + 0x3C).value
                data = ctypes.string_at(addr, shoff + shentsize * shnum)
            else:
                data = ctypes.string_at(addr)
        else:
            data = bytes(_byte_view(image))
        return data

    @api(1)
    def cuModuleLoadData(self, image: Any) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        entries, trivial = self._image_entries(image)
        handle = self._handle()
        self._modules[handle] = Module(handle, ctx, ctx.gen, "cuModuleLoadData", entries, trivial=trivial)
        self._add_live("module", handle, ctx, "cuModuleLoadData")
        return (SUCCESS, cb.CUmodule(handle))

    def _module(self, value: Any, call: str, *, library: bool) -> Module:
        handle = h(value)
        mod = self._modules.get(handle)
        if mod is None or mod.library != library:
            raise Status(INVALID_HANDLE)
        if mod.ctx is not None and not mod.ctx.alive(mod.gen):
            raise self._crash(call, f"module {handle:#x} belongs to a destroyed context", handle)
        if mod.unloaded:
            self._note(self.use_after_release, call, f"module {handle:#x} used after it was unloaded", handle)
            raise Status(INVALID_HANDLE)
        return mod

    def _get_function(self, mod: Module, name: Any, ctx: Ctx | None, kernel: bool) -> int:
        key = name.decode() if isinstance(name, bytes) else str(name)
        if key not in mod.entries:
            raise Status(R.CUDA_ERROR_NOT_FOUND)
        handle = mod.functions.get(key)
        if handle is None:
            handle = self._handle()
            mod.functions[key] = handle
            self._functions[handle] = Function(handle, mod, key, ctx, kernel)
        return handle

    @api(1)
    def cuModuleGetFunction(self, hmod: Any, name: Any) -> tuple[Any, ...]:
        mod = self._module(hmod, "cuModuleGetFunction", library=False)
        return (SUCCESS, cb.CUfunction(self._get_function(mod, name, mod.ctx, False)))

    @api(0)
    def cuModuleUnload(self, hmod: Any) -> tuple[Any, ...]:
        handle = h(hmod)
        mod = self._modules.get(handle)
        if mod is not None and mod.unloaded and not mod.library:
            self._note(self.double_release, "cuModuleUnload", f"module {handle:#x} unloaded twice", handle)
            raise Status(INVALID_HANDLE)
        mod = self._module(hmod, "cuModuleUnload", library=False)
        mod.unloaded = True
        self._drop_live(handle, mod.ctx)
        return OK

    @api(1)
    def cuLibraryLoadData(  # noqa: PLR0917
        self,
        code: Any,
        jitOptions: Any,
        jitOptionsValues: Any,
        numJitOptions: int,
        libraryOptions: Any,
        libraryOptionValues: Any,
        numLibraryOptions: int,
    ) -> tuple[Any, ...]:
        entries, trivial = self._image_entries(code)
        handle = self._handle()
        self._modules[handle] = Module(handle, None, 0, "cuLibraryLoadData", entries, library=True, trivial=trivial)
        self._add_live("library", handle, None, "cuLibraryLoadData")
        return (SUCCESS, cb.CUlibrary(handle))

    @api(1)
    def cuLibraryGetKernel(self, library: Any, name: Any) -> tuple[Any, ...]:
        mod = self._module(library, "cuLibraryGetKernel", library=True)
        return (SUCCESS, cb.CUkernel(self._get_function(mod, name, None, True)))

    @api(0)
    def cuLibraryUnload(self, library: Any) -> tuple[Any, ...]:
        handle = h(library)
        mod = self._modules.get(handle)
        if mod is not None and mod.unloaded and mod.library:
            self._note(self.double_release, "cuLibraryUnload", f"library {handle:#x} unloaded twice", handle)
            raise Status(INVALID_HANDLE)
        mod = self._module(library, "cuLibraryUnload", library=True)
        mod.unloaded = True
        self._drop_live(handle)
        return OK

    @api(1)
    def cuKernelGetFunction(self, kernel: Any) -> tuple[Any, ...]:
        fn = self._function(kernel, "cuKernelGetFunction")
        if not fn.kernel:
            raise Status(INVALID_HANDLE)
        self._require_ctx()
        return (SUCCESS, cb.CUfunction(fn.handle))

    @api(1)
    def cuFuncGetParamCount(self, func: Any) -> tuple[Any, ...]:
        fn = self._function(func, "cuFuncGetParamCount")
        declared = fn.module.entries.get(fn.name)
        if declared is None:
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)  # an image whose parameter list is not known
        return (SUCCESS, len(declared))

    @api(2)
    def cuFuncGetParamInfo(self, func: Any, paramIndex: int) -> tuple[Any, ...]:
        fn = self._function(func, "cuFuncGetParamInfo")
        declared = fn.module.entries.get(fn.name)
        if declared is None:
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)  # an image whose parameter list is not known
        index = int(paramIndex)
        if not 0 <= index < len(declared):
            raise Status(INVALID_VALUE)
        offset, size = param_layout(declared)[index]
        return (SUCCESS, offset, size)

    def _function(self, value: Any, call: str) -> Function:
        handle = h(value)
        fn = self._functions.get(handle)
        if fn is None:
            raise Status(INVALID_HANDLE)
        mod = fn.module
        if mod.ctx is not None and not mod.ctx.alive(mod.gen):
            raise self._crash(call, f"function {fn.name!r} belongs to a destroyed context", handle)
        if mod.unloaded:
            self._note(self.use_after_release, call, f"function {fn.name!r} used after its module was unloaded", handle)
            raise Status(INVALID_HANDLE)
        return fn

    def decode_params(self, fn: Function, kernelParams: Any) -> tuple[Any, ...]:
        """The argument values of a launch (``kernelParams`` in any cuda-bindings form)."""
        if kernelParams is None:
            return ()
        if isinstance(kernelParams, (tuple, list)):
            if len(kernelParams) == 2 and isinstance(kernelParams[0], (tuple, list)):
                values, types = kernelParams
                declared = fn.module.entries.get(fn.name)
                if declared is not None and self._registered(fn.name) is None:
                    # What the kernel reads: each argument's bytes, as its parameter's type.
                    return self._reinterpret(fn, values, types, declared)
                return tuple(_plain(v, t) for v, t in zip(values, types, strict=False))
            return tuple(_plain(v, None) for v in kernelParams)
        addr = int(kernelParams)
        if addr == 0:
            return ()
        registered = self._registered(fn.name)
        types = registered[1] if registered is not None else None
        if types is None:
            types = fn.module.entries.get(fn.name)
        if types is None:
            if registered is None:
                return ()
            raise TypeError(
                f"cannot decode the arguments of kernel {fn.name!r} given as an address: pass argtypes to "
                "register_kernel()"
            )
        out: list[Any] = []
        for i, declared in enumerate(types):
            slot = ctypes.c_void_p.from_address(addr + i * _PTR).value or 0
            ctype = ctypes.c_uint64 if declared is None else declared
            value = ctype.from_address(slot)
            out.append(value.value if hasattr(value, "value") and not isinstance(value, ctypes.Array) else bytes(value))
        return tuple(out)

    def _reinterpret(self, fn: Function, values: Any, types: Any, declared: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(values) < len(declared):
            # The driver reads one pointer per declared parameter from the argument array:
            # past its end it dereferences whatever follows.
            raise self._crash(
                "cuLaunchKernel",
                f"kernel {fn.name!r} takes {len(declared)} parameters and was given {len(values)} arguments",
            )
        out: list[Any] = []
        for value, given, ctype in zip(values, types, declared, strict=False):
            raw = _arg_bytes(value, given)
            size = ctypes.sizeof(ctype)
            raw = raw[:size].ljust(size, b"\0")
            decoded = ctype.from_buffer_copy(raw)
            out.append(bytes(decoded) if isinstance(decoded, ctypes.Array) else decoded.value)
        return tuple(out)

    def view(self, ptr: Any, n: int) -> memoryview:
        """A writable view of the ``n`` bytes of memory at ``ptr``: writes reach that memory.

        Faults like :meth:`read` outside every allocation; a view of freed memory
        is recorded in :attr:`dangling` and writes to it go nowhere.
        """
        with self._lock:
            alloc, off = self._access(int(ptr), n, "view")
            if alloc is None:
                return memoryview(bytearray(n))
            if alloc.host:
                return memoryview((ctypes.c_uint8 * n).from_address(alloc.base + off)).cast("B")
            if alloc.data is None:
                alloc.data = bytearray(alloc.size)
            return memoryview(alloc.data)[off : off + n]

    def _stand_in_args(self, fn: Function, args: tuple[Any, ...]) -> tuple[Any, ...]:
        declared = fn.module.entries.get(fn.name)
        out: list[Any] = []
        for i, value in enumerate(args):
            ctype = declared[i] if declared is not None and i < len(declared) else None
            if isinstance(value, int) and (ctype is None or ctype in _POINTER_LIKE):
                out.append(DevicePointer(value, self))
            else:
                out.append(value)
        return tuple(out)

    def _require_stand_in(self, fn: Function) -> None:
        """Raise :class:`MissingStandInError` unless something can run in place of ``fn``."""
        if self._registered(fn.name) is not None or fn.name in fn.module.trivial or stand_in_for(fn.name) is not None:
            return
        raise MissingStandInError(fn.name, kernel_names(fn.name)[1:])

    def _arg_refs(self, args: tuple[Any, ...], call: str, name: str) -> frozenset[int]:
        refs: set[int] = set()
        for value in args:
            if isinstance(value, int) and value >= DEVICE_BASE:
                alloc = self._dev_find(value)
                if alloc is not None:
                    if alloc.freed:
                        self._note(self.dangling, call, f"kernel {name!r} launched with freed memory {value:#x}", value)
                    refs.add(alloc.base)
        return frozenset(refs)

    def _kernel_runner(self, fn: Function, args: tuple[Any, ...], launch: dict[str, Any]) -> Callable[[], None]:
        def run() -> None:
            if self._poison is not None or self._pending_fault is not None:
                return
            registered = self._registered(fn.name)
            if registered is not None:
                call: Callable[[], Any] = lambda: registered[0](self, *args)  # noqa: E731
            else:
                user = stand_in_for(fn.name)
                if user is None:
                    return  # a kernel that does nothing (checked at the launch)
                info = KernelLaunch(
                    fn.name,
                    launch["grid"],
                    launch["block"],
                    launch["shared"],
                    self,
                    launch.get("cluster") or (1, 1, 1),
                    bool(launch.get("cooperative", False)),
                )
                call = lambda: user(info, *self._stand_in_args(fn, args))  # noqa: E731
            self._tls.in_kernel = True
            self.current_launch = launch
            try:
                result = call()
            except SimulatedFault as exc:
                self.fault_later(exc.code)
                return
            except Exception as exc:  # noqa: BLE001 - any emulation failure is a failed launch
                self.kernel_errors.append(exc)
                self._stand_in_raised(fn.name, exc)
                return
            finally:
                self._tls.in_kernel = False
            if result is not None and int(result) != 0:
                self.fault_later(result)

        return run

    @api(0)
    def cuLaunchKernel(  # noqa: PLR0917
        self,
        f: Any,
        gridDimX: int,
        gridDimY: int,
        gridDimZ: int,
        blockDimX: int,
        blockDimY: int,
        blockDimZ: int,
        sharedMemBytes: int,
        hStream: Any,
        kernelParams: Any,
        extra: Any,
    ) -> tuple[Any, ...]:
        fn = self._function(f, "cuLaunchKernel")
        st = self._stream(hStream, "cuLaunchKernel")
        if fn.ctx is not None and fn.ctx is not st.ctx:
            raise Status(INVALID_HANDLE)
        grid = (int(gridDimX), int(gridDimY), int(gridDimZ))
        block = (int(blockDimX), int(blockDimY), int(blockDimZ))
        if min(grid) <= 0 or min(block) <= 0 or block[0] * block[1] * block[2] > 1024 or block[2] > 64:
            raise Status(INVALID_VALUE)
        if int(sharedMemBytes) > 232448:
            raise Status(R.CUDA_ERROR_INVALID_VALUE)
        self._require_stand_in(fn)
        args = self.decode_params(fn, kernelParams)
        refs = self._arg_refs(args, "cuLaunchKernel", fn.name)
        launch = {"name": fn.name, "grid": grid, "block": block, "shared": int(sharedMemBytes), "stream": st.handle}
        self._enqueue(st, "cuLaunchKernel", self._kernel_runner(fn, args, launch), refs)
        return OK


class _Strm:
    """A stream argument of an async call (distinguishes "stream 0" from "no stream")."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __int__(self) -> int:
        return h(self.value)


def _is_buffer(obj: Any) -> bool:
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


def _byte_view(obj: Any) -> memoryview:
    try:
        view = memoryview(obj)
    except TypeError:
        raise Status(INVALID_VALUE) from None
    if not view.c_contiguous:
        raise Status(INVALID_VALUE)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _plain(value: Any, ctype: Any) -> Any:
    if isinstance(value, ctypes._SimpleCData):
        return value.value
    if isinstance(value, (ctypes.Array, ctypes.Structure)):
        return bytes(value)
    if ctype is None and not isinstance(value, (int, float)):
        try:
            return int(value)
        except TypeError:
            return value
    return value


if not hasattr(cb, "cuFuncGetParamCount"):  # cuda-bindings 12.x has no such function: neither has the simulator
    del SimCore.cuFuncGetParamCount

_POINTER_LIKE = frozenset({ctypes.c_uint64, ctypes.c_void_p})


def _arg_bytes(value: Any, given: Any) -> bytes:
    """The bytes cuda-bindings puts in the parameter buffer for one ``(value, ctype)`` argument."""
    if isinstance(value, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure)):
        return bytes(value)
    if given is None:
        return ctypes.c_uint64(h(value)).value.to_bytes(8, "little")
    return bytes(given(value))
