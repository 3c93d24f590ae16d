"""A function the bindings have and the driver library lacks is never a failure point (B1).

A CUDA 13.0 driver under newer cuda-bindings lacks ``cuFuncGetParamCount``: calling it raises
``RuntimeError`` before any driver is reached. A recording never lists such a call, and once the proxy has met it (a
sweep's fault-free run does) no fault plan counts it (it would fail a call the real driver never
answers), so that a sweep's failure points are the same in every case.
"""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors import use_driver
from cuguard.testing import FaultPlan, inject, record_calls, simulated_driver
from cuguard.testing._faults import _plan  # a plan over every function, as the failure-point sweep arms

INVALID_VALUE = 1


class _Library:
    """The simulator behind a library that lacks one function the bindings have."""

    def __init__(self, sim: Any, missing: str) -> None:
        self._sim = sim
        self._missing = missing

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._sim, name)
        if name != self._missing:
            return fn

        def absent(*args: Any) -> Any:
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
            with record_calls() as log, inject("cuFuncGetParamCount", INVALID_VALUE) as plan:
                assert _ask(driver) == ["count 0", "get 0"]
            assert plan.fired == 0
