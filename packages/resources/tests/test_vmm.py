"""VirtualMemoryResource: reserve, create, map, set access and grow, all-or-nothing; on the simulator
and (``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import contextlib
import gc
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, CUDAWarning, ResourceClosedError, driver
from cuguard.resources import Buffer, Device, VirtualMemoryResource, VirtualMemoryResourceOptions
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls, restore_fault

OUT_OF_MEMORY = 2
INVALID_VALUE = 1
INVALID_CONTEXT = 201
ALLOCATE_CALLS = ("cuMemAddressReserve", "cuMemCreate", "cuMemMap", "cuMemSetAccess")
VMM_CALLS = frozenset({*ALLOCATE_CALLS, "cuMemUnmap", "cuMemRelease", "cuMemAddressFree", "cuCtxSynchronize"})


@pytest.fixture
def mr(device: Device) -> VirtualMemoryResource:
    return VirtualMemoryResource(device)


def _driver_follows_hints(mr: VirtualMemoryResource) -> bool:
    """Whether the driver reserves the addresses right after another range when asked (an H200 did not)."""
    g = mr.granularity
    err, first = driver.cuMemAddressReserve(g, 0, 0, 0)
    assert not err
    err, second = driver.cuMemAddressReserve(g, 0, int(first) + g, 0)
    assert not err
    followed = int(second) == int(first) + g
    for va in (second, first):
        (err,) = driver.cuMemAddressFree(va, g)
        assert not err
    return followed


@pytest.fixture
def hints_followed(cuguard_driver: Any, mr: VirtualMemoryResource, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that follows address hints, so that a buffer can grow in place.

    The simulator is told to (by default it does not, as an H200); a real driver that does not is
    skipped, since in-place growth cannot happen there.
    """
    if isinstance(cuguard_driver, SimulatedDriver):
        monkeypatch.setattr(cuguard_driver, "follow_address_hints", True)
    elif not _driver_follows_hints(mr):
        pytest.skip("the driver does not follow address hints: no buffer can grow in place")


def _bytes(buf: Buffer) -> bytes:
    out = bytearray(buf.size)
    buf.copy_to(out)
    return bytes(out)


def _pattern(buf: Buffer) -> bytes:
    data = bytes(i % 251 for i in range(buf.size))
    buf.copy_from(data)
    return data


def _vmm_names(log: list[Any]) -> list[str]:
    return [c.name for c in log if c.name in VMM_CALLS]


