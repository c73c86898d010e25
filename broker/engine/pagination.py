"""Paginated subscriptions: ``top_n``/``skip_n`` windows over a sorted result set that windows share.

A sow_and_subscribe with both ``top_n`` and ``skip_n`` sees only the records at positions
``[skip_n, skip_n + top_n)`` of the records matching its filter, sorted by its OrderBy and then by SowKey
(by SowKey alone without OrderBy). To the subscriber the topic holds only those records: one entering the
window is published, one leaving it goes out of focus (``oof``, reason ``match``, or ``deleted`` /
``expired`` when it left the topic).

Design (memory is bounded by what a window needs):

* :class:`ResultSet` (shared). For one (topic, filter, OrderBy): the sort entry ``(sort key, SowKey)`` of
  every matching record, in a blocked sorted list (:class:`SortedEntries`), and SowKey -> entry. No
  message data is kept; an entry is a small tuple. Every window with the same topic, filter and OrderBy
  uses the same result set (reference counted; dropped with its last window). AMPS shares one result set
  per topic; the order depends on the filter and the OrderBy, so here they are part of the sharing key.
* :class:`Window` (per subscription). The SowKeys now in the window, in order: at most ``top_n`` of them.
  Nothing else is kept per subscriber, and :meth:`Pagination.close` releases it.

On every change of a record of the topic (publish, delete, expiration) each result set of the topic
moves the record's entry (bisect, plus one pass over the block lengths for the position), then every
window the change can affect (a position before the window's end) takes its slice again (O(top_n)) and
compares it with the keys it holds. The changed record is published (it entered, or changed in place) or
goes out of focus; records pushed out get an ``oof`` with their current data; records pulled in are
published with their current data, read from the SOW.

Pure: no trio, no I/O besides the SOW topic's storage reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.engine.counters import OofCounts
from broker.engine.delivery import Deliver, Delivery, deliver
from broker.errors import BrokerError
from broker.sow.record import SowRecord
from broker.sow.storage import Snapshot
from broker.sow.topic import SowTopic
from broker.stats.snapshot import PaginationStats

if TYPE_CHECKING:
    from broker.expr import OrderBy
    from broker.messagetypes import Message

#: A compiled content filter (:class:`broker.expr.Filter`, or any ``message -> bool``).
Predicate = Callable[[Any], bool]

#: Entries per block of :class:`SortedEntries`: inserts move at most ~2x this many pointers.
BLOCK = 1000


class Entry(NamedTuple):
    """One record's place in a result set: ordered by ``sort_key``, then by ``key``."""

    sort_key: Any  # the OrderBy's sort key of the record, ``()`` without OrderBy
    key: str  # the SowKey


class ShareKey(NamedTuple):
    """What windows must have in common to share a result set."""

    topic: str
    filter: str  # the filter as written
    order: str  # the OrderBy as written, ``""`` without one


