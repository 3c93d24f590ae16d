"""Memory of the simulated driver: device and host allocations, copies, memsets, reads and writes.

:class:`SimMemory` builds on :class:`~cuguard.testing._sim.streams.SimStreams`.
"""

from __future__ import annotations

import bisect
import ctypes
import struct
from collections.abc import Callable
from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._sim.accounting import SimulatedFault
from cuguard.testing._sim.base import (
    DEVICE_BASE,
    INVALID_VALUE,
    OK,
    SUCCESS,
    R,
    Status,
    _byte_view,
    _is_buffer,
    _reserve_addresses,
    api,
    h,
)
from cuguard.testing._sim.facts import HOST_ALLOC_FLAGS_MASK
from cuguard.testing._sim.state import Alloc, Ctx
from cuguard.testing._sim.streams import SimStreams

__all__ = ["SimMemory"]


class SimMemory(SimStreams):
    """Allocation and release, copies and memsets, and the simulator's own access to memory."""

    # --- the simulator's access to memory -------------------------------------------------------

    def read(self, ptr: Any, n: int) -> bytes:
        """The ``n`` bytes of device (or simulator-owned host) memory at ``ptr``.

        Raises :class:`SimulatedFault` (``CUDA_ERROR_ILLEGAL_ADDRESS``) when the
        range is not inside one allocation. Reading freed memory is recorded
        in :attr:`dangling` and returns zeros.
        """
        with self._lock:
            alloc, off = self._access(int(ptr), n, "read")
            return bytes(n) if alloc is None else alloc.read(off, n)

    def write(self, ptr: Any, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to device (or simulator-owned host) memory at ``ptr``.

        Raises :class:`SimulatedFault` like :meth:`read`; a write to freed
        memory is recorded in :attr:`dangling` and dropped.
        """
        payload = memoryview(data).cast("B")
        with self._lock:
            alloc, off = self._access(int(ptr), len(payload), "write")
            if alloc is not None:
                alloc.write(off, payload)

    def _access(self, addr: int, n: int, what: str) -> tuple[Alloc | None, int]:
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else self._host_find(addr)
        if alloc is None or addr + n > alloc.base + alloc.size:
            raise SimulatedFault(
                int(R.CUDA_ERROR_ILLEGAL_ADDRESS), f"{what} of {n} bytes at {addr:#x} is outside any allocation"
            )
        if alloc.freed or (alloc.ctx is not None and not alloc.ctx.alive(alloc.gen)):
            self._note(self.dangling, "kernel", f"{what} of freed memory {addr:#x} (allocated by {alloc.call})", addr)
            return None, 0
        return alloc, addr - alloc.base

    def view(self, ptr: Any, n: int) -> memoryview:
        """A writable view of the ``n`` bytes of memory at ``ptr``: writes reach that memory.

        Faults like :meth:`read` outside every allocation; a view of freed memory
        is recorded in :attr:`dangling` and writes to it go nowhere.
        """
        with self._lock:
            alloc, off = self._access(int(ptr), n, "view")
            if alloc is None:
                return memoryview(bytearray(n))
            if alloc.host:
                return memoryview((ctypes.c_uint8 * n).from_address(alloc.base + off)).cast("B")
            if alloc.data is None:
                alloc.data = bytearray(alloc.size)
            return memoryview(alloc.data)[off : off + n]

    # --- allocation ----------------------------------------------------------------------------

    def _new_device_alloc(self, size: int, ctx: Ctx | None, device: int, call: str, *, live: bool = True) -> Alloc:
        if size < 0:
            raise Status(INVALID_VALUE)
        if self._used[device] + size > self._memory_per_device:
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        base = _reserve_addresses(size)
        alloc = Alloc(base, size, False, ctx, 0 if ctx is None else ctx.gen, call)
        self._dev_bases.append(base)
        self._dev_allocs.append(alloc)
        if live:
            self._used[device] += size
            self._add_live("device_memory", base, ctx, call)
        return alloc

    def _release_alloc(self, alloc: Alloc) -> None:
        alloc.freed = True
        if alloc.host:
            self._drop_live(alloc.base, alloc.ctx)
            return
        if alloc.ctx is not None:
            self._used[alloc.ctx.device] -= alloc.size
        alloc.data = None
        self._drop_live(alloc.base, alloc.ctx)

    def _alloc_for_free(self, dptr: Any, call: str) -> Alloc:
        addr = h(dptr)
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
        if alloc is None or alloc.base != addr:
            raise Status(INVALID_VALUE)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash(call, f"memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.double_release, call, f"device memory {addr:#x} freed twice", addr)
            raise Status(INVALID_VALUE)
        return alloc

    @api(1)
    def cuMemAlloc(self, bytesize: int) -> tuple[Any, ...]:
        size = int(bytesize)
        if size == 0:
            raise Status(INVALID_VALUE)
        ctx = self._require_ctx()
        alloc = self._new_device_alloc(size, ctx, ctx.device, "cuMemAlloc")
        return (SUCCESS, cb.CUdeviceptr(alloc.base))

    @api(0)
    def cuMemFree(self, dptr: Any) -> tuple[Any, ...]:
        if h(dptr) == 0:
            return OK  # freeing NULL does nothing (assumed, as free(NULL); see differential.py)
        alloc = self._alloc_for_free(dptr, "cuMemFree")
        self._check_free(alloc, "cuMemFree", None)
        self._release_alloc(alloc)
        return OK

    @api(1)
    def cuMemAllocAsync(self, bytesize: int, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuMemAllocAsync")
        if int(bytesize) == 0:
            return (SUCCESS, cb.CUdeviceptr(0))  # nothing allocated, NULL returned (as on the H200)
        alloc = self._new_device_alloc(int(bytesize), st.ctx, st.ctx.device, "cuMemAllocAsync")
        self._enqueue(st, "cuMemAllocAsync", None)
        return (SUCCESS, cb.CUdeviceptr(alloc.base))

    @api(0)
    def cuMemFreeAsync(self, dptr: Any, hStream: Any) -> tuple[Any, ...]:
        st = self._stream(hStream, "cuMemFreeAsync")
        if h(dptr) == 0:
            return OK  # freeing NULL does nothing (assumed, as for cuMemFree)
        alloc = self._alloc_for_free(dptr, "cuMemFreeAsync")
        self._check_free(alloc, "cuMemFreeAsync", st)
        self._release_alloc(alloc)
        self._enqueue(st, "cuMemFreeAsync", None)
        return OK

    def _host_alloc(self, size: int, call: str) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        if size == 0:
            return (SUCCESS, 0)  # nothing allocated, NULL returned (assumed; see differential.py)
        if size < 0:
            raise Status(INVALID_VALUE)
        if size > self._memory_per_device:
            raise Status(R.CUDA_ERROR_OUT_OF_MEMORY)
        buffer = (ctypes.c_char * size)()
        base = ctypes.addressof(buffer)
        alloc = Alloc(base, size, True, ctx, ctx.gen, call, buffer=buffer)
        bisect.insort(self._host_bases, base)
        self._host_allocs[base] = alloc
        self._add_live("host_memory", base, ctx, call)
        return (SUCCESS, base)

    @api(1)
    def cuMemAllocHost(self, bytesize: int) -> tuple[Any, ...]:
        return self._host_alloc(int(bytesize), "cuMemAllocHost")

    @api(1)
    def cuMemHostAlloc(self, bytesize: int, Flags: int) -> tuple[Any, ...]:
        if int(Flags) & ~HOST_ALLOC_FLAGS_MASK:
            raise Status(INVALID_VALUE)
        return self._host_alloc(int(bytesize), "cuMemHostAlloc")

    @api(0)
    def cuMemFreeHost(self, p: Any) -> tuple[Any, ...]:
        addr = h(p)
        if addr == 0:
            return OK  # freeing NULL does nothing (assumed, as for cuMemFree)
        alloc = self._host_allocs.get(addr)
        if alloc is None:
            raise Status(INVALID_VALUE)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash("cuMemFreeHost", f"host memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.double_release, "cuMemFreeHost", f"host memory {addr:#x} freed twice", addr)
            raise Status(INVALID_VALUE)
        self._check_free(alloc, "cuMemFreeHost", None)
        self._release_alloc(alloc)
        return OK

    @api(2)
    def cuMemGetInfo(self) -> tuple[Any, ...]:
        ctx = self._require_ctx()
        return (SUCCESS, self._memory_per_device - self._used[ctx.device], self._memory_per_device)

    # copies: each side resolves to (alloc or None, offset or address); None means foreign host memory

    def _dev_side(self, addr: int, n: int, call: str) -> tuple[Alloc, int]:
        alloc = self._dev_find(addr) if addr >= DEVICE_BASE else None
        if alloc is None:
            raise Status(INVALID_VALUE)
        if alloc.ctx is not None and not alloc.ctx.alive(alloc.gen):
            raise self._crash(call, f"memory {addr:#x} belongs to a destroyed context", addr)
        if alloc.freed:
            self._note(self.use_after_release, call, f"device memory {addr:#x} used after it was freed", addr)
            raise Status(INVALID_VALUE)
        off = addr - alloc.base
        if off + n > alloc.size:
            raise Status(INVALID_VALUE)
        return alloc, off

    def _host_addr_side(self, addr: int, n: int, call: str) -> Alloc | None:
        if addr == 0:
            raise Status(INVALID_VALUE)
        alloc = self._host_find(addr)
        if alloc is not None:
            if alloc.freed:
                self._note(self.use_after_release, call, f"host memory {addr:#x} used after it was freed", addr)
                raise Status(INVALID_VALUE)
            if addr + n > alloc.base + alloc.size:
                raise Status(INVALID_VALUE)
        return alloc

    def _host_source(self, src: Any, n: int, call: str) -> tuple[Callable[[], bytes], frozenset[int]]:
        if isinstance(src, int) or (not _is_buffer(src) and hasattr(src, "__int__")):
            addr = int(src)
            alloc = self._host_addr_side(addr, n, call)
            return (lambda: ctypes.string_at(addr, n)), (frozenset() if alloc is None else frozenset({alloc.base}))
        view = _byte_view(src)
        if len(view) < n:
            raise Status(INVALID_VALUE)
        return (lambda: bytes(view[:n])), frozenset()

    def _host_dest(self, dst: Any, n: int, call: str) -> tuple[Callable[[bytes], None], frozenset[int]]:
        if isinstance(dst, int) or (not _is_buffer(dst) and hasattr(dst, "__int__")):
            addr = int(dst)
            alloc = self._host_addr_side(addr, n, call)

            def put_addr(data: bytes) -> None:
                ctypes.memmove(addr, data, n)

            return put_addr, (frozenset() if alloc is None else frozenset({alloc.base}))
        view = _byte_view(dst)
        if view.readonly or len(view) < n:
            raise Status(INVALID_VALUE)

        def put_view(data: bytes) -> None:
            view[:n] = data

        return put_view, frozenset()

    def _copy(self, dst: Any, src: Any, n: int, stream: Any, call: str, kinds: str) -> tuple[Any, ...]:  # noqa: PLR0917
        """``kinds``: ``"hd"``, ``"dh"``, ``"dd"`` or ``"uu"`` (unified: decide by address)."""
        n = int(n)
        st = self._stream(stream, call)
        dkind, skind = kinds[0], kinds[1]
        if dkind == "u":
            dkind = "d" if h(dst) >= DEVICE_BASE else "h"
        if skind == "u":
            skind = "d" if h(src) >= DEVICE_BASE else "h"
        refs: set[int] = set()
        if skind == "d":
            salloc, soff = self._dev_side(h(src), n, call)
            refs.add(salloc.base)

            def get() -> bytes:
                return salloc.read(soff, n)

            source = get
        else:
            source, srefs = self._host_source(src, n, call)
            refs |= srefs
        if dkind == "d":
            dalloc, doff = self._dev_side(h(dst), n, call)
            refs.add(dalloc.base)

            def put(data: bytes) -> None:
                dalloc.write(doff, data)

            sink: Callable[[bytes], None] = put
        else:
            sink, drefs = self._host_dest(dst, n, call)
            refs |= drefs
        checks = [self._dev_find(r) or self._host_allocs.get(r) for r in refs]

        def run() -> None:
            for alloc in checks:
                if alloc is not None and alloc.freed:
                    self._note(self.dangling, call, f"{call} executed on freed memory {alloc.base:#x}", alloc.base)
                    return
            sink(source())

        if stream is None:
            run()
        else:
            self._enqueue(st, call, run, frozenset(refs))
        return OK

    @api(0)
    def cuMemcpyHtoD(self, dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcHost, ByteCount, None, "cuMemcpyHtoD", "dh")

    @api(0)
    def cuMemcpyDtoH(self, dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dstHost, srcDevice, ByteCount, None, "cuMemcpyDtoH", "hd")

    @api(0)
    def cuMemcpyDtoD(self, dstDevice: Any, srcDevice: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcDevice, ByteCount, None, "cuMemcpyDtoD", "dd")

    @api(0)
    def cuMemcpy(self, dst: Any, src: Any, ByteCount: int) -> tuple[Any, ...]:
        return self._copy(dst, src, ByteCount, None, "cuMemcpy", "uu")

    @api(0)
    def cuMemcpyHtoDAsync(self, dstDevice: Any, srcHost: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcHost, ByteCount, _Strm(hStream), "cuMemcpyHtoDAsync", "dh")

    @api(0)
    def cuMemcpyDtoHAsync(self, dstHost: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dstHost, srcDevice, ByteCount, _Strm(hStream), "cuMemcpyDtoHAsync", "hd")

    @api(0)
    def cuMemcpyDtoDAsync(self, dstDevice: Any, srcDevice: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dstDevice, srcDevice, ByteCount, _Strm(hStream), "cuMemcpyDtoDAsync", "dd")

    @api(0)
    def cuMemcpyAsync(self, dst: Any, src: Any, ByteCount: int, hStream: Any) -> tuple[Any, ...]:
        return self._copy(dst, src, ByteCount, _Strm(hStream), "cuMemcpyAsync", "uu")

    def _memset(self, dst: Any, pattern: bytes, count: int, stream: Any, call: str) -> tuple[Any, ...]:
        count = int(count)
        st = self._stream(stream, call)
        addr = h(dst)
        if addr % len(pattern):
            raise Status(INVALID_VALUE)
        alloc, off = self._dev_side(addr, count * len(pattern), call)
        payload = pattern * count

        def run() -> None:
            if alloc.freed:
                self._note(self.dangling, call, f"{call} executed on freed memory {alloc.base:#x}", alloc.base)
                return
            alloc.write(off, payload)

        if stream is None:
            run()
        else:
            self._enqueue(st, call, run, frozenset({alloc.base}))
        return OK

    @api(0)
    def cuMemsetD8(self, dstDevice: Any, uc: int, N: int) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<B", int(uc) & 0xFF), N, None, "cuMemsetD8")

    @api(0)
    def cuMemsetD16(self, dstDevice: Any, us: int, N: int) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<H", int(us) & 0xFFFF), N, None, "cuMemsetD16")

    @api(0)
    def cuMemsetD32(self, dstDevice: Any, ui: int, N: int) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<I", int(ui) & 0xFFFFFFFF), N, None, "cuMemsetD32")

    @api(0)
    def cuMemsetD8Async(self, dstDevice: Any, uc: int, N: int, hStream: Any) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<B", int(uc) & 0xFF), N, _Strm(hStream), "cuMemsetD8Async")

    @api(0)
    def cuMemsetD16Async(self, dstDevice: Any, us: int, N: int, hStream: Any) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<H", int(us) & 0xFFFF), N, _Strm(hStream), "cuMemsetD16Async")

    @api(0)
    def cuMemsetD32Async(self, dstDevice: Any, ui: int, N: int, hStream: Any) -> tuple[Any, ...]:
        return self._memset(dstDevice, struct.pack("<I", int(ui) & 0xFFFFFFFF), N, _Strm(hStream), "cuMemsetD32Async")


class _Strm:
    """A stream argument of an async call (distinguishes "stream 0" from "no stream")."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __int__(self) -> int:
        return h(self.value)
