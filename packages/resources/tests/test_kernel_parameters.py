"""Kernel arguments follow the kernel's real parameter list, on both drivers (E3).

The kernel is loaded from PTX (names and types known, on both drivers) and, on
the real driver, also from a cubin (offsets and sizes from cuFuncGetParamInfo).
On the simulator the PTX kernel runs through a stand-in that does what the CUDA
source does, so the values read back prove what the kernel received.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cuguard.resources import Device, Kernel, LaunchConfig, Program, launch
from cuguard.testing import KernelLaunch, SimulatedDriver, record_calls, register_stand_in, remove_stand_in

MIXED_CU = r"""
struct Pair { int x; int y; };
extern "C" __global__ void mixed(double* out, float a, double b, int c, unsigned char d,
                                 unsigned long long e, Pair p) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = a; out[1] = b; out[2] = c; out[3] = d; out[4] = (double)e; out[5] = p.x; out[6] = p.y;
    }
}
"""

# What NVRTC makes of MIXED_CU (entry and parameter list), with a body the simulator does not run.
MIXED_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry mixed(
    .param .u64 mixed_param_0, .param .f32 mixed_param_1, .param .f64 mixed_param_2,
    .param .u32 mixed_param_3, .param .u8 mixed_param_4, .param .u64 mixed_param_5,
    .param .align 4 .b8 mixed_param_6[8]
)
{
    ld.param.u64 %rd1, [mixed_param_0];
    ret;
}
"""


def _mixed(launch: KernelLaunch, out: Any, a: Any, b: Any, c: int, d: int, e: int, p: Any) -> None:  # noqa: PLR0917
    # From PTX the arguments arrive typed; from a cubin (sizes only) as unsigned integers of
    # their size, whose bytes are the values. PTX declares `int c` as .u32 either way.
    if isinstance(a, int):
        a = struct.unpack("<f", struct.pack("<I", a))[0]
        b = struct.unpack("<d", struct.pack("<Q", b))[0]
        p = struct.pack("<Q", p)
    x, y = struct.unpack("<ii", p)
    out.array(np.float64, 7)[:] = (a, b, ctypes.c_int32(c).value, d, float(e), x, y)


class Pair(ctypes.Structure):
    _fields_ = [("x", ctypes.c_int), ("y", ctypes.c_int)]


@pytest.fixture(params=["ptx", "cubin"])
def mixed(request: pytest.FixtureRequest, device: Device, cuguard_driver: Any) -> Iterator[Kernel]:
    """The kernel ``mixed``, from PTX or from a cubin (NVRTC's, on both drivers)."""
    sim = isinstance(cuguard_driver, SimulatedDriver)
    if request.param == "ptx":
        if sim:
            image = MIXED_PTX
        else:
            major, minor = device.compute_capability
            image = Program(MIXED_CU, options=[f"-arch=compute_{major}{minor}"]).compile("ptx")
    else:  # a cubin: on the simulator too, which reads the sizes NVRTC wrote into it
        major, minor = device.compute_capability
        image = Program(MIXED_CU, options=[f"-arch=sm_{major}{minor}"]).compile("cubin")
    register_stand_in("mixed", _mixed)
    module = device.load_module(image)
    try:
        yield module.get_kernel("mixed")
    finally:
        module.close()
        remove_stand_in("mixed")


def _run(device: Device, kernel: Kernel, *args: Any) -> list[float]:
    out = device.allocate(7 * 8)
    stream = device.create_stream()
    try:
        launch(stream, LaunchConfig(1, 32), kernel, out, *args)
        stream.sync()
        host = bytearray(7 * 8)
        out.copy_to(host)
        return list(np.frombuffer(host, dtype=np.float64))
    finally:
        stream.close()
        out.close()


@pytest.mark.contract("E3")
def test_the_parameter_list_is_known_from_ptx_or_the_driver(mixed: Kernel) -> None:
    params = mixed.parameters
    assert params is not None
    assert [p.size for p in params] == [8, 4, 8, 4, 1, 8, 8]
    assert [p.offset for p in params] == [0, 8, 16, 24, 28, 32, 40]
    if params[0].type is not None:  # from PTX
        assert [p.type for p in params] == ["u64", "f32", "f64", "u32", "u8", "u64", "b8[8]"]
        assert [p.kind for p in params] == ["integer", "float", "float", "integer", "integer", "integer", "bytes"]
    else:  # from cuFuncGetParamInfo: sizes only
        assert {p.kind for p in params} == {"sized"}
        assert {p.type for p in params} == {None}


@pytest.mark.contract("E3")
def test_values_reach_the_kernel_as_their_parameters_declare_them(device: Device, mixed: Kernel) -> None:
    # A Python float goes in as a 32-bit float for `float a` and as a 64-bit one for `double b`.
    third = 1 / 3
    got = _run(device, mixed, third, third, -7, 255, 2**53, Pair(4, -5))
    assert got[0] == float(np.float32(third))
    assert got[1] == third
    assert got[2:] == [-7.0, 255.0, float(2**53), 4.0, -5.0]
    # bytes of the struct's size and NumPy scalars work too.
    got = _run(
        device, mixed, np.float32(2), np.float32(0.5), np.int32(3), np.uint8(1), np.uint64(9), struct.pack("<ii", 1, 2)
    )
    assert got == [2.0, 0.5, 3.0, 1.0, 9.0, 1.0, 2.0]
    params = mixed.parameters
    assert params is not None
    if params[1].type is not None:  # a declared float takes an int; a cubin's 4-byte parameter takes its bits
        assert _run(device, mixed, 2, 0.0, 0, 0, 0, bytes(8))[0] == 2.0


