"""A CUDA graph built by stream capture, then launched twice.

Work queued on a ``GraphBuilder`` between ``begin_building()`` and
``end_building()`` is captured, not run; ``complete()`` makes the executable
graph, whose launches replay it. Each launch doubles the data twice here.
"""

import numpy as np

from cuguard.graphs import GraphBuilder
from cuguard.resources import Device, LaunchConfig, Program, ProgramOptions, launch

SOURCE = r"""
extern "C" __global__ void scale(float* data, float factor, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] *= factor;
}
"""

dev = Device()
dev.set_current()
code = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"compute_{dev.arch}")).compile("ptx")
scale = code.get_kernel("scale")

n = 4096
data = np.arange(n, dtype=np.float32)
config = LaunchConfig(grid=(n + 127) // 128, block=128)
with dev.create_stream() as stream:
    buf = dev.allocate(data.nbytes, stream=stream)
    buf.copy_from(data, stream=stream)
    stream.sync()

    builder = GraphBuilder(stream).begin_building()
    launch(builder, config, scale, buf, np.float32(2.0), n)  # captured: nothing runs yet
    launch(builder, config, scale, buf, np.float32(2.0), n)
    graph = builder.end_building().complete()
    builder.close()

    graph.launch(stream)
    graph.launch(stream)
    result = np.empty_like(data)
    buf.copy_to(result, stream=stream)
    stream.sync()
    graph.close()
    buf.close()

assert np.array_equal(result, data * 16)
print("graph of two captured launches, launched twice: ok")