class SortedEntries:
    """A sorted list of unique, comparable entries with positions, split into blocks.

    Insert and remove cost O(log n + n / BLOCK) (the last term sums block lengths for the position) where a
    flat list would move O(n) pointers; a slice costs O(n / BLOCK + length).

    Args:
        items: Initial entries (any order).
        block: Entries per block before a block is split in two.
    """

    def __init__(self, items: Iterable[Entry] = (), block: int = BLOCK) -> None:
        ordered = sorted(items)
        self._block = block
        self._blocks: list[list[Entry]] = [ordered[i : i + block] for i in range(0, len(ordered), block)]
        self._maxes: list[Entry] = [b[-1] for b in self._blocks]
        self._len = len(ordered)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Entry]:
        for block in self._blocks:
            yield from block

    def _offset(self, b: int) -> int:
        return sum(map(len, islice(self._blocks, b)))

    def add(self, item: Entry) -> int:
        """Insert ``item``; returns its position."""
        self._len += 1
        if not self._blocks:
            self._blocks.append([item])
            self._maxes.append(item)
            return 0
        b = bisect.bisect_left(self._maxes, item)
        if b == len(self._maxes):  # beyond every block: append to the last one
            b -= 1
            block = self._blocks[b]
            i = len(block)
            block.append(item)
            self._maxes[b] = item
        else:
            block = self._blocks[b]
            i = bisect.bisect_left(block, item)
            block.insert(i, item)
        position = self._offset(b) + i
        if len(block) > 2 * self._block:
            half = len(block) // 2
            self._blocks[b : b + 1] = [block[:half], block[half:]]
            self._maxes[b : b + 1] = [block[half - 1], block[-1]]
        return position

    def remove(self, item: Entry) -> int:
        """Remove ``item``; returns the position it had.

        Raises:
            KeyError: ``item`` is not present.
        """
        b = bisect.bisect_left(self._maxes, item)
        if b < len(self._blocks):
            block = self._blocks[b]
            i = bisect.bisect_left(block, item)
            if i < len(block) and block[i] == item:
                position = self._offset(b) + i
                del block[i]
                self._len -= 1
                if block:
                    self._maxes[b] = block[-1]
                else:
                    del self._blocks[b], self._maxes[b]
                return position
        raise KeyError(item)

    def slice(self, start: int, stop: int) -> list[Entry]:
        """The entries at positions ``start <= i < stop``."""
        out: list[Entry] = []
        seen = 0
        for block in self._blocks:
            n = len(block)
            if seen + n > start:
                out.extend(block[max(0, start - seen) : stop - seen])
                if seen + n >= stop:
                    break
            seen += n
        return out


@dataclass(eq=False)
class Window:
    """One paginated subscription's view: the SowKeys at positions ``[skip_n, skip_n + top_n)``.

    Attributes:
        sub: The subscription delivered to (set once it is registered).
        top_n: Records in the window.
        skip_n: Records before the window.
        keys: The SowKeys now in the window, in order (never more than ``top_n``).
        results: The shared result set the window looks into.
    """

    sub: Any
    top_n: int
    skip_n: int
    keys: list[str] = field(default_factory=list)
    results: ResultSet | None = None

    @property
    def end(self) -> int:
        """The position just after the window."""
        return self.skip_n + self.top_n


class ResultSet:
    """The sorted entries of the records of one topic that match one filter (shared by windows).

    Args:
        topic: The SOW topic.
        predicate: The compiled filter, or ``None`` for every record.
        order_by: A compiled OrderBy (``sort_key(message)``), or ``None`` for SowKey order.
    """

    def __init__(self, topic: SowTopic, predicate: Predicate | None, order_by: OrderBy | None) -> None:
        self.topic = topic
        self.predicate = predicate
        self.order_by = order_by
        self.by_key: dict[str, Entry] = {}
        self.entries = SortedEntries()
        self.windows: list[Window] = []

    def entry(self, message: Message, key: str) -> Entry:
        """The sort entry of a record."""
        return Entry(self.order_by.sort_key(message) if self.order_by is not None else (), key)

    def matches(self, message: Message) -> bool:
        """Whether a message belongs to the result set (a filter that fails to evaluate: no)."""
        if self.predicate is None:
            return True
        try:
            return bool(self.predicate(message))
        except BrokerError:
            return False

    def load(self, snapshot: Snapshot, now_ns: int) -> None:
        """Fill from a snapshot (the one the subscription's query reads, so both agree)."""
        found = [
            self.entry(msg, rec.key)
            for rec, msg in self.topic.query(snapshot, predicate=self.matches, now_ns=now_ns)
        ]
        self.by_key = {e.key: e for e in found}
        self.entries = SortedEntries(found)

    def keys(self, start: int, stop: int) -> list[str]:
        """SowKeys at positions ``start <= i < stop``."""
        return [e.key for e in self.entries.slice(start, stop)]

    def move(self, key: str, message: Message | None) -> tuple[int | None, int | None] | None:
        """Apply a change of record ``key`` (``message`` is its new state, ``None`` when it is gone).

        Returns:
            ``(old position, new position)`` (``None`` when absent before / after), or ``None`` when the
            record was not in the set and still is not.
        """
        before = self.by_key.get(key)
        now = message is not None and self.matches(message)
        if before is None and not now:
            return None
        old_pos = self.entries.remove(before) if before is not None else None
        new_pos = None
        if message is not None and now:
            entry = self.entry(message, key)
            new_pos = self.entries.add(entry)
            self.by_key[key] = entry
        else:
            del self.by_key[key]
        return old_pos, new_pos


