"""How a SOW record is stored: a small fixed header, then bookmark, correlation id and message data.

Layout (little-endian): ``timestamp_ns u64 | sequence u64 | expire_at_ns u64 (0 = never) | len(bm) u16 |
len(x) u16`` then the bookmark bytes, the correlation id bytes and the data.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker import speedups
from broker.protocol._header import dumps_flat

#: The compiled header loop of :meth:`WireRecords.add` (``broker/speedups/sowrecords.pyx``), or ``None``.
_compiled = speedups.load("sowrecords")

_publish = speedups.load("publish")
#: The compiled stored value (:func:`broker.speedups.publish.record_value`; ``None`` when not built): a record's
#: stored value, or ``None`` when :meth:`SowRecord.encode`'s Python code must decide. Callers that encode many
#: records call it directly.
record_value: Callable[[SowRecord], bytes | None] | None = (
    _publish.record_value if _publish is not None else None)
#: The compiled record decode (:func:`broker.speedups.publish.record_from_value`), or ``None``.
_record_from_value: Callable[[type[SowRecord], str, bytes, bytes | None], SowRecord | None] | None = (
    _publish.record_from_value if _publish is not None else None)
_HEAD = struct.Struct("<QQQHH")
#: The fixed header of a stored value, for scans that unpack it inline (:meth:`QueryPlan.rows`).
RECORD_HEAD = _HEAD
#: A stored value's ``expire_at_ns`` alone, at :data:`EXPIRY_OFFSET`: read without decoding the rest (a publish
#: that replaces a record nobody else looks at only needs to know whether it has expired).
RECORD_EXPIRY = struct.Struct("<Q")
EXPIRY_OFFSET = 16


@dataclass(slots=True, eq=True)
class SowRecord:
    """One stored message of a SOW topic. Treat it as immutable: a change is a new record.

    Not ``frozen``: a frozen dataclass's ``__init__`` costs five times as much (``object.__setattr__``
    per field), and two records are made per publish.

    Attributes:
        key: The SOW key.
        data: The message data as published (merged, for delta publishes).
        timestamp_ns: When the record was last written.
        sequence: The journal sequence of the last write (0 when the topic is not logged).
        expire_at_ns: When the record expires (0 = never).
        bookmark: The bookmark of the last write (may be empty).
        correlation_id: The publisher's correlation id (may be empty).
    """

    key: str
    data: bytes
    timestamp_ns: int
    sequence: int = 0
    expire_at_ns: int = 0
    bookmark: str = ""
    correlation_id: str = ""

    def encode(self) -> bytes:
        """The stored value."""
        if record_value is not None:
            value = record_value(self)
            if value is not None:
                return value
        return self._encode_python()

    def _encode_python(self) -> bytes:
        """:meth:`encode` in pure Python (the fallback, and the reference the compiled one is tested against)."""
        bm = self.bookmark.encode()
        x = self.correlation_id.encode()
        return b"".join(
            (_HEAD.pack(self.timestamp_ns, self.sequence, self.expire_at_ns, len(bm), len(x)), bm, x, self.data)
        )

    @classmethod
    def decode(cls, key: str, value: bytes, data: bytes | None = None) -> SowRecord:
        """Rebuild a record from its stored value.

        Args:
            key: The SOW key the value is stored under.
            value: The stored value.
            data: The message data when the caller already split it off (:meth:`split`), to avoid a
                second copy.
        """
        if _record_from_value is not None:
            record = _record_from_value(cls, key, value, data)
            if record is not None:
                return record
        return cls._decode_python(key, value, data)

    @classmethod
    def _decode_python(cls, key: str, value: bytes, data: bytes | None = None) -> SowRecord:
        """:meth:`decode` in pure Python (the fallback, and the reference the compiled one is tested against)."""
        ts, seq, exp, lbm, lx = _HEAD.unpack_from(value)
        off = _HEAD.size
        bm = value[off : off + lbm].decode() if lbm else ""
        off += lbm
        x = value[off : off + lx].decode() if lx else ""
        off += lx
        return cls(key, bytes(value[off:]) if data is None else data, ts, seq, exp, bm, x)

    @staticmethod
    def split(value: bytes) -> tuple[int, bytes]:
        """``(expire_at_ns, data)`` of a stored value, without decoding the rest (for scans)."""
        _ts, _seq, exp, lbm, lx = _HEAD.unpack_from(value)
        return exp, bytes(value[_HEAD.size + lbm + lx :])

    @staticmethod
    def peek_sequence(value: bytes) -> int:
        """The journal ``sequence`` of a stored value without decoding the rest (start-up recovery)."""
        sequence: int = _HEAD.unpack_from(value)[1]
        return sequence

    @staticmethod
    def peek_expiry(value: bytes) -> int:
        """The ``expire_at_ns`` of a stored value without decoding the rest."""
        expire_at_ns: int = _HEAD.unpack_from(value)[2]
        return expire_at_ns


#: Bytes a JSON string cannot hold raw, besides the quote (counted instead): a key, bookmark or correlation id
#: holding one takes the escaping path of :class:`WireRecords`.
_CONTROL_OR_BACKSLASH = bytes(range(0x20)) + b"\\"
#: Formatted seconds a :class:`WireRecords` keeps (a topic written over an hour needs 3,600).
MAX_SECONDS = 65_536
#: One record's whole inner header (the bytes ``%`` format of :meth:`WireRecords.add`, after the topic's prefix):
#: key, bookmark, second, microseconds, correlation id, data length.
_HEADER = b'%s","bm":"%s","ts":"%s.%06dZ","x":"%s","l":%d}'
#: The same for a record with neither bookmark nor correlation id (most): key, second, microseconds, length.
_HEADER_PLAIN = b'%s","bm":"","ts":"%s.%06dZ","x":"","l":%d}'


class WireRecords:
    """The inner headers of query results (``sow`` batch records), formatted straight from stored values.

    The query hot path: a scan of a million records must not build a :class:`SowRecord`, a ``str`` key and a
    dict per record. Each record's inner header ``{"t":..,"k":..,"bm":..,"ts":..,"x":..,"l":..}`` is one
    bytes ``%`` format of the stored key, bookmark and correlation id bytes (valid UTF-8: they were encoded
    from ``str``) and the formatted timestamp, whose ``YYYYmmddTHHMMSS`` part is looked up per second (at
    most :data:`MAX_SECONDS` kept). One check per batch (quotes counted, no backslash or control byte) proves
    that no field needed JSON escaping; a batch that fails it is formatted again through the escaping encoder,
    so the bytes are always those of :func:`broker.protocol.encode_sow_batch`.

    Args:
        topic: The topic name every record of this encoder carries.
    """

    __slots__ = ("_full", "_plain", "_prefix", "_quotes", "_raw_ok", "_seconds", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        head = dumps_flat({"t": topic})
        self._prefix = head[:-1] + b',"k":"'
        prefix = self._prefix.replace(b"%", b"%%")
        self._full = prefix + _HEADER
        self._plain = prefix + _HEADER_PLAIN
        #: Quotes in one fast-formatted header when no field holds one.
        self._quotes = (self._full % (b"", b"", b"", 0, b"", 0)).count(b'"')
        #: The topic needed no escaping (otherwise every batch takes the escaping path).
        self._raw_ok = b"\\" not in head
        #: Epoch second -> its ``YYYYmmddTHHMMSS`` text: records come in key order, not time order, so their
        #: seconds repeat across the scan rather than in runs.
        self._seconds: dict[int, bytes] = {}

    def add(self, parts: list[bytes], rows: Sequence[tuple[object, bytes, bytes, object]]) -> None:
        """Append each record's inner header and data to ``parts``.

        Args:
            parts: The frame's parts so far (the outer header first).
            rows: ``(topic, key, stored value, message)`` per record, in order (the rows of
                :meth:`broker.engine.queries.QueryPlan.rows`; only the key and the value are read).
        """
        start = len(parts)
        unpack = _HEAD.unpack_from
        size = _HEAD.size
        full, plain = self._full, self._plain
        seconds = self._seconds
        if len(seconds) > MAX_SECONDS:
            seconds.clear()
        second_text = seconds.get
        append = parts.append
        done = 0 if _compiled is None else _compiled.add_records(parts, rows, self._prefix, seconds)
        for _topic, key, value, _msg in (rows[done:] if done else rows):
            ts, _seq, _exp, lbm, lx = unpack(value)
            secs = ts // 1_000_000_000
            text = second_text(secs)
            if text is None:
                text = seconds[secs] = time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs)).encode()
            if lbm or lx:  # a bookmark or a correlation id
                off = size + lbm + lx
                append(full % (key, value[size:size + lbm], text, ts % 1_000_000_000 // 1000, value[size + lbm:off],
                               len(value) - off))
                append(value[off:])
            else:
                append(plain % (key, text, ts % 1_000_000_000 // 1000, len(value) - size))
                append(value[size:])
        # Two parts per record: its header, its data. Headers holding only their own quotes, neither a
        # backslash nor a control byte, needed no escaping.
        headers = b"".join(parts[start::2])
        if (not self._raw_ok or headers.count(b'"') != self._quotes * len(rows)
                or len(headers.translate(None, _CONTROL_OR_BACKSLASH)) != len(headers)):
            del parts[start:]
            self._add_escaped(parts, rows)

    def _add_escaped(self, parts: list[bytes], rows: Sequence[tuple[object, bytes, bytes, object]]) -> None:
        """:meth:`add` through the escaping JSON encoder (a field holds a quote, backslash or control byte)."""
        for _topic, key, value, _msg in rows:
            rec = SowRecord.decode(key.decode(), value)
            secs, rem = divmod(rec.timestamp_ns, 1_000_000_000)
            ts = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(secs))}.{rem // 1000:06d}Z"
            parts.append(dumps_flat({"t": self.topic, "k": rec.key, "bm": rec.bookmark, "ts": ts,
                                     "x": rec.correlation_id, "l": len(rec.data)}))
            parts.append(rec.data)
