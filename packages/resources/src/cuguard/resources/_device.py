"""Devices: the factory of streams, events, buffers and modules."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

from cuguard.context import call_in, init_driver
from cuguard.context.contexts import Context  # from its defining module: the compiled build types contexts with it
from cuguard.context.lowlevel import call_switched, call_switched_by
from cuguard.errors import ResourceClosedError, driver, driver_token, raise_status
from cuguard.errors.lowlevel import (
    INT_LIMIT,
    SIZE_LIMIT,
    deferring_lock,
    driver_state,
    int_argument,
    source_new,
    wrong_kind,
)
from cuguard.resources import _race
from cuguard.resources._base import driver_types
from cuguard.resources._fast import follow_compiled
from cuguard.resources._memory import Buffer, PinnedBuffer
from cuguard.resources._module import Module
from cuguard.resources._properties import DeviceProperties
from cuguard.resources._stream import (
    Event,
    Stream,
    _event_destroy,
    as_stream,
    capturing_refusal,
    new_stream,
    refuse_capturing_allocation,
)

if TYPE_CHECKING:
    from cuguard.resources._memres import MemoryResource
    from cuguard.resources._pools import DeviceMemoryResource

__all__ = ["Device", "MemoryInfo"]


def _stream_create(flags: int, priority: int | None) -> Any:
    if priority is None:
        err, handle = driver.cuStreamCreate(flags)
        call = "cuStreamCreate"
    else:
        err, handle = driver.cuStreamCreateWithPriority(flags, priority)
        call = "cuStreamCreateWithPriority"
    if err:
        raise_status(err, call)
    return handle


def _stream_destroy(handle: Any) -> None:
    (err,) = driver.cuStreamDestroy(handle)
    if err:
        raise_status(err, "cuStreamDestroy")


class MemoryInfo(NamedTuple):
    """Free and total device memory in bytes (``Device.memory_info``)."""

    free: int
    total: int


def _mem_get_info() -> MemoryInfo:
    err, free, total = driver.cuMemGetInfo()
    if err:
        raise_status(err, "cuMemGetInfo")
    return MemoryInfo(int(free), int(total))


def _ctx_sync() -> None:
    (err,) = driver.cuCtxSynchronize()
    if err:
        raise_status(err, "cuCtxSynchronize")


# The compiled build's driver calls while in use and the seam routes to the real bindings, else None (_fast).
_fp: Any = None
# How allocate_on and event_on make their objects without __init__ (source_new: None in the compiled build).
_new_buffer = source_new(__file__, Buffer)
_new_event = source_new(__file__, Event)


def _compiled_changed(ops: Any) -> None:
    global _fp
    _fp = ops


follow_compiled(_compiled_changed)


# Whether the race checker is on, kept current by _race.follow: read on every operation as a global of
# this module (in the compiled build a C flag) instead of an attribute of _race.
_racing = False


def _racing_changed(on: bool) -> None:
    global _racing
    _racing = on


_race.follow(_racing_changed)
_DEVICES = "devices"  # driver_state() key: ordinal -> Device (O2)
_devices_lock = deferring_lock()


def _current_ordinal() -> int:
    """The device of the thread's current context, or 0 when none is current (cuda.core's rule)."""
    init_driver()
    err, ctx = driver.cuCtxGetCurrent()
    if err:
        raise_status(err, "cuCtxGetCurrent")
    if not int(ctx):
        return 0
    err, dev = driver.cuCtxGetDevice()
    if err:
        raise_status(err, "cuCtxGetDevice")
    return int(dev)


# Room for the driver's "dddddddd:bb:dd.f" with its NUL; the driver writes at most this many bytes.
_PCI_BUS_ID_LENGTH = 64


class DeviceFields:
    """The fields of a :class:`Device`, its base class (not made on its own).

    In the compiled build this is a compiled class whose fields are C slots, so that the hot paths
    (:func:`event_on`, :func:`stream_on`, stream-ordered allocation) read them without a lookup;
    ``Device`` stays a Python class for its one-object-per-ordinal ``__new__``.
    """

    __slots__ = ("_context", "_default_mr", "_driver", "_handle", "_memory_resource", "_ordinal", "_properties")

    _ordinal: int
    _handle: Any
    _context: Context | None
    _driver: Any
    _properties: DeviceProperties | None
    _memory_resource: MemoryResource[Any] | None  # the one set by the program, which allocate() then uses
    _default_mr: DeviceMemoryResource | None  # the device's default resource, made on first read


def allocate_on(device: Device, size: int, stream: Stream | None = None) -> Buffer | PinnedBuffer:
    """Allocate ``size`` bytes of device memory (``Device.allocate`` is this function).

    With a :attr:`Device.memory_resource` set other than the default, this
    is that resource's ``allocate(size, stream)``: its buffers, its rules and
    its errors (a :class:`PinnedBuffer` from a host resource). Otherwise:

    With ``stream`` (a stream of this device; another device's stream
    raises ``ValueError``) the allocation is stream-ordered on it, and the
    buffer will be freed on that stream (W5); it needs no context switch.
    A ``stream`` being captured into a graph raises ``RuntimeError``
    before the allocator is asked, as the memory pools do (the memory
    would be graph memory, out of the buffer's reach; checked with one
    ``cuStreamIsCapturing``): allocate before the capture begins, or use
    ``GraphDefinition.allocate()``. Otherwise it is synchronous (``size``
    0 is then refused by the driver). ``size`` is any integer (NumPy's
    too); a bool, a float or another object raises ``TypeError``, a size
    below 0 or of ``2**64`` or more ``ValueError``, before the driver is
    asked. Raises :class:`~cuguard.errors.CUDAError` if the driver
    refuses; nothing is allocated then.

    In the compiled build ``device``, the stream and the buffer are typed (``_device.pxd``): their
    fields are C reads and writes.
    """
    mr = device._memory_resource
    if mr is not None:
        made: Buffer | PinnedBuffer = mr.allocate(size, stream)
        return made
    context = device._context
    if context is None:
        context = device.context
    if stream is None:
        return Buffer._allocate(context, device._ordinal, size)
    # Stream-ordered: the driver allocates from the pool of the stream's device whatever context is
    # current (seen on an H200, differential scenario alloc_async_needs_only_the_stream), so no context
    # check or switch is needed and the current context is untouched (G2).
    s = stream if type(stream) is Stream else as_stream(stream, "stream")
    if type(size) is not int or not 0 <= size < SIZE_LIMIT:
        size = int_argument("size", size)
    ordinal = device._ordinal
    if s._device != ordinal:
        raise ValueError(f"{s!r} belongs to device {s._device}, not to {device!r}")
    if s._closed or context._closed or s._context._closed:
        s._check_open()
        raise context._refusal()
    fp = _fp
    if fp is not None:
        # Compiled: the capture query (only for a stream that may be capturing) and the
        # allocation in one call; the status back, raised here.
        err, ptr = fp.mem_alloc_async(size, s._handle, s._may_capture)
        if err:
            if err == fp.CAPTURING:
                raise capturing_refusal(s)
            raise_status(err, ptr)
    else:
        if s._may_capture:  # a capturing stream is refused before the allocator is asked
            refuse_capturing_allocation(s)
        err, ptr = driver.cuMemAllocAsync(size, s._handle)
        if err:
            raise_status(err, "cuMemAllocAsync")
    buf = Buffer.__new__(Buffer) if _new_buffer is None else _new_buffer(Buffer)
    buf._handle = ptr
    buf._context = context
    buf._owned = True
    buf._device = ordinal
    buf._size = size
    buf._stream = s
    buf._graph_used = False
    buf._release_deferred = False
    buf._lender = None
    buf._mr = None
    buf._closed = False
    if _racing:
        _race.allocated(buf, s)  # stream-ordered: a write on that stream (B7)
    return buf


def _compiled_refused(  # noqa: PLR0917  # a C function in the compiled build, called positionally
    context: Context, err: int, value: Any, switched: str, call: str, undo: Any, flags: int
) -> Any:
    """What a compiled create that did not create answered (status ``err``, ``value``): the handle, or raised.

    Status -1: another context is current (``value``: it, an int), so the compiled ``switched``
    makes the switch, the create ``call`` and the restore in one, their failures handled as
    :func:`~cuguard.context.lowlevel.call_switched`'s (``undo`` destroys what a failed restore
    leaves). Any other status raises its :class:`~cuguard.errors.CUDAError`. A C function in the
    compiled build (``_device.pxd``); the pure-Python build never calls it.
    """
    if err == -1:
        # (getattr: the bound method as a Python callable; the compiled calls' C methods cannot be passed)
        return call_switched_by(context, value, getattr(_fp, switched), call, undo, flags)
    raise_status(err, value)


def event_on(device: Device, *, timing: bool = False, ipc_enabled: bool = False) -> Event:
    """A new event on ``device`` (``Device.create_event`` is this function).

    ``timing=True`` makes an event that :meth:`Event.elapsed_since` can time.
    Timing is off by default, as in cuda.core (such events are cheaper).
    ``ipc_enabled=True`` makes an event other processes can open
    (:meth:`Event.get_ipc_descriptor`); such events cannot time
    (``ValueError`` with ``timing=True``).

    Raises :class:`~cuguard.errors.CUDAError` if the driver refuses; no
    event exists then, and the caller's context is unchanged (G1, G2).
    In the compiled build ``device`` and its context are typed (``_device.pxd``): their fields are C reads.
    """
    if ipc_enabled:
        if timing:
            raise ValueError("an IPC-enabled event cannot time (the driver requires timing off)")
        from cuguard.resources._ipc import create_ipc_event

        return create_ipc_event(device)
    context = device._context
    if context is None:
        context = device.context
    if not context._closed:
        flags = 0 if timing else 2  # CU_EVENT_DISABLE_TIMING
        fp = _fp
        if fp is None:
            # Fast path: the device's context is current already, so no switch (C1).
            err, current = driver.cuCtxGetCurrent()
            if err:  # never swallowed: the slow path would ask again, a retry (C4)
                raise_status(err, "cuCtxGetCurrent")
            if current == context._handle:
                err, handle = driver.cuEventCreate(flags)
                if err:
                    raise_status(err, "cuEventCreate")
            else:  # another context is current: switch in, create, restore (C1), call_in's path inlined
                handle = call_switched(context, current, driver.cuEventCreate, "cuEventCreate", _event_destroy, flags)
        else:
            # Compiled: the context check and the create in one call (statuses back; raised here).
            err, handle = fp.event_create(context._int, flags)
            if err:
                handle = _compiled_refused(
                    context, err, handle, "event_create_switched", "cuEventCreate", _event_destroy, flags
                )
        # new_event's stores made here, as allocate_on makes its Buffer: a factory's frame per event is a
        # measurable part of the pure build's create (and switch-and-restore) path.
        event = Event.__new__(Event) if _new_event is None else _new_event(Event)
        event._handle = handle
        event._context = context
        event._owned = True
        event._device = device._ordinal
        event._timing = timing
        event._release_deferred = False
        event._closed = False
        return event
    return Event._create(context, device._ordinal, timing)


class Device(DeviceFields):
    """A CUDA device, by ordinal: one object per ordinal per installed driver (O2).

    ``Device(n)`` returns the same object for the same ordinal from any
    thread, as in cuda.core. ``Device()`` is the device of the calling
    thread's current context, or device 0 when no context is current (a
    refusal of ``cuCtxGetCurrent``/``cuCtxGetDevice`` raises
    :class:`~cuguard.errors.CUDAError`). Its primary context (:attr:`context`)
    is retained on first use and held until the process exits (for a simulated driver:
    until that driver is closed), as the CUDA runtime does, so
    ``Device(0).set_current()`` and calls through temporary devices such as
    ``Device(0).allocate(256)`` are safe and cost no context creation.

    Every method runs in the device's primary context and leaves the
    caller's current context as it was, also when no context is current
    (G2), switching only when needed (C1); only :meth:`set_current` changes
    it on purpose. Creating methods create nothing when they raise (G1).
    Failures raise :class:`~cuguard.errors.CUDAError`; bad arguments raise
    ``TypeError``/``ValueError`` before any driver call. A device of a driver
    that is no longer installed raises :class:`~cuguard.errors.ResourceClosedError`
    (O3). ``copy.copy`` and ``copy.deepcopy`` return the device itself;
    a pickled device unpickles as ``Device(ordinal)`` of the driver installed then.
    """

    __slots__ = ()

    def __new__(cls, ordinal: int | None = None) -> Device:
        if ordinal is None:
            ordinal = _current_ordinal()
        elif type(ordinal) is not int or not 0 <= ordinal < INT_LIMIT:
            ordinal = int_argument("ordinal", ordinal, 0, INT_LIMIT)
        devices = driver_state().get(_DEVICES)
        if devices is not None:
            found = devices.get(ordinal)
            if found is not None:
                return found  # type: ignore[no-any-return]
        with _devices_lock:
            devices = driver_state().setdefault(_DEVICES, {})
            found = devices.get(ordinal)
            if found is not None:
                return found  # type: ignore[no-any-return]
            init_driver()
            if _race.PENDING:
                _race.read_environment()  # CUGUARD_RACECHECK, read at the first driver use (B7)
            err, handle = driver.cuDeviceGet(ordinal)
            if err:
                raise_status(err, "cuDeviceGet")
            self = DeviceFields.__new__(cls)
            self._ordinal = ordinal
            self._handle = handle
            self._context = None
            self._properties = None
            self._memory_resource = None
            self._default_mr = None
            self._driver = driver_token()
            devices[ordinal] = self
        return self

    def __copy__(self) -> Device:
        return self

    def __deepcopy__(self, memo: object) -> Device:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Device, (self._ordinal,))

    def _check_driver(self) -> None:
        if self._driver is not driver_token():
            raise ResourceClosedError(
                f"{self!r} belongs to a CUDA driver that is no longer installed; use Device({self._ordinal}) again"
            )

    @staticmethod
    def count() -> int:
        """How many CUDA devices the driver sees.

        Initializes the driver if needed; raises :class:`~cuguard.errors.CUDAError`
        if it cannot (:class:`~cuguard.errors.CUDADriverNotFoundError` with no driver).
        """
        init_driver()
        err, count = driver.cuDeviceGetCount()
        if err:
            raise_status(err, "cuDeviceGetCount")
        return int(count)

    @property
    def ordinal(self) -> int:
        """The device ordinal."""
        return self._ordinal

    @property
    def handle(self) -> Any:
        """The ``CUdevice`` handle."""
        return self._handle

    @property
    def name(self) -> str:
        """The device's product name; raises :class:`~cuguard.errors.CUDAError` if the driver refuses."""
        self._check_driver()
        err, raw = driver.cuDeviceGetName(256, self._handle)
        if err:
            raise_status(err, "cuDeviceGetName")
        return bytes(raw).split(b"\x00", 1)[0].decode(errors="replace")

    @property
    def pci_bus_id(self) -> str:
        """The device's PCI bus id, ``domain:bus:device.function`` in hex, e.g. ``"0000:1B:00.0"``.

        One ``cuDeviceGetPCIBusId``, which needs no context (the current one
        is left as it was, G2); not cached. Raises
        :class:`~cuguard.errors.CUDAError` if the driver refuses and
        ``ResourceClosedError`` for a device of a driver that is no longer
        installed.
        """
        self._check_driver()
        err, raw = driver.cuDeviceGetPCIBusId(_PCI_BUS_ID_LENGTH, self._handle)
        if err:
            raise_status(err, "cuDeviceGetPCIBusId")
        return bytes(raw).split(b"\x00", 1)[0].decode(errors="replace").strip()

    def attribute(self, attribute: Any) -> int:
        """The value of a ``CUdevice_attribute`` (enum member or int).

        An unknown attribute raises ``ValueError``; a refusal by the driver
        raises :class:`~cuguard.errors.CUDAError`.
        """
        from cuda.bindings.driver import CUdevice_attribute

        self._check_driver()
        err, value = driver.cuDeviceGetAttribute(CUdevice_attribute(int(attribute)), self._handle)
        if err:
            raise_status(err, "cuDeviceGetAttribute")
        return int(value)

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``, e.g. ``(9, 0)`` for an H100 or H200."""
        properties = self.properties
        return properties.compute_capability_major, properties.compute_capability_minor

    @property
    def properties(self) -> DeviceProperties:
        """The device's attributes under cuda.core's names (``dev.properties.multiprocessor_count``...).

        One object per device; each value is read with
        ``cuDeviceGetAttribute`` on first access and cached (a refusal raises
        :class:`~cuguard.errors.CUDAError` and caches nothing).
        """
        self._check_driver()  # cached values too: a Device of a driver that is gone refuses use (O3)
        properties = self._properties
        if properties is None:
            properties = self._properties = DeviceProperties._make(self)
        return properties

    @property
    def arch(self) -> str:
        """The compute capability as a string, major then minor, e.g. ``"90"``."""
        major, minor = self.compute_capability
        return f"{major}{minor}"

    @property
    def uuid(self) -> str:
        """The device's UUID as ``xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``.

        Raises :class:`~cuguard.errors.CUDAError` if ``cuDeviceGetUuid`` fails.
        """
        self._check_driver()
        err, uuid = driver.cuDeviceGetUuid(self._handle)
        if err:
            raise_status(err, "cuDeviceGetUuid")
        text = bytes(uuid.bytes).hex()
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"

    @property
    def memory_info(self) -> MemoryInfo:
        """``MemoryInfo(free, total)`` in bytes, as the driver sees them now (``cuMemGetInfo``).

        Runs in the device's primary context (switching only if needed, G2,
        C1); a refusal raises :class:`~cuguard.errors.CUDAError`.
        """
        return call_in(self.context, _mem_get_info, None)

    @property
    def default_stream(self) -> Stream:
        """The default stream, wrapped without being owned (closing the wrapper destroys nothing).

        The legacy default stream, or the per-thread one when the environment
        variable ``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM`` is set to a
        non-zero value (cuda.core's rule). Its handle (1 or 2) names the
        default stream of whatever context is current when it is used, so
        use it while this device is current (:meth:`set_current`). Retaining
        the primary context may raise :class:`~cuguard.errors.CUDAError`.
        """
        context = self.context
        per_thread = os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
        handle = driver_types().CUstream(2 if per_thread else 1)
        return Stream._make(handle, context, self._ordinal, owned=False)

    @property
    def context(self) -> Context:
        """The device's primary context (:meth:`Context.primary`), retained on first use and held for good (O2).

        Raises :class:`~cuguard.errors.CUDAError` if the retain fails (nothing
        is retained then) and ``ResourceClosedError`` for a device of a driver
        that is no longer installed.
        """
        context = self._context
        if context is None or context._closed:
            self._check_driver()
            if context is None:
                context = self._context = Context.primary(self._ordinal)
        return context

    @property
    def memory_resource(self) -> MemoryResource[Any]:
        """The memory resource :meth:`allocate` uses: the device's default one, or the one set here.

        The default is a :class:`~cuguard.resources.DeviceMemoryResource`
        over the device's current memory pool (the driver's default pool
        unless one was made current elsewhere), made on first read and the
        same object afterwards; it owns nothing (closing it destroys no pool;
        once closed, by the program or with its context, the next read makes
        a new default).
        While it is the resource, :meth:`allocate` keeps its own allocation:
        stream-ordered from that same pool (``cuMemAllocAsync``) or
        synchronous (``cuMemAlloc``), its buffers not counted by the resource
        (``buf.memory_resource`` is ``None``).

        Setting another :class:`~cuguard.resources.MemoryResource` (a pinned,
        managed, virtual memory or legacy pinned resource, another pool, a
        program's own subclass) makes :meth:`allocate` hand out that
        resource's buffers (:class:`~cuguard.resources.PinnedBuffer` objects
        from a host resource), for every thread; the device keeps the resource
        alive meanwhile. Setting the default resource again restores the
        default allocation. Another kind of object (``None`` included) raises
        ``TypeError``, a resource of another device ``ValueError``, a closed
        resource or one of a driver no longer installed
        ``ResourceClosedError``; the resource is then unchanged.

        Reading the default the first time asks the driver for the current
        pool (``cuDeviceGetMemPool``, after retaining the primary context): a
        refusal raises :class:`~cuguard.errors.CUDAError` (a device without
        memory pools: ``CUDA_ERROR_NOT_SUPPORTED``) and nothing is kept. A
        device of a driver no longer installed raises ``ResourceClosedError``.
        """
        self._check_driver()
        mr = self._memory_resource
        if mr is not None:
            return mr
        default = self._default_mr
        if default is None or default._closed:
            from cuguard.resources._pools import DeviceMemoryResource

            made = DeviceMemoryResource(self)
            with _devices_lock:  # one default per device, whichever thread made it first
                default = self._default_mr
                if default is None or default._closed:
                    default = self._default_mr = made
        return default

    @memory_resource.setter
    def memory_resource(self, mr: MemoryResource[Any]) -> None:
        from cuguard.resources._memres import MemoryResource

        if not isinstance(mr, MemoryResource):
            raise wrong_kind("memory_resource", "a MemoryResource (DeviceMemoryResource, PinnedMemoryResource...)", mr)
        self._check_driver()
        mr._check_usable()
        device = mr.device_id
        if device is not None and device != self._ordinal:
            raise ValueError(f"{mr!r} allocates memory of device {device}, not of {self!r}")
        self._memory_resource = None if mr is self._default_mr else mr

    def set_current(self) -> Context | None:
        """Make the device's primary context current; return the previously current context."""
        return self.context.set_current()

    def __enter__(self) -> Device:
        """``with dev:`` makes the device's primary context current for the block (``with dev.context:``).

        The caller's context is restored when the block ends, whatever happens
        inside; blocks nest and re-enter, per thread. Switches only when
        another context is current (C1). Raises what :attr:`context` and
        :meth:`Context.__enter__ <cuguard.context.Context.__enter__>` raise;
        the current context is then as before.
        """
        self.context.__enter__()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Restore the caller's context, as ``Context.__exit__`` does (a failure: C2, or a note under G4)."""
        context = self._context
        if context is None:  # pragma: no cover - __enter__ retained it
            raise RuntimeError(f"{self!r}: __exit__ without a matching __enter__ on this thread")
        context.__exit__(exc_type, exc, tb)

    def sync(self) -> None:
        """Wait for all work on the device's primary context.

        Switches to it only if another context is current, and restores the
        caller's context (G2, C1). A kernel fault surfaces here as a sticky
        :class:`~cuguard.errors.CUDAError`.
        """
        call_in(self.context, _ctx_sync, None)
        if _racing:
            _race.context_synced(self.context)

    def create_stream(self, obj: Any = None, *, non_blocking: bool = False, priority: int | None = None) -> Stream:
        """A new stream on this device (``non_blocking``: does not wait on the legacy default stream).

        With ``obj`` (a :class:`Stream` or any object with ``__cuda_stream__``,
        such as another library's stream) no stream is created: ``obj``'s
        stream is wrapped without being owned, as :func:`as_stream` does
        (closing the wrapper destroys nothing; the wrapper keeps ``obj``
        alive). ``obj`` with ``non_blocking`` or ``priority`` raises
        ``ValueError``, a stream of another device ``ValueError``, anything
        else ``TypeError``. ``priority`` is an integer (NumPy's too; a bool or
        a float raises ``TypeError``, one outside the 32-bit range ``ValueError``);
        the driver clamps it to the device's range. Raises :class:`~cuguard.errors.CUDAError` if the
        driver refuses; no stream exists then, and the caller's context is
        unchanged (G1, G2).
        """
        if obj is not None:
            return self._wrap_stream(obj, non_blocking, priority)
        if priority is not None:
            priority = int_argument("priority", priority, -INT_LIMIT, INT_LIMIT)
        return stream_on(self, 1 if non_blocking else 0, priority)

    def _wrap_stream(self, obj: Any, non_blocking: object, priority: object) -> Stream:
        self._check_driver()
        if isinstance(obj, Stream):
            obj._check_open()
            stream = Stream.wrap(obj, obj._context)
        else:
            stream = as_stream(obj, "obj")
            # A stream-like of cuguard's own (a GraphBuilder) hands its Stream itself: one closed
            # meanwhile is refused, never handed back as if it were new (E3).
            stream._check_open()
        if non_blocking or priority is not None:
            raise ValueError("non_blocking and priority apply to new streams, not to a wrapped obj")
        if stream._device != self._ordinal:
            raise ValueError(f"{obj!r} is a stream of device {stream._device}, not of {self!r}")
        return stream

    # Create an event: the function itself (its docstring says what happens on failure), so that the
    # compiled build calls it without a Python frame.
    create_event = event_on

    # Allocate device memory: the function itself (its docstring says what happens on failure), so that
    # the compiled build calls it without a Python frame.
    allocate = allocate_on

    def allocate_pinned(self, size: int) -> PinnedBuffer:
        """Allocate ``size`` bytes of page-locked host memory.

        Raises :class:`~cuguard.errors.CUDAError` if the driver refuses (nothing
        is allocated then) and ``TypeError``/``ValueError`` for a bad size (as
        :meth:`allocate`: NumPy integers are taken, ``2**64`` or more is a ``ValueError``).
        """
        return PinnedBuffer._allocate(self.context, size)

    def load_module(self, image: bytes | str) -> Module:
        """Load a PTX or cubin image into this device's primary context.

        Bad bytes raise :class:`~cuguard.errors.CUDAError`
        (``CUDA_ERROR_INVALID_IMAGE``); nothing is loaded then, and the caller's
        context is unchanged.
        """
        return Module.load(self.context, image)

    def __repr__(self) -> str:
        return f"<Device {self._ordinal}>"