def _refused(device: Device, kernel: Kernel, args: tuple[Any, ...], *needles: str) -> None:
    out = device.allocate(7 * 8)
    stream = device.create_stream()
    try:
        with record_calls() as log, pytest.raises(TypeError) as info:
            launch(stream, LaunchConfig(1, 32), kernel, out, *args)
        assert "cuLaunchKernel" not in [c.name for c in log]
        message = str(info.value)
        assert "mixed(" in message, message
        for needle in needles:
            assert needle in message, message
    finally:
        stream.close()
        out.close()


GOOD = (1.0, 2.0, 3, 4, 5, Pair(1, 2))


@pytest.mark.contract("E3")
@pytest.mark.parametrize("count", [0, 5, 7])
def test_a_wrong_count_of_arguments_names_the_kernel_and_its_parameters(
    device: Device, mixed: Kernel, count: int
) -> None:
    args = ((*GOOD, 0))[:count]
    _refused(device, mixed, args, "takes 7 arguments", f"{count + 1} given")


@pytest.mark.contract("E3")
@pytest.mark.parametrize(
    ("index", "value"),
    [(4, 256), (4, -129), (3, 2**32), (5, 2**64), (6, b"1234567"), (6, "text"), (1, object())],
)
def test_a_value_that_does_not_fit_is_refused_before_the_launch(
    device: Device, mixed: Kernel, index: int, value: Any
) -> None:
    args = list(GOOD)
    args[index - 1] = value
    _refused(device, mixed, tuple(args), f"argument {index}")


@pytest.mark.contract("E3")
def test_typed_parameters_refuse_a_float_for_an_integer_or_a_pointer_and_memory_for_a_float(
    device: Device, mixed: Kernel
) -> None:
    params = mixed.parameters
    assert params is not None
    if params[0].type is None:
        pytest.skip("a cubin's parameters have sizes only: a float for an 8-byte parameter is a double")
    _refused(device, mixed, (1.0, 2.0, 3.5, 4, 5, Pair(1, 2)), "argument 3", "a float where an integer")
    _refused(device, mixed, (1.0, 2.0, 3, 4, 5.0, Pair(1, 2)), "argument 5", "a float where an integer")
    with device.allocate(8) as extra:
        _refused(device, mixed, (extra, 2.0, 3, 4, 5, Pair(1, 2)), "argument 1", "address")
    out = device.allocate(8)
    stream = device.create_stream()
    try:
        with pytest.raises(TypeError, match="argument 0"):
            launch(stream, LaunchConfig(1, 1), mixed, 0.5, *GOOD)
    finally:
        stream.close()
        out.close()


@pytest.mark.contract("E3")
def test_pack_gives_what_the_driver_reads_and_checks_like_launch(mixed: Kernel) -> None:
    packed, keep = mixed.pack([0, *GOOD])
    assert isinstance(packed, int)
    assert packed != 0
    assert keep is not None
    # The first pointer of the array points at the first parameter: the 0 given for `out`.
    first = ctypes.c_void_p.from_address(packed).value
    assert first is not None
    assert ctypes.c_uint64.from_address(first).value == 0
    with pytest.raises(TypeError, match="takes 7 arguments"):
        mixed.pack(GOOD)


SCALARS_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry scalars(.param .u64 data, .param .f32 factor, .param .f64 offset, .param .u32 n) { ret; }
"""


@pytest.mark.contract("E3")
def test_memory_for_a_float_parameter_is_refused_on_the_fast_path_too(device: Device) -> None:
    # Every parameter has a scalar type here, so packing takes its fast path first.
    with device.load_module(SCALARS_PTX) as module, device.create_stream() as stream, device.allocate(8) as buf:
        kernel = module.get_kernel("scalars")
        launch(stream, LaunchConfig(1, 1), kernel, buf, 1.0, 2, 3)
        for args, index in [((buf, buf, 2.0, 3), 1), ((buf, 1.0, buf, 3), 2), ((buf, 1.0, 2.0, buf), 3)]:
            with record_calls() as log, pytest.raises(TypeError, match=f"argument {index} "):
                launch(stream, LaunchConfig(1, 1), kernel, *args)
            assert "cuLaunchKernel" not in [c.name for c in log]
        stream.sync()


@pytest.mark.contract("E3")
def test_a_driver_without_cuFuncGetParamCount_still_gives_the_parameter_list(cuguard_driver: Any) -> None:
    # A CUDA 13.0 driver under newer cuda-bindings: the bindings have cuFuncGetParamCount and
    # the driver library does not (the bindings raise RuntimeError, as the H200's driver did).
    if not isinstance(cuguard_driver, SimulatedDriver):
        pytest.skip("the real driver has the entry point or not; this chooses the case on the simulator")
    from cuguard.testing import simulated_driver

    image = Program(MIXED_CU, options=["-arch=sm_90"]).compile("cubin")
    with simulated_driver(1, missing_entry_points=("cuFuncGetParamCount",)):
        device = Device(0)
        module = device.load_module(image)
        try:
            with record_calls() as log:
                kernel = module.get_kernel("mixed")
                params = kernel.parameters
            assert params is not None
            assert [p.size for p in params] == [8, 4, 8, 4, 1, 8, 8]
            assert [p.offset for p in params] == [0, 8, 16, 24, 28, 32, 40]
            names = [c.name for c in log]
            # Asked for each parameter, then past the last one twice: the end of the list is confirmed.
            assert names.count("cuFuncGetParamInfo") == 7 + 2, names
            stream = device.create_stream()
            out = device.allocate(7 * 8)
            try:
                with pytest.raises(TypeError, match="takes 7 arguments"):
                    launch(stream, LaunchConfig(1, 1), kernel, out)
            finally:
                out.close()
                stream.close()
        finally:
            module.close()
