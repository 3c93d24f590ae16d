from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import driver
from cuguard.resources import Device, Module, Program
from cuguard.testing import SimulatedDriver

KERNELS_CU = r"""
extern "C" __global__ void empty() {}
extern "C" __global__ void fill_u32(unsigned int* out, unsigned int value, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
extern "C" __global__ void poke(unsigned long long address) {
    *(volatile int*)address = 1;
}
"""

# The same entry points as PTX text, for the simulated driver (which runs Python emulations).
KERNELS_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty() { ret; }
.visible .entry fill_u32(.param .u64 out, .param .u32 value, .param .u64 n) { ret; }
.visible .entry poke(.param .u64 address) { ret; }
"""


def _emulate(sim: SimulatedDriver) -> None:
    def fill_u32(s: Any, out: int, value: int, n: int) -> None:
        s.write(out, int(value).to_bytes(4, "little") * int(n))

    sim.register_kernel("empty", lambda s: None)
    sim.register_kernel("fill_u32", fill_u32)

    def poke(s: Any, address: int) -> None:
        s.write(int(address), b"\x01\x00\x00\x00")

    sim.register_kernel("poke", poke)


@pytest.fixture
def device(cuguard_driver: Any) -> Iterator[Device]:
    """Device 0, with nothing current before and after the test."""
    if isinstance(cuguard_driver, SimulatedDriver):
        _emulate(cuguard_driver)
    dev = Device(0)
    from cuda.bindings.driver import CUcontext

    driver.cuCtxSetCurrent(CUcontext(0))
    yield dev
    driver.cuCtxSetCurrent(CUcontext(0))


@pytest.fixture
def other_context(device: Device) -> Iterator[Context]:
    """A created context, current during the test (so Device methods must switch)."""
    ctx = Context.create(0)
    previous = ctx.set_current()
    yield ctx
    from cuda.bindings.driver import CUcontext

    driver.cuCtxSetCurrent(CUcontext(0) if previous is None else previous.handle)
    ctx.close()


@pytest.fixture
def own_context(device: Device) -> Iterator[Context]:
    """The device's context, current during the test (so Device methods need no switch: C1)."""
    with device:
        yield device.context


@pytest.fixture
def module(device: Device, cuguard_driver: Any) -> Iterator[Module]:
    if isinstance(cuguard_driver, SimulatedDriver):
        image: bytes = KERNELS_PTX
    else:
        major, minor = device.compute_capability
        image = Program(KERNELS_CU, options=[f"-arch=sm_{major}{minor}"]).compile("cubin")
    mod = device.load_module(image)
    yield mod
    mod.close()
