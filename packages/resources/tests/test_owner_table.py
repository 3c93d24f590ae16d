"""The owner table a graph or capture keeps (cuguard.resources.lowlevel.OwnerTable): its write marks (B7, W5).

The race checker reads a graph launch's writes from the marks: a lost mark is a missed race, a
stale one a false report.
"""

from __future__ import annotations

import sys
import threading

import pytest

from cuguard.resources.lowlevel import OwnerTable, split_written

pytestmark = pytest.mark.contract("B7")


class _Thing:
    pass


def test_a_write_mark_stays_whatever_keeps_the_object_after() -> None:
    table = OwnerTable()
    a = _Thing()
    assert table.keep(a, True) is True
    assert table.keep(a, False) is False  # read too, by a later node: still written
    assert split_written(table) == ([a], [])


def test_an_object_leaving_the_table_takes_its_mark_with_it() -> None:
    table = OwnerTable()
    a = _Thing()
    table.keep(a, True)
    table.pop(id(a))
    assert table.written == set()
    b = _Thing()
    table.keep(b, True)
    del table[id(b)]
    assert table.written == set()
    c = _Thing()
    table.keep(c, False)  # whatever id it got, it starts only read
    assert split_written(table) == ([], [c])


def test_threads_keeping_the_same_objects_lose_no_write_mark() -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        for _ in range(20):
            table = OwnerTable()
            things = [_Thing() for _ in range(200)]
            start = threading.Barrier(2)

            def keep(
                write: bool, table: OwnerTable = table, things: list[_Thing] = things, start: threading.Barrier = start
            ) -> None:
                start.wait()
                for thing in things:
                    table.keep(thing, write)

            threads = [threading.Thread(target=keep, args=(w,)) for w in (True, False)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert table.written == {id(t) for t in things}
    finally:
        sys.setswitchinterval(interval)