class Pagination:
    """Every paginated subscription, grouped by the result sets they share."""

    def __init__(self) -> None:
        #: Deliveries to the windows, reusing a message's encoded header across the windows it goes to.
        self._deliver = Delivery().deliver
        self._sets: dict[ShareKey, ResultSet] = {}
        self._by_topic: dict[str, list[ResultSet]] = {}
        self._set_keys: dict[ResultSet, ShareKey] = {}  # ResultSet hashes by identity

    def open(self, *, topic: SowTopic, snapshot: Snapshot, now_ns: int, predicate: Predicate | None,
             filter_text: str, order_by: Any, top_n: int, skip_n: int) -> Window:
        """Open a window (its result set is shared, or built from ``snapshot``); set ``window.sub`` next.

        Args:
            topic: The SOW topic.
            snapshot: The query's snapshot, taken in this engine step.
            now_ns: The query time (records expired by then are left out).
            predicate: The compiled filter, or ``None``.
            filter_text: The filter as written (part of the sharing key).
            order_by: The compiled OrderBy, or ``None``.
            top_n: Records in the window.
            skip_n: Records before it.
        """
        share = ShareKey(topic.name, filter_text, order_by.text if order_by is not None else "")
        results = self._sets.get(share)
        if results is None:
            results = ResultSet(topic, predicate, order_by)
            results.load(snapshot, now_ns)
            self._sets[share] = results
            self._by_topic.setdefault(topic.name, []).append(results)
            self._set_keys[results] = share
        window = Window(sub=None, top_n=top_n, skip_n=skip_n, results=results)
        window.keys = results.keys(skip_n, window.end)
        results.windows.append(window)
        return window

    def close(self, window: Window) -> None:
        """Release a window, and its result set with its last window. Idempotent."""
        results = window.results
        if results is None:
            return
        window.results = None
        window.keys = []
        results.windows.remove(window)
        if results.windows:
            return
        share = self._set_keys.pop(results)
        del self._sets[share]
        siblings = self._by_topic[share.topic]
        siblings.remove(results)
        if not siblings:
            del self._by_topic[share.topic]

    def covers(self, topic: str) -> bool:
        """Whether any window looks at ``topic`` (a dict lookup: cheap on the publish path)."""
        return topic in self._by_topic

    def on_change(self, topic: SowTopic, key: str, previous: SowRecord | None, record: SowRecord | None,
                  message: Any | None, oof_counts: OofCounts, reason: str = "match") -> int:
        """Update the windows of ``topic`` for one changed record and deliver what changed for them.

        Args:
            topic: The SOW topic.
            key: The record's SowKey.
            previous: Its state before the change (``None`` for an insert).
            record: Its new state, or ``None`` when it was deleted or expired.
            message: The parsed new state (``None`` with ``record``).
            oof_counts: Out-of-focus counters by reason, incremented here.
            reason: Why the record is gone when ``record`` is ``None``: ``deleted`` or ``expired``.

        Returns:
            How many messages (publishes and oofs) were delivered.
        """
        sets = self._by_topic.get(topic.name)
        if not sets:
            return 0
        delivered = 0
        for results in tuple(sets):
            moved = results.move(key, message if record is not None else None)
            if moved is None:
                continue
            old_pos, new_pos = moved
            for window in results.windows:
                if window.sub is None or not window_affected(window, old_pos, new_pos):
                    continue
                delivered += self._refresh(window, topic, key, previous, record, oof_counts, reason)
        return delivered

    def on_removed(self, topic: SowTopic, records: Iterable[SowRecord], reason: str,
                   oof_counts: OofCounts) -> int:
        """Records left the topic (``deleted`` or ``expired``); see :meth:`on_change`."""
        if topic.name not in self._by_topic:
            return 0
        return sum(self.on_change(topic, rec.key, rec, None, None, oof_counts, reason) for rec in records)

    def _refresh(self, window: Window, topic: SowTopic, key: str, previous: SowRecord | None,
                 record: SowRecord | None, oof_counts: OofCounts, reason: str) -> int:
        return refresh_window(window, topic, key, previous, record, oof_counts, reason, topic.get,
                              self._deliver)

    def statistics(self) -> PaginationStats:
        """Paginated subscriptions, shared result sets, and the entries those hold."""
        return PaginationStats(
            paginated_subscriptions=sum(len(r.windows) for r in self._sets.values()),
            result_sets=len(self._sets),
            result_set_entries=sum(len(r.entries) for r in self._sets.values()),
        )


