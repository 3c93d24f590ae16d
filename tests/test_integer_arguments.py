"""Every integer parameter follows one rule (E3): NumPy integers are taken, bools and floats are
``TypeError``, values outside the driver type's range are ``ValueError``, all before the driver;
no ``OverflowError`` escapes a public call."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

from cuguard.context import Context
from cuguard.errors.lowlevel import INT_LIMIT, SIZE_LIMIT, UINT_LIMIT, int_argument, out_of_range
from cuguard.graphs import GraphBuilder, GraphDefinition
from cuguard.resources import (
    Buffer,
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    IPCAllocationHandle,
    IPCBufferDescriptor,
    Kernel,
    LaunchConfig,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    PinnedMemoryResource,
    PinnedMemoryResourceOptions,
    ProgramCache,
    ProgramOptions,
    VirtualMemoryResource,
    VirtualMemoryResourceOptions,
)
from cuguard.testing import record_calls

# (name, what makes the call taking the value, a valid NumPy value, the first value too large, the parameter named)
Case = tuple[str, Callable[[], Callable[[Any], object]], Any, int, str]
Called = tuple[str, Callable[[Any], object], Any, int, str]


def _cases(dev: Device, kernel: Kernel, keep: list[Any]) -> list[Case]:
    """Each call's set-up runs in its maker, before the driver calls are recorded; ``keep`` closes it after."""

    def kept(obj: Any) -> Any:
        keep.append(obj)
        return obj

    def buffer() -> Buffer:
        return kept(dev.allocate(64))  # type: ignore[no-any-return]

    def definition() -> GraphDefinition:
        return kept(GraphDefinition(dev))  # type: ignore[no-any-return]

    def building() -> GraphBuilder:
        builder = GraphBuilder(kept(dev.create_stream())).begin_building()
        keep.append(_Ending(builder))
        return builder

    def split() -> Callable[[Any], object]:
        builder = building()

        def call(v: Any) -> object:
            forks = builder.split(v)
            return builder.join(*forks[1:])

        return call

    def on_graph(fn: Callable[..., object], *made: object) -> Callable[[Any], object]:
        return partial(fn, definition(), *made)

    def switch(graph: Any) -> Callable[[Any], object]:
        condition = graph.create_condition(0)
        return lambda v: graph.switch(condition, v)

    def wrap(v: Any) -> object:
        return Context.wrap(dev.context.handle, v)

    def created(v: Any) -> object:
        Context.create(0, v).close()
        return None

    occupancy = kernel.occupancy
    return [
        ("Device", lambda: Device, np.int32(0), INT_LIMIT, "ordinal"),
        ("Device.allocate", lambda: dev.allocate, np.uint64(16) * 4, SIZE_LIMIT, "size"),
        (
            "Device.allocate(stream)",
            lambda: partial(dev.allocate, stream=kept(dev.create_stream())),
            np.uint64(64),
            SIZE_LIMIT,
            "size",
        ),
        ("Device.allocate_pinned", lambda: dev.allocate_pinned, np.int64(64), SIZE_LIMIT, "size"),
        (
            "Device.create_stream(priority)",
            lambda: lambda v: dev.create_stream(priority=v),
            np.int32(0),
            INT_LIMIT,
            "priority",
        ),
        ("Context.primary", lambda: Context.primary, np.uint8(0), INT_LIMIT, "ordinal"),
        ("Context.create(flags)", lambda: created, np.uint32(0), UINT_LIMIT, "flags"),
        ("Context.wrap(device)", lambda: wrap, np.int16(0), INT_LIMIT, "device"),
        ("Buffer.fill", lambda: buffer().fill, np.uint8(7), 256, "value"),
        (
            "Buffer.from_handle(size)",
            lambda: partial(Buffer.from_handle, buffer().handle),
            np.int64(64),
            SIZE_LIMIT,
            "size",
        ),
        ("LaunchConfig(grid)", lambda: LaunchConfig, np.int64(4), UINT_LIMIT, "grid"),
        ("LaunchConfig(grid tuple)", lambda: lambda v: LaunchConfig((1, v)), np.uint16(4), UINT_LIMIT, "grid"),
        ("LaunchConfig(block)", lambda: lambda v: LaunchConfig(1, v), np.int32(32), UINT_LIMIT, "block"),
        ("LaunchConfig(cluster)", lambda: lambda v: LaunchConfig(1, 1, cluster=v), np.int8(2), UINT_LIMIT, "cluster"),
        (
            "LaunchConfig(shmem_size)",
            lambda: lambda v: LaunchConfig(1, 1, shmem_size=v),
            np.uint32(0),
            UINT_LIMIT,
            "shmem_size",
        ),
        (
            "KernelOccupancy.max_active_blocks_per_multiprocessor",
            lambda: occupancy.max_active_blocks_per_multiprocessor,
            np.int32(128),
            INT_LIMIT,
            "block_size",
        ),
        (
            "KernelOccupancy.max_active_blocks_per_multiprocessor(shared)",
            lambda: lambda v: occupancy.max_active_blocks_per_multiprocessor(128, v),
            np.uint64(0),
            SIZE_LIMIT,
            "dynamic_shared_memory_size",
        ),
        (
            "KernelOccupancy.max_potential_block_size",
            lambda: lambda v: occupancy.max_potential_block_size(0, v),
            np.int32(256),
            INT_LIMIT,
            "block_size_limit",
        ),
        (
            "KernelOccupancy.available_dynamic_shared_memory_per_block",
            lambda: lambda v: occupancy.available_dynamic_shared_memory_per_block(v, 128),
            np.int32(1),
            INT_LIMIT,
            "num_blocks_per_multiprocessor",
        ),
        (
            "DeviceMemoryResource.allocate",
            lambda: kept(DeviceMemoryResource(dev)).allocate,
            np.uint64(64),
            SIZE_LIMIT,
            "size",
        ),
        ("DeviceMemoryResource(device)", lambda: DeviceMemoryResource, np.int32(0), INT_LIMIT, "device"),
        ("ManagedMemoryResource(device)", lambda: ManagedMemoryResource, np.int64(0), INT_LIMIT, "device"),
        (
            "DeviceMemoryResourceOptions(max_size)",
            lambda: lambda v: DeviceMemoryResource(dev, DeviceMemoryResourceOptions(max_size=v)),
            np.uint64(1 << 20),
            SIZE_LIMIT,
            "max_size",
        ),
        ("DeviceMemoryResource.trim", lambda: kept(DeviceMemoryResource(dev)).trim, np.uint64(0), SIZE_LIMIT, "keep"),
        (
            "MemoryPoolAttributes.release_threshold",
            lambda: partial(setattr, kept(DeviceMemoryResource(dev)).attributes, "release_threshold"),
            np.uint64(0),
            SIZE_LIMIT,
            "release_threshold",
        ),
        (
            "PinnedMemoryResource.allocate",
            lambda: kept(PinnedMemoryResource(dev)).allocate,
            np.uint64(64),
            SIZE_LIMIT,
            "size",
        ),
        (
            "PinnedMemoryResourceOptions(numa_id)",
            lambda: lambda v: PinnedMemoryResource(dev, PinnedMemoryResourceOptions(numa_id=v)),
            np.int32(0),
            INT_LIMIT,
            "numa_id",
        ),
        (
            "ManagedMemoryResource.allocate",
            lambda: kept(ManagedMemoryResource(dev)).allocate,
            np.uint64(64),
            SIZE_LIMIT,
            "size",
        ),
        (
            "LegacyPinnedMemoryResource.allocate",
            lambda: kept(LegacyPinnedMemoryResource(dev)).allocate,
            np.uint64(64),
            SIZE_LIMIT,
            "size",
        ),
        (
            "VirtualMemoryResource.allocate",
            lambda: kept(VirtualMemoryResource(dev)).allocate,
            np.uint64(64),
            SIZE_LIMIT,
            "size",
        ),
        (
            "VirtualMemoryResourceOptions(peers)",
            lambda: lambda v: VirtualMemoryResourceOptions(peers=(v,)),
            np.int32(1),
            INT_LIMIT,
            "peers",
        ),
        ("IPCAllocationHandle.from_fd", lambda: IPCAllocationHandle.from_fd, np.int32(-1), INT_LIMIT, "fd"),
        (
            "IPCBufferDescriptor(size)",
            lambda: lambda v: IPCBufferDescriptor(bytes(64), v),
            np.uint64(64),
            SIZE_LIMIT,
            "size",
        ),
        (
            "ProgramOptions(max_register_count)",
            lambda: lambda v: ProgramOptions(max_register_count=v),
            np.int32(32),
            INT_LIMIT,
            "max_register_count",
        ),
        (
            "ProgramCache(max_entries)",
            lambda: lambda v: ProgramCache(max_entries=v),
            np.int64(8),
            SIZE_LIMIT,
            "max_entries",
        ),
        ("GraphDefinition.allocate", lambda: definition().allocate, np.uint64(64), SIZE_LIMIT, "size"),
        (
            "GraphDefinition.allocate(device)",
            lambda: on_graph(lambda g, v: g.allocate(64, device=v)),
            np.int32(0),
            INT_LIMIT,
            "device",
        ),
        (
            "GraphDefinition.memset(value)",
            lambda: on_graph(lambda g, b, v: g.memset(b, v), buffer()),
            np.uint8(1),
            256,
            "value",
        ),
        (
            "GraphDefinition.memset(size)",
            lambda: on_graph(lambda g, b, v: g.memset(b, 1, v), buffer()),
            np.uint64(16),
            SIZE_LIMIT,
            "size",
        ),
        (
            "GraphDefinition.memcpy(size)",
            lambda: on_graph(lambda g, a, b, v: g.memcpy(a, b, v), buffer(), buffer()),
            np.uint64(16),
            SIZE_LIMIT,
            "size",
        ),
        (
            "GraphDefinition.create_condition(default)",
            lambda: definition().create_condition,
            np.uint32(1),
            UINT_LIMIT,
            "default",
        ),
        ("GraphDefinition.switch(count)", lambda: switch(definition()), np.uint32(2), UINT_LIMIT, "count"),
        ("GraphBuilder.split(count)", split, np.int32(2), UINT_LIMIT, "count"),
        ("GraphBuilder.switch(count)", lambda: switch(building()), np.uint32(2), UINT_LIMIT, "count"),
    ]


