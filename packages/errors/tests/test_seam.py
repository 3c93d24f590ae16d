"""The driver seam: where driver calls go, lazy loading, and a machine with no driver."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cuguard.errors import (
    RESTORE_CONTEXT,
    CUDADriverNotFoundError,
    CUDAError,
    active_driver,
    driver,
    driver_token,
    install_driver,
    use_driver,
)


class FakeDriver:
    """A driver object with a few functions that record their calls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def cuStreamCreate(self, flags: int) -> tuple[int, int]:
        self.calls.append(("cuStreamCreate", (flags,)))
        return (0, 0x1000)

    def cuCtxSetCurrent(self, ctx: int) -> tuple[int]:
        self.calls.append(("cuCtxSetCurrent", (ctx,)))
        return (0,)

    def __repr__(self) -> str:
        return f"FakeDriver({self.name})"


class RestoringDriver(FakeDriver):
    def cuguardRestoreContext(self, ctx: int) -> tuple[int]:
        self.calls.append(("cuguardRestoreContext", (ctx,)))
        return (0,)


def _installed() -> object:
    previous = install_driver(None)
    install_driver(previous)
    return previous


@pytest.fixture(autouse=True)
def _no_driver_installed() -> Iterator[None]:
    """These tests start and must end with no driver installed."""
    assert _installed() is None
    yield
    assert _installed() is None, "a test left a driver installed"


def test_use_driver_routes_calls_and_restores_the_previous_driver() -> None:
    outer, inner = FakeDriver("outer"), FakeDriver("inner")
    with use_driver(outer) as installed:
        assert installed is outer
        assert active_driver() is outer
        assert driver.cuStreamCreate(0) == (0, 0x1000)
        with use_driver(inner):
            assert active_driver() is inner
            driver.cuStreamCreate(1)
        assert active_driver() is outer
        driver.cuStreamCreate(2)
    assert outer.calls == [("cuStreamCreate", (0,)), ("cuStreamCreate", (2,))]
    assert inner.calls == [("cuStreamCreate", (1,))]
    assert install_driver(None) is None  # nothing is left installed


def test_use_driver_restores_the_previous_driver_when_the_block_raises() -> None:
    outer, inner = FakeDriver("outer"), FakeDriver("inner")

    def fail_inside_inner() -> None:
        with use_driver(inner):
            driver.cuStreamCreate(1)
            raise ZeroDivisionError

    with use_driver(outer):
        with pytest.raises(ZeroDivisionError):
            fail_inside_inner()
        assert active_driver() is outer
        driver.cuStreamCreate(2)
    assert inner.calls == [("cuStreamCreate", (1,))]
    assert outer.calls == [("cuStreamCreate", (2,))]


def test_a_function_looked_up_before_a_switch_is_not_reused_after_it() -> None:
    first, second = FakeDriver("first"), FakeDriver("second")
    with use_driver(first):
        driver.cuStreamCreate(0)
    with use_driver(second):
        driver.cuStreamCreate(0)
    assert len(first.calls) == len(second.calls) == 1


def test_an_unknown_function_is_an_attribute_error_naming_it() -> None:
    with use_driver(FakeDriver("fake")), pytest.raises(AttributeError, match="cuNoSuchFunction") as caught:
        driver.cuNoSuchFunction  # noqa: B018
    assert "FakeDriver(fake)" in str(caught.value)


def test_dunder_probes_never_load_a_driver() -> None:
    # copy, pickle, numpy and friends probe objects for dunder attributes.
    assert not hasattr(driver, "__array_interface__")
    assert not hasattr(driver, "__len__")


def test_restores_go_to_the_drivers_restore_function_or_to_cuCtxSetCurrent() -> None:
    plain, restoring = FakeDriver("plain"), RestoringDriver("restoring")
    with use_driver(plain):
        getattr(driver, RESTORE_CONTEXT)(0x10)
    with use_driver(restoring):
        getattr(driver, RESTORE_CONTEXT)(0x20)
    assert plain.calls == [("cuCtxSetCurrent", (0x10,))]
    assert restoring.calls == [("cuguardRestoreContext", (0x20,))]


