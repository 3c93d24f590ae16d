"""The simulated driver answers what user code asks around cuguard's calls, and the edge cases of
allocation, flags and priority arguments, as the real driver and cuda-bindings do.

scripts/differential.py runs the same cases on a real GPU (scenarios device_queries,
primary_context_*, *_allocation_edges, stream_flags_and_priorities, event_flags, context_flags,
function_attributes, zero_byte_memset_and_copy, binding_refusals).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cuda.bindings import driver as cb

from cuguard.testing._bindings import ctx_create
from cuguard.testing._sim import SimulatedCrash, SimulatedDriver, simulated_driver
from cuguard.testing._sim.arguments import argument_check

pytestmark = pytest.mark.contract("B2")

R = cb.CUresult
OK = R.CUDA_SUCCESS
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
A = cb.CUdevice_attribute
FA = cb.CUfunction_attribute
PTX = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry empty() { ret; }\n"


@pytest.fixture
def sim() -> Iterator[SimulatedDriver]:
    with simulated_driver(devices=2) as drv:
        assert drv.cuInit(0) == (OK,)
        yield drv


@pytest.fixture
def drv(sim: SimulatedDriver) -> SimulatedDriver:
    """The simulator with a created context current on device 0."""
    assert ctx_create(sim, 0, 0)[0] == OK
    return sim


def attribute(drv: SimulatedDriver, key: str, dev: int = 0) -> int:
    err, value = drv.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + key), dev)
    assert err == OK
    return int(value)


# --- what cuguard calls ----------------------------------------------------------------------------


def _called_by_cuguard() -> set[str]:
    root = Path(__file__).resolve().parents[2]
    names: set[str] = set()
    for path in root.glob("*/src/cuguard/*/**/*.py"):
        if "testing" in path.parts:
            continue
        names.update(re.findall(r"\bdriver\.(cu[A-Z]\w*)\(", path.read_text("utf-8")))
    return names


def test_every_driver_function_cuguard_calls_is_simulated() -> None:
    called = _called_by_cuguard()
    if not called:
        pytest.skip("the other packages' sources are not beside this one")
    assert len(called) > 40
    missing = sorted(name for name in called if hasattr(cb, name) and not hasattr(SimulatedDriver, name))
    assert missing == []


# --- what cuda-bindings refuses before the driver -----------------------------------------------

_WARP = A.CU_DEVICE_ATTRIBUTE_WARP_SIZE
REFUSED: list[tuple[str, tuple[Any, ...]]] = [
    ("cuMemAlloc", (-1,)),
    ("cuMemAlloc", (None,)),
    ("cuMemAlloc", ("64",)),
    ("cuMemAlloc", (1 << 64,)),
    ("cuMemAlloc", (-1.5,)),
    ("cuMemAlloc", (float("nan"),)),
    ("cuMemAllocAsync", (-1, 0)),
    ("cuMemAllocAsync", (64, -1)),
    ("cuMemAllocAsync", (64, "stream")),
    ("cuMemAllocHost", (-1,)),
    ("cuMemHostAlloc", (None, 0)),
    ("cuMemHostAlloc", (64, -1)),
    ("cuMemHostAlloc", (64, 1 << 32)),
    ("cuMemAllocManaged", (-1, 1)),
    ("cuMemAllocManaged", (64, None)),
    ("cuMemAllocPitch", (None, 1, 4)),
    ("cuMemAllocPitch", (64, 1, -4)),
    ("cuStreamCreate", (-1,)),
    ("cuStreamCreate", (None,)),
    ("cuStreamCreate", (1 << 32,)),
    ("cuStreamCreateWithPriority", (-1, 0)),
    ("cuStreamCreateWithPriority", (0, None)),
    ("cuStreamCreateWithPriority", (0, 1 << 31)),
    ("cuStreamCreateWithPriority", (0, -(1 << 31) - 1)),
    ("cuEventCreate", (-1,)),
    ("cuEventCreate", (None,)),
    ("cuEventCreate", (1 << 32,)),
    ("cuDevicePrimaryCtxSetFlags", (0, -1)),
    ("cuDevicePrimaryCtxSetFlags", (0, None)),
    ("cuDeviceGet", (None,)),
    ("cuDeviceGet", (1 << 31,)),
    ("cuDeviceGetAttribute", (None, 0)),
    ("cuDeviceGetAttribute", (1 << 40, 0)),
    ("cuDeviceGetAttribute", (-(1 << 30), 0)),
    ("cuDeviceGetAttribute", ("x", 0)),
    ("cuDeviceGetAttribute", (_WARP, 1 << 31)),
    ("cuDeviceGetAttribute", (_WARP, "x")),
    ("cuFuncGetAttribute", (None, 0)),
    ("cuFuncGetAttribute", (0, -1)),
    ("cuFuncSetAttribute", (0, None, 0)),
    ("cuFuncSetAttribute", (0, 0, 1 << 31)),
    ("cuMemsetD8", (0, 256, 1)),
    ("cuMemsetD8", (0, 1, -1)),
    ("cuMemsetD16", (0, 1 << 16, 1)),
    ("cuMemsetD32", (0, -1, 1)),
    ("cuMemFree", (-1,)),
    ("cuMemFree", ("p",)),
    ("cuMemcpyHtoD", (0, b"", -1)),
    ("cuCtxSetCurrent", (-1,)),
    ("cuStreamDestroy", (-1,)),
    ("cuGetErrorName", (None,)),
]


def _raised(call: Callable[[], Any]) -> type[BaseException]:
    with pytest.raises((TypeError, ValueError, OverflowError)) as info:
        call()
    return info.type


@pytest.mark.parametrize(("function", "args"), REFUSED, ids=[f"{f}{a!r}" for f, a in REFUSED])
def test_values_cuda_bindings_refuses_raise_the_same_exception(
    sim: SimulatedDriver, function: str, args: tuple[Any, ...]
) -> None:
    # cuda-bindings converts the arguments before it calls (or even loads) the driver, so the
    # real functions answer these on any machine.
    real = _raised(lambda: getattr(cb, function)(*args))
    assert _raised(lambda: getattr(sim, function)(*args)) is real


def test_refused_values_raise_before_anything_else(sim: SimulatedDriver) -> None:
    # Not initialized, or sticky: the conversion comes first, as in cuda-bindings.
    fresh = SimulatedDriver()
    with pytest.raises(OverflowError, match="negative value to size_t"):
        fresh.cuMemAlloc(-1)
    sim.poison(R.CUDA_ERROR_ILLEGAL_ADDRESS)
    untyped: Any = sim
    with pytest.raises(TypeError, match="an integer is required"):
        untyped.cuStreamCreate(None)
    sim.poison(None)


def test_accepted_conversions_reach_the_driver(drv: SimulatedDriver) -> None:
    # What cuda-bindings accepts: bools, floats (truncated), objects with __int__, handles of
    # another kind, None for a handle.
    class Size:
        def __int__(self) -> int:
            return 64

    untyped: Any = drv
    for size in (True, 64.9, Size()):
        err, ptr = untyped.cuMemAlloc(size)
        assert err == OK
        assert drv.cuMemFree(ptr) == (OK,)
    assert drv.cuStreamGetPriority(None) == (OK, 0)
    assert drv.cuStreamGetPriority(cb.CUevent(0)) == (OK, 0)  # a handle of another kind: its value
    assert drv.cuDeviceGetAttribute(int(_WARP), cb.CUdevice(0)) == (OK, 32)
    assert drv.cuDeviceGetAttribute(99999, 0) == (INVALID_VALUE, None)  # in range, not an attribute


def test_checks_apply_only_where_the_parameters_match() -> None:
    def renamed(self: Any, size: int) -> None: ...

    def same(self: Any, bytesize: int) -> None: ...

    assert argument_check("cuMemAlloc", renamed) is None
    assert argument_check("cuguardRestoreContext", same) is None
    check = argument_check("cuMemAlloc", same)
    assert check is not None
    check((64,), {})
    with pytest.raises(OverflowError):
        check((), {"bytesize": -1})


# --- devices ------------------------------------------------------------------------------------


def test_device_attributes_are_an_h200s(sim: SimulatedDriver) -> None:
    assert (attribute(sim, "COMPUTE_CAPABILITY_MAJOR"), attribute(sim, "COMPUTE_CAPABILITY_MINOR")) == (9, 0)
    assert attribute(sim, "MULTIPROCESSOR_COUNT") == 132
    assert attribute(sim, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN") == 232448
    assert attribute(sim, "VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED") == 1
    assert attribute(sim, "TEXTURE_PITCH_ALIGNMENT") == 32
    assert sim.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MAX, 0) == (INVALID_VALUE, None)
    assert sim.cuDeviceGetAttribute(_WARP, 2) == (R.CUDA_ERROR_INVALID_DEVICE, None)


def test_each_device_has_its_own_pci_location_and_uuid(sim: SimulatedDriver) -> None:
    uuids = set()
    for dev in (0, 1):
        err, raw = sim.cuDeviceGetPCIBusId(64, dev)
        assert err == OK
        assert len(raw) == 64
        text = bytes(raw).split(b"\0")[0].decode()
        domain, bus, rest = text.split(":")
        assert (int(domain, 16), int(bus, 16), rest) == (
            attribute(sim, "PCI_DOMAIN_ID", dev),
            attribute(sim, "PCI_BUS_ID", dev),
            "00.0",
        )
        uuids.add(bytes(sim.cuDeviceGetUuid(dev)[1].bytes))
    assert len(uuids) == 2
    assert bytes(16) not in uuids
    assert attribute(sim, "PCI_BUS_ID", 0) != attribute(sim, "PCI_BUS_ID", 1)
    assert sim.cuDeviceGetPCIBusId(0, 0) == (INVALID_VALUE, None)
    assert sim.cuDeviceGetPCIBusId(64, 7) == (R.CUDA_ERROR_INVALID_DEVICE, None)


def test_memory_info(sim: SimulatedDriver) -> None:
    assert sim.cuMemGetInfo() == (R.CUDA_ERROR_INVALID_CONTEXT, None, None)
    assert ctx_create(sim, 0, 0)[0] == OK
    free, total = sim.cuMemGetInfo()[1:]
    assert 0 < free <= total == sim.cuDeviceTotalMem(0)[1]
    _, ptr = sim.cuMemAlloc(1 << 20)
    assert sim.cuMemGetInfo()[1] == free - (1 << 20)
    sim.cuMemFree(ptr)


# --- primary contexts ---------------------------------------------------------------------------


def test_primary_context_state_and_flags(sim: SimulatedDriver) -> None:
    assert sim.cuDevicePrimaryCtxGetState(0) == (OK, 0, 0)
    for bad in (3, 5, 6, 7, 0x100):  # two scheduling flags, an unknown bit
        assert sim.cuDevicePrimaryCtxSetFlags(0, bad) == (INVALID_VALUE,)
    assert sim.cuDevicePrimaryCtxSetFlags(0, 4) == (OK,)
    assert sim.cuDevicePrimaryCtxGetState(0) == (OK, 4, 0)
    _, ctx = sim.cuDevicePrimaryCtxRetain(0)
    sim.cuCtxSetCurrent(ctx)
    assert sim.cuDevicePrimaryCtxGetState(0) == (OK, 4, 1)
    assert sim.cuCtxGetFlags() == (OK, 4 | 8)  # a primary context maps host memory (as on the H200)
    assert sim.cuDevicePrimaryCtxSetFlags(0, 1) == (OK,)  # also while active
    assert sim.cuCtxGetFlags() == (OK, 1 | 8)
    sim.cuCtxSetCurrent(cb.CUcontext(0))
    assert sim.cuDevicePrimaryCtxRelease(0) == (OK,)
    assert sim.cuDevicePrimaryCtxGetState(0) == (OK, 0, 0)  # the last release forgets the flags (H200)
    assert sim.cuDevicePrimaryCtxGetState(1) == (OK, 0, 0)
    assert sim.cuCtxGetFlags() == (R.CUDA_ERROR_INVALID_CONTEXT, None)


def test_created_context_flags(sim: SimulatedDriver) -> None:
    for flags in (0, 1, 2, 4, 8, 0x10, 0x80, 4 | 8):
        err, ctx = ctx_create(sim, flags, 0)
        assert err == OK
        assert sim.cuCtxGetFlags() == (OK, flags)
        assert sim.cuCtxDestroy(ctx) == (OK,)
    before = len(sim.live_objects())
    for bad in (3, 7, 0x100, 0x80000000):
        assert ctx_create(sim, bad, 0) == (INVALID_VALUE, None)
    assert len(sim.live_objects()) == before


def test_primary_context_reset_destroys_what_it_owned(sim: SimulatedDriver) -> None:
    assert sim.cuDevicePrimaryCtxReset(0) == (OK,)  # not retained: nothing to do
    sim.cuDevicePrimaryCtxSetFlags(0, 4)
    _, ctx = sim.cuDevicePrimaryCtxRetain(0)
    sim.cuCtxSetCurrent(ctx)
    free = sim.cuMemGetInfo()[1]
    _, ptr = sim.cuMemAlloc(1 << 20)
    _, stream = sim.cuStreamCreate(0)
    _, event = sim.cuEventCreate(0)
    _, mod = sim.cuModuleLoadData(PTX)
    kinds = sorted(obj.kind for obj in sim.live_objects())
    assert kinds == ["context", "device_memory", "event", "module", "stream"]
    assert sim.cuDevicePrimaryCtxReset(0) == (OK,)
    # Released by the driver: gone, and not reported anywhere.
    assert [obj.kind for obj in sim.live_objects()] == ["context"]
    assert sim.misuse == sim.double_release == sim.use_after_release == []
    assert sim.cuMemGetInfo()[1] == free
    # Still retained, with the same handle and flags, and usable; reported inactive until
    # retained again (as on the H200).
    assert sim.cuDevicePrimaryCtxGetState(0) == (OK, 4, 0)
    assert int(sim.cuDevicePrimaryCtxRetain(0)[1]) == int(ctx)
    assert sim.cuDevicePrimaryCtxGetState(0) == (OK, 4, 1)
    assert int(sim.cuCtxGetCurrent()[1]) == int(ctx)
    err, again = sim.cuMemAlloc(64)
    assert err == OK
    assert sim.cuMemFree(again) == (OK,)
    # What it owned belongs to a destroyed context now.
    with pytest.raises(SimulatedCrash):
        sim.cuStreamDestroy(stream)
    with pytest.raises(SimulatedCrash):
        sim.cuEventDestroy(event)
    with pytest.raises(SimulatedCrash):
        sim.cuMemFree(ptr)
    with pytest.raises(SimulatedCrash):
        sim.cuModuleUnload(mod)
    sim.cuCtxSetCurrent(cb.CUcontext(0))
    assert sim.cuDevicePrimaryCtxRelease(0) == (OK,)
    assert sim.cuDevicePrimaryCtxRelease(0) == (OK,)


# --- allocations --------------------------------------------------------------------------------


def test_device_allocation_edges(drv: SimulatedDriver) -> None:
    total = drv.cuDeviceTotalMem(0)[1]
    assert drv.cuMemAlloc(0) == (INVALID_VALUE, None)
    assert drv.cuMemAlloc(total + 1) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    assert drv.cuMemFree(cb.CUdeviceptr(0)) == (OK,)  # freeing NULL does nothing
    assert drv.double_release == []


def test_managed_allocation(drv: SimulatedDriver) -> None:
    for size, flags in ((0, 1), (64, 0), (64, 3), (64, 4)):
        assert drv.cuMemAllocManaged(size, flags) == (INVALID_VALUE, None)
    assert drv.cuMemAllocManaged(1 << 50, 1) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    for flags in (1, 2):  # CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST
        err, ptr = drv.cuMemAllocManaged(64, flags)
        assert err == OK
        assert drv.cuMemcpyHtoD(ptr, bytes(range(64)), 64) == (OK,)
        assert drv.read(ptr, 64) == bytes(range(64))
        assert [obj.call for obj in drv.live_objects() if obj.kind == "device_memory"] == ["cuMemAllocManaged"]
        assert drv.cuMemFree(ptr) == (OK,)


def test_pitched_allocation(drv: SimulatedDriver) -> None:
    err, ptr, pitch = drv.cuMemAllocPitch(100, 3, 4)
    assert (err, pitch) == (OK, 512)
    assert drv.cuMemsetD8(ptr, 7, 3 * 512) == (OK,)
    assert drv.cuMemFree(ptr) == (OK,)
    for args in ((100, 3, 3), (100, 3, 32), (0, 3, 4), (100, 0, 4), (1 << 32, 1, 4)):
        assert drv.cuMemAllocPitch(*args) == (INVALID_VALUE, None, None)
    assert drv.cuMemAllocPitch(1 << 20, 1 << 30, 4) == (R.CUDA_ERROR_OUT_OF_MEMORY, None, None)


def test_stream_ordered_allocation_edges(drv: SimulatedDriver) -> None:
    _, stream = drv.cuStreamCreate(0)
    total = drv.cuDeviceTotalMem(0)[1]
    assert drv.cuMemAllocAsync(total + 1, stream) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    err, zero = drv.cuMemAllocAsync(0, stream)
    assert err == OK
    assert drv.cuMemFreeAsync(zero, stream) == (OK,)
    assert drv.cuMemFreeAsync(cb.CUdeviceptr(0), stream) == (OK,)
    drv.cuStreamSynchronize(stream)
    drv.cuStreamDestroy(stream)


def test_host_allocation_edges(sim: SimulatedDriver) -> None:
    assert sim.cuMemAllocHost(64) == (R.CUDA_ERROR_INVALID_CONTEXT, None)
    assert ctx_create(sim, 0, 0)[0] == OK
    before = len(sim.live_objects())
    assert sim.cuMemAllocHost(0) == (OK, 0)  # nothing allocated: NULL
    assert sim.cuMemHostAlloc(0, 0) == (OK, 0)
    assert len(sim.live_objects()) == before
    assert sim.cuMemFreeHost(0) == (OK,)
    assert sim.cuMemAllocHost(1 << 50) == (R.CUDA_ERROR_OUT_OF_MEMORY, None)
    for flags in (8, 0x10, 0x80000000):
        assert sim.cuMemHostAlloc(64, flags) == (INVALID_VALUE, None)
    for flags in (1, 2, 4, 7):
        err, address = sim.cuMemHostAlloc(64, flags)
        assert err == OK
        assert sim.cuMemFreeHost(address) == (OK,)


def test_zero_byte_memset_and_copy(drv: SimulatedDriver) -> None:
    _, ptr = drv.cuMemAlloc(64)
    _, stream = drv.cuStreamCreate(0)
    assert drv.cuMemsetD8(ptr, 1, 0) == (OK,)
    assert drv.cuMemsetD32(ptr, 1, 0) == (OK,)
    assert drv.cuMemsetD8Async(ptr, 1, 0, stream) == (OK,)
    assert drv.cuMemcpyHtoD(ptr, b"", 0) == (OK,)
    assert drv.cuMemcpyDtoD(ptr, ptr, 0) == (OK,)
    assert drv.read(ptr, 4) == bytes(4)
    drv.cuStreamSynchronize(stream)
    drv.cuStreamDestroy(stream)
    drv.cuMemFree(ptr)


# --- streams, events ------------------------------------------------------------------------------


def test_stream_priorities_are_clamped(drv: SimulatedDriver) -> None:
    assert drv.cuCtxGetStreamPriorityRange() == (OK, 0, -5)
    for given, kept in ((-(1 << 31), -5), (-6, -5), (-3, -3), (0, 0), (1, 0), ((1 << 31) - 1, 0)):
        err, stream = drv.cuStreamCreateWithPriority(1, given)
        assert err == OK
        assert drv.cuStreamGetPriority(stream) == (OK, kept)
        assert drv.cuStreamGetFlags(stream) == (OK, 1)
        drv.cuStreamDestroy(stream)


def test_stream_flags(drv: SimulatedDriver) -> None:
    for flags in (2, 3, 0x80000000):
        assert drv.cuStreamCreate(flags) == (INVALID_VALUE, None)
        assert drv.cuStreamCreateWithPriority(flags, 0) == (INVALID_VALUE, None)
    assert drv.cuStreamGetPriority(cb.CUstream(0)) == (OK, 0)
    assert drv.cuStreamGetFlags(cb.CUstream(0)) == (OK, 0)


def test_event_flags(drv: SimulatedDriver) -> None:
    for flags in (0, 1, 2, 3, 6, 7):
        err, event = drv.cuEventCreate(flags)
        assert err == OK
        drv.cuEventDestroy(event)
    for flags in (4, 5, 8, 0x10, 0x80000000):  # INTERPROCESS needs DISABLE_TIMING; unknown bits
        assert drv.cuEventCreate(flags) == (INVALID_VALUE, None)


# --- functions ------------------------------------------------------------------------------------


def test_function_attributes(drv: SimulatedDriver) -> None:
    _, mod = drv.cuModuleLoadData(PTX)
    _, fn = drv.cuModuleGetFunction(mod, b"empty")
    assert drv.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn) == (OK, 1024)
    assert drv.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn) == (OK, 0)
    assert drv.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_BINARY_VERSION, fn) == (OK, 90)
    dynamic = FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert drv.cuFuncGetAttribute(dynamic, fn) == (OK, 49152)
    assert drv.cuFuncSetAttribute(fn, dynamic, 232448) == (OK,)
    assert drv.cuFuncGetAttribute(dynamic, fn) == (OK, 232448)
    for value in (232449, -1):
        assert drv.cuFuncSetAttribute(fn, dynamic, value) == (INVALID_VALUE,)
    carveout = FA.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    assert drv.cuFuncSetAttribute(fn, carveout, 50) == (OK,)
    assert drv.cuFuncSetAttribute(fn, carveout, 101) == (INVALID_VALUE,)
    assert drv.cuFuncGetAttribute(carveout, fn) == (OK, 50)
    for read_only in (FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, FA.CU_FUNC_ATTRIBUTE_NUM_REGS):
        assert drv.cuFuncSetAttribute(fn, read_only, 1) == (INVALID_VALUE,)
    assert drv.cuFuncGetAttribute(999, fn) == (INVALID_VALUE, None)
    assert drv.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_MAX, fn) == (INVALID_VALUE, None)
    drv.cuModuleUnload(mod)
    assert drv.cuFuncGetAttribute(FA.CU_FUNC_ATTRIBUTE_NUM_REGS, fn) == (R.CUDA_ERROR_INVALID_HANDLE, None)