class _Ending:
    """Ends a capture begun for a test (whatever it captured) and closes its builder."""

    def __init__(self, builder: GraphBuilder) -> None:
        self.builder = builder

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.builder.end_building()
        self.builder.close()


NAMES = [
    "Device",
    "Device.allocate",
    "Device.allocate(stream)",
    "Device.allocate_pinned",
    "Device.create_stream(priority)",
    "Context.primary",
    "Context.create(flags)",
    "Context.wrap(device)",
    "Buffer.fill",
    "Buffer.from_handle(size)",
    "LaunchConfig(grid)",
    "LaunchConfig(grid tuple)",
    "LaunchConfig(block)",
    "LaunchConfig(cluster)",
    "LaunchConfig(shmem_size)",
    "KernelOccupancy.max_active_blocks_per_multiprocessor",
    "KernelOccupancy.max_active_blocks_per_multiprocessor(shared)",
    "KernelOccupancy.max_potential_block_size",
    "KernelOccupancy.available_dynamic_shared_memory_per_block",
    "DeviceMemoryResource.allocate",
    "DeviceMemoryResource(device)",
    "ManagedMemoryResource(device)",
    "DeviceMemoryResourceOptions(max_size)",
    "DeviceMemoryResource.trim",
    "MemoryPoolAttributes.release_threshold",
    "PinnedMemoryResource.allocate",
    "PinnedMemoryResourceOptions(numa_id)",
    "ManagedMemoryResource.allocate",
    "LegacyPinnedMemoryResource.allocate",
    "VirtualMemoryResource.allocate",
    "VirtualMemoryResourceOptions(peers)",
    "IPCAllocationHandle.from_fd",
    "IPCBufferDescriptor(size)",
    "ProgramOptions(max_register_count)",
    "ProgramCache(max_entries)",
    "GraphDefinition.allocate",
    "GraphDefinition.allocate(device)",
    "GraphDefinition.memset(value)",
    "GraphDefinition.memset(size)",
    "GraphDefinition.memcpy(size)",
    "GraphDefinition.create_condition(default)",
    "GraphDefinition.switch(count)",
    "GraphBuilder.split(count)",
    "GraphBuilder.switch(count)",
]


