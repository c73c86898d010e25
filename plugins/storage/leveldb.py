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

**LevelDB's background thread runs below the event loop** (nice +10 from the loop's, at most 19). LevelDB does its
memtable flushes and compactions on one thread per process, shared by every open database; with updates spread
over a large topic, most of its work is *read-triggered* ("seek") compaction, which LevelDB starts when point
reads look into more than one table and which no option turns off: 18-25 us of that thread's CPU per update at
10k updates/s over 1M records (about 44 MB/s rewritten for 2.5 MB/s of updates), a quarter of the broker's CPU in
W3 (docs/bench.md). At the default priority it takes a core from the event loop, which every client waits for,
whenever the machine is busy; niced, it runs on what the loop and the other processes leave (a whole idle core on
a quiet machine, so it keeps up as before) and, starved, does fewer of the optional seek compactions. The
compactions LevelDB needs (a memtable flush, too many level-0 tables) still happen: when they fall far behind,
LevelDB slows or blocks writes, the loop then waits and the thread gets the CPU. The thread is found at the first
open in the process (:func:`lower_background_priority`); where it cannot be (not Linux), nothing changes.

**Obsolete files are freed outside LevelDB's lock** (:mod:`broker_plugins.storage.deferred_deletes`). LevelDB
1.22 deletes the tables a compaction made obsolete while holding the mutex every write takes, at about 1 ms per MB
freed, so the event loop's writes stopped for 60-80 ms at the end of each large compaction. A second hard link to
each table and log file, dropped by a thread of its own, makes LevelDB's delete instant.

**Large values are written by a thread** (:mod:`broker_plugins.storage.write_behind`), for writes the transaction
log covers (:meth:`LevelDBStorage.write_logged_puts`): a 50 MB put held the event loop 80-135 ms. Reads, scans and
snapshots see a pending write at once; ``close`` and ``make_durable`` wait for it.

