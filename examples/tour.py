"""A short tour of cuguard: resources, a kernel, and what happens when things fail.

Runs on a GPU when one is present, and on cuguard's simulated driver otherwise
(the first line says which). From a clone of the repository:

    python -m pip install ./packages/errors ./packages/context ./packages/resources ./packages/testing numpy
    python examples/tour.py
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from cuguard.context import Context
from cuguard.errors import CUDADriverNotFoundError, CUDAError, CUDAWarning
from cuguard.resources import Device, LaunchConfig, Module, Program, launch
from cuguard.testing import inject, simulated_driver

SOURCE = r"""
extern "C" __global__ void scale(float* data, float factor, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) data[i] *= factor;
}
"""
PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry scale(.param .u64 data, .param .f32 factor, .param .u64 n) { ret; }
"""


def _gpu_present() -> bool:
    try:
        return Device.count() > 0
    except (CUDADriverNotFoundError, CUDAError):
        return False


@contextlib.contextmanager
def _driver() -> Iterator[Any]:
    if _gpu_present():
        print(f"cuguard tour on a real GPU: {Device(0).name}")
        yield None
        return
    print("cuguard tour on the simulated driver (no GPU here): the same code, the same failures")
    with simulated_driver(devices=1) as sim:

        def scale(s: Any, data: int, factor: float, n: int) -> None:
            values = np.frombuffer(s.read(data, 4 * n), dtype=np.float32) * np.float32(factor)
            s.write(data, values.tobytes())

        sim.register_kernel("scale", scale)
        yield sim


def section(title: str) -> None:
    print(f"\n== {title}")


def main() -> None:
    with _driver() as sim:
        dev = Device(0)

        section("Resources and a kernel")
        with dev.create_stream() as stream, dev.allocate(4 * 8, stream=stream) as buf:
            host = np.arange(8, dtype=np.float32)
            buf.copy_from(host, stream=stream)
            if sim is None:
                major, minor = dev.compute_capability
                image: bytes = Program(SOURCE, options=[f"-arch=sm_{major}{minor}"]).compile("cubin").code
            else:
                image = PTX
            with dev.load_module(image) as module:
                launch(stream, LaunchConfig(grid=1, block=8), module.get_kernel("scale"), buf, 2.0, 8)
                out = np.empty_like(host)
                buf.copy_to(out, stream=stream)
                stream.sync()
            print(f"doubled on the device: {out.tolist()}")

        section("A failed call raises, undoes what it did, and leaves the context alone")
        other = Context.create(0)
        other.set_current()
        stream = dev.create_stream()
        with inject("cuEventRecord", 1), inject("cuEventDestroy", 201):
            try:
                stream.record()  # creates an event, records it: the record fails, so does the cleanup
            except CUDAError as error:
                print(f"raised:  {error}")
                for note in error.__notes__:
                    print(f"note:    {note}")
        print(f"context unchanged: {Context.current() == other}")

        section("A resource collected after its context was destroyed is leaked and reported")
        stream.close()
        module = Module.load(other, image)  # loaded into the context made above
        other.close()  # the context is destroyed under the module's feet
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CUDAWarning)
            del module
            gc.collect()
        for warning in caught:
            print(f"{warning.category.__name__}: {warning.message}")
        print("the process is still alive; the module was never unloaded from a destroyed context")


if __name__ == "__main__":
    main()
