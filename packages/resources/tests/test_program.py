"""cuda.core-compatible compilation: Program, ProgramOptions, ObjectCode, Linker, ProgramCache.

NVRTC and nvJitLink run on the CPU, so these tests run on the simulated driver
as well as on a real GPU; launches use the `device` fixture's driver.
"""

from __future__ import annotations

import copy
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError, NVJitLinkError, NVRTCError
from cuguard.resources import (
    Device,
    LaunchConfig,
    Linker,
    LinkerOptions,
    ObjectCode,
    Program,
    ProgramCache,
    ProgramOptions,
    launch,
    link,
)
from cuguard.testing import SimulatedDriver

TEMPLATE_CU = r"""
template <typename T>
__global__ void fill(T* out, T value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
extern "C" __global__ void empty() {}
"""

EMPTY_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty() { ret; }
"""


def _arch(device: Device) -> tuple[str, str]:
    major, minor = device.compute_capability
    return f"sm_{major}{minor}", f"compute_{major}{minor}"


def _emulate_fill(driver: Any, lowered: str) -> None:
    if isinstance(driver, SimulatedDriver):

        def fill(s: Any, out: int, value: int, n: int) -> None:
            s.write(out, int(value).to_bytes(4, "little") * int(n))

        driver.register_kernel(lowered, fill)


@pytest.mark.contract("E3")
def test_second_argument_is_the_code_type() -> None:
    with pytest.raises(ValueError, match="code_type"):
        Program(TEMPLATE_CU, "program.cu")
    with pytest.raises(TypeError, match="code"):
        Program(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options"):
        Program(TEMPLATE_CU, "c++", 5)  # type: ignore[arg-type]
    assert Program(TEMPLATE_CU).code_type == "c++"
    assert Program(EMPTY_PTX, "PTX").code_type == "ptx"
    assert Program(TEMPLATE_CU, options=["-std=c++17"]).options.extra == ("-std=c++17",)


@pytest.mark.contract("E3")
def test_program_options_become_nvrtc_flags() -> None:
    options = ProgramOptions(
        name="k.cu",
        arch="sm_90",
        std="c++17",
        define_macro=[("N", "4"), "M"],
        include_path=["inc"],
        use_fast_math=True,
        max_register_count=32,
        lineinfo=True,
        ftz=False,
        extra=["-w"],
    )
    flags = options.as_options()
    for flag in (
        "-arch=sm_90",
        "-std=c++17",
        "-DN=4",
        "-DM",
        "--include-path=inc",
        "-use_fast_math",
        "-maxrregcount=32",
    ):
        assert flag in flags
    assert "-lineinfo" in flags
    assert "-ftz=false" in flags
    assert flags[-1] == "-w"
    with pytest.raises(ValueError, match="arch"):
        ProgramOptions(arch="90")
    with pytest.raises(ValueError, match="max_register_count"):
        ProgramOptions(max_register_count=0)
    with pytest.raises(TypeError, match="debug"):
        ProgramOptions(debug="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="define_macro"):
        ProgramOptions(define_macro=[5])  # type: ignore[list-item]


@pytest.mark.contract("E3")
def test_compile_checks_its_arguments() -> None:
    program = Program(TEMPLATE_CU)
    with pytest.raises(ValueError, match="target_type"):
        program.compile("fatbin")
    with pytest.raises(TypeError, match="name_expressions"):
        program.compile("ptx", "fill<int>")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="logs"):
        program.compile("ptx", logs=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cache"):
        program.compile("ptx", cache={})  # type: ignore[arg-type]


def test_name_expressions_find_templated_kernels(device: Device, cuguard_driver: Any) -> None:
    _sm, compute = _arch(device)
    code = Program(TEMPLATE_CU, options=ProgramOptions(arch=compute, name="fill.cu")).compile(
        "ptx", name_expressions=("fill<unsigned int>",)
    )
    assert isinstance(code, ObjectCode)
    assert code.code_type == "ptx"
    assert code.name == "fill.cu"
    lowered = code.symbol_mapping["fill<unsigned int>"]
    assert lowered.startswith("_Z")
    assert code.lowered_name("fill<unsigned int>") == lowered
    _emulate_fill(cuguard_driver, lowered)
    n = 16
    with device.load_module(code) as module, device.create_stream() as stream, device.allocate(4 * n) as buf:
        kernel = module.get_kernel("fill<unsigned int>")
        launch(stream, LaunchConfig(grid=1, block=n), kernel, buf, np.uint32(0xC0DE), n)
        out = bytearray(4 * n)
        buf.copy_to(out, stream)
        stream.sync()
    assert np.frombuffer(bytes(out), np.uint32).tolist() == [0xC0DE] * n


def test_object_code_get_kernel_loads_into_the_current_context(device: Device, cuguard_driver: Any) -> None:
    sm, _ = _arch(device)
    code = Program(TEMPLATE_CU, options=ProgramOptions(arch=sm)).compile("cubin", ("fill<unsigned int>",))
    assert code.code_type == "cubin"
    assert code.code.startswith(b"\x7fELF")
    if isinstance(cuguard_driver, SimulatedDriver):  # a binary image: its entries are registered on the simulator
        import ctypes

        lowered = code.lowered_name("fill<unsigned int>")
        cuguard_driver.register_image(
            code.code, {lowered: (ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32), "empty": ()}
        )
    previous = device.set_current()
    try:
        kernel = code.get_kernel("fill<unsigned int>")
        assert kernel.module.context == device.context
        assert code.get_kernel("empty").module is kernel.module  # loaded once per context
    finally:
        if previous is not None:
            previous.set_current()


@pytest.mark.contract("G1")
def test_object_code_get_kernel_of_a_missing_name_leaves_nothing_loaded(device: Device, cuguard_driver: Any) -> None:
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("counts the simulator's live objects")
    code = ObjectCode.from_ptx(EMPTY_PTX)
    device.set_current()
    before = len(cuguard_driver.live_objects())
    with pytest.raises(CUDAError) as info:
        code.get_kernel("missing")
    assert info.value.name == "CUDA_ERROR_NOT_FOUND"
    assert len(cuguard_driver.live_objects()) == before
    assert code.get_kernel("empty").name == "empty"


@pytest.mark.contract("E2")
def test_compiler_log_reaches_logs_on_success_and_failure() -> None:
    logs = io.StringIO()
    source = '#warning "cuguard says hello"\nextern "C" __global__ void k() {}\n'
    Program(source, options=ProgramOptions(name="hello.cu")).compile("ptx", logs=logs)
    assert "cuguard says hello" in logs.getvalue()
    logs = io.StringIO()
    with pytest.raises(NVRTCError) as info:
        Program('extern "C" __global__ void broken() { nope; }', options=ProgramOptions(name="broken.cu")).compile(
            "ptx", logs=logs
        )
    assert info.value.call == "nvrtcCompileProgram"
    assert "broken.cu" in info.value.log
    assert info.value.log in logs.getvalue()


@pytest.mark.contract("E2")
def test_a_bad_name_expression_is_an_nvrtc_error() -> None:
    with pytest.raises(NVRTCError) as info:
        Program(TEMPLATE_CU).compile("ptx", ("no_such<int>",))
    assert info.value.name.startswith("NVRTC_ERROR_")


def test_ptx_code_passes_through_or_is_assembled(device: Device) -> None:
    sm, _ = _arch(device)
    program = Program(EMPTY_PTX, "ptx", ProgramOptions(arch=sm))
    assert program.compile("ptx").code == EMPTY_PTX
    cubin = program.compile("cubin")
    assert cubin.code_type == "cubin"
    assert cubin.code.startswith(b"\x7fELF")
    with pytest.raises(ValueError, match="arch"):
        Program(EMPTY_PTX, "ptx").compile("cubin")
    with pytest.raises(ValueError, match="target_type"):
        program.compile("ltoir")


def test_linker_links_object_codes(device: Device) -> None:
    sm, compute = _arch(device)
    ptx = Program(TEMPLATE_CU, options=ProgramOptions(arch=compute)).compile("ptx", ("fill<int>",))
    linker = Linker(ptx, options=LinkerOptions(arch=sm, name="linked"))
    assert linker.get_error_log() == ""
    assert linker.backend == "nvJitLink"
    cubin = linker.link("cubin")
    assert cubin.code_type == "cubin"
    assert cubin.name == "linked"
    assert cubin.symbol_mapping == ptx.symbol_mapping  # name expressions survive the link
    assert isinstance(linker.get_info_log(), str)
    assert isinstance(link([ptx], arch=sm), bytes)  # the bytes form takes ObjectCode too


def test_link_time_optimization(device: Device) -> None:
    sm, _ = _arch(device)
    ltoir = Program(TEMPLATE_CU, options=ProgramOptions(arch=sm)).compile("ltoir")
    assert ltoir.code_type == "ltoir"
    cubin = Linker(ltoir, options=LinkerOptions(arch=sm, link_time_optimization=True)).link("cubin")
    assert cubin.code.startswith(b"\x7fELF")
    with pytest.raises(ValueError, match="link"):
        ltoir.get_kernel("empty")


@pytest.mark.contract("E2")
def test_linker_failure_raises_nvjitlink_error_with_log(device: Device) -> None:
    sm, _ = _arch(device)
    garbage = ObjectCode.from_ptx(b"// not ptx\n.version 99.0\n.target nonsense\n garbage \x00")
    linker = Linker(garbage, options=LinkerOptions(arch=sm))
    with pytest.raises(NVJitLinkError) as info:
        linker.link("cubin")
    assert info.value.name.startswith("NVJITLINK_ERROR_")
    assert info.value.log
    assert linker.get_error_log() == info.value.log


@pytest.mark.contract("E3")
def test_linker_checks_its_arguments() -> None:
    code = ObjectCode.from_ptx(EMPTY_PTX)
    with pytest.raises(ValueError, match="at least one"):
        Linker(options=LinkerOptions(arch="sm_90"))
    with pytest.raises(TypeError, match="object_codes"):
        Linker(EMPTY_PTX, options=LinkerOptions(arch="sm_90"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="arch"):
        Linker(code)
    with pytest.raises(TypeError, match="options"):
        Linker(code, options=["-arch=sm_90"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="target_type"):
        Linker(code, options=LinkerOptions(arch="sm_90")).link("fatbin")
    with pytest.raises(ValueError, match="arch"):
        LinkerOptions(arch="compute_90")
    assert LinkerOptions(arch="sm_90", link_time_optimization=True, ftz=True).as_options() == [
        "-arch=sm_90",
        "-lto",
        "-ftz=true",
    ]


def test_program_cache_in_memory_and_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ProgramCache(tmp_path / "cache")
    program = Program(TEMPLATE_CU, options=ProgramOptions(arch="compute_90"))
    first = program.compile("ptx", ("fill<int>",), cache=cache)
    second = program.compile("ptx", ("fill<int>",), cache=cache)
    assert second is not first
    assert second.code == first.code
    assert second.symbol_mapping == first.symbol_mapping
    assert len(cache) == 1
    keys = {
        ProgramCache.key(program, "ptx", ("fill<int>",)),
        ProgramCache.key(program, "ptx"),
        ProgramCache.key(program, "cubin", ("fill<int>",)),
        ProgramCache.key(Program(TEMPLATE_CU, options=ProgramOptions(arch="compute_80")), "ptx", ("fill<int>",)),
        ProgramCache.key(Program(TEMPLATE_CU + " ", options=ProgramOptions(arch="compute_90")), "ptx", ("fill<int>",)),
    }
    assert len(keys) == 5
    # A new cache over the same directory answers without compiling.
    import cuguard.resources._program as compiler

    monkeypatch.setattr(compiler, "_nvrtc", lambda: pytest.fail("compiled despite a cached result"))
    third = program.compile("ptx", ("fill<int>",), cache=ProgramCache(tmp_path / "cache"))
    assert third.code == first.code
    assert third.symbol_mapping == first.symbol_mapping
    with pytest.raises(ValueError, match="max_entries"):
        ProgramCache(max_entries=0)


@pytest.mark.contract("O1")
def test_object_code_is_plain_data() -> None:
    with pytest.raises(TypeError, match="from_cubin"):
        ObjectCode(b"")
    code = ObjectCode.from_ptx(EMPTY_PTX, name="empty", symbol_mapping={"e": "empty"})
    for clone in (copy.copy(code), copy.deepcopy(code), pickle.loads(pickle.dumps(code))):
        assert (clone.code, clone.code_type, clone.name, clone.symbol_mapping) == (
            EMPTY_PTX,
            "ptx",
            "empty",
            {"e": "empty"},
        )
    with pytest.raises(TypeError, match="module"):
        ObjectCode.from_cubin(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="symbol_mapping"):
        ObjectCode.from_ptx(EMPTY_PTX, symbol_mapping={"e": 5})  # type: ignore[dict-item]


def test_object_code_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.ptx"
    path.write_bytes(EMPTY_PTX)
    assert ObjectCode.from_ptx(str(path)).code == EMPTY_PTX


def test_every_option_is_one_nvrtc_and_nvjitlink_accept(tmp_path: Path) -> None:
    (tmp_path / "extra.h").write_text("#define EXTRA 1\n")
    options = ProgramOptions(
        arch="compute_90",
        relocatable_device_code=True,
        extensible_whole_program=False,
        debug=False,
        lineinfo=True,
        device_code_optimize=True,
        ptxas_options=["-v"],
        max_register_count=32,
        ftz=True,
        prec_sqrt=False,
        prec_div=False,
        fma=True,
        use_fast_math=True,
        extra_device_vectorization=True,
        define_macro=[("N", "4"), "M"],
        undefine_macro="Z",
        include_path=str(tmp_path),
        pre_include="extra.h",
        no_source_include=True,
        std="c++17",
        builtin_move_forward=True,
        builtin_initializer_list=True,
        disable_warnings=True,
        restrict=True,
        device_as_default_execution_space=True,
        device_int128=True,
        no_display_error_number=True,
        diag_error=[20],
        diag_suppress=177,
        diag_warn=(550,),
        brief_diagnostics=True,
    )
    ptx = Program('extern "C" __global__ void k(int* p) { *p = N + EXTRA; }', options=options).compile("ptx")
    linker_options = LinkerOptions(
        arch="sm_90",
        max_register_count=32,
        verbose=True,
        optimization_level=3,
        lineinfo=True,
        ftz=True,
        prec_div=True,
        prec_sqrt=True,
        fma=True,
        kernels_used="k",
        optimize_unused_variables=True,
        ptxas_options="-v",
        no_cache=True,
    )
    linker = Linker(ptx, options=linker_options)
    assert linker.link("cubin").code.startswith(b"\x7fELF")
    assert "k" in linker.get_info_log()