def refresh_window(window: Window, topic: SowTopic, key: str, previous: SowRecord | None, record: SowRecord | None,
                   oof_counts: OofCounts, reason: str, lookup: Callable[[str], SowRecord | None],
                   deliver: Deliver = deliver) -> int:
    """Take a window's slice again after record ``key`` moved in its result set, and deliver the difference:
    the changed record, records pushed out (``oof``), records pulled in (their state read with ``lookup``:
    the SOW, or a historical subscription's replayed state), each with ``deliver`` (an engine's
    :meth:`Delivery.deliver <broker.engine.delivery.Delivery.deliver>`, or :func:`~broker.engine.delivery.deliver`)."""
    assert window.results is not None
    old_keys = window.keys
    new_keys = window.results.keys(window.skip_n, window.end)
    window.keys = new_keys
    old_set, new_set = set(old_keys), set(new_keys)
    sub = window.sub
    client = sub.client
    name = topic.name
    sent = 0
    # The changed record first, then records pushed out (oof), then records pulled in.
    if key in new_set:
        assert record is not None
        body = record.data
        if sub.delta and key in old_set and previous is not None:
            body = topic.message_type.diff(previous.data, record.data, topic.key_fields)
        deliver(client, name, sub.sub_id, body, record.bookmark or None, key, record.correlation_id or None)
        sent += 1
    elif key in old_set and sub.oof:
        gone = record if record is not None else previous
        why = "match" if record is not None else reason
        if gone is not None:
            deliver(client, name, sub.sub_id, gone.data, gone.bookmark or None, key,
                    gone.correlation_id or None, command="oof", reason=why)
            oof_counts.add(why)
            sent += 1
    if sub.oof:
        for k in old_keys:
            if k not in new_set and k != key and (rec := lookup(k)) is not None:
                deliver(client, name, sub.sub_id, rec.data, rec.bookmark or None, k,
                        rec.correlation_id or None, command="oof", reason="match")
                oof_counts.match += 1
                sent += 1
    for k in new_keys:
        if k not in old_set and k != key and (rec := lookup(k)) is not None:
            deliver(client, name, sub.sub_id, rec.data, rec.bookmark or None, k, rec.correlation_id or None)
            sent += 1
    return sent


def window_affected(window: Window, old_pos: int | None, new_pos: int | None) -> bool:
    """Whether a record moving from ``old_pos`` to ``new_pos`` can change the window's contents."""
    positions = [p for p in (old_pos, new_pos) if p is not None]
    if min(positions) >= window.end:
        return False  # everything before the window's end kept its place
    # Removed and re-inserted before the window: the shifts cancel out.
    return not (old_pos is not None and new_pos is not None and old_pos < window.skip_n and new_pos < window.skip_n)
