"""Where the misuse sweep's choices come from: hypothesis's data, or a seeded ``random.Random``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

__all__ = ["Chooser", "RandomChooser", "coin", "pick"]

T = TypeVar("T")


class Chooser(Protocol):
    """Where the sweep's choices come from: hypothesis's data, or a seeded ``random.Random``."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer from ``lo`` to ``hi`` inclusive."""


class RandomChooser:
    """A :class:`Chooser` over ``random.Random`` (for machines without hypothesis)."""

    def __init__(self, rng: Any) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.randint(lo, hi))


def pick(ch: Chooser, seq: Sequence[T]) -> T:
    return seq[ch.integer(0, len(seq) - 1)]


def coin(ch: Chooser, percent: int) -> bool:
    return ch.integer(0, 99) < percent
