"""The exception types and the status table: E1, E2, E4."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from cuda.bindings import driver as cu
from cuda.bindings import runtime as cudart

from cuguard.errors import (
    CUDADriverNotFoundError,
    CUDAError,
    NVJitLinkError,
    NVRTCError,
    NVVMError,
    ResourceClosedError,
    error_description,
    error_name,
    is_sticky,
)

DRIVER_STATUSES = list(cu.CUresult)
DRIVER_BY_NAME = {status.name: status for status in DRIVER_STATUSES}
RUNTIME_STATUSES = list(cudart.cudaError_t)
GENERIC_DESCRIPTION = "unknown CUDA status"


# E1: every status has its name and description, with no driver loaded ------------------------


@pytest.mark.contract("E1")
@pytest.mark.parametrize("status", DRIVER_STATUSES, ids=lambda s: s.name)
def test_every_driver_status_has_its_name_and_a_description(status: cu.CUresult) -> None:
    assert error_name(status) == status.name
    description = error_description(status)
    assert isinstance(description, str)
    assert description.strip()
    assert not description.startswith(GENERIC_DESCRIPTION)
    error = CUDAError(status, "cuTest")
    assert (error.code, error.name, error.description) == (int(status), status.name, description)
    # The int and the enum member name the same status.
    assert (CUDAError(int(status)).name, CUDAError(int(status)).description) == (status.name, description)


@pytest.mark.contract("E1")
@pytest.mark.parametrize("status", RUNTIME_STATUSES, ids=lambda s: s.name)
def test_every_runtime_status_has_its_name_and_a_description(status: cudart.cudaError_t) -> None:
    error = CUDAError(status, "cudaTest")
    assert error.code == int(status)
    assert error.name == status.name
    assert error.description.strip()
    if status.__doc__:  # cudaErrorApiFailureBase is a range marker, not an error: neither library describes it
        assert not error.description.startswith(GENERIC_DESCRIPTION)
    assert str(error) == f"cudaTest failed: {status.name}: {error.description}"


@pytest.mark.contract("E1")
def test_runtime_and_driver_statuses_with_the_same_value_are_named_from_their_own_table() -> None:
    runtime = CUDAError(cudart.cudaError_t.cudaErrorMemoryAllocation, "cudaMalloc")
    driver = CUDAError(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc")
    assert runtime.code == driver.code == 2
    assert runtime.name == "cudaErrorMemoryAllocation"
    assert driver.name == "CUDA_ERROR_OUT_OF_MEMORY"


# E1: the data an error carries and how it reads ----------------------------------------------


@pytest.mark.contract("E1")
def test_str_names_call_error_and_description() -> None:
    error = CUDAError(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, "cuMemAllocAsync")
    assert str(error) == "cuMemAllocAsync failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    assert type(error.code) is int
    assert error.code == 2
    assert error.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert error.description == "out of memory"
    assert error.call == "cuMemAllocAsync"
    assert error.is_sticky is False
    assert isinstance(error, Exception)


@pytest.mark.contract("E1")
def test_str_without_call_and_with_detail() -> None:
    assert str(CUDAError(2)) == "CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    assert CUDAError(2).call is None
    error = CUDAError(201, "cuCtxSetCurrent", "context 0x10 is current now")
    assert str(error) == (
        "cuCtxSetCurrent failed: CUDA_ERROR_INVALID_CONTEXT: invalid device context; context 0x10 is current now"
    )
    assert error.detail == "context 0x10 is current now"


@pytest.mark.contract("E1", "E3")
@pytest.mark.parametrize("bad", [None, "2", 2.0, True, False, b"\x02", cu.CUstream(0)])
def test_a_status_that_is_not_an_integer_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="CUDA status"):
        CUDAError(bad, "cuTest")


def _examples() -> list[BaseException]:
    return [
        CUDAError(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, "cuMemAllocAsync"),
        CUDAError(201, "cuCtxSetCurrent", "context 0x10 is current now"),
        CUDAError(cudart.cudaError_t.cudaErrorMemoryAllocation, "cudaMalloc"),
        CUDAError(719),
        CUDADriverNotFoundError("libcuda.so.1 could not be loaded"),
        NVRTCError(6, "nvrtcCompileProgram", log="kernel.cu(3): error: identifier 'x' is undefined\n"),
        NVJitLinkError(4, "nvJitLinkComplete", log="ptxas fatal: unresolved extern function"),
        NVVMError(9, "nvvmCompileProgram", log="error: invalid IR", detail="while compiling kernel.ll"),
        ResourceClosedError("Stream(0x1234) is closed"),
    ]


def _state(error: BaseException) -> tuple[Any, ...]:
    return (type(error), error.args, str(error), dict(error.__dict__), getattr(error, "__notes__", None))


@pytest.mark.contract("E1", "E2")
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("index", range(len(_examples())), ids=[type(e).__name__ for e in _examples()])
def test_every_exception_pickles_with_its_attributes_and_notes(index: int, protocol: int) -> None:
    error = _examples()[index]
    error.add_note("while handling this error, cleanup also failed: cuStreamDestroy(0x1) failed")
    error.add_note("second note")
    clone = pickle.loads(pickle.dumps(error, protocol=protocol))
    assert clone is not error
    assert _state(clone) == _state(error)
    assert clone.__notes__ == [
        "while handling this error, cleanup also failed: cuStreamDestroy(0x1) failed",
        "second note",
    ]
    if isinstance(error, CUDAError):
        for attribute in ("code", "name", "description", "call", "detail", "is_sticky"):
            assert getattr(clone, attribute) == getattr(error, attribute)
    if isinstance(error, NVRTCError | NVJitLinkError | NVVMError):
        assert clone.log == error.log
    assert _state(copy.deepcopy(error)) == _state(error)


@pytest.mark.contract("E1")
def test_an_exception_without_notes_unpickles_without_notes() -> None:
    clone = pickle.loads(pickle.dumps(CUDAError(2, "cuMemAlloc")))
    assert not hasattr(clone, "__notes__")


# E2: compiler and linker libraries ------------------------------------------------------------


@pytest.mark.contract("E2")
def test_library_errors_are_cuda_errors_with_status_name_and_log() -> None:
    log = "kernel.cu(3): error: identifier 'x' is undefined\n1 error detected in the compilation of kernel.cu.\n"
    error = NVRTCError(6, "nvrtcCompileProgram", log=log)
    assert isinstance(error, CUDAError)
    assert error.name == "NVRTC_ERROR_COMPILATION"
    assert error.log == log
    assert error.call == "nvrtcCompileProgram"
    assert str(error).startswith("nvrtcCompileProgram failed: NVRTC_ERROR_COMPILATION: ")
    assert str(error).endswith(log.rstrip())
    assert error.is_sticky is False
    with pytest.raises(CUDAError) as caught:
        raise NVJitLinkError(4, "nvJitLinkComplete", log="ptxas fatal: unresolved extern function 'f'")
    assert caught.value.name == "NVJITLINK_ERROR_PTX_COMPILE"
    assert "unresolved extern function 'f'" in str(caught.value)


@pytest.mark.contract("E2")
def test_library_error_without_log_reads_like_any_error() -> None:
    error = NVVMError(9, "nvvmCompileProgram")
    assert error.log == ""
    assert str(error) == f"nvvmCompileProgram failed: NVVM_ERROR_COMPILATION: {error.description}"


@pytest.mark.contract("E2")
def test_nvrtc_names_match_cuda_bindings() -> None:
    from cuda.bindings import nvrtc

    for status in nvrtc.nvrtcResult:
        error = NVRTCError(status, "nvrtcTest")
        assert error.name == status.name
        assert error.code == int(status)
        assert error.description


@pytest.mark.contract("E2")
@pytest.mark.parametrize(
    ("module", "cls", "prefix"), [("nvjitlink", NVJitLinkError, "NVJITLINK_"), ("nvvm", NVVMError, "NVVM_")]
)
def test_nvjitlink_and_nvvm_names_match_cuda_bindings(module: str, cls: type[CUDAError], prefix: str) -> None:
    bindings = pytest.importorskip(f"cuda.bindings.{module}")
    for status in bindings.Result:
        assert cls(status, "test").name == prefix + status.name


# E4: sticky errors ----------------------------------------------------------------------------

STICKY = [
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_CONTAINED",
    "CUDA_ERROR_TENSOR_MEMORY_LEAK",
    "CUDA_ERROR_MPS_CLIENT_TERMINATED",
    "CUDA_ERROR_EXTERNAL_DEVICE",
]
NOT_STICKY = [
    "CUDA_SUCCESS",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "CUDA_ERROR_INVALID_VALUE",
    "CUDA_ERROR_INVALID_CONTEXT",
    "CUDA_ERROR_DEINITIALIZED",
    "CUDA_ERROR_NOT_READY",
    "CUDA_ERROR_INVALID_HANDLE",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
]


@pytest.mark.contract("E4")
@pytest.mark.parametrize("name", STICKY)
def test_sticky_statuses_are_flagged(name: str) -> None:
    if name not in DRIVER_BY_NAME:
        pytest.skip(f"{name} is not a status of this cuda-bindings")
    status = DRIVER_BY_NAME[name]
    assert is_sticky(status)
    error = CUDAError(status, "cuStreamSynchronize")
    assert error.is_sticky is True
    assert str(error).startswith(f"cuStreamSynchronize failed: {name}: ")


@pytest.mark.contract("E4")
@pytest.mark.parametrize("name", NOT_STICKY)
def test_other_statuses_are_not_sticky(name: str) -> None:
    status = DRIVER_BY_NAME[name]
    assert not is_sticky(status)
    assert CUDAError(status, "cuStreamSynchronize").is_sticky is False


@pytest.mark.contract("E4")
def test_library_errors_are_never_sticky_even_with_a_sticky_value() -> None:
    assert NVRTCError(700, "nvrtcTest").is_sticky is False
    assert CUDAError(700, "cuTest").is_sticky is True


# Phrases of the driver's own documentation for statuses after which it refuses all work.
STICKY_PHRASES = ("inconsistent state", "must be terminated and relaunched", "context cannot be used anymore")


@pytest.mark.contract("E4")
def test_every_status_the_driver_documents_as_fatal_is_sticky() -> None:
    documented = {
        status.name
        for status in DRIVER_STATUSES
        if any(phrase in " ".join((status.__doc__ or "").split()) for phrase in STICKY_PHRASES)
    }
    assert {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED"} <= documented
    assert documented <= {status.name for status in DRIVER_STATUSES if is_sticky(status)}


@pytest.mark.contract("E4")
def test_the_sticky_statuses_are_exactly_the_listed_ones() -> None:
    flagged = {status.name for status in DRIVER_STATUSES if is_sticky(status)}
    assert flagged == set(STICKY) & set(DRIVER_BY_NAME)
