"""Modules, libraries, kernels and kernel launches of the simulated driver.

:class:`SimModules` builds on :class:`~cuguard.testing._sim.streams.SimStreams`; images are read
with :mod:`cuguard.testing._sim.parsers`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from cuda.bindings import driver as cb

from cuguard.testing._sim.accounting import SimulatedFault
from cuguard.testing._sim.base import (
    DEVICE_BASE,
    INVALID_HANDLE,
    INVALID_VALUE,
    OK,
    SUCCESS,
    R,
    Status,
    _byte_view,
    _is_buffer,
    api,
    h,
)
from cuguard.testing._sim.parsers import param_layout, parse_elf_functions, parse_ptx, ptx_trivial_entries
from cuguard.testing._sim.standins import (
    DevicePointer,
    KernelLaunch,
    MissingStandInError,
    kernel_names,
    learn_lowered_names,
    stand_in_for,
)
from cuguard.testing._sim.state import Ctx, Function, Module
from cuguard.testing._sim.streams import SimStreams

if TYPE_CHECKING:
    from cuguard.testing._sim.core import SimCore

__all__ = ["SimModules"]

_PTR = ctypes.sizeof(ctypes.c_void_p)


class SimModules(SimStreams):
    """Kernel emulations and images, module and library loading, function queries and launches."""

    # --- kernel emulations and declared images ----------------------------------------------------

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

    def _stand_in_args(self, fn: Function, args: tuple[Any, ...]) -> tuple[Any, ...]:
        declared = fn.module.entries.get(fn.name)
        driver = cast("SimCore", self)  # the whole driver: a pointer reads and writes its memory
        out: list[Any] = []
        for i, value in enumerate(args):
            ctype = declared[i] if declared is not None and i < len(declared) else None
            if isinstance(value, int) and (ctype is None or ctype in _POINTER_LIKE):
                out.append(DevicePointer(value, driver))
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
    del SimModules.cuFuncGetParamCount

_POINTER_LIKE = frozenset({ctypes.c_uint64, ctypes.c_void_p})


def _arg_bytes(value: Any, given: Any) -> bytes:
    """The bytes cuda-bindings puts in the parameter buffer for one ``(value, ctype)`` argument."""
    if isinstance(value, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure)):
        return bytes(value)
    if given is None:
        return ctypes.c_uint64(h(value)).value.to_bytes(8, "little")
    return bytes(given(value))
