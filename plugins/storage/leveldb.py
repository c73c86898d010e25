"""The ``leveldb`` storage engine (plyvel): one LevelDB database per SOW topic, at the topic's ``FileName``.

The database directory and its parents are created when missing. Every :meth:`LevelDBStorage.write` is
one LevelDB write batch, so an engine step's puts and deletes land together or not at all.

Writes are not fsynced by default: the transaction log is the durability layer (a SOW is a materialised
view rebuilt from it, DESIGN.md), and LevelDB's own log still survives a process crash. Set the option
``sync=true`` for topics without a transaction log whose SOW must survive a power loss.

Options (``<Storage><Options>``, declared in :data:`OPTIONS`, so ``broker check`` reports an unknown or
unparsable one with file and line): ``sync`` (``true``/``false``, default ``false``), ``compression``
(``snappy``/``none``, default ``none``), ``write_buffer_size`` (an AMPS size such as ``16MB``, or bytes;
default 16 MiB), ``lru_cache_size`` (a size; LevelDB's 8 MiB block cache when unset),
``bloom_filter_bits`` (bits per key, default 10; ``0`` turns the filter off).

The defaults are chosen for the SOW's access pattern, where every publish reads the record it replaces
and then writes it:

* Compression is off: a point read in a snappy-compressed table decompresses a whole block first, which
  makes it about twice as slow (200-byte JSON records, 100k and 1M records, mixed reads and writes: 12-20
  us against 5-10 us per read). ``compression=snappy`` trades that for a smaller database (a fifth of the
  size for the benchmark's padded 200-byte JSON records; how much depends on how repetitive they are).
* The write buffer (memtable) is 16 MiB instead of LevelDB's 4 MiB: with updates spread over the key
  space, each memtable flush is merged into the whole of level 1, so four times fewer flushes cut the
  background compaction work; measured with 300k random updates of a 1M-record table, the process's
  CPU fell by a third (8.0 s to 5.5 s) and reads got faster (10.5 to 6.9 us: fewer level-0 files to
  look in). It costs up to twice that memory per topic (a full memtable is kept while it is flushed).

``count()`` is O(1): the keys are counted once at open (one pass over the keys, no values), then every
write learns whether each distinct key it touches adds or removes a record. The engine reads a record
just before it writes it (the previous value of an upsert), so the storage remembers the outcome of the
last :meth:`LevelDBStorage.get` and reuses it; any other key costs one point read. That keeps the count
exact without an O(n) pass per ``count()`` and without a second read per publish.

Reads use a bloom filter (``bloom_filter_bits``, default 10 bits per key): a point read then touches at
most one data block instead of one per LevelDB level whose key range covers the key, and a read of a
key that is not there (an insert) usually touches none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plyvel

from broker import hookimpl
from broker.errors import StorageError
from broker.options import Option, OptionSet, boolean, choice, integer, size
from broker.sow.storage import Snapshot, Storage, StorageSpec

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["OPTIONS", "LevelDBSnapshot", "LevelDBStorage"]

#: Bits per key of the bloom filter when the option is not given (LevelDB's recommended value).
DEFAULT_BLOOM_BITS = 10

#: Memtable size when the option is not given (see the module docstring).
DEFAULT_WRITE_BUFFER = 16 * 1024 * 1024


def _positive_size(value: str) -> int:
    """An AMPS size (``16MB``) or a byte count, above zero."""
    parsed = size(value)
    if parsed <= 0:
        raise ValueError(f"{value.strip()!r} must be a positive size, e.g. 16MB")
    return parsed


def _bloom_bits(value: str) -> int:
    """Bits per key, ``0`` for no filter."""
    parsed = integer(value)
    if parsed < 0:
        raise ValueError(f"{parsed} is negative: give bits per key (10 is LevelDB's advice) or 0 for no filter")
    return parsed


#: The options of ``<Storage><Module>leveldb</Module><Options>``; see docs/plugins.md for their effect.
OPTIONS = OptionSet(
    Option("sync", boolean, default=False,
           doc="fsync every write: a SOW without a transaction log survives a power loss; each publish "
               "then waits for the disk"),
    Option("compression", choice("none", "snappy"), default="none",
           doc="snappy: smaller files, point reads (one per publish) about twice as slow"),
    Option("write_buffer_size", _positive_size, default=DEFAULT_WRITE_BUFFER,
           doc="memtable size (16MB): bigger means fewer flushes and less compaction, more memory per topic"),
    Option("lru_cache_size", _positive_size, default=None,
           doc="block cache size; LevelDB's 8MB when unset"),
    Option("bloom_filter_bits", _bloom_bits, default=DEFAULT_BLOOM_BITS,
           doc="bloom filter bits per key (0: no filter): a point read touches at most one block"),
)


def _wrap(exc: Exception, path: str, doing: str) -> StorageError:
    text = exc.args[0] if exc.args else exc
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if isinstance(exc, RuntimeError):  # plyvel's "Database is closed"
        return StorageError(f"leveldb storage at {path!r} is closed ({doing}).")
    if isinstance(exc, plyvel.IOError) and "lock" in str(text).lower():
        return StorageError(
            f"another broker holds the lock on {path!r}: is another broker running with this config? "
            f"Stop it, or give this topic another FileName. ({text})"
        )
    if isinstance(exc, plyvel.CorruptionError):
        return StorageError(
            f"leveldb storage at {path!r} is corrupt ({text}) while {doing}. Move the directory away; the "
            "SOW is rebuilt from the transaction log when the topic is logged."
        )
    return StorageError(f"leveldb storage at {path!r} failed while {doing}: {text}")


def _check_bytes(key: object, value: object) -> None:
    if not isinstance(key, bytes) or not isinstance(value, bytes):
        raise TypeError(f"storage keys and values must be bytes, got {type(key).__name__}, {type(value).__name__}")


class LevelDBSnapshot(Snapshot):
    """A LevelDB snapshot: reads see the database as it was when the snapshot was taken."""

    def __init__(self, owner: LevelDBStorage, snapshot: Any) -> None:
        self._owner = owner
        self._snapshot: Any = snapshot

    def _live(self) -> Any:
        if self._snapshot is None:
            raise StorageError("snapshot is closed: take a new one with storage.snapshot()")
        return self._snapshot

    def get(self, key: bytes) -> bytes | None:
        """The value under ``key`` when the snapshot was taken, or ``None``."""
        snapshot = self._live()
        try:
            return snapshot.get(key)
        except (plyvel.Error, RuntimeError) as exc:
            raise _wrap(exc, self._owner.path, "reading a snapshot") from exc

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop``, ascending, as of the snapshot."""
        return self._owner._iterate(self._live(), start, stop)

    def close(self) -> None:
        """Release the LevelDB snapshot. Idempotent."""
        if self._snapshot is not None:
            snapshot, self._snapshot = self._snapshot, None
            # RuntimeError: the database was closed first, and plyvel already released the snapshot.
            with contextlib.suppress(RuntimeError):
                snapshot.close()


