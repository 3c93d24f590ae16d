"""The seam's helpers for the layers: base_driver and on_driver_forgotten (O3)."""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors.lowlevel import base_driver, forget_driver, on_driver_forgotten

pytestmark = pytest.mark.contract("O3")


class _Wrapper:
    def __init__(self, inner: Any) -> None:
        self.wrapped_driver = inner


def test_base_driver_looks_under_every_wrapper() -> None:
    inner = object()
    assert base_driver(_Wrapper(_Wrapper(inner))) is inner
    assert base_driver(inner) is inner
    assert base_driver(None) is None


def test_on_driver_forgotten_tells_each_listener_the_token_and_refuses_a_non_callable() -> None:
    token = object()
    told: list[object] = []
    on_driver_forgotten(told.append)
    forget_driver(token)
    assert told == [token]
    with pytest.raises(TypeError, match="listener"):
        on_driver_forgotten("not callable")  # type: ignore[arg-type]
