"""The part of the transaction log the engine uses, as a Protocol: what :class:`broker.txlog.writer.JournalWriter`
offers the publish steps, the deletes and the expiry (and what a test double must offer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from broker.txlog.dedup import PublisherDedup

#: A journal entry of :meth:`Journal.append_many`: ``(command, data, sow_key, s, correlation_id, expiration_ns,
#: timestamp_ns)`` (:data:`broker.txlog.writer.JournalEntry`).
JournalEntry = tuple[int, bytes, bytes, int, bytes, int, int]

class Journal(Protocol):
    """The part of the transaction log the engine uses (:class:`broker.txlog.writer.JournalWriter`)."""

    #: The hash of the broker's instance name: the first part of every bookmark.
    instance_hash: int

    @property
    def disk_full(self) -> bool:
        """The last sync met a full disk: publishes to logged topics are refused until it is cleared."""

    @property
    def dedup(self) -> PublisherDedup:
        """What each publisher had journaled (highest ``s``), which survives a restart."""

    @property
    def journal_directory(self) -> Path:
        """Where the journal files are (for the user's message when the disk is full)."""

    def append(self, command: str, topic: str, data: bytes, *, sow_key: bytes | str = b"",
               message_type: str = "json", timestamp_ns: int | None = None) -> tuple[int, str]:
        """Journal one command (a ``sow_delete`` or ``expire`` here); returns its sequence and bookmark."""

    def append_many(self, topic: str, entries: Sequence[JournalEntry], *, publisher_hash: int = 0,
                    message_type: str = "json", held: bool = False) -> int:
        """Journal a run of publishes (held: until :meth:`release` or :meth:`retract` of the first sequence);
        returns the first sequence.

        Raises:
            JournalError: nothing was appended (``exc.index``: the entry that cannot be encoded, when that is why).
        """

    def release(self, sequence: int) -> None:
        """Let the held records from ``sequence`` on be written."""

    def retract(self, sequence: int) -> bool:
        """Take back the held records from ``sequence`` on (their SOW write failed)."""