def stream_on(device: Device, flags: int, priority: int | None) -> Stream:
    """:meth:`Device.create_stream` without ``obj``, once its arguments are checked: ``flags`` 0 or 1
    (``CU_STREAM_NON_BLOCKING``), ``priority`` an int in range or ``None``. Same failures.

    In the compiled build ``device`` and its context are typed (``_device.pxd``): their fields are C reads.
    """
    context = device._context
    if context is None:
        context = device.context
    if priority is None and not context._closed:
        fp = _fp
        if fp is None:
            # Fast path: the device's context is current already, so no switch (C1).
            err, current = driver.cuCtxGetCurrent()
            if err:  # never swallowed: the slow path would ask again, a retry (C4)
                raise_status(err, "cuCtxGetCurrent")
            if current == context._handle:
                err, handle = driver.cuStreamCreate(flags)
                if err:
                    raise_status(err, "cuStreamCreate")
            else:  # another context is current: switch in, create, restore (C1), call_in's path inlined
                handle = call_switched(
                    context, current, driver.cuStreamCreate, "cuStreamCreate", _stream_destroy, flags
                )
        else:
            # Compiled: the context check and the create in one call (statuses back; raised here).
            err, handle = fp.stream_create(context._int, flags)
            if err:
                handle = _compiled_refused(
                    context, err, handle, "stream_create_switched", "cuStreamCreate", _stream_destroy, flags
                )
        stream = new_stream(handle, context, device._ordinal)
        if _racing:
            _race.stream_created(stream, flags == 1)
        return stream
    handle = call_in(context, _stream_create, _stream_destroy, flags, priority)
    stream = Stream._make(handle, context, device._ordinal)
    if _racing:
        _race.stream_created(stream, flags == 1)
    return stream
