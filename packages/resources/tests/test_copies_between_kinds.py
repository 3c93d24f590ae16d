"""Copies between buffers of every memory resource (device, pools, managed, virtual, pinned, legacy pinned),
and pinned memory pools usable from every device; on the simulator and (``--cuguard-driver=real``) a GPU."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cuguard.errors import CUDAError, ResourceClosedError, driver
from cuguard.resources import (
    Buffer,
    Device,
    DeviceMemoryResource,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    PinnedBuffer,
    PinnedMemoryResource,
    Stream,
    VirtualMemoryResource,
)
from cuguard.testing import SimulatedDriver, inject, record_calls

SIZE = 256
INVALID_VALUE = 1
KINDS = ["device", "ordered", "pool", "managed", "virtual", "pinned", "pinned pool", "legacy pinned"]
COPY_CALLS = {"cuMemcpy", "cuMemcpyAsync", "cuMemcpyHtoD", "cuMemcpyHtoDAsync", "cuMemcpyDtoH", "cuMemcpyDtoHAsync"}
COPY_CALLS |= {"cuMemcpyDtoD", "cuMemcpyDtoDAsync"}

Memory = Buffer | PinnedBuffer


@pytest.fixture
def stream(device: Device) -> Iterator[Stream]:
    with device.create_stream() as st:
        yield st


@pytest.fixture
def make(device: Device, stream: Stream) -> Iterator[Callable[[str], Memory]]:
    """A buffer of each kind, all freed (and their resources closed) after the test."""
    resources: dict[str, Any] = {}
    made: list[Memory] = []

    def resource(kind: str) -> Any:
        if kind not in resources:
            resources[kind] = {
                "pool": lambda: DeviceMemoryResource(device),
                "managed": lambda: ManagedMemoryResource(device),
                "virtual": lambda: VirtualMemoryResource(device),
                "pinned pool": lambda: PinnedMemoryResource(device),
                "legacy pinned": lambda: LegacyPinnedMemoryResource(device),
            }[kind]()
        return resources[kind]

    def one(kind: str) -> Memory:
        buf: Memory
        if kind == "device":
            buf = device.allocate(SIZE)
        elif kind == "ordered":
            buf = device.allocate(SIZE, stream)
        elif kind == "pinned":
            buf = device.allocate_pinned(SIZE)
        else:
            buf = resource(kind).allocate(SIZE, stream)
        stream.sync()
        made.append(buf)
        return buf

    yield one
    for buf in made:
        buf.close()
    stream.sync()
    for mr in resources.values():
        if hasattr(mr, "close"):
            mr.close()


def _write(buf: Memory, value: int, stream: Stream) -> None:
    if isinstance(buf, Buffer):
        buf.fill(value, stream)
        stream.sync()
    else:
        buf.numpy()[:] = value


def _read(buf: Memory, stream: Stream) -> bytes:
    if isinstance(buf, Buffer):
        out = bytearray(SIZE)
        buf.copy_to(out, stream)
        stream.sync()
        return bytes(out)
    return bytes(buf.numpy())


PAIRS = list(itertools.permutations(KINDS, 2)) + [(k, k) for k in ("pinned", "pinned pool")]


@pytest.mark.contract("E1")
@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
@pytest.mark.parametrize("ordered", [False, True], ids=["sync", "stream"])
def test_every_kind_copies_to_and_from_every_kind(
    make: Callable[[str], Memory], stream: Stream, src_kind: str, dst_kind: str, ordered: bool
) -> None:
    src, dst = make(src_kind), make(dst_kind)
    on = stream if ordered else None
    _write(src, 0x5A, stream)
    _write(dst, 0x01, stream)
    with record_calls() as log:
        src.copy_to(dst, stream=on)
    calls = [c.name for c in log if c.name in COPY_CALLS]
    assert len(calls) == 1  # one driver copy, whichever of the two buffers the call starts from
    assert calls[0].endswith("Async") == ordered
    stream.sync()
    assert _read(dst, stream) == b"\x5a" * SIZE
    _write(src, 0x33, stream)
    dst.copy_from(src, stream=on)
    stream.sync()
    assert _read(dst, stream) == b"\x33" * SIZE


@pytest.mark.contract("E3")
@pytest.mark.parametrize("kind", ["pinned", "pinned pool", "legacy pinned"])
def test_pinned_copies_refuse_other_kinds_before_the_driver(make: Callable[[str], Memory], kind: str) -> None:
    pinned = make(kind)
    assert isinstance(pinned, PinnedBuffer)
    for wrong in (None, 5, bytearray(SIZE), "buffer"):
        with record_calls() as log:
            with pytest.raises(TypeError, match="src must be a Buffer or a PinnedBuffer"):
                pinned.copy_from(wrong)
            with pytest.raises(TypeError, match="dst must be a Buffer or a PinnedBuffer"):
                pinned.copy_to(wrong)
        assert log == []
    other = make("pinned")
    with record_calls() as log, pytest.raises(TypeError, match="stream"):
        pinned.copy_to(other, stream=42)  # type: ignore[arg-type]
    assert log == []


MISMATCHED = [("pinned", "device"), ("device", "pinned"), ("pinned", "pinned pool")]


@pytest.mark.contract("E3")
@pytest.mark.parametrize(("src_kind", "dst_kind"), MISMATCHED)
@pytest.mark.parametrize("ordered", [False, True], ids=["sync", "stream"])
def test_a_size_mismatch_is_refused_before_the_driver(
    device: Device, stream: Stream, src_kind: str, dst_kind: str, ordered: bool
) -> None:
    small = {"device": lambda: device.allocate(SIZE // 2), "pinned": lambda: device.allocate_pinned(SIZE // 2)}
    src = small[src_kind]()
    dst: Memory = device.allocate(SIZE) if dst_kind == "device" else device.allocate_pinned(SIZE)
    with PinnedMemoryResource(device) as pool:
        if dst_kind == "pinned pool":
            dst.close()
            dst = pool.allocate(SIZE)
        on = stream if ordered else None
        with record_calls() as log:
            with pytest.raises(ValueError, match="size mismatch"):
                src.copy_to(dst, stream=on)
            with pytest.raises(ValueError, match="size mismatch"):
                dst.copy_from(src, stream=on)
        assert [c.name for c in log if c.name in COPY_CALLS] == []
        src.close()
        dst.close()


CLOSED = [("pinned", "device"), ("device", "pinned"), ("pinned", "pinned")]


@pytest.mark.contract("O1", "E3")
@pytest.mark.parametrize(("closed_kind", "other_kind"), CLOSED)
def test_a_closed_buffer_is_refused_before_the_driver(
    make: Callable[[str], Memory], stream: Stream, closed_kind: str, other_kind: str
) -> None:
    closed, other = make(closed_kind), make(other_kind)
    closed.close()
    with record_calls() as log:
        for copy in (
            lambda: closed.copy_to(other, stream=stream),
            lambda: closed.copy_from(other),
            lambda: other.copy_to(closed),
            lambda: other.copy_from(closed, stream=stream),
        ):
            with pytest.raises(ResourceClosedError, match="closed"):
                copy()
    assert [c.name for c in log if c.name in COPY_CALLS] == []


@pytest.mark.contract("E1")
@pytest.mark.parametrize("ordered", [False, True], ids=["sync", "stream"])
def test_a_refused_pinned_copy_raises_naming_the_call(
    make: Callable[[str], Memory], stream: Stream, ordered: bool
) -> None:
    src, dst = make("pinned"), make("pinned pool")
    _write(src, 9, stream)
    _write(dst, 1, stream)
    call = "cuMemcpyAsync" if ordered else "cuMemcpy"
    with inject(call, INVALID_VALUE, nth=1), pytest.raises(CUDAError) as info:
        dst.copy_from(src, stream=stream if ordered else None)
    assert (info.value.call, info.value.name) == (call, "CUDA_ERROR_INVALID_VALUE")
    stream.sync()
    assert _read(dst, stream) == b"\x01" * SIZE  # nothing was copied
    dst.copy_from(src)  # both stay usable (G3)
    assert _read(dst, stream) == b"\x09" * SIZE


@pytest.mark.contract("G2")
def test_a_synchronous_pinned_copy_leaves_the_callers_context(make: Callable[[str], Memory], stream: Stream) -> None:
    from cuguard.context import Context

    src, dst = make("pinned"), make("legacy pinned")
    _write(src, 4, stream)
    assert Context.current() is None
    dst.copy_from(src)
    assert Context.current() is None
    assert _read(dst, stream) == b"\x04" * SIZE


# --- pinned memory pools and every device -----------------------------------------------------


def _access(pool: Any, ordinal: int) -> str:
    from cuda.bindings import driver as bindings

    where = bindings.CUmemLocation()
    where.type = bindings.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    where.id = ordinal
    err, flags = driver.cuMemPoolGetAccess(pool, where)
    assert not err
    return str(flags.name)


@pytest.mark.contract("B2")
@pytest.mark.parametrize("made_on", [0, 1])
def test_a_pinned_pool_is_usable_from_every_device(device: Device, made_on: int) -> None:
    if Device.count() < 2:
        pytest.skip("needs two CUDA devices")
    with PinnedMemoryResource(Device(made_on)) as pool:
        assert [_access(pool.handle, n) for n in range(Device.count())] == ["CU_MEM_ACCESS_FLAGS_PROT_READWRITE"] * 2
        other = Device(1 - made_on)
        with other.create_stream() as there:
            pinned = pool.allocate(SIZE, there)  # allocated on the other device's stream
            there.sync()
            pinned.numpy()[:] = 0x42
            with other.allocate(SIZE, there) as buf:
                buf.copy_from(pinned, stream=there)
                there.sync()  # the copy has read the pinned memory before the host writes it again
                pinned.numpy()[:] = 0
                pinned.copy_from(buf, stream=there)
                there.sync()
            assert bytes(pinned.numpy()) == b"\x42" * SIZE
            pinned.close(there)
            there.sync()


@pytest.mark.contract("G1")
def test_a_refused_grant_destroys_the_new_pool(device: Device, cuguard_driver: Any) -> None:
    before = _pools(cuguard_driver)
    with inject("cuMemPoolSetAccess", INVALID_VALUE, nth=1), pytest.raises(CUDAError) as info:
        PinnedMemoryResource(device)
    assert info.value.call == "cuMemPoolSetAccess"
    assert _pools(cuguard_driver) == before


def _pools(drv: Any) -> Any:
    if isinstance(drv, SimulatedDriver):
        return sorted(o.handle for o in drv.live_objects() if o.kind == "memory_pool")
    return None  # the real driver: the proxy's leak check after the test counts pools


@pytest.mark.contract("G1")
def test_the_grant_names_every_device_in_one_call(device: Device) -> None:
    with record_calls() as log:
        pool = PinnedMemoryResource(device)
    grants = [c for c in log if c.name == "cuMemPoolSetAccess"]
    assert len(grants) == 1
    assert int(grants[0].args[2]) == Device.count()
    assert sorted(int(d.location.id) for d in grants[0].args[1]) == list(range(Device.count()))
    pool.close()


# --- the race checker sees pinned-to-pinned copies (B7) ---------------------------------------


def _races(program: Callable[[], object]) -> list[str]:
    import warnings

    from cuguard.resources import RaceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RaceWarning)
        program()
    return [str(w.message) for w in caught if issubclass(w.category, RaceWarning)]


@pytest.mark.contract("B7")
@pytest.mark.parametrize("ordered", [False, True], ids=["unordered", "event"])
def test_pinned_copies_on_two_streams_race_unless_ordered(device: Device, ordered: bool) -> None:
    from cuguard.resources import racecheck

    with racecheck(), device.create_stream() as first, device.create_stream() as second:
        a, b = device.allocate_pinned(SIZE), device.allocate_pinned(SIZE)
        b.copy_from(a, stream=first)  # writes b on the first stream
        if ordered:
            second.wait(first)
        found = _races(lambda: a.copy_from(b, stream=second))  # reads b on the second
        assert len(found) == (0 if ordered else 1)
        if found:
            assert "cuMemcpyAsync" in found[0]
        first.sync()
        second.sync()
        a.close()
        b.close()
