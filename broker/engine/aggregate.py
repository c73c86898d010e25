"""Aggregated SOW queries (seed 000): a ``sow`` with ``grouping=[...]`` and ``projection=[...]`` returns one record
per group, as a View with that definition would.

The query's filter (and its point in time, with a historical bookmark) selects the records; they are folded
into groups (:mod:`broker.expr._projection`) by :meth:`AggregatePlan.prepare`, which the session runs in a
worker thread (the snapshot is a consistent read-only view, so publishes carry on meanwhile); then OrderBy,
top_n and skip_n apply to the aggregated records.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from broker.errors import CommandError, FilterError
from broker.expr._projection import Aggregation, compile_aggregation
from broker.sow.record import SowRecord
from broker.sow.topic import SowTopic

#: Most groups one aggregated query may hold (each costs its accumulators and its last message).
MAX_GROUPS = 1_000_000


def aggregation_of(header: Mapping[str, Any], pairs: dict[str, str]) -> Aggregation | None:
    """The aggregation a query asks for (``grouping``/``projection`` options), or ``None``.

    Raises:
        CommandError: ``invalid options``: only one of the two, not a ``sow``, or an entry that does not parse.
    """
    if "grouping" not in pairs and "projection" not in pairs:
        return None
    if header.get("command") != "sow":
        raise CommandError("invalid options", "grouping and projection (an aggregated query) apply to a sow "
                           "command only")
    try:
        return compile_aggregation(pairs.get("grouping"), pairs.get("projection"))
    except FilterError as exc:
        raise CommandError("invalid options", f"aggregated query: {exc.detail}") from None


def _row_key(key: tuple[Any, ...]) -> str:
    return str(int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big"))


def _steps(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def build_json(row: list[tuple[str, Any]]) -> bytes:
    """A JSON object from ``(path, value)`` pairs (``/a/b`` nests); NULL values are left out."""
    doc: dict[str, Any] = {}
    for path, value in row:
        if value is None:
            continue
        steps = _steps(path)
        node = doc
        for step in steps[:-1]:
            nxt = node.get(step)
            if not isinstance(nxt, dict):
                nxt = node[step] = {}
            node = nxt
        node[steps[-1]] = value
    return json.dumps(doc, separators=(",", ":")).encode()


def build_xml(row: list[tuple[str, Any]]) -> bytes:
    """An XML document from ``(path, value)`` pairs whose first step is the root element (``/Order/qty``)."""
    roots = {_steps(p)[0] for p, _ in row if _steps(p)}
    if len(roots) != 1:
        raise CommandError("invalid options", "an aggregated XML query projects fields under one root element, "
                           f"e.g. AS /Order/total; these name {sorted(roots)}")
    root = etree.Element(roots.pop())
    for path, value in row:
        steps = _steps(path)
        if value is None or len(steps) < 2:
            continue
        node = root
        for step in steps[1:]:
            child = node.find(step)
            node = child if child is not None else etree.SubElement(node, step)
        node.text = str(int(value)) if isinstance(value, bool) else str(value)
    data: bytes = etree.tostring(root, encoding="utf-8")
    return data


@dataclass
class AggregatePlan:
    """A query plan whose records are the groups of another plan's records (the session streams it like a
    :class:`~broker.engine.queries.QueryPlan`).

    Attributes:
        plan: The plan selecting the records (filter, point in time), with no order or limits.
        aggregation: The compiled grouping and projection.
    """

    plan: Any
    aggregation: Aggregation
    order_by: Any = None
    top_n: int | None = None
    skip_n: int = 0
    returned: int = field(default=0, init=False)
    _rows: list[tuple[SowTopic, SowRecord, Any]] | None = field(default=None, init=False)

    @property
    def matched(self) -> int:
        """Records that passed the filter (folded into groups)."""
        return int(self.plan.matched)

    @property
    def parts(self) -> list[Any]:
        """The underlying plan's parts."""
        return list(self.plan.parts)

    @property
    def now_ns(self) -> int:
        """The query's time."""
        return int(self.plan.now_ns)

    def prepare(self) -> None:
        """Read the selected records and build the aggregated ones (long work: run it in a worker thread).

        Raises:
            CommandError: more than :data:`MAX_GROUPS` groups; topics of different message types.
        """
        if self._rows is not None:
            return
        types = {p.topic.message_type.name for p in self.plan.parts}
        if len(types) > 1:
            raise CommandError("invalid options", "an aggregated query reads topics of one message type; the "
                               f"topic pattern matches {sorted(types)}")
        if not self.plan.parts:
            self._rows = []
            return
        topic = self.plan.parts[0].topic
        mt = topic.message_type
        if not mt.filterable:
            raise CommandError("invalid options", f"topic {topic.name!r} holds {mt.name} messages, whose fields "
                               "cannot be read: it cannot be aggregated")
        items = ((msg, rec.timestamp_ns) for _t, rec, msg in self.plan.records())
        try:
            groups = self.aggregation.fold(items, typed=mt.name != "xml", max_groups=MAX_GROUPS)
        except FilterError as exc:
            raise CommandError("invalid options", f"aggregated query: {exc.detail}") from None
        build = build_xml if mt.name == "xml" else build_json
        rows = []
        for key, group in groups.items():
            rows.append((topic, SowRecord(_row_key(key), build(self.aggregation.row(group)), group.timestamp_ns),
                         None))
        if self.order_by is not None:
            sort_key = self.order_by.sort_key
            counter = itertools.count()
            keyed = [(sort_key(mt.lazy(r[1].data)), next(counter), r) for r in rows]
            stop = None if self.top_n is None else self.skip_n + self.top_n
            ordered = heapq.nsmallest(stop, keyed) if stop is not None else sorted(keyed)
            rows = [r for _k, _i, r in ordered]
        self._rows = rows

    def records(self) -> Iterator[tuple[SowTopic, SowRecord, Any]]:
        """The aggregated records, after OrderBy, skip_n and top_n."""
        self.prepare()
        assert self._rows is not None
        stop = None if self.top_n is None else self.skip_n + self.top_n
        for item in itertools.islice(self._rows, self.skip_n, stop):
            self.returned += 1
            yield item

    def close(self) -> None:
        """Release the underlying plan's snapshots."""
        self.plan.close()

