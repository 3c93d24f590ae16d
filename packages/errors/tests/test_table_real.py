"""The shipped status table against the driver's own text (E1), on a real GPU."""

from __future__ import annotations

import pytest

from cuguard.errors import error_description, error_name


@pytest.mark.real_only
@pytest.mark.contract("E1")
def test_every_code_matches_the_driver(cuguard_driver: object) -> None:
    from cuda.bindings import driver

    compared = 0
    mismatches = []
    for status in driver.CUresult:
        err, name = driver.cuGetErrorName(status)
        err2, text = driver.cuGetErrorString(status)
        if err or err2:
            continue  # a code newer than the installed driver: the table falls back to the bindings' docs
        compared += 1
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        if (error_name(int(status)), error_description(int(status))) != (name, text):
            mismatches.append((int(status), name, text))
    print(f"compared {compared} driver codes with cuGetErrorName/cuGetErrorString")
    assert compared > 90
    assert mismatches == []
