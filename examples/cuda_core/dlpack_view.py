"""A DLPack consumer that reads any producer through a typed view.

``args_viewable_as_strided_memory`` hands the function's first argument over
as something ``.view(stream)`` turns into a ``StridedMemoryView``: shape,
strides, dtype, device and read-only flag of whatever the caller passed (here
a typed view of a cuguard buffer, exported through DLPack, and a NumPy array).
Device memory is scaled by a kernel, in place.
"""

import numpy as np

from cuguard.resources import (
    Device,
    LaunchConfig,
    Program,
    ProgramOptions,
    StridedMemoryView,
    args_viewable_as_strided_memory,
    launch,
)

SOURCE = r"""
extern "C" __global__ void scale(float* data, float factor, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] *= factor;
}
"""

dev = Device()
dev.set_current()
kernel = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"compute_{dev.arch}")).compile("ptx")
scale = kernel.get_kernel("scale")


@args_viewable_as_strided_memory((0,))
def double_in_place(array, stream):
    """Double a C-contiguous float32 array on the device; host memory is refused."""
    view = array.view(stream.handle)  # the producer's work is ordered before this stream
    if view.dtype != np.float32 or view.strides is not None:
        raise TypeError(f"need a C-contiguous float32 array, got {view.dtype} with strides {view.strides}")
    if not view.is_device_accessible:
        raise ValueError(f"the array is on the host (device_id {view.device_id}), not on a device")
    launch(stream, LaunchConfig(grid=(view.size + 255) // 256, block=256), scale, view, np.float32(2.0), view.size)
    return view.shape


rows, cols = 64, 48
host = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
with dev.create_stream() as stream, dev.allocate(host.nbytes, stream=stream) as buf:
    buf.copy_from(host, stream=stream)
    matrix = StridedMemoryView.from_buffer(buf, (rows, cols), dtype=np.float32)
    consumed = StridedMemoryView.from_dlpack(matrix, stream_ptr=int(stream.handle))  # through DLPack
    assert (consumed.shape, consumed.dtype, consumed.device_id) == ((rows, cols), np.float32, dev.ordinal)

    shape = double_in_place(matrix, stream)
    result = np.empty_like(host)
    buf.copy_to(result, stream=stream)
    stream.sync()

    try:
        double_in_place(host, stream)
    except ValueError as refused:
        print("host memory refused:", refused)
    else:
        raise AssertionError("a host array was accepted")
    del consumed  # the DLPack consumer lets go of the buffer before it is freed

assert shape == (rows, cols)
assert np.array_equal(result, host * 2)
print(f"a {rows}x{cols} float32 view doubled through DLPack: ok")
