"""Two devices, each with its own stream, working on halves of one array.

Each device compiles and runs its own copy of the kernel on its half; the
halves meet in pinned memory, which a ``PinnedMemoryResource`` makes usable
from every device. With fewer than two devices the program says so and exits.
"""

import sys

import numpy as np

from cuguard.resources import Device, LaunchConfig, PinnedMemoryResource, Program, ProgramOptions, launch, system

if system.get_num_devices() < 2:
    print("two_devices: this program needs two CUDA devices; skipped")
    sys.exit(0)

SOURCE = r"""
extern "C" __global__ void add_one(float* data, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1.0f;
}
"""

devices = [Device(0), Device(1)]
n = 1 << 16
half = n // 2
data = np.arange(n, dtype=np.float32)

with PinnedMemoryResource(devices[0]) as pinned:
    staging = pinned.allocate(data.nbytes)
    staging.numpy(np.float32)[:] = data
    host = staging.numpy(np.float32)
    parts = []
    for index, dev in enumerate(devices):
        code = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"compute_{dev.arch}")).compile("ptx")
        module = dev.load_module(code)
        stream = dev.create_stream()
        part = dev.allocate(half * 4, stream=stream)
        mine = pinned.allocate(half * 4, stream=stream)  # pinned memory, used from this device's stream
        stream.sync()
        mine.numpy(np.float32)[:] = host[index * half : (index + 1) * half]
        part.copy_from(mine, stream=stream)
        launch(stream, LaunchConfig(grid=half // 256, block=256), module.get_kernel("add_one"), part, half)
        mine.copy_from(part, stream=stream)
        parts.append((stream, module, part, mine))
    results = []
    for stream, module, part, mine in parts:
        stream.sync()
        results.append(mine.numpy(np.float32).copy())
        part.close()
        mine.close()
        module.close()
        stream.close()
    del host
    staging.close()

assert np.array_equal(np.concatenate(results), data + 1)
print(f"two devices ({devices[0].name!r}, {devices[1].name!r}) each added one to half of {n} elements: ok")
