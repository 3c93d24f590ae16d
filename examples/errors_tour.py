"""A short tour of cuguard.errors: how cuguard reports CUDA failures.

Runs on any machine, with or without a GPU:

    python -m pip install ./packages/errors
    python examples/errors_tour.py
"""

from __future__ import annotations

import pickle
import warnings

from cuda.bindings.driver import CUresult

from cuguard.errors import CUDADriverNotFoundError, CUDAError, CUDAWarning, check, driver, report


def section(title: str) -> None:
    print(f"\n== {title}")


section("A failed driver call raises CUDAError, which carries data, not only text")
try:
    check(CUresult.CUDA_ERROR_OUT_OF_MEMORY, "cuMemAllocAsync")  # what cuguard does with every status
except CUDAError as error:
    print(f"str(error)   {error}")
    print(f"code         {error.code}")
    print(f"name         {error.name}")
    print(f"description  {error.description}")
    print(f"call         {error.call}")
    print(f"is_sticky    {error.is_sticky}")
    oom = error

section("Sticky errors (the driver refuses all further work) say so")
illegal = CUDAError(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize")
print(f"{illegal}\nis_sticky    {illegal.is_sticky}")

section("Errors pickle with every attribute and note (e.g. to cross a process boundary)")
oom.add_note("while handling this error, cleanup also failed: cuStreamDestroy(0x10) failed: ...")
copy = pickle.loads(pickle.dumps(oom))
print(f"{copy!r}\nnotes        {copy.__notes__}")

section("Where nothing can be raised (garbage collection, callbacks) cuguard warns instead")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    report(CUresult.CUDA_ERROR_INVALID_CONTEXT, "cuStreamDestroy", 0x55D0C1A2B3C0)
for warning in caught:
    print(f"{warning.category.__name__}: {warning.message}")
print(f"CUDAWarning is a RuntimeWarning: {issubclass(CUDAWarning, RuntimeWarning)}")

section("Talking to the driver")
try:
    (status, version) = driver.cuDriverGetVersion()
    check(status, "cuDriverGetVersion")
    print(f"CUDA driver {version // 1000}.{version % 1000 // 10} is installed")
except CUDADriverNotFoundError as error:
    print(f"{type(error).__name__}: {error}")
