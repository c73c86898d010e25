"""The journal writer: sequence numbers, group commit, file rotation and recovery at open.

Threads: one thread calls :meth:`JournalWriter.append` (the engine), one calls :meth:`JournalWriter.sync`
(a worker thread); any thread may read :attr:`JournalWriter.durable_sequence` or call
:meth:`JournalWriter.statistics`. ``append`` only encodes the record into an in-memory buffer under a
short lock; ``sync`` swaps the buffer out under that lock, writes it and makes it durable with one
``fdatasync`` (group commit: everything appended before the swap is covered).

Files are never preallocated with ``fallocate``: a journal file's size is exactly the bytes written, so the
logical end is the end of file and a kill -9 can leave at most one torn record at the end, which
:meth:`JournalWriter.open` detects (length and CRC32C) and cuts. PreallocatedJournalFiles empty files are
created ahead so that a full disk or a permission problem shows up early.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.errors import JournalError
from broker.txlog.bookmarks import ReplayStart, format_bookmark, instance_hash
from broker.txlog.dedup import PublisherDedup, load_snapshot, save_snapshot
from broker.txlog.file_records import first_header, iter_path
from broker.txlog.files import (
    FileState,
    JournalFile,
    fsync_directory,
    journal_name,
    list_files,
    safe_instance,
)
from broker.txlog.index import JournalIndex
from broker.txlog.reader import JournalReader
from broker.txlog.records import Command, CorruptRecord, Record, decode_exact, encode_fields, peek_publisher
from broker.txlog.records import peek_sequence_timestamp as _peek

if TYPE_CHECKING:  # only attributes are read: any object with these fields will do
    from broker.config.model import TransactionLogConfig

log = logging.getLogger("broker.txlog")

#: The smallest JournalSize honoured; smaller settings are raised to it.
MIN_JOURNAL_SIZE = 1024 * 1024
#: Upper bounds (seconds) of the fsync latency histogram buckets; the last bucket is unbounded.
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

_datasync = getattr(os, "fdatasync", os.fsync)
_COMMAND_CODES: dict[object, int] = {**{c.wire_name: int(c) for c in Command}, **{c: int(c) for c in Command}}


@dataclass(frozen=True)
class JournalStatistics:
    """A snapshot of a writer's state and counters.

    Attributes:
        files: Number of journal files per :class:`~broker.txlog.files.FileState` value.
        bytes_on_disk: Total size of the instance's journal files (both directories).
        current_file: Path of the file being written (empty before the first write).
        last_sequence: Highest sequence appended.
        durable_sequence: Highest sequence made durable by ``sync``.
        appended_records: Records appended since open.
        appended_bytes: Bytes appended since open.
        pending_records: Records appended but not yet synced.
        pending_bytes: Bytes appended but not yet synced.
        fsync_count: fsyncs of journal data since open.
        fsync_seconds_sum: Total time spent in those fsyncs.
        fsync_buckets: Cumulative histogram: ``(upper bound in seconds, count)``, last bound ``inf``.
        rotations: Files filled since open.
        truncated_bytes: Bytes of torn or corrupt tail cut at open.
        publishers: Publishers known to de-duplication.
    """

    files: dict[str, int]
    bytes_on_disk: int
    current_file: str
    last_sequence: int
    durable_sequence: int
    appended_records: int
    appended_bytes: int
    pending_records: int
    pending_bytes: int
    fsync_count: int
    fsync_seconds_sum: float
    fsync_buckets: tuple[tuple[float, int], ...]
    rotations: int
    truncated_bytes: int
    publishers: int


class JournalWriter:
    """Appends records to an instance's journal files and makes them durable.

    Args:
        config: The ``<TransactionLog>`` configuration.
        instance_name: The instance name: file names and the bookmark publisher ``P`` derive from it.
        index: A shared sparse index (one is created when omitted); readers given the same index find
            their starting point without scanning.
    """

    def __init__(self, config: TransactionLogConfig, instance_name: str, *, index: JournalIndex | None = None):
        self._config = config
        self._instance = safe_instance(instance_name)
        #: The ``P`` of this instance's bookmarks.
        self.instance_hash = instance_hash(instance_name)
        self._dir = Path(config.journal_directory)
        self._archive = Path(config.journal_archive_directory) if config.journal_archive_directory else None
        if config.journal_size < MIN_JOURNAL_SIZE:
            log.warning(
                "JournalSize %d is below the minimum; using %d bytes", config.journal_size, MIN_JOURNAL_SIZE
            )
        self._journal_size = max(config.journal_size, MIN_JOURNAL_SIZE)
        self._prealloc = max(1, config.preallocated_journal_files)
        #: The sparse index of this instance's files (share it with readers).
        self.index = index if index is not None else JournalIndex()
        #: Publisher de-duplication, kept up to date by append and sync.
        self.dedup = PublisherDedup()
        # _lock guards the append state below; _sync_lock serialises sync/close so batches stay in order.
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._buffer: list[bytes] = []
        self._pending_bytes = 0
        self._pending_publishers: dict[int, int] = {}
        self._last_seq = 0
        self._last_ts = 0
        self._durable = 0
        self._floor = 0
        self._opened = False
        self._closed = False
        self._failed: BaseException | None = None
        # File state, touched only under _sync_lock (or in open()).
        self._fd = -1
        self._file_index = 0
        self._file_size = 0
        # Counters.
        self._appended_records = 0
        self._appended_bytes = 0
        self._fsyncs = 0
        self._fsync_sum = 0.0
        self._fsync_counts = [0] * (len(FSYNC_BUCKETS) + 1)
        self._rotations = 0
        self._truncated = 0

    # -- properties ---------------------------------------------------------------------------------------

    @property
    def durable_sequence(self) -> int:
        """Highest sequence that is on disk (fsynced); 0 when none."""
        return self._durable

    @property
    def last_sequence(self) -> int:
        """Highest sequence appended (durable or not)."""
        return self._last_seq

    @property
    def pending_bytes(self) -> int:
        """Bytes appended and not yet handed to ``sync`` (for back-pressure)."""
        return self._pending_bytes

    @property
    def current_path(self) -> Path:
        """The file being written (or to be written next)."""
        return self._dir / journal_name(self._instance, self._file_index)

    @property
    def journal_directory(self) -> Path:
        """The JournalDirectory."""
        return self._dir

    @property
    def archive_directory(self) -> Path | None:
        """The JournalArchiveDirectory, if configured."""
        return self._archive

    @property
    def instance(self) -> str:
        """The instance name as used in file names."""
        return self._instance

    # -- open / recovery ----------------------------------------------------------------------------------

    def open(self) -> None:
        """Recover the journal and get ready to append.

        Creates the JournalDirectory if needed, validates every record of the newest non-empty files
        (walking back over files that hold no valid record), cuts a torn or corrupt tail (logged with the
        number of bytes cut), continues the sequence after the last valid record, rebuilds publisher
        de-duplication and creates the preallocated files.

        Raises:
            JournalError: The directory cannot be created or a file cannot be read, truncated or created.
        """
        if self._opened:
            raise JournalError("the journal writer is already open")
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            files = list_files(self._dir, self._archive, self._instance)
            last_file = self._recover(files)
            files = list_files(self._dir, self._archive, self._instance)
            self._rebuild_dedup(files)
            if self._floor > self._last_seq:
                self._last_seq = self._durable = self._floor
            self._open_current(files, last_file)
        except OSError as exc:
            raise JournalError(f"cannot open the transaction log in {self._dir}: {exc}") from exc
        self._opened = True
        log.info(
            "journal %s open: last sequence %d, writing %s", self._dir, self._last_seq, self.current_path.name
        )

    def _recover(self, files: list[JournalFile]) -> JournalFile | None:
        """Find the file holding the last valid record, cutting torn tails of plain files in the JournalDirectory."""
        for jf in reversed(files):
            if jf.size == 0:
                continue
            writable = not jf.archived and not jf.compressed
            last: Record | None = None
            valid_end = 0
            problem: CorruptRecord | None = None
            try:
                for offset, raw in iter_path(jf.path):
                    rec = decode_exact(raw, offset)
                    if last is not None and rec.sequence <= last.sequence:
                        raise CorruptRecord(offset, f"sequence {rec.sequence} does not follow {last.sequence}")
                    last = rec
                    valid_end = offset + len(raw)
                    self.index.note(jf.index, rec.sequence, rec.timestamp_ns, offset)
            except CorruptRecord as exc:
                problem = exc
            if problem is not None:
                if writable:
                    cut = jf.size - valid_end
                    log.warning(
                        "journal %s: %s; cutting %d bytes at offset %d (a write interrupted by a crash)",
                        jf.path, problem.reason, cut, valid_end,
                    )
                    self._truncate(jf.path, valid_end)
                    self._truncated += cut
                else:
                    log.error("journal %s is damaged at offset %d: %s", jf.path, problem.offset, problem.reason)
            if last is not None:
                self._last_seq = last.sequence
                self._last_ts = last.timestamp_ns
                self._durable = last.sequence
                return jf
        return None

    @staticmethod
    def _truncate(path: Path, size: int) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rebuild_dedup(self, files: list[JournalFile]) -> None:
        snapshot_path = self._snapshot_path
        snap = load_snapshot(snapshot_path)
        covered, table = snap if snap is not None else (0, {})
        if covered > self._last_seq:
            log.warning(
                "publisher snapshot covers sequence %d but the journal ends at %d (its tail was cut or files "
                "were removed); continuing the sequence after %d so bookmarks keep increasing",
                covered, self._last_seq, covered,
            )
            # Nothing is pending at open: the sequences skipped are "durable" in that none will ever exist.
            self._last_seq = self._durable = covered
        else:
            # Only the files that may hold records after the snapshot are read: walk back to the last file
            # that starts at or before covered + 1.
            nonempty = [f for f in files if f.size > 0]
            start = 0
            for pos in range(len(nonempty) - 1, -1, -1):
                first = self._first_of(nonempty[pos])
                if first is not None and first <= covered + 1:
                    start = pos
                    break
            for jf in nonempty[start:]:
                try:
                    for _offset, raw in iter_path(jf.path):
                        seq, phash, pseq = peek_publisher(raw)
                        if seq > covered and pseq and pseq > table.get(phash, 0):
                            table[phash] = pseq
                except CorruptRecord:
                    continue  # reported by recovery (plain tails are cut already)
        self.dedup.note_persisted(table)

    def _first_of(self, jf: JournalFile) -> int | None:
        known = self.index.first(jf.index)
        if known is not None:
            return known[0]
        header = first_header(jf.path)
        if header is None:
            return None
        seq, ts = _peek(header)
        self.index.note(jf.index, seq, ts, 0)
        return seq

    def _open_current(self, files: list[JournalFile], last_file: JournalFile | None) -> None:
        """Open the file to append to: the newest plain file holding records, else a new one after all."""
        if last_file is not None and not last_file.archived and not last_file.compressed:
            self._file_index = last_file.index
        else:
            # Start after every file that holds data (an existing empty file there is simply reused).
            occupied = [f.index for f in files if f.size > 0 or f.archived or f.compressed]
            self._file_index = max(occupied, default=-1) + 1
        self._open_file(self._file_index)
        self._ensure_preallocated()

    def _open_file(self, index: int) -> None:
        path = self._dir / journal_name(self._instance, index)
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fd = fd
        self._file_index = index
        self._file_size = os.fstat(fd).st_size
        if not existed:
            fsync_directory(self._dir)

    def _ensure_preallocated(self) -> None:
        created = False
        for index in range(self._file_index + 1, self._file_index + self._prealloc):
            path = self._dir / journal_name(self._instance, index)
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
                created = True
        if created:
            fsync_directory(self._dir)

    @property
    def _snapshot_path(self) -> Path:
        return self._dir / f"{self._instance}.clients.ack"

    # -- append / sync ------------------------------------------------------------------------------------

    def append(
        self,
        command: Command | str,
        topic: str,
        data: bytes,
        *,
        sow_key: bytes | str = b"",
        publisher: tuple[int, int] = (0, 0),
        message_type: str = "json",
        correlation_id: bytes | str = b"",
        timestamp_ns: int | None = None,
        expiration_ns: int = 0,
    ) -> tuple[int, str]:
        """Give a command its sequence and bookmark and buffer its record. Not durable until :meth:`sync`.

        Args:
            command: ``publish``, ``delta_publish``, ``sow_delete`` or ``expire`` (or a :class:`Command`).
            topic: The topic.
            data: The message body (for ``sow_delete`` by filter or keys: whatever the server logs).
            sow_key: The SOW key, if any.
            publisher: ``(client name hash, s)`` of the publisher; ``(0, 0)`` when not from a client.
            message_type: The message type name.
            correlation_id: The publisher's correlation id.
            timestamp_ns: The time to record; default now. Timestamps never decrease: an earlier value is
                raised to the last one logged, so replay by time stays a suffix of the journal.
            expiration_ns: When the message expires (absolute, ns since the epoch, UTC); 0 when it never
                does. Journaled so that a SOW rebuilt from the journal expires what it should.

        Returns:
            ``(sequence, bookmark)``.

        Raises:
            JournalError: The writer is not open, is closed, has failed, or a field is too large.
        """
        ts = time.time_ns() if timestamp_ns is None else timestamp_ns
        with self._lock:
            if not self._opened or self._closed:
                raise JournalError("the journal writer is not open; call open() first")
            if self._failed is not None:
                raise JournalError(f"the journal writer failed earlier ({self._failed}); restart the broker")
            seq = self._last_seq + 1
            ts = max(ts, self._last_ts)
            phash, pseq = publisher
            try:
                raw = encode_fields(
                    seq, ts, _COMMAND_CODES.get(command) or int(Command.from_name(command)), topic.encode(),
                    data, sow_key.encode() if isinstance(sow_key, str) else sow_key, phash, pseq,
                    message_type.encode(),
                    correlation_id.encode() if isinstance(correlation_id, str) else correlation_id,
                    expiration_ns,
                )
            except ValueError as exc:
                raise JournalError(f"cannot journal a {command} on {topic!r}: {exc}") from None
            self._buffer.append(raw)
            self._pending_bytes += len(raw)
            self._last_seq = seq
            self._last_ts = ts
            self._appended_records += 1
            self._appended_bytes += len(raw)
            if pseq and pseq > self._pending_publishers.get(phash, 0):
                self._pending_publishers[phash] = pseq
        if pseq:
            self.dedup.note_appended(phash, pseq)
        return seq, format_bookmark(self.instance_hash, seq)

    def raise_sequence_floor(self, sequence: int) -> None:
        """Make the next sequence handed out greater than ``sequence`` (no effect when it already is).

        For start-up recovery: the SOW may hold bookmarks of records the journal lost (a cut tail, files
        removed), and a sequence must never be handed out twice. The sequences skipped are a legitimate gap:
        no record has them, readers pass over them (they are not damage), and :attr:`durable_sequence`
        covers them as soon as nothing appended before is pending (at once when called before serving,
        else at the next :meth:`sync`). May be called before :meth:`open`; the floor then applies after
        recovery.

        Args:
            sequence: The highest sequence known to have been handed out.
        """
        with self._sync_lock, self._lock:
            self._floor = max(self._floor, sequence)
            if not self._opened or sequence <= self._last_seq:
                return
            self._last_seq = sequence
            if not self._buffer:  # no sync is running (we hold its lock) and nothing is pending
                self._durable = max(self._durable, sequence)

    def sync(self) -> int:
        """Write what was appended and make it durable (one fsync for the whole batch).

        Returns:
            The highest durable sequence (every record up to it is on disk).

        Raises:
            JournalError: Writing or fsync failed. The writer then refuses further work: after a failed
                fsync the state of the file is unknown, so the broker must restart (and recover).
        """
        with self._sync_lock:
            with self._lock:
                batch = self._buffer
                self._buffer = []
                self._pending_bytes = 0
                last = self._last_seq
                publishers = self._pending_publishers
                self._pending_publishers = {}
            if self._failed is not None:
                raise JournalError(f"the journal writer failed earlier ({self._failed}); restart the broker")
            if not batch:
                # Nothing pending: every sequence up to ``last`` is on disk or was skipped by
                # raise_sequence_floor (no record will ever have it).
                self._durable = max(self._durable, last)
                return self._durable
            if self._fd < 0:
                raise JournalError("the journal writer is closed")
            try:
                rotated = self._write_batch(batch)
                self._fsync_current()
                if rotated:
                    self._ensure_preallocated()
            except OSError as exc:
                self._failed = exc
                raise JournalError(f"cannot write the journal {self.current_path}: {exc}") from exc
            self.dedup.note_persisted(publishers)
            self._durable = last
            if rotated:
                self._save_dedup()
            return last

    def _write_batch(self, batch: list[bytes]) -> bool:
        rotated = False
        chunk: list[bytes] = []
        size = self._file_size
        for raw in batch:
            if size > 0 and size + len(raw) > self._journal_size:
                self._write(chunk)
                chunk = []
                self._fsync_current()
                self._rotate()
                rotated = True
                size = 0
            if self.index.wants(self._file_index, size):
                seq, ts = _peek(raw)
                self.index.note(self._file_index, seq, ts, size)
            chunk.append(raw)
            size += len(raw)
        self._write(chunk)
        return rotated

    def _write(self, chunk: list[bytes]) -> None:
        if not chunk:
            return
        data = memoryview(b"".join(chunk))
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
            self._file_size += written

    def _fsync_current(self) -> None:
        start = time.perf_counter()
        _datasync(self._fd)
        elapsed = time.perf_counter() - start
        self._fsyncs += 1
        self._fsync_sum += elapsed
        self._fsync_counts[bisect.bisect_left(FSYNC_BUCKETS, elapsed)] += 1

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        self._rotations += 1
        self._open_file(self._file_index + 1)

    def _save_dedup(self) -> None:
        try:
            save_snapshot(self._snapshot_path, self._durable, self.dedup.snapshot())
        except OSError as exc:  # the snapshot only speeds up start-up; the journal is the truth
            log.warning("cannot write publisher snapshot %s: %s", self._snapshot_path, exc)

    # -- close / statistics -------------------------------------------------------------------------------

    def close(self) -> None:
        """Sync what is buffered, save the publisher snapshot and close the file. Idempotent."""
        if self._closed or not self._opened:
            self._closed = True
            return
        try:
            if self._failed is None:
                self.sync()
                self._save_dedup()
        finally:
            with self._sync_lock:
                self._closed = True
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1

    def __enter__(self) -> JournalWriter:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def files(self) -> list[JournalFile]:
        """This instance's journal files with their state."""
        return list_files(self._dir, self._archive, self._instance)

    def statistics(self) -> JournalStatistics:
        """A snapshot of counters and file states (lists the directories)."""
        files = self.files()
        by_state = {state.value: 0 for state in FileState}
        for jf in files:
            by_state[jf.state.value] += 1
        cumulative = []
        total = 0
        for bound, count in zip((*FSYNC_BUCKETS, float("inf")), self._fsync_counts, strict=True):
            total += count
            cumulative.append((bound, total))
        with self._lock:
            pending_records = len(self._buffer)
            pending_bytes = self._pending_bytes
        return JournalStatistics(
            files=by_state,
            bytes_on_disk=sum(f.size for f in files),
            current_file=str(self.current_path) if self._opened else "",
            last_sequence=self._last_seq,
            durable_sequence=self._durable,
            appended_records=self._appended_records,
            appended_bytes=self._appended_bytes,
            pending_records=pending_records,
            pending_bytes=pending_bytes,
            fsync_count=self._fsyncs,
            fsync_seconds_sum=self._fsync_sum,
            fsync_buckets=tuple(cumulative),
            rotations=self._rotations,
            truncated_bytes=self._truncated,
            publishers=len(self.dedup),
        )

    def bookmark(self, sequence: int) -> str:
        """The bookmark of the record with this sequence (``P|S|``)."""
        return format_bookmark(self.instance_hash, sequence)

    def replay(self, start: ReplayStart, until_sequence: int | None = None) -> Iterator[Record]:
        """Records from ``start`` up to ``until_sequence`` (default: the durable sequence at this call).

        Run it in a worker thread; see :meth:`broker.txlog.reader.JournalReader.records`.
        """
        until = self._durable if until_sequence is None else until_sequence
        return self.reader().records(start, until_sequence=until)

    def reader(self) -> JournalReader:
        """A :class:`~broker.txlog.reader.JournalReader` over this instance's files, sharing the index."""
        return JournalReader(self._dir, self._archive, instance_name=self._instance, index=self.index)
