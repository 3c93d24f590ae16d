"""Fault plans compose (B1): every active plan counts every call it matches; the outermost plan's status wins.

Each test creates streams with ``Device(0).create_stream()`` on a fresh simulated driver, so
the driver call under the plans is ``cuStreamCreate``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("cuguard.graphs")  # these tests drive every layer

from cuguard.errors import CUDAError, installed_driver
from cuguard.resources import Device
from cuguard.testing import FaultProxy, inject, record_calls, simulated_driver

OUT_OF_MEMORY = 2
INVALID_VALUE = 1


def _create_code(dev: Device) -> int | None:
    """The code of the ``CUDAError`` that ``create_stream`` raised, or ``None`` when it succeeded."""
    try:
        stream = dev.create_stream()
    except CUDAError as exc:
        error = exc
    else:
        stream.close()
        return None
    assert error.call == "cuStreamCreate"
    return error.code


@pytest.mark.contract("B1")
def test_outer_plan_fails_the_first_call_and_inner_plan_its_own_second() -> None:
    with simulated_driver():
        dev = Device(0)
        dev.context  # noqa: B018 - retain the primary context (its calls are not stream creations)
        with inject("cuStreamCreate", OUT_OF_MEMORY, nth=1) as outer:
            with inject("cuStreamCreate", INVALID_VALUE, nth=2) as inner, record_calls() as log:
                codes = [_create_code(dev) for _ in range(3)]
                inner_seen, inner_fired = inner.seen, inner.fired
            outer_seen, outer_fired = outer.seen, outer.fired
    # 1st call: the outer plan's nth=1; 2nd: the inner plan's 2nd matching call; 3rd: neither.
    assert codes == [OUT_OF_MEMORY, INVALID_VALUE, None]
    # Both plans counted every matching call, also the one the other plan failed.
    assert (outer_seen, inner_seen) == (3, 3)
    assert (outer_fired, inner_fired) == (1, 1)
    creates = [call for call in log if call.name == "cuStreamCreate"]
    assert [(call.status, call.injected) for call in creates] == [
        (OUT_OF_MEMORY, True),
        (INVALID_VALUE, True),
        (0, False),
    ]


@pytest.mark.contract("B1")
def test_inner_plan_counts_calls_failed_by_the_outer_plan() -> None:
    """An inner nth=1 plan whose first matching call the outer plan fails has fired on it, not later."""
    with simulated_driver():
        dev = Device(0)
        dev.context  # noqa: B018
        with (
            inject("cuStreamCreate", OUT_OF_MEMORY, nth=1) as outer,
            inject("cuStreamCreate", INVALID_VALUE, nth=1) as inner,
        ):
            codes = [_create_code(dev) for _ in range(2)]
    # Both fire on the first call: the outer plan (installed first) gives the status; the inner
    # plan has used up its nth=1 on that call, so the second call succeeds.
    assert codes == [OUT_OF_MEMORY, None]
    assert (outer.seen, outer.fired) == (2, 1)
    assert (inner.seen, inner.fired) == (2, 1)


@pytest.mark.contract("B1")
def test_when_both_fire_on_the_same_call_the_plan_installed_first_gives_the_status() -> None:
    with simulated_driver():
        dev = Device(0)
        dev.context  # noqa: B018
        # Same nth for both, installed in both orders: the first installed wins either way.
        for first, second in ((OUT_OF_MEMORY, INVALID_VALUE), (INVALID_VALUE, OUT_OF_MEMORY)):
            with inject("cuStreamCreate", first, nth=2) as a, inject("cuStreamCreate", second, nth=2) as b:
                codes = [_create_code(dev) for _ in range(3)]
            assert codes == [None, first, None]
            assert (a.seen, a.fired, b.seen, b.fired) == (3, 1, 3, 1)
        # every=True plans: every call fires both; the outer's code each time.
        with (
            inject("cuStreamCreate", OUT_OF_MEMORY, every=True) as a,
            inject("cuStreamCreate", INVALID_VALUE, every=True) as b,
        ):
            codes = [_create_code(dev) for _ in range(3)]
        assert codes == [OUT_OF_MEMORY] * 3
        assert (a.seen, a.fired, b.seen, b.fired) == (3, 3, 3, 3)


@pytest.mark.contract("B1")
def test_a_plan_counts_only_calls_made_while_it_is_active() -> None:
    with simulated_driver():
        dev = Device(0)
        dev.context  # noqa: B018
        with inject("cuStreamCreate", OUT_OF_MEMORY, nth=3) as outer:
            assert _create_code(dev) is None  # outer: 1st
            with inject("cuStreamCreate", INVALID_VALUE, nth=2) as inner:
                assert _create_code(dev) is None  # outer: 2nd, inner: 1st
                assert _create_code(dev) == OUT_OF_MEMORY  # outer: 3rd (fires), inner: 2nd (fires too)
                assert _create_code(dev) is None  # outer: 4th, inner: 3rd
            assert _create_code(dev) is None  # outer: 5th
        assert (outer.seen, outer.fired) == (5, 1)
        assert (inner.seen, inner.fired) == (3, 1)
        # The proxy is gone once the last plan is lifted: the simulator is installed again.
        assert not isinstance(installed_driver(), FaultProxy)
