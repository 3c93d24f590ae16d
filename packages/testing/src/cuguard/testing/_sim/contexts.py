"""Contexts of the simulated driver: primary and created contexts, the thread's context stack.

:class:`SimContexts` builds on :class:`~cuguard.testing._sim.streams.SimStreams` (a context's
teardown retires its streams' work).
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as cb

from cuguard.testing._bindings import CTX_CREATE_PARAMS
from cuguard.testing._sim.base import (
    DEVICE_BASE,
    INVALID_CONTEXT,
    INVALID_VALUE,
    OK,
    SUCCESS,
    R,
    Status,
    api,
    h,
)
from cuguard.testing._sim.facts import context_flags_valid
from cuguard.testing._sim.state import Ctx, Stream
from cuguard.testing._sim.streams import SimStreams

__all__ = ["SimContexts"]


class SimContexts(SimStreams):
    """Retaining, creating, destroying and switching contexts, and context queries."""

    def _activate(self, ctx: Ctx) -> None:
        ctx.destroyed = False
        ctx.gen += 1
        ctx.null = Stream(self._handle(), 0, ctx, ctx.gen)
        self._stream_keys[ctx.null.key] = ctx.null

    def _teardown(self, ctx: Ctx) -> None:
        """The context goes away with everything it owned (not leaks: the driver released them)."""
        for handle in list(ctx.owned):
            self._live.pop(handle, None)
            alloc = self._dev_find(handle) if handle >= DEVICE_BASE else self._host_allocs.get(handle)
            if alloc is not None and alloc.ctx is ctx and not alloc.freed:
                if not alloc.host:
                    self._used[ctx.device] -= alloc.size
                alloc.data = None
        ctx.owned.clear()
        for st in list(self._busy):
            if st.ctx is ctx:
                self._retire(st)
        ctx.destroyed = True
        ctx.null = None

    def _ctx_arg(self, ctx: Any, call: str) -> Ctx:
        handle = h(ctx)
        found = self._ctxs.get(handle)
        if found is None:
            raise Status(INVALID_CONTEXT)
        return found

    @api(1)
    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, ...]:
        ctx = self._primary[self._device(dev)]
        if ctx.refcount == 0:
            self._activate(ctx)
        ctx.reset = False
        ctx.refcount += 1
        self._add_live("context", ctx.handle, None, "cuDevicePrimaryCtxRetain", ctx.refcount)
        return (SUCCESS, cb.CUcontext(ctx.handle))

    @api(0, locked=False)
    def cuDevicePrimaryCtxRelease(self, dev: Any) -> tuple[Any, ...]:
        with self._lock:
            ctx = self._primary[self._device(dev)]
            if ctx.refcount == 0:
                self._note(
                    self.double_release, "cuDevicePrimaryCtxRelease", "primary context is not retained", ctx.handle
                )
                raise Status(INVALID_CONTEXT)
            last = ctx.refcount == 1
        if last:
            self._worker.drain()
        with self._lock:
            ctx.refcount -= 1
            if ctx.refcount == 0:
                self._drop_live(ctx.handle)
                self._teardown(ctx)
                ctx.flags = 0  # the H200 forgets the flags with the context (differential scenario)
            else:
                self._add_live("context", ctx.handle, None, "cuDevicePrimaryCtxRetain", ctx.refcount)
        return OK

    def _create_context(self, dev: Any, flags: int = 0) -> tuple[Any, ...]:
        ordinal = self._device(dev)
        if not context_flags_valid(int(flags)):
            raise Status(INVALID_VALUE)
        ctx = Ctx(self._handle(), ordinal, False, "cuCtxCreate", gen=0, destroyed=True, flags=int(flags))
        self._activate(ctx)
        self._ctxs[ctx.handle] = ctx
        self._add_live("context", ctx.handle, None, "cuCtxCreate")
        self._stack().append(ctx)
        return (SUCCESS, cb.CUcontext(ctx.handle))

    # The signature of the installed cuda-bindings (see cuguard.testing._bindings).
    if CTX_CREATE_PARAMS:

        @api(1)
        def cuCtxCreate(self, ctxCreateParams: Any, flags: int, dev: Any) -> tuple[Any, ...]:
            return self._create_context(dev, flags)

    else:

        @api(1)
        def cuCtxCreate(self, flags: int, dev: Any) -> tuple[Any, ...]:  # type: ignore[misc]  # 12.x
            return self._create_context(dev, flags)

    @api(0, locked=False)
    def cuCtxDestroy(self, ctx: Any) -> tuple[Any, ...]:
        with self._lock:
            target = self._ctx_arg(ctx, "cuCtxDestroy")
            if target.primary:
                raise Status(INVALID_CONTEXT)
            if target.destroyed:
                self._note(self.double_release, "cuCtxDestroy", "context destroyed twice", target.handle)
                raise Status(R.CUDA_ERROR_CONTEXT_IS_DESTROYED)
        self._worker.drain()
        with self._lock:
            if target.destroyed:
                raise Status(R.CUDA_ERROR_CONTEXT_IS_DESTROYED)
            self._drop_live(target.handle)
            self._teardown(target)
            # The driver pops a destroyed current context off the thread's
            # stack (as cuCtxPopCurrent would): the context below becomes
            # current, or none (checked on an H200 in the differential run).
            stack = self._stack()
            if stack and stack[-1] is target:
                stack.pop()
        return OK

    @api(1)
    def cuCtxGetCurrent(self) -> tuple[Any, ...]:
        ctx = self._current()
        return (SUCCESS, cb.CUcontext(0 if ctx is None else ctx.handle))

    def _switch_target(self, ctx: Any, call: str) -> Ctx:
        target = self._ctx_arg(ctx, call)
        if target.destroyed:
            if not target.primary:
                raise self._crash(call, f"switch to destroyed context {target.handle:#x}", target.handle)
            self._note(
                self.misuse,
                call,
                f"switch to primary context {target.handle:#x} that is not retained",
                target.handle,
            )
        return target

    @api(0)
    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any, ...]:
        stack = self._stack()
        if h(ctx) == 0:
            if stack:
                stack.pop()
            return OK
        target = self._switch_target(ctx, "cuCtxSetCurrent")
        if stack:
            stack[-1] = target
        else:
            stack.append(target)
        return OK

    def cuguardRestoreContext(self, ctx: Any) -> tuple[Any, ...]:
        """The context layer's restore of a caller's context: ``cuCtxSetCurrent``."""
        result: tuple[Any, ...] = self.cuCtxSetCurrent(ctx)
        return result

    @api(0)
    def cuCtxPushCurrent(self, ctx: Any) -> tuple[Any, ...]:
        if h(ctx) == 0:
            raise Status(INVALID_VALUE)
        self._stack().append(self._switch_target(ctx, "cuCtxPushCurrent"))
        return OK

    @api(1)
    def cuCtxPopCurrent(self) -> tuple[Any, ...]:
        stack = self._stack()
        if not stack:
            raise Status(INVALID_CONTEXT)
        ctx = stack.pop()
        return (SUCCESS, cb.CUcontext(0 if ctx is None else ctx.handle))

    @api(1)
    def cuCtxGetDevice(self) -> tuple[Any, ...]:
        return (SUCCESS, cb.CUdevice(self._require_ctx().device))

    @api(1)
    def cuCtxGetApiVersion(self, ctx: Any) -> tuple[Any, ...]:
        target = self._current() if h(ctx) == 0 else self._ctx_arg(ctx, "cuCtxGetApiVersion")
        if target is None:
            raise Status(INVALID_CONTEXT)
        if target.destroyed:
            raise Status(R.CUDA_ERROR_CONTEXT_IS_DESTROYED)
        return (SUCCESS, 3020)

    @api(2)
    def cuCtxGetStreamPriorityRange(self) -> tuple[Any, ...]:
        self._require_ctx()  # CUDA_ERROR_INVALID_CONTEXT with none current, as on the H200
        return (SUCCESS, 0, -5)

    @api(0, locked=False)
    def cuCtxSynchronize(self) -> tuple[Any, ...]:
        with self._lock:
            ctx = self._require_ctx()
        self._worker.drain()
        with self._lock:
            for st in list(self._busy):
                if st.ctx is ctx:
                    self._retire(st)
            if self._poison is not None:
                return (self._poison,)
        return OK
