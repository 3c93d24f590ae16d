"""``source_new``: how the hot factories of a module running as source make objects without ``__init__`` (O1, E3)."""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors.lowlevel import Unique, source_new


class _Plain:
    __slots__ = ("made",)

    def __init__(self) -> None:
        raise AssertionError("__init__ must not run")


class _Owner(Unique):
    """A class on the errors layer's base, compiled in the compiled build (object.__new__ refuses it there)."""

    __slots__ = ("made",)


@pytest.mark.contract("O1")
@pytest.mark.parametrize("cls", [_Plain, _Owner])
def test_a_source_module_gets_the_classs_own_new(cls: type) -> None:
    new = source_new("/some/where/_module.py", cls)
    assert new is not None
    obj: Any = new(cls)
    obj.made = True  # its slots are there
    assert obj.made
    assert type(obj) is cls  # made without __init__, as cls.__new__(cls) makes it


@pytest.mark.contract("O1")
@pytest.mark.parametrize("module_file", ["/some/where/_module.cpython-312-x86_64-linux-gnu.so", None, 7])
def test_a_compiled_or_unknown_module_gets_none(module_file: object) -> None:
    assert source_new(module_file, _Plain) is None  # type: ignore[arg-type]


@pytest.mark.contract("E3")
@pytest.mark.parametrize("cls", [None, "Node", object()])
def test_what_is_not_a_class_is_a_type_error(cls: object) -> None:
    with pytest.raises(TypeError, match="cls"):
        source_new("/some/where/_module.py", cls)  # type: ignore[arg-type]
