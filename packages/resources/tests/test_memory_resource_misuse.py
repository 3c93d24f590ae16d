"""A memory resource is the one owner of what it allocated: copies and pickles are refused (O1)."""

from __future__ import annotations

import copy
import gc
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from cuguard.errors import CUDAError
from cuguard.resources import (
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    LegacyPinnedMemoryResource,
    ManagedMemoryResource,
    MemoryResource,
    PinnedMemoryResource,
    VirtualMemoryResource,
)
from cuguard.testing import record_calls

COPIERS: dict[str, Callable[[Any], object]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": pickle.dumps,
}

MAKERS: dict[str, Callable[[Device], MemoryResource[Any]]] = {
    "DeviceMemoryResource-current": DeviceMemoryResource,
    "DeviceMemoryResource-created": lambda d: DeviceMemoryResource(d, DeviceMemoryResourceOptions()),
    "PinnedMemoryResource": PinnedMemoryResource,
    "ManagedMemoryResource": ManagedMemoryResource,
    "VirtualMemoryResource": VirtualMemoryResource,
    "LegacyPinnedMemoryResource": LegacyPinnedMemoryResource,
}


@pytest.mark.contract("O1")
@pytest.mark.parametrize("how", sorted(COPIERS))
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_memory_resources_cannot_be_copied_or_pickled(device: Device, kind: str, how: str) -> None:
    try:
        mr = MAKERS[kind](device)
    except CUDAError as exc:  # a driver without host memory pools refuses PinnedMemoryResource
        pytest.skip(f"{kind}: {exc}")
    stream = device.create_stream()
    buf = mr.allocate(64, stream)
    name = type(mr).__name__
    with record_calls() as log, pytest.raises(TypeError, match=rf"\b{name}\b") as info:
        COPIERS[how](mr)
    assert "cannot be copied or pickled" in str(info.value)
    assert log == []  # refused before anything reached the driver
    # The original still holds its buffer, and frees it exactly once.
    assert mr.buffers == (buf,)
    assert mr.held == 64
    with record_calls() as log:
        mr.deallocate(buf, stream)
        buf.close()
        stream.sync()
        gc.collect()
    frees = [c.name for c in log if c.name.startswith(("cuMemFree", "cuMemUnmap", "cuMemRelease", "cuMemAddressFree"))]
    assert frees
    assert len(frees) == len(set(frees)), frees
    assert mr.held == 0
    assert mr.buffers == ()
    assert mr.leaked == 0
    close = getattr(mr, "close", None)
    if close is not None:
        close()
    stream.close()
