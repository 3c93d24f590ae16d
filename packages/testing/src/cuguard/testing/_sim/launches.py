"""Launches with attributes (``cuLaunchKernelEx``) and occupancy (``cuOccupancy*``) on the simulated driver.

:class:`SimLaunches` builds on :class:`~cuguard.testing._sim.core.SimCore`.
Rules (documented in the CUDA driver API unless marked assumed):

- ``cuLaunchKernelEx`` takes a ``CUlaunchConfig``; ``None`` is
  ``CUDA_ERROR_INVALID_VALUE``. Its grid, block and shared memory follow
  ``cuLaunchKernel``'s rules; the attributes read are the cluster dimension,
  the cooperative flag, the priority and programmatic stream serialization
  (others are accepted and ignored, assumed).
- A launch priority outside the context's stream priority range (``[-5, 0]``,
  as ``cuCtxGetStreamPriorityRange`` answers) is accepted, as an H200 (driver
  580) accepts it (the differential scenario
  ``launch_priority_and_programmatic_serialization``), and recorded clamped into
  the range (assumed, as stream priorities are); programmatic stream
  serialization is accepted, alone or with a priority, as on the H200. Both are
  recorded with the launch; the simulator runs launches in stream order all the
  same (assumed: letting a kernel start early is an optimization, never a
  guarantee).
- A cluster dimension must divide the grid and the cluster may hold at most 8
  blocks (the portable size; 16 with ``NON_PORTABLE_CLUSTER_SIZE_ALLOWED``):
  otherwise ``CUDA_ERROR_INVALID_CLUSTER_SIZE``. A device without
  ``CLUSTER_LAUNCH`` or below compute capability 9.0 answers
  ``CUDA_ERROR_NOT_SUPPORTED`` (assumed).
- A cooperative launch whose grid exceeds the blocks that can be resident at
  once is ``CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE``; a device without
  ``COOPERATIVE_LAUNCH`` answers ``CUDA_ERROR_NOT_SUPPORTED``.
- Occupancy (assumed model of an H200): resident blocks per multiprocessor are
  limited by ``MAX_BLOCKS_PER_MULTIPROCESSOR`` (32), by 2048 threads (block size
  rounded up to a warp), by 65536 registers (``NUM_REGS`` per thread), and by
  the multiprocessor's shared memory (static plus dynamic, plus 1 KiB reserved
  per block); a block size above the kernel's ``MAX_THREADS_PER_BLOCK`` or
  dynamic shared memory above its ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` gives 0 blocks.
  The dynamic shared memory available to ``n`` resident blocks is the
  multiprocessor's shared memory divided by ``n``, less the reserved and static
  parts, capped by ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` (0 when ``n`` blocks cannot
  be resident at all).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.base import OK, SUCCESS, Status, api
from cuguard.testing._sim.core import SimCore
from cuguard.testing._sim.facts import FUNCTION_ATTRIBUTE_DEFAULTS
from cuguard.testing._sim.state import Function

__all__ = ["SimLaunches"]

R = cb.CUresult
INVALID_VALUE = R.CUDA_ERROR_INVALID_VALUE
_ID = cb.CUlaunchAttributeID
_D = cb.CUdevice_attribute
_PORTABLE_CLUSTER = 8
_NON_PORTABLE_CLUSTER = 16
_RESERVED_SHARED = 1024
# The stream priority range cuCtxGetStreamPriorityRange answers (least, greatest), as on the H200.
_LEAST_PRIORITY = 0
_GREATEST_PRIORITY = -5


class SimLaunches(SimCore):
    """Adds ``cuLaunchKernelEx`` and the occupancy calculator."""

    def _device_attr(self, attribute: Any) -> int:
        return int(self._attributes.get(int(attribute), 0))

    def _fn_attr(self, fn: Function, name: str) -> int:
        table: dict[int, dict[str, int]] = getattr(self, "_function_attributes", {})
        value = table.get(fn.handle, {}).get(name)
        return FUNCTION_ATTRIBUTE_DEFAULTS[name] if value is None else value

    def _blocks_per_sm(self, fn: Function, block_size: int, shared: int) -> int:
        if block_size <= 0 or block_size > self._fn_attr(fn, "MAX_THREADS_PER_BLOCK"):
            return 0
        if shared > self._fn_attr(fn, "MAX_DYNAMIC_SHARED_SIZE_BYTES"):
            return 0
        threads = -(-block_size // 32) * 32
        limits = [
            self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
            self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) // threads,
        ]
        regs = self._fn_attr(fn, "NUM_REGS") * threads
        if regs:
            limits.append(self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR) // regs)
        per_block = self._fn_attr(fn, "SHARED_SIZE_BYTES") + shared
        if per_block:
            sm_shared = self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
            limits.append(sm_shared // (per_block + _RESERVED_SHARED))
        return max(0, min(limits))

    @api(1)
    def cuOccupancyMaxActiveBlocksPerMultiprocessor(
        self, func: Any, blockSize: int, dynamicSMemSize: int
    ) -> tuple[Any, ...]:
        fn = self._function(func, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return (SUCCESS, self._blocks_per_sm(fn, int(blockSize), int(dynamicSMemSize)))

    @api(1)
    def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        self, func: Any, blockSize: int, dynamicSMemSize: int, flags: int
    ) -> tuple[Any, ...]:
        """``flags`` is ``CU_OCCUPANCY_DEFAULT`` (0) or ``CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE`` (1)."""
        if int(flags) not in (0, 1):
            raise Status(INVALID_VALUE)
        fn = self._function(func, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")
        return (SUCCESS, self._blocks_per_sm(fn, int(blockSize), int(dynamicSMemSize)))

    @api(1)
    def cuOccupancyAvailableDynamicSMemPerBlock(self, func: Any, numBlocks: int, blockSize: int) -> tuple[Any, ...]:
        """Dynamic shared memory per block that lets ``numBlocks`` blocks be resident (0 if they cannot be)."""
        fn = self._function(func, "cuOccupancyAvailableDynamicSMemPerBlock")
        blocks, size = int(numBlocks), int(blockSize)
        if blocks <= 0 or self._blocks_per_sm(fn, size, 0) < blocks:
            return (SUCCESS, 0)
        sm_shared = self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
        room = sm_shared // blocks - _RESERVED_SHARED - self._fn_attr(fn, "SHARED_SIZE_BYTES")
        return (SUCCESS, max(0, min(room, self._fn_attr(fn, "MAX_DYNAMIC_SHARED_SIZE_BYTES"))))

    @api(2)
    def cuOccupancyMaxPotentialBlockSize(
        self, func: Any, blockSizeToDynamicSMemSize: Any, dynamicSMemSize: int, blockSizeLimit: int
    ) -> tuple[Any, ...]:
        """``(status, minGridSize, blockSize)``; a per-block-size callback is not supported (assumed refusal)."""
        if blockSizeToDynamicSMemSize is not None and int(blockSizeToDynamicSMemSize) != 0:
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
        fn = self._function(func, "cuOccupancyMaxPotentialBlockSize")
        limit = self._fn_attr(fn, "MAX_THREADS_PER_BLOCK")
        if int(blockSizeLimit) > 0:
            limit = min(limit, int(blockSizeLimit))
        best = (0, 0, 0)  # (resident threads, block size, blocks per SM)
        for size in range(32, limit + 1, 32):
            blocks = self._blocks_per_sm(fn, size, int(dynamicSMemSize))
            if blocks * size >= best[0] and blocks:
                best = (blocks * size, size, blocks)
        if best[1] == 0:
            return (SUCCESS, 0, 0)
        sms = self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        return (SUCCESS, best[2] * sms, best[1])

    def _cluster_limit(self, fn: Function) -> int:
        return _NON_PORTABLE_CLUSTER if self._fn_attr(fn, "NON_PORTABLE_CLUSTER_SIZE_ALLOWED") else _PORTABLE_CLUSTER

    def _occupancy_config(self, fn: Function, config: Any) -> tuple[int, int, tuple[int, int, int] | None]:
        """``(block size, shared memory, cluster dims or None)`` of a ``CUlaunchConfig``; refusals as the driver's."""
        if config is None:
            raise Status(INVALID_VALUE)
        if self._device_attr(_D.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) < 9 or not self._device_attr(
            _D.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH
        ):
            raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
        cluster = None
        for attr in list(config.attrs or [])[: int(config.numAttrs)]:
            if int(attr.id) == int(_ID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION):
                dim = attr.value.clusterDim
                cluster = (int(dim.x), int(dim.y), int(dim.z))
        block = int(config.blockDimX) * int(config.blockDimY) * int(config.blockDimZ)
        return block, int(config.sharedMemBytes), cluster

    @api(1)
    def cuOccupancyMaxPotentialClusterSize(self, func: Any, config: Any) -> tuple[Any, ...]:
        """The portable cluster size (8), or 16 with ``NON_PORTABLE_CLUSTER_SIZE_ALLOWED``; 0 if no block fits."""
        fn = self._function(func, "cuOccupancyMaxPotentialClusterSize")
        block, shared, _ = self._occupancy_config(fn, config)
        if self._blocks_per_sm(fn, block, shared) == 0:
            return (SUCCESS, 0)
        return (SUCCESS, self._cluster_limit(fn))

    @api(1)
    def cuOccupancyMaxActiveClusters(self, func: Any, config: Any) -> tuple[Any, ...]:
        """Resident blocks of the device divided by the cluster size (assumed: no per-GPC packing loss).

        A configuration without a cluster dimension, or a cluster larger than
        allowed, is ``CUDA_ERROR_INVALID_CLUSTER_SIZE``.
        """
        fn = self._function(func, "cuOccupancyMaxActiveClusters")
        block, shared, cluster = self._occupancy_config(fn, config)
        if cluster is None or min(cluster) <= 0:
            raise Status(R.CUDA_ERROR_INVALID_CLUSTER_SIZE)
        size = cluster[0] * cluster[1] * cluster[2]
        if size > self._cluster_limit(fn):
            raise Status(R.CUDA_ERROR_INVALID_CLUSTER_SIZE)
        sms = self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        return (SUCCESS, self._blocks_per_sm(fn, block, shared) * sms // size)

    @api(0)
    def cuLaunchKernelEx(self, config: Any, f: Any, kernelParams: Any, extra: Any) -> tuple[Any, ...]:
        if config is None:
            raise Status(INVALID_VALUE)
        fn = self._function(f, "cuLaunchKernelEx")
        st = self._stream(config.hStream, "cuLaunchKernelEx")
        if fn.ctx is not None and fn.ctx is not st.ctx:
            raise Status(R.CUDA_ERROR_INVALID_HANDLE)
        grid = (int(config.gridDimX), int(config.gridDimY), int(config.gridDimZ))
        block = (int(config.blockDimX), int(config.blockDimY), int(config.blockDimZ))
        shared = int(config.sharedMemBytes)
        if min(grid) <= 0 or min(block) <= 0 or block[0] * block[1] * block[2] > 1024 or block[2] > 64:
            raise Status(INVALID_VALUE)
        if shared > 232448:  # as cuLaunchKernel
            raise Status(INVALID_VALUE)
        cluster: tuple[int, int, int] | None = None
        cooperative = False
        priority = 0
        serialization = False
        attrs = list(config.attrs or [])[: int(config.numAttrs)]
        for attr in attrs:
            ident = int(attr.id)
            if ident == int(_ID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION):
                dim = attr.value.clusterDim
                cluster = (int(dim.x), int(dim.y), int(dim.z))
            elif ident == int(_ID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE):
                cooperative = bool(int(attr.value.cooperative))
            elif ident == int(_ID.CU_LAUNCH_ATTRIBUTE_PRIORITY):
                priority = min(_LEAST_PRIORITY, max(_GREATEST_PRIORITY, int(attr.value.priority)))
            elif ident == int(_ID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION):
                serialization = bool(int(attr.value.programmaticStreamSerializationAllowed))
        if cluster is not None:
            if self._device_attr(_D.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) < 9 or not self._device_attr(
                _D.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH
            ):
                raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
            size = cluster[0] * cluster[1] * cluster[2]
            if (
                min(cluster) <= 0
                or size > self._cluster_limit(fn)
                or any(g % c for g, c in zip(grid, cluster, strict=True))
            ):
                raise Status(R.CUDA_ERROR_INVALID_CLUSTER_SIZE)
        if cooperative:
            if not self._device_attr(_D.CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH):
                raise Status(R.CUDA_ERROR_NOT_SUPPORTED)
            per_sm = self._blocks_per_sm(fn, block[0] * block[1] * block[2], shared)
            sms = self._device_attr(_D.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            if grid[0] * grid[1] * grid[2] > per_sm * sms:
                raise Status(R.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
        self._require_stand_in(fn)
        args = self.decode_params(fn, kernelParams)
        refs = self._arg_refs(args, "cuLaunchKernelEx", fn.name)
        launch = {
            "name": fn.name,
            "grid": grid,
            "block": block,
            "shared": shared,
            "stream": st.handle,
            "cluster": cluster,
            "cooperative": cooperative,
            "priority": priority,
            "programmatic_stream_serialization": serialization,
        }
        self._enqueue(st, "cuLaunchKernelEx", self._kernel_runner(fn, args, launch), refs)
        return OK
