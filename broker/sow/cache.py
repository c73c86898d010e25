"""A bounded cache of hot records in front of a SOW topic's storage engine.

Every publish to a SOW topic reads the record it replaces (the previous state: inserts and updates are
counted, delta publishes merge into it, out-of-focus notices and deltas compare with it). With LevelDB that
read is a C call plus a block lookup, a few microseconds; for a key written a moment ago it is a dict
lookup here. The cache also remembers keys known to be absent (an insert's read), so a key published twice
in a row is read once.

A cache can also know that it holds *every* record of its topic (:attr:`CachedStorage.complete`): the
engine held no record when the cache was made, or :meth:`CachedStorage.warm` (at start-up, before recovery)
loaded every record it held, and nothing was evicted or forgotten since (every record
written since came through :meth:`CachedStorage.write` and is still held). Then a key the cache does not hold
is absent, and an insert of a new key needs no read of the engine (for LevelDB a point read that visits the
memtables and the level-0 tables, several microseconds, the largest cost of an insert). The first eviction,
failed write or :meth:`CachedStorage.clear` ends it for the life of the cache: from then on a miss reads the
engine again.

Exactness: every write of the topic goes through :meth:`CachedStorage.write`, which updates the cache only
after the engine's write succeeded (a failed write forgets the keys it touched); queries read snapshots and
scans, which pass through to the engine. Nothing else writes the engine's records (recovery, expiration,
deletes and compaction all come through here), so the cache never serves a value the engine does not hold.
Live reads and writes come from one thread at a time (the engine's); snapshots may be used from any thread.

The bound is in bytes (keys, values and a fixed overhead per entry), least recently used first out: an
ordered dict whose hits move to its end (C operations, a fraction of a microsecond per publish). A first
version kept two plain dicts as generations instead; a cyclic pattern (W1's 1M publishes over 100k keys in
order) then found almost nothing (2.5% hits), as the generation turned over before the cycle came back.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal

from broker.config.model import DEFAULT_RECORD_CACHE_BYTES
from broker.sow.deferred import DeferredValue, StoredValue
from broker.sow.storage import Snapshot, Storage

#: Bytes counted per entry besides its key and value (the ordered dict's slot and links, the bytes headers).
ENTRY_OVERHEAD = 100



class _Miss(enum.Enum):
    """The type of :data:`MISS` (an enum member: a sentinel mypy tells apart from a value)."""

    MISS = "MISS"


_MISS: Final = _Miss.MISS


class CachedStorage(Storage):
    """A :class:`Storage` that answers :meth:`get` from a bounded cache of recently read or written records.

    Args:
        inner: The storage engine holding the records.
        max_bytes: The cache's bound (see the module docstring; ``<RecordCacheMemoryLimit>``, 64MB by default); 0
            turns the cache off.

    Attributes other than the :class:`Storage` methods (an engine's ``path``, ``reopens``...) are the inner
    engine's.
    """

    def __init__(self, inner: Storage, max_bytes: int = DEFAULT_RECORD_CACHE_BYTES) -> None:
        self.inner = inner
        self.max_bytes = max_bytes
        #: Key -> value (``None``: known to be absent; a :class:`DeferredValue` until first read), least recently
        #: used first.
        self._lru: OrderedDict[bytes, StoredValue | None] = OrderedDict()
        self._bytes = 0
        #: Reads answered from a held entry, and reads of keys the cache does not hold; of those, the ones answered
        #: "absent" without reading the engine (while :attr:`complete`).
        self.hits = 0
        self.misses = 0
        self.absent_known = 0
        #: Whether the cache holds every record of the engine, so that a key it does not hold is absent (see the
        #: module docstring): the engine starts empty, and nothing was evicted or forgotten since.
        self.complete = bool(max_bytes) and _empty(inner)

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes this class does not define: the engine's own (path, spec, reopens...).
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- the cache ----------------------------------------------------------------------------------------
    def _evict(self) -> None:
        """Drop the least recently used entries until the cache is within its bound."""
        lru = self._lru
        size = self._bytes
        self.complete = False  # an evicted record is still the engine's: a miss must read it
        while size > self.max_bytes and lru:
            key, value = lru.popitem(last=False)
            size -= len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
        self._bytes = size

    def _forget(self, keys: Iterable[bytes]) -> None:
        self.complete = False
        lru = self._lru
        for key in keys:
            value = lru.pop(key, _MISS)
            if value is not _MISS:
                self._bytes -= len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD

    def _existing(self, keys: list[bytes]) -> dict[bytes, bool] | None:
        """Whether each key exists, when the cache knows it for all of them (else ``None``)."""
        get = self._lru.get
        complete = self.complete
        known: dict[bytes, bool] = {}
        for key in keys:
            value = get(key, _MISS)
            if value is _MISS:
                if not complete:
                    return None
                known[key] = False
            else:
                known[key] = value is not None
        return known

    @property
    def held(self) -> OrderedDict[bytes, StoredValue | None]:
        """The cache itself, key -> stored value (``None``: known to be absent), for the compiled publish run
        (:func:`broker.speedups.publish.keyed_scan`) to read without a call per key. Read only: writes go through
        :meth:`write`; reads made from it are counted with :meth:`count_reads`. A :class:`DeferredValue` there is
        a large record's value not joined yet (the compiled run leaves such a run to the Python loop)."""
        return self._lru

    def warm(self) -> int:
        """Fill the empty cache with the engine's records, in key order, up to the bound (at start-up,
        before anything reads or writes it), so a restarted topic starts as it was left instead of cold.

        Returns:
            The records loaded. When every record fit, the cache holds the whole topic (:attr:`complete`), as
            for a topic that started empty: a key it does not hold is absent.
        """
        lru = self._lru
        if not self.max_bytes or lru:
            return 0
        limit = self.max_bytes
        size = 0
        records = self.inner.scan()
        try:
            for key, value in records:
                entry = len(key) + len(value) + ENTRY_OVERHEAD
                if size + entry > limit:
                    break
                lru[key] = value
                size += entry
            else:
                self.complete = True
        finally:
            _close(records)
        self._bytes = size
        return len(lru)

    @property
    def held_bytes(self) -> int:
        """Bytes the cache holds, as counted against :attr:`max_bytes` (keys, values, overhead per entry)."""
        return self._bytes

    @property
    def engine_reads(self) -> int:
        """Reads the cache could not answer, which read the storage engine."""
        return self.misses - self.absent_known

    def count_reads(self, hits: int, absent: int) -> None:
        """Count reads of :attr:`held` made by the caller: ``hits`` answered by an entry, ``absent`` answered by a
        missing one while :attr:`complete` (as :meth:`get` counts them; its move to the most recently used end is
        left to the write that follows)."""
        self.hits += hits
        self.misses += absent
        self.absent_known += absent

    def cached(self, key: bytes) -> bytes | None | Literal[_Miss.MISS]:
        """The cached value of ``key`` (``None``: known to be absent), or :data:`MISS` when not cached."""
        value = self._lru.get(key, _MISS)
        if type(value) is DeferredValue:
            return value.value()
        return None if value is _MISS and self.complete else value  # type: ignore[return-value]

    def clear(self) -> None:
        """Forget everything cached (a miss reads the engine from now on)."""
        self._lru = OrderedDict()
        self._bytes = 0
        self.complete = False

    # -- Storage ------------------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value under ``key``, from the cache when it holds the key."""
        lru = self._lru
        value = lru.get(key, _MISS)
        if value is not _MISS:
            self.hits += 1
            lru.move_to_end(key)
            if type(value) is DeferredValue:  # joined by the storage's thread as a rule; here if not yet
                value = lru[key] = value.value()
            return value  # type: ignore[return-value]
        self.misses += 1
        if self.complete:  # every record is held: this key has none
            self.absent_known += 1
            return None
        value = self.inner.get(key)
        if self.max_bytes:
            lru[key] = value
            self._bytes += len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
            if self._bytes > self.max_bytes:
                self._evict()
        return value

    def get_stored(self, key: bytes) -> StoredValue | None:
        """:meth:`get`, but a held :class:`DeferredValue` is returned as it is, not joined (the publish path reads
        only its header, and its record when the fan-out needs it: :mod:`broker.sow.deferred`)."""
        value = self._lru.get(key, _MISS)
        if type(value) is DeferredValue:
            self.hits += 1
            self._lru.move_to_end(key)
            return value
        return self.get(key)

    def write(self, puts: Iterable[tuple[bytes, bytes]] = (), deletes: Iterable[bytes] = ()) -> None:
        """Write through to the engine, then update the cache (on failure, forget the keys touched).

        When the cache knows whether every key touched exists (the engine just read them), the engine is told
        (:meth:`Storage.write_known`), so one that keeps a record count need not read them again.
        """
        put_list = puts if isinstance(puts, (list, tuple)) else list(puts)
        delete_list = deletes if isinstance(deletes, (list, tuple)) else list(deletes)
        if self.complete and not delete_list:  # the hot path (a batch of publishes): a key not held is absent
            get = self._lru.get
            known: dict[bytes, bool] | None = {k: get(k) is not None for k, _v in put_list}
        else:
            keys = [k for k, _v in put_list]
            keys.extend(delete_list)
            known = self._existing(keys)
        try:
            if known is None:
                self.inner.write(put_list, delete_list)
            else:
                self.inner.write_known(put_list, delete_list, known)
        except BaseException:
            self._forget([k for k, _v in put_list])
            self._forget(delete_list)
            raise
        if self.max_bytes:
            self._remember((*put_list, *((k, None) for k in delete_list)) if delete_list else put_list)

    def write_puts(self, puts: Sequence[tuple[bytes, bytes]], new_keys: int) -> None:
        """:meth:`write` of a batch of publishes, whose keys the caller read through :meth:`get` (so ``new_keys``,
        the distinct keys without a record, is exact): the engine is told the count, with no per-key map."""
        self._puts_through(self.inner.write_puts, puts, new_keys)

    def write_logged_puts(self, puts: Sequence[tuple[bytes, StoredValue]], new_keys: int) -> None:
        """:meth:`write_puts` through the engine's :meth:`Storage.write_logged_puts` (the journal covers them)."""
        self._puts_through(self.inner.write_logged_puts, puts, new_keys)

    def _puts_through(self, write: Callable[[Sequence[tuple[bytes, Any]], int], None],
                      puts: Sequence[tuple[bytes, StoredValue]], new_keys: int) -> None:
        """``write`` (an engine's) then remember ``puts``; on failure, forget their keys."""
        try:
            write(puts, new_keys)
        except BaseException:
            self._forget([k for k, _v in puts])
            raise
        if self.max_bytes:
            self._remember(puts)

    def _remember(self, pairs: Iterable[tuple[bytes, StoredValue | None]]) -> None:
        """Hold ``pairs`` just written (``None``: deleted) as the most recently used, within the bound."""
        lru = self._lru
        get = lru.get
        to_end = lru.move_to_end
        size = self._bytes
        for key, value in pairs:
            was = get(key, _MISS)
            lru[key] = value
            if was is _MISS:  # a new entry goes in at the end: the most recently used
                size += len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD
            else:  # replaced in place, then moved to the end (no delete: the dict keeps no dummy slot to clean up)
                to_end(key)
                size += (len(value) if value is not None else 0) - (len(was) if was is not None else 0)
        self._bytes = size
        if size > self.max_bytes:
            self._evict()

    def write_known(self, puts: Iterable[tuple[bytes, bytes]], deletes: Iterable[bytes],
                    existed: Mapping[bytes, bool]) -> None:
        """:meth:`write` (the cache knows better than the caller)."""
        self.write(puts, deletes)

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The engine's scan."""
        return self.inner.scan(start, stop)

    def snapshot(self) -> Snapshot:
        """The engine's snapshot."""
        return self.inner.snapshot()

    def count(self) -> int:
        """The engine's record count."""
        return self.inner.count()

    def compact(self) -> None:
        """The engine's compaction (it changes no record)."""
        self.inner.compact()

    def make_durable(self) -> None:
        """The engine's."""
        self.inner.make_durable()

    def writable(self) -> bool:
        """The engine's."""
        return self.inner.writable()

    def close(self) -> None:
        """Close the engine and drop the cache. Idempotent."""
        self.clear()
        self.inner.close()

    def statistics(self) -> dict[str, int]:
        """The engine's counters plus ``cache_hits``, ``cache_misses`` (previous-record reads) and
        ``cache_absent_known`` (misses answered without reading the engine)."""
        return {**self.inner.statistics(), "cache_hits": self.hits, "cache_misses": self.misses,
                "cache_absent_known": self.absent_known}

    def __repr__(self) -> str:
        return f"CachedStorage({self.inner!r}, max_bytes={self.max_bytes})"


def _empty(storage: Storage) -> bool:
    """Whether ``storage`` holds no record (its scan yields nothing)."""
    records = storage.scan()
    try:
        return next(iter(records), None) is None
    finally:
        _close(records)


def _close(records: Iterable[object]) -> None:
    """Close an engine's scan iterator early (releases its snapshot or cursor) when it can be closed."""
    close = getattr(records, "close", None)
    if close is not None:
        close()


#: What :meth:`CachedStorage.cached` returns for a key the cache does not hold.
MISS = _MISS
