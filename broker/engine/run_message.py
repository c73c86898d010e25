"""One message of a publish run on its way from the publish steps (:mod:`broker.engine.publish`) to the fan-out
(:mod:`broker.engine.fanout`): what both read, in a module of its own so neither imports the other's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.sow.deferred import StoredValue, stored_record
from broker.sow.record import SowRecord

if TYPE_CHECKING:
    from broker.messagetypes import Message


class RunMessage:
    """One message of a publish run on its way through :meth:`broker.engine.publish.Publishing.publish_batch`.

    The record it replaces may be held as its stored value (``stored``), decoded only when :attr:`previous` is
    first read: a fan-out where every subscription takes the message whole reads none, and decoding a 50 MB
    record copies its data.
    """

    __slots__ = ("_previous", "_stored", "bm", "body", "delta", "expire_at", "expired", "index", "kb", "key", "msg",
                 "record", "seq", "sequence", "x")

    def __init__(self, index: int, body: bytes, msg: Message, key: str | None, previous: SowRecord | None, seq: int,
                 x: str, expire_at: int, delta: bool, expired: SowRecord | None, kb: bytes = b"",
                 record: SowRecord | None = None, *, stored: StoredValue | None = None) -> None:
        #: Its position in the batch (for the results).
        self.index = index
        self.body = body
        self.msg = msg
        self.key = key
        self._previous = previous
        #: The stored value of the record it replaces, not decoded yet (``previous`` is then ``None``).
        self._stored = stored
        #: The publisher's ``s`` (0: none).
        self.seq = seq
        self.x = x
        self.expire_at = expire_at
        self.delta = delta
        #: The record it replaces had expired but was not swept: its holders get an ``expired`` oof first.
        self.expired = expired
        #: ``key`` encoded (``b""``: not a SOW topic).
        self.kb = kb
        #: The SOW record written (``None``: not a SOW topic).
        self.record = record
        #: Its journal sequence and bookmark (0 and ``None``: not logged).
        self.sequence = 0
        self.bm: str | None = None

    @property
    def previous(self) -> SowRecord | None:
        """The record it replaces (``None``: an insert, or not a SOW topic), decoded on first use."""
        stored = self._stored
        if stored is not None:
            assert self.key is not None  # only a SOW topic's message replaces a record
            self._previous = stored_record(self.key, stored)
            self._stored = None
        return self._previous

    @property
    def replaces(self) -> bool:
        """Whether it replaces a record (without decoding it)."""
        return self._previous is not None or self._stored is not None

    def __repr__(self) -> str:
        return (f"RunMessage(index={self.index}, key={self.key!r}, seq={self.seq}, sequence={self.sequence}, "
                f"replaces={self.replaces}, delta={self.delta})")
