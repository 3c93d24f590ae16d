"""Compiling (NVRTC), linking (nvJitLink), loading modules, and launching kernels."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cuguard.context import Context, call_in
from cuguard.errors import (
    CUDAError,
    LibraryNotFoundError,
    NVJitLinkError,
    NVRTCError,
    StickyCUDAError,
    Unique,
    add_failure_note,
    attributing,
    driver,
    format_handle,
    is_sticky,
    raise_status,
    refuse_construction,
    report_error,
    wrong_kind,
)
from cuguard.resources._base import Resource
from cuguard.resources._memory import Buffer, PinnedBuffer
from cuguard.resources._params import KernelParameter, Signature, parse_ptx_signatures, query_signature
from cuguard.resources._stream import Stream, as_stream

__all__ = ["Kernel", "LaunchConfig", "Module", "Program", "launch", "link"]


# --- NVRTC -----------------------------------------------------------------------------


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - part of cuda-bindings
        raise RuntimeError(f"NVRTC bindings are unavailable: {exc}") from None
    return nvrtc


class Program:
    """CUDA C++ source, compiled with NVRTC to PTX or a cubin.

    ``options`` are NVRTC options such as ``"-arch=sm_90"`` or ``"-std=c++17"``.
    :meth:`compile` raises :class:`~cuguard.errors.NVRTCError` carrying the
    compiler's log when compilation fails; the NVRTC program is always
    destroyed, on success and on failure. Needs the NVRTC library (present
    where the CUDA toolkit or the ``nvidia-cuda-nvrtc`` wheel is installed).
    """

    def __init__(self, source: str, name: str = "program.cu", options: Sequence[str] = ()) -> None:
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, not {type(source).__name__}")
        self.source = source
        self.name = name
        self.options = tuple(options)

    def compile(self, target: str = "ptx") -> bytes:
        """Compile to ``"ptx"`` or ``"cubin"`` and return the image bytes.

        Raises ``ValueError`` for another target,
        :class:`~cuguard.errors.LibraryNotFoundError` (naming the package to
        install) when NVRTC cannot be loaded, and
        :class:`~cuguard.errors.NVRTCError` (with the compiler's log) when
        compilation fails; the NVRTC program is destroyed either way.
        """
        if target not in ("ptx", "cubin"):
            raise ValueError(f"target must be 'ptx' or 'cubin', not {target!r}")
        nvrtc = _nvrtc()
        try:
            err, prog = nvrtc.nvrtcCreateProgram(self.source.encode(), self.name.encode(), 0, [], [])
        except RuntimeError as exc:  # the library itself could not be loaded: no NVRTC call was made
            raise LibraryNotFoundError("NVRTC", "nvidia-cuda-nvrtc", str(exc).strip()) from None
        if err:
            raise NVRTCError(int(err), "nvrtcCreateProgram")
        try:
            opts = [o.encode() for o in self.options]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            if err:
                raise NVRTCError(int(err), "nvrtcCompileProgram", log=_nvrtc_log(nvrtc, prog))
            size_fn, get_fn = (
                (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
                if target == "ptx"
                else (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
            )
            err, size = size_fn(prog)
            if err:
                raise NVRTCError(int(err), size_fn.__name__)
            image = b" " * size
            (err,) = get_fn(prog, image)
            if err:
                raise NVRTCError(int(err), get_fn.__name__)
            result = bytes(image)
        except BaseException as exc:
            (derr,) = nvrtc.nvrtcDestroyProgram(prog)
            if derr:
                add_failure_note(exc, NVRTCError(int(derr), "nvrtcDestroyProgram"))
            raise
        (derr,) = nvrtc.nvrtcDestroyProgram(prog)
        if derr:  # the image is good; the program's host memory was leaked
            report_error(NVRTCError(int(derr), "nvrtcDestroyProgram"), prog, "the NVRTC program was leaked")
        return result


def _nvrtc_log(nvrtc: Any, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err or size <= 1:
        return ""
    log = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(prog, log)
    return "" if err else log.rstrip(b"\x00").decode(errors="replace")


# --- nvJitLink ---------------------------------------------------------------------------


def link(images: Sequence[bytes], arch: str, options: Sequence[str] = ()) -> bytes:
    """Link PTX or cubin ``images`` with nvJitLink into one cubin for ``arch`` (e.g. ``"sm_90"``).

    Raises :class:`~cuguard.errors.NVJitLinkError` with the linker's error log
    on failure (the linker handle is always destroyed), and
    :class:`~cuguard.errors.LibraryNotFoundError` (naming the package to
    install) when nvJitLink cannot be loaded.
    """
    try:
        from cuda.bindings import nvjitlink
    except ImportError as exc:  # pragma: no cover - part of cuda-bindings
        raise RuntimeError(f"nvJitLink bindings are unavailable: {exc}") from None
    opts = [f"-arch={arch}", *options]
    try:
        handle = nvjitlink.create(len(opts), opts)
    except nvjitlink.nvJitLinkError as exc:
        raise NVJitLinkError(int(getattr(exc, "status", 6)), "nvJitLinkCreate", log=str(exc)) from None
    except RuntimeError as exc:  # the library itself could not be loaded: no nvJitLink call was made
        raise LibraryNotFoundError("nvJitLink", "nvidia-nvjitlink", str(exc).strip()) from None
    try:
        for index, image in enumerate(images):
            kind = (
                nvjitlink.InputType.PTX
                if image.lstrip().startswith(b"//") or b".version" in image[:4096]
                else (nvjitlink.InputType.CUBIN)
            )
            try:
                nvjitlink.add_data(handle, kind, image, len(image), f"input{index}")
            except nvjitlink.nvJitLinkError as exc:
                raise NVJitLinkError(int(exc.status), "nvJitLinkAddData", log=_jit_log(nvjitlink, handle)) from None
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            raise NVJitLinkError(int(exc.status), "nvJitLinkComplete", log=_jit_log(nvjitlink, handle)) from None
        size = nvjitlink.get_linked_cubin_size(handle)
        out = bytearray(size)
        nvjitlink.get_linked_cubin(handle, out)
    except BaseException as exc:
        _destroy_linker(nvjitlink, handle, exc)
        raise
    _destroy_linker(nvjitlink, handle, None)
    return bytes(out)


def _destroy_linker(nvjitlink: Any, handle: Any, exc: BaseException | None) -> None:
    """Destroy the linker; a failure is a note on ``exc`` or, with none propagating, a warning."""
    try:
        nvjitlink.destroy(handle)
    except nvjitlink.nvJitLinkError as failure:
        error = NVJitLinkError(int(getattr(failure, "status", 6)), "nvJitLinkDestroy", log=str(failure))
        if exc is not None:
            add_failure_note(exc, error)
        else:
            report_error(error, handle, "the nvJitLink handle was leaked")


def _jit_log(nvjitlink: Any, handle: Any) -> str:
    try:
        size = nvjitlink.get_error_log_size(handle)
        log = bytearray(size)
        nvjitlink.get_error_log(handle, log)
        return log.rstrip(b"\x00").decode(errors="replace")
    except Exception:  # noqa: BLE001 - the log is best effort; the status is what is raised
        return ""


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

    __slots__ = ("_device", "_signatures")
    _what = "module"
    _factory = "Device.load_module() or Module.load()"
    _device: int
    _signatures: dict[str, tuple[KernelParameter, ...]]

    @classmethod
    def load(cls, context: Context, image: bytes | str) -> Module:
        """Load ``image`` (PTX text or a cubin) into ``context``.

        Raises ``TypeError`` for an image that is not ``bytes``/``str``,
        ``ResourceClosedError`` for a closed context and
        :class:`~cuguard.errors.CUDAError` if the driver refuses (for example
        ``CUDA_ERROR_INVALID_IMAGE``); nothing is loaded then and the caller's
        context is unchanged.
        """
        if not isinstance(context, Context):
            raise wrong_kind("context", "a Context", context)
        if isinstance(image, str):
            image = image.encode()
        if not isinstance(image, bytes | bytearray):
            raise TypeError(f"a module image must be bytes or str, not {type(image).__name__}")
        data = bytes(image)
        if not data.endswith(b"\x00"):
            data += b"\x00"
        signatures = {} if data.startswith(b"\x7fELF") else parse_ptx_signatures(data)
        handle = call_in(context, _module_load, _module_unload, data)
        self = object.__new__(cls)
        self._init(handle, context)
        self._device = context.device
        self._signatures = signatures
        return self

    def _release(self, raising: bool) -> tuple[Any, str]:
        return self._release_in_context(raising, _module_unload_status)

    def get_kernel(self, name: str) -> Kernel:
        """The kernel ``name`` (an ``extern "C"`` or mangled entry name).

        A missing name raises :class:`~cuguard.errors.CUDAError`
        (``CUDA_ERROR_NOT_FOUND``) whose message names the symbol. The kernel's
        parameter list comes from the PTX text the module was loaded from or,
        for a cubin, from the driver (``cuFuncGetParamInfo``), whose failure
        raises :class:`~cuguard.errors.CUDAError`; see :attr:`Kernel.parameters`.
        """
        if not isinstance(name, str):
            raise TypeError(f"a kernel name must be a str, not {type(name).__name__}")
        handle = self.handle  # checked before the driver is looked up (O3)
        err, function = driver.cuModuleGetFunction(handle, name.encode())
        if err:
            raise CUDAError(err, "cuModuleGetFunction", f"kernel {name!r} not found in {self!r}")
        params = self._signatures.get(name)
        if params is None:
            params = query_signature(function, name)
        return Kernel._make(function, name, self, None if params is None else Signature(name, params))


class Kernel(Unique):
    """A kernel of a loaded :class:`Module`; keeps its module alive.

    Made by :meth:`Module.get_kernel`. ``handle`` is the ``CUfunction``,
    ``name`` the entry name and ``module`` the :class:`Module`. A kernel of a
    closed module is refused by :func:`launch` with ``ResourceClosedError``.
    """

    __slots__ = ("_handle", "_signature", "module", "name")

    _handle: Any
    _signature: Signature | None
    name: str
    module: Module

    def __init__(self, *args: object, **kwargs: object) -> None:
        refuse_construction(Kernel, "Module.get_kernel()")

    @classmethod
    def _make(cls, handle: Any, name: str, module: Module, signature: Signature | None = None) -> Kernel:
        self = object.__new__(cls)
        self._handle = handle
        self.name = name
        self.module = module
        self._signature = signature
        return self

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
        per parameter; a :class:`Buffer` or :class:`PinnedBuffer` (its address)
        or an int for an integer parameter, in its signed or unsigned range; a float or an int for a float
        parameter (a Python float becomes a 32- or 64-bit float by the
        parameter's size); ``bytes`` or a ctypes object of exactly the size for
        a by-value struct. Anything else raises ``TypeError`` naming the kernel,
        the parameter and the value; nothing reaches the driver. Without a
        parameter list, :func:`pack_args`. A kernel of a closed module raises
        :class:`~cuguard.errors.ResourceClosedError`.
        """
        module = self.module
        if module._closed or module._context._closed:
            module._check_open()  # a kernel of a closed module (or another driver's) refuses use
        sig = self._signature
        if sig is not None:
            return sig.pack(args)
        return (pack_args(args) if args else 0), None

    @property
    def handle(self) -> Any:
        """The ``CUfunction``; raises :class:`~cuguard.errors.ResourceClosedError` once its module refuses use."""
        module = self.module
        if module._closed or module._context._closed:
            module._check_open()
        return self._handle

    def __repr__(self) -> str:
        return f"<Kernel {self.name!r}>"


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block shape of a launch, and its dynamic shared memory in bytes.

    ``grid`` and ``block`` are an int or a tuple of up to three ints, each 1 or
    more; anything else raises ``ValueError``/``TypeError`` at construction.
    """

    grid: int | tuple[int, ...] = 1
    block: int | tuple[int, ...] = 1
    shared_mem: int = 0
    _launch_dims: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dims = (*_dims(self.grid, "grid"), *_dims(self.block, "block"))
        if isinstance(self.shared_mem, bool) or not isinstance(self.shared_mem, int) or self.shared_mem < 0:
            raise ValueError(f"shared_mem must be an int of 0 or more, not {self.shared_mem!r}")
        object.__setattr__(self, "_launch_dims", (*dims, self.shared_mem))

    def dims(self) -> tuple[int, int, int, int, int, int]:
        """``(gx, gy, gz, bx, by, bz)``."""
        return self._launch_dims[:6]  # type: ignore[return-value]


def _dims(value: int | tuple[int, ...], what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, not {len(dims)}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"{what} dimensions must be ints, not {type(d).__name__}")
        if d < 1:
            raise ValueError(f"{what} dimensions must be 1 or more, not {d}")
    return (*dims, 1, 1)[:3]  # type: ignore[return-value]


def pack_args(args: Sequence[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Kernel arguments in the ``(values, ctypes types)`` form cuda-bindings takes, by Python type.

    The rule for a kernel whose parameter list is unknown (see
    :attr:`Kernel.parameters`). Buffers pass their device address; pinned buffers their host address;
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
            values.append(int(arg.handle))
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


def launch(stream: Stream, config: LaunchConfig, kernel: Kernel, *args: Any) -> None:
    """Queue ``kernel`` on ``stream`` with ``config`` and ``args`` (see :meth:`Kernel.pack`).

    Arguments that do not match the kernel's parameters raise ``TypeError``
    before anything reaches the driver.

    Raises :class:`~cuguard.errors.CUDAError` if the launch is refused (a bad
    configuration, a sticky error...); nothing was queued then. A fault inside
    the kernel surfaces later, at a synchronization, as a
    :class:`~cuguard.errors.StickyCUDAError` naming the first fault; with fault
    attribution on (:func:`~cuguard.errors.attribute_faults`), this call waits
    for the kernel and raises that error itself, naming this launch.
    """
    if type(config) is not LaunchConfig and not isinstance(config, LaunchConfig):
        raise wrong_kind("config", "a LaunchConfig", config)
    if type(kernel) is not Kernel:
        raise wrong_kind("kernel", "a Kernel", kernel)
    if type(stream) is not Stream:
        stream = as_stream(stream, "stream")
    module = kernel.module
    if module._closed or stream._closed or module._context._closed or stream._context._closed:
        module._check_open()
        stream._check_open()
    gx, gy, gz, bx, by, bz, shared = config._launch_dims
    sig = kernel._signature
    params: Any
    if sig is not None:
        params, keep = sig.pack(args)
    else:
        params, keep = (pack_args(args) if args else 0), None
    (err,) = driver.cuLaunchKernel(kernel._handle, gx, gy, gz, bx, by, bz, shared, stream._handle, params, 0)
    del keep  # the driver copied the arguments
    if err:
        raise_status(err, "cuLaunchKernel")
    if attributing():
        wait_attributed(stream, lambda: describe_launch(kernel.name, config, args))


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
    text = repr(arg)
    return text if len(text) <= 24 else text[:21] + "..."


def wait_attributed(stream: Stream, describe: Callable[[], str]) -> None:
    """Fault attribution (E5): wait for ``stream``; a sticky fault is raised naming ``describe()``.

    Any other failure of the wait is raised as it is (:class:`~cuguard.errors.CUDAError`).
    ``stream`` is a :class:`Stream` or any ``__cuda_stream__`` object (``TypeError`` otherwise,
    ``ResourceClosedError`` for one that refuses use); ``describe`` must be callable.
    """
    if type(stream) is not Stream:
        stream = as_stream(stream)
    if not callable(describe):
        raise wrong_kind("describe", "a callable returning the launch's description", describe)
    handle = stream.handle  # refuses a closed stream, or one of another driver, before the driver
    (err,) = driver.cuStreamSynchronize(handle)
    if err:
        if is_sticky(err):
            raise StickyCUDAError(err, "cuStreamSynchronize", launch=describe())
        raise_status(err, "cuStreamSynchronize")
