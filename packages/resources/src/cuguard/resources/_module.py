"""Loading modules, kernels, launch configurations and launching kernels.

Compiling and linking are in :mod:`cuguard.resources._program`; kernel
attributes, occupancy and launches with attributes in :mod:`cuguard.resources._launch`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from cuguard.context import Context, call_in
from cuguard.errors import CUDAError, StickyCUDAError, driver, format_handle, is_sticky, raise_status
from cuguard.errors.lowlevel import (
    ATTRIBUTING,
    INT_LIMIT,
    UINT_LIMIT,
    int_argument,
    is_integer,
    out_of_range,
    refuse_construction,
    wrong_kind,
)
from cuguard.errors.owners import Unique  # from its defining module: the compiled Kernel derives from it
from cuguard.resources import _captures, _race
from cuguard.resources._base import Resource
from cuguard.resources._captures import _tables as _capture_tables  # never rebound: read on each operation
from cuguard.resources._fast import follow_compiled
from cuguard.resources._launch import KernelAttributes, KernelOccupancy, launch_ex
from cuguard.resources._memory import Buffer, PinnedBuffer
from cuguard.resources._objectcode import LOADABLE, ObjectCode, share_lowered_names
from cuguard.resources._params import KernelParameter, Signature, parse_ptx_signatures, query_signature
from cuguard.resources._stream import Stream, as_stream
from cuguard.resources._view import StridedMemoryView, check_read_only, memory_uses

__all__ = ["Kernel", "LaunchConfig", "Module", "launch"]

# The compiled build's driver calls while in use and the seam routes to the real bindings, else None (_fast).
_fp: Any = None


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


# --- modules and kernels ------------------------------------------------------------


def _module_load(image: bytes) -> Any:
    err, module = driver.cuModuleLoadData(image)
    if err:
        raise_status(err, "cuModuleLoadData")
    return module


def _module_unload(module: Any) -> None:
    (err,) = driver.cuModuleUnload(module)
    if err:
        raise_status(err, "cuModuleUnload")


def _module_unload_status(module: Any) -> tuple[Any, str]:
    (err,) = driver.cuModuleUnload(module)
    return err, "cuModuleUnload"


class Module(Resource):
    """A loaded PTX or cubin image in one context.

    Load with :meth:`Device.load_module` (or :meth:`Module.load`). Loading
    garbage raises :class:`~cuguard.errors.CUDAError`
    (``CUDA_ERROR_INVALID_IMAGE``) and loads nothing.
    """

    __slots__ = ("_device", "_signatures", "_symbols")
    _what = "module"
    _factory = "Device.load_module() or Module.load()"
    # cuModuleUnload is one of the calls a global capture prohibits (an H200 refused a collected module's
    # unload beside a capture): collections run with the thread in relaxed capture mode (G6).
    _capture_unsafe_release = True
    _explicit_release_relaxed = False  # an explicit unload keeps CUDA's rule (the user's own request)
    _device: int
    _signatures: dict[str, tuple[KernelParameter, ...]]
    _symbols: dict[str, str]

    @classmethod
    def load(cls, context: Context, image: bytes | str | ObjectCode) -> Module:
        """Load ``image`` (PTX text, a cubin, or an :class:`ObjectCode`) into ``context``.

        The lowered names of an :class:`ObjectCode`'s name expressions are
        kept, so :meth:`get_kernel` finds ``"saxpy<float>"``. Raises
        ``TypeError`` for an image of another kind, ``ValueError`` for an
        :class:`ObjectCode` that cannot be loaded (LTO IR, an object, a
        library), ``ResourceClosedError`` for a closed context and
        :class:`~cuguard.errors.CUDAError` if the driver refuses (for example
        ``CUDA_ERROR_INVALID_IMAGE``); nothing is loaded then and the caller's
        context is unchanged.
        """
        if not isinstance(context, Context):
            raise wrong_kind("context", "a Context", context)
        symbols: dict[str, str] = {}
        if isinstance(image, ObjectCode):
            if image.code_type not in LOADABLE:
                raise ValueError(f"a {image.code_type} image cannot be loaded; link it into a cubin first")
            symbols = image._symbols
            image = image.code
        if isinstance(image, str):
            image = image.encode()
        if not isinstance(image, bytes | bytearray):
            raise TypeError(f"a module image must be bytes, str or an ObjectCode, not {type(image).__name__}")
        data = bytes(image)
        if not data.endswith(b"\x00"):
            data += b"\x00"
        signatures = {} if data.startswith(b"\x7fELF") else parse_ptx_signatures(data)
        device = context.device  # may ask the driver: before anything is loaded (G1)
        share_lowered_names(symbols)  # a simulated driver's stand-ins may use the name expressions
        handle = call_in(context, _module_load, _module_unload, data)
        self = cls.__new__(cls)
        self._init(handle, context)
        self._device = device
        self._signatures = signatures
        self._symbols = dict(symbols)
        return self

    def _release(self, raising: bool) -> tuple[Any, str]:
        return self._release_in_context(raising, _module_unload_status)

    def get_kernel(self, name: str) -> Kernel:
        """The kernel ``name``: an ``extern "C"`` or mangled entry name, or a name expression.

        A name expression (``"saxpy<float>"``) given to
        :meth:`Program.compile` is found through the lowered name recorded in
        the :class:`ObjectCode` the module was loaded from. A missing name raises :class:`~cuguard.errors.CUDAError`
        (``CUDA_ERROR_NOT_FOUND``) whose message names the symbol. The kernel's
        parameter list comes from the PTX text the module was loaded from or,
        for a cubin, from the driver (``cuFuncGetParamInfo``), whose failure
        raises :class:`~cuguard.errors.CUDAError`; see :attr:`Kernel.parameters`.
        """
        if not isinstance(name, str):
            raise TypeError(f"a kernel name must be a str, not {type(name).__name__}")
        handle = self.handle  # checked before the driver is looked up (O3)
        entry = self._symbols.get(name, name)
        err, function = driver.cuModuleGetFunction(handle, entry.encode())
        if err:
            raise CUDAError(err, "cuModuleGetFunction", f"kernel {name!r} not found in {self!r}")
        params = self._signatures.get(entry)
        if params is None:
            params = query_signature(function, entry)
        return Kernel._make(function, name, self, None if params is None else Signature(name, params))


class Kernel(Unique):
    """A kernel of a loaded :class:`Module`; keeps its module alive.

    Made by :meth:`Module.get_kernel`. ``handle`` is the ``CUfunction``,
    ``name`` the entry name and ``module`` the :class:`Module`. A kernel of a
    closed module is refused by :func:`launch` with ``ResourceClosedError``.
    """

    __slots__ = ("_address", "_handle", "_module", "_name", "_signature")

    _handle: Any
    _address: int  # the CUfunction's address, as the compiled launch takes it (no conversion per launch)
    _signature: Signature | None
    _name: str
    _module: Module

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(Kernel, "Module.get_kernel()")

    @classmethod
    def _make(cls, handle: Any, name: str, module: Module, signature: Signature | None = None) -> Kernel:
        self = cls.__new__(cls)
        self._handle = handle
        self._address = int(handle)
        self._name = name
        self._module = module
        self._signature = signature
        return self

    @property
    def name(self) -> str:
        """The name the kernel was asked for (:meth:`Module.get_kernel`). Never refuses: no driver call."""
        return self._name

    @property
    def module(self) -> Module:
        """The :class:`Module` the kernel belongs to (kept alive by it). Never refuses, even once the module is
        closed (its methods refuse then); no driver call."""
        return self._module

    @property
    def attributes(self) -> KernelAttributes:
        """The kernel's attributes (``cuFuncGetAttribute``): ``kernel.attributes.num_regs()``..."""
        return KernelAttributes(self)

    @property
    def occupancy(self) -> KernelOccupancy:
        """Occupancy queries: ``kernel.occupancy.max_active_blocks_per_multiprocessor(256, 0)``..."""
        return KernelOccupancy(self)

    @property
    def num_arguments(self) -> int | None:
        """The number of parameters, or ``None`` when the parameter list is unknown."""
        sig = self._signature
        return None if sig is None else len(sig.params)

    @property
    def parameters(self) -> tuple[KernelParameter, ...] | None:
        """The kernel's parameters, or ``None`` when neither its PTX nor the driver says what they are.

        With a parameter list, launch arguments are checked and packed against
        it (see :meth:`pack`); without one (a cubin on a driver older than
        12.4), they are packed by their Python type (see :func:`pack_args`).
        """
        sig = self._signature
        return None if sig is None else sig.params

    def pack(self, args: Sequence[Any]) -> tuple[Any, Any]:
        """``(kernelParams, keep)``: ``args`` as ``cuLaunchKernel`` takes them, checked against the parameters.

        ``keep`` must stay referenced until the driver call that reads
        ``kernelParams`` returns. With a parameter list: exactly one argument
        per parameter; a :class:`Buffer`, :class:`PinnedBuffer` or device-accessible
        :class:`StridedMemoryView` (its address)
        or an int for an integer parameter, in its signed or unsigned range; a float or an int for a float
        parameter (a Python float becomes a 32- or 64-bit float by the
        parameter's size); ``bytes`` or a ctypes object of exactly the size for
        a by-value struct. Anything else raises ``TypeError`` naming the kernel,
        the parameter and the value; nothing reaches the driver. Without a
        parameter list, :func:`pack_args`. A kernel of a closed module raises
        :class:`~cuguard.errors.ResourceClosedError`.
        """
        module = self._module
        if module._closed or module._context._closed:
            module._check_open()  # a kernel of a closed module (or another driver's) refuses use
        sig = self._signature
        if sig is not None:
            return sig.pack(args)
        return (pack_args(args) if args else 0), None

    @property
    def handle(self) -> Any:
        """The ``CUfunction``; raises :class:`~cuguard.errors.ResourceClosedError` once its module refuses use."""
        module = self._module
        if module._closed or module._context._closed:
            module._check_open()
        return self._handle

    def __repr__(self) -> str:
        return f"<Kernel {self._name!r}>"


