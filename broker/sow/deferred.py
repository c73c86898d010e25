"""A large SOW record's stored value, built off the event loop.

A stored value is the record's small header (:mod:`broker.sow.record`) followed by its data: for a 50 MB publish,
building it copies the 50 MB (25-40 ms of the event loop on a busy machine, issue 34). A publish to a logged topic
hands the storage a :class:`DeferredValue` instead (:meth:`broker.sow.storage.Storage.write_logged_puts`): the
header and the data, joined once by whoever needs the bytes first. That is the storage's write-behind thread as a
rule (``plugins/storage/write_behind.py``: ``bytes.join`` copies without the GIL), moments after the publish; a
read that comes earlier joins it itself. Every reader gets ``bytes``: the SOW's record cache, the storage's
pending writes and its snapshots turn a deferred value into its bytes (:func:`stored_bytes`) before they hand it
out.
"""

from __future__ import annotations

import struct
import threading
from typing import TypeAlias

from broker.sow.record import RECORD_HEAD, SowRecord

__all__ = ["DEFER_MIN", "DeferredValue", "StoredValue", "stored_bytes", "stored_expiry", "stored_record"]

#: Records whose data is longer than this (bytes) get a deferred stored value.
DEFER_MIN = 1024 * 1024


class DeferredValue:
    """A stored value not built yet: its header and data, joined on the first :meth:`value` (then dropped)."""

    __slots__ = ("_lock", "_parts", "_size", "_value")

    def __init__(self, head: bytes, data: bytes) -> None:
        self._parts: tuple[bytes, bytes] | None = (head, data)
        self._size = len(head) + len(data)
        self._value: bytes | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, record: SowRecord) -> DeferredValue | None:
        """``record``'s stored value, deferred; ``None`` when a field is not the usual type or size (then
        :meth:`SowRecord.encode` builds it and raises its errors)."""
        bookmark, cid, data = record.bookmark, record.correlation_id, record.data
        if type(bookmark) is not str or type(cid) is not str or type(data) is not bytes:
            return None
        try:
            bm, x = bookmark.encode(), cid.encode()
            head = RECORD_HEAD.pack(record.timestamp_ns, record.sequence, record.expire_at_ns, len(bm), len(x))
        except (UnicodeEncodeError, struct.error):  # a field out of range
            return None
        return cls(head + bm + x, data)

    def __len__(self) -> int:
        return self._size

    @property
    def expire_at_ns(self) -> int:
        """The record's ``expire_at_ns``, read from the header (nothing joined)."""
        parts = self._parts
        head = parts[0] if parts is not None else self._value
        expire_at_ns: int = RECORD_HEAD.unpack_from(head)[2]  # type: ignore[arg-type]
        return expire_at_ns

    def record(self, key: str) -> SowRecord:
        """The record under ``key``: before the join, its data is the data given (nothing copied)."""
        parts = self._parts
        if parts is not None:
            return SowRecord.decode(key, parts[0], parts[1])
        return SowRecord.decode(key, self.value())

    def value(self) -> bytes:
        """The stored value (joined on the first call, by this thread)."""
        value = self._value
        if value is None:
            with self._lock:
                value = self._value
                if value is None:
                    assert self._parts is not None
                    value = self._value = b"".join(self._parts)
                    self._parts = None
        return value

    def __repr__(self) -> str:
        return f"DeferredValue({self._size} bytes, {'joined' if self._value is not None else 'not joined'})"


#: A value handed to a storage's write: its bytes, or a :class:`DeferredValue` (``write_logged_puts`` only).
StoredValue: TypeAlias = "bytes | DeferredValue"


def stored_bytes(value: bytes | DeferredValue) -> bytes:
    """``value``'s bytes."""
    return value if type(value) is bytes else value.value()  # type: ignore[union-attr]


def stored_expiry(value: bytes | DeferredValue) -> int:
    """The ``expire_at_ns`` of a stored value (0: never), without decoding or joining it."""
    if type(value) is DeferredValue:
        return value.expire_at_ns
    return SowRecord.peek_expiry(value)  # type: ignore[arg-type]


def stored_record(key: str, value: bytes | DeferredValue) -> SowRecord:
    """The record a stored value holds (a deferred one's data not copied when it is not joined yet)."""
    if type(value) is DeferredValue:
        return value.record(key)
    return SowRecord.decode(key, value)  # type: ignore[arg-type]
