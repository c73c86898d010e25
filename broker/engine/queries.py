"""SOW query planning: topic selection, filter, key lookups, OrderBy, top_n/skip_n and batching.

A plan is built synchronously in one engine step (snapshot taken, subscription registered for
sow_and_subscribe), then streamed by the session at the client's pace.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any

import orjson

from broker import speedups
from broker.engine.acks import requested_acks
from broker.engine.aggregate import AggregatePlan, aggregation_of
from broker.engine.topics import TopicPattern
from broker.errors import CommandError
from broker.messagetypes import top_level_name
from broker.messagetypes._json import loads as json_loads
from broker.sow.record import RECORD_HEAD, SowRecord
from broker.sow.storage import Snapshot
from broker.sow.topic import SowTopic, check_batch_size
from broker.txlog.bookmarks import parse_timestamp

if TYPE_CHECKING:
    from broker.expr import Filter, OrderBy
    from broker.messagetypes import Message, MessageType


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
    predicate: Filter | None = None
    keys: list[str] | None = None
    order_by: OrderBy | None = None
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

    def rows(self, *, stable: bool = False) -> Iterator[Row | None]:
        """The result records as stored, in order, after skip_n and top_n: ``(topic, key, value, message)``
        with ``key`` and ``value`` the stored bytes and ``message`` the message the filter read when
        ``stable`` (``None`` when no filter read it, and always without ``stable``, which lets a JSON scan
        reuse one message object; always ``None`` with OrderBy); :data:`PAUSE` (``None``) at least every
        :data:`PAUSE_EVERY` records read and between the steps of a sort.

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
        return self._rows(stable)

    def _rows(self, stable: bool) -> Iterator[Row | None]:
        stream: Iterable[Row | None] = self._scan(stable)
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

    def _scan(self, stable: bool) -> Iterator[Row | None]:
        """Every record that passes expiry and the filter, in topic then key order, with pauses.

        The innermost loop of every query (a million turns for a million records): the stored value's header
        is unpacked inline rather than through :class:`SowRecord`, and the filter's bare ``match`` is called.
        Unless ``stable``, a JSON topic's filter reads one reused :class:`JsonFields` (its document replaced
        per record, no object built) and the rows carry no message. With OrderBy a row carries the record's
        sort key instead of its message (:meth:`_ordered` sorts by it).
        """
        unpack, head = RECORD_HEAD.unpack_from, RECORD_HEAD.size
        flt = self.predicate
        predicate = flt.match if flt is not None else None  # the bare match: no __call__ frame per record
        needs_message = predicate is not None or self.order_by is not None
        sort_key = self.order_by.sort_key if self.order_by is not None else None
        now_ns = self.now_ns
        loads, bad_json = json_loads, orjson.JSONDecodeError
        for part in self.parts:
            topic = part.topic
            lazy = topic.message_type.lazy
            fields = JsonFields.reader(topic.message_type, self._paths())
            cursor = fields(b"{}") if fields is not None and not stable else None
            # The filter as a test of the decoded object itself (dict.get per field, no message object).
            test = flt.object_match(fields.names) if fields is not None and cursor is not None and flt is not None \
                else None
            members = tuple(sorted(set(fields.names.values()))) if fields is not None and test is not None else None
            keys = self.keys if self.keys is not None else part.keys
            stored = topic.stored(part.snapshot, keys)
            runs = iter(lambda: list(islice(stored, PAUSE_EVERY)), [])  # noqa: B023 - consumed at once
            if test is not None and sort_key is None and cursor is not None and predicate is not None:
                # The filtered scan of a JSON topic: each run tested in one call (compiled when built).
                def undecided(data: bytes, doc: object, cursor: JsonFields = cursor,
                              predicate: Callable[[Any], bool] = predicate) -> bool:
                    cursor._data, cursor._doc = data, doc
                    return predicate(cursor)

                for run in runs:
                    yield PAUSE
                    found = match_run(run, topic, test, undecided, now_ns, loads, bad_json, _NONE, unpack, members)
                    self.matched += len(found)
                    yield from found
                continue
            # Runs of PAUSE_EVERY records, each read by islice in C: no per-record counting for the pauses.
            for run in runs:
                yield PAUSE
                for key, value in run:
                    _ts, _seq, expire_at, lbm, lx = unpack(value)
                    if now_ns and expire_at and expire_at <= now_ns:
                        continue
                    if not needs_message:
                        self.matched += 1
                        yield topic, key, value, None
                        continue
                    data = value[head + lbm + lx:]
                    if cursor is not None:
                        try:
                            doc = loads(data)
                        except bad_json:
                            doc = _NONE
                        if test is not None and doc.__class__ is dict:
                            if not test(doc):
                                continue
                        else:
                            cursor._data, cursor._doc = data, doc
                            if predicate is not None and not predicate(cursor):
                                continue
                        self.matched += 1
                        if sort_key is None:
                            yield topic, key, value, None
                        else:  # the sort key now: the cursor moves on with the next record
                            cursor._data, cursor._doc = data, doc
                            yield topic, key, value, sort_key(cursor)
                        continue
                    msg = fields(data) if fields is not None else lazy(data)
                    if predicate is None or predicate(msg):
                        self.matched += 1
                        yield topic, key, value, msg if sort_key is None else sort_key(msg)

    def _paths(self) -> list[str]:
        """Every field path the filter and the OrderBy read."""
        paths = list(self.predicate.paths) if self.predicate is not None else []
        if self.order_by is not None:
            paths += [path for path, _desc in self.order_by.fields]
        return paths

    def records(self) -> Iterator[tuple[SowTopic, SowRecord, Message]]:
        """``(topic, record, message)`` for the result records in order, after skip_n and top_n (the
        order of :meth:`rows`; ``message`` is a lazy wrapper of the record data)."""
        return (item for item in self.steps() if item is not PAUSE)

    def steps(self) -> Iterator[tuple[SowTopic, SowRecord, Message] | None]:
        """:meth:`records`, with the :data:`PAUSE` marks of :meth:`rows`: for callers that stream on the event
        loop in slices (a query whose records are tested one by one against loop state: the difference a
        replacing subscription sends)."""
        decode = SowRecord.decode
        for item in self.rows(stable=True):
            if item is PAUSE:
                yield PAUSE
                continue
            topic, key, value, msg = item
            rec = decode(key.decode(), value)
            yield topic, rec, msg if msg is not None else topic.message_type.lazy(rec.data)

    def _ordered(self, stream: Iterable[Row | None], stop: int | None) -> Generator[None, None, Iterable[Row]]:
        """Sort the matches by OrderBy (yielding :data:`PAUSE` between steps); returns them in order.

        Entries are ``(key, tie-break, topic, key, value)``: the parsed message is dropped so the held result
        is the stored value once, and the tie-break keeps the sort stable. With ``stop`` (``skip_n + top_n``)
        up to :data:`MAX_HEAP_TOP` only the best ``stop`` are kept: once that many are held, a record whose
        sort key is not below the worst of them cannot enter (a later record loses ties) and costs one
        comparison; the candidates are pruned back to ``stop`` whenever they reach twice that.
        """
        counter = 0
        held: list[tuple[Any, int, SowTopic, bytes, bytes]] = []
        bounded = stop is not None and stop <= MAX_HEAP_TOP
        keep = stop if stop is not None else 0
        prune_at = max(2 * keep, SORT_RUN) if bounded else 0
        worst: Any = _NONE
        for item in stream:
            if item is PAUSE:
                yield PAUSE
                continue
            topic, key, value, sk = item
            if worst is not _NONE and not sk < worst:
                continue
            held.append((sk, counter, topic, key, value))
            counter += 1
            if bounded and len(held) >= prune_at:
                held = heapq.nsmallest(keep, held)  # the best stop so far; bounded memory and step
                if stop and len(held) == stop:
                    worst = held[-1][0]
                yield PAUSE
        if bounded:
            return ((t, k, v, None) for _s, _i, t, k, v in heapq.nsmallest(keep, held))
        runs = []
        for start in range(0, len(held), SORT_RUN):
            runs.append(sorted(held[start:start + SORT_RUN]))
            yield PAUSE
        del held
        return ((t, k, v, None) for _s, _i, t, k, v in heapq.merge(*runs))


