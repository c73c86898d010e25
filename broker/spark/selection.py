"""Which records a read selects: the ``topic``, ``from`` and ``to`` options and the filters Spark pushes down.

Pure (no pyspark): filters arrive as plain ``(kind, column, value)`` triples built by the source from
``pyspark.sql.datasource`` filters. A :class:`Selection` is

* a sequence range ``after_sequence < seq <= until_sequence`` and a time range
  ``from_ns <= timestamp_ns <= to_ns``: each prunes whole files (a file's records lie between its first
  record and the next file's first record) and starts the read at the right place in the first file;
* a topic test: the ``topic`` option (a literal name, or a regular expression searched in the name when it
  has regex characters, as ``broker journal dump --topic``) and topic names pushed down (``=``, ``IN``).

Time filters compare the ``timestamp`` column, which holds microseconds, so a pushed bound ``X`` (µs) keeps
exactly the records whose ``timestamp_ns // 1000`` passes it: what Spark would keep evaluating it itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from broker.txlog.bookmarks import parse_bookmark
from broker.txlog.cli import _topic_matcher as topic_matcher
from broker.txlog.files import JournalFile
from broker.txlog.records import Record

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
#: Filter kinds understood here, per column.
PUSHABLE = {
    "seq": {"eq", "gt", "ge", "lt", "le", "in"},
    "timestamp": {"eq", "gt", "ge", "lt", "le"},
    "topic": {"eq", "in"},
}


def micros(value: dt.datetime) -> int:
    """Microseconds since the epoch of a Spark timestamp literal (aware, or naive meaning UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - _EPOCH) // _US


@dataclass(frozen=True)
class Selection:
    """What a read keeps (see the module docstring). Bounds are inclusive except ``after_sequence``."""

    topic: str | None = None
    topics: frozenset[str] | None = None
    after_sequence: int = 0
    until_sequence: int | None = None
    from_ns: int | None = None
    to_ns: int | None = None

    @classmethod
    def from_options(cls, topic: str | None = None, start: str | None = None, end: str | None = None) -> Selection:
        """The selection of the ``topic``, ``from`` and ``to`` options.

        ``from``: records after a bookmark ``P|S|``, or logged at or after a timestamp
        ``YYYYmmddTHHMMSS[.fraction][Z]``. ``to``: up to and including the record with that bookmark, or the
        last one logged at or before that time.

        Raises:
            CommandError: ``from`` or ``to`` is not a bookmark or timestamp.
            JournalError: ``topic`` is not a valid regular expression.
        """
        topic_matcher(topic)  # a bad regex fails here, on the driver, with a clear message
        sel = cls(topic=topic or None)
        if start:
            begin = parse_bookmark(start)
            if begin.after_sequence:
                sel = replace(sel, after_sequence=begin.after_sequence)
            if begin.from_timestamp_ns is not None:
                sel = replace(sel, from_ns=begin.from_timestamp_ns)
        if end:
            stop = parse_bookmark(end)
            if stop.after_sequence is not None and not stop.is_epoch:
                sel = replace(sel, until_sequence=stop.after_sequence)
            if stop.from_timestamp_ns is not None:
                sel = replace(sel, to_ns=stop.from_timestamp_ns)
        return sel

    # -- narrowing by pushed filters -----------------------------------------------------------------

    def narrowed(self, kind: str, column: str, value: Any) -> Selection:
        """This selection AND ``column <kind> value`` (a kind of :data:`PUSHABLE` for that column).

        ``value`` is what Spark pushed: a str, int or datetime, or for ``in`` a tuple of them.
        """
        if column == "topic":
            names = frozenset([value] if kind == "eq" else value)
            return replace(self, topics=names if self.topics is None else self.topics & names)
        if column == "seq":
            if kind == "in":
                values = [int(v) for v in value]
                if not values:
                    return replace(self, until_sequence=0)
                return self.narrowed("ge", "seq", min(values)).narrowed("le", "seq", max(values))
            low, high = _bounds(kind, int(value))
            sel = self
            if low is not None:
                sel = replace(sel, after_sequence=max(sel.after_sequence, low - 1))
            if high is not None:
                sel = replace(sel, until_sequence=high if sel.until_sequence is None else min(sel.until_sequence, high))
            return sel
        low, high = _bounds(kind, micros(value))
        sel = self
        if low is not None:
            ns = low * 1000
            sel = replace(sel, from_ns=ns if sel.from_ns is None else max(sel.from_ns, ns))
        if high is not None:
            ns = high * 1000 + 999
            sel = replace(sel, to_ns=ns if sel.to_ns is None else min(sel.to_ns, ns))
        return sel

    # -- using it ------------------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        """Nothing can match (contradictory bounds)."""
        return ((self.until_sequence is not None and self.until_sequence <= self.after_sequence)
                or (self.from_ns is not None and self.to_ns is not None and self.to_ns < self.from_ns)
                or self.topics == frozenset())

    def record_test(self) -> Callable[[Record], bool]:
        """A predicate on records for everything but the sequence and time bounds the read stops at."""
        by_option = topic_matcher(self.topic)
        names = self.topics
        from_ns = self.from_ns
        after = self.after_sequence
        if names is None and from_ns is None and self.topic is None:
            return lambda r: r.sequence > after
        return lambda r: (r.sequence > after and (from_ns is None or r.timestamp_ns >= from_ns)
                          and (names is None or r.topic in names) and by_option(r.topic))

    def past_end(self, rec: Record) -> bool:
        """Whether ``rec`` and every record after it are beyond the ``to`` bounds (timestamps never decrease)."""
        return ((self.until_sequence is not None and rec.sequence > self.until_sequence)
                or (self.to_ns is not None and rec.timestamp_ns > self.to_ns))

    def wanted_files(self, files: list[JournalFile], firsts: list[tuple[int, int] | None]) -> list[JournalFile]:
        """The files that may hold selected records, given each file's first ``(sequence, timestamp_ns)``.

        A file's records have sequences below the next file's first one and timestamps at most its first
        timestamp; a file whose first record is unreadable (``None``) is always kept (its read reports it).
        """
        if self.empty:
            return []
        kept = []
        for i, jf in enumerate(files):
            first = firsts[i]
            nxt = next((f for f in firsts[i + 1:] if f is not None), None)
            if first is not None:
                if self.until_sequence is not None and first[0] > self.until_sequence:
                    break
                if self.to_ns is not None and first[1] > self.to_ns:
                    break
            if nxt is not None:
                if nxt[0] - 1 <= self.after_sequence:
                    continue
                if self.from_ns is not None and nxt[1] < self.from_ns:
                    continue
            kept.append(jf)
        return kept


def _bounds(kind: str, value: int) -> tuple[int | None, int | None]:
    """``column <kind> value`` as inclusive ``(low, high)`` bounds on an integer column."""
    return {
        "eq": (value, value),
        "gt": (value + 1, None),
        "ge": (value, None),
        "lt": (None, value - 1),
        "le": (None, value),
    }[kind]


def apply_filters(selection: Selection, filters: Iterable[tuple[str, str, object]]) -> Selection:
    """Narrow ``selection`` by every ``(kind, column, value)`` filter."""
    for kind, column, value in filters:
        selection = selection.narrowed(kind, column, value)
    return selection