class LaunchConfig:
    """The shape of a launch, with ``cuda.core``'s keywords.

    ``LaunchConfig(grid=1, block=1, *, cluster=None, shmem_size=0,
    cooperative_launch=False, programmatic_stream_serialization=False,
    priority=None)``. ``grid``, ``block`` and ``cluster`` are an
    int or a tuple of up to three ints, each 1 or more and below ``2**32``
    (NumPy integers are taken and kept as plain ints). As in ``cuda.core``,
    when ``cluster`` is given ``grid`` counts clusters, not blocks (the launch
    has ``grid * cluster`` blocks per dimension). ``shmem_size`` is the
    dynamic shared memory per block in bytes (``shared_mem`` is accepted as
    another name for it, and read back as an attribute), 0 or more and below
    ``2**32``; ``grid * cluster`` must stay below ``2**32``. ``is_cooperative``
    is another name for ``cooperative_launch``. ``priority`` (an int, as in
    cuda.core) is the launch's execution priority, lower numbers being higher
    priorities; ``None`` or 0 leaves the stream's priority.
    ``programmatic_stream_serialization=True`` (a bool) allows programmatic
    dependent launch: the kernel may start before the previous kernel on the
    stream has finished, once that one signals it. Only ``grid`` and ``block``
    may be given by position (a third positional argument is a
    ``TypeError``, so ``cuda.core``'s positional ``(grid, cluster, block)``
    is refused rather than misread).

    Bad values raise ``TypeError`` (a bool, a float, another object) or
    ``ValueError`` (out of range) at construction, naming the parameter. A config
    with ``cluster``, ``cooperative_launch``, a ``priority`` or
    ``programmatic_stream_serialization`` is launched with ``cuLaunchKernelEx``
    and those launch attributes, after they are checked against the stream's
    device (see :func:`launch`). Immutable, hashable,
    compared by value, picklable.
    """

    __slots__ = (
        "_cluster_dims",
        "_ex",
        "_launch_dims",
        "block",
        "cluster",
        "cooperative_launch",
        "grid",
        "priority",
        "programmatic_stream_serialization",
        "shmem_size",
    )

    grid: int | tuple[int, ...]
    block: int | tuple[int, ...]
    cluster: int | tuple[int, ...] | None
    shmem_size: int
    cooperative_launch: bool
    programmatic_stream_serialization: bool
    priority: int | None
    _launch_dims: tuple[int, int, int, int, int, int, int]
    _cluster_dims: tuple[int, int, int]
    _ex: bool

    def __init__(
        self,
        grid: int | tuple[int, ...] = 1,
        block: int | tuple[int, ...] = 1,
        *,
        cluster: int | tuple[int, ...] | None = None,
        shmem_size: int | None = None,
        cooperative_launch: bool = False,
        shared_mem: int | None = None,
        is_cooperative: bool | None = None,
        programmatic_stream_serialization: bool = False,
        priority: int | None = None,
    ) -> None:
        g, grid = _dims(grid, "grid")
        b, block = _dims(block, "block")
        if shared_mem is not None and shmem_size is not None and shared_mem != shmem_size:
            raise ValueError("give shmem_size or shared_mem (the same thing), not both")
        shared = shmem_size if shmem_size is not None else (shared_mem if shared_mem is not None else 0)
        shared = int_argument("shmem_size" if shmem_size is not None else "shared_mem", shared, 0, UINT_LIMIT)
        if is_cooperative is not None:
            cooperative_launch = is_cooperative
        if not isinstance(cooperative_launch, bool):
            raise TypeError(f"cooperative_launch must be a bool, not {type(cooperative_launch).__name__}")
        if not isinstance(programmatic_stream_serialization, bool):
            raise wrong_kind("programmatic_stream_serialization", "a bool", programmatic_stream_serialization)
        if priority is not None:
            priority = int_argument("priority", priority, -INT_LIMIT, INT_LIMIT)  # a C int
        c, cluster = ((1, 1, 1), None) if cluster is None else _dims(cluster, "cluster")
        blocks = g
        if cluster is not None:
            blocks = (g[0] * c[0], g[1] * c[1], g[2] * c[2])
            for n in blocks:
                if n >= UINT_LIMIT:  # the driver's grid dimension is an unsigned int
                    raise out_of_range("grid * cluster", n, 1, UINT_LIMIT)
        put = object.__setattr__
        put(self, "grid", grid)
        put(self, "block", block)
        put(self, "cluster", cluster)
        put(self, "shmem_size", shared)
        put(self, "cooperative_launch", cooperative_launch)
        put(self, "programmatic_stream_serialization", programmatic_stream_serialization)
        put(self, "priority", priority)
        put(self, "_launch_dims", (*blocks, *b, shared))
        put(self, "_cluster_dims", c)
        attributes = cluster is not None or cooperative_launch or programmatic_stream_serialization or bool(priority)
        put(self, "_ex", attributes)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"LaunchConfig is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"LaunchConfig is immutable; cannot delete {name!r}")

    @property
    def shared_mem(self) -> int:
        """Another name for :attr:`shmem_size`."""
        return self.shmem_size

    @property
    def is_cooperative(self) -> bool:
        """Another name for :attr:`cooperative_launch`."""
        return self.cooperative_launch

    def dims(self) -> tuple[int, int, int, int, int, int]:
        """``(gx, gy, gz, bx, by, bz)`` as the driver gets them (grid in blocks, clusters included)."""
        return self._launch_dims[:6]

    def _key(self) -> tuple[Any, ...]:
        return (
            self._launch_dims,
            self.cluster is not None and self._cluster_dims,
            self.cooperative_launch,
            self.programmatic_stream_serialization,
            self.priority or 0,  # 0 and None both leave the stream's priority
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LaunchConfig):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _launch_config,
            (
                self.grid,
                self.block,
                self.cluster,
                self.shmem_size,
                self.cooperative_launch,
                self.programmatic_stream_serialization,
                self.priority,
            ),
        )

    def __repr__(self) -> str:
        extra = ""
        if self.cluster is not None:
            extra += f", cluster={self.cluster!r}"
        if self.cooperative_launch:
            extra += ", cooperative_launch=True"
        if self.programmatic_stream_serialization:
            extra += ", programmatic_stream_serialization=True"
        if self.priority is not None:
            extra += f", priority={self.priority}"
        return f"LaunchConfig(grid={self.grid!r}, block={self.block!r}{extra}, shmem_size={self.shmem_size})"


