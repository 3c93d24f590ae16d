"""One fault, one report (contract W7): the reporting helpers fold sticky failures per context.

Stand-ins here: a context is any hashable object, and its cuguard objects are
:class:`~cuguard.errors.lowlevel.Unique` objects with a ``closed`` attribute that refer to
it, as the upper layers' resources do. Each test installs a fresh simulated
driver, so what is kept per driver starts empty.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest
from conftest import RunPython

from cuguard.errors import (
    CUDAError,
    CUDAWarning,
    StickyCUDAError,
    StickyFaultWarning,
    first_sticky_fault,
    flush_deferred,
    forget_sticky_fault,
    report,
    report_error,
)
from cuguard.errors.lowlevel import Unique
from cuguard.testing import simulated_driver


class FakeContext:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<FakeContext {self.name}>"


class Thing(Unique):
    """A stand-in for a resource: it refers to its context and says whether it is closed."""

    __slots__ = ("__weakref__", "closed", "context")

    def __init__(self, context: object) -> None:
        self.context = context
        self.closed = False

    def release(self, status: int = 700) -> None:
        """What a collected resource does when its release is refused: closed, then reported."""
        self.closed = True
        report(status, "cuEventDestroy", id(self), "the event was leaked", context=self.context)


@pytest.fixture(autouse=True)
def fresh_driver() -> Iterator[None]:
    with simulated_driver(devices=1):
        yield


def _settle() -> None:
    gc.collect()
    flush_deferred()


@pytest.mark.contract("W7")
def test_the_first_refused_release_warns_and_the_rest_are_summed_up_when_the_last_object_goes() -> None:
    context = FakeContext("a")
    things = [Thing(context) for _ in range(10)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        things.pop().release()
        [first] = [w.message for w in seen]
        assert isinstance(first, StickyFaultWarning)
        assert not first.summary
        assert first.first_fault == "cuEventDestroy failed with CUDA_ERROR_ILLEGAL_ADDRESS"  # it was the first
        assert first_sticky_fault() == first.first_fault  # recorded as the driver's first fault (E5)
        assert str(first).startswith("cuEventDestroy(")
        assert "<FakeContext a>" in str(first)
        assert first.context == "<FakeContext a>"
        while len(things) > 1:
            things.pop().release()
        assert len(seen) == 1  # counted, not warned
        things.pop().release()  # the last one: the summary comes with it
        assert len(seen) == 2
    first, summary = (w.message for w in seen)
    assert isinstance(summary, StickyFaultWarning)
    assert summary.summary
    assert summary.leaked == 9
    assert summary.context == "<FakeContext a>"
    assert str(summary).startswith("9 more releases refused in <FakeContext a>")


@pytest.mark.contract("W7")
def test_contexts_are_reported_apart_and_an_earlier_first_fault_is_named() -> None:
    a, b = FakeContext("a"), FakeContext("b")
    with pytest.raises(StickyCUDAError):
        raise CUDAError(700, "cuStreamSynchronize")  # the first fault, raised earlier by a synchronization
    things = [Thing(a) for _ in range(3)] + [Thing(b) for _ in range(4)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        while things:
            things.pop().release()
        _settle()
    reports = [w.message for w in seen]
    assert all(isinstance(w, StickyFaultWarning) for w in reports)
    assert [(w.context, w.summary, w.leaked) for w in reports] == [  # type: ignore[attr-defined]
        ("<FakeContext b>", False, 1),
        ("<FakeContext b>", True, 3),
        ("<FakeContext a>", False, 1),
        ("<FakeContext a>", True, 2),
    ]
    assert {w.first_fault for w in reports} == {  # type: ignore[attr-defined]
        "cuStreamSynchronize failed with CUDA_ERROR_ILLEGAL_ADDRESS"
    }


@pytest.mark.contract("W7", "W2")
def test_failures_that_are_not_sticky_still_warn_one_by_one() -> None:
    context = FakeContext("a")
    things = [Thing(context) for _ in range(3)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for thing in things:
            thing.release(status=201)  # CUDA_ERROR_INVALID_CONTEXT
        del things, thing
        _settle()
    assert len(seen) == 3
    assert not any(isinstance(w.message, StickyFaultWarning) for w in seen)


@pytest.mark.contract("W7", "W1")
def test_report_error_folds_sticky_errors_too() -> None:
    context = FakeContext("a")
    things = [Thing(context) for _ in range(4)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        while things:
            thing = things.pop()
            thing.closed = True
            report_error(CUDAError(719, "cuMemFree"), id(thing), "the memory was leaked", context=context)
            del thing
        _settle()
    first, summary = (w.message for w in seen)
    assert isinstance(first, StickyFaultWarning)
    assert first.first_fault == "cuMemFree failed with CUDA_ERROR_LAUNCH_FAILED"
    assert isinstance(summary, StickyFaultWarning)
    assert summary.leaked == 3


@pytest.mark.contract("W7")
def test_objects_found_in_a_reference_cycle_are_summed_up_after_the_collection() -> None:
    class Cyclic(Thing):
        __slots__ = ("me",)

        def __del__(self) -> None:
            if not self.closed:
                self.release()

    context = FakeContext("a")
    things = [Cyclic(context) for _ in range(6)]
    for thing in things:
        thing.me = thing  # only a collection frees it: its weak references are cleared before __del__ runs
    del thing
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        things.pop().release()  # the first refused release, while the others are alive
        del things
        _settle()
    [first, summary] = [w.message for w in seen]
    assert isinstance(first, StickyFaultWarning)
    assert not first.summary
    assert isinstance(summary, StickyFaultWarning)
    assert summary.leaked == 5


@pytest.mark.contract("W7")
def test_an_unknown_context_is_summed_up_only_at_exit(run_python: RunPython) -> None:
    result = run_python(
        """
        import json, warnings
        seen = []
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *args, **kwargs: seen.append(message)
        import atexit
        atexit.register(lambda: print(json.dumps([[m.summary, m.leaked] for m in seen])))
        from cuguard.errors import report
        for handle in range(5):
            report(700, "cuEventDestroy", handle, "the event was leaked")  # no context named
        print(json.dumps([[m.summary, m.leaked] for m in seen]))
        """
    )
    assert result.returncode == 0, result.stderr
    during, at_exit = result.stdout.strip().splitlines()
    assert during == "[[false, 1]]"
    assert at_exit == "[[false, 1], [true, 4]]"


@pytest.mark.contract("W7", "W4")
def test_deinitialized_is_still_never_reported() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report(4, "cuEventDestroy", 1, context=FakeContext("a"))
    assert seen == []
    assert issubclass(StickyFaultWarning, CUDAWarning)


@pytest.mark.contract("W7", "B1")
def test_a_new_first_fault_gets_a_report_of_its_own() -> None:
    context = FakeContext("a")
    things = [Thing(context) for _ in range(4)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        things.pop().release()  # the first fault: warned
        things.pop().release()  # counted
        assert len(seen) == 1
        forget_sticky_fault()  # what a fault plan does when the sticky status it made up ends with it
        assert len(seen) == 2  # what was counted under that fault is summed up at once
        things.pop().release()  # the same call refused again: a new first fault, warned again
        del things
        _settle()
    reports = [w.message for w in seen]
    assert all(isinstance(w, StickyFaultWarning) for w in reports)
    assert [(w.summary, w.leaked) for w in reports] == [(False, 1), (True, 1), (False, 1)]  # type: ignore[attr-defined]
