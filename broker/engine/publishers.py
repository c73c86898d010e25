"""The publishers the engine has applied publishes from: each one's highest store sequence (``s``), for
de-duplication of re-sends after a reconnect, forgotten after ``<InactiveClientAckExpiration>`` without a publish.

One object per engine (:attr:`broker.engine.engine.Engine.publishers`): every publish path
(:mod:`broker.engine.publish`) records what it applied here, and the session asks it
(:meth:`Engine.is_duplicate <broker.engine.engine.Engine.is_duplicate>`) before a publish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.engine.delivery import Client
    from broker.engine.journal import Journal


class Publishers:
    """Highest applied ``s`` per publisher key, backed by the journal's de-duplication table when there is one.

    Args:
        journal: The transaction log, whose :attr:`~broker.engine.journal.Journal.dedup` table (what each
            publisher had journaled, which survives a restart) is asked too; ``None``: none.
    """

    __slots__ = ("_active", "_journal", "_next_sweep", "expiration_ns", "seq")

    def __init__(self, journal: Journal | None = None) -> None:
        #: Highest publish-store sequence applied per publisher key.
        self.seq: dict[str, int] = {}
        #: ``<InactiveClientAckExpiration>`` in nanoseconds: a publisher without a publish this long is
        #: forgotten by :attr:`seq` (and starts afresh, as in AMPS); 0: never.
        self.expiration_ns = 0
        self._journal = journal
        self._active: dict[str, int] = {}
        self._next_sweep = 0

    def is_duplicate(self, key: str, seq: int) -> bool:
        """Whether publisher ``key``'s store sequence ``seq`` was already applied (a re-send after reconnect)."""
        if seq <= self.seq.get(key, 0):
            return True
        return self._journal is not None and self._journal.dedup.is_duplicate(key, seq)

    def highest(self, client: Client) -> int:
        """The highest ``s`` applied or journaled for ``client``'s publisher key: a later message at or below it
        is a re-send. 0 for an anonymous publisher (no key)."""
        key = client.publisher_key
        if not key:
            return 0
        high = self.seq.get(key, 0)
        if self._journal is not None:
            high = max(high, self._journal.dedup.highest_hash(client.name_hash))
        return high

    def applied(self, key: str, top: int, now_ns: int) -> None:
        """Record that publisher ``key``'s messages up to ``top`` were applied (call only once they were: a
        publish that failed may be sent again)."""
        if top > self.seq.get(key, 0):
            self.seq[key] = top
        if self.expiration_ns:
            self._note_active(key, now_ns)

    def _note_active(self, key: str, now_ns: int) -> None:
        """Mark a publisher active and, at most every quarter expiration, forget the inactive ones."""
        self._active[key] = now_ns
        if now_ns < self._next_sweep:
            return
        self._next_sweep = now_ns + self.expiration_ns // 4
        cutoff = now_ns - self.expiration_ns
        for stale in [n for n, seen in self._active.items() if seen < cutoff]:
            del self._active[stale]
            self.seq.pop(stale, None)
