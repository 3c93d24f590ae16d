"""Device properties under cuda.core's names, read with ``cuDeviceGetAttribute`` and cached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cuguard.errors import deferring_lock, driver, raise_status

if TYPE_CHECKING:
    from cuguard.resources._device import Device

__all__ = ["DeviceProperties"]

_PREFIX = "CU_DEVICE_ATTRIBUTE_"
# Attributes that are yes/no flags: read as bool, as cuda.core does. Every name ending in
# "_supported" is one too.
_FLAGS = frozenset(
    {
        "gpu_overlap",
        "kernel_exec_timeout",
        "integrated",
        "can_map_host_memory",
        "concurrent_kernels",
        "ecc_enabled",
        "tcc_driver",
        "unified_addressing",
        "managed_memory",
        "multi_gpu_board",
        "pageable_memory_access",
        "concurrent_managed_access",
        "can_use_host_pointer_for_registered_mem",
        "cooperative_launch",
        "cooperative_multi_device_launch",
        "can_flush_remote_writes",
        "pageable_memory_access_uses_host_page_tables",
        "direct_managed_mem_access_from_host",
        "cluster_launch",
        "mps_enabled",
        "can_tex2d_gather",
        "ipc_event_supported",
    }
)
_names: dict[str, Any] | None = None
_names_lock = deferring_lock()


def _table() -> dict[str, Any]:
    """Property name -> ``CUdevice_attribute`` member, from the installed cuda-bindings."""
    global _names
    names = _names
    if names is None:
        from cuda.bindings.driver import CUdevice_attribute

        names = {}
        for member in CUdevice_attribute:
            name = member.name
            if name.startswith(_PREFIX) and name != _PREFIX + "MAX":
                names.setdefault(name[len(_PREFIX) :].lower(), member)
        with _names_lock:
            _names = names
    return names


class DeviceProperties:
    """The attributes of one device, as attributes named as in cuda.core (``Device.properties``).

    Every ``CUdevice_attribute`` of the installed cuda-bindings is available
    under its name lowercased without the ``CU_DEVICE_ATTRIBUTE_`` prefix
    (``multiprocessor_count``, ``max_threads_per_block``, ``warp_size``,
    ``compute_capability_major``, ``l2_cache_size``...). Flags (``integrated``,
    ``managed_memory``, names ending in ``_supported``...) read as ``bool``,
    the rest as ``int``. Each value is read with ``cuDeviceGetAttribute`` on
    first access and cached for the device's lifetime; a refusal (for
    example an attribute the installed driver does not know) raises
    :class:`~cuguard.errors.CUDAError` and caches nothing; an unknown name
    raises ``AttributeError``. Made by :attr:`Device.properties` only.
    """

    __slots__ = ("_cache", "_device")

    _device: Device
    _cache: dict[str, int]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("DeviceProperties cannot be constructed directly; use Device.properties")

    @classmethod
    def _make(cls, device: Device) -> DeviceProperties:
        self = object.__new__(cls)
        self._device = device
        self._cache = {}
        return self

    def __getattr__(self, name: str) -> int:
        if name.startswith("_"):
            raise AttributeError(name)
        cache = self._cache
        if name in cache:
            return cache[name]
        member = _table().get(name)
        if member is None:
            raise AttributeError(f"{type(self).__name__} has no property {name!r}")
        device = self._device
        device._check_driver()
        err, value = driver.cuDeviceGetAttribute(member, device._handle)
        if err:
            raise_status(err, "cuDeviceGetAttribute")
        result: int = bool(value) if name in _FLAGS or name.endswith("_supported") else int(value)
        cache[name] = result
        return result

    def __dir__(self) -> list[str]:
        return sorted(set(_table()) | set(object.__dir__(self)))

    def __copy__(self) -> DeviceProperties:
        return self

    def __deepcopy__(self, memo: object) -> DeviceProperties:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("DeviceProperties cannot be pickled; pickle the Device and read its properties")

    def __repr__(self) -> str:
        return f"<DeviceProperties of {self._device!r}>"
