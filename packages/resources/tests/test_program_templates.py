"""A templated kernel compiled to a cubin by NVRTC, found and launched by its C++ name (B2).

NVRTC runs on the CPU: on the simulated driver the kernel runs through a stand-in
registered under the name expression the program compiled (``"saxpy<float>"``),
on a GPU the compiled code runs. Skipped where NVRTC is not installed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cuguard.errors import LibraryNotFoundError
from cuguard.resources import Device, LaunchConfig, ObjectCode, Program, ProgramOptions, launch
from cuguard.testing import DevicePointer, KernelLaunch, SimulatedDriver, remove_stand_in, stand_in

SAXPY_CU = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""

SEEN: list[KernelLaunch] = []


def _saxpy_float(launch: KernelLaunch, a: int, x: DevicePointer, y: DevicePointer, n: int) -> None:
    """``saxpy<float>``: from a cubin the kernel's 4-byte float parameter arrives as its bits."""
    SEEN.append(launch)
    (scale,) = struct.unpack("<f", struct.pack("<I", a))
    y.array(np.float32, n)[:] += np.float32(scale) * x.array(np.float32, n)


@pytest.fixture
def saxpy_cubin(device: Device) -> Iterator[ObjectCode]:
    """``saxpy<float>`` and ``saxpy<double>`` in a cubin for the device; the float one has a stand-in."""
    major, minor = device.compute_capability
    program = Program(SAXPY_CU, code_type="c++", options=ProgramOptions(arch=f"sm_{major}{minor}", std="c++17"))
    try:
        code = program.compile("cubin", name_expressions=("saxpy<float>", "saxpy<double>"))
    except LibraryNotFoundError as exc:
        pytest.skip(f"NVRTC is not installed: {exc}")
    SEEN.clear()
    stand_in("saxpy<float>")(_saxpy_float)
    yield code
    remove_stand_in("saxpy<float>")


@pytest.mark.contract("B2")
def test_a_templated_kernel_from_a_cubin_runs_by_its_name_expression(
    device: Device, cuguard_driver: Any, saxpy_cubin: ObjectCode
) -> None:
    lowered = saxpy_cubin.symbol_mapping["saxpy<float>"]
    assert lowered.startswith("_Z")
    assert lowered != saxpy_cubin.symbol_mapping["saxpy<double>"]
    n = 300
    previous = device.set_current()
    try:
        kernel = saxpy_cubin.get_kernel("saxpy<float>")  # a weak symbol of the cubin, found by the driver
        assert saxpy_cubin.get_kernel("saxpy<double>").module is kernel.module
        with device.create_stream() as stream:
            x = device.allocate(4 * n, stream=stream)
            y = device.allocate(4 * n, stream=stream)
            x.copy_from(np.arange(n, dtype=np.float32), stream=stream)
            y.copy_from(np.ones(n, dtype=np.float32), stream=stream)
            launch(stream, LaunchConfig(grid=(n + 127) // 128, block=128), kernel, np.float32(3.0), x, y, n)
            out = np.empty(n, dtype=np.float32)
            y.copy_to(out, stream=stream)
            stream.sync()
            x.close()
            y.close()
    finally:
        if previous is not None:
            previous.set_current()
    assert np.array_equal(out, 1 + 3 * np.arange(n, dtype=np.float32))
    if isinstance(cuguard_driver, SimulatedDriver):
        (seen,) = SEEN
        assert (seen.kernel, seen.grid, seen.block, seen.cluster) == (lowered, (3, 1, 1), (128, 1, 1), (1, 1, 1))
    else:
        assert SEEN == []  # a GPU runs the compiled kernel, never the stand-in


@pytest.mark.contract("B2")
def test_a_cubin_template_kernel_without_a_stand_in_names_its_name_expression(
    device: Device, cuguard_driver: Any, saxpy_cubin: ObjectCode
) -> None:
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("stand-ins are the simulator's")
    from cuguard.testing import MissingStandInError

    with device.load_module(saxpy_cubin) as module, device.create_stream() as stream, device.allocate(8) as buf:
        kernel = module.get_kernel("saxpy<double>")
        with pytest.raises(MissingStandInError, match=r"stand_in\('saxpy<double>'\)") as info:
            launch(stream, LaunchConfig(1, 1), kernel, np.float64(1.0), buf, buf, 1)
        assert info.value.kernel == saxpy_cubin.symbol_mapping["saxpy<double>"]
