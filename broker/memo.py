"""A bounded memo: a dict that computes what it is missing and forgets everything past a size.

The hot paths look the same small set of things up over and over (a publisher's topic, a filter's
text, an ack list, a record's second), while the keys come from clients and are unbounded in principle.
A :class:`Memo` hit is a plain dict lookup (no Python call); a miss calls ``compute(key)`` once, and a
memo that reaches its limit is emptied first, so memory stays bounded whatever clients send.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["Memo"]


class Memo(dict[K, V]):
    """``memo[key]`` is ``compute(key)``, computed on the first lookup and kept (at most ``limit`` entries).

    Args:
        compute: Makes the value for a key. An exception it raises propagates and nothing is kept.
        limit: Entries kept at most; the memo is cleared when a new key would exceed it.
    """

    __slots__ = ("_compute", "_limit")

    def __init__(self, compute: Callable[[K], V], limit: int) -> None:
        super().__init__()
        if limit < 1:
            raise ValueError(f"a Memo needs a positive limit, got {limit}")
        self._compute = compute
        self._limit = limit

    def __missing__(self, key: K) -> V:
        value = self._compute(key)
        if len(self) >= self._limit:
            self.clear()
        self[key] = value
        return value
