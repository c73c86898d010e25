"""How a SOW record is stored: a small fixed header, then bookmark, correlation id and message data.

Layout (little-endian): ``timestamp_ns u64 | sequence u64 | expire_at_ns u64 (0 = never) | len(bm) u16 |
len(x) u16`` then the bookmark bytes, the correlation id bytes and the data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_HEAD = struct.Struct("<QQQHH")


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
