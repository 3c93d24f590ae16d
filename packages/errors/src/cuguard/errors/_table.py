"""Names and descriptions of CUDA statuses, available with no driver loaded.

The driver and runtime entries come from ``error_tables.json``, which was
dumped from a real driver with ``scripts/dump-error-tables`` (the driver's own
``cuGetErrorName``/``cuGetErrorString`` text). Codes the driver that produced
the table did not describe fall back to the first sentence of cuda-bindings'
enum documentation, and codes unknown to both to a generic entry, so every
status renders. The JSON is read on first use, never at import.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from importlib import resources

__all__ = [
    "NO_DEVICE",
    "DEINITIALIZED",
    "NVJITLINK_NAMES",
    "NVRTC_NAMES",
    "NVVM_NAMES",
    "STICKY_CODES",
    "driver_entry",
    "runtime_entry",
]

SUCCESS = 0
DEINITIALIZED = 4
NO_DEVICE = 100

# Statuses after which the driver refuses all further work in the process (a kernel
# fault corrupted the context, or the driver documents that "any further CUDA work will
# return the same error" / the process "must be terminated and relaunched").
# Values are stable across CUDA 12 and 13.
STICKY_CODES: frozenset[int] = frozenset(
    {
        214,  # CUDA_ERROR_ECC_UNCORRECTABLE
        226,  # CUDA_ERROR_CONTAINED
        700,  # CUDA_ERROR_ILLEGAL_ADDRESS
        702,  # CUDA_ERROR_LAUNCH_TIMEOUT
        710,  # CUDA_ERROR_ASSERT
        714,  # CUDA_ERROR_HARDWARE_STACK_ERROR
        715,  # CUDA_ERROR_ILLEGAL_INSTRUCTION
        716,  # CUDA_ERROR_MISALIGNED_ADDRESS
        717,  # CUDA_ERROR_INVALID_ADDRESS_SPACE
        718,  # CUDA_ERROR_INVALID_PC
        719,  # CUDA_ERROR_LAUNCH_FAILED
        721,  # CUDA_ERROR_TENSOR_MEMORY_LEAK
        810,  # CUDA_ERROR_MPS_CLIENT_TERMINATED
        911,  # CUDA_ERROR_EXTERNAL_DEVICE
    }
)


def _library_table(prefix: str, names: dict[int, str]) -> dict[int, tuple[str, str]]:
    """Full status names of a compiler/linker library, with a readable description."""
    return {
        code: (prefix + name, name.removeprefix("ERROR_").replace("_", " ").lower()) for code, name in names.items()
    }


NVRTC_NAMES: dict[int, tuple[str, str]] = _library_table(
    "NVRTC_",
    {
        0: "SUCCESS",
        1: "ERROR_OUT_OF_MEMORY",
        2: "ERROR_PROGRAM_CREATION_FAILURE",
        3: "ERROR_INVALID_INPUT",
        4: "ERROR_INVALID_PROGRAM",
        5: "ERROR_INVALID_OPTION",
        6: "ERROR_COMPILATION",
        7: "ERROR_BUILTIN_OPERATION_FAILURE",
        8: "ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        9: "ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        10: "ERROR_NAME_EXPRESSION_NOT_VALID",
        11: "ERROR_INTERNAL_ERROR",
        12: "ERROR_TIME_FILE_WRITE_FAILED",
        13: "ERROR_NO_PCH_CREATE_ATTEMPTED",
        14: "ERROR_PCH_CREATE_HEAP_EXHAUSTED",
        15: "ERROR_PCH_CREATE",
        16: "ERROR_CANCELLED",
        17: "ERROR_TIME_TRACE_FILE_WRITE_FAILED",
        18: "ERROR_BUSY",
    },
)

NVJITLINK_NAMES: dict[int, tuple[str, str]] = _library_table(
    "NVJITLINK_",
    {
        0: "SUCCESS",
        1: "ERROR_UNRECOGNIZED_OPTION",
        2: "ERROR_MISSING_ARCH",
        3: "ERROR_INVALID_INPUT",
        4: "ERROR_PTX_COMPILE",
        5: "ERROR_NVVM_COMPILE",
        6: "ERROR_INTERNAL",
        7: "ERROR_THREADPOOL",
        8: "ERROR_UNRECOGNIZED_INPUT",
        9: "ERROR_FINALIZE",
        10: "ERROR_NULL_INPUT",
        11: "ERROR_INCOMPATIBLE_OPTIONS",
        12: "ERROR_INCORRECT_INPUT_TYPE",
        13: "ERROR_ARCH_MISMATCH",
        14: "ERROR_OUTDATED_LIBRARY",
        15: "ERROR_MISSING_FATBIN",
        16: "ERROR_UNRECOGNIZED_ARCH",
        17: "ERROR_UNSUPPORTED_ARCH",
        18: "ERROR_LTO_NOT_ENABLED",
    },
)

NVVM_NAMES: dict[int, tuple[str, str]] = _library_table(
    "NVVM_",
    {
        0: "SUCCESS",
        1: "ERROR_OUT_OF_MEMORY",
        2: "ERROR_PROGRAM_CREATION_FAILURE",
        3: "ERROR_IR_VERSION_MISMATCH",
        4: "ERROR_INVALID_INPUT",
        5: "ERROR_INVALID_PROGRAM",
        6: "ERROR_INVALID_IR",
        7: "ERROR_INVALID_OPTION",
        8: "ERROR_NO_MODULE_IN_PROGRAM",
        9: "ERROR_COMPILATION",
        10: "ERROR_CANCELLED",
    },
)


def _first_sentence(doc: str | None) -> str:
    if not doc:
        return ""
    text = " ".join(doc.split())
    end = text.find(". ")
    sentence = text if end < 0 else text[: end + 1]
    return sentence.rstrip(".").strip()


@lru_cache(maxsize=1)
def _shipped() -> dict[str, dict[int, tuple[str, str]]]:
    raw = json.loads(resources.files("cuguard.errors").joinpath("error_tables.json").read_text("utf-8"))
    return {
        kind: {int(code): (str(entry[0]), str(entry[1])) for code, entry in raw[kind].items()}
        for kind in ("driver", "runtime")
    }


@lru_cache(maxsize=1)
def _bindings_enum(kind: str) -> dict[int, tuple[str, str]]:
    """Names and doc sentences from the installed cuda-bindings enums (no driver needed)."""
    try:
        if kind == "driver":
            from cuda.bindings.driver import CUresult as enum
        else:
            from cuda.bindings.runtime import cudaError_t as enum
    except ImportError:  # pragma: no cover - cuda-bindings is a dependency
        return {}
    return {int(member): (member.name, _first_sentence(member.__doc__)) for member in enum}


def _entry(kind: str, code: int) -> tuple[str, str]:
    name, text = _shipped()[kind].get(code, ("", ""))
    if not name or not text:
        enum_name, enum_text = _bindings_enum(kind).get(code, ("", ""))
        name = name or enum_name
        text = text or enum_text
    if not name:
        name = f"CUDA_ERROR_{code}" if kind == "driver" else f"cudaError{code}"
    if not text:
        text = f"unknown CUDA status {code}"
    return name, text


@cache
def driver_entry(code: int) -> tuple[str, str]:
    """``(name, description)`` of a driver ``CUresult`` code; never fails."""
    return _entry("driver", code)


@cache
def runtime_entry(code: int) -> tuple[str, str]:
    """``(name, description)`` of a runtime ``cudaError_t`` code; never fails."""
    return _entry("runtime", code)