def _launch_config(  # noqa: PLR0917 - the pickled form of a LaunchConfig: its fields in order
    grid: Any,
    block: Any,
    cluster: Any,
    shmem_size: int,
    cooperative_launch: bool,
    programmatic_stream_serialization: bool = False,
    priority: int | None = None,
) -> LaunchConfig:
    return LaunchConfig(
        grid,
        block,
        cluster=cluster,
        shmem_size=shmem_size,
        cooperative_launch=cooperative_launch,
        programmatic_stream_serialization=programmatic_stream_serialization,
        priority=priority,
    )


def _dims(value: object, what: str) -> tuple[tuple[int, int, int], int | tuple[int, ...]]:
    """``value`` (an integer or a tuple of one to three) as three dimensions, each in ``[1, 2**32)``,
    and as given but with plain ints (E3)."""
    if is_integer(value):
        n = int_argument(what, value, 1, UINT_LIMIT)
        return (n, 1, 1), n
    try:
        items: tuple[object, ...] = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise wrong_kind(what, "an int or a tuple of up to three ints", value) from None
    if not 1 <= len(items) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, not {len(items)}")
    given = tuple(int_argument(what, d, 1, UINT_LIMIT) for d in items)
    return (*given, 1, 1)[:3], given  # type: ignore[return-value]


