"""Bookmarks: the ``P|S|`` strings that name a journal position, and where a bookmark subscription starts.

Pure. Scheme (``docs/txlog.md``):

* ``P`` is :func:`instance_hash` of the broker's instance name, ``S`` the record's global sequence. The
  official clients' bookmark stores accept only ``P|S|`` with ``P`` non-zero and ``S`` increasing per ``P``,
  which one ``P`` per instance and one global sequence satisfy.
* :func:`client_name_hash` names a publisher: it is the first part of the logon ack's ``bm``
  (``<client name hash>|<last persisted s>|``) and the key of publisher de-duplication.

Both hashes are :func:`name_hash`: the first 8 bytes of BLAKE2b (``digest_size=8``) of the UTF-8 name, read
as a big-endian unsigned integer, with 0 replaced by 1 so that the value is never the "no publisher" 0.
BLAKE2b is in the standard library, stable across Python versions and processes (unlike ``hash()``).
"""

from __future__ import annotations

import calendar
import hashlib
import re
from dataclasses import dataclass

from broker.errors import CommandError

#: The ``EPOCH`` bookmark: replay the whole journal.
EPOCH = "0"
#: The ``NOW`` bookmark: no replay, live messages only.
NOW = "0|1|"
#: ``MOST_RECENT``: resolved by the client library; a literal one reaching the broker is treated as NOW.
RECENT = "recent"

_U64 = 0xFFFF_FFFF_FFFF_FFFF
_BOOKMARK = re.compile(r"(\d{1,20})\|(\d{1,20})\|")
_TIMESTAMP = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(?:\.(\d{1,9})\d*)?Z?")


def name_hash(name: str) -> int:
    """Hash a name to a stable, non-zero unsigned 64-bit integer.

    Args:
        name: An instance or client name.

    Returns:
        ``int.from_bytes(blake2b(name.encode(), digest_size=8).digest(), "big")``, or 1 if that is 0.
    """
    value = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")
    return value or 1


def instance_hash(instance_name: str) -> int:
    """The ``P`` of every bookmark this instance issues (:func:`name_hash` of the instance name)."""
    return name_hash(instance_name)


def client_name_hash(client_name: str) -> int:
    """The publisher id of a client: the logon ack's ``bm`` prefix and the de-duplication key."""
    return name_hash(client_name)


def format_bookmark(publisher: int, sequence: int) -> str:
    """Format a bookmark, e.g. ``format_bookmark(7654191196413476067, 18) == "7654191196413476067|18|"``."""
    return f"{publisher}|{sequence}|"


@dataclass(frozen=True)
class ReplayStart:
    """Where a replay starts.

    A record is replayed when ``sequence > after_sequence`` or ``timestamp_ns >= from_timestamp_ns`` (each
    test only when that field is set). Both are set only for a comma list that mixes bookmarks and
    timestamps: both conditions select a suffix of the journal, so "either" is the earliest of them.

    Attributes:
        after_sequence: Replay records after this sequence (exclusive); 0 is EPOCH.
        from_timestamp_ns: Replay records logged at or after this time (inclusive), ns since the epoch, UTC.
        now: No replay at all: the subscription starts with the next record logged (NOW, ``recent``).
        publisher: The ``P`` of the (oldest) bookmark given, 0 for EPOCH, NOW and timestamps. The server may
            compare it with :func:`instance_hash` to detect bookmarks issued by another instance.
    """

    after_sequence: int | None = None
    from_timestamp_ns: int | None = None
    now: bool = False
    publisher: int = 0

    @classmethod
    def epoch(cls) -> ReplayStart:
        """Replay everything."""
        return cls(after_sequence=0)

    @classmethod
    def after(cls, sequence: int, publisher: int = 0) -> ReplayStart:
        """Replay the records after ``sequence``."""
        return cls(after_sequence=sequence, publisher=publisher)

    @classmethod
    def since(cls, timestamp_ns: int) -> ReplayStart:
        """Replay the records logged at or after ``timestamp_ns``."""
        return cls(from_timestamp_ns=timestamp_ns)

    @property
    def is_epoch(self) -> bool:
        """True when the whole journal is replayed."""
        return self.after_sequence == 0

    def includes(self, sequence: int, timestamp_ns: int) -> bool:
        """Whether a record with this sequence and timestamp is part of the replay."""
        if self.now:
            return False
        if self.after_sequence is not None and sequence > self.after_sequence:
            return True
        return self.from_timestamp_ns is not None and timestamp_ns >= self.from_timestamp_ns


