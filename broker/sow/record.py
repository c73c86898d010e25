"""How a SOW record is stored: a small fixed header, then bookmark, correlation id and message data.

Layout (little-endian): ``timestamp_ns u64 | sequence u64 | expire_at_ns u64 (0 = never) | len(bm) u16 |
len(x) u16`` then the bookmark bytes, the correlation id bytes and the data.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from broker.protocol._header import dumps_flat

_HEAD = struct.Struct("<QQQHH")
#: The fixed header of a stored value, for scans that unpack it inline (:meth:`QueryPlan.rows`).
RECORD_HEAD = _HEAD


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
        return _HEAD.unpack_from(value)[1]

    @staticmethod
    def peek_expiry(value: bytes) -> int:
        """The ``expire_at_ns`` of a stored value without decoding the rest."""
        return _HEAD.unpack_from(value)[2]


#: Bytes a JSON string cannot hold raw, besides the quote (counted instead): a key, bookmark or correlation id
#: holding one takes the escaping path of :class:`WireRecords`.
_CONTROL_OR_BACKSLASH = bytes(range(0x20)) + b"\\"
#: Formatted seconds a :class:`WireRecords` keeps (a topic written over an hour needs 3,600).
MAX_SECONDS = 65_536
#: One record's inner header after the key (the bytes ``%`` format of :meth:`WireRecords.add`; the topic and
#: key before it are appended as they are, cheaper than formatting them in).
_REST = b'","bm":"%s","ts":"%s.%06dZ","x":"%s","l":%d}'


class WireRecords:
    """The inner headers of query results (``sow`` batch records), formatted straight from stored values.

    The query hot path: a scan of a million records must not build a :class:`SowRecord`, a ``str`` key and a
    dict per record. Each record's inner header ``{"t":..,"k":..,"bm":..,"ts":..,"x":..,"l":..}`` is one
    bytes ``%`` format of the stored key, bookmark and correlation id bytes (valid UTF-8: they were encoded
    from ``str``) and the formatted timestamp, whose ``YYYYmmddTHHMMSS`` part is looked up per second (at
    most :data:`MAX_SECONDS` kept). One check per batch (quotes counted, no backslash or control byte) proves that no field
    needed JSON escaping; a batch that fails it is formatted again through the escaping encoder, so the
    bytes are always those of :func:`broker.protocol.encode_sow_batch`.

    Args:
        topic: The topic name every record of this encoder carries.
    """

    __slots__ = ("_prefix", "_quotes", "_raw_ok", "_seconds", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        head = dumps_flat({"t": topic})
        self._prefix = head[:-1] + b',"k":"'
        #: Quotes in the part of one fast-formatted header after the key, when no field holds one.
        self._quotes = (_REST % (b"", b"", 0, b"", 0)).count(b'"')
        #: The topic needed no escaping (otherwise every batch takes the escaping path).
        self._raw_ok = b"\\" not in head
        #: Epoch second -> its ``YYYYmmddTHHMMSS`` text: records come in key order, not time order, so their
        #: seconds repeat across the scan rather than in runs.
        self._seconds: dict[int, bytes] = {}

    def add(self, parts: list[bytes], rows: Sequence[tuple[bytes, bytes]]) -> None:
        """Append each record's inner header and data to ``parts``.

        Args:
            parts: The frame's parts so far (the outer header first).
            rows: ``(key, stored value)`` per record, in order.
        """
        start = len(parts)
        unpack = _HEAD.unpack_from
        size = _HEAD.size
        prefix = self._prefix
        seconds = self._seconds
        if len(seconds) > MAX_SECONDS:
            seconds.clear()
        second_text = seconds.get
        append = parts.append
        for key, value in rows:
            ts, _seq, _exp, lbm, lx = unpack(value)
            secs, rem = divmod(ts, 1_000_000_000)
            text = second_text(secs)
            if text is None:
                text = seconds[secs] = time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs)).encode()
            off = size + lbm + lx
            data = value[off:]
            append(prefix)
            append(key)
            if off == size:  # no bookmark, no correlation id
                append(_REST % (b"", text, rem // 1000, b"", len(data)))
            else:
                append(_REST % (value[size:size + lbm], text, rem // 1000, value[size + lbm:off], len(data)))
            append(data)
        # Four parts per record: prefix, key, the rest of the header, data. A key holding no quote and the
        # rest holding only its own quotes, neither a backslash nor a control byte, needed no escaping.
        keys = b"".join(parts[start + 1::4])
        rest = b"".join(parts[start + 2::4])
        if (not self._raw_ok or b'"' in keys or rest.count(b'"') != self._quotes * len(rows)
                or len(keys.translate(None, _CONTROL_OR_BACKSLASH)) != len(keys)
                or len(rest.translate(None, _CONTROL_OR_BACKSLASH)) != len(rest)):
            del parts[start:]
            self._add_escaped(parts, rows)

    def _add_escaped(self, parts: list[bytes], rows: Sequence[tuple[bytes, bytes]]) -> None:
        """:meth:`add` through the escaping JSON encoder (a field holds a quote, backslash or control byte)."""
        for key, value in rows:
            rec = SowRecord.decode(key.decode(), value)
            secs, rem = divmod(rec.timestamp_ns, 1_000_000_000)
            ts = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(secs))}.{rem // 1000:06d}Z"
            parts.append(dumps_flat({"t": self.topic, "k": rec.key, "bm": rec.bookmark, "ts": ts,
                                     "x": rec.correlation_id, "l": len(rec.data)}))
            parts.append(rec.data)