@pytest.mark.contract("E1")
def test_importing_cuguard_errors_loads_no_driver(run_json: Callable[..., Any]) -> None:
    state = run_json(
        """
        import json, sys
        before = set(sys.modules)  # site hooks of some installs import the bare `cuda` namespace
        import cuguard.errors
        from cuguard.errors import _seam

        def libcuda_mapped():
            try:
                with open("/proc/self/maps") as maps:
                    return any("libcuda" in line for line in maps)
            except OSError:
                return False

        after_import = {
            "real_loaded": _seam._real is not None,
            "bindings_imported": sorted(m for m in set(sys.modules) - before if m.startswith("cuda")),
            "libcuda_mapped": libcuda_mapped(),
        }
        # Rendering errors needs no driver either.
        text = str(cuguard.errors.CUDAError(2, "cuMemAllocAsync"))
        after_render = {"real_loaded": _seam._real is not None, "libcuda_mapped": libcuda_mapped(), "text": text}
        print(json.dumps({"after_import": after_import, "after_render": after_render}))
        """
    )
    assert state["after_import"] == {"real_loaded": False, "bindings_imported": [], "libcuda_mapped": False}
    assert state["after_render"] == {
        "real_loaded": False,
        "libcuda_mapped": False,
        "text": "cuMemAllocAsync failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    }


_FIRST_CALL = """
import json
from cuguard.errors import CUDADriverNotFoundError, driver, real_driver

try:
    real_driver()
except CUDADriverNotFoundError:
    pass
else:
    print(json.dumps({"driver_present": True}))
    raise SystemExit(0)

seen = []
for _ in range(2):  # the first call, and every later one, says the same
    try:
        driver.cuInit(0)
    except CUDADriverNotFoundError as exc:
        seen.append(exc)
first = seen[0]
print(json.dumps({
    "driver_present": False,
    "raised": len(seen),
    "mro": [cls.__name__ for cls in type(first).__mro__],
    "message": str(first),
    "same_message": str(seen[1]) == str(first),
    "name": first.name,
    "chained": first.__cause__ is not None or not first.__suppress_context__,
}))
"""


@pytest.mark.contract("E1")
def test_no_driver_raises_a_plain_cuda_error_on_the_first_call(run_json: Callable[..., Any]) -> None:
    result = run_json(_FIRST_CALL)
    if result["driver_present"]:
        pytest.skip("a CUDA driver is installed on this machine")
    assert result["raised"] == 2
    assert result["same_message"]
    assert "CUDAError" in result["mro"]
    assert result["message"].startswith("no CUDA driver was found: ")
    assert result["name"] == "CUDA_ERROR_NO_DEVICE"
    assert not result["chained"], "the loader's traceback must not be chained to the error"


@pytest.mark.contract("E1")
def test_driver_not_found_is_a_cuda_error_that_pickles() -> None:
    import pickle

    error = CUDADriverNotFoundError("libcuda.so.1 could not be loaded")
    assert isinstance(error, CUDAError)
    assert str(error) == "no CUDA driver was found: libcuda.so.1 could not be loaded"
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


class _Wrapper:
    """A proxy in front of another driver, as cuguard.testing's fault proxy is."""

    def __init__(self, inner: object) -> None:
        self.wrapped_driver = inner


@pytest.mark.contract("O3")
def test_the_real_driver_has_one_token_however_it_is_reached() -> None:
    # Found on the H200: a fault proxy over the real driver gave it a token of its own, so every
    # object made before record_calls()/inject() was refused as belonging to an uninstalled driver.
    from cuda.bindings import driver as real_module

    plain = driver_token()
    with use_driver(_Wrapper(real_module)):
        assert driver_token() is plain
    with use_driver(real_module):
        assert driver_token() is plain
    with use_driver(_Wrapper(_Wrapper(real_module))):
        assert driver_token() is plain
    other = _Wrapper(None)
    with use_driver(other):
        assert driver_token() is other


@pytest.mark.contract("O3")
def test_the_settled_token_follows_every_install_and_wrapper() -> None:
    # SETTLED_TOKEN[0] is what hot paths compare an object's token with instead of calling
    # driver_token(): it must be driver_token()'s answer after every change of driver.
    from cuguard.errors.lowlevel import SETTLED_TOKEN

    driver_token()  # the default driver chosen (the variable is unset here: the real one)
    plain = driver_token()
    assert SETTLED_TOKEN[0] is plain
    first, second = FakeDriver("first"), FakeDriver("second")
    with use_driver(first):
        assert SETTLED_TOKEN[0] is driver_token() is first
        with use_driver(_Wrapper(first)):
            assert SETTLED_TOKEN[0] is first
        with use_driver(second):
            assert SETTLED_TOKEN[0] is driver_token() is second
        assert SETTLED_TOKEN[0] is first
    assert SETTLED_TOKEN[0] is plain
