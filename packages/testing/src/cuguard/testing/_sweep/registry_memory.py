"""The sweep's scenarios of the memory resources (see :mod:`cuguard.testing._sweep.registry`).

Each function returns the scenarios of one group of resources; ``registry._build()``
adds them. :data:`NO_DRIVER_CALL_MEMORY` lists the public callables of these
resources that make no driver call, with the reason (merged into
``registry.NO_DRIVER_CALL``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from cuguard.testing._sweep.registry import SIZE, Env, Scenario, dev_only, with_stream

__all__ = ["NO_DRIVER_CALL_MEMORY", "vmm_scenarios"]

_R = "resources."
_NO_CALL_RESOURCE = "returns what the object recorded at creation"


def _adder(out: list[Scenario]) -> Callable[..., None]:
    def add(
        name: str,
        setup: Callable[[Env], Any],
        op: Callable[[Env, Any], Any],
        covers: tuple[str, ...] | None = None,
        **kw: Any,
    ) -> None:
        out.append(Scenario(name, "resources", covers if covers is not None else (name,), setup, op, **kw))

    return add


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


def _with_vmm_buffer(env: Env) -> SimpleNamespace:
    s = _with_vmm(env)
    s.buf = env.own(s.mr.allocate(SIZE))
    s.data = bytes(range(SIZE))
    s.buf.copy_from(s.data)
    return s


def _blocked_vmm_buffer(env: Env) -> SimpleNamespace:
    """A buffer whose next addresses are reserved, so that growing it must move it."""
    s = _with_vmm_buffer(env)
    drv = env.errors.driver
    g = s.mr.granularity
    end = s.buf.ptr + g
    err, blocker = drv.cuMemAddressReserve(4 * g, 0, end, 0)
    if err:
        env.errors.raise_status(err, "cuMemAddressReserve")

    def unblock() -> None:
        (err,) = drv.cuMemAddressFree(blocker, 4 * g)
        if err:
            env.errors.raise_status(err, "cuMemAddressFree")

    env.own(unblock)
    return s


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


def _with_managed_buffer(env: Env) -> SimpleNamespace:
    s = _with_managed(env)
    s.buf = env.own(s.mr.allocate(SIZE))
    return s


def _managed_probe(env: Env, s: Any) -> None:
    s.buf.fill(2)
    s.mr.prefetch(s.buf, s.dev, s.stream)
    s.stream.sync()


def _with_legacy(env: Env) -> SimpleNamespace:
    s = dev_only(env)
    s.mr = env.resources.LegacyPinnedMemoryResource(s.dev)
    return s


def _with_legacy_buffer(env: Env) -> SimpleNamespace:
    s = _with_legacy(env)
    s.buf = env.own(s.mr.allocate(SIZE))
    return s


def _legacy_probe(env: Env, s: Any) -> None:
    with s.mr.allocate(SIZE) as other, s.dev.allocate(SIZE) as dev_buf:
        dev_buf.copy_from(other)


def vmm_scenarios() -> list[Scenario]:
    """VirtualMemoryResource, ManagedMemoryResource and LegacyPinnedMemoryResource."""
    out: list[Scenario] = []
    add = _adder(out)
    V, M, L = _R + "VirtualMemoryResource", _R + "ManagedMemoryResource", _R + "LegacyPinnedMemoryResource"

    add(V + "()", dev_only, lambda e, s: e.resources.VirtualMemoryResource(s.dev))
    add(V + ".allocate", _with_vmm, lambda e, s: e.own(s.mr.allocate(SIZE)), state=lambda e, s: s.mr.held)
    add(
        V + ".modify_allocation[in place]",
        _with_vmm_buffer,
        _grow,
        covers=(V + ".modify_allocation",),
        state=_vmm_state,
        probe=_vmm_probe,
    )
    add(
        V + ".modify_allocation[elsewhere]",
        _blocked_vmm_buffer,
        _grow,
        covers=(V + ".modify_allocation",),
        state=_vmm_state,
        probe=_vmm_probe,
    )
    add(
        V + ".modify_allocation[fits]",
        _with_vmm_buffer,
        lambda e, s: s.mr.modify_allocation(s.buf, SIZE * 2),
        covers=(V + ".modify_allocation",),
        state=_vmm_state,
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
        s = _with_vmm_buffer(env)
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
        _with_vmm_buffer,
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
        _with_managed_buffer,
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
        _with_legacy_buffer,
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