class LevelDBStorage(Storage):
    """A SOW topic in a LevelDB database directory.

    Args:
        spec: ``spec.path`` is the database directory (required); ``spec.options`` as declared in
            :data:`OPTIONS`.

    Raises:
        StorageError: no path, the database is locked by another process, or it cannot be opened; the
            message names the path.
        OptionError: an unknown option, or one that does not parse; the message names the engine, the topic
            and the option.
    """

    def __init__(self, spec: StorageSpec) -> None:
        self.spec = spec
        if not spec.path:
            raise StorageError(
                f"Topic {spec.topic!r}: the leveldb storage engine needs a path. Set <FileName> on the "
                "topic, or use <Durability>transient</Durability> for an in-memory SOW."
            )
        self.path = str(spec.path)
        opts = OPTIONS.parse(spec.options, owner=f"storage engine 'leveldb' of topic {spec.topic!r} ({self.path})")
        self.sync: bool = opts["sync"]
        db_kwargs: dict[str, Any] = {
            "create_if_missing": True,
            "compression": None if opts["compression"] == "none" else "snappy",
            "write_buffer_size": opts["write_buffer_size"],
        }
        if opts["lru_cache_size"] is not None:
            db_kwargs["lru_cache_size"] = opts["lru_cache_size"]
        if opts["bloom_filter_bits"]:
            db_kwargs["bloom_filter_bits"] = opts["bloom_filter_bits"]
        try:
            Path(self.path).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the leveldb directory {self.path!r}: {exc}. Check FileName and permissions."
            ) from exc
        try:
            self._db: Any = plyvel.DB(self.path, **db_kwargs)
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "opening") from exc
        self._closed = False
        self._writes = 0
        #: ``(key, exists)`` of the last point read, valid until the next write (see the module docstring).
        self._probe: tuple[bytes, bool] | None = None
        try:
            with self._db.iterator(include_value=False) as it:
                self._count = sum(1 for _ in it)
        except plyvel.Error as exc:
            self._db.close()
            raise _wrap(exc, self.path, "counting records at open") from exc

    def _live(self) -> Any:
        if self._closed:
            raise StorageError(f"leveldb storage at {self.path!r} is closed.")
        return self._db

    def _iterate(self, source: Any, start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        try:
            iterator = source.iterator(start=start, stop=stop)
        except (plyvel.Error, RuntimeError) as exc:
            raise _wrap(exc, self.path, "starting a scan") from exc

        def generate() -> Iterator[tuple[bytes, bytes]]:
            try:
                with iterator:
                    yield from iterator
            except (plyvel.Error, RuntimeError) as exc:
                raise _wrap(exc, self.path, "scanning") from exc

        return generate()

    def get(self, key: bytes) -> bytes | None:
        """The value under ``key``, or ``None``."""
        db = self._live()
        try:
            value = db.get(key)
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "reading") from exc
        self._probe = (key, value is not None)
        return value

    def write(self, puts: Iterable[tuple[bytes, bytes]] = (), deletes: Iterable[bytes] = ()) -> None:
        """Apply ``puts`` then ``deletes`` in one LevelDB write batch (all or nothing).

        Raises:
            TypeError: a key or value is not ``bytes`` (nothing is written).
            StorageError: the storage is closed or LevelDB fails.
        """
        db = self._live()
        put_list = puts if isinstance(puts, (list, tuple)) else list(puts)
        delete_list = deletes if isinstance(deletes, (list, tuple)) else list(deletes)
        probe, self._probe = self._probe, None
        if len(put_list) == 1 and not delete_list:  # an upsert, the hot path: one put, no batch object
            key, value = put_list[0]
            if type(key) is not bytes or type(value) is not bytes:
                _check_bytes(key, value)
            try:
                existed = probe[1] if probe is not None and probe[0] == key else db.get(key) is not None
                db.put(key, value, sync=self.sync)
            except plyvel.Error as exc:
                raise _wrap(exc, self.path, "writing") from exc
            self._count += not existed
            self._writes += 1
            return
        if not put_list and not delete_list:
            return
        # Whether each touched key exists afterwards; puts come first, so a later delete wins.
        final: dict[bytes, bool] = {}
        for key, value in put_list:
            if type(key) is not bytes or type(value) is not bytes:
                _check_bytes(key, value)
            final[key] = True
        for key in delete_list:
            if type(key) is not bytes:
                _check_bytes(key, b"")
            final[key] = False
        try:
            delta = 0
            for key, exists_after in final.items():
                existed = probe[1] if probe is not None and probe[0] == key else db.get(key) is not None
                delta += exists_after - existed
            with db.write_batch(transaction=True, sync=self.sync) as batch:
                for key, value in put_list:
                    batch.put(key, value)
                for key in delete_list:
                    batch.delete(key)
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "writing") from exc
        self._count += delta
        self._writes += 1

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop``, ascending.

        LevelDB iterators read an implicit snapshot, so writes during the scan do not disturb it.
        """
        return self._iterate(self._live(), start, stop)

    def snapshot(self) -> LevelDBSnapshot:
        """A LevelDB snapshot (cheap: pins a sequence number; old versions are kept until it closes)."""
        db = self._live()
        try:
            return LevelDBSnapshot(self, db.snapshot())
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "taking a snapshot") from exc

    def count(self) -> int:
        """The number of records (O(1); see the module docstring)."""
        self._live()
        return self._count

    def compact(self) -> None:
        """Compact the whole key range (blocking; run it off the event loop thread)."""
        db = self._live()
        try:
            db.compact_range()
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "compacting") from exc

    def make_durable(self) -> None:
        """Make every write so far durable: an empty write batch with ``sync`` fsyncs LevelDB's log, which
        holds every earlier write (its tables are fsynced when LevelDB writes them)."""
        db = self._live()
        try:
            with db.write_batch(sync=True):
                pass
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "syncing") from exc

    def close(self) -> None:
        """Close the database and release its lock. Idempotent."""
        if not self._closed:
            self._closed = True
            self._db.close()

    def statistics(self) -> dict[str, int]:
        """``records`` and ``writes`` (write batches applied)."""
        return {"records": self._count, "writes": self._writes}

    def __repr__(self) -> str:
        return f"LevelDBStorage(topic={self.spec.topic!r}, path={self.path!r})"


@hookimpl
def broker_register_storage_engines(registry: Registry) -> None:
    """Register ``leveldb``."""
    registry.add(
        "leveldb",
        LevelDBStorage,
        description="LevelDB (plyvel) database per topic at its FileName; write batches per engine step",
        options=OPTIONS,
    )
