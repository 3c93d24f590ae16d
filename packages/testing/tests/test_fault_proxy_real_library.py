"""The fault proxy over a driver library as a real GPU's behaves (B1, W5).

A function the bindings have and the driver library lacks is never a failure point: a CUDA 13.0
driver under newer cuda-bindings lacks ``cuFuncGetParamCount``, and calling it raises
``RuntimeError`` before any driver is reached. A recording never lists such a call, and once the
proxy has met it (a sweep's fault-free run does) no fault plan counts it (it would fail a call the
real driver never answers), so that a sweep's failure points are the same in every case.

A real driver hands a freed address out again at once: the proxy's release counts tell a released
object from a new one at the same address (the garbage-collection sweep checks releases with them).
"""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors import use_driver
from cuguard.testing import FaultPlan, record_calls, simulated_driver
from cuguard.testing._faults import _plan  # a plan over every function, as the failure-point sweep arms

INVALID_VALUE = 1


class _Library:
    """The simulator behind a library that lacks one function the bindings have."""

    def __init__(self, sim: Any, missing: str) -> None:
        self._sim = sim
        self._missing = missing

    def __getattr__(self, name: str) -> Any:
        if name != self._missing:
            return getattr(self._sim, name)

        def absent(*args: Any) -> Any:  # whether or not these bindings have it (cuda-bindings 12 does not)
            raise RuntimeError(f'Function "{name}" not found')

        return absent


def _ask(drv: Any) -> list[str]:
    """cuDeviceGetCount then the missing function (its RuntimeError expected), then cuDeviceGet."""
    names = []
    err, _count = drv.cuDeviceGetCount()
    names.append(f"count {int(err)}")
    with pytest.raises(RuntimeError, match="not found"):
        drv.cuFuncGetParamCount(None)
    err, _dev = drv.cuDeviceGet(0)
    names.append(f"get {int(err)}")
    return names


@pytest.mark.contract("B1")
def test_a_function_missing_from_the_library_is_neither_counted_nor_recorded() -> None:
    with simulated_driver() as sim:
        library = _Library(sim, "cuFuncGetParamCount")
        with use_driver(library):
            from cuguard.errors import driver

            (err,) = driver.cuInit(0)
            assert not err
            # First meeting (a fault-free run): the missing function raises and is not listed.
            with record_calls() as log:
                assert _ask(driver) == ["count 0", "get 0"]
            assert [c.name for c in log] == ["cuDeviceGetCount", "cuDeviceGet"]
            # Every run after: a plan failing the second call of any function fails cuDeviceGet,
            # not the missing function, and a plan on the missing function itself never fires.
            with record_calls() as log, _plan(FaultPlan(None, INVALID_VALUE, nth=2)) as plan:
                assert _ask(driver) == ["count 0", f"get {INVALID_VALUE}"]
            assert [c.name for c in log] == ["cuDeviceGetCount", "cuDeviceGet"]
            assert plan.fired == 1
            # (a plan made directly: cuda-bindings 12 has no cuFuncGetParamCount for inject() to know)
            with record_calls() as log, _plan(FaultPlan("cuFuncGetParamCount", INVALID_VALUE)) as plan:
                assert _ask(driver) == ["count 0", "get 0"]
            assert plan.fired == 0


class _ReusingLibrary:
    """A driver library that hands a freed address out again at once, as a real driver does."""

    ADDRESS = 0x7F0000000000

    def cuMemAlloc(self, size: int) -> tuple[int, int]:
        return 0, self.ADDRESS

    def cuMemFree(self, ptr: int) -> tuple[int]:
        return (0,)


@pytest.mark.contract("W5")
def test_released_objects_tells_a_freed_handle_from_a_new_one_at_the_same_address() -> None:
    from cuguard.testing.lowlevel import acquire_proxy, release_proxy

    with use_driver(_ReusingLibrary()):
        proxy = acquire_proxy()
        try:
            from cuguard.errors import driver

            _err, first = driver.cuMemAlloc(64)
            key = ("device_memory", first)
            before = proxy.released_objects()
            assert driver.cuMemFree(first) == (0,)
            _err, second = driver.cuMemAlloc(64)
            assert second == first  # the same address, another allocation
            assert proxy.live_objects()[key] == 1  # live again: the live count alone cannot tell
            assert proxy.released_objects()[key] == before.get(key, 0) + 1
        finally:
            release_proxy(proxy)
