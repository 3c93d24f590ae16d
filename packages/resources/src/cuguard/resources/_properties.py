"""Device properties under cuda.core's names, read with ``cuDeviceGetAttribute`` and cached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cuguard.errors import driver, raise_status
from cuguard.errors.lowlevel import deferring_lock

if TYPE_CHECKING:
    from cuguard.resources._device import Device

__all__ = ["DeviceProperties"]

_PREFIX = "CU_DEVICE_ATTRIBUTE_"
# cuda.core's names that are not the driver's attribute name lowercased: name -> the attribute's name.
_RENAMED = {"virtual_memory_management_supported": "CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED"}
# Names cuguard keeps beside cuda.core's for the same attribute (the driver's own spelling):
# alias -> cuda.core's name. They read the same cached value.
ALIASES = {"virtual_address_management_supported": "virtual_memory_management_supported"}
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
        "can_use_64_bit_stream_mem_ops",
        "can_use_stream_wait_value_nor",
        "unified_function_pointers",
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
        for name, attribute in _RENAMED.items():
            member = getattr(CUdevice_attribute, attribute, None)
            if member is not None:
                names[name] = member
                names.pop(attribute[len(_PREFIX) :].lower(), None)
        with _names_lock:
            _names = names
    return names


class DeviceProperties:
    """The attributes of one device, under cuda.core 1.2's names (``Device.properties``).

    Every property of cuda.core 1.2's ``DeviceProperties`` is here under the
    same name (``multiprocessor_count``, ``max_threads_per_block``,
    ``warp_size``, ``compute_capability_major``, ``l2_cache_size``,
    ``virtual_memory_management_supported``...), with the same type: flags
    (``integrated``, ``managed_memory``, ``unified_function_pointers``, names
    ending in ``_supported``...) read as ``bool``, the rest as ``int``.

    Beyond cuda.core's names, and readable the same way: every other
    ``CUdevice_attribute`` of the installed cuda-bindings under its name
    lowercased without the ``CU_DEVICE_ATTRIBUTE_`` prefix (attributes newer
    than cuda.core 1.2, such as ``atomic_reduction_supported``), and one
    alias, ``virtual_address_management_supported`` (the driver's spelling of
    ``virtual_memory_management_supported``, the same cached value). Code meant
    to run on cuda.core too should use cuda.core's names only.

    Each value is read with ``cuDeviceGetAttribute`` on first access and
    cached for the device's lifetime. A refusal (for example an attribute
    the installed driver does not know: ``CUDA_ERROR_INVALID_VALUE``) raises
    :class:`~cuguard.errors.CUDAError` and caches nothing, where cuda.core
    reads such an attribute as 0. An unknown name raises ``AttributeError``.
    No context is needed, so none is switched to (G2). Made by
    :attr:`Device.properties` only.
    """

    __slots__ = ("_cache", "_device")

    _device: Device
    _cache: dict[str, int]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("DeviceProperties cannot be constructed directly; use Device.properties")

    @classmethod
    def _make(cls, device: Device) -> DeviceProperties:
        self = cls.__new__(cls)
        self._device = device
        self._cache = {}
        return self

    def __getattr__(self, name: str) -> int:
        if name.startswith("_"):
            raise AttributeError(name)
        name = ALIASES.get(name, name)
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
        return sorted(set(_table()) | set(ALIASES) | set(object.__dir__(self)))

    def __copy__(self) -> DeviceProperties:
        return self

    def __deepcopy__(self, memo: object) -> DeviceProperties:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("DeviceProperties cannot be pickled; pickle the Device and read its properties")

    def __repr__(self) -> str:
        return f"<DeviceProperties of {self._device!r}>"
