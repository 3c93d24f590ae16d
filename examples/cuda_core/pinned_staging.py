"""Pinned staging: host data -> pinned buffer -> device -> kernel -> pinned buffer.

A ``PinnedMemoryResource`` hands out page-locked host buffers the program
fills through NumPy; ``copy_to``/``copy_from`` move them to and from device
memory of the device's default memory resource (``dev.memory_resource``), all
ordered on one stream.
"""

import numpy as np

from cuguard.resources import Device, LaunchConfig, PinnedMemoryResource, Program, ProgramOptions, launch

SOURCE = r"""
extern "C" __global__ void scale(float* data, float factor, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] *= factor;
}
"""

dev = Device()
dev.set_current()
scale = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"compute_{dev.arch}")).compile("ptx")
kernel = scale.get_kernel("scale")

n = 1 << 20
data = np.linspace(-1, 1, n, dtype=np.float32)
with dev.create_stream() as stream, PinnedMemoryResource(dev) as pinned_mr:
    staging = pinned_mr.allocate(data.nbytes, stream=stream)
    device_buf = dev.memory_resource.allocate(data.nbytes, stream=stream)
    stream.sync()  # the pinned allocation is ordered on the stream: wait before the host writes to it
    staging.numpy(np.float32)[:] = data

    staging.copy_to(device_buf, stream=stream)  # host -> device
    launch(stream, LaunchConfig(grid=n // 256, block=256), kernel, device_buf, np.float32(3.0), n)
    staging.copy_from(device_buf, stream=stream)  # device -> host
    stream.sync()

    result = staging.numpy(np.float32).copy()
    device_buf.close(stream)
    staging.close(stream)
    stream.sync()

assert np.allclose(result, data * 3)
print(f"pinned staging of {data.nbytes >> 20} MiB through {type(dev.memory_resource).__name__}: ok")
