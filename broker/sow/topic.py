"""A SOW topic: upserts by SOW key, deletes, queries and expiration over a storage engine.

Pure: no trio, no sockets. The engine calls it from its single task context, so every method runs
atomically with respect to publishes.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.errors import CommandError
from broker.sow.cache import CachedStorage
from broker.sow.deferred import StoredValue, stored_bytes
from broker.sow.history import History
from broker.sow.keys import KeyGenerator, validate_user_key
from broker.sow.lookups import lookup_keys
from broker.sow.record import SowRecord
from broker.sow.storage import Snapshot, Storage
from broker.stats.snapshot import SowTopicStats

if TYPE_CHECKING:
    from broker.messagetypes import Message

#: BatchSize above this is refused (AMPS caps batches the same way).
MAX_BATCH_SIZE = 10_000


@dataclass
class SowTopicStatistics:
    """Counters of one SOW topic."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    queries: int = 0
    expirations: int = 0


@dataclass
class UpsertResult:
    """What an upsert did: the record now stored and the one it replaced (``None`` for an insert)."""

    record: SowRecord
    previous: SowRecord | None


@dataclass
class SowTopic:
    """One configured SOW topic.

    Attributes:
        name: The topic name.
        message_type: The topic's message type object (parse/merge/diff).
        storage: The storage engine holding the records.
        key_generator: Generates keys from message content, or ``None`` for user-supplied keys.
        key_fields: The ``<Key>`` paths (empty for user-supplied keys).
        default_expiration: Default lifetime in seconds, ``0.0`` when enabled with no default,
            ``None`` when expiration is disabled.
        key_lookups: The key generator's key is a pure function of the ``<Key>`` values (the built-in
            ``default``), so queries whose filter pins every key field fetch keys instead of scanning
            (:mod:`broker.sow.lookups`). Leave it off for stateful generators such as ``chaining``.
        history: Past versions for historical queries (``<History>``), or ``None``.
    """

    name: str
    message_type: Any
    storage: Storage
    key_generator: KeyGenerator | None
    key_fields: tuple[str, ...] = ()
    default_expiration: float | None = None
    key_lookups: bool = False
    history: History | None = None
    stats: SowTopicStatistics = field(default_factory=SowTopicStatistics)
    _expiry_heap: list[tuple[int, str]] = field(default_factory=list)

    # -- keys ----------------------------------------------------------------------------------------
    def key_for(self, message: Message, user_key: str | None) -> str:
        """The SOW key of a message: generated from its content, or the publisher's ``k``.

        Raises:
            KeyGenerationError: no key can be made (missing key field, no or non-Base64 user key).
        """
        if self.key_generator is not None:
            return self.key_generator.generate(message)
        return validate_user_key(user_key, topic=self.name)

    def lookup_keys(self, predicate: object) -> list[str] | None:
        """The keys a query with ``predicate`` needs to fetch, or ``None`` when it must scan.

        Args:
            predicate: A compiled filter (:class:`broker.expr.Filter`), or ``None``.

        Returns:
            The candidate keys (possibly empty: nothing can match) when the filter pins every key field
            with literals and the topic allows lookups; otherwise ``None``.
        """
        if not self.key_lookups or self.key_generator is None or not self.key_fields:
            return None
        equalities = getattr(predicate, "key_equalities", None)
        if equalities is None:
            return None
        alternatives = equalities(self.key_fields)
        if alternatives is None:
            return None
        return lookup_keys(self.key_generator, self.key_fields, alternatives)

    # -- writes --------------------------------------------------------------------------------------
    def get(self, key: str, kb: bytes | None = None) -> SowRecord | None:
        """The record stored under ``key`` (``kb``: the key encoded, when the caller has it), or ``None``.

        A record past its expiration is still returned until the sweeper removes it: callers that care
        compare :attr:`SowRecord.expire_at_ns` with the time (as publishes and queries do).
        """
        value = self.storage.get(key.encode() if kb is None else kb)
        if value is None:
            return None
        return SowRecord.decode(key, value)

    def upsert(self, record: SowRecord, previous: SowRecord | None) -> UpsertResult:
        """Store ``record`` (replacing ``previous``, which the caller read with :meth:`get`)."""
        value = record.encode()
        self.storage.write(puts=((record.key.encode(), value),))
        if self.history is not None:
            self.history.record(record.key, record.timestamp_ns, value)
        if previous is None:
            self.stats.inserts += 1
        else:
            self.stats.updates += 1
        if record.expire_at_ns:
            heapq.heappush(self._expiry_heap, (record.expire_at_ns, record.key))
        return UpsertResult(record, previous)

    def upsert_many(self, records: Sequence[SowRecord], inserts: int, *, new_keys: int | None = None,
                    puts: list[tuple[bytes, StoredValue]] | None = None, logged: bool = False) -> None:
        """Store ``records`` in one storage write (all or none): a batch of publishes. A key may appear more
        than once (the last record wins); ``inserts`` of them are new keys, the others update.

        Args:
            records: The records, in order.
            inserts: How many count as inserts in the topic's statistics.
            new_keys: How many distinct keys hold no record before the write, when the caller read every key
                through :meth:`get` (the publish path): the storage is told the count
                (:meth:`Storage.write_puts`) instead of working it out per key. ``None``: not known.
            puts: Each record's ``(key, stored value)`` when the caller has encoded them already; a value may be a
                :class:`~broker.sow.deferred.DeferredValue` only with ``logged`` and ``new_keys``.
            logged: The transaction log holds these publishes (with ``new_keys``: the storage may write them
                after returning, :meth:`Storage.write_logged_puts`).

        Raises:
            StorageError: the write failed; nothing was stored.
        """
        if puts is None:
            puts = [(rec.key.encode(), rec.encode()) for rec in records]
        if logged and new_keys is not None:
            self.storage.write_logged_puts(puts, new_keys)
        elif new_keys is None:
            self.storage.write(puts=puts)  # type: ignore[arg-type]  # bytes: see ``puts``
        else:
            self.storage.write_puts(puts, new_keys)  # type: ignore[arg-type]  # bytes: see ``puts``
        if self.history is not None:
            for rec, (_key, value) in zip(records, puts, strict=True):
                self.history.record(rec.key, rec.timestamp_ns, stored_bytes(value))
        stats = self.stats
        stats.inserts += inserts
        stats.updates += len(records) - inserts
        heap = self._expiry_heap
        for rec in records:
            if rec.expire_at_ns:
                heapq.heappush(heap, (rec.expire_at_ns, rec.key))

    def upsert_values(self, puts: list[tuple[bytes, StoredValue]], inserts: int, new_keys: int, *,
                      logged: bool = False) -> None:
        """:meth:`upsert_many` of records already encoded, ``(key, stored value)`` each, none expiring, on a topic
        without history (the compiled publish run): one storage write, ``inserts`` of them new keys, ``new_keys``
        distinct keys absent before; ``logged``: the transaction log holds them (:meth:`upsert_many`; only then
        may a value be a :class:`~broker.sow.deferred.DeferredValue`).

        Raises:
            StorageError: the write failed; nothing was stored.
        """
        if logged:
            self.storage.write_logged_puts(puts, new_keys)
        else:
            self.storage.write_puts(puts, new_keys)  # type: ignore[arg-type]  # bytes unless logged
        self.stats.inserts += inserts
        self.stats.updates += len(puts) - inserts

    def delete_keys(self, keys: Iterable[str]) -> list[SowRecord]:
        """Delete the records with these keys; returns the records that existed."""
        removed: list[SowRecord] = []
        for key in keys:
            rec = self.get(key)
            if rec is not None:
                removed.append(rec)
        if removed:
            self.storage.write(deletes=[r.key.encode() for r in removed])
            self.stats.deletes += len(removed)
            self._record_gone(removed)
        return removed

    def _record_gone(self, removed: Iterable[SowRecord], *, expired: bool = False) -> None:
        """Record deletes (now) or expirations (at each record's expiry time) in the history."""
        if self.history is None:
            return
        now = time.time_ns()
        for rec in removed:
            self.history.record(rec.key, (rec.expire_at_ns or now) if expired else now, None)

    def delete_matching(self, predicate: Callable[[Message], bool] | None) -> tuple[int, list[SowRecord]]:
        """Delete every record whose message satisfies ``predicate`` (all when ``None``).

        Returns:
            (records examined, records deleted).
        """
        examined = 0
        removed: list[SowRecord] = []
        with self.storage.snapshot() as snap:
            for rec in self._iter_records(snap):
                examined += 1
                if predicate is None or predicate(self.message_type.parse(rec.data)):
                    removed.append(rec)
        if removed:
            self.storage.write(deletes=[r.key.encode() for r in removed])
            self.stats.deletes += len(removed)
            self._record_gone(removed)
        return examined, removed

    # -- expiration ----------------------------------------------------------------------------------
    def rebuild_expiry_index(self) -> None:
        """Scan the stored records once (at start-up) to learn which ones expire and when."""
        self._expiry_heap = [
            (exp, key.decode())
            for key, value in self.storage.scan()
            if (exp := SowRecord.peek_expiry(value))
        ]
        heapq.heapify(self._expiry_heap)

    def next_expiry_ns(self) -> int | None:
        """When the next record is due to expire, or ``None``."""
        return self._expiry_heap[0][0] if self._expiry_heap else None

    def pop_expired(self, now_ns: int) -> list[SowRecord]:
        """Remove and return the records whose expiration time has passed.

        Costs O(expired log n): only due heap entries are examined; stale entries (the record was
        updated or deleted since) are skipped by comparing the stored expiration.

        Raises:
            StorageError: Reading or deleting failed. Nothing was removed and the due entries are back on the
                expiry index, so a later call expires the same records.
        """
        expired: list[SowRecord] = []
        heap = self._expiry_heap
        taken: list[tuple[int, str]] = []
        try:
            while heap and heap[0][0] <= now_ns:
                entry = heapq.heappop(heap)
                taken.append(entry)
                rec = self.get(entry[1])
                if rec is not None and rec.expire_at_ns == entry[0]:
                    expired.append(rec)
            if expired:
                self.storage.write(deletes=[r.key.encode() for r in expired])
                self._record_gone(expired, expired=True)
        except BaseException:
            for entry in taken:  # stale ones too: they are skipped again next time
                heapq.heappush(heap, entry)
            raise
        self.stats.expirations += len(expired)
        return expired

    # -- queries -------------------------------------------------------------------------------------
    def _iter_records(self, snap: Snapshot | Storage, now_ns: int = 0) -> Iterator[SowRecord]:
        for key, value in snap.scan():
            rec = SowRecord.decode(key.decode(), value)
            if now_ns and rec.expire_at_ns and rec.expire_at_ns <= now_ns:
                continue
            yield rec

    def query(
        self,
        snap: Snapshot,
        *,
        predicate: Callable[[Any], bool] | None = None,
        keys: Iterable[str] | None = None,
        now_ns: int = 0,
        pause_every: int = 0,
    ) -> Iterator[tuple[SowRecord, Any]]:
        """Records of a snapshot that match, with their parsed messages, in key order.

        Args:
            snap: A snapshot taken when the query started (consistent view).
            predicate: A compiled content filter, or ``None`` for every record.
            keys: Restrict to these SOW keys (a ``sow_keys`` list, or keys derived from an equality
                filter on the key fields) instead of scanning.
            now_ns: Records expired by this time are skipped.
            pause_every: When positive, also yield ``None`` after every this many records read (matching or
                not), so a caller streaming on the event loop can let others run during a long scan that
                matches little (:meth:`broker.engine.queries.QueryPlan.steps`).
        """
        self.stats.queries += 1
        # Stored records were validated when published: wrap them lazily, so a query without a filter
        # never decodes a body, and a filter decodes it on its first field lookup. The full record
        # (bookmark, correlation id, key text) is decoded only for records that match.
        lazy = self.message_type.lazy
        split = SowRecord.split
        decode = SowRecord.decode
        pairs: Iterable[tuple[bytes, bytes] | None] = self.stored(snap, keys)
        if pause_every > 0:
            pairs = _with_pauses(pairs, pause_every)  # type: ignore[arg-type]
        for pair in pairs:
            if pair is None:
                yield None  # type: ignore[misc]
                continue
            key, value = pair
            expire_at, data = split(value)
            if now_ns and expire_at and expire_at <= now_ns:
                continue
            msg = lazy(data)
            if predicate is None or predicate(msg):
                yield decode(key.decode(), value, data), msg

    @staticmethod
    def stored(snap: Snapshot, keys: Iterable[str] | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, stored value)`` of a snapshot in key order: every record, or those under ``keys`` (a
        ``sow_keys`` list or the keys an equality filter pins), fetched one by one in the order a scan gives.

        Reads only the snapshot, so a worker thread may iterate it while the event loop writes
        (:meth:`broker.engine.queries.QueryPlan.rows`)."""
        if keys is None:
            return snap.scan()
        return ((k, v) for k in sorted({k.encode() for k in keys}) if (v := snap.get(k)) is not None)

    def count(self) -> int:
        """Records stored."""
        return self.storage.count()

    def statistics(self) -> SowTopicStats:
        """Counters for monitoring. The record cache's: bytes held, and previous-record reads answered by it (an
        entry, or a key known to be absent) or by the storage engine; zeros without a cache."""
        s = self.stats
        h = self.history.stats if self.history else None
        cache = self.storage if isinstance(self.storage, CachedStorage) else None
        return SowTopicStats(
            records=self.count(),
            inserts=s.inserts,
            updates=s.updates,
            deletes=s.deletes,
            queries=s.queries,
            expirations=s.expirations,
            history_versions_written=h.versions_written if h else 0,
            history_pruned=h.pruned if h else 0,
            historical_queries=h.historical_queries if h else 0,
            record_cache_bytes=cache.held_bytes if cache else 0,
            record_cache_hits=cache.hits + cache.absent_known if cache else 0,
            record_cache_misses=cache.engine_reads if cache else 0,
        )


def check_batch_size(value: int | None) -> int:
    """The effective BatchSize of a query (default 1).

    Raises:
        CommandError: the batch size is out of range.
    """
    if value is None:
        return 1
    if value < 1 or value > MAX_BATCH_SIZE:
        raise CommandError("invalid options", f"BatchSize {value} is out of range 1..{MAX_BATCH_SIZE}")
    return value


def _with_pauses(pairs: Iterable[tuple[bytes, bytes]], every: int) -> Iterator[tuple[bytes, bytes] | None]:
    """``pairs`` with a ``None`` after every ``every`` of them."""
    n = 0
    for pair in pairs:
        yield pair
        n += 1
        if n == every:
            n = 0
            yield None