**A full disk.** When a write fails with an I/O error (ENOSPC or EDQUOT on LevelDB's log or on a table a
background compaction writes), LevelDB keeps failing every later write with that error, even once space
returns, until the database is opened again. So the storage stops writing (each write raises
``StorageError`` at once, reads go on from the open database) and recovers by itself: at the next write
(or :meth:`LevelDBStorage.writable`) after a back-off (0.1 s doubling to 5 s), when the file system has room
for what reopening writes (the size of LevelDB's log files, which become a table, plus 512 KiB), it closes
the database and opens it again. Reopening replays LevelDB's log: every write that succeeded is there, and a
write that failed is not (a write batch is all or nothing, and a record cut short by the full disk fails its
checksum and is dropped). The record count is taken again after the reopen. Nothing of this costs the hot
path anything: the checks run only after a failure.

**Room to open.** Opening a LevelDB replays its log (``NNNNNN.log``, up to a memtable's worth of writes, 16 MiB by
default) into a new table before the open returns: an open needs about the log's size free, plus a new manifest
and log. A broker that kept serving on a disk that then filled (publishes refused with ``tx store failure``) found
no room for that at its restart (a 20 MB tmpfs, a 10 MB journal and an 8 MB log: ``No space left on device``;
docs/txlog.md, "Full disk"). So:

* while writing, the storage checks the free space every :data:`ROOM_CHECK_EVERY` (0.25 s, 20 ms once the free
  space is below the log plus :data:`PLENTY`): when it is below the log's size plus :data:`LOW_SPACE` and the
  log holds :data:`FLUSH_MIN` bytes or more, it flushes the memtable into a table (in a thread, which waits
  for it: ``compact_range`` of an empty range), which empties the log. The log stays small while the disk fills;
* it keeps a reserve file (:data:`RESERVE_NAME`) in the database directory at the log's size plus
  :data:`REOPEN_MARGIN` plus :data:`RESERVE_SLACK` (at least :data:`RESERVE_BYTES`), grown at each room check while
  the disk has room (``posix_fallocate``: real blocks), given back when the log shrinks and space is short;
  LevelDB ignores it. An open that finds less free space than the log's size plus :data:`REOPEN_MARGIN`
  deletes the reserve first, so a restart on the disk the broker filled has room to replay the log;
* an open that still lacks room refuses before LevelDB writes anything, saying how much it needs, how much is
  free on which mount, and what to do (free space, or move the topic's ``FileName``).

The open may still start a compaction that does not fit (it writes its output before it deletes its inputs);
the store's writes then fail as above, and :meth:`LevelDBStorage.full_disk_advice` says how much room it needs
(start-up recovery names it when it cannot write). A failed flush is LevelDB's failed background write: writes
stop and the storage reopens itself as above.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plyvel

from broker import hookimpl
from broker.errors import StorageError
from broker.options import Option, OptionSet, boolean, choice, integer, size
from broker.sow.deferred import DeferredValue, StoredValue, stored_bytes
from broker.sow.storage import Snapshot, Storage, StorageSpec
from broker_plugins.storage.deferred_deletes import DeferredDeletes, Held
from broker_plugins.storage.niceness import lower_below_loop
from broker_plugins.storage.write_behind import LARGE_VALUE, WriteBehind

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["OPTIONS", "LevelDBSnapshot", "LevelDBStorage"]

#: Bits per key of the bloom filter when the option is not given (LevelDB's recommended value).
DEFAULT_BLOOM_BITS = 10

#: Memtable size when the option is not given (see the module docstring).
DEFAULT_WRITE_BUFFER = 16 * 1024 * 1024

#: Seconds between attempts to reopen after a failed write: doubling from the first to the last.
RECOVER_BACKOFF = (0.1, 5.0)
#: Free bytes needed beyond the size of LevelDB's log files before a reopen is tried.
REOPEN_MARGIN = 512 * 1024

#: The open-space reserve: a file in the database directory, kept while the disk has room and dropped by an open
#: that lacks room to replay LevelDB's log (module docstring, "Room to open").
RESERVE_NAME = "broker-open-reserve"
RESERVE_BYTES = 1024 * 1024
#: The reserve is kept at LevelDB's log size plus :data:`REOPEN_MARGIN` plus this (at least :data:`RESERVE_BYTES`);
#: it is given back down to that once it is more than :data:`RESERVE_SHRINK` above, while the free space is below
#: the log plus :data:`PLENTY`.
RESERVE_SLACK = 512 * 1024
RESERVE_SHRINK = 256 * 1024
#: While the free space is below LevelDB's log size plus this, the memtable is flushed into a table (the log
#: emptied) once the log holds :data:`FLUSH_MIN` bytes: the log stays small while the disk fills.
LOW_SPACE = 8 * 1024 * 1024
FLUSH_MIN = 256 * 1024
#: Seconds between room checks while writing: when the free space is below the log plus :data:`PLENTY`, and above.
ROOM_CHECK_EVERY = (0.02, 0.25)
PLENTY = 64 * 1024 * 1024

#: How much lower than the event loop's LevelDB's background thread runs (added to the loop thread's niceness,
#: at most 19; see the module docstring).
BACKGROUND_NICE = 10

log = logging.getLogger("broker.sow")

#: A key without a pending write (a value there may be ``None``: a pending delete).
_PENDING_MISS: Any = object()


def _task_ids() -> set[int]:
    """The ids of this process's threads (Linux ``/proc/self/task``)."""
    return {int(name) for name in os.listdir("/proc/self/task")}


def _python_thread_ids() -> set[int]:
    return {t.native_id for t in threading.enumerate() if t.native_id is not None}


class _Background:
    """LevelDB's background thread: one per process (its default Env's), shared by every open database."""

    lock = threading.Lock()
    #: Whether the thread was looked for (once per process).
    done = False
    #: Its thread id once found and lowered, else ``None``.
    tid: int | None = None


def lower_background_priority(step: int = BACKGROUND_NICE) -> int | None:
    """Lower the scheduling priority of LevelDB's background thread ``step`` below the event loop's (once per
    process; see the module docstring). Returns the thread id, or ``None`` where it could not be found or
    lowered (not Linux, no temporary directory, the thread started by something else before): LevelDB then
    runs as it always did.

    LevelDB starts the thread at its first compaction, so this makes one: a put and a ``compact_range`` in a
    throw-away database in a temporary directory; the thread that appeared meanwhile, and that Python did not
    start, is LevelDB's.
    """
    with _Background.lock:
        if _Background.done:
            return _Background.tid
        _Background.done = True
        try:
            before = _task_ids()
            with tempfile.TemporaryDirectory(prefix="broker-leveldb-") as tmp:
                db = plyvel.DB(tmp, create_if_missing=True)
                try:
                    db.put(b"k", b"v")
                    db.compact_range()  # the memtable's flush runs on the background thread: it exists now
                finally:
                    db.close()
            found = _task_ids() - before - _python_thread_ids()
            if len(found) != 1:
                log.debug("LevelDB's background thread not found (%d new threads); its priority is left as is",
                          len(found))
                return None
            (tid,) = found
            nice = lower_below_loop(tid, step)
        except (OSError, plyvel.Error, AttributeError) as exc:  # AttributeError: no os.setpriority (not POSIX)
            log.debug("LevelDB's background thread keeps its priority: %s", exc)
            return None
        log.debug("LevelDB's background thread %d runs at nice %d", tid, nice)
        _Background.tid = tid
        return tid


def _mount_of(path: str) -> str:
    """The mount point holding ``path`` (for messages)."""
    p = Path(path).resolve()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return str(p)


def _log_bytes(path: str) -> int:
    """The size of LevelDB's log files in ``path`` (what an open replays into a table)."""
    return sum(e.stat().st_size for e in os.scandir(path) if e.name.endswith(".log") and e.is_file())


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _mb(n: int, *, round_up: bool = False) -> str:
    """``n`` bytes in MB to 0.1 (down; up with ``round_up``: a space needed is never printed below what is free
    when it is more)."""
    tenths = -(-n // 100_000) if round_up else n // 100_000
    return f"{tenths / 10:.1f}"


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


def _touched(puts: Sequence[tuple[bytes, StoredValue]], deletes: Sequence[bytes]) -> dict[bytes, bool]:
    """Whether each key a write touches exists afterwards (puts come first, so a later delete wins); raises
    ``TypeError`` for a key or value that is not ``bytes`` (or a :class:`DeferredValue`: a queued write)."""
    final: dict[bytes, bool] = {}
    for key, value in puts:
        if type(key) is not bytes or (type(value) is not bytes and type(value) is not DeferredValue):
            _check_bytes(key, value)
        final[key] = True
    for key in deletes:
        if type(key) is not bytes:
            _check_bytes(key, b"")
        final[key] = False
    return final


def _overlaid(pairs: Iterator[tuple[bytes, bytes]], overlay: Mapping[bytes, StoredValue | None],
              start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """``pairs`` (ascending) with ``overlay``'s writes in ``[start, stop)`` applied: its values replace or add
    records, its ``None`` removes them."""
    mine = sorted((k, None if v is None else stored_bytes(v)) for k, v in overlay.items()
                  if (start is None or k >= start) and (stop is None or k < stop))
    at = 0
    try:
        for key, value in pairs:
            while at < len(mine) and mine[at][0] < key:
                if mine[at][1] is not None:
                    yield mine[at]  # type: ignore[misc]
                at += 1
            if at < len(mine) and mine[at][0] == key:
                if mine[at][1] is not None:
                    yield mine[at]  # type: ignore[misc]
                at += 1
                continue
            yield key, value
        for key, over in mine[at:]:
            if over is not None:
                yield key, over
    finally:
        close = getattr(pairs, "close", None)
        if close is not None:
            close()


class LevelDBSnapshot(Snapshot):
    """A LevelDB snapshot: reads see the database as it was when the snapshot was taken."""

    def __init__(self, owner: LevelDBStorage, snapshot: Any,
                 overlay: dict[bytes, StoredValue | None] | None = None) -> None:
        self._owner = owner
        self._snapshot: Any = snapshot
        self._cursor: Any = None  # an unbounded iterator reused by first()
        #: The writes pending when the snapshot was taken (key -> value, ``None``: deleted): newer than the
        #: database's for their keys (module docstring, large values).
        self._overlay = overlay or None

    def _live(self) -> Any:
        if self._snapshot is None:
            raise StorageError("snapshot is closed: take a new one with storage.snapshot()")
        return self._snapshot

    def get(self, key: bytes) -> bytes | None:
        """The value under ``key`` when the snapshot was taken, or ``None``."""
        snapshot = self._live()
        overlay = self._overlay
        if overlay is not None and key in overlay:
            over = overlay[key]
            return None if over is None else stored_bytes(over)
        try:
            return snapshot.get(key)
        except (plyvel.Error, RuntimeError) as exc:
            raise _wrap(exc, self._owner.path, "reading a snapshot") from exc

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop``, ascending, as of the snapshot."""
        pairs = self._owner._iterate(self._live(), start, stop)
        if self._overlay is None:
            return pairs
        return _overlaid(pairs, self._overlay, start, stop)

    def first(self, start: bytes, stop: bytes) -> tuple[bytes, bytes] | None:
        """The first ``(key, value)`` with ``start <= key < stop``: one seek of a cursor kept for the
        snapshot's lifetime (a new plyvel iterator per call costs several times the seek)."""
        if self._overlay is not None:  # writes were pending when it was taken: merged with the database's
            return Snapshot.first(self, start, stop)
        snapshot = self._live()
        try:
            if self._cursor is None:
                self._cursor = snapshot.iterator()
            cursor = self._cursor
            cursor.seek(start)
            item = next(cursor, None)
        except (plyvel.Error, RuntimeError) as exc:
            raise _wrap(exc, self._owner.path, "reading a snapshot") from exc
        return item if item is not None and item[0] < stop else None

    def close(self) -> None:
        """Release the LevelDB snapshot. Idempotent."""
        if self._cursor is not None:
            cursor, self._cursor = self._cursor, None
            with contextlib.suppress(RuntimeError):
                cursor.close()
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
        self._db_kwargs = db_kwargs
        self._closed = False
        self._writes = 0
        #: ``(key, exists)`` of the last point read, valid until the next write (see the module docstring).
        self._probe: tuple[bytes, bool] | None = None
        #: The open database (``None`` once closed, or when a reopen failed); ``_wdb`` is it while writable.
        self._db: Any = None
        self._wdb: Any = None
        self._count = 0
        #: Why writes stopped (a full disk), when to try reopening next, and the back-off.
        self._failure: str | None = None
        self._next_try = 0.0
        self._backoff = RECOVER_BACKOFF[0]
        #: Times the database was reopened after a failed write.
        self.reopens = 0
        #: The database's files held by :class:`DeferredDeletes` (``None``: LevelDB deletes them itself).
        self._held: Held | None = None
        #: When the next room check is due, and the thread flushing the memtable (module docstring, "Room to
        #: open"); ``memtable_flushes`` counts the flushes it started.
        self._next_room_check = 0.0
        self._flusher: threading.Thread | None = None
        self.memtable_flushes = 0
        #: The thread writing large values and the writes it has pending (made at the first large logged put).
        self._behind: WriteBehind | None = None
        self._room_to_open()
        self._open()

    def _room_to_open(self) -> None:
        """Make sure the file system has room to replay LevelDB's log at the open: drop the reserve when it
        lacks room (module docstring, "Room to open").

        Raises:
            StorageError: There is not room even so: how much is needed, how much is free, and what to do.
        """
        try:
            logs = _log_bytes(self.path)
            free = _free_bytes(self.path)
        except OSError:
            return  # let the open say what is wrong
        need = logs + REOPEN_MARGIN
        if logs == 0 or free >= need:
            return
        reserve = Path(self.path) / RESERVE_NAME
        with contextlib.suppress(FileNotFoundError):
            reserve.unlink()
            log.warning("SOW storage %s (topic %s): %s MB free, %s MB needed to replay LevelDB's log; the open-space "
                        "reserve was freed for it", self.path, self.spec.topic, _mb(free), _mb(need, round_up=True))
            with contextlib.suppress(OSError):
                free = _free_bytes(self.path)
        if free >= need:
            return
        raise StorageError(
            f"opening the SOW store of topic {self.spec.topic} needs about {_mb(need, round_up=True)} MB free to replay its log "
            f"(LevelDB writes its {_mb(logs)} MB log into a table before it opens); {_mb(free)} MB are free on "
            f"{_mount_of(self.path)}: free space there, or move the topic's FileName ({self.path}) to a disk with "
            "room. Nothing was lost: the log is kept until it has been replayed."
        )

    def full_disk_advice(self, disk_full: bool = False) -> str | None:
        """When writes stopped on a full disk (ENOSPC, EDQUOT), or ``disk_full`` (the caller met it on the same
        disk): how much room LevelDB needs, how much is free on which mount, and what to do (start-up
        recovery's refusal names it); ``None`` otherwise.

        A write after the open can fail for want of room even when the open had room for the log: the open
        may start a compaction, which writes its output before it deletes its inputs, up to the size of all
        the tables; and LevelDB keeps a failed compaction's partial output until it is opened again."""
        failure = self._failure or ""
        if not disk_full and "No space left" not in failure and "Disk quota" not in failure:
            return None
        try:
            tables = sum(e.stat().st_size for e in os.scandir(self.path)
                         if e.name.endswith((".ldb", ".sst")) and e.is_file())
            logs = _log_bytes(self.path)
            free = _free_bytes(self.path)
        except OSError:
            return None
        need = tables + logs + REOPEN_MARGIN
        return (f"the SOW store of topic {self.spec.topic} needs about {_mb(need, round_up=True)} MB free to write (LevelDB "
                f"compacts its {_mb(tables)} MB of tables at the open, writing the new ones before it deletes the "
                f"old, and its log holds {_mb(logs)} MB); {_mb(free)} MB are free on {_mount_of(self.path)}: free "
                f"space there, or move the topic's FileName ({self.path}) to a disk with room")

    def _check_room(self) -> None:
        """The room check while writing (module docstring, "Room to open"): flush the memtable when the disk is
        getting full; keep the reserve at the log's size plus :data:`RESERVE_SLACK` while the disk has room.
        Cheap: a ``statvfs``, a directory listing, a ``stat``."""
        now = time.monotonic()
        reserve = Path(self.path) / RESERVE_NAME
        try:
            free = _free_bytes(self.path)
            logs = _log_bytes(self.path)
            held = reserve.stat().st_size if reserve.exists() else 0
        except OSError:
            self._next_room_check = now + ROOM_CHECK_EVERY[1]
            return
        self._next_room_check = now + ROOM_CHECK_EVERY[free - logs > PLENTY]
        if free < logs + LOW_SPACE and logs >= FLUSH_MIN and self._flusher is None:
            db = self._wdb
            if db is not None:
                self.memtable_flushes += 1
                self._flusher = threading.Thread(target=self._flush_memtable, args=(db,), daemon=True,
                                                 name=f"leveldb-flush-{self.spec.topic}")
                self._flusher.start()
        target = max(RESERVE_BYTES, logs + REOPEN_MARGIN + RESERVE_SLACK)
        # Given back only while space is short: freeing many MB costs about 1 ms per MB on ext4 (on this thread).
        if held < target or (held > target + RESERVE_SHRINK and free - logs <= PLENTY):
            try:
                self._size_reserve(reserve, target)
            except OSError as exc:  # a full disk: the reserve stays as it is
                log.debug("SOW storage %s: the open-space reserve stays at %d bytes (%s)", self.path, held, exc)

    @staticmethod
    def _size_reserve(reserve: Path, size: int) -> None:
        """Make the reserve file ``size`` bytes of real blocks (``posix_fallocate``; zeros where that is not
        supported). A growth that does not fit fails whole (ENOSPC) and leaves the file as it was."""
        fd = os.open(reserve, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            held = os.fstat(fd).st_size
            if size < held:
                os.ftruncate(fd, size)
                return
            try:
                os.posix_fallocate(fd, held, size - held)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    os.ftruncate(fd, held)  # give back what a failed fallocate may have kept
                    raise
                try:
                    os.pwrite(fd, b"\0" * (size - held), held)
                except OSError:
                    os.ftruncate(fd, held)
                    raise
        finally:
            os.close(fd)

    def _flush_memtable(self, db: Any) -> None:
        """Flush the memtable into a table, which empties LevelDB's log (a thread: it waits for the flush)."""
        try:
            db.compact_range(start=b"", stop=b"")  # an empty range: the memtable's flush, no table compacted
        except (plyvel.Error, RuntimeError) as exc:  # a full disk: the next write meets LevelDB's error
            log.debug("SOW storage %s: flushing the memtable failed: %s", self.path, exc)

    def _join_flusher(self) -> None:
        """Wait for a memtable flush in progress (before the database is closed)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.join()

    def _open(self) -> None:
        """Open the database and count its records.

        Raises:
            StorageError: It cannot be opened or read.
        """
        lower_background_priority()
        DeferredDeletes.release(self._held)  # a reopen: the files are held anew below
        self._held = None
        try:
            db = plyvel.DB(self.path, **self._db_kwargs)
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "opening") from exc
        try:
            with db.iterator(include_value=False) as it:
                count = sum(1 for _ in it)
        except plyvel.Error as exc:
            db.close()
            raise _wrap(exc, self.path, "counting records at open") from exc
        self._db = self._wdb = db
        self._count = count
        self._probe = None
        self._held = DeferredDeletes.hold(self.path, BACKGROUND_NICE)

    def _live(self) -> Any:
        return self._db if self._db is not None else self._recover_or_raise()

    def _writable_db(self) -> Any:
        return self._wdb if self._wdb is not None else self._recover_or_raise()

    def _recover_or_raise(self) -> Any:
        """The database, reopened after a failed write; raises when it is closed or cannot be reopened yet."""
        if self._closed:
            raise StorageError(f"leveldb storage at {self.path!r} is closed.")
        if not self.writable():
            raise StorageError(
                f"leveldb storage at {self.path!r} cannot be written since a write failed ({self._failure}); it "
                "is opened again by itself once the disk has room"
            )
        return self._wdb

    def _write_failed(self, exc: Exception) -> None:
        """A write (or compaction) failed with an I/O error: stop writing until a reopen (module docstring)."""
        text = exc.args[0] if exc.args else exc
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if self._failure is None:
            log.error("SOW storage %s (topic %s): a write failed (%s); writes are refused until the database "
                      "is opened again, which is tried by itself once the disk has room", self.path,
                      self.spec.topic, text)
        self._failure = str(text)
        self._wdb = None
        self._probe = None
        self._next_try = time.monotonic() + self._backoff

    def writable(self) -> bool:
        """Whether writes work; after a failed write, reopen the database when due and there is room."""
        if self._wdb is not None:
            return True
        if self._closed or time.monotonic() < self._next_try:
            return False
        self._backoff = min(self._backoff * 2, RECOVER_BACKOFF[1])
        self._next_try = time.monotonic() + self._backoff
        if not self._room_to_reopen():
            return False
        try:
            self._room_to_open()
        except StorageError:
            return False
        self._join_flusher()
        behind = self._behind
        if behind is not None:
            behind.wait_idle()  # nothing being written while the database is closed and opened
        old, self._db = self._db, None
        if old is not None:
            old.close()
        try:
            self._open()
        except StorageError as exc:
            log.warning("SOW storage %s: reopening after a failed write failed (%s); retrying", self.path, exc)
            return False
        if behind is not None and behind.pending:  # the records counted at the open lack the pending writes
            db = self._db
            for key, value in list(behind.pending.items()):
                self._count += (value is not None) - (db.get(key) is not None)
            behind.resume()
        self.reopens += 1
        log.info("SOW storage %s (topic %s): writable again after reopening (%d records); the failed write "
                 "was not applied", self.path, self.spec.topic, self._count)
        self._failure = None
        self._backoff = RECOVER_BACKOFF[0]
        return True

    def _room_to_reopen(self) -> bool:
        """Whether the file system has room for what a reopen writes (LevelDB's logs become a table)."""
        try:
            st = os.statvfs(self.path)
            logs = sum(e.stat().st_size for e in os.scandir(self.path) if e.name.endswith(".log"))
        except OSError:
            return True  # let the reopen say what is wrong
        return st.f_bavail * st.f_frsize >= logs + REOPEN_MARGIN

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
        behind = self._behind
        try:
            # One lookup: the thread drops a key from ``pending`` only once LevelDB holds its value.
            value = behind.pending.get(key, _PENDING_MISS) if behind is not None and behind.pending else _PENDING_MISS
            if value is _PENDING_MISS:
                value = db.get(key)
            elif type(value) is DeferredValue:  # joined by the thread as a rule; here if not yet
                value = value.value()
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "reading") from exc
        self._probe = (key, value is not None)
        return value

    def write(self, puts: Iterable[tuple[bytes, bytes]] = (), deletes: Iterable[bytes] = ()) -> None:
        """Apply ``puts`` then ``deletes`` in one LevelDB write batch (all or nothing).

        Raises:
            TypeError: a key or value is not ``bytes`` (nothing is written).
            StorageError: the storage is closed or LevelDB fails (nothing is written; after an I/O error such
                as a full disk, writes fail at once until the storage has reopened itself).
        """
        self.write_known(puts, deletes, {})

    def write_known(self, puts: Iterable[tuple[bytes, bytes]], deletes: Iterable[bytes],
                    existed: Mapping[bytes, bool]) -> None:
        """:meth:`write`, counting records with ``existed`` (whether each key exists now, from the caller's
        reads) where it has the key, instead of a point read per key (see the module docstring)."""
        db = self._wdb
        if db is None:
            db = self._recover_or_raise()
        put_list = puts if isinstance(puts, (list, tuple)) else list(puts)
        delete_list = deletes if isinstance(deletes, (list, tuple)) else list(deletes)
        if self._behind is not None and self._behind.pending:  # queued behind the pending writes, in order
            self._write_behind(db, put_list, delete_list, existed)
            return
        probe, self._probe = self._probe, None
        if len(put_list) == 1 and not delete_list:  # an upsert, the hot path: one put, no batch object
            key, value = put_list[0]
            if type(key) is not bytes or type(value) is not bytes:
                _check_bytes(key, value)
            try:
                was = existed.get(key)
                if was is None:
                    was = probe[1] if probe is not None and probe[0] == key else db.get(key) is not None
                db.put(key, value, sync=self.sync)
            except plyvel.Error as exc:
                if isinstance(exc, plyvel.IOError):
                    self._write_failed(exc)
                raise _wrap(exc, self.path, "writing") from exc
            self._count += not was
            self._writes += 1
            if time.monotonic() >= self._next_room_check:
                self._room_checked()
            return
        if not put_list and not delete_list:
            return
        if not delete_list and existed and self._put_known(db, put_list, existed):
            return
        final = _touched(put_list, delete_list)
        try:
            delta = 0
            for key, exists_after in final.items():
                was = existed.get(key)
                if was is None:
                    was = probe[1] if probe is not None and probe[0] == key else db.get(key) is not None
                delta += exists_after - was
            with db.write_batch(transaction=True, sync=self.sync) as batch:
                for key, value in put_list:
                    batch.put(key, value)
                for key in delete_list:
                    batch.delete(key)
        except plyvel.Error as exc:
            if isinstance(exc, plyvel.IOError):
                self._write_failed(exc)
            raise _wrap(exc, self.path, "writing") from exc
        self._count += delta
        self._writes += 1
        if time.monotonic() >= self._next_room_check:
            self._room_checked()

    def write_puts(self, puts: Sequence[tuple[bytes, bytes]], new_keys: int) -> None:
        """:meth:`write` of puts only, ``new_keys`` of their distinct keys absent before (a batch of publishes
        through the SOW's cache, which read every key): one put loop, the record count moved by ``new_keys``."""
        if len(puts) <= 1:  # one publish (a paced publisher): a put, no batch object
            if puts:
                self.write_known(puts, (), {puts[0][0]: not new_keys})
            return
        db = self._wdb
        if db is None:
            db = self._recover_or_raise()
        if self._behind is not None and self._behind.pending:  # queued behind the pending writes, in order
            self._write_behind(db, puts, (), {}, new_keys)
            return
        self._probe = None
        self._batch_puts(db, puts)
        self._count += new_keys

    def write_logged_puts(self, puts: Sequence[tuple[bytes, StoredValue]], new_keys: int) -> None:
        """:meth:`write_puts` of puts the transaction log covers: when a value is longer than
        :data:`~broker_plugins.storage.write_behind.LARGE_VALUE`, the puts are written by a thread, after this
        returns (module docstring; reads see them at once). A :class:`DeferredValue` is joined on that thread."""
        deferred = False
        for _key, value in puts:
            if len(value) > LARGE_VALUE:
                break
            deferred = deferred or type(value) is not bytes
        else:
            self.write_puts([(k, stored_bytes(v)) for k, v in puts] if deferred else puts, new_keys)  # type: ignore[arg-type]
            return
        db = self._wdb
        if db is None:
            db = self._recover_or_raise()
        if self._behind is None:
            self._behind = WriteBehind(self.spec.topic, self._apply_behind, self._write_failed)
        self._write_behind(db, puts, (), {}, new_keys)

    def _write_behind(self, db: Any, puts: Sequence[tuple[bytes, StoredValue]], deletes: Sequence[bytes],
                      existed: Mapping[bytes, bool], new_keys: int | None = None) -> None:
        """Queue a write for the thread (module docstring): checked and counted here, visible at once.
        ``new_keys``: how many distinct keys of ``puts`` had no record (the caller read them), else worked out
        with ``existed`` and reads (the pending writes first)."""
        behind = self._behind
        assert behind is not None
        final = _touched(puts, deletes)
        probe, self._probe = self._probe, None
        if new_keys is None or deletes:
            pending = behind.pending
            delta = 0
            try:
                for key, exists_after in final.items():
                    was = existed.get(key)
                    if was is None:
                        if probe is not None and probe[0] == key:
                            was = probe[1]
                        elif (over := pending.get(key, _PENDING_MISS)) is not _PENDING_MISS:
                            was = over is not None
                        else:
                            was = db.get(key) is not None
                    delta += exists_after - was
            except plyvel.Error as exc:
                raise _wrap(exc, self.path, "reading") from exc
        else:
            delta = new_keys
        behind.submit([*puts, *((key, None) for key in deletes)] if deletes else puts)
        self._count += delta
        self._writes += 1
        if time.monotonic() >= self._next_room_check:
            self._room_checked()

    def _apply_behind(self, batch: dict[bytes, StoredValue | None]) -> None:
        """Write a batch of pending writes (on the write-behind thread): deferred values joined first, the small
        ones in one write batch, then each large value alone (``DB.Put`` copies it without the GIL; a write
        batch's ``put`` holds it)."""
        # bytes.join copies without the GIL. ``batch`` itself is left as it is: the thread matches its values
        # against the pending ones by identity.
        values = {k: None if v is None else stored_bytes(v) for k, v in batch.items()}
        db = self._db
        if db is None:
            raise StorageError(f"leveldb storage at {self.path!r} is closed.")
        large = [(k, v) for k, v in values.items() if v is not None and len(v) > LARGE_VALUE]
        if len(large) < len(values):
            with db.write_batch(transaction=True, sync=self.sync) as wb:
                for key, value in values.items():
                    if value is None:
                        wb.delete(key)
                    elif len(value) <= LARGE_VALUE:
                        wb.put(key, value)
        for key, value in large:
            db.put(key, value, sync=self.sync)

    def _put_known(self, db: Any, put_list: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...],
                   existed: Mapping[bytes, bool]) -> bool:
        """Puts only, whether each key exists known (a batch of publishes through the SOW's cache): one check
        loop and one put loop. Returns False, having written nothing, when a key's existence is not known."""
        new: set[bytes] = set()
        for key, value in put_list:
            if type(key) is not bytes or type(value) is not bytes:
                _check_bytes(key, value)
            was = existed.get(key)
            if was is None:
                return False
            if not was:
                new.add(key)
        self._batch_puts(db, put_list)
        self._count += len(new)
        return True

    def _batch_puts(self, db: Any, puts: Sequence[tuple[bytes, bytes]]) -> None:
        """Write ``puts`` in one write batch (all or nothing)."""
        try:
            with db.write_batch(transaction=True, sync=self.sync) as batch:
                put = batch.put
                for key, value in puts:
                    put(key, value)
        except TypeError:  # a key or value that is not bytes: nothing was written (a transaction)
            for key, value in puts:
                _check_bytes(key, value)
            raise
        except plyvel.Error as exc:
            if isinstance(exc, plyvel.IOError):
                self._write_failed(exc)
            raise _wrap(exc, self.path, "writing") from exc
        self._writes += 1
        if time.monotonic() >= self._next_room_check:
            self._room_checked()

    def _room_checked(self) -> None:
        """:meth:`_check_room`, after reaping a finished flush thread."""
        if self._flusher is not None and not self._flusher.is_alive():
            self._flusher.join()
            self._flusher = None
        self._check_room()

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < stop``, ascending.

        LevelDB iterators read an implicit snapshot, so writes during the scan do not disturb it; with writes
        pending, a snapshot with them is read.
        """
        if self._behind is not None and self._behind.pending:
            snap = self.snapshot()
            return _closing(snap.scan(start, stop), snap)
        return self._iterate(self._live(), start, stop)

    def snapshot(self) -> LevelDBSnapshot:
        """A LevelDB snapshot (cheap: pins a sequence number; old versions are kept until it closes)."""
        db = self._live()
        behind = self._behind
        try:
            if behind is not None and behind.pending:
                with behind.lock:  # the pending writes and the database with none of them lost in between
                    return LevelDBSnapshot(self, db.snapshot(), dict(behind.pending))
            return LevelDBSnapshot(self, db.snapshot())
        except plyvel.Error as exc:
            raise _wrap(exc, self.path, "taking a snapshot") from exc

    def count(self) -> int:
        """The number of records (O(1); see the module docstring)."""
        if self._closed:
            raise StorageError(f"leveldb storage at {self.path!r} is closed.")
        return self._count

    def compact(self) -> None:
        """Compact the whole key range (blocking; run it off the event loop thread)."""
        db = self._writable_db()
        try:
            db.compact_range()
        except plyvel.Error as exc:
            if isinstance(exc, plyvel.IOError):
                self._write_failed(exc)
            raise _wrap(exc, self.path, "compacting") from exc

    def make_durable(self) -> None:
        """Make every write so far durable: an empty write batch with ``sync`` fsyncs LevelDB's log, which
        holds every earlier write (its tables are fsynced when LevelDB writes them). Pending writes (large values)
        are written first.

        Raises:
            StorageError: A write failed (pending writes too: they are not durable).
        """
        behind = self._behind
        if behind is not None:
            behind.wait_idle()
            if behind.pending:  # stopped by a failed write: what it holds is in no file
                raise StorageError(f"leveldb storage at {self.path!r}: {len(behind.pending)} pending writes failed "
                                   f"({behind.failure}); they are written once the database has been reopened")
        db = self._writable_db()
        try:
            with db.write_batch(sync=True):
                pass
        except plyvel.Error as exc:
            if isinstance(exc, plyvel.IOError):
                self._write_failed(exc)
            raise _wrap(exc, self.path, "syncing") from exc

    def close(self) -> None:
        """Close the database and release its lock. Idempotent."""
        if not self._closed:
            self._closed = True
            if self._behind is not None:
                self._behind.close()
                if self._behind.pending:  # a failed write stopped the thread (make_durable said so)
                    log.error("SOW storage %s (topic %s): closed with %d writes that failed (%s) not written; the "
                              "next start catches them up from the transaction log", self.path, self.spec.topic,
                              len(self._behind.pending), self._behind.failure)
            self._join_flusher()
            db, self._db, self._wdb = self._db, None, None
            if db is not None:
                db.close()
            DeferredDeletes.release(self._held)
            self._held = None

    def statistics(self) -> dict[str, int]:
        """``records``, ``writes`` (write batches applied), ``reopens`` (after failed writes),
        ``memtable_flushes`` and ``write_behind_batches`` (batches of large values the write-behind thread wrote)."""
        return {"records": self._count, "writes": self._writes, "reopens": self.reopens,
                "memtable_flushes": self.memtable_flushes,
                "write_behind_batches": self._behind.batches if self._behind is not None else 0}

    def __repr__(self) -> str:
        return f"LevelDBStorage(topic={self.spec.topic!r}, path={self.path!r})"


def _closing(pairs: Iterator[tuple[bytes, bytes]], snap: Snapshot) -> Iterator[tuple[bytes, bytes]]:
    """``pairs`` of ``snap``, which is closed when they end (or are closed)."""
    try:
        yield from pairs
    finally:
        snap.close()


@hookimpl
def broker_register_storage_engines(registry: Registry) -> None:
    """Register ``leveldb``."""
    registry.add(
        "leveldb",
        LevelDBStorage,
        description="LevelDB (plyvel) database per topic at its FileName; write batches per engine step",
        options=OPTIONS,
    )
