"""The simulated driver's plumbing: statuses, the ``api`` decorator, handles and addresses, :class:`SimBase`."""

from __future__ import annotations

import bisect
import ctypes
import itertools
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from cuda.bindings import driver as cb

from cuguard.errors import error_name
from cuguard.errors.lowlevel import calls_where, deferring_lock, forget_driver
from cuguard.testing._sim.accounting import (
    Changes,
    Incident,
    LiveObject,
    SimulatedCrash,
    SimulatedFault,
    Snapshot,
)
from cuguard.testing._sim.arguments import argument_check
from cuguard.testing._sim.attributes import attribute_table
from cuguard.testing._sim.facts import PRE_INIT_CALLS, STICKY_EXEMPT
from cuguard.testing._sim.state import Alloc, Ctx, Event, Function, Module, Stream
from cuguard.testing._sim.worker import Worker

__all__ = [
    "DEVICE_BASE",
    "INVALID_CONTEXT",
    "INVALID_HANDLE",
    "INVALID_VALUE",
    "OK",
    "SUCCESS",
    "SYNCHRONIZING_CALLS",
    "R",
    "SimBase",
    "Status",
    "api",
    "h",
]

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
SYNCHRONIZING_CALLS = calls_where(synchronizes=True)
#: Calls that read static tables and so answer even inside a host function.
_CALLBACK_SAFE = calls_where(callback_safe=True)

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

        def wrapper(self: SimBase, *args: Any, **kwargs: Any) -> Any:
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


class SimBase:
    """The simulated driver's state and plumbing: registries, the init and sticky gate, the
    thread's context stack, incident books, deferred callbacks, faults and live accounting.

    The driver functions are in the area classes built on it (:mod:`~cuguard.testing._sim.devices`,
    :mod:`~cuguard.testing._sim.contexts`, :mod:`~cuguard.testing._sim.streams`,
    :mod:`~cuguard.testing._sim.memory`, :mod:`~cuguard.testing._sim.modules`), which
    :class:`~cuguard.testing._sim.core.SimCore` combines.
    """

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
        self._attributes = attribute_table()
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

    # --- faults and the sticky state ---------------------------------------------------------

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

    # --- live accounting ---------------------------------------------------------------------

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

    def _add_live(self, kind: str, handle: int, ctx: Ctx | None, call: str, refcount: int = 1) -> None:
        self._live[handle] = LiveObject(kind, handle, None if ctx is None else ctx.handle, call, refcount)
        if ctx is not None and kind != "context":
            ctx.owned.add(handle)

    def _drop_live(self, handle: int, ctx: Ctx | None = None) -> None:
        self._live.pop(handle, None)
        if ctx is not None:
            ctx.owned.discard(handle)

    # --- address lookups ---------------------------------------------------------------------

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
