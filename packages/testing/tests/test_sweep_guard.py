"""The sweep's safety net on the real driver (contract B5, S2): what it refuses and what it lets through.

The net remembers released handles and refuses a second release of one. Drivers hand the same
address out again (an H200's memory pool gave a freed buffer's address to its next allocation,
and managed memory does the same), so every call that can return a reused handle must clear it:
otherwise the first release of the new allocation is refused as if it were a second one, and the
sweep reports a double free that never happened (and leaks the memory on the GPU).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("cuda.bindings")

from cuguard.testing._guard import SafetyDriver

_ADDRESS = 0x7F00_0000_0200
_POOL = 0x5000


class _ReusingDriver:
    """A stand-in for the real driver whose allocators always return the same handle (reuse)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _give(self, name: str, value: int) -> tuple[int, int]:
        self.calls.append(name)
        return (0, value)

    def _take(self, name: str) -> tuple[int]:
        self.calls.append(name)
        return (0,)

    def cuMemAllocFromPoolAsync(self, size: int, pool: Any, stream: Any) -> tuple[int, int]:
        return self._give("cuMemAllocFromPoolAsync", _ADDRESS)

    def cuMemAllocManaged(self, size: int, flags: int) -> tuple[int, int]:
        return self._give("cuMemAllocManaged", _ADDRESS)

    def cuMemPoolImportPointer(self, pool: Any, data: Any) -> tuple[int, int]:
        return self._give("cuMemPoolImportPointer", _ADDRESS)

    def cuMemAlloc(self, size: int) -> tuple[int, int]:
        return self._give("cuMemAlloc", _ADDRESS)

    def cuMemPoolCreate(self, props: Any) -> tuple[int, int]:
        return self._give("cuMemPoolCreate", _POOL)

    def cuMemFree(self, ptr: Any) -> tuple[int]:
        return self._take("cuMemFree")

    def cuMemFreeAsync(self, ptr: Any, stream: Any) -> tuple[int]:
        return self._take("cuMemFreeAsync")

    def cuMemPoolDestroy(self, pool: Any) -> tuple[int]:
        return self._take("cuMemPoolDestroy")


@pytest.mark.contract("B5", "S2")
@pytest.mark.parametrize(
    ("alloc", "args", "free"),
    [
        ("cuMemAllocFromPoolAsync", (512, 1, 0), "cuMemFreeAsync"),
        ("cuMemAllocFromPoolAsync", (512, 1, 0), "cuMemFree"),
        ("cuMemAllocManaged", (512, 1), "cuMemFree"),
        ("cuMemPoolImportPointer", (1, b""), "cuMemFree"),
        ("cuMemAlloc", (512,), "cuMemFree"),
    ],
)
def test_a_reused_address_is_freed_again_once_it_was_allocated_again(
    alloc: str, args: tuple[Any, ...], free: str
) -> None:
    inner = _ReusingDriver()
    net = SafetyDriver(inner)
    extra = (0,) if free == "cuMemFreeAsync" else ()
    for _ in range(3):
        err, ptr = getattr(net, alloc)(*args)
        assert err == 0
        assert getattr(net, free)(ptr, *extra) == (0,)
    assert net.incidents == []
    assert inner.calls.count(free) == 3  # every free reached the driver


@pytest.mark.contract("B5", "S2")
def test_a_second_free_of_the_same_allocation_is_still_refused() -> None:
    inner = _ReusingDriver()
    net = SafetyDriver(inner)
    _, ptr = net.cuMemAllocFromPoolAsync(512, 1, 0)
    assert net.cuMemFreeAsync(ptr, 0) == (0,)
    (err,) = net.cuMemFree(ptr)
    assert int(err) != 0  # refused, never reached the driver
    assert inner.calls.count("cuMemFree") == 0
    assert net.incidents == [f"cuMemFree({_ADDRESS:#x}): device_memory already released (refused)"]


@pytest.mark.contract("B5", "S2")
def test_a_pool_destroyed_twice_is_refused_and_a_new_pool_at_its_handle_is_not() -> None:
    inner = _ReusingDriver()
    net = SafetyDriver(inner)
    _, pool = net.cuMemPoolCreate(None)
    assert net.cuMemPoolDestroy(pool) == (0,)
    (err,) = net.cuMemPoolDestroy(pool)
    assert int(err) != 0
    assert inner.calls.count("cuMemPoolDestroy") == 1
    _, again = net.cuMemPoolCreate(None)  # the driver handed the same handle out again
    assert net.cuMemPoolDestroy(again) == (0,)
    assert inner.calls.count("cuMemPoolDestroy") == 2
    assert len(net.incidents) == 1
