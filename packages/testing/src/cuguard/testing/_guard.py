"""A safety net for sweeping the real driver: refuse what would crash the process.

The sweep runs cuguard over the real driver with faults injected. Injected
failures never reach the driver, so they cannot crash it; but a bug in cuguard
that released a handle twice, or switched to a destroyed context, would. The
:class:`SafetyDriver` sits between the fault proxy and the real driver,
remembers the handles released through it, and answers a second release of
one of them (or a switch to a destroyed context) with
``CUDA_ERROR_INVALID_HANDLE`` / ``CUDA_ERROR_INVALID_CONTEXT`` instead of
calling the driver, recording the incident, which the sweep reports as an S2
violation.
"""

from __future__ import annotations

from typing import Any

from cuguard.errors import RESTORE_CONTEXT
from cuguard.errors.lowlevel import DRIVER_FACTS, REFCOUNTED, calls_where, deferring_lock

__all__ = ["SafetyDriver"]

# Views of the table of driver facts. Reference-counted objects (primary contexts, user objects) may be
# released more than once: the net does not follow them.
# Release function -> kind of handle it releases (first argument).
_RELEASES = {
    f.name: f.releases for f in DRIVER_FACTS.values() if f.releases is not None and f.releases not in REFCOUNTED
}
# Creating function -> kind of handle it returns (second element of the result). Every call that
# can hand out a handle or address released before must be here: the driver reuses them (a pool
# gives a freed address to its next allocation), and a reused one the net did not see created
# would look released, so that its first release would be refused as a second one.
_CREATES = {
    f.name: f.creates
    for f in DRIVER_FACTS.values()
    if f.creates is not None and f.creates not in REFCOUNTED and f.handle_from == "result"
}
# Creating function -> kind of handle it makes at its first argument (a mapping at an address).
_CREATES_AT = {
    f.name: f.creates
    for f in DRIVER_FACTS.values()
    if f.creates is not None and f.creates not in REFCOUNTED and f.handle_from == "argument"
}
_SWITCHES = calls_where(switches=True) | {RESTORE_CONTEXT}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return id(value)


class SafetyDriver:
    """Forwards to ``inner``; refuses double releases and switches to destroyed contexts."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.released: set[tuple[str, int]] = set()
        self.incidents: list[str] = []
        self._lock = deferring_lock()

    @property
    def wrapped_driver(self) -> Any:
        return self.inner

    def __repr__(self) -> str:
        return f"<SafetyDriver over {self.inner!r}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "wrapped_driver":
            raise AttributeError(name)
        fn = getattr(self.inner, name, None)
        if fn is None and name == RESTORE_CONTEXT:
            fn = getattr(self.inner, "cuCtxSetCurrent", None)
        if fn is None:
            raise AttributeError(f"the driver {self.inner!r} has no function {name!r}")
        release = _RELEASES.get(name)
        create = _CREATES.get(name)
        create_at = _CREATES_AT.get(name)
        switch = name in _SWITCHES
        guard = self

        def wrapped(*args: Any) -> Any:
            if release is not None or switch:
                kind = "context" if switch else release
                assert kind is not None
                key = (kind, _int(args[0]))
                with guard._lock:
                    refused = key in guard.released
                    if refused:
                        guard.incidents.append(f"{name}({hex(key[1])}): {kind} already released (refused)")
                if refused:
                    from cuda.bindings import driver as cb

                    code = cb.CUresult.CUDA_ERROR_INVALID_CONTEXT if switch else cb.CUresult.CUDA_ERROR_INVALID_HANDLE
                    return (code,)
            result = fn(*args)
            if not result[0]:
                with guard._lock:
                    if release is not None:
                        guard.released.add((release, _int(args[0])))
                    elif create is not None and len(result) > 1:
                        guard.released.discard((create, _int(result[1])))
                    elif create_at is not None:
                        guard.released.discard((create_at, _int(args[0])))
            return result

        wrapped.__name__ = name
        self.__dict__[name] = wrapped
        return wrapped