def pack_args(args: Sequence[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Kernel arguments in the ``(values, ctypes types)`` form cuda-bindings takes, by Python type.

    The rule for a kernel whose parameter list is unknown (see
    :attr:`Kernel.parameters`). Buffers pass their device address; pinned buffers their host address;
    a :class:`StridedMemoryView` its :attr:`~StridedMemoryView.ptr` (one of host memory raises ``TypeError``);
    Python ints are 64-bit (a little-endian 32-bit parameter reads the low
    half, so both widths work); Python floats are 32-bit floats (use
    ``numpy.float64`` for ``double``); NumPy scalars keep their exact type.
    Anything else raises ``TypeError``.
    """
    values: list[Any] = []
    types: list[Any] = []
    for arg in args:
        ctype = _SCALAR_CTYPES.get(type(arg))
        if ctype is not None:
            values.append(arg)
            types.append(ctype)
        elif isinstance(arg, Buffer | PinnedBuffer):
            values.append(arg._address())
            types.append(ctypes.c_void_p)
        elif isinstance(arg, StridedMemoryView):
            if not arg.is_device_accessible:
                raise TypeError(f"cannot pass {arg!r} to a kernel: no kernel can read host memory")
            values.append(arg.ptr)
            types.append(ctypes.c_void_p)
        elif isinstance(arg, bool):
            values.append(arg)
            types.append(ctypes.c_bool)
        elif isinstance(arg, int):
            values.append(arg)
            types.append(ctypes.c_int64)
        elif isinstance(arg, float):
            values.append(arg)
            types.append(ctypes.c_float)
        else:
            ctype = _numpy_ctype(arg)
            if ctype is None:
                raise TypeError(f"cannot pass {type(arg).__name__} to a kernel")
            values.append(arg.item())
            types.append(ctype)
    return tuple(values), tuple(types)


_SCALAR_CTYPES: dict[type, Any] = {int: ctypes.c_int64, float: ctypes.c_float, bool: ctypes.c_bool}

_NUMPY_CTYPES = {
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
    "bool": ctypes.c_bool,
}


def _numpy_ctype(arg: Any) -> Any:
    dtype = getattr(arg, "dtype", None)
    if dtype is None or getattr(arg, "shape", None) != ():
        return None
    return _NUMPY_CTYPES.get(str(dtype))


_NO_POSITIONS: Sequence[int] = ()  # launch's read_only default, told apart by identity
_NO_READS: frozenset[int] = frozenset()


def launch(
    stream: Stream, config: LaunchConfig, kernel: Kernel, *args: Any, read_only: Sequence[int] = _NO_POSITIONS
) -> None:
    """Queue ``kernel`` on ``stream`` with ``config`` and ``args`` (see :meth:`Kernel.pack`).

    ``read_only`` names, by position in ``args``, the memory arguments the
    kernel only reads: the race checker (:func:`racecheck`) counts every other
    buffer argument as read and written as a whole (a read-only
    :class:`StridedMemoryView` only reads). It changes nothing else; a position
    that is not an int raises ``TypeError``, one outside ``args`` ``ValueError``,
    before anything reaches the driver.

    Arguments that do not match the kernel's parameters raise ``TypeError``
    before anything reaches the driver. A plain config goes through
    ``cuLaunchKernel``; one with ``cluster``, ``cooperative_launch``, a
    ``priority`` or ``programmatic_stream_serialization`` through
    ``cuLaunchKernelEx`` with launch attributes, after checking the device:
    clusters need compute capability 9.0+ and cluster launch support,
    cooperative launches need cooperative launch support and a grid that fits
    on the device at once, a priority must lie in the device's stream priority
    range (``cuCtxGetStreamPriorityRange``), programmatic stream serialization
    needs compute capability 9.0+ (``ValueError`` saying why otherwise, before
    the launch).

    Raises :class:`~cuguard.errors.CUDAError` if the launch is refused (a bad
    configuration, a sticky error...); nothing was queued then. A fault inside
    the kernel surfaces later, at a synchronization, as a
    :class:`~cuguard.errors.StickyCUDAError` naming the first fault; with fault
    attribution on (:func:`~cuguard.errors.attribute_faults`), this call waits
    for the kernel and raises that error itself, naming this launch; a launch
    captured into a graph is not waited for (that would invalidate the
    capture): the graph's launch is attributed instead.
    """
    if type(config) is not LaunchConfig and not isinstance(config, LaunchConfig):
        raise wrong_kind("config", "a LaunchConfig", config)
    if type(kernel) is not Kernel:
        raise wrong_kind("kernel", "a Kernel", kernel)
    s = stream if type(stream) is Stream else as_stream(stream, "stream")
    reads = _NO_READS if read_only is _NO_POSITIONS else check_read_only(read_only, len(args))
    launch_checked(s, config, kernel, args, reads)


def launch_checked(stream: Stream, config: LaunchConfig, kernel: Kernel, args: tuple[Any, ...], reads: Any) -> None:
    """:func:`launch` once its arguments' kinds are checked: ``stream`` a :class:`Stream`, ``kernel`` a
    :class:`Kernel`, ``config`` a :class:`LaunchConfig`, ``reads`` what :func:`check_read_only` made.

    In the compiled build the stream and the kernel are typed (``_module.pxd``), so their fields are C reads.
    """
    module = kernel._module
    if module._closed or stream._closed or module._context._closed or stream._context._closed:
        module._check_open()
        stream._check_open()
    gx, gy, gz, bx, by, bz, shared = config._launch_dims
    sig = kernel._signature
    params: Any
    if sig is not None:
        # A kernel without parameters launched without arguments needs no packing (the hot path of tiny kernels).
        params, keep = sig.pack(args) if args or sig.params else (0, None)
    else:
        params, keep = (pack_args(args) if args else 0), None
    if config._ex:
        launch_ex(stream, config, kernel, params)
        del keep
    else:
        fp = _fp
        if fp is not None and type(params) is int:
            # Compiled: the packed parameter block's address goes straight to the driver; the status back.
            err = fp.launch(kernel._address, gx, gy, gz, bx, by, bz, shared, stream._handle, params)
        else:
            (err,) = driver.cuLaunchKernel(kernel._handle, gx, gy, gz, bx, by, bz, shared, stream._handle, params, 0)
        del keep  # the driver copied the arguments
        if err:
            raise_status(err, "cuLaunchKernel")
    if _capture_tables:
        owners = _captures.captured_into(stream)
        if owners is not None:  # captured: the graph keeps the kernel and the memory it uses from now on (G6)
            written, read = memory_uses(args, reads)
            _captures.retain(owners, [kernel, module, *written], read)
    if _racing:
        call = "cuLaunchKernelEx" if config._ex else "cuLaunchKernel"
        _race.launched(stream, f"{call} ({kernel._name})", args, reads)
    if ATTRIBUTING[0]:
        wait_attributed(stream, partial(describe_launch, kernel._name, config, args))


def describe_launch(name: str, config: LaunchConfig, args: Sequence[Any]) -> str:
    """``kernel 'name' (grid (g), block (b), args (...))``: what fault attribution names.

    ``TypeError`` for a ``name`` that is not a str or a ``config`` that is not a
    :class:`LaunchConfig`; never touches the driver.
    """
    if not isinstance(name, str):
        raise wrong_kind("name", "a str", name)
    if not isinstance(config, LaunchConfig):
        raise wrong_kind("config", "a LaunchConfig", config)
    args = tuple(args)
    shown = ", ".join(_describe_arg(arg) for arg in args[:8]) + (", ..." if len(args) > 8 else "")
    dims = config.dims()
    return f"the launch of kernel {name!r} (grid {dims[:3]}, block {dims[3:]}, args ({shown}))"


def _describe_arg(arg: Any) -> str:
    if isinstance(arg, Buffer):
        return f"Buffer {format_handle(arg._handle)} of {arg._size} bytes"
    if isinstance(arg, PinnedBuffer):
        return f"PinnedBuffer {format_handle(arg._handle)} of {arg._size} bytes"
    if isinstance(arg, StridedMemoryView):
        return f"StridedMemoryView 0x{arg._ptr:x} of shape {arg.shape}"
    text = repr(arg)
    return text if len(text) <= 24 else text[:21] + "..."


def wait_attributed(stream: Stream, describe: Callable[[], str]) -> None:
    """Fault attribution (E5): wait for ``stream``; a sticky fault is raised naming ``describe()``.

    A stream being captured into a graph (``cuStreamIsCapturing``: active or
    invalidated) is not waited for: its work runs only when the graph is
    launched, and waiting would invalidate the capture (G6); the fault is
    attributed at that graph's launch instead. Any other failure of the query
    or the wait is raised as it is (:class:`~cuguard.errors.CUDAError`).
    ``stream`` is a :class:`Stream` or any ``__cuda_stream__`` object (``TypeError`` otherwise,
    ``ResourceClosedError`` for one that refuses use); ``describe`` must be callable.
    """
    if type(stream) is not Stream:
        stream = as_stream(stream)
    if not callable(describe):
        raise wrong_kind("describe", "a callable returning the launch's description", describe)
    handle = stream.handle  # refuses a closed stream, or one of another driver, before the driver
    err, capturing = driver.cuStreamIsCapturing(handle)
    if err:
        raise_status(err, "cuStreamIsCapturing")
    if int(capturing):  # CU_STREAM_CAPTURE_STATUS_NONE is 0: captured work is attributed at the graph's launch
        return
    (err,) = driver.cuStreamSynchronize(handle)
    if err:
        if is_sticky(err):
            raise StickyCUDAError(err, "cuStreamSynchronize", launch=describe())
        raise_status(err, "cuStreamSynchronize")
