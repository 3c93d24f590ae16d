"""Kernel attributes, occupancy, and launches with attributes via ``cuLaunchKernelEx``.

Plain launches go through ``cuLaunchKernel`` (see :func:`launch`); a
:class:`LaunchConfig` with ``cluster``, ``cooperative_launch``, a ``priority``
or ``programmatic_stream_serialization`` goes through ``cuLaunchKernelEx``
after the device has been checked for support.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from cuda.bindings import driver as cb

from cuguard.context import Context, call_in
from cuguard.errors import driver, raise_status
from cuguard.errors.lowlevel import INT_LIMIT, int_argument, is_integer, wrong_kind

if TYPE_CHECKING:
    from cuguard.resources._module import Kernel, LaunchConfig
    from cuguard.resources._stream import Stream

__all__ = ["KernelAttributes", "KernelOccupancy", "MaxPotentialBlockSizeOccupancyResult", "launch_ex"]

_A = cb.CUfunction_attribute
_D = cb.CUdevice_attribute


def _device_attribute(ordinal: int, attribute: Any) -> int:
    err, value = driver.cuDeviceGetAttribute(attribute, ordinal)
    if err:
        raise_status(err, "cuDeviceGetAttribute")
    return int(value)


def _check_device(kernel: Kernel, device_id: Any) -> Context:
    module = kernel.module
    if module._closed or module._context._closed:
        module._check_open()
    if device_id is not None:
        from cuguard.resources._device import Device

        ordinal = device_id.ordinal if isinstance(device_id, Device) else device_id
        if not is_integer(ordinal):
            raise wrong_kind("device_id", "a Device, an int or None", device_id)
        ordinal = int_argument("device_id", ordinal, 0, INT_LIMIT)
        if ordinal != module._device:
            raise ValueError(f"{kernel!r} is loaded on device {module._device}, not device {ordinal}")
    return module._context


class KernelAttributes:
    """A kernel's attributes (``cuFuncGetAttribute``), as ``cuda.core`` names them.

    Each method returns the current value; ``device_id`` (a :class:`Device`
    or an ordinal) may be given for ``cuda.core`` code and must be the
    kernel's own device (``ValueError`` otherwise). A kernel of a closed
    module raises :class:`~cuguard.errors.ResourceClosedError`; a refusal by
    the driver raises :class:`~cuguard.errors.CUDAError`. Nothing is changed.
    """

    __slots__ = ("_kernel",)

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def _get(self, attribute: Any, device_id: Any) -> int:
        kernel = self._kernel
        context = _check_device(kernel, device_id)

        def op() -> int:
            err, value = driver.cuFuncGetAttribute(attribute, kernel._handle)
            if err:
                raise_status(err, "cuFuncGetAttribute")
            return int(value)

        return call_in(context, op, None)

    def max_threads_per_block(self, device_id: Any = None) -> int:
        """The most threads per block a launch of this kernel can have."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device_id)

    def shared_size_bytes(self, device_id: Any = None) -> int:
        """Statically allocated shared memory per block, in bytes."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, device_id)

    def const_size_bytes(self, device_id: Any = None) -> int:
        """User constant memory, in bytes."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, device_id)

    def local_size_bytes(self, device_id: Any = None) -> int:
        """Local memory per thread, in bytes."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, device_id)

    def num_regs(self, device_id: Any = None) -> int:
        """Registers per thread."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_NUM_REGS, device_id)

    def ptx_version(self, device_id: Any = None) -> int:
        """The PTX virtual architecture it was compiled for (major * 10 + minor)."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_PTX_VERSION, device_id)

    def binary_version(self, device_id: Any = None) -> int:
        """The binary architecture it was compiled for (major * 10 + minor)."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_BINARY_VERSION, device_id)

    def cache_mode_ca(self, device_id: Any = None) -> bool:
        """Whether it was compiled with ``-Xptxas --dlcm=ca``."""
        return bool(self._get(_A.CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, device_id))

    def max_dynamic_shared_size_bytes(self, device_id: Any = None) -> int:
        """The most dynamic shared memory a launch may ask for, in bytes."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, device_id)

    def preferred_shared_memory_carveout(self, device_id: Any = None) -> int:
        """The preferred shared memory carveout, in percent (-1: no preference)."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, device_id)

    def cluster_size_must_be_set(self, device_id: Any = None) -> bool:
        """Whether a launch must give a cluster size."""
        return bool(self._get(_A.CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, device_id))

    def required_cluster_width(self, device_id: Any = None) -> int:
        """The cluster width the kernel requires (0: none)."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, device_id)

    def required_cluster_height(self, device_id: Any = None) -> int:
        """The cluster height the kernel requires (0: none)."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, device_id)

    def required_cluster_depth(self, device_id: Any = None) -> int:
        """The cluster depth the kernel requires (0: none)."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, device_id)

    def non_portable_cluster_size_allowed(self, device_id: Any = None) -> bool:
        """Whether a non-portable cluster size may be used."""
        return bool(self._get(_A.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, device_id))

    def cluster_scheduling_policy_preference(self, device_id: Any = None) -> int:
        """The ``CUclusterSchedulingPolicy`` value the kernel prefers."""
        return self._get(_A.CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, device_id)

    def __repr__(self) -> str:
        return f"<KernelAttributes of {self._kernel!r}>"


class MaxPotentialBlockSizeOccupancyResult(NamedTuple):
    """What :meth:`KernelOccupancy.max_potential_block_size` returns."""

    min_grid_size: int
    """The smallest grid that reaches the best occupancy."""
    max_block_size: int
    """The block size that reaches it."""


class KernelOccupancy:
    """Occupancy of a kernel (``cuOccupancy*``), as ``cuda.core`` names it.

    Arguments are checked first (``TypeError`` for a non-integer such as a
    bool or a float, NumPy integers being taken; ``ValueError`` for a negative
    size, a block size or count below 1, or a value the driver's C type
    cannot hold: ``2**31`` or more for block sizes and counts, ``2**64`` or
    more for shared memory sizes); a kernel of a closed module
    raises :class:`~cuguard.errors.ResourceClosedError`; a refusal by the
    driver raises :class:`~cuguard.errors.CUDAError`. Nothing is changed.
    """

    __slots__ = ("_kernel",)

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def max_active_blocks_per_multiprocessor(self, block_size: int, dynamic_shared_memory_size: int = 0) -> int:
        """How many blocks of ``block_size`` threads can be resident on one multiprocessor."""
        block_size = int_argument("block_size", block_size, 1, INT_LIMIT)
        shared = int_argument("dynamic_shared_memory_size", dynamic_shared_memory_size)
        kernel = self._kernel
        context = _check_device(kernel, None)
        return call_in(context, _active_blocks, None, kernel._handle, block_size, shared)

    def max_potential_block_size(
        self, dynamic_shared_memory_needed: int = 0, block_size_limit: int = 0
    ) -> MaxPotentialBlockSizeOccupancyResult:
        """The block size that maximizes occupancy, and the smallest grid reaching it.

        ``dynamic_shared_memory_needed`` is the dynamic shared memory per
        block, in bytes (a fixed size: a per-block-size callback is not
        taken); ``block_size_limit`` caps the block size (0: no cap).
        """
        shared = int_argument("dynamic_shared_memory_needed", dynamic_shared_memory_needed)
        limit = int_argument("block_size_limit", block_size_limit, 0, INT_LIMIT)
        kernel = self._kernel
        context = _check_device(kernel, None)

        def op() -> MaxPotentialBlockSizeOccupancyResult:
            err, grid, block = driver.cuOccupancyMaxPotentialBlockSize(kernel._handle, None, shared, limit)
            if err:
                raise_status(err, "cuOccupancyMaxPotentialBlockSize")
            return MaxPotentialBlockSizeOccupancyResult(int(grid), int(block))

        return call_in(context, op, None)

    def available_dynamic_shared_memory_per_block(self, num_blocks_per_multiprocessor: int, block_size: int) -> int:
        """The most dynamic shared memory per block, in bytes, that still lets that many blocks be resident."""
        blocks = int_argument("num_blocks_per_multiprocessor", num_blocks_per_multiprocessor, 1, INT_LIMIT)
        block_size = int_argument("block_size", block_size, 1, INT_LIMIT)
        kernel = self._kernel
        context = _check_device(kernel, None)

        def op() -> int:
            err, size = driver.cuOccupancyAvailableDynamicSMemPerBlock(kernel._handle, blocks, block_size)
            if err:
                raise_status(err, "cuOccupancyAvailableDynamicSMemPerBlock")
            return int(size)

        return call_in(context, op, None)

    def _cluster_query(self, config: Any, stream: Any, call: str, need_cluster: bool) -> int:
        from cuguard.resources._module import LaunchConfig
        from cuguard.resources._stream import Stream, as_stream

        if not isinstance(config, LaunchConfig):
            raise wrong_kind("config", "a LaunchConfig", config)
        if need_cluster and config.cluster is None:
            raise ValueError("config must give a cluster (LaunchConfig(cluster=...))")
        handle: Any = 0
        if stream is not None:
            if type(stream) is not Stream:
                stream = as_stream(stream, "stream")
            handle = stream.handle
        kernel = self._kernel
        context = _check_device(kernel, None)
        cfg = _driver_config(config, handle)

        def op() -> int:
            err, value = getattr(driver, call)(kernel._handle, cfg)
            if err:
                raise_status(err, call)
            return int(value)

        return call_in(context, op, None)

    def max_active_clusters(self, config: LaunchConfig, stream: Stream | None = None) -> int:
        """How many clusters of ``config``'s shape (it must give ``cluster``) can be resident at once.

        ``stream`` (a :class:`Stream` or ``__cuda_stream__`` object) is passed
        to the driver in the launch configuration, as a launch would; without
        one the NULL stream is.
        """
        return self._cluster_query(config, stream, "cuOccupancyMaxActiveClusters", True)

    def max_potential_cluster_size(self, config: LaunchConfig, stream: Stream | None = None) -> int:
        """The largest cluster size a launch of ``config``'s grid, block and shared memory can use."""
        return self._cluster_query(config, stream, "cuOccupancyMaxPotentialClusterSize", False)

    def __repr__(self) -> str:
        return f"<KernelOccupancy of {self._kernel!r}>"


