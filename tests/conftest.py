"""Fixtures of the cross-layer contract suite (run against the installed meta-package ``cuguard``).

The suite runs on the simulated driver by default and on a GPU with
``-p cuguard.testing.plugin --cuguard-driver=real`` (the plugin's ``cuguard_driver``
fixture). Kernels: PTX with Python emulations on the simulator, CUDA C++ compiled
with NVRTC on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.context import Context
from cuguard.errors import CUDAError, driver
from cuguard.resources import Device, Kernel, LaunchConfig, Program, Stream
from cuguard.testing import SimulatedDriver, settle

SIZE = 64

KERNELS_CU = r"""
extern "C" __global__ void fill_u8(unsigned char* out, unsigned int value, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned char)value;
}
extern "C" __global__ void add_u8(unsigned char* out, unsigned int value, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned char)(out[i] + value);
}
"""

KERNELS_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill_u8(.param .u64 out, .param .u32 value, .param .u64 n) { ret; }
.visible .entry add_u8(.param .u64 out, .param .u32 value, .param .u64 n) { ret; }
.visible .entry poke(.param .u64 address) { ret; }
"""


def emulate(sim: SimulatedDriver) -> None:
    """The Python emulations of the PTX kernels (``poke`` faults, as a kernel writing to a bad address)."""

    def fill_u8(s: Any, out: int, value: int, n: int) -> None:
        s.write(out, bytes([int(value) & 0xFF]) * int(n))

    def add_u8(s: Any, out: int, value: int, n: int) -> None:
        data = s.read(out, int(n))
        s.write(out, bytes((b + int(value)) & 0xFF for b in data))

    def poke(s: Any, address: int) -> None:
        s.write(int(address), b"\x01")

    sim.register_kernel("fill_u8", fill_u8)
    sim.register_kernel("add_u8", add_u8)
    sim.register_kernel("poke", poke)


def no_context() -> None:
    driver.cuCtxSetCurrent(cb.CUcontext(0))


def current_handle() -> int:
    err, handle = driver.cuCtxGetCurrent()
    assert not err
    return int(handle)


@pytest.fixture
def is_sim(cuguard_driver: Any) -> bool:
    return isinstance(cuguard_driver, SimulatedDriver)


@pytest.fixture
def dev(cuguard_driver: Any) -> Iterator[Device]:
    """Device 0 with its primary context retained; no context current before and after the test."""
    if isinstance(cuguard_driver, SimulatedDriver):
        emulate(cuguard_driver)
    device = Device(0)
    device.context  # noqa: B018 - retain the primary context before any leak check starts
    no_context()
    yield device
    settle(cuguard_driver)
    no_context()


@pytest.fixture
def stream(dev: Device) -> Iterator[Stream]:
    s = dev.create_stream()
    yield s
    with contextlib.suppress(CUDAError):
        s.sync()
    with contextlib.suppress(CUDAError):
        s.close()


@pytest.fixture
def image(dev: Device, is_sim: bool) -> bytes:
    """The kernels: PTX for the simulator, a cubin compiled with NVRTC for the GPU."""
    if is_sim:
        return KERNELS_PTX
    major, minor = dev.compute_capability
    return Program(KERNELS_CU, options=[f"-arch=sm_{major}{minor}"]).compile("cubin").code


@pytest.fixture
def kernels(dev: Device, image: bytes) -> dict[str, Kernel]:
    """``fill_u8``, ``add_u8`` (and ``poke`` on the simulator) of one module (not closed: graphs may keep it)."""
    module = dev.load_module(image)
    names = ["fill_u8", "add_u8"] + (["poke"] if b"poke" in image else [])
    return {name: module.get_kernel(name) for name in names}


@pytest.fixture
def config() -> LaunchConfig:
    return LaunchConfig(grid=1, block=SIZE)


@pytest.fixture
def other_context(dev: Device) -> Iterator[Context]:
    """A created context, current during the test (so that work in the device's context must switch)."""
    ctx = Context.create(0)
    ctx.set_current()
    yield ctx
    no_context()
    with contextlib.suppress(CUDAError):
        ctx.close()


@pytest.fixture
def settled(cuguard_driver: Any) -> Callable[[], None]:
    """Call to let every pending release happen (see :func:`settle`)."""
    return lambda: settle(cuguard_driver)


@pytest.fixture
def read() -> Callable[[Any], bytes]:
    """Call with a device buffer: its bytes (a synchronous copy)."""

    def read_bytes(buf: Any) -> bytes:
        host = bytearray(buf.size)
        buf.copy_to(host)
        return bytes(host)

    return read_bytes