@pytest.fixture
def case(request: pytest.FixtureRequest, dev: Device, kernels: dict[str, Kernel]) -> Iterator[Called]:
    keep: list[Any] = []
    table = {c[0]: c for c in _cases(dev, kernels["fill_u8"], keep)}
    assert sorted(table) == sorted(NAMES)  # the table and the parametrization agree
    name, make, value, limit, param = table[request.param]
    yield name, make(), value, limit, param  # type: ignore[misc]
    for obj in reversed(keep):
        with contextlib.suppress(Exception):
            obj.close()


def _quietly(result: object) -> None:
    """Close what a successful call made (a stream, a buffer, a resource...)."""
    close = getattr(result, "close", None)
    if callable(close) and not isinstance(result, Device | Context):
        close()


def _no_driver_call(log: list[Any]) -> None:
    assert [c.name for c in log if c.name not in ("cuCtxGetCurrent", "cuInit")] == []


@pytest.mark.contract("E3")
@pytest.mark.parametrize("case", NAMES, indirect=True)
def test_numpy_integers_are_taken_and_reach_the_driver_as_plain_ints(case: Called) -> None:
    name, call, value, _limit, _param = case
    if name == "IPCAllocationHandle.from_fd":  # a descriptor of its own, which the handle takes and closes
        value = np.int32(os.open(os.devnull, os.O_RDONLY))
    with record_calls() as log:
        result = call(value)
    _quietly(result)
    for entry in log:
        for arg in entry.args:
            assert not isinstance(arg, np.generic), f"{entry.name} got the NumPy scalar {arg!r}"


