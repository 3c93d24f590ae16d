"""What a Python wrapper around event create+destroy costs at the least, piece by piece.

Run on a GPU machine from the source tree (PYTHONPATH over the packages' src/). Times, per
operation: the raw create+destroy through cuda-bindings; the same plus the one cuCtxGetCurrent
that contract C1/G2 requires before creating in the device's context (the floor of any
context-checking wrapper); allocating and dropping a Python object of cuguard's Event shape;
and cuguard's Device.create_event(timing=False).close(). Best of 7 batches each.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from cuda.bindings import driver as D

from cuguard.errors import driver
from cuguard.resources import Device
from cuguard.resources._stream import Event


def best_ns(fn: Callable[[], object], n: int = 100_000) -> float:
    best = float("inf")
    for _ in range(7):
        gc.disable()
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / n)
        gc.enable()
    return best


def main() -> None:
    dev = Device(0)
    dev.set_current()
    ctx = dev.context
    handle = ctx.handle

    def raw() -> None:
        _, event = D.cuEventCreate(2)
        D.cuEventDestroy(event)

    def checked() -> None:
        err, current = driver.cuCtxGetCurrent()
        if not err and current == handle:
            _, event = driver.cuEventCreate(2)
            driver.cuEventDestroy(event)

    def python_object() -> None:
        event = object.__new__(Event)
        event._handle = 1
        event._context = ctx
        event._owned = True
        event._device = 0
        event._timing = False
        event._closed = True

    rows = [
        ("empty loop", lambda: None),
        ("cuCtxGetCurrent", D.cuCtxGetCurrent),
        ("raw create+destroy", raw),
        ("+ context check (floor)", checked),
        ("Event object alloc+dealloc", python_object),
        ("cuguard create_event+close", lambda: dev.create_event(timing=False).close()),
    ]
    for name, fn in rows:
        print(f"{name:30} {best_ns(fn):7.0f} ns")


if __name__ == "__main__":
    main()
