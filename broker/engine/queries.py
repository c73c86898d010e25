"""SOW query planning: topic selection, filter, key lookups, OrderBy, top_n/skip_n and batching.

A plan is built synchronously in one engine step (snapshot taken, subscription registered for
sow_and_subscribe), then streamed by the session at the client's pace.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.engine.acks import requested_acks
from broker.engine.aggregate import AggregatePlan, aggregation_of
from broker.engine.topics import TopicPattern
from broker.errors import CommandError
from broker.sow.record import RECORD_HEAD, SowRecord
from broker.sow.storage import Snapshot
from broker.sow.topic import SowTopic, check_batch_size
from broker.txlog.bookmarks import parse_timestamp


@dataclass
class QueryPart:
    """The records one SOW topic contributes to a query.

    Attributes:
        topic: The SOW topic.
        snapshot: The consistent view the query reads.
        keys: The keys fetched instead of scanning (from an equality filter on the key fields), or
            ``None`` when the topic is scanned.
    """

    topic: SowTopic
    snapshot: Snapshot
    keys: list[str] | None = None


#: Marks a point between results where a caller streaming on the event loop may let others run.
PAUSE = None
#: Records read between two :data:`PAUSE` marks of a scan (a few hundred microseconds of work).
PAUSE_EVERY = 256
#: Records sorted in one step of a full OrderBy sort (a few milliseconds); the runs are merged lazily.
SORT_RUN = 8192
#: ``skip_n + top_n`` up to which an OrderBy query keeps only that many candidates (pruned as it scans);
#: larger ones sort everything.
MAX_HEAP_TOP = 4096
#: No sort key yet (``None`` can be one).
_NONE: Any = object()

#: A result record as stored: ``(topic, key, value, message)`` (see :meth:`QueryPlan.rows`).
Row = tuple[SowTopic, bytes, bytes, Any]


@dataclass
class QueryPlan:
    """A prepared SOW query: what to read and how to shape the result.

    Results stream: without OrderBy, records are read, filtered and handed out one at a time (the
    session batches them), so memory does not grow with the result. OrderBy holds the matching records
    once (their data, not their parsed messages), or only ``skip_n + top_n`` of them with ``top_n``.

    Attributes:
        matched: Records that passed the filter so far (``topic_matches``); exact once
            :meth:`records` is exhausted when nothing cut the scan short: with ``top_n`` and no
            OrderBy the scan stops early unless ``count_all`` is set.
        returned: Records handed out so far (``records_returned``).
    """

    parts: list[QueryPart]
    predicate: Any = None
    keys: list[str] | None = None
    order_by: Any = None
    top_n: int | None = None
    skip_n: int = 0
    now_ns: int = 0
    as_of_ns: int | None = None
    count_all: bool = False
    matched: int = field(default=0, init=False)
    returned: int = field(default=0, init=False)

    @property
    def lookups(self) -> bool:
        """Whether every part is served by key lookups (no scan at all)."""
        return self.keys is not None or all(p.keys is not None for p in self.parts)

    def lookup_count(self) -> int | None:
        """How many keys the plan fetches when it does not scan (:attr:`lookups`), else ``None``."""
        if self.keys is not None:
            return len(self.keys) * len(self.parts)
        if not self.lookups:
            return None
        return sum(len(p.keys or ()) for p in self.parts)

    def close(self) -> None:
        """Release the snapshots."""
        for part in self.parts:
            part.snapshot.close()

    def rows(self) -> Iterator[Row | None]:
        """The result records as stored, in order, after skip_n and top_n: ``(topic, key, value, message)``
        with ``key`` and ``value`` the stored bytes and ``message`` the lazy message the filter or OrderBy
        read (``None`` when neither did); :data:`PAUSE` (``None``) at least every :data:`PAUSE_EVERY` records
        read and between the steps of a sort.

        The query's hot path, meant for a worker thread (:mod:`broker.server.querystream`): it reads only the
        snapshots, the filter and the OrderBy, never state the event loop changes, and builds no
        :class:`SowRecord`. The pauses let the thread notice a cancelled query during a scan that matches
        nothing. Without OrderBy the order is by topic (in configuration order), then by SOW key. With OrderBy
        the sort is stable (ties keep that order); ``top_n`` keeps only the best ``skip_n + top_n``
        candidates, and a record that cannot beat the worst of them is dropped as it is read.

        Counts the query in each topic's statistics when called (on the event loop), not when iterated.
        """
        for part in self.parts:
            part.topic.stats.queries += 1
        return self._rows()

    def _rows(self) -> Iterator[Row | None]:
        stream = self._scan()
        stop = None if self.top_n is None else self.skip_n + self.top_n
        if self.order_by is not None:
            stream = yield from self._ordered(stream, stop)
        limit = self.top_n
        if limit is None and not self.skip_n:  # every match, as it comes: no per-record bookkeeping here
            yield from stream
            self.returned = self.matched
            return
        # Past top_n the scan goes on only to count topic_matches (count_all, as a stats ack reports it).
        count_on = self.count_all and self.order_by is None
        if limit == 0 and not count_on:
            return
        skipped = 0
        for item in stream:
            if item is PAUSE:
                yield PAUSE
                continue
            if skipped < self.skip_n:
                skipped += 1
                continue
            if limit is not None and self.returned >= limit:
                continue  # counting only
            self.returned += 1
            yield item
            if limit is not None and self.returned >= limit and not count_on:
                return

    def _scan(self) -> Iterator[Row | None]:
        """Every record that passes expiry and the filter, in topic then key order, with pauses.

        The innermost loop of every query (a million turns for a million records): the stored value's header
        is unpacked inline rather than through :class:`SowRecord`, and the filter's bare ``match`` is called.
        """
        unpack, head = RECORD_HEAD.unpack_from, RECORD_HEAD.size
        predicate = getattr(self.predicate, "match", self.predicate)
        needs_message = predicate is not None or self.order_by is not None
        now_ns = self.now_ns
        n = 0
        for part in self.parts:
            topic = part.topic
            lazy = topic.message_type.lazy
            keys = self.keys if self.keys is not None else part.keys
            for key, value in topic.stored(part.snapshot, keys):
                n += 1
                if n == PAUSE_EVERY:
                    n = 0
                    yield PAUSE
                _ts, _seq, expire_at, lbm, lx = unpack(value)
                if now_ns and expire_at and expire_at <= now_ns:
                    continue
                if not needs_message:
                    self.matched += 1
                    yield topic, key, value, None
                    continue
                msg = lazy(value[head + lbm + lx:])
                if predicate is None or predicate(msg):
                    self.matched += 1
                    yield topic, key, value, msg

    def records(self) -> Iterator[tuple[SowTopic, SowRecord, Any]]:
        """``(topic, record, message)`` for the result records in order, after skip_n and top_n (the
        order of :meth:`rows`; ``message`` is a lazy wrapper of the record data)."""
        return (item for item in self.steps() if item is not PAUSE)

    def steps(self) -> Iterator[tuple[SowTopic, SowRecord, Any] | None]:
        """:meth:`records`, with the :data:`PAUSE` marks of :meth:`rows`: for callers that stream on the event
        loop in slices (a query whose records are tested one by one against loop state: the difference a
        replacing subscription sends)."""
        decode = SowRecord.decode
        for item in self.rows():
            if item is PAUSE:
                yield PAUSE
                continue
            topic, key, value, msg = item
            rec = decode(key.decode(), value)
            yield topic, rec, msg if msg is not None else topic.message_type.lazy(rec.data)

    def _ordered(self, stream: Iterator[Row | None], stop: int | None) -> Generator[None, None, Iterable[Row]]:
        """Sort the matches by OrderBy (yielding :data:`PAUSE` between steps); returns them in order.

        Entries are ``(key, tie-break, topic, key, value)``: the parsed message is dropped so the held result
        is the stored value once, and the tie-break keeps the sort stable. With ``stop`` (``skip_n + top_n``)
        up to :data:`MAX_HEAP_TOP` only the best ``stop`` are kept: once that many are held, a record whose
        sort key is not below the worst of them cannot enter (a later record loses ties) and costs one
        comparison; the candidates are pruned back to ``stop`` whenever they reach twice that.
        """
        assert self.order_by is not None
        sort_key = self.order_by.sort_key
        counter = 0
        held: list[tuple[Any, int, SowTopic, bytes, bytes]] = []
        bounded = stop is not None and stop <= MAX_HEAP_TOP
        prune_at = max(2 * stop, SORT_RUN) if bounded and stop is not None else 0
        worst: Any = _NONE
        for item in stream:
            if item is PAUSE:
                yield PAUSE
                continue
            topic, key, value, msg = item
            sk = sort_key(msg)
            if worst is not _NONE and not sk < worst:
                continue
            held.append((sk, counter, topic, key, value))
            counter += 1
            if bounded and len(held) >= prune_at:
                held = heapq.nsmallest(stop, held)  # the best stop so far; bounded memory and step
                if stop and len(held) == stop:
                    worst = held[-1][0]
                yield PAUSE
        if bounded:
            return ((t, k, v, None) for _s, _i, t, k, v in heapq.nsmallest(stop, held))
        runs = []
        for start in range(0, len(held), SORT_RUN):
            runs.append(sorted(held[start:start + SORT_RUN]))
            yield PAUSE
        del held
        return ((t, k, v, None) for _s, _i, t, k, v in heapq.merge(*runs))


def plan_query(
    header: Mapping[str, Any],
    sow_topics: Mapping[str, SowTopic],
    compile_filter: Callable[[str | None], Any],
    compile_order_by: Callable[[str], Any],
    *,
    now_ns: int | None = None,
) -> tuple[QueryPlan, int]:
    """Plan a ``sow`` (or the query half of sow_and_subscribe) from its decoded header.

    Reads ``topic`` (literal or regex over the SOW topics), ``filter``, ``sow_keys``, ``batch_size``,
    ``top_n`` (header or ``o`` option), ``skip_n`` (header or ``o`` option; needs ``top_n``),
    ``orderby`` and whether a ``stats`` ack was requested. Takes the storage snapshots now, so the
    result is the SOW as of this engine step.

    Args:
        header: The command header.
        sow_topics: The configured SOW topics by name.
        compile_filter: Filter text (or ``None``) -> compiled filter (or ``None``).
        compile_order_by: OrderBy text -> compiled OrderBy.
        now_ns: The query time (records expired by then are skipped); now by default.

    Returns:
        The plan and the effective batch size.

    Raises:
        CommandError: bad regex topic, bad filter, bad OrderBy, BatchSize out of range, bad or
            inconsistent top_n/skip_n.
    """
    pattern = TopicPattern.compile(header.get("topic") or "")
    topics = [t for name, t in sow_topics.items() if pattern.matches(name)]
    _words, pairs = parse_options(header.get("options"))
    batch_size = check_batch_size(header.get("batch_size"))
    top_n = header.get("top_n")
    if top_n is None:
        top_n = parse_int_option(pairs, "top_n")
    elif top_n < 0:
        raise CommandError("invalid options", "top_n must not be negative")
    skip_n = header.get("skip_n")
    if skip_n is None:
        skip_n = parse_int_option(pairs, "skip_n")
    elif skip_n < 0:
        raise CommandError("invalid options", "skip_n must not be negative")
    if skip_n and top_n is None:
        raise CommandError("invalid options", "skip_n requires top_n: add top_n=N to the options")
    aggregation = aggregation_of(header, pairs)
    order_text = header.get("order_by")
    order_by = compile_order_by(order_text) if order_text else None
    predicate = compile_filter(header.get("filter"))
    keys = None
    sow_keys = header.get("sow_keys")
    if sow_keys:
        keys = [k.strip() for k in str(sow_keys).split(",") if k.strip()]
    now = time.time_ns() if now_ns is None else now_ns
    as_of = historical_time(header)
    if as_of is not None and header.get("command") == "sow":
        for t in topics:
            if t.history is None:
                raise CommandError(
                    "invalid topic", f"topic {t.name!r} keeps no history, so it cannot answer a historical "
                    "query (a sow with a timestamp bookmark): add <History><Window>...</Window></History> to "
                    "its <SOW><Topic>, or query without a bookmark")
    parts = []
    try:
        for t in topics:
            lookup = t.lookup_keys(predicate) if keys is None and predicate is not None else None
            if as_of is not None and t.history is not None:
                snap = t.history.snapshot(as_of, now)
            else:
                snap = t.storage.snapshot()
            parts.append(QueryPart(t, snap, lookup))
    except BaseException:
        for part in parts:
            part.snapshot.close()
        raise
    if aggregation is not None:  # order and limits apply to the aggregated records
        inner = QueryPlan(parts=parts, predicate=predicate, keys=keys,
                          now_ns=now if as_of is None else min(now, as_of), as_of_ns=as_of)
        return AggregatePlan(inner, aggregation, order_by, top_n, skip_n or 0), batch_size  # type: ignore[return-value]
    plan = QueryPlan(
        parts=parts, predicate=predicate, keys=keys, order_by=order_by, top_n=top_n, skip_n=skip_n or 0,
        # Historical: records that had expired by the query's time are not part of its answer.
        now_ns=now if as_of is None else min(now, as_of),
        as_of_ns=as_of,
        count_all="stats" in requested_acks(header),
    )
    return plan, batch_size


def historical_time(header: Mapping[str, Any]) -> int | None:
    """The point in time (ns) of a historical query: the timestamp in its ``bookmark`` header.

    Returns ``None`` without a bookmark, and for a sow_and_subscribe whose bookmark is not a timestamp (a
    bookmark subscription's ``P|S|``, EPOCH, NOW: not a point in time the SOW can answer).

    Raises:
        CommandError: a ``sow`` whose bookmark is not a timestamp ``YYYYmmddTHHMMSS[.ffffff][Z]``.
    """
    text = str(header.get("bookmark") or "").strip()
    if not text:
        return None
    if len(text) >= 15 and text[8:9] == "T" and "," not in text:
        return parse_timestamp(text)
    if header.get("command") == "sow":
        raise CommandError(
            "invalid bookmark", f"bookmark {text!r}: a historical SOW query takes a UTC timestamp "
            "YYYYmmddTHHMMSS[.ffffff][Z] (the SOW as of that time)")
    return None


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
