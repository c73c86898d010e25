"""A bounded memo: a dict that computes what it is missing and forgets everything past a size.

The hot paths look the same small set of things up over and over (a publisher's topic, a filter's
text, an ack list, a record's second), while the keys come from clients and are unbounded in principle.
A :class:`Memo` hit is a plain dict lookup (no Python call); a miss calls ``compute(key)`` once, and a
memo that reaches its limit is emptied first, so memory stays bounded whatever clients send.

When values differ widely in size (compiled filters: a few KB for ``/id = 1``, megabytes for a 32 KiB
filter), an entry count does not bound memory. Give a ``cost`` function and a ``max_cost`` and the memo
also keeps the sum of its entries' costs within ``max_cost`` (a value costing more than that on its own
is returned but not kept).
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
        cost: ``cost(key, value)``, what keeping an entry costs (e.g. estimated bytes); optional.
        max_cost: The most the kept entries may cost in total (needed with ``cost``); the memo is cleared
            when a new entry would exceed it, and an entry costing more than ``max_cost`` alone is not kept.
    """

    __slots__ = ("_compute", "_cost", "_limit", "_max_cost", "_total")

    def __init__(
        self,
        compute: Callable[[K], V],
        limit: int,
        cost: Callable[[K, V], int] | None = None,
        max_cost: int | None = None,
    ) -> None:
        super().__init__()
        if limit < 1:
            raise ValueError(f"a Memo needs a positive limit, got {limit}")
        if (cost is None) != (max_cost is None) or (max_cost is not None and max_cost < 1):
            raise ValueError(f"a Memo with a cost needs a positive max_cost, got cost={cost!r}, max_cost={max_cost!r}")
        self._compute = compute
        self._limit = limit
        self._cost = cost
        self._max_cost = max_cost or 0
        self._total = 0

    @property
    def total_cost(self) -> int:
        """The summed cost of the kept entries (0 without a ``cost`` function)."""
        return self._total

    def clear(self) -> None:
        """Forget every entry (and their cost)."""
        super().clear()
        self._total = 0

    def __missing__(self, key: K) -> V:
        return self.keep(key, self._compute(key))

    def keep(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` under the memo's bounds (what a miss does once it has computed the
        value: for a caller that computed it elsewhere, e.g. in a worker thread). Returns ``value``."""
        if key in self:
            return self[key]
        if self._cost is None:
            if len(self) >= self._limit:
                self.clear()
            self[key] = value
            return value
        cost = self._cost(key, value)
        if cost > self._max_cost:
            return value  # too big to keep at all; clearing everything else for it would not help
        if len(self) >= self._limit or self._total + cost > self._max_cost:
            self.clear()
        self[key] = value
        self._total += cost
        return value
