"""Stand-ins for the kernels of these examples, for running them without a GPU.

The examples' runner names this module in ``CUGUARD_SIM_STAND_INS`` (with
``CUGUARD_DRIVER=sim``): the simulated driver imports it before its first call,
and each function below then runs whenever its kernel is launched. On a GPU the
module is never imported and the real kernels run.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from cuguard.testing import stand_in


def _f32(bits: int) -> np.float32:
    """A ``float`` argument of a kernel loaded from a cubin, which arrives as its 32 bits."""
    (value,) = struct.unpack("<f", struct.pack("<I", int(bits) & 0xFFFFFFFF))
    return np.float32(value)


@stand_in("saxpy<float>")  # y = a * x + y, a template instantiated by its name expression
def saxpy(launch: Any, a: int, x: Any, y: Any, n: int) -> None:
    y.array(np.float32, n)[:] += _f32(a) * x.array(np.float32, n)


@stand_in("scale")  # data[i] *= factor, from PTX (a float arrives as a float)
def scale(launch: Any, data: Any, factor: float, n: int) -> None:
    data.array(np.float32, n)[:] *= np.float32(factor)


@stand_in("add_one")  # data[i] += 1
def add_one(launch: Any, data: Any, n: int) -> None:
    data.array(np.float32, n)[:] += np.float32(1)
