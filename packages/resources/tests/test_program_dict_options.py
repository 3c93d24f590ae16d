"""``Program(code, "c++", options={...})`` and ``Linker(..., options={...})``: dicts, as cuda.core takes them.

NVRTC and nvJitLink run on the CPU: these tests run on the simulated driver and on a GPU alike.
"""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.resources import Device, Linker, ObjectCode, Program, ProgramOptions

SAXPY_CU = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, const T* y, T* out, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""

EMPTY_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty() { ret; }
"""


def test_a_dict_is_taken_as_program_options_fields() -> None:
    program = Program(SAXPY_CU, code_type="c++", options={"std": "c++17", "arch": "sm_90", "name": "saxpy.cu"})
    assert program.options == ProgramOptions(std="c++17", arch="sm_90", name="saxpy.cu")
    assert Program(SAXPY_CU, "c++", {}).options == ProgramOptions()


def test_dict_options_compile_as_the_dataclass_does(device: Device) -> None:
    major, minor = device.compute_capability
    arch = f"sm_{major}{minor}"
    as_dict = Program(SAXPY_CU, "c++", {"std": "c++17", "arch": arch}).compile("cubin", ("saxpy<float>",))
    as_options = Program(SAXPY_CU, "c++", ProgramOptions(std="c++17", arch=arch)).compile("cubin", ("saxpy<float>",))
    assert as_dict.code == as_options.code
    assert as_dict.symbol_mapping == as_options.symbol_mapping


@pytest.mark.contract("E3")
@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"stdd": "c++17"}, TypeError, "'stdd'"),
        ({"std": "c++17", "archh": "sm_90"}, TypeError, "'archh'"),
        ({1: "c++17"}, TypeError, "option names must be str"),
        ({"std": 17}, TypeError, "std"),
        ({"arch": "ampere"}, ValueError, "arch"),
        ({"debug": "yes"}, TypeError, "debug"),
    ],
)
def test_bad_program_option_keys_and_values_are_refused_before_nvrtc(
    options: dict[Any, Any], error: type[Exception], match: str
) -> None:
    # refused by the constructor, which makes no library call: NVRTC never sees these options
    with pytest.raises(error, match=match):
        Program(SAXPY_CU, "c++", options)


def test_a_dict_is_taken_as_linker_options_fields() -> None:
    code = ObjectCode.from_ptx(EMPTY_PTX)
    linker = Linker(code, options={"arch": "sm_90", "name": "linked"})
    assert linker.link("cubin").name == "linked"


@pytest.mark.contract("E3")
@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"arch": "sm_90", "lto": True}, TypeError, "'lto'"),
        ({"name": "x"}, ValueError, "arch"),  # LinkerOptions.arch is required, as before
        ({"arch": "sm_90", "time": "yes"}, TypeError, "time"),
    ],
)
def test_bad_linker_option_keys_and_values_are_refused_before_nvjitlink(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    code = ObjectCode.from_ptx(EMPTY_PTX)
    with pytest.raises(error, match=match):
        Linker(code, options=options)


def test_other_kinds_of_options_are_still_refused_naming_the_parameter() -> None:
    with pytest.raises(TypeError, match="options"):
        Program(SAXPY_CU, "c++", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options"):
        Linker(ObjectCode.from_ptx(EMPTY_PTX), options=5)  # type: ignore[arg-type]
