"""The one table of driver facts knows every driver function cuguard calls or the simulator implements.

The simulator, the fault proxy's leak ledger, the safety net over the real driver and the sweeps
read their facts from it (views of ``cuguard.errors.lowlevel.DRIVER_FACTS``): a call missing from
it would be a call none of them knows how to account for (B5, S2).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cuda.bindings import driver as cb

import cuguard.context
import cuguard.errors
import cuguard.graphs
import cuguard.resources
from cuguard.errors.lowlevel import DRIVER_FACTS, REFCOUNTED, DriverFact, calls_where
from cuguard.testing import SimulatedDriver
from cuguard.testing.lowlevel import STICKY_EXEMPT

pytestmark = pytest.mark.contract("B5", "S2")

_CALL = re.compile(r"\bdriver\.(cu[A-Z]\w*)")
_NAMED = re.compile(r"[\"'](cu[A-Z][A-Za-z0-9_]*)[\"']")
_VERSIONED = re.compile(r"_v\d+$")


def _layer_calls() -> set[str]:
    """The driver functions the runtime layers' source calls or names as calls (for fallbacks and reports)."""
    found: set[str] = set()
    for layer in (cuguard.errors, cuguard.context, cuguard.resources, cuguard.graphs):
        for path in Path(layer.__path__[0]).rglob("*.py"):
            text = path.read_text("utf-8")
            named = set(_CALL.findall(text)) | set(_NAMED.findall(text))
            # a function of the installed bindings, or the other major's name for one (cuMemAdvise_v2)
            found |= {name for name in named if callable(getattr(cb, name, None)) or _VERSIONED.search(name)}
    return found


def test_every_function_the_layers_call_has_a_record() -> None:
    called = _layer_calls()
    assert len(called) > 100  # the scan finds the layers' calls at all
    assert sorted(called - set(DRIVER_FACTS)) == []


def test_every_function_the_simulator_implements_has_a_record() -> None:
    implemented = {name for name in dir(SimulatedDriver) if name.startswith("cu") and callable(getattr(cb, name, None))}
    assert len(implemented) > 100
    assert sorted(implemented - set(DRIVER_FACTS)) == []


def test_what_is_created_can_be_released() -> None:
    created = {fact.creates for fact in DRIVER_FACTS.values() if fact.creates}
    released = {fact.releases for fact in DRIVER_FACTS.values() if fact.releases}
    assert created <= released  # every kind of object a call creates has a call releasing it
    assert created >= REFCOUNTED


def test_the_views_are_the_records() -> None:
    assert calls_where(callback_safe=True) == {"cuGetErrorName", "cuGetErrorString"}
    assert "cuStreamSynchronize" in calls_where(synchronizes=True, waits=True)
    assert calls_where(releases="stream") == {"cuStreamDestroy"}
    assert {name for name, fact in DRIVER_FACTS.items() if fact.sticky_exempt} == STICKY_EXEMPT
    assert DRIVER_FACTS["cuMemMap"] == DriverFact("cuMemMap", creates="memory_mapping", handle_from="argument")


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="no field colour"):
        calls_where(colour="blue")