def _match_run(run: list[tuple[bytes, bytes]], topic: SowTopic, test: Callable[[dict[str, Any]], bool],
               undecided: Callable[[bytes, Any], bool], now_ns: int, loads: Callable[[bytes], Any],
               bad_json: type[Exception], none: Any, unpack: Callable[[bytes], tuple[int, ...]],
               members: tuple[str, ...] | None = None) -> list[Row]:
    """The rows ``(topic, key, value, None)`` of one run of a scan (``(key, stored value)`` pairs) whose record
    is not expired at ``now_ns`` (0: no expiry) and passes the filter: ``test(doc)`` when the data decodes
    (``loads``) to an object, else ``undecided(data, doc)`` (``doc`` is ``none`` when ``loads`` raised
    ``bad_json``). The innermost loop of a filtered JSON query; ``broker/speedups/scanrun.pyx`` is its
    compiled twin, which makes the same calls in the same order, except that it may give ``test`` only the
    ``members`` it reads (the top-level names of the filter) of a flat object, read without ``loads``.
    """
    head = RECORD_HEAD.size
    out: list[Row] = []
    for key, value in run:
        _ts, _seq, expire_at, lbm, lx = unpack(value)
        if now_ns and expire_at and expire_at <= now_ns:
            continue
        data = value[head + lbm + lx:]
        try:
            doc = loads(data)
        except bad_json:
            doc = none
        if test(doc) if doc.__class__ is dict else undecided(data, doc):
            out.append((topic, key, value, None))
    return out


