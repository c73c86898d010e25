"""The storage engine interface behind a SOW topic.

Storage engines are plugins (hook ``broker_register_storage_engines``). Keys and values are bytes; keys
are ordered bytewise. The SOW engine batches the writes of one engine step into one :meth:`Storage.write`.
``broker.testing.storage`` holds the conformance suite every engine must pass.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from broker.sow.deferred import StoredValue, stored_bytes


@dataclass(frozen=True)
class StorageSpec:
    """What a storage engine is built from.

    Attributes:
        topic: The SOW topic name.
        path: Where to keep the data (``FileName`` with ``%n`` expanded), or ``None`` for in-memory.
        options: Engine-specific options.
        history: This storage holds the topic's past versions (``<History>``), not its records: the
            broker opens it next to the records' storage, at ``path + ".history"``, with the same engine
            and options, and keeps the layout of :mod:`broker.sow.history` in it. Engines need not treat
            it differently (it uses only the methods below: ordered scans with a start key must seek).
    """

    topic: str
    path: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    history: bool = False


class Snapshot(abc.ABC):
    """A consistent, read-only view of a storage engine at one instant."""

    @abc.abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key`` when the snapshot was taken, or ``None``."""

    @abc.abstractmethod
    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop`` in ascending key order."""

    def first(self, start: bytes, stop: bytes) -> tuple[bytes, bytes] | None:
        """The first ``(key, value)`` with ``start <= key < stop``, or ``None``.

        A point-in-time query of a topic with History calls it once per key (:mod:`broker.sow.history`).
        This default opens a :meth:`scan` per call; an engine can answer faster by seeking a cursor it
        reuses for the snapshot's lifetime (the built-ins do)."""
        it = self.scan(start, stop)
        try:
            return next(it, None)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def writable(self) -> bool:
        """Whether a write can be tried now. An engine whose writes failed (a full disk) answers False until
        it has recovered, trying to recover when asked (at most every few seconds); the expiration sweeper
        waits meanwhile. Engines that never need to recover answer True."""
        return True

    @abc.abstractmethod
    def close(self) -> None:
        """Release the snapshot. Idempotent."""

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Storage(abc.ABC):
    """One SOW topic's records."""

    @abc.abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or ``None``."""

    @abc.abstractmethod
    def write(self, puts: Iterable[tuple[bytes, bytes]] = (), deletes: Iterable[bytes] = ()) -> None:
        """Apply puts then deletes atomically (all or nothing)."""

    def write_known(self, puts: Iterable[tuple[bytes, bytes]], deletes: Iterable[bytes],
                    existed: Mapping[bytes, bool]) -> None:
        """:meth:`write`, told whether each key it touches exists before the write (``existed``, from reads the
        caller just made: the SOW's cache of hot records, :mod:`broker.sow.cache`). An engine that keeps a
        record count can use it instead of reading those keys again; this default ignores it."""
        self.write(puts, deletes)

    def write_puts(self, puts: Sequence[tuple[bytes, bytes]], new_keys: int) -> None:
        """:meth:`write` of puts only (a batch of publishes), told that ``new_keys`` of the distinct keys in
        ``puts`` hold no record before the write (the caller read every one of them: the SOW's previous-record
        reads). An engine that keeps a record count can add ``new_keys`` instead of reading the keys again, with
        no per-key bookkeeping; this default ignores it."""
        self.write(puts)

    def write_logged_puts(self, puts: Sequence[tuple[bytes, StoredValue]], new_keys: int) -> None:
        """:meth:`write_puts` of puts the transaction log covers (publishes to a logged topic: start-up recovery
        catches up a record the SOW lost at a crash, :mod:`broker.server.recovery`). An engine may apply them
        after returning (a thread writing large values: ``plugins/storage/write_behind.py``) as long as every
        read, scan and snapshot sees them at once, later writes land after them, and ``make_durable`` and
        ``close`` wait for them. A value may be a :class:`~broker.sow.deferred.DeferredValue` (a large record's,
        not joined yet): reads must hand out its bytes. This default is :meth:`write_puts` of the bytes."""
        self.write_puts([(key, stored_bytes(value)) for key, value in puts], new_keys)

    @abc.abstractmethod
    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop`` in ascending key order."""

    @abc.abstractmethod
    def snapshot(self) -> Snapshot:
        """A consistent view unaffected by later writes."""

    @abc.abstractmethod
    def count(self) -> int:
        """The number of records."""

    def compact(self) -> None:  # noqa: B027 - optional for engines without compaction
        """Reclaim space. Engines without compaction do nothing."""

    def make_durable(self) -> None:  # noqa: B027 - optional for engines that keep nothing or sync every write
        """Make every write so far durable (survive a power cut). A clean shutdown calls it before it marks
        the stop clean, which lets the next start skip checking the SOW against the transaction log.
        Engines that keep data on disk without syncing each write should implement it."""

    def writable(self) -> bool:
        """Whether a write can be tried now. An engine whose writes failed (a full disk) answers False until
        it has recovered, trying to recover when asked (at most every few seconds); the expiration sweeper
        waits meanwhile. Engines that never need to recover answer True."""
        return True

    @abc.abstractmethod
    def close(self) -> None:
        """Flush and release resources. Idempotent."""

    def statistics(self) -> dict[str, int]:
        """Counters for monitoring (at least ``records``)."""
        return {"records": self.count()}