def test_allocate_gives_device_memory_of_the_resource(device: Device, mr: VirtualMemoryResource) -> None:
    assert mr.granularity > 0
    assert mr.device_id == device.ordinal
    assert mr.is_device_accessible
    assert not mr.is_host_accessible
    with record_calls() as log:
        buf = mr.allocate(1000)
    assert _vmm_names(log) == list(ALLOCATE_CALLS)
    assert buf.size == 1000
    assert buf.memory_resource is mr
    assert mr.held == 1000
    assert mr.buffers == (buf,)
    assert _pattern(buf) == _bytes(buf)
    with record_calls() as log:
        mr.deallocate(buf)
    assert _vmm_names(log) == ["cuCtxSynchronize", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree"]
    assert buf.closed
    assert mr.held == 0
    assert mr.leaked == 0


@pytest.mark.contract("G1", "G2", "G3")
@pytest.mark.parametrize("caller", ["none", "other"])
@pytest.mark.parametrize("call", ALLOCATE_CALLS)
def test_a_failed_allocation_step_undoes_the_earlier_ones(
    device: Device, mr: VirtualMemoryResource, call: str, caller: str, request: pytest.FixtureRequest
) -> None:
    if caller == "other":
        request.getfixturevalue("other_context")
    before = Context.current()
    with leak_check(), inject(call, OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        mr.allocate(100)
    assert info.value.call == call
    assert Context.current() == before
    assert mr.held == 0
    assert mr.buffers == ()
    with mr.allocate(100) as buf:  # G3: the resource is still usable
        buf.fill(1)


@pytest.mark.contract("G4")
def test_a_failed_undo_is_a_note_on_the_error(device: Device, mr: VirtualMemoryResource) -> None:
    with (
        inject("cuMemSetAccess", INVALID_VALUE),
        inject("cuMemRelease", OUT_OF_MEMORY),
        pytest.raises(CUDAError) as info,
    ):
        mr.allocate(100)
    assert info.value.call == "cuMemSetAccess"
    assert any("cuMemRelease" in note for note in info.value.__notes__)


@pytest.mark.contract("C2", "G1")
def test_a_failed_restore_releases_the_new_buffer(
    device: Device, mr: VirtualMemoryResource, other_context: Context
) -> None:
    with leak_check(), restore_fault(INVALID_CONTEXT), pytest.raises(CUDAError, match="could not be restored"):
        mr.allocate(100)
    assert mr.held == 0
    other_context.set_current()


@pytest.mark.contract("C2", "G1", "G6")
def test_a_failed_restore_during_a_capture_releases_the_new_buffer_without_waiting(
    device: Device, mr: VirtualMemoryResource, other_context: Context
) -> None:
    # The undo of a buffer this very call made waits for nothing: a cuCtxSynchronize there would be
    # refused during the capture of a stream of the device's context (and invalidate it on a GPU).
    from cuda.bindings.driver import CUstreamCaptureMode

    stream = device.create_stream(non_blocking=True)
    (err,) = driver.cuStreamBeginCapture(stream.handle, CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    assert not err
    try:
        with (
            record_calls() as calls,
            leak_check(),
            restore_fault(INVALID_CONTEXT),
            pytest.raises(CUDAError, match="could not be restored") as info,
        ):
            mr.allocate(100)
        assert not getattr(info.value, "__notes__", [])  # released: no note says something leaked
        assert "cuCtxSynchronize" not in [c.name for c in calls]
        assert mr.held == 0
        err, status = driver.cuStreamIsCapturing(stream.handle)
        assert (int(err), int(status)) == (0, 1)  # the capture is still going on
    finally:
        err, graph = driver.cuStreamEndCapture(stream.handle)
        assert not err
        assert not driver.cuGraphDestroy(graph)[0]
        stream.close()
        other_context.set_current()


def test_grow_keeps_the_bytes(device: Device, mr: VirtualMemoryResource) -> None:
    buf = mr.allocate(1000)
    data = _pattern(buf)
    ptr = buf.ptr
    assert mr.modify_allocation(buf, 2000) is buf  # fits the rounded-up memory: no driver call
    assert buf.size == 2000
    assert buf.ptr == ptr
    grown = mr.granularity * 2 + 10
    mr.modify_allocation(buf, grown)
    assert buf.size == grown
    assert mr.held == grown
    assert _bytes(buf)[:1000] == data
    buf.fill(7)
    assert _bytes(buf) == b"\x07" * grown
    buf.close()
    assert mr.held == 0


@pytest.mark.usefixtures("hints_followed")
def test_grow_in_place_keeps_the_address(device: Device, mr: VirtualMemoryResource) -> None:
    buf = mr.allocate(1000)
    data = _pattern(buf)
    ptr = buf.ptr
    with record_calls() as log:
        mr.modify_allocation(buf, mr.granularity * 2)
    assert _vmm_names(log) == list(ALLOCATE_CALLS)  # one range right after the buffer: nothing moved
    assert buf.ptr == ptr
    assert _bytes(buf)[:1000] == data
    buf.fill(5)
    assert _bytes(buf) == b"\x05" * buf.size  # across the old and the new range
    buf.close()
    assert mr.held == 0


def _blocked(mr: VirtualMemoryResource, buf: Buffer) -> Any:
    """Make growing ``buf`` move it: the range now reserved right after it, or None.

    A driver that follows address hints gets the addresses right after the buffer reserved (so
    they are not free); one that does not (an H200) puts that reservation elsewhere, which is
    given back at once: growing moves the buffer there anyway.
    """
    g = mr.granularity
    end = buf.ptr + (buf.size + g - 1) // g * g
    err, blocker = driver.cuMemAddressReserve(4 * g, 0, end, 0)
    assert not err
    if int(blocker) != end:
        (err,) = driver.cuMemAddressFree(blocker, 4 * g)
        assert not err
        return None
    return blocker


def _unblock(mr: VirtualMemoryResource, blocker: Any) -> None:
    if blocker is not None:
        (err,) = driver.cuMemAddressFree(blocker, 4 * mr.granularity)
        assert not err


@pytest.mark.parametrize("hints", ["driver's own", "followed"])
def test_grow_elsewhere_maps_the_memory_again_and_keeps_the_old_address(
    device: Device, mr: VirtualMemoryResource, hints: str, request: pytest.FixtureRequest
) -> None:
    """Growing moves the buffer when the addresses after it are not given: the hint is not followed, or
    (``followed``) the driver follows hints and those addresses are taken."""
    if hints == "followed":
        request.getfixturevalue("hints_followed")
    with leak_check():
        _grow_elsewhere(device, mr)
    assert mr.held == 0
    assert mr.leaked == 0


def _grow_elsewhere(device: Device, mr: VirtualMemoryResource) -> None:
    buf = mr.allocate(1000)
    data = _pattern(buf)
    old = buf.ptr
    blocker = _blocked(mr, buf)
    try:
        with record_calls() as log:
            mr.modify_allocation(buf, mr.granularity * 2)
        assert "cuMemAddressFree" in _vmm_names(log)  # the misplaced range was given back
        assert buf.ptr != old
        assert _bytes(buf)[:1000] == data
        # The old address still shows the same memory until the buffer is released.
        view = Buffer.from_handle(old, 1000, device=device)
        assert _bytes(view) == data
        buf.fill(3)
        assert _bytes(view) == b"\x03" * 1000
        view.close()
        buf.close()
    finally:
        _unblock(mr, blocker)


_IN_PLACE = [(c, 1) for c in ALLOCATE_CALLS]
_ELSEWHERE = [
    ("cuMemAddressReserve", 2),
    ("cuMemMap", 1),
    ("cuMemCreate", 1),
    ("cuMemMap", 2),
    ("cuMemSetAccess", 1),
    ("cuMemAddressFree", 1),
]


@pytest.mark.contract("G1", "G3")
@pytest.mark.parametrize(
    ("where", "call", "nth"), [("in_place", *c) for c in _IN_PLACE] + [("elsewhere", *c) for c in _ELSEWHERE]
)
def test_a_failed_grow_leaves_the_buffer_as_it_was(
    device: Device, mr: VirtualMemoryResource, *, where: str, call: str, nth: int, request: pytest.FixtureRequest
) -> None:
    if where == "in_place":
        request.getfixturevalue("hints_followed")
    buf = mr.allocate(1000)
    data = _pattern(buf)
    ptr, size = buf.ptr, buf.size
    blocker = _blocked(mr, buf) if where == "elsewhere" else None
    try:
        # A refused give-back of the misplaced range leaks that range (W5), and says so.
        check = leak_check() if call != "cuMemAddressFree" else contextlib.nullcontext()
        with check, inject(call, OUT_OF_MEMORY, nth=nth), pytest.raises(CUDAError) as info:
            mr.modify_allocation(buf, mr.granularity * 2)
        assert info.value.call == call
        if call == "cuMemAddressFree":
            assert any("was leaked" in note for note in info.value.__notes__)
        assert (buf.ptr, buf.size) == (ptr, size)
        assert mr.held == size
        assert _bytes(buf) == data  # G3: usable, unchanged
        mr.modify_allocation(buf, mr.granularity * 2)
        assert _bytes(buf)[:1000] == data
        buf.close()
    finally:
        _unblock(mr, blocker)


@pytest.mark.contract("C2", "G1", "G3")
def test_a_failed_restore_after_a_grow_undoes_it(
    device: Device, mr: VirtualMemoryResource, other_context: Context
) -> None:
    buf = mr.allocate(1000)
    data = _pattern(buf)
    ptr = buf.ptr
    with leak_check(), restore_fault(INVALID_CONTEXT), pytest.raises(CUDAError, match="could not be restored"):
        mr.modify_allocation(buf, mr.granularity * 2)
    other_context.set_current()
    assert (buf.ptr, buf.size) == (ptr, 1000)
    assert _bytes(buf) == data
    buf.close()


@pytest.mark.contract("S3", "W5")
@pytest.mark.parametrize("call", ["cuCtxSynchronize", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree"])
def test_a_failed_release_raises_and_leaks_the_rest(device: Device, mr: VirtualMemoryResource, call: str) -> None:
    buf = mr.allocate(100)
    with record_calls() as log, inject(call, INVALID_VALUE), pytest.raises(CUDAError, match="was leaked") as info:
        buf.close()
    assert info.value.call == call
    names = _vmm_names(log)
    assert names[-1] == call  # nothing after the refused step: the rest is leaked, never freed under a mapping
    assert buf.closed
    assert mr.held == 0
    assert mr.leaked == 100
    buf.close()  # idempotent: nothing is released twice


@pytest.mark.contract("W1", "W5")
def test_a_failed_release_on_collection_warns(device: Device, mr: VirtualMemoryResource) -> None:
    buf = mr.allocate(100)
    with inject("cuMemUnmap", INVALID_VALUE), pytest.warns(CUDAWarning, match="cuMemUnmap"):  # noqa: PT031
        del buf
        gc.collect()
    assert mr.leaked == 100


def test_collection_releases_everything(device: Device, mr: VirtualMemoryResource) -> None:
    with leak_check():
        buf = mr.allocate(100)
        mr.modify_allocation(buf, mr.granularity * 3)
        del buf
        gc.collect()
    assert mr.held == 0


@pytest.mark.contract("E3")
def test_wrong_arguments_are_refused_before_the_driver(device: Device, mr: VirtualMemoryResource) -> None:
    other = VirtualMemoryResource(device)
    theirs = other.allocate(10)
    plain = device.allocate(10)
    with record_calls() as log:
        with pytest.raises(TypeError, match="device"):
            VirtualMemoryResource("0")
        with pytest.raises(TypeError, match="options"):
            VirtualMemoryResource(device, {"granularity": "minimum"})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="size"):
            mr.allocate("64")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="size must be 1 or more"):
            mr.allocate(0)
        with pytest.raises(TypeError, match="stream"):
            mr.allocate(64, stream=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="buffer"):
            mr.modify_allocation(object(), 10)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not allocated by"):
            mr.modify_allocation(theirs, 100)
        with pytest.raises(ValueError, match="not allocated by"):
            mr.modify_allocation(plain, 100)
        with pytest.raises(ValueError, match="not allocated by"):
            mr.deallocate(theirs)
        with pytest.raises(ValueError, match="do not shrink"):
            other.modify_allocation(theirs, 5)
        with pytest.raises(TypeError, match="new_size"):
            other.modify_allocation(theirs, 5.0)  # type: ignore[arg-type]
    assert log == []
    theirs.close()
    with pytest.raises(ResourceClosedError):
        other.modify_allocation(theirs, 100)
    plain.close()


@pytest.mark.contract("E3")
def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="granularity"):
        VirtualMemoryResourceOptions(granularity="huge")
    with pytest.raises(ValueError, match="self_access"):
        VirtualMemoryResourceOptions(self_access="w")
    with pytest.raises(TypeError, match="peers"):
        VirtualMemoryResourceOptions(peers=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="twice"):
        VirtualMemoryResourceOptions(peers=(1, 1))
    with pytest.raises(ValueError, match="power of two"):
        VirtualMemoryResourceOptions(addr_align=3)
    with pytest.raises(TypeError, match="gpu_direct_rdma"):
        VirtualMemoryResourceOptions(gpu_direct_rdma=1)  # type: ignore[arg-type]


def test_minimum_granularity_and_alignment(device: Device) -> None:
    mr = VirtualMemoryResource(device, VirtualMemoryResourceOptions(granularity="minimum", addr_align=1 << 22))
    with mr.allocate(10) as buf:
        assert buf.ptr % (1 << 22) == 0
        buf.fill(9)
        assert _bytes(buf) == b"\x09" * 10
    with pytest.raises(ValueError, match="own device"):
        VirtualMemoryResource(device, VirtualMemoryResourceOptions(peers=(device.ordinal,)))


def test_peers_get_access(device: Device) -> None:
    if Device.count() < 2:
        pytest.skip("needs two devices")
    mr = VirtualMemoryResource(device, VirtualMemoryResourceOptions(peers=(1,), peer_access="r"))
    with mr.allocate(10) as buf:
        cu = __import__("cuda.bindings.driver", fromlist=["CUmemLocation"])
        loc = cu.CUmemLocation()
        loc.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        loc.id = 1
        err, flags = driver.cuMemGetAccess(loc, buf.ptr)
        assert not err
        assert int(flags) == 1
