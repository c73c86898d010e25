"""SOW query planning: topic selection, filter, key lookups, OrderBy, top_n/skip_n and batching.

A plan is built synchronously in one engine step (snapshot taken, subscription registered for
sow_and_subscribe), then streamed by the session at the client's pace.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from broker.errors import CommandError
from broker.sow.record import SowRecord
from broker.sow.storage import Snapshot
from broker.sow.topic import SowTopic


@dataclass
class QueryPart:
    """The records one SOW topic contributes to a query."""

    topic: SowTopic
    snapshot: Snapshot


@dataclass
class QueryPlan:
    """A prepared SOW query: what to scan and how to shape the result."""

    parts: list[QueryPart]
    predicate: Any = None
    keys: list[str] | None = None
    order_by: Any = None
    top_n: int | None = None
    skip_n: int = 0
    now_ns: int = 0

    def close(self) -> None:
        """Release the snapshots."""
        for part in self.parts:
            part.snapshot.close()

    def records(self) -> Iterator[tuple[SowTopic, SowRecord, Any]]:
        """The result records in order, after skip_n and top_n."""
        stream = (
            (part.topic, rec, msg)
            for part in self.parts
            for rec, msg in part.topic.query(
                part.snapshot, predicate=self.predicate, keys=self.keys, now_ns=self.now_ns
            )
        )
        if self.order_by is not None:
            limit = None if self.top_n is None else self.skip_n + self.top_n
            key = self.order_by.sort_key
            if limit is not None:
                ordered = heapq.nsmallest(limit, stream, key=lambda t: key(t[2]))
            else:
                ordered = sorted(stream, key=lambda t: key(t[2]))
            stream = iter(ordered)
        stop = None if self.top_n is None else self.skip_n + self.top_n
        yield from islice(stream, self.skip_n, stop)


def parse_int_option(options: dict[str, str], name: str) -> int | None:
    """An integer option such as ``top_n=10`` from the ``o`` field."""
    if name not in options:
        return None
    try:
        value = int(options[name])
    except ValueError:
        raise CommandError("invalid options", f"option {name}={options[name]!r} is not an integer") from None
    if value < 0:
        raise CommandError("invalid options", f"option {name} must not be negative")
    return value


def parse_options(text: str | None) -> tuple[frozenset[str], dict[str, str]]:
    """Split ``o`` into bare words (``oof``, ``replace``) and ``name=value`` pairs (``top_n=5``)."""
    words: set[str] = set()
    pairs: dict[str, str] = {}
    if not text:
        return frozenset(), pairs
    depth = 0
    part = []
    parts = []
    for ch in text:  # commas inside [...] (projection=[/a,/b]) do not split
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(part))
            part = []
        else:
            part.append(ch)
    parts.append("".join(part))
    for p in parts:
        p = p.strip()
        if not p:
            continue
        if "=" in p:
            name, _, value = p.partition("=")
            pairs[name.strip()] = value.strip()
        else:
            words.add(p)
    return frozenset(words), pairs