def _active_blocks(function: Any, block_size: int, shared: int) -> int:
    err, blocks = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, block_size, shared)
    if err:
        raise_status(err, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    return int(blocks)


def _driver_config(config: LaunchConfig, stream_handle: Any) -> Any:
    """``config`` as the ``CUlaunchConfig`` of ``cuLaunchKernelEx`` (cluster and cooperative attributes)."""
    gx, gy, gz, bx, by, bz, shared = config._launch_dims
    attrs: list[Any] = []
    if config.cluster is not None:
        attr = cb.CUlaunchAttribute()
        attr.id = cb.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = config._cluster_dims
        attrs.append(attr)
    if config.cooperative_launch:
        attr = cb.CUlaunchAttribute()
        attr.id = cb.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attrs.append(attr)
    if config.programmatic_stream_serialization:
        attr = cb.CUlaunchAttribute()
        attr.id = cb.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    if config.priority:  # 0 (or None) leaves the stream's priority, as in cuda.core
        attr = cb.CUlaunchAttribute()
        attr.id = cb.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PRIORITY
        attr.value.priority = config.priority
        attrs.append(attr)
    cfg = cb.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = gx, gy, gz
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bx, by, bz
    cfg.sharedMemBytes = shared
    cfg.hStream = stream_handle
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


def _priority_range() -> tuple[int, int]:
    """``(least, greatest)`` stream priority of the current context's device (greatest is the lowest number)."""
    err, least, greatest = driver.cuCtxGetStreamPriorityRange()
    if err:
        raise_status(err, "cuCtxGetStreamPriorityRange")
    return int(least), int(greatest)


def launch_ex(stream: Stream, config: LaunchConfig, kernel: Kernel, params: Any) -> None:
    """Check the device supports ``config``'s launch attributes, then ``cuLaunchKernelEx``.

    Raises ``ValueError`` when the stream's device cannot run the launch
    (clusters need compute capability 9.0 and ``CLUSTER_LAUNCH``; cooperative
    launches need ``COOPERATIVE_LAUNCH`` and a grid no larger than the blocks
    that can be resident at once; a priority must lie in the device's stream
    priority range, asked with ``cuCtxGetStreamPriorityRange`` in the stream's
    context; programmatic stream serialization needs compute capability 9.0)
    and :class:`~cuguard.errors.CUDAError` when a query or the launch is
    refused; nothing is queued then. The caller's context is left as it was
    (G2).
    """
    ordinal = stream._context.device
    gx, gy, gz, bx, by, bz, shared = config._launch_dims
    if config.cluster is not None:
        major = _device_attribute(ordinal, _D.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        if major < 9 or not _device_attribute(ordinal, _D.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH):
            raise ValueError(
                f"thread block clusters need compute capability 9.0 or newer and cluster launch support; "
                f"device {ordinal} has compute capability {major}.x"
            )
    if config.cooperative_launch:
        if not _device_attribute(ordinal, _D.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH):
            raise ValueError(f"device {ordinal} does not support cooperative launches")
        sms = _device_attribute(ordinal, _D.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        per_sm = call_in(stream._context, _active_blocks, None, kernel._handle, bx * by * bz, shared)
        blocks = gx * gy * gz
        if blocks > per_sm * sms:
            raise ValueError(
                f"a cooperative launch of {kernel.name!r} can have at most {per_sm * sms} blocks "
                f"({per_sm} per multiprocessor x {sms}) with this block and shared memory size, not {blocks}"
            )
    if config.programmatic_stream_serialization:
        major = _device_attribute(ordinal, _D.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        if major < 9:
            raise ValueError(
                "programmatic stream serialization (programmatic dependent launch) needs compute capability 9.0 "
                f"or newer; device {ordinal} has compute capability {major}.x"
            )
    if config.priority:
        least, greatest = call_in(stream._context, _priority_range, None)
        if not greatest <= config.priority <= least:
            raise ValueError(
                f"priority={config.priority} is outside device {ordinal}'s stream priority range "
                f"[{greatest}, {least}] (lower numbers are higher priorities; 0 leaves the stream's)"
            )
    (err,) = driver.cuLaunchKernelEx(_driver_config(config, stream._handle), kernel._handle, params, 0)
    if err:
        raise_status(err, "cuLaunchKernelEx")