@pytest.mark.contract("E3")
@pytest.mark.parametrize("case", NAMES, indirect=True)
@pytest.mark.parametrize("bad", [True, 1.0, np.float64(1)], ids=repr)
def test_bools_floats_and_other_objects_are_type_errors_naming_the_parameter(case: Called, bad: Any) -> None:
    _name, call, _value, _limit, param = case
    with record_calls() as log, pytest.raises(TypeError, match=rf"\b{param}\b"):
        call(bad)
    _no_driver_call(log)


@pytest.mark.contract("E3")
@pytest.mark.parametrize("case", NAMES, indirect=True)
def test_values_at_the_driver_types_limit_are_value_errors_not_overflow_errors(case: Called) -> None:
    _name, call, _value, too_large, param = case
    with record_calls() as log, pytest.raises(ValueError, match=rf"\b{param}\b.*, not {too_large}$"):
        call(too_large)
    _no_driver_call(log)


@pytest.mark.contract("E3")
@pytest.mark.parametrize("case", NAMES, indirect=True)
def test_negative_values_are_value_errors(case: Called) -> None:
    _name, call, _value, _limit, param = case
    if param == "priority":  # a signed parameter: its lower bound is -2**31
        bad: Any = np.int64(-(1 << 31) - 1)
    else:
        bad = np.int64(-1)
    with record_calls() as log, pytest.raises(ValueError, match=rf"\b{param}\b"):
        call(bad)
    _no_driver_call(log)


@pytest.mark.contract("E3")
def test_a_grid_whose_blocks_with_clusters_reach_the_limit_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"grid \* cluster"):
        LaunchConfig(1 << 31, 1, cluster=2)
    config = LaunchConfig((np.int64(2), 3), np.uint16(32), cluster=np.int8(2))
    assert config.grid == (2, 3)
    assert type(config.grid[0]) is int
    assert type(config.block) is int
    assert type(config.cluster) is int
    assert config.dims() == (4, 3, 1, 32, 1, 1)


@pytest.mark.contract("E3")
def test_the_rule_itself() -> None:
    assert int_argument("n", np.uint64(256) * 4) == 1024
    assert type(int_argument("n", np.uint64(3))) is int
    assert int_argument("n", 5, 5, 6) == 5
    for bad in (True, np.True_, 1.0, np.float32(1), None, "3", np.array([1, 2]), b"\x01"):
        with pytest.raises(TypeError, match="n must be an int"):
            int_argument("n", bad)
    with pytest.raises(ValueError, match=r"n must be 1 or more and below 2\*\*32, not 4294967296"):
        int_argument("n", 1 << 32, 1, UINT_LIMIT)
    with pytest.raises(ValueError, match=r"below 2\*\*64, not 36893488147419103232$"):
        int_argument("n", 1 << 65)
    assert str(out_of_range("size", -1)) == "size must be 0 or more and below 2**64, not -1"