def _invalid(text: str, why: str) -> CommandError:
    return CommandError(
        "invalid bookmark",
        f"bookmark {text!r}: {why}. Use 0 (EPOCH), 0|1| (NOW), a bookmark P|S| from a delivered message, "
        "a UTC timestamp YYYYmmddTHHMMSS[.ffffff][Z], or a comma-separated list of these",
    )


def parse_timestamp(text: str) -> int:
    """Parse an AMPS timestamp ``YYYYmmddTHHMMSS[.fraction][Z]`` (always UTC) to ns since the epoch.

    Fraction digits past the ninth (nanoseconds) are ignored.

    Raises:
        CommandError: ``invalid bookmark``: not a timestamp, or not a real date and time.
    """
    m = _TIMESTAMP.fullmatch(text)
    if m is None:
        raise _invalid(text, "not a timestamp")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        raise _invalid(text, "no such date")
    if hour > 23 or minute > 59 or second > 59:
        raise _invalid(text, "no such time of day")
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if seconds < 0:
        raise _invalid(text, "timestamps before 1970 are not in any journal")
    fraction = m.group(7) or ""
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0") or "0")


def _parse_one(text: str) -> ReplayStart:
    if text == EPOCH:
        return ReplayStart.epoch()
    if text in (NOW, RECENT):
        return ReplayStart(now=True)
    m = _BOOKMARK.fullmatch(text)
    if m is not None:
        publisher, sequence = int(m.group(1)), int(m.group(2))
        if publisher > _U64 or sequence > _U64:
            raise _invalid(text, "number larger than 64 bits")
        if publisher == 0:
            raise _invalid(text, "publisher 0 is reserved (only 0|1|, NOW, may use it)")
        return ReplayStart.after(sequence, publisher)
    if len(text) >= 15 and text[8:9] == "T":
        return ReplayStart.since(parse_timestamp(text))
    if text[:1] in "[(":
        raise _invalid(text, "bookmark ranges are not supported")
    raise _invalid(text, "not a bookmark")


def parse_bookmark(text: str) -> ReplayStart:
    """Parse the ``bookmark`` header of a subscription.

    Accepted: ``0`` (EPOCH), ``0|1|`` (NOW), ``recent`` (the client's MOST_RECENT constant sent literally:
    treated as NOW, since the broker keeps no per-subscription bookmark store), ``P|S|``, a timestamp
    ``YYYYmmddTHHMMSS[.fraction][Z]`` (UTC with or without ``Z``), and a comma list of these, which starts at
    the oldest entry (NOW entries in a list are ignored unless all entries are NOW). Surrounding spaces are
    ignored.

    Args:
        text: The header value.

    Returns:
        Where the replay starts.

    Raises:
        CommandError: ``invalid bookmark`` with a detail naming the bad entry.
    """
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise _invalid(text, "empty entry")
    starts = [_parse_one(p) for p in parts]
    if len(starts) == 1:
        return starts[0]
    replaying = [s for s in starts if not s.now]
    if not replaying:
        return ReplayStart(now=True)
    by_seq = [s for s in replaying if s.after_sequence is not None]
    by_time = [s.from_timestamp_ns for s in replaying if s.from_timestamp_ns is not None]
    oldest = min(by_seq, key=lambda s: s.after_sequence or 0) if by_seq else None
    return ReplayStart(
        after_sequence=oldest.after_sequence if oldest else None,
        from_timestamp_ns=min(by_time) if by_time else None,
        publisher=oldest.publisher if oldest else 0,
    )
