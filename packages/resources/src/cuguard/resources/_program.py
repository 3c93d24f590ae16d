"""Compiling with NVRTC (:class:`Program`) and linking with nvJitLink (:class:`Linker`, :func:`link`).

Names and keywords follow ``cuda.core``: ``Program(code, code_type, options)``,
:class:`ProgramOptions`, ``compile(target_type, name_expressions, logs)``
returning an :class:`~cuguard.resources.ObjectCode`, ``Linker(*object_codes,
options=LinkerOptions(...))``. No NVRTC program or nvJitLink handle outlives
the call that made it: each is destroyed before the call returns or raises.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import IO, Any, TypeVar

from cuguard.errors import LibraryNotFoundError, NVJitLinkError, NVRTCError, add_failure_note, report_error
from cuguard.errors.lowlevel import INT_LIMIT, deferring_lock, int_argument, is_integer, wrong_kind
from cuguard.resources._objectcode import ObjectCode

__all__ = ["Linker", "LinkerOptions", "Program", "ProgramCache", "ProgramOptions", "link"]

_CODE_TYPES = ("c++", "ptx")
_CXX_TARGETS = ("ptx", "cubin", "ltoir")
_LINK_TARGETS = ("cubin", "ptx", "ltoir")

_StrList = str | Sequence[str] | None
_O = TypeVar("_O")
_Macro = str | tuple[str, str]


def _options_from_mapping(cls: type[_O], options: Mapping[Any, Any], what: str) -> _O:
    """``cls(**options)`` as cuda.core does for a dict of options, with each key checked first.

    A key that is not a field of ``cls`` raises ``TypeError`` naming it (and
    ``what``, the parameter); the values are checked by ``cls`` itself
    (``TypeError``/``ValueError``). Nothing reaches NVRTC or nvJitLink.
    """
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]  # ProgramOptions and LinkerOptions: dataclasses
    for key in options:
        if not isinstance(key, str):
            raise TypeError(f"{what}: option names must be str, not {type(key).__name__} ({key!r})")
        if key not in known:
            raise TypeError(f"{what}: {cls.__name__} has no option {key!r}")
    return cls(**options)


def _strings(value: _StrList, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"{what} must be a str or a sequence of str, not {value!r}")


def _flag(value: bool | None, what: str) -> str:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a bool or None, not {value!r}")
    return "true" if value else "false"


@dataclass(frozen=True)
class ProgramOptions:
    """NVRTC options with ``cuda.core``'s names; ``None`` leaves NVRTC's default.

    ``name`` names the program in the compiler's messages and is the
    :attr:`ObjectCode.name` of the result. ``arch`` is ``"sm_90"`` (a cubin,
    or PTX for that target) or ``"compute_90"``; ``None`` is NVRTC's own
    default (not the current device's). ``std`` is e.g. ``"c++17"``.
    ``define_macro`` takes ``"NAME"``, ``"NAME=VALUE"``, ``("NAME", "VALUE")``
    or a sequence of those. ``extra`` is a sequence of raw NVRTC options
    appended last. :meth:`as_options` gives the NVRTC command line; it raises
    ``TypeError``/``ValueError`` for a value of the wrong kind.
    """

    name: str = "default_program"
    arch: str | None = None
    relocatable_device_code: bool | None = None
    extensible_whole_program: bool | None = None
    debug: bool | None = None
    lineinfo: bool | None = None
    device_code_optimize: bool | None = None
    ptxas_options: _StrList = None
    max_register_count: int | None = None
    ftz: bool | None = None
    prec_sqrt: bool | None = None
    prec_div: bool | None = None
    fma: bool | None = None
    use_fast_math: bool | None = None
    extra_device_vectorization: bool | None = None
    link_time_optimization: bool | None = None
    define_macro: _Macro | Sequence[_Macro] | None = None
    undefine_macro: _StrList = None
    include_path: _StrList = None
    pre_include: _StrList = None
    no_source_include: bool | None = None
    std: str | None = None
    builtin_move_forward: bool | None = None
    builtin_initializer_list: bool | None = None
    disable_warnings: bool | None = None
    restrict: bool | None = None
    device_as_default_execution_space: bool | None = None
    device_int128: bool | None = None
    no_display_error_number: bool | None = None
    diag_error: int | Sequence[int] | None = None
    diag_suppress: int | Sequence[int] | None = None
    diag_warn: int | Sequence[int] | None = None
    brief_diagnostics: bool | None = None
    extra: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise wrong_kind("name", "a str", self.name)
        self.as_options()  # refuse bad values at construction

    def as_options(self) -> list[str]:
        """The NVRTC command line these options stand for."""
        out: list[str] = []
        if self.arch is not None:
            if not isinstance(self.arch, str) or not self.arch.startswith(("sm_", "compute_")):
                raise ValueError(f"arch must be like 'sm_90' or 'compute_90', not {self.arch!r}")
            out.append(f"-arch={self.arch}")
        if self.std is not None:
            if not isinstance(self.std, str):
                raise wrong_kind("std", "a str such as 'c++17'", self.std)
            out.append(f"-std={self.std}")
        switches = (
            ("relocatable_device_code", "-rdc"),
            ("device_code_optimize", "-dopt"),
            ("ftz", "-ftz"),
            ("prec_sqrt", "-prec-sqrt"),
            ("prec_div", "-prec-div"),
            ("fma", "-fmad"),
            ("builtin_move_forward", "-builtin-move-forward"),
            ("builtin_initializer_list", "-builtin-initializer-list"),
            ("device_int128", None),
        )
        for attr, option in switches:
            value = getattr(self, attr)
            if value is None:
                continue
            text = _flag(value, attr)
            if attr == "device_int128":
                if value:
                    out.append("-device-int128")
            elif attr == "device_code_optimize":
                out.append(f"-dopt={'on' if value else 'off'}")
            else:
                out.append(f"{option}={text}")
        presence = (
            ("extensible_whole_program", "-ewp"),
            ("extra_device_vectorization", "-extra-device-vectorization"),
            ("use_fast_math", "-use_fast_math"),
            ("debug", "-G"),
            ("lineinfo", "-lineinfo"),
            ("link_time_optimization", "-dlto"),
            ("no_source_include", "-no-source-include"),
            ("disable_warnings", "-w"),
            ("restrict", "-restrict"),
            ("device_as_default_execution_space", "-default-device"),
            ("no_display_error_number", "-no-err-no"),
            ("brief_diagnostics", "--brief-diagnostics=true"),
        )
        for attr, option in presence:
            value = getattr(self, attr)
            if value is not None:
                _flag(value, attr)
                if value:
                    out.append(option)
        if self.max_register_count is not None:
            out.append(f"-maxrregcount={int_argument('max_register_count', self.max_register_count, 1, INT_LIMIT)}")
        out += [f"-Xptxas={o}" for o in _strings(self.ptxas_options, "ptxas_options")]
        out += [f"-D{m}" for m in _macros(self.define_macro)]
        out += [f"-U{m}" for m in _strings(self.undefine_macro, "undefine_macro")]
        out += [f"--include-path={p}" for p in _strings(self.include_path, "include_path")]
        out += [f"--pre-include={p}" for p in _strings(self.pre_include, "pre_include")]
        for attr, option in (
            ("diag_error", "-diag-error"),
            ("diag_suppress", "-diag-suppress"),
            ("diag_warn", "-diag-warn"),
        ):
            value = getattr(self, attr)
            if value is not None:
                numbers = [value] if is_integer(value) else list(value)
                out.append(f"{option}={','.join(str(int_argument(attr, n, 0, INT_LIMIT)) for n in numbers)}")
        out += _strings(self.extra, "extra")
        return out


def _macros(value: _Macro | Sequence[_Macro] | None) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str | tuple) else list(value)
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
            out.append(f"{item[0]}={item[1]}")
        else:
            raise TypeError(f"define_macro takes 'NAME', 'NAME=VALUE' or ('NAME', 'VALUE'), not {item!r}")
    return out


# --- NVRTC -----------------------------------------------------------------------------


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - part of cuda-bindings
        raise RuntimeError(f"NVRTC bindings are unavailable: {exc}") from None
    return nvrtc


class Program:
    """Source to compile: CUDA C++ (``code_type="c++"``, with NVRTC) or PTX (``"ptx"``).

    ``Program(code, code_type="c++", options=None)`` as in ``cuda.core``: the
    second argument is the code type (an unknown one raises ``ValueError``).
    ``options`` is a :class:`ProgramOptions`, a dict of its fields
    (``{"std": "c++17", "arch": "sm_90"}``, taken as ``ProgramOptions(**options)``
    as cuda.core does: a key that is no field raises ``TypeError`` naming
    it, a bad value ``TypeError``/``ValueError``), or a sequence of raw NVRTC
    option strings (``["-arch=sm_90", "-std=c++17"]``) whose program name is
    ``"default_program"``. Constructing it makes no library call.

    PTX code is handled as ``cuda.core`` does: ``compile("ptx")`` returns it
    unchanged, and ``compile("cubin")`` assembles it with nvJitLink for
    ``options.arch`` (required then; ``compute_XY`` means ``sm_XY``).
    """

    __slots__ = ("_code", "_code_type", "_flags", "_options")

    def __init__(
        self,
        code: str | bytes,
        code_type: str = "c++",
        options: ProgramOptions | Mapping[str, Any] | Sequence[str] | None = None,
    ) -> None:
        if not isinstance(code, str | bytes):
            raise wrong_kind("code", "a str or bytes", code)
        if not isinstance(code_type, str) or code_type.lower() not in _CODE_TYPES:
            raise ValueError(f"code_type must be one of {_CODE_TYPES}, not {code_type!r}")
        chosen: ProgramOptions
        if options is None:
            chosen = ProgramOptions()
        elif isinstance(options, ProgramOptions):
            chosen = options
        elif isinstance(options, Mapping):
            chosen = _options_from_mapping(ProgramOptions, options, "options")
        elif isinstance(options, Sequence) and not isinstance(options, str | bytes):
            chosen = ProgramOptions(extra=tuple(_strings(list(options), "options")))
        else:
            expected = "a ProgramOptions, a dict of its fields or a sequence of option strings"
            raise wrong_kind("options", expected, options)
        self._code = code.encode() if isinstance(code, str) else bytes(code)
        self._code_type = code_type.lower()
        self._options = chosen
        self._flags = tuple(chosen.as_options())

    @property
    def code(self) -> bytes:
        """The source (or PTX) bytes."""
        return self._code

    @property
    def code_type(self) -> str:
        """``"c++"`` or ``"ptx"``."""
        return self._code_type

    @property
    def options(self) -> ProgramOptions:
        """The options (raw option strings are in ``options.extra``)."""
        return self._options

    @property
    def backend(self) -> str:
        """``"NVRTC"`` for C++, ``"nvJitLink"`` for PTX."""
        return "NVRTC" if self._code_type == "c++" else "nvJitLink"

    def close(self) -> None:
        """Does nothing: no library object outlives :meth:`compile` (kept for ``cuda.core`` code)."""

    def compile(
        self,
        target_type: str = "ptx",
        name_expressions: Sequence[str] = (),
        logs: IO[str] | None = None,
        *,
        cache: ProgramCache | None = None,
    ) -> ObjectCode:
        """Compile to ``target_type`` and return an :class:`ObjectCode`.

        C++ compiles to ``"ptx"``, ``"cubin"`` or ``"ltoir"`` (``-dlto`` is
        added for LTO IR); PTX to ``"ptx"`` (unchanged) or ``"cubin"``.
        ``name_expressions`` (``"saxpy<float>"``, ``"&kernel"``...) are
        instantiated and their lowered names recorded in
        :attr:`ObjectCode.symbol_mapping`. ``logs``, a writable text stream,
        receives the compiler's log, also on success. With ``cache`` (a
        :class:`ProgramCache`), a cached result is returned without compiling
        and a new result is stored.

        Raises ``ValueError`` for another target, ``TypeError`` for a bad
        argument, :class:`~cuguard.errors.LibraryNotFoundError` when NVRTC
        (or nvJitLink) cannot be loaded, and
        :class:`~cuguard.errors.NVRTCError` (with the compiler's log; the log
        is also written to ``logs``) or :class:`~cuguard.errors.NVJitLinkError`
        when compilation fails. The NVRTC program is destroyed either way; a
        failed destroy after success is a :class:`~cuguard.errors.CUDAWarning`
        (its host memory leaked), after a failure a note on the error.
        """
        targets = _CXX_TARGETS if self._code_type == "c++" else ("ptx", "cubin")
        if not isinstance(target_type, str) or target_type not in targets:
            raise ValueError(f"target_type must be one of {targets} for {self._code_type} code, not {target_type!r}")
        if isinstance(name_expressions, str) or not isinstance(name_expressions, Sequence):
            raise wrong_kind("name_expressions", "a sequence of str", name_expressions)
        names = tuple(name_expressions)
        for n in names:
            if not isinstance(n, str):
                raise wrong_kind("name_expressions", "a sequence of str", n)
        if logs is not None and not callable(getattr(logs, "write", None)):
            raise wrong_kind("logs", "a writable text stream", logs)
        if cache is not None and not isinstance(cache, ProgramCache):
            raise wrong_kind("cache", "a ProgramCache", cache)
        key = None
        if cache is not None:
            key = cache.key(self, target_type, names)
            hit = cache.get(key)
            if hit is not None:
                return hit
        ptx = self._code_type == "ptx"
        result = self._ptx(target_type, logs) if ptx else self._nvrtc(target_type, names, logs)
        if cache is not None and key is not None:
            cache.put(key, result)
        return result

    def _ptx(self, target_type: str, logs: IO[str] | None) -> ObjectCode:
        name = self._options.name
        if target_type == "ptx":
            return ObjectCode._make(self._code, "ptx", name)
        arch = self._options.arch
        if arch is None:
            raise ValueError("compiling PTX to a cubin needs options.arch (e.g. 'sm_90')")
        linker = Linker(
            ObjectCode._make(self._code, "ptx", name),
            options=LinkerOptions(
                name=name, arch="sm_" + arch.split("_", 1)[1], max_register_count=self._options.max_register_count
            ),
        )
        try:
            return linker.link("cubin")
        finally:
            if logs is not None:
                logs.write(linker.get_info_log() + linker.get_error_log())

    def _nvrtc(self, target_type: str, names: tuple[str, ...], logs: IO[str] | None) -> ObjectCode:
        nvrtc = _nvrtc()
        label = self._options.name
        try:
            err, prog = nvrtc.nvrtcCreateProgram(self._code, label.encode(), 0, [], [])
        except RuntimeError as exc:  # the library itself could not be loaded: no NVRTC call was made
            raise LibraryNotFoundError("NVRTC", "nvidia-cuda-nvrtc", str(exc).strip()) from None
        if err:
            raise NVRTCError(int(err), "nvrtcCreateProgram")
        try:
            for expr in names:
                (err,) = nvrtc.nvrtcAddNameExpression(prog, expr.encode())
                if err:
                    raise NVRTCError(int(err), "nvrtcAddNameExpression", detail=f"name expression {expr!r}")
            flags = list(self._flags)
            if target_type == "ltoir" and "-dlto" not in flags:
                flags.append("-dlto")
            opts = [o.encode() for o in flags]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            log = _nvrtc_log(nvrtc, prog) if err or logs is not None else ""
            if logs is not None and log:
                logs.write(log)
            if err:
                raise NVRTCError(int(err), "nvrtcCompileProgram", log=log)
            symbols: dict[str, str] = {}
            for expr in names:
                err, lowered = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
                if err:
                    raise NVRTCError(int(err), "nvrtcGetLoweredName", detail=f"name expression {expr!r}")
                symbols[expr] = lowered.decode() if isinstance(lowered, bytes) else str(lowered)
            size_fn, get_fn = {
                "ptx": (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX),
                "cubin": (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN),
                "ltoir": (nvrtc.nvrtcGetLTOIRSize, nvrtc.nvrtcGetLTOIR),
            }[target_type]
            err, size = size_fn(prog)
            if err:
                raise NVRTCError(int(err), size_fn.__name__)
            image = b" " * size
            (err,) = get_fn(prog, image)
            if err:
                raise NVRTCError(int(err), get_fn.__name__)
            data = bytes(image)
        except BaseException as exc:
            (derr,) = nvrtc.nvrtcDestroyProgram(prog)
            if derr:
                add_failure_note(exc, NVRTCError(int(derr), "nvrtcDestroyProgram"))
            raise
        (derr,) = nvrtc.nvrtcDestroyProgram(prog)
        if derr:  # the image is good; the program's host memory was leaked
            report_error(NVRTCError(int(derr), "nvrtcDestroyProgram"), prog, "the NVRTC program was leaked")
        return ObjectCode._make(data, target_type, label, symbols)

    def __repr__(self) -> str:
        return f"<Program {self._options.name!r} {self._code_type}>"


def _nvrtc_log(nvrtc: Any, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err or size <= 1:
        return ""
    log = b" " * size
    (err,) = nvrtc.nvrtcGetProgramLog(prog, log)
    return "" if err else log.rstrip(b"\x00").decode(errors="replace")


# --- nvJitLink ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkerOptions:
    """nvJitLink options with ``cuda.core``'s names; ``None`` leaves nvJitLink's default.

    ``arch`` (``"sm_90"``) is required by :class:`Linker` (nvJitLink needs a
    target; it is not taken from the current device). ``ptxas_options`` and
    ``extra`` are raw options. :meth:`as_options` gives the nvJitLink command
    line; it raises ``TypeError``/``ValueError`` for a value of the wrong kind.
    """

    name: str = "default_linker"
    arch: str | None = None
    max_register_count: int | None = None
    time: bool | None = None
    verbose: bool | None = None
    link_time_optimization: bool | None = None
    ptx: bool | None = None
    optimization_level: int | None = None
    debug: bool | None = None
    lineinfo: bool | None = None
    ftz: bool | None = None
    prec_div: bool | None = None
    prec_sqrt: bool | None = None
    fma: bool | None = None
    kernels_used: _StrList = None
    variables_used: _StrList = None
    optimize_unused_variables: bool | None = None
    ptxas_options: _StrList = None
    split_compile: int | None = None
    no_cache: bool | None = None
    extra: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise wrong_kind("name", "a str", self.name)
        self.as_options()

    def as_options(self) -> list[str]:
        """The nvJitLink command line these options stand for."""
        out: list[str] = []
        if self.arch is not None:
            if not isinstance(self.arch, str) or not self.arch.startswith("sm_"):
                raise ValueError(f"arch must be like 'sm_90', not {self.arch!r}")
            out.append(f"-arch={self.arch}")
        if self.max_register_count is not None:
            out.append(f"-maxrregcount={int_argument('max_register_count', self.max_register_count, 1, INT_LIMIT)}")
        if self.optimization_level is not None:
            out.append(f"-O{int_argument('optimization_level', self.optimization_level, 0, INT_LIMIT)}")
        if self.split_compile is not None:
            out.append(f"-split-compile={int_argument('split_compile', self.split_compile, 0, INT_LIMIT)}")
        for attr, option in (
            ("time", "-time"),
            ("verbose", "-verbose"),
            ("link_time_optimization", "-lto"),
            ("ptx", "-ptx"),
            ("debug", "-g"),
            ("lineinfo", "-lineinfo"),
            ("optimize_unused_variables", "-optimize-unused-variables"),
            ("no_cache", "-no-cache"),
        ):
            value = getattr(self, attr)
            if value is not None:
                _flag(value, attr)
                if value:
                    out.append(option)
        for attr, option in (("ftz", "-ftz"), ("prec_div", "-prec-div"), ("prec_sqrt", "-prec-sqrt"), ("fma", "-fma")):
            value = getattr(self, attr)
            if value is not None:
                out.append(f"{option}={_flag(value, attr)}")
        out += [f"-kernels-used={k}" for k in _strings(self.kernels_used, "kernels_used")]
        out += [f"-variables-used={v}" for v in _strings(self.variables_used, "variables_used")]
        out += [f"-Xptxas={o}" for o in _strings(self.ptxas_options, "ptxas_options")]
        out += _strings(self.extra, "extra")
        return out


def _nvjitlink() -> Any:
    try:
        from cuda.bindings import nvjitlink
    except ImportError as exc:  # pragma: no cover - part of cuda-bindings
        raise RuntimeError(f"nvJitLink bindings are unavailable: {exc}") from None
    return nvjitlink


class Linker:
    """Links :class:`ObjectCode` inputs with nvJitLink: ``Linker(*object_codes, options=LinkerOptions(arch=...))``.

    Construction checks the arguments (``TypeError`` for an input that is not
    an :class:`ObjectCode`, ``ValueError`` for none or for options without
    ``arch``) and makes no library call. ``options`` may be a dict of
    :class:`LinkerOptions` fields, taken as ``LinkerOptions(**options)`` as
    cuda.core does (a key that is no field raises ``TypeError`` naming it). :meth:`link` creates the nvJitLink
    handle, links and destroys the handle before it returns or raises;
    :meth:`get_error_log` and :meth:`get_info_log` give the logs of the last
    :meth:`link` (after a failed one, the error log the
    :class:`~cuguard.errors.NVJitLinkError` carries).
    """

    __slots__ = ("_error_log", "_info_log", "_inputs", "_options")

    def __init__(self, *object_codes: ObjectCode, options: LinkerOptions | Mapping[str, Any] | None = None) -> None:
        if not object_codes:
            raise ValueError("Linker needs at least one ObjectCode")
        for code in object_codes:
            if not isinstance(code, ObjectCode):
                raise wrong_kind("object_codes", "an ObjectCode", code)
        if options is None:
            options = LinkerOptions()
        elif isinstance(options, Mapping):
            options = _options_from_mapping(LinkerOptions, options, "options")
        if not isinstance(options, LinkerOptions):
            raise wrong_kind("options", "a LinkerOptions or a dict of its fields", options)
        if options.arch is None:
            raise ValueError("LinkerOptions.arch is required (e.g. 'sm_90')")
        self._inputs = object_codes
        self._options = options
        self._error_log = ""
        self._info_log = ""

    @property
    def backend(self) -> str:
        """``"nvJitLink"``: the only backend."""
        return "nvJitLink"

    def get_error_log(self) -> str:
        """The error log of the last :meth:`link` (``""`` before one)."""
        return self._error_log

    def get_info_log(self) -> str:
        """The info log of the last :meth:`link` (``""`` before one)."""
        return self._info_log

    def close(self) -> None:
        """Does nothing: no nvJitLink handle outlives :meth:`link` (kept for ``cuda.core`` code)."""

    def link(self, target_type: str = "cubin") -> ObjectCode:
        """Link the inputs into a ``"cubin"``, ``"ptx"`` (adds ``-ptx``) or ``"ltoir"`` :class:`ObjectCode`.

        Raises ``ValueError`` for another target,
        :class:`~cuguard.errors.LibraryNotFoundError` when nvJitLink cannot
        be loaded, and :class:`~cuguard.errors.NVJitLinkError` with the
        linker's error log on failure. The nvJitLink handle is destroyed
        either way (a failed destroy is a note on the error, or a
        :class:`~cuguard.errors.CUDAWarning` after success).
        """
        if not isinstance(target_type, str) or target_type not in _LINK_TARGETS:
            raise ValueError(f"target_type must be one of {_LINK_TARGETS}, not {target_type!r}")
        opts = self._options.as_options()
        if target_type == "ptx" and "-ptx" not in opts:
            opts.append("-ptx")
        inputs = [(c.code, c.code_type) for c in self._inputs]
        try:
            data, self._error_log, self._info_log = _link(inputs, opts, target_type)
        except NVJitLinkError as exc:
            self._error_log, self._info_log = exc.log or "", ""
            raise
        symbols: dict[str, str] = {}
        for c in self._inputs:
            symbols.update(c._symbols)
        return ObjectCode._make(data, target_type, self._options.name, symbols)


_INPUT_KINDS = {
    "ptx": "PTX",
    "cubin": "CUBIN",
    "ltoir": "LTOIR",
    "fatbin": "FATBIN",
    "object": "OBJECT",
    "library": "LIBRARY",
}


def _link(inputs: list[tuple[bytes, str]], opts: list[str], target: str) -> tuple[bytes, str, str]:
    nvjitlink = _nvjitlink()
    size_fn = getattr(nvjitlink, f"get_linked_{target}_size", None)
    get_fn = getattr(nvjitlink, f"get_linked_{target}", None)
    if size_fn is None or get_fn is None:  # older cuda-bindings have no LTO-IR output, for one
        raise ValueError(
            f"linking to {target!r} needs a newer cuda-bindings: its nvJitLink module has no get_linked_{target}"
        )
    try:
        handle = nvjitlink.create(len(opts), opts)
    except nvjitlink.nvJitLinkError as exc:
        raise NVJitLinkError(int(getattr(exc, "status", 6)), "nvJitLinkCreate", log=str(exc)) from None
    except RuntimeError as exc:  # the library itself could not be loaded: no nvJitLink call was made
        raise LibraryNotFoundError("nvJitLink", "nvidia-nvjitlink", str(exc).strip()) from None
    try:
        for index, (image, kind) in enumerate(inputs):
            input_type = getattr(nvjitlink.InputType, _INPUT_KINDS[kind])
            try:
                nvjitlink.add_data(handle, input_type, image, len(image), f"input{index}")
            except nvjitlink.nvJitLinkError as exc:
                raise NVJitLinkError(int(exc.status), "nvJitLinkAddData", log=_jit_log(nvjitlink, handle)) from None
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            raise NVJitLinkError(int(exc.status), "nvJitLinkComplete", log=_jit_log(nvjitlink, handle)) from None
        out = bytearray(size_fn(handle))
        get_fn(handle, out)
        error_log = _jit_log(nvjitlink, handle)
        info_log = _jit_log(nvjitlink, handle, info=True)
    except BaseException as exc:
        _destroy_linker(nvjitlink, handle, exc)
        raise
    _destroy_linker(nvjitlink, handle, None)
    data = bytes(out)
    return (data.rstrip(b"\x00") + b"\x00" if target == "ptx" else data), error_log, info_log


def link(images: Sequence[bytes | ObjectCode], arch: str, options: Sequence[str] = ()) -> bytes:
    """Link PTX or cubin ``images`` (bytes or :class:`ObjectCode`) with nvJitLink into one cubin for ``arch``.

    ``arch`` is e.g. ``"sm_90"``. Bytes are taken for PTX when they look like
    PTX text, else for a cubin. Raises :class:`~cuguard.errors.NVJitLinkError`
    with the linker's error log on failure (the linker handle is always
    destroyed), and :class:`~cuguard.errors.LibraryNotFoundError` (naming the
    package to install) when nvJitLink cannot be loaded. See :class:`Linker`
    for the ``cuda.core`` form.
    """
    inputs: list[tuple[bytes, str]] = []
    for image in images:
        if isinstance(image, ObjectCode):
            inputs.append((image.code, image.code_type))
        elif isinstance(image, bytes | bytearray):
            data = bytes(image)
            ptx = data.lstrip().startswith(b"//") or b".version" in data[:4096]
            inputs.append((data, "ptx" if ptx else "cubin"))
        else:
            raise wrong_kind("images", "bytes or an ObjectCode", image)
    if not isinstance(arch, str):
        raise wrong_kind("arch", "a str such as 'sm_90'", arch)
    opts = [f"-arch={arch}", *_strings(list(options), "options")]
    return _link(inputs, opts, "cubin")[0]


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


def _jit_log(nvjitlink: Any, handle: Any, *, info: bool = False) -> str:
    try:
        if info:
            size = nvjitlink.get_info_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_info_log(handle, log)
        else:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
        return log.rstrip(b"\x00").decode(errors="replace")
    except Exception:  # noqa: BLE001 - the log is best effort; the status is what is raised
        return ""


# --- cache -------------------------------------------------------------------------------


class ProgramCache:
    """Compiled results kept in memory (and, with ``directory``, on disk), for ``Program.compile(..., cache=)``.

    The key is a SHA-256 over exactly: the code bytes, the code type, the
    program name, the full option list (which holds ``arch``, so the target
    device architecture is part of the key only through the options), the
    target type, the name expressions, and the installed cuda-bindings
    version. Nothing else (not the current device, not include files the
    source pulls in) is part of it. ``max_entries`` bounds the memory cache
    (least recently used first out). Files in ``directory`` are named
    ``<key>.json``; an unreadable or malformed file is ignored (a miss) and
    a failed write is not reported (the result is still returned). A cached
    result is a new :class:`ObjectCode` per hit (modules loaded from one are
    not shared). Thread-safe.
    """

    __slots__ = ("_directory", "_entries", "_lock", "_max")

    def __init__(self, directory: str | os.PathLike[str] | None = None, max_entries: int = 256) -> None:
        if directory is not None and not isinstance(directory, str | os.PathLike):
            raise wrong_kind("directory", "a path or None", directory)
        self._max = int_argument("max_entries", max_entries, 1)
        self._directory = None if directory is None else os.fspath(directory)
        self._entries: OrderedDict[str, tuple[bytes, str, str, dict[str, str]]] = OrderedDict()
        self._lock = deferring_lock()

    @staticmethod
    def key(program: Program, target_type: str, name_expressions: Sequence[str] = ()) -> str:
        """The cache key (hex) of compiling ``program`` to ``target_type`` (see the class docstring)."""
        if not isinstance(program, Program):
            raise wrong_kind("program", "a Program", program)
        try:
            import cuda.bindings

            version = str(cuda.bindings.__version__)
        except (ImportError, AttributeError):  # pragma: no cover
            version = ""
        parts = [
            program.code_type,
            program.options.name,
            "\x1f".join(program._flags),
            target_type,
            "\x1f".join(name_expressions),
            version,
        ]
        digest = hashlib.sha256(program.code)
        digest.update("\x1e".join(parts).encode())
        return digest.hexdigest()

    def get(self, key: str) -> ObjectCode | None:
        """The cached result for ``key``, or ``None``."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None and self._directory is not None:
            entry = self._read(key)
            if entry is not None:
                self._remember(key, entry)
        return None if entry is None else ObjectCode._make(*entry)

    def put(self, key: str, code: ObjectCode) -> None:
        """Store ``code`` under ``key`` (in memory, and in the directory if there is one)."""
        if not isinstance(code, ObjectCode):
            raise wrong_kind("code", "an ObjectCode", code)
        entry = (code.code, code.code_type, code.name, code.symbol_mapping)
        self._remember(key, entry)
        if self._directory is not None:
            self._write(key, entry)

    def clear(self) -> None:
        """Forget the in-memory entries (files in the directory stay)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _remember(self, key: str, entry: tuple[bytes, str, str, dict[str, str]]) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def _path(self, key: str) -> str:
        assert self._directory is not None
        return os.path.join(self._directory, f"{key}.json")

    def _read(self, key: str) -> tuple[bytes, str, str, dict[str, str]] | None:
        try:
            with open(self._path(key), encoding="utf-8") as f:
                raw = json.load(f)
            symbols = {str(k): str(v) for k, v in dict(raw["symbols"]).items()}
            return base64.b64decode(raw["code"]), str(raw["code_type"]), str(raw["name"]), symbols
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write(self, key: str, entry: tuple[bytes, str, str, dict[str, str]]) -> None:
        code, code_type, name, symbols = entry
        payload = {"code": base64.b64encode(code).decode(), "code_type": code_type, "name": name, "symbols": symbols}
        try:
            os.makedirs(self._directory or ".", exist_ok=True)
            tmp = f"{self._path(key)}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(payload, f)
            os.replace(tmp, self._path(key))
        except OSError:
            pass
