"""Fixtures of the graph layer's tests (simulated driver by default, ``--cuguard-driver=real`` on a GPU)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.errors import driver
from cuguard.resources import Device, Module, Program, Stream
from cuguard.testing import SimulatedDriver, settle

KERNELS_CU = r"""
extern "C" __global__ void fill_u32(unsigned int* out, unsigned int value, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
extern "C" __global__ void add_u32(unsigned int* out, unsigned int value, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] += value;
}
extern "C" __global__ void copy_u32(unsigned int* out, const unsigned int* in, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}
"""

KERNELS_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill_u32(.param .u64 out, .param .u32 value, .param .u64 n) { ret; }
.visible .entry add_u32(.param .u64 out, .param .u32 value, .param .u64 n) { ret; }
.visible .entry copy_u32(.param .u64 out, .param .u64 in, .param .u64 n) { ret; }
"""


def _emulate(sim: SimulatedDriver) -> None:
    def fill_u32(s: Any, out: int, value: int, n: int) -> None:
        s.write(out, int(value).to_bytes(4, "little") * int(n))

    def add_u32(s: Any, out: int, value: int, n: int) -> None:
        data = bytearray(s.read(out, 4 * int(n)))
        for i in range(int(n)):
            v = (int.from_bytes(data[4 * i : 4 * i + 4], "little") + int(value)) & 0xFFFFFFFF
            data[4 * i : 4 * i + 4] = v.to_bytes(4, "little")
        s.write(out, bytes(data))

    def copy_u32(s: Any, out: int, src: int, n: int) -> None:
        s.write(out, s.read(src, 4 * int(n)))

    sim.register_kernel("fill_u32", fill_u32)
    sim.register_kernel("add_u32", add_u32)
    sim.register_kernel("copy_u32", copy_u32)


@pytest.fixture
def dev(cuguard_driver: Any) -> Iterator[Device]:
    """Device 0, with no context current before and after; graph releases settled at the end."""
    if isinstance(cuguard_driver, SimulatedDriver):
        _emulate(cuguard_driver)
    device = Device(0)
    device.context  # noqa: B018 - retain the primary context before any leak check starts
    driver.cuCtxSetCurrent(cb.CUcontext(0))
    yield device
    settle(cuguard_driver)
    driver.cuCtxSetCurrent(cb.CUcontext(0))


@pytest.fixture
def stream(dev: Device) -> Iterator[Stream]:
    s = dev.create_stream()
    yield s
    s.sync()
    s.close()


@pytest.fixture
def kernel_image(dev: Device, cuguard_driver: Any) -> bytes:
    """The test kernels: PTX for the simulator, a cubin compiled for the GPU on the real driver."""
    if isinstance(cuguard_driver, SimulatedDriver):
        return KERNELS_PTX
    major, minor = dev.compute_capability
    return Program(KERNELS_CU, options=[f"-arch=sm_{major}{minor}"]).compile("cubin")


@pytest.fixture
def module(dev: Device, kernel_image: bytes) -> Module:
    """The test kernels' module (not closed here: graphs in the tests may keep it alive)."""
    return dev.load_module(kernel_image)
