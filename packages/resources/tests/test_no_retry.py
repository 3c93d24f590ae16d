"""Regression tests from the failure-point sweep: a failed cuCtxGetCurrent is raised, never retried (E1, C4)."""

from __future__ import annotations

import pytest

from cuguard.errors import CUDAError
from cuguard.resources import Device
from cuguard.testing import inject, record_calls

OUT_OF_MEMORY = 2


@pytest.mark.contract("E1", "C4")
@pytest.mark.parametrize("current", [False, True], ids=["no-context", "device-context"])
@pytest.mark.parametrize("what", ["create_stream", "create_event", "stream_record"])
def test_failed_context_query_raises_and_is_not_asked_again(device: Device, what: str, current: bool) -> None:
    stream = device.create_stream()
    if current:
        device.set_current()
    op = {"create_stream": device.create_stream, "create_event": device.create_event, "stream_record": stream.record}
    with record_calls() as log, inject("cuCtxGetCurrent", OUT_OF_MEMORY), pytest.raises(CUDAError) as info:
        op[what]()
    assert info.value.call == "cuCtxGetCurrent"
    assert [c.name for c in log].count("cuCtxGetCurrent") == 1
    stream.close()
