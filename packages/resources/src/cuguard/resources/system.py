"""What the CUDA driver says about the whole system: ``from cuguard.resources import system``.

The counterpart of cuda.core's ``cuda.core.system`` for the questions the CUDA
driver answers:

- :func:`get_num_devices`: how many CUDA devices the driver sees
  (``cuDeviceGetCount``, after initializing the driver once);
- :func:`get_user_mode_driver_version`: the CUDA version of the installed
  driver as ``(major, minor)`` (``cuDriverGetVersion``), e.g. ``(13, 0)``;
- :func:`get_driver_version`: the same as the driver's single integer, e.g.
  ``13000``;
- ``system.num_devices`` and ``system.driver_version``: the spellings of
  earlier cuda.core releases, read on each access (the same answers as
  :func:`get_num_devices` and :func:`get_user_mode_driver_version`).

None of them creates a context, retains one or changes the calling thread's
current context (G2): these driver calls need none. A refusal by the driver
raises :class:`~cuguard.errors.CUDAError` naming the call (E1); with no driver
library at all, :class:`~cuguard.errors.CUDADriverNotFoundError`. Nothing is
cached, so a driver installed later (the simulated one in tests) answers for
itself.

cuda.core's NVML questions (the kernel-mode driver version, the driver
branch, the NVML version, process names, NVML devices and events) are not
answered by the CUDA driver and are not provided here.
"""

from __future__ import annotations

from cuguard.context import init_driver
from cuguard.errors import driver, raise_status

__all__ = ["get_driver_version", "get_num_devices", "get_user_mode_driver_version"]


def get_num_devices() -> int:
    """How many CUDA devices the driver sees (``cuDeviceGetCount``).

    Initializes the driver once if needed (``cuInit``). Raises
    :class:`~cuguard.errors.CUDAError` if initialization or the count is
    refused. Leaves the current context as it was.
    """
    init_driver()
    err, count = driver.cuDeviceGetCount()
    if err:
        raise_status(err, "cuDeviceGetCount")
    return int(count)


def get_driver_version() -> int:
    """The CUDA version of the installed driver as the driver's integer (``1000 * major + 10 * minor``).

    One ``cuDriverGetVersion``, which needs no initialization and no context.
    Raises :class:`~cuguard.errors.CUDAError` if the driver refuses.
    """
    err, version = driver.cuDriverGetVersion()
    if err:
        raise_status(err, "cuDriverGetVersion")
    return int(version)


def get_user_mode_driver_version() -> tuple[int, int]:
    """The CUDA version of the installed driver as ``(major, minor)``, e.g. ``(13, 0)``.

    As cuda.core's function of the same name; see :func:`get_driver_version`
    for how it is read and what a failure raises.
    """
    version = get_driver_version()
    return version // 1000, version % 1000 // 10


def __getattr__(name: str) -> object:
    # Earlier cuda.core releases spelled these as attributes of ``system``.
    if name == "num_devices":
        return get_num_devices()
    if name == "driver_version":
        return get_user_mode_driver_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, "driver_version", "num_devices"])
