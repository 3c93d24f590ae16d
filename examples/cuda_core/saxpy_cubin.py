"""A templated SAXPY kernel compiled to a cubin, found by its C++ name.

``Program.compile("cubin", name_expressions=...)`` instantiates the template
for ``float``; ``get_kernel("saxpy<float>")`` finds that instantiation by the
name the program wrote. The result is checked against NumPy.
"""

import numpy as np

from cuguard.resources import Device, LaunchConfig, Program, ProgramOptions, launch

SOURCE = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

dev = Device()
dev.set_current()
program = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}", std="c++17"))
code = program.compile("cubin", name_expressions=("saxpy<float>",))
kernel = code.get_kernel("saxpy<float>")

n = 10_000
a = np.float32(2.5)
x = np.random.default_rng(0).random(n, dtype=np.float32)
y = np.random.default_rng(1).random(n, dtype=np.float32)
with dev.create_stream() as stream:
    dx = dev.allocate(x.nbytes, stream=stream)
    dy = dev.allocate(y.nbytes, stream=stream)
    dx.copy_from(x, stream=stream)
    dy.copy_from(y, stream=stream)
    block = 256
    launch(stream, LaunchConfig(grid=(n + block - 1) // block, block=block), kernel, a, dx, dy, n)
    result = np.empty_like(y)
    dy.copy_to(result, stream=stream)
    stream.sync()
    dx.close()
    dy.close()

assert np.allclose(result, a * x + y)
print(f"saxpy<float> ({code.lowered_name('saxpy<float>')}) on {n} elements: ok")
