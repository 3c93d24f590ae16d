"""The sweep's scenarios of the memory resources (see :mod:`cuguard.sweeps._failpoints.registry`).

Each function returns the scenarios of one group of resources; ``registry._build()``
adds them. :data:`NO_DRIVER_CALL_MEMORY` lists the public callables of these
resources that make no driver call, with the reason (merged into
``registry.NO_DRIVER_CALL``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from cuguard.sweeps._failpoints.registry_base import (
    SIZE,
    Env,
    Scenario,
    _ctx_probe,
    adder,
    dev_fresh,
    dev_only,
    with_stream,
)

__all__ = ["NO_DRIVER_CALL_MEMORY", "pool_scenarios", "view_scenarios", "vmm_scenarios"]

_R = "resources."
_NO_CALL_RESOURCE = "returns what the object recorded at creation"


def _release(attr: str) -> Callable[[Env, Any], None]:
    import gc

    def op(env: Env, s: Any) -> None:
        setattr(s, attr, None)
        gc.collect()

    return op


# --- virtual memory, managed memory, legacy pinned memory ------------------------------------


def _with_vmm(env: Env) -> SimpleNamespace:
    s = dev_only(env)
    s.mr = env.resources.VirtualMemoryResource(s.dev)
    return s


def _with_vmm_buffer(env: Env, *, own: bool = True) -> SimpleNamespace:
    s = _with_vmm(env)
    s.buf = s.mr.allocate(SIZE)
    if own:
        env.own(s.buf)
    s.data = bytes(range(SIZE))
    s.buf.copy_from(s.data)
    return s


def _unowned(setup: Callable[..., SimpleNamespace]) -> Callable[[Env], SimpleNamespace]:
    """``setup`` whose buffer only the scenario holds (so that dropping it collects it)."""
    return lambda env: setup(env, own=False)


def _hinted_vmm_buffer(env: Env) -> SimpleNamespace:
    """A buffer on a simulator that follows address hints, so that it can grow in place (an H200 does not)."""
    env.sim.follow_address_hints = True
    return _with_vmm_buffer(env)


def _blocked_vmm_buffer(env: Env) -> SimpleNamespace:
    """A buffer whose next addresses are taken, so that growing it must move it, on any driver.

    The addresses right after the buffer are asked for (a growth's size, at that hint) until the
    driver gives them or its answers pass them by: a driver that follows hints (the simulator
    when told to) gives them at once; one that does not (an H200, and the simulator by default)
    picks addresses of its own, and each reservation kept here takes the place a growth would
    get next. Either way no growth can get the addresses after the buffer: every case moves it.
    The reservations are freed after the case.
    """
    s = _with_vmm_buffer(env)
    drv = env.errors.driver
    g = s.mr.granularity
    end = s.buf.ptr + g
    taken: list[Any] = []

    def unblock() -> None:
        while taken:
            (err,) = drv.cuMemAddressFree(taken[-1], g)
            if err:
                env.errors.raise_status(err, "cuMemAddressFree")
            taken.pop()

    env.own(unblock)
    previous: int | None = None
    for _ in range(_BLOCK_TRIES):
        err, va = drv.cuMemAddressReserve(g, 0, end, 0)
        if err:
            env.errors.raise_status(err, "cuMemAddressReserve")
        taken.append(va)
        here = int(va)
        if here == end or (previous is not None and _passed(end, previous, here)):
            return s
        previous = here
    raise RuntimeError(f"the addresses after the buffer stayed free after {_BLOCK_TRIES} reservations")


#: How many reservations :func:`_blocked_vmm_buffer` makes at most before it gives up.
_BLOCK_TRIES = 64


def _passed(end: int, previous: int, here: int) -> bool:
    """Whether a driver whose reservations went from ``previous`` to ``here`` will not give ``end`` next.

    Its answers crossed ``end``, or moved away from it on the same side.
    """
    if (previous < end) != (here < end):
        return True
    return abs(here - end) > abs(previous - end)


def _vmm_state(env: Env, s: Any) -> Any:
    out = bytearray(s.buf.size)
    s.buf.copy_to(out)
    return (s.buf.ptr, s.buf.size, s.mr.held, bytes(out[:SIZE]))


def _vmm_probe(env: Env, s: Any) -> None:
    s.buf.fill(3)
    out = bytearray(s.buf.size)
    s.buf.copy_to(out)
    assert out == b"\x03" * s.buf.size, "the buffer does not hold what was written"
    with s.mr.allocate(SIZE) as other:
        other.copy_from(bytes(SIZE))


def _grow(env: Env, s: Any) -> Any:
    return s.mr.modify_allocation(s.buf, 2 * s.mr.granularity)


def _with_managed(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.mr = env.resources.ManagedMemoryResource(s.dev)
    return s


def _with_managed_buffer(env: Env, *, own: bool = True) -> SimpleNamespace:
    s = _with_managed(env)
    s.buf = s.mr.allocate(SIZE)
    if own:
        env.own(s.buf)
    return s


def _managed_probe(env: Env, s: Any) -> None:
    s.buf.fill(2)
    s.mr.prefetch(s.buf, s.dev, s.stream)
    s.stream.sync()


def _with_legacy(env: Env) -> SimpleNamespace:
    s = dev_only(env)
    s.mr = env.resources.LegacyPinnedMemoryResource(s.dev)
    return s


def _with_legacy_buffer(env: Env, *, own: bool = True) -> SimpleNamespace:
    s = _with_legacy(env)
    s.buf = s.mr.allocate(SIZE)
    if own:
        env.own(s.buf)
    return s


def _legacy_probe(env: Env, s: Any) -> None:
    with s.mr.allocate(SIZE) as other, s.dev.allocate(SIZE) as dev_buf:
        dev_buf.copy_from(other)


def vmm_scenarios() -> list[Scenario]:
    """VirtualMemoryResource, ManagedMemoryResource and LegacyPinnedMemoryResource."""
    out: list[Scenario] = []
    add = adder(out)
    V, M, L = _R + "VirtualMemoryResource", _R + "ManagedMemoryResource", _R + "LegacyPinnedMemoryResource"

    add(V + "()", dev_only, lambda e, s: e.resources.VirtualMemoryResource(s.dev))
    add(V + ".allocate", _with_vmm, lambda e, s: e.own(s.mr.allocate(SIZE)), state=lambda e, s: s.mr.held)
    add(
        V + ".modify_allocation[in place]",
        _hinted_vmm_buffer,
        _grow,
        covers=(V + ".modify_allocation",),
        state=_vmm_state,
        probe=_vmm_probe,
        real=False,  # in place needs a driver that follows address hints: an H200 does not
    )
    add(
        V + ".modify_allocation[elsewhere]",
        _blocked_vmm_buffer,
        _grow,
        covers=(V + ".modify_allocation",),
        state=_vmm_state,
        probe=_vmm_probe,
    )
    add(V + ".deallocate", _with_vmm_buffer, lambda e, s: s.mr.deallocate(s.buf), releases=True)
    add(
        _R + "Buffer.close[virtual]",
        _with_vmm_buffer,
        lambda e, s: s.buf.close(),
        covers=(_R + "Buffer.close",),
        releases=True,
    )

    def grown(env: Env) -> SimpleNamespace:
        # Grown by moving (its next addresses taken): one path on every driver, whether or not it
        # follows address hints, so the close makes the same calls in every case.
        s = _blocked_vmm_buffer(env)
        s.mr.modify_allocation(s.buf, 3 * s.mr.granularity)
        return s

    add(
        _R + "Buffer.close[virtual, grown]",
        grown,
        lambda e, s: s.buf.close(),
        covers=(_R + "Buffer.close",),
        releases=True,
    )
    add(
        _R + "Buffer.__del__[virtual]",
        _unowned(_with_vmm_buffer),
        _release("buf"),
        covers=(_R + "Buffer.__del__",),
        kind="warn",
        releases=True,
    )

    add(M + "()", dev_only, lambda e, s: e.resources.ManagedMemoryResource(s.dev.ordinal))
    add(M + ".allocate", _with_managed, lambda e, s: e.own(s.mr.allocate(SIZE)), state=lambda e, s: s.mr.held)
    add(M + ".prefetch", _with_managed_buffer, lambda e, s: s.mr.prefetch(s.buf, s.dev, s.stream), probe=_managed_probe)
    add(
        M + ".prefetch[host]",
        _with_managed_buffer,
        lambda e, s: s.mr.prefetch(s.buf, "host", s.stream),
        covers=(M + ".prefetch",),
        probe=_managed_probe,
    )
    add(
        M + ".advise",
        _with_managed_buffer,
        lambda e, s: s.mr.advise(s.buf, "set_preferred_location", s.dev),
        probe=_managed_probe,
    )
    add(
        M + ".advise[no location]",
        _with_managed_buffer,
        lambda e, s: s.mr.advise(s.buf, "set_read_mostly"),
        covers=(M + ".advise",),
        probe=_managed_probe,
    )
    add(M + ".deallocate", _with_managed_buffer, lambda e, s: s.mr.deallocate(s.buf), releases=True)
    add(
        _R + "Buffer.__del__[managed]",
        _unowned(_with_managed_buffer),
        _release("buf"),
        covers=(_R + "Buffer.__del__",),
        kind="warn",
        releases=True,
    )

    add(L + "()", dev_only, lambda e, s: e.resources.LegacyPinnedMemoryResource())
    add(
        L + ".allocate",
        _with_legacy,
        lambda e, s: e.own(s.mr.allocate(SIZE)),
        state=lambda e, s: s.mr.held,
        probe=_legacy_probe,
    )
    add(L + ".deallocate", _with_legacy_buffer, lambda e, s: s.mr.deallocate(s.buf), releases=True)
    add(
        _R + "PinnedBuffer.__del__[legacy]",
        _unowned(_with_legacy_buffer),
        _release("buf"),
        covers=(_R + "PinnedBuffer.__del__",),
        kind="warn",
        releases=True,
    )
    return out


NO_DRIVER_CALL_MEMORY: dict[str, str] = {
    _R + "VirtualMemoryResourceOptions()": "validates and stores options: no driver call",
}
for _cls in ("VirtualMemoryResource", "ManagedMemoryResource", "LegacyPinnedMemoryResource"):
    for _attr in ("device_id", "is_device_accessible", "is_host_accessible", "held", "buffers", "leaked"):
        NO_DRIVER_CALL_MEMORY[f"{_R}{_cls}.{_attr}"] = "reads what the resource recorded: no driver call"
for _attr in ("granularity", "options"):
    NO_DRIVER_CALL_MEMORY[f"{_R}VirtualMemoryResource.{_attr}"] = _NO_CALL_RESOURCE


# --- typed views -------------------------------------------------------------------------------
#
# A view makes driver calls only to order a producer's work before the consumer's stream: a wait
# (an event recorded on the producer's stream, waited for, destroyed) or a synchronization.


def _with_ordered_buffer(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.other = env.own(s.dev.create_stream())
    s.buf = env.own(s.dev.allocate(SIZE, s.stream))  # stream-ordered: its exports name its stream
    return s


def _views_probe(env: Env, s: Any) -> None:
    s.stream.sync()
    s.other.sync()
    s.buf.fill(1, s.other)
    s.other.sync()


def view_scenarios() -> list[Scenario]:
    """Typed views (``StridedMemoryView``) of a stream-ordered buffer, ordered before another stream."""
    out: list[Scenario] = []
    add = adder(out)
    V = _R + "StridedMemoryView"
    add(
        V + ".from_dlpack",
        _with_ordered_buffer,
        lambda e, s: e.resources.StridedMemoryView.from_dlpack(s.buf, s.other),  # the buffer's export waits
        covers=(V + ".from_dlpack", V + ".from_any_interface", V + "()"),
        probe=_views_probe,
    )
    add(
        V + ".from_cuda_array_interface",
        _with_ordered_buffer,
        lambda e, s: e.resources.StridedMemoryView.from_cuda_array_interface(s.buf, s.other, device=s.dev),
        probe=_views_probe,
    )
    add(
        V + ".from_cuda_array_interface[synchronized]",
        _with_ordered_buffer,
        lambda e, s: e.resources.StridedMemoryView.from_cuda_array_interface(s.buf, device=s.dev),
        covers=(V + ".from_cuda_array_interface",),
        probe=_views_probe,
    )
    add(
        V + ".from_buffer",
        _with_ordered_buffer,
        lambda e, s: e.resources.StridedMemoryView.from_buffer(s.buf, (SIZE // 4,), dtype="float32").__dlpack__(
            stream=int(s.other.handle)  # a consumer on another stream waits for the buffer's
        ),
        probe=_views_probe,
    )
    return out


for _attr in (
    "device_id",
    "dtype",
    "exporting_obj",
    "is_device_accessible",
    "ptr",
    "readonly",
    "shape",
    "size",
    "stream_ptr",
    "strides",
):
    NO_DRIVER_CALL_MEMORY[f"{_R}StridedMemoryView.{_attr}"] = "reads what the view recorded: no driver call"
NO_DRIVER_CALL_MEMORY[_R + "args_viewable_as_strided_memory"] = (
    "wraps a function: no driver call (the views its arguments make are swept as StridedMemoryView's class methods)"
)


# --- memory pools, pinned memory pools, IPC ----------------------------------------------------
#
# Scenarios that import a pool or a buffer in the process that exported it run on the
# simulator only (real=False): the real driver's IPC is made for two processes (the
# two-process round trip is a test of its own, packages/resources/tests/test_ipc.py).

R = _R
_NO_CALL = _NO_CALL_RESOURCE
_release_obj = _release("obj")


def _options(env: Env, **kw: Any) -> Any:
    return env.resources.DeviceMemoryResourceOptions(**kw)


def with_pool(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.mr = env.own(env.resources.DeviceMemoryResource(s.dev, _options(env)))
    s.host = bytearray(SIZE)
    return s


def with_pool_buffers(env: Env) -> SimpleNamespace:
    s = with_pool(env)
    s.buf = env.own(s.mr.allocate(SIZE, s.stream))
    s.sync_buf = env.own(s.mr.allocate(SIZE))
    return s


def with_ipc_pool(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.mr = env.own(env.resources.DeviceMemoryResource(s.dev, _options(env, ipc_enabled=True)))
    s.buf = env.own(s.mr.allocate(SIZE, s.stream))
    s.host = bytearray(SIZE)
    s.stream.sync()
    return s


def with_pool_buffers_and_stream(env: Env) -> SimpleNamespace:
    s = with_pool_buffers(env)
    s.other = env.own(s.dev.create_stream())
    return s


def with_exported_pool(env: Env) -> SimpleNamespace:
    s = with_ipc_pool(env)
    s.alloc_handle = env.own(s.mr.get_allocation_handle())
    return s


def with_imported_pool(env: Env) -> SimpleNamespace:
    s = with_exported_pool(env)
    s.imr = env.own(env.resources.DeviceMemoryResource.from_allocation_handle(s.dev, s.alloc_handle))
    s.desc = s.buf.get_ipc_descriptor()
    return s


def with_imported_buffer(env: Env) -> SimpleNamespace:
    s = with_imported_pool(env)
    s.ibuf = env.own(env.resources.Buffer.from_ipc_descriptor(s.imr, s.desc, s.stream))
    return s


def with_pinned_pool(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.pmr = env.own(env.resources.PinnedMemoryResource(s.dev))
    s.pbuf = env.own(s.pmr.allocate(SIZE, s.stream))
    s.stream.sync()
    return s


def with_ipc_event(env: Env) -> SimpleNamespace:
    s = with_stream(env)
    s.event = env.own(s.dev.create_event(ipc_enabled=True))
    return s


def with_foreign_event_descriptor(env: Env) -> SimpleNamespace:
    """An IPC event descriptor the simulator treats as another process's (it refuses its own)."""
    s = with_ipc_event(env)
    with env.sim.as_other_process():
        s.desc = s.event.get_ipc_descriptor()
    return s


def _pool_probe(env: Env, s: Any) -> None:
    """The pool still allocates and its memory works (G3)."""
    buf = s.mr.allocate(SIZE, s.stream)
    buf.fill(7, s.stream)
    buf.copy_to(s.host, s.stream)
    s.stream.sync()
    buf.close()
    assert s.host == bytearray(b"\x07" * SIZE)


def _pool_state(env: Env, s: Any) -> Any:
    return (s.mr.held, len(s.mr.buffers))


def _pinned_probe(env: Env, s: Any) -> None:
    buf = s.pmr.allocate(SIZE, s.stream)
    s.stream.sync()
    buf.close()


def _attribute_get(name: str) -> Callable[[Env, Any], Any]:
    def op(env: Env, s: Any) -> Any:
        return getattr(s.mr.attributes, name)

    return op


def _attribute_set(name: str, value: Any) -> Callable[[Env, Any], None]:
    def op(env: Env, s: Any) -> None:
        setattr(s.mr.attributes, name, value)

    return op


def _attribute_state(name: str) -> Callable[[Env, Any], Any]:
    def state(env: Env, s: Any) -> Any:
        return getattr(s.mr.attributes, name)

    return state


def _device_pool_scenarios() -> list[Scenario]:
    """DeviceMemoryResource: construction, allocation, trimming, release, export and import."""
    out: list[Scenario] = []
    add = adder(out)
    D = R + "DeviceMemoryResource"
    pk: dict[str, Any] = {"probe": _pool_probe}
    add(
        D + "()[current]",
        with_stream,
        lambda e, s: e.own(e.resources.DeviceMemoryResource(s.dev)),
        covers=(D + "()",),
        probe=_ctx_probe,
    )
    add(
        D + "()[options]",
        with_stream,
        lambda e, s: e.own(
            e.resources.DeviceMemoryResource(
                s.dev,
                _options(
                    e,
                    max_size=1 << 24,
                    release_threshold=1 << 20,
                    reuse_follow_event_dependencies=False,
                    reuse_allow_opportunistic=False,
                    reuse_allow_internal_dependencies=False,
                ),
            )
        ),
        covers=(D + "()",),
        probe=_ctx_probe,
    )
    add(
        D + "()[ipc]",
        with_stream,
        lambda e, s: e.own(e.resources.DeviceMemoryResource(s.dev, _options(e, ipc_enabled=True))),
        covers=(D + "()",),
        probe=_ctx_probe,
    )
    add(D + ".allocate", with_pool, lambda e, s: e.own(s.mr.allocate(SIZE, s.stream)), state=_pool_state, **pk)
    add(
        D + ".allocate[sync]",
        with_pool,
        lambda e, s: e.own(s.mr.allocate(SIZE)),
        covers=(D + ".allocate",),
        state=_pool_state,
        **pk,
    )
    add(D + ".deallocate", with_pool_buffers, lambda e, s: s.mr.deallocate(s.buf), releases=True, **pk)
    add(
        D + ".deallocate[sync]",
        with_pool_buffers,
        lambda e, s: s.mr.deallocate(s.sync_buf),
        covers=(D + ".deallocate",),
        releases=True,
        **pk,
    )
    add(D + ".trim", with_pool_buffers, lambda e, s: s.mr.trim(0), **pk)
    add(D + ".close", with_pool, lambda e, s: s.mr.close(), releases=True, probe=_ctx_probe)

    def close_then_free(env: Env, s: Any) -> None:
        s.mr.close()  # buffers are allocated: the pool is only closed, and destroyed after the last
        s.buf.close()
        s.sync_buf.close()

    add(
        D + ".close[buffers allocated]",
        with_pool_buffers,
        close_then_free,
        covers=(D + ".close",),
        releases=True,
        probe=_ctx_probe,
    )
    add(D + ".__exit__", with_pool, lambda e, s: s.mr.__exit__(None, None, None), releases=True)

    def detached_pool(env: Env) -> SimpleNamespace:
        s = with_stream(env)
        s.obj = env.resources.DeviceMemoryResource(s.dev, _options(env))
        return s

    add(D + ".__del__", detached_pool, _release_obj, kind="warn", releases=True)
    add(D + ".get_allocation_handle", with_ipc_pool, lambda e, s: e.own(s.mr.get_allocation_handle()), **pk)
    add(
        D + ".from_allocation_handle",
        with_exported_pool,
        lambda e, s: e.own(e.resources.DeviceMemoryResource.from_allocation_handle(s.dev, s.alloc_handle)),
        real=False,
        **pk,
    )
    return out


def _pool_attribute_scenarios() -> list[Scenario]:
    """A pool's attributes: each read and each write."""
    out: list[Scenario] = []
    add = adder(out)
    pk: dict[str, Any] = {"probe": _pool_probe}
    A = R + "MemoryPoolAttributes."
    for name in (
        "release_threshold",
        "reuse_follow_event_dependencies",
        "reuse_allow_opportunistic",
        "reuse_allow_internal_dependencies",
        "reserved_mem_current",
        "reserved_mem_high",
        "used_mem_current",
        "used_mem_high",
    ):
        add(A + name, with_pool_buffers, _attribute_get(name), **pk)
    for name, value in (
        ("release_threshold", 1 << 20),
        ("reuse_follow_event_dependencies", False),
        ("reuse_allow_opportunistic", False),
        ("reuse_allow_internal_dependencies", False),
    ):
        add(
            f"{A}{name}[set]",
            with_pool_buffers,
            _attribute_set(name, value),
            covers=(A + name,),
            state=_attribute_state(name),
            **pk,
        )
    add(A + "reset_high_watermarks", with_pool_buffers, lambda e, s: s.mr.attributes.reset_high_watermarks(), **pk)
    return out


def _pool_buffer_scenarios() -> list[Scenario]:
    """Buffers of a pool: their release, export and import."""
    out: list[Scenario] = []
    add = adder(out)
    pk: dict[str, Any] = {"probe": _pool_probe}
    B = R + "Buffer."
    add(
        B + "close[pool]",
        with_pool_buffers,
        lambda e, s: s.buf.close(),
        covers=(B + "close",),
        releases=True,
        **pk,
    )
    add(
        B + "close[pool, other stream]",
        with_pool_buffers_and_stream,
        lambda e, s: s.buf.close(s.other),
        covers=(B + "close",),
        releases=True,
        **pk,
    )
    add(
        B + "close[pool, sync]",
        with_pool_buffers,
        lambda e, s: s.sync_buf.close(),
        covers=(B + "close",),
        releases=True,
        **pk,
    )

    def detached_pool_buffer(env: Env) -> SimpleNamespace:
        s = with_pool(env)
        s.obj = s.mr.allocate(SIZE, s.stream)
        return s

    add(B + "__del__[pool]", detached_pool_buffer, _release_obj, covers=(B + "__del__",), kind="warn", releases=True)
    # the pool is shared first: the driver exports pointers of shared pools only
    add(B + "get_ipc_descriptor", with_exported_pool, lambda e, s: s.buf.get_ipc_descriptor(), **pk)

    def ipc_buffer_of_a_closed_stream(env: Env) -> SimpleNamespace:
        """A buffer allocated on a stream that was closed since: the export waits for the context."""
        s = with_exported_pool(env)
        gone = s.dev.create_stream()
        s.buf = env.own(s.mr.allocate(SIZE, gone))
        gone.close()
        return s

    add(
        B + "get_ipc_descriptor[stream closed]",
        ipc_buffer_of_a_closed_stream,
        lambda e, s: s.buf.get_ipc_descriptor(),
        covers=(B + "get_ipc_descriptor",),
        **pk,
    )
    add(
        B + "from_ipc_descriptor",
        with_imported_pool,
        lambda e, s: e.own(e.resources.Buffer.from_ipc_descriptor(s.imr, s.desc, s.stream)),
        real=False,
        **pk,
    )
    add(
        B + "from_ipc_descriptor[sync]",
        with_imported_pool,
        lambda e, s: e.own(e.resources.Buffer.from_ipc_descriptor(s.imr, s.desc)),
        covers=(B + "from_ipc_descriptor",),
        real=False,
        **pk,
    )
    add(
        B + "close[imported]",
        with_imported_buffer,
        lambda e, s: s.ibuf.close(),
        covers=(B + "close",),
        releases=True,
        real=False,
        **pk,
    )
    return out


def _pinned_pool_scenarios() -> list[Scenario]:
    """PinnedMemoryResource, and IPC events."""
    out: list[Scenario] = []
    add = adder(out)
    P = R + "PinnedMemoryResource"
    pp: dict[str, Any] = {"probe": _pinned_probe}
    add(P + "()", with_stream, lambda e, s: e.own(e.resources.PinnedMemoryResource(s.dev)), probe=_ctx_probe)
    add(
        P + ".allocate",
        with_pinned_pool,
        lambda e, s: e.own(s.pmr.allocate(SIZE, s.stream)),
        state=lambda e, s: s.pmr.held,
        **pp,
    )
    add(
        P + ".allocate[sync]",
        with_pinned_pool,
        lambda e, s: e.own(s.pmr.allocate(SIZE)),
        covers=(P + ".allocate",),
        state=lambda e, s: s.pmr.held,
        **pp,
    )
    add(P + ".deallocate", with_pinned_pool, lambda e, s: s.pmr.deallocate(s.pbuf), releases=True, **pp)
    add(P + ".trim", with_pinned_pool, lambda e, s: s.pmr.trim(), **pp)
    add(P + ".close", with_pinned_pool, lambda e, s: s.pmr.close(), releases=True, probe=_ctx_probe)
    add(
        R + "PinnedBuffer.close[pool]",
        with_pinned_pool,
        lambda e, s: s.pbuf.close(s.stream),
        covers=(R + "PinnedBuffer.close",),
        releases=True,
        **pp,
    )

    def detached_pinned_pool(env: Env) -> SimpleNamespace:
        s = with_stream(env)
        s.obj = env.resources.PinnedMemoryResource(s.dev)
        return s

    add(P + ".__del__", detached_pinned_pool, _release_obj, kind="warn", releases=True)

    # IPC events
    add(
        R + "Device.create_event[ipc]",
        with_stream,
        lambda e, s: e.own(s.dev.create_event(ipc_enabled=True)),
        covers=(R + "Device.create_event",),
        probe=_ctx_probe,
    )
    add(R + "Event.get_ipc_descriptor", with_ipc_event, lambda e, s: s.event.get_ipc_descriptor(), probe=_ctx_probe)
    add(
        R + "Event.from_ipc_descriptor",
        with_foreign_event_descriptor,
        lambda e, s: e.own(e.resources.Event.from_ipc_descriptor(s.desc, s.dev)),
        real=False,
        probe=_ctx_probe,
    )
    return out


def pool_scenarios() -> list[Scenario]:
    """DeviceMemoryResource, PinnedMemoryResource, IPC buffers and events."""
    return [
        *_device_pool_scenarios(),
        *_pool_attribute_scenarios(),
        *_pool_buffer_scenarios(),
        *_pinned_pool_scenarios(),
        *_pinned_copy_scenarios(),
        *_device_resource_scenarios(),
    ]


# --- copies between pinned and device memory, the device's memory resource --------------------


def _with_pinned_kinds(env: Env) -> SimpleNamespace:
    """Pinned memory of a pool (``pbuf``) and of cuMemHostAlloc (``pinned``), device memory (``buf``)."""
    s = with_pinned_pool(env)
    s.pinned = env.own(s.dev.allocate_pinned(SIZE))
    s.buf = env.own(s.dev.allocate(SIZE))
    s.pinned.numpy()[:] = 0x2C
    return s


def _pinned_copy_probe(env: Env, s: Any) -> None:
    """Every buffer of the copy still copies, both ways (G3)."""
    s.stream.sync()
    s.pinned.numpy()[:] = 0x2C
    s.pbuf.copy_from(s.pinned, s.stream)
    s.pbuf.copy_to(s.buf, s.stream)
    s.pinned.copy_from(s.buf, s.stream)
    s.stream.sync()
    assert bytes(s.pinned.numpy()) == b"\x2c" * SIZE


def _pinned_copy_scenarios() -> list[Scenario]:
    """``PinnedBuffer.copy_from``/``copy_to`` with pinned and device memory, synchronous and on a stream."""
    out: list[Scenario] = []
    add = adder(out)
    P = R + "PinnedBuffer."
    copies: list[tuple[str, str, Callable[[Env, Any], Any]]] = [
        ("copy_from", "pinned", lambda e, s: s.pbuf.copy_from(s.pinned)),
        ("copy_from", "pinned, stream", lambda e, s: s.pbuf.copy_from(s.pinned, s.stream)),
        ("copy_from", "buffer", lambda e, s: s.pinned.copy_from(s.buf)),
        ("copy_from", "buffer, stream", lambda e, s: s.pbuf.copy_from(s.buf, s.stream)),
        ("copy_to", "pinned", lambda e, s: s.pinned.copy_to(s.pbuf)),
        ("copy_to", "pinned, stream", lambda e, s: s.pinned.copy_to(s.pbuf, s.stream)),
        ("copy_to", "buffer", lambda e, s: s.pbuf.copy_to(s.buf)),
        ("copy_to", "buffer, stream", lambda e, s: s.pinned.copy_to(s.buf, s.stream)),
    ]
    for method, variant, fn in copies:
        add(f"{P}{method}[{variant}]", _with_pinned_kinds, fn, covers=(P + method,), probe=_pinned_copy_probe)
    return out


def _with_default_resource(env: Env) -> SimpleNamespace:
    """A pinned pool, and the device's default resource read already (its first read is swept on its own)."""
    s = with_pinned_pool(env)
    s.default = s.dev.memory_resource
    return s


def _allocate_through(env: Env, s: Any) -> Any:
    """Set the pinned pool as the device's memory resource, allocate through the device, put the default back."""
    s.dev.memory_resource = s.pmr
    try:
        return env.own(s.dev.allocate(SIZE, s.stream))
    finally:
        s.dev.memory_resource = s.default


def _device_resource_scenarios() -> list[Scenario]:
    """``Device.memory_resource``: the default made on first read, and ``Device.allocate`` through a set one."""
    out: list[Scenario] = []
    add = adder(out)
    D = R + "Device."
    add(D + "memory_resource", dev_fresh, lambda e, s: s.dev.memory_resource.device_id, probe=_ctx_probe)
    add(
        D + "memory_resource[set, allocate]",
        _with_default_resource,
        _allocate_through,
        covers=(D + "memory_resource", D + "allocate"),
        state=lambda e, s: (s.pmr.held, s.dev.memory_resource is s.pmr),
        probe=_pinned_probe,
    )
    return out


_POOL_NO_CALL = {
    "DeviceMemoryResource.attributes": "makes the attributes view; its reads and writes are swept",
    "DeviceMemoryResource.owned": _NO_CALL,
    "DeviceMemoryResource.is_ipc_enabled": _NO_CALL,
    "DeviceMemoryResource.is_imported": _NO_CALL,
    "DeviceMemoryResource.device_id": _NO_CALL,
    "DeviceMemoryResource.is_device_accessible": "a constant of the kind of memory: no driver call",
    "DeviceMemoryResource.is_host_accessible": "a constant of the kind of memory: no driver call",
    "DeviceMemoryResource.held": "sums the sizes of the live buffers it recorded: no driver call",
    "DeviceMemoryResource.buffers": "the live buffers it recorded: no driver call",
    "DeviceMemoryResource.leaked": "a count it keeps: no driver call",
    "DeviceMemoryResource.handle": _NO_CALL,
    "DeviceMemoryResource.context": _NO_CALL,
    "DeviceMemoryResource.closed": _NO_CALL,
    "DeviceMemoryResourceOptions()": "a record of pool options: no driver call",
    "PinnedMemoryResourceOptions()": "a record of pool options: no driver call",
    "MemoryPoolAttributes()": "a view over a pool (made by mr.attributes); its reads and writes are swept",
    "MemoryResource()": "abstract base: its operations are swept through each memory resource",
    "MemoryResource.allocate": "abstract: swept through each memory resource",
    "MemoryResource.deallocate": "swept through each memory resource",
    "MemoryResource.device_id": "abstract: swept through each memory resource",
    "MemoryResource.is_device_accessible": "abstract: a constant of each memory resource",
    "MemoryResource.is_host_accessible": "abstract: a constant of each memory resource",
    "MemoryResource.held": "sums the sizes of the live buffers it recorded: no driver call",
    "MemoryResource.buffers": "the live buffers it recorded: no driver call",
    "MemoryResource.leaked": "a count it keeps: no driver call",
    "IPCAllocationHandle()": "refused with TypeError naming the factories",
    "IPCAllocationHandle.from_fd": "takes a file descriptor: no driver call",
    "IPCAllocationHandle.fd": "the file descriptor: no driver call",
    "IPCAllocationHandle.closed": "whether the descriptor was closed: no driver call",
    "IPCAllocationHandle.close": "closes a file descriptor (os.close): no driver call",
    "IPCBufferDescriptor()": "a record of 64 bytes and a size: no driver call",
    "IPCEventDescriptor()": "a record of 64 bytes: no driver call",
    "MemoryRecord()": "a record of one allocation: no driver call",
    "MemoryReport()": "a record of what memory_in_use found: no driver call",
    "MemoryReport.total": "sums its records: no driver call",
    "MemoryReport.by_device": "sums its records: no driver call",
    "MemoryReport.by_source": "sums its records: no driver call",
    "memory_in_use": "walks the objects the garbage collector tracks: no driver call",
    "Buffer.memory_resource": _NO_CALL,
    "PinnedBuffer.memory_resource": _NO_CALL,
    "Event.is_ipc_enabled": "looks the event up in cuguard's record of IPC events: no driver call",
}
for _key in (
    "attributes",
    "owned",
    "is_ipc_enabled",
    "is_imported",
    "device_id",
    "is_device_accessible",
    "is_host_accessible",
    "held",
    "buffers",
    "leaked",
    "handle",
    "context",
    "closed",
):
    _POOL_NO_CALL[f"PinnedMemoryResource.{_key}"] = _POOL_NO_CALL[f"DeviceMemoryResource.{_key}"]

NO_DRIVER_CALL_MEMORY.update({R + key: reason for key, reason in _POOL_NO_CALL.items()})