_scanrun = speedups.load("scanrun")
#: One run of a filtered JSON scan: the compiled twin when built, else :func:`_match_run`.
match_run = _scanrun.match_run if _scanrun is not None else _match_run


class JsonFields:
    """A stored JSON record as a scan's filter and OrderBy read it: top-level fields of the decoded document.

    A filter reads a message only through ``message.get(path)`` (and an OrderBy also through
    ``typed_values``). For a JSON topic whose filter and OrderBy read only top-level fields (``/grp``, not
    ``/a/b``, ``/a[0]`` or ``/@x``), this answers ``get`` with one ``orjson.loads`` (kept exact for integers wider than 64 bits) and one ``dict.get``: the
    same value :class:`broker.messagetypes.JsonMessage` gives (its one-step path resolution is that
    ``dict.get``, ``None`` when the document is not an object), at a third of the cost of its lazy wrapper,
    cache and path resolution, which were half of a filtered scan's time. A body ``orjson`` refuses, and any
    other path, are answered by the message type's own message, so every answer stays exact.

    Args:
        data: The record's message data.
    """

    __slots__ = ("_data", "_doc")
    typed_values = True

    #: path -> top-level field name, for the paths the current scan reads.
    names: dict[str, str]
    #: The topic's message type's lazy wrapper, for what this class does not answer itself.
    lazy: Callable[[bytes], Any]

    def __init__(self, data: bytes) -> None:
        self._data = data
        try:
            self._doc: Any = json_loads(data)
        except orjson.JSONDecodeError:
            self._doc = _NONE

    def get(self, path: str) -> Any:
        """The value at ``path`` (see :meth:`broker.messagetypes.Message.get`)."""
        name = self.names.get(path)
        doc = self._doc
        if name is None or doc is _NONE:
            return self.lazy(self._data).get(path)
        return doc.get(name) if doc.__class__ is dict else None

    def __getattr__(self, name: str) -> Any:
        """Anything else a reader of the message asks (``data``, ``document``...): the message type's own."""
        return getattr(self.lazy(self._data), name)

    @staticmethod
    def reader(message_type: MessageType, paths: Iterable[str]) -> type[JsonFields] | None:
        """A ``data -> message`` for a scan reading ``paths`` of ``message_type``'s records, or ``None`` when
        the message type's lazy wrapper must be used (not JSON, or a path deeper than one field)."""
        if message_type.name != "json" or not message_type.filterable:
            return None
        names: dict[str, str] = {}
        for path in paths:
            name = top_level_name(path)
            if name is None:
                return None
            names[path] = name
        if not names:
            return None
        return type("JsonFields", (JsonFields,), {"names": names, "lazy": staticmethod(message_type.lazy),
                                                   "__slots__": ()})


def plan_query(
    header: Mapping[str, Any],
    sow_topics: Mapping[str, SowTopic],
    compile_filter: Callable[[str | None], Filter | None],
    compile_order_by: Callable[[str], OrderBy],
    *,
    now_ns: int | None = None,
) -> tuple[QueryPlan | AggregatePlan, int]:
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
        The plan (an :class:`~broker.engine.aggregate.AggregatePlan` for a ``sow`` with ``grouping`` and
        ``projection``) and the effective batch size.

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
        return AggregatePlan(inner, aggregation, order_by, top_n, skip_n or 0), batch_size
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
    part: list[str] = []
    parts: list[str] = []
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
