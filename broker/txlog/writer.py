"""The journal writer: sequence numbers, the append buffer, group commit, and the public API.

Threads: one thread calls :meth:`JournalWriter.append` (the engine), one calls :meth:`JournalWriter.sync`
(a worker thread); any thread may read :attr:`JournalWriter.durable_sequence` or call
:meth:`JournalWriter.statistics`. ``append`` only encodes the record into an in-memory buffer under a
short lock; ``sync`` swaps the buffer out under that lock, writes it and makes it durable with one
``fdatasync`` (group commit: everything appended before the swap is covered).

The parts, each readable alone: :mod:`broker.txlog.recovery` (what :meth:`JournalWriter.open` does to the
files found: torn tails, damage, summaries, publishers), :mod:`broker.txlog.segments` (the directory lock,
the current file, rotation, preallocation, fsync), :mod:`broker.txlog.damage` (the resync scan) and
:mod:`broker.txlog.dedup` (publisher de-duplication).

A full disk (ENOSPC, EDQUOT) is not fatal: the file is cut back to its last durable size, the batch goes back
to the front of the buffer with its sequences, :attr:`JournalWriter.disk_full` is set and ``sync`` raises
:class:`~broker.txlog.errors.JournalFullError`; a later ``sync`` retries. Any other write or fsync failure
fails the writer for good: after a failed fsync the file's state is unknown.

No sequence is handed out above the ceiling reserved durably in ``<instance>.sequence``
(:mod:`broker.txlog.reservation`): ``sync`` extends it ahead of need, and ``open`` continues above it, so
after a crash the next sequence is above every sequence a live subscriber could have seen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from broker.errors import JournalError
from broker.faults import fault_point
from broker.txlog.bookmarks import ReplayStart, format_bookmark, instance_hash
from broker.txlog.damage import POLICIES, DamageCounter
from broker.txlog.dedup import PublisherDedup, load_snapshot, save_snapshot
from broker.txlog.errors import JournalFullError
from broker.txlog.file_records import first_header
from broker.txlog.files import FileStateCounts, JournalFile, list_files, safe_instance
from broker.txlog.index import JournalIndex
from broker.txlog.reader import JournalReader
from broker.txlog.records import Command, Record, encode_fields
from broker.txlog.records import encode_entries as _encode_entries
from broker.txlog.records import peek_sequence_timestamp as _peek
from broker.txlog.recovery import publisher_table, recover
from broker.txlog.reservation import DEFAULT_BLOCK, SequenceReservation
from broker.txlog.segments import FSYNC_BUCKETS, SegmentFiles, is_no_space

if TYPE_CHECKING:  # only attributes are read: any object with these fields will do
    from broker.config.model import TransactionLogConfig

__all__ = ["FSYNC_BUCKETS", "MIN_JOURNAL_SIZE", "JournalEntry", "JournalStatistics", "JournalWriter"]

log = logging.getLogger("broker.txlog")

#: The smallest JournalSize honoured; smaller settings are raised to it.
MIN_JOURNAL_SIZE = 1024 * 1024

_COMMAND_CODES: dict[object, int] = {**{c.wire_name: int(c) for c in Command}, **{c: int(c) for c in Command}}

#: One record of :meth:`JournalWriter.append_many`: ``(command code, data, SOW key, publisher s, correlation id,
#: expiration ns, timestamp ns)`` (the code is ``int(Command.PUBLISH)`` etc.; text fields as bytes).
JournalEntry = tuple[int, bytes, bytes, int, bytes, int, int]


@dataclass(frozen=True)
class JournalStatistics:
    """A snapshot of a writer's state and counters.

    Attributes:
        files: Number of journal files per :class:`~broker.txlog.files.FileState`.
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
        truncated_bytes: Bytes of torn tail cut at open.
        publishers: Publishers known to de-duplication.
        damaged_records: Records lost in the damaged ranges skipped (``<DamagedRecords>skip``), at open and by
            replays, each range counted once (from the sequences around it).
        damaged_bytes: Bytes in those ranges.
        disk_full: The last sync met a full disk; publishes wait for space (see ``JournalWriter.disk_full``).
        disk_full_count: Syncs that met a full disk since open.
        reserved_sequence: The durable ceiling: no sequence above it is handed out (``<instance>.sequence``).
        reservation_waits: Appends that had to reserve sequences themselves (more than half a block of
            records between two syncs): each waited for a small durable file write.
    """

    files: FileStateCounts
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
    damaged_records: int = 0
    damaged_bytes: int = 0
    disk_full: bool = False
    disk_full_count: int = 0
    reserved_sequence: int = 0
    reservation_waits: int = 0


class JournalWriter:
    """Appends records to an instance's journal files and makes them durable.

    Args:
        config: The ``<TransactionLog>`` configuration.
        instance_name: The instance name: file names and the bookmark publisher ``P`` derive from it.
        index: A shared sparse index (one is created when omitted); readers given the same index find
            their starting point without scanning.
        sequence_block: Sequences reserved at a time (:mod:`broker.txlog.reservation`); the default suits
            any rate the broker reaches.
    """

    def __init__(self, config: TransactionLogConfig, instance_name: str, *, index: JournalIndex | None = None,
                 sequence_block: int = DEFAULT_BLOCK):
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
        policy = getattr(config, "damaged_records", "stop")
        if policy not in POLICIES:
            raise JournalError(f"DamagedRecords must be one of {', '.join(POLICIES)}, not {policy!r}")
        self._damage_policy = policy
        #: The sparse index of this instance's files (share it with readers).
        self.index = index if index is not None else JournalIndex()
        #: Publisher de-duplication, kept up to date by append and sync.
        self.dedup = PublisherDedup()
        #: Damaged ranges skipped (``<DamagedRecords>skip</DamagedRecords>``), shared with the readers.
        self.damage = DamageCounter()
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
        # The records appended last with held=True (the first sequence, how many): sync() leaves them in the
        # buffer until release() or retract(). One publisher's: the undo is its hash, highest s, pending s and
        # appended s before them.
        self._held = 0
        self._held_count = 0
        self._held_undo: tuple[int, int, int, int] = (0, 0, 0, 0)
        self._opened = False
        self._closed = False
        self._failed: BaseException | None = None
        self._disk_full = False
        self._disk_full_count = 0
        # The durable ceiling of the sequences handed out; append only compares with it.
        self._reserved = SequenceReservation(self._dir, self._instance, sequence_block)
        self._reservation_waits = 0
        # The files, touched only under _sync_lock (or in open()).
        self._files = SegmentFiles(self._dir, self._instance, config.preallocated_journal_files)
        # Counters.
        self._appended_records = 0
        self._appended_bytes = 0
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
    def disk_full(self) -> bool:
        """The last :meth:`sync` met a full disk (ENOSPC or EDQUOT); cleared by the next one that succeeds."""
        return self._disk_full

    @property
    def damaged_records_policy(self) -> str:
        """``stop`` or ``skip``: what replays and start-up do with damaged records (``<DamagedRecords>``)."""
        return self._damage_policy

    @property
    def current_path(self) -> Path:
        """The file being written (or to be written next)."""
        return self._files.path

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
        """Lock the JournalDirectory, recover the journal and get ready to append.

        Creates the JournalDirectory if needed and takes its lock, then recovers (:mod:`broker.txlog.recovery`):
        validates every record of the newest non-empty file (walking back over files with no valid record),
        cuts a torn tail, checks the older files against their summaries, continues the sequence after the
        last valid record (or after the sequences reserved before a stop that was not clean, see
        :mod:`broker.txlog.reservation`), reserves the next block of sequences, rebuilds publisher
        de-duplication and creates the preallocated files. Needs no disk space beyond what is in use
        (summaries, preallocated files and the reservation are skipped on a full disk; appends then reserve).

        Raises:
            JournalDamageError: Damage other than a torn tail, with ``<DamagedRecords>stop`` (the default).
            JournalError: Another broker holds the directory, or a file cannot be read, truncated or created.
        """
        if self._opened:
            raise JournalError("the journal writer is already open")
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            self._files.lock()
        except OSError as exc:
            raise JournalError(f"cannot open the transaction log in {self._dir}: {exc}") from exc
        try:
            files = list_files(self._dir, self._archive, self._instance)
            found = recover(files, self._dir, self._instance, self.index, self._damage_policy, self.damage)
            self._truncated = found.truncated_bytes
            self._last_seq = self._durable = found.last_sequence
            self._last_ts = found.last_timestamp_ns
            files = list_files(self._dir, self._archive, self._instance)
            self._rebuild_dedup(files)
            if self._floor > self._last_seq:
                self._last_seq = self._durable = self._floor
            self._reserve_at_open()
            last = found.last_file
            if last is not None and not last.archived and not last.compressed:
                self._files.open(last.index, records=found.last_file_records,
                                 first_sequence=found.last_file_first_sequence, last_sequence=found.last_sequence)
            else:
                # Start after every file that holds data (an existing empty file there is simply reused).
                occupied = [f.index for f in files if f.size > 0 or f.archived or f.compressed]
                self._files.index = max(occupied, default=-1) + 1
                self._open_new_current()
            if self._files.fd >= 0:
                self._files.ensure_preallocated()
        except JournalError:
            self._files.close()
            raise
        except OSError as exc:
            self._files.close()
            raise JournalError(f"cannot open the transaction log in {self._dir}: {exc}") from exc
        self._opened = True
        log.info(
            "journal %s open: last sequence %d, writing %s", self._dir, self._last_seq, self.current_path.name
        )

    def _reserve_at_open(self) -> None:
        """Continue above the sequences reserved before the last stop, and reserve the next block."""
        reserved = self._reserved.load()
        if reserved > self._last_seq:
            log.info("journal %s: the last stop was not clean and sequences up to %d were reserved (the journal "
                     "ends at %d); continuing above %d so that no bookmark a subscriber may have seen is handed "
                     "out again", self._dir, reserved, self._last_seq, reserved)
            # Durable stays at the last record until the first sync covers the gap: SOW recovery compares
            # the SOW with what the journal holds durably.
            self._last_seq = reserved
        self._reserved.ceiling = self._last_seq
        try:
            self._reserved.ensure(self._last_seq, self._reserved.half)
        except OSError as exc:
            if not is_no_space(exc):
                raise
            log.warning("cannot reserve sequences in %s yet (%s): the first append does", self._reserved.path, exc)

    def _reserve_waiting(self, sequence: int) -> None:
        """Reserve on the appending thread: ``sequence`` is above the ceiling (sync did not keep up)."""
        try:
            self._reserved.ensure(sequence)
        except OSError as exc:
            if is_no_space(exc):
                raise JournalFullError(self._reserved.path, exc.strerror or str(exc)) from exc
            raise JournalError(f"cannot reserve sequences in {self._reserved.path}: {exc}") from exc
        self._reservation_waits += 1

    def _open_new_current(self) -> None:
        """Open (create) the current file; on a full disk leave it for the first write to create."""
        try:
            self._files.open(self._files.index)
        except OSError as exc:
            if not is_no_space(exc):
                raise
            log.warning("cannot create journal %s yet (%s); it is created when there is data", self.current_path,
                        exc)

    def _rebuild_dedup(self, files: list[JournalFile]) -> None:
        snap = load_snapshot(self._snapshot_path)
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
            publisher_table(files, covered, table, self._first_of)
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
        held: bool = False,
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
            held: Keep the record out of :meth:`sync` until :meth:`release` (or take it back with
                :meth:`retract`): the engine holds a publish's record while it writes the SOW, so that a
                failed SOW write can take the record back before it is written.

        Returns:
            ``(sequence, bookmark)``.

        Raises:
            JournalError: The writer is not open, is closed, has failed, or a field is too large.
        """
        ts = time.time_ns() if timestamp_ns is None else timestamp_ns
        with self._lock:
            self._check_appendable()
            seq = self._last_seq + 1
            if seq > self._reserved.ceiling:  # more than half a block since the last sync: rare
                self._reserve_waiting(seq)
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
            pending = self._pending_publishers.get(phash, 0)
            if pseq and pseq > pending:
                self._pending_publishers[phash] = pseq
            if held:
                self._held = seq
                self._held_count = 1
                self._held_undo = (phash, pseq, pending, self.dedup.appended_hash(phash) if pseq else 0)
        if pseq:
            self.dedup.note_appended(phash, pseq)
        return seq, format_bookmark(self.instance_hash, seq)

    def append_many(self, topic: str, entries: Sequence[JournalEntry], *, publisher_hash: int = 0,
                    message_type: str = "json", held: bool = False) -> int:
        """:meth:`append` for many records of one topic and one publisher at once: one lock acquisition and
        one encoding loop for a batch of publishes (the engine's batched publish path).

        Args:
            topic: The topic of every record.
            entries: One :data:`JournalEntry` per record, in order.
            publisher_hash: The publisher's client name hash (0 when not from a client).
            message_type: The message type name of every record.
            held: Keep the records out of :meth:`sync` until :meth:`release` of the first sequence (or take
                them all back with :meth:`retract`), as :meth:`append` does for one.

        Returns:
            The first record's sequence; entry ``i`` has sequence ``first + i`` (bookmarks: :meth:`bookmark`).

        Raises:
            JournalError: The writer is not open, is closed or has failed; or an entry cannot be encoded (a
                field too large), then nothing is appended and ``exc.index`` is that entry's position.
        """
        tbytes = topic.encode()
        mbytes = message_type.encode()
        with self._lock:
            self._check_appendable()
            first = self._last_seq + 1
            last = first + len(entries) - 1
            if last > self._reserved.ceiling:  # more than half a block since the last sync: rare
                self._reserve_waiting(last)
            last_ts = self._last_ts
            raws: list[bytes] = []
            try:
                last_ts, top = _encode_entries(raws, entries, first, last_ts, tbytes, publisher_hash, mbytes)
            except ValueError as exc:
                error = JournalError(f"cannot journal a publish on {topic!r}: {exc}")
                error.index = len(raws)  # type: ignore[attr-defined]  # the entries before it were encoded
                raise error from None
            size = sum(map(len, raws))
            self._buffer.extend(raws)
            self._pending_bytes += size
            self._last_seq = last
            self._last_ts = last_ts
            self._appended_records += len(raws)
            self._appended_bytes += size
            pending = self._pending_publishers.get(publisher_hash, 0)
            if top > pending:
                self._pending_publishers[publisher_hash] = top
            if held:
                self._held = first
                self._held_count = len(raws)
                self._held_undo = (publisher_hash, top, pending, self.dedup.appended_hash(publisher_hash) if top else 0)
        if top:
            self.dedup.note_appended(publisher_hash, top)
        return first

    def _check_appendable(self) -> None:
        """Raise unless records can be appended now (under the lock)."""
        if not self._opened or self._closed:
            raise JournalError("the journal writer is not open; call open() first")
        if self._failed is not None:
            raise JournalError(f"the journal writer failed earlier ({self._failed}); restart the broker")

    def release(self, sequence: int) -> None:
        """Let :meth:`sync` take the records appended with ``held=True`` whose first sequence is ``sequence``
        (no effect for another sequence)."""
        if self._held == sequence:
            self._held = 0

    def retract(self, sequence: int) -> bool:
        """Take back the records appended last with ``held=True`` (``sequence`` is the first): never written.

        For publishes whose SOW write failed (their publisher is told so): the records must not be replayed,
        and the publisher's re-sends are not duplicates (de-duplication forgets their ``s``). The sequences are
        not handed out again: they become a gap, like those of :meth:`raise_sequence_floor` (a bookmark could
        have been seen elsewhere, e.g. in a SOW record a storage engine kept after all); :attr:`durable_sequence`
        covers it with the next :meth:`sync`.

        Returns:
            True when the records were taken back; False when ``sequence`` is not the first held record
            (already released or retracted).
        """
        with self._lock:
            count = self._held_count
            if (self._held != sequence or sequence + count - 1 != self._last_seq
                    or len(self._buffer) < count):
                return False
            taken = self._buffer[-count:]
            del self._buffer[-count:]
            self._held = 0
            size = sum(map(len, taken))
            self._pending_bytes -= size
            self._appended_records -= count
            self._appended_bytes -= size
            phash, pseq, pending, appended = self._held_undo
            if pseq:
                if pending:
                    self._pending_publishers[phash] = pending
                else:
                    self._pending_publishers.pop(phash, None)
        if pseq:
            self.dedup.restore_appended(phash, appended)
        return True

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
            try:  # not needed for correctness (append reserves above the ceiling), only to keep append cheap
                self._reserved.ensure(sequence, self._reserved.half)
            except OSError as exc:
                log.warning("cannot reserve sequences above %d in %s (%s): the first append does", sequence,
                            self._reserved.path, exc)

    def sync(self) -> int:
        """Write what was appended and make it durable (one fsync for the whole batch).

        Returns:
            The highest durable sequence (every record up to it is on disk).

        Raises:
            JournalFullError: The disk is full: nothing half-written is left, the records not yet durable
                are kept in order for the next ``sync`` and :attr:`disk_full` is true until one succeeds.
            JournalError: Writing or fsync failed otherwise. The writer then refuses further work: after a
                failed fsync the state of the file is unknown, so the broker must restart (and recover).
        """
        with self._sync_lock:
            with self._lock:
                batch = self._buffer
                self._buffer = []
                self._pending_bytes = 0
                last = self._last_seq
                publishers = self._pending_publishers
                self._pending_publishers = {}
                count = self._held_count
                if self._held and self._held + count - 1 == last and len(batch) >= count:
                    # publishes being applied (their SOW write): not yet
                    last = self._held - 1
                    self._buffer.extend(batch[-count:])
                    del batch[-count:]
                    self._pending_bytes = sum(map(len, self._buffer))
                    publishers = self._split_held(publishers)
            if self._failed is not None:
                raise JournalError(f"the journal writer failed earlier ({self._failed}); restart the broker")
            if not batch:
                # Nothing pending: every sequence up to ``last`` is on disk or was skipped by
                # raise_sequence_floor or retract (no record will ever have it).
                self._durable = max(self._durable, last)
                if last == self._last_seq:
                    self._disk_full = False
                self._reserved.extend(self._last_seq)
                return self._durable
            if self._closed:
                raise JournalError("the journal writer is closed")
            fault_point("journal-before-write")
            done = 0  # records of the batch made durable so far (in files left by rotation)
            try:
                if self._files.fd < 0:
                    self._files.open(self._files.index)
                done, rotated = self._write_batch(batch)
                fault_point("journal-before-fsync")
                self._files.fsync()
                fault_point("journal-after-fsync")
                done = len(batch)
                if rotated:
                    self._files.ensure_preallocated()
            except OSError as exc:
                if is_no_space(exc) and done < len(batch):
                    self._no_space(batch[done:], publishers, exc)
                if not is_no_space(exc):
                    self._failed = exc
                    raise JournalError(f"cannot write the journal {self.current_path}: {exc}") from exc
            self._disk_full = False
            self.dedup.note_persisted(publishers)
            self._durable = max(self._durable, last)
            if rotated:
                self._save_dedup()
            self._reserved.extend(self._last_seq)  # ahead of need, so that append never waits for it
            return self._durable

    def _split_held(self, publishers: dict[int, int]) -> dict[int, int]:
        """The batch's publishers without the held record's ``s``, which stays pending (under the lock)."""
        phash, pseq, pending, _appended = self._held_undo
        if not pseq:
            return publishers
        publishers = dict(publishers)
        if pending:
            publishers[phash] = pending
        else:
            publishers.pop(phash, None)
        self._pending_publishers = {phash: pseq}
        return publishers

    def _no_space(self, rest: list[bytes], publishers: dict[int, int], exc: OSError) -> None:
        """A full disk: cut the file back to its durable size, keep ``rest`` for the next sync, raise."""
        try:
            self._files.truncate_to_durable()
        except OSError as again:
            self._failed = again
            raise JournalError(f"cannot undo a failed write to the journal {self.current_path}: {again}") from exc
        with self._lock:
            self._buffer[0:0] = rest
            self._pending_bytes += sum(len(raw) for raw in rest)
            for phash, pseq in publishers.items():
                if pseq > self._pending_publishers.get(phash, 0):
                    self._pending_publishers[phash] = pseq
            held_hash, held_s, before, appended = self._held_undo
            if self._held and publishers.get(held_hash, 0) > before:  # the records put back precede it
                self._held_undo = (held_hash, held_s, publishers[held_hash], appended)
        # Once per episode (the server logs the episode and its end); each retry only at debug level.
        log.log(logging.DEBUG if self._disk_full else logging.WARNING,
                "journal disk full writing %s (%s): %d records wait for space", self.current_path, exc, len(rest))
        self._disk_full = True
        self._disk_full_count += 1
        raise JournalFullError(self.current_path, exc.strerror or str(exc)) from exc

    def _write_batch(self, batch: list[bytes]) -> tuple[int, bool]:
        """Write a batch, rotating at record boundaries. Returns (records made durable by rotation, rotated).

        Raises:
            OSError: A write, fsync or rotation failed; records before the last rotation are durable
                (``self._durable`` covers them).
        """
        files = self._files
        rotated = False
        done = 0
        chunk: list[bytes] = []
        size = files.size
        for pos, raw in enumerate(batch):
            if size > 0 and size + len(raw) > self._journal_size:
                self._write(chunk)
                files.fsync()
                done = pos
                if chunk:
                    self._durable = max(self._durable, _peek(chunk[-1])[0])
                chunk = []
                files.rotate()
                rotated = True
                size = 0
            if self.index.wants(files.index, size):
                seq, ts = _peek(raw)
                self.index.note(files.index, seq, ts, size)
            chunk.append(raw)
            size += len(raw)
        self._write(chunk)
        return done, rotated

    def _write(self, chunk: list[bytes]) -> None:
        if chunk:
            self._files.write(b"".join(chunk), len(chunk), _peek(chunk[0])[0], _peek(chunk[-1])[0])

    def _save_dedup(self) -> None:
        try:
            save_snapshot(self._snapshot_path, self._durable, self.dedup.snapshot())
        except OSError as exc:  # the snapshot only speeds up start-up; the journal is the truth
            log.warning("cannot write publisher snapshot %s: %s", self._snapshot_path, exc)

    # -- close / statistics -------------------------------------------------------------------------------

    def close(self) -> None:
        """Sync what is buffered, save the publisher snapshot, close the file and release the lock. Idempotent.

        On a full disk the records still buffered are dropped (logged): none of them was acknowledged.
        """
        if self._closed or not self._opened:
            self._closed = True
            return
        try:
            if self._failed is None:
                try:
                    self.sync()
                except JournalFullError as exc:
                    log.error("closing the journal with %d records unwritten: %s", len(self._buffer), exc)
                self._save_dedup()
            self._settle_reservation()
        finally:
            with self._sync_lock:
                self._closed = True
                self._files.close()

    def _settle_reservation(self) -> None:
        """Lower the ceiling to the last sequence handed out, so the next start continues right after it.

        Records dropped on a full disk keep their sequences out of use (a live subscriber may have seen them):
        the ceiling still covers them.
        """
        with self._sync_lock, self._lock:  # no append in between: it would compare with the old ceiling
            if self._reserved.ceiling <= self._last_seq:
                return
            try:
                self._reserved.settle(self._last_seq)
            except OSError as exc:
                log.warning("cannot record the last sequence in %s (%s): the next start continues above %d",
                            self._reserved.path, exc, self._reserved.ceiling)

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
        cumulative = []
        total = 0
        for bound, count in zip((*FSYNC_BUCKETS, float("inf")), self._files.fsync_counts, strict=True):
            total += count
            cumulative.append((bound, total))
        with self._lock:
            pending_records = len(self._buffer)
            pending_bytes = self._pending_bytes
        return JournalStatistics(
            files=FileStateCounts.of(files),
            bytes_on_disk=sum(f.size for f in files),
            current_file=str(self.current_path) if self._opened else "",
            last_sequence=self._last_seq,
            durable_sequence=self._durable,
            appended_records=self._appended_records,
            appended_bytes=self._appended_bytes,
            pending_records=pending_records,
            pending_bytes=pending_bytes,
            fsync_count=self._files.fsyncs,
            fsync_seconds_sum=self._files.fsync_sum,
            fsync_buckets=tuple(cumulative),
            rotations=self._files.rotations,
            truncated_bytes=self._truncated,
            publishers=len(self.dedup),
            damaged_records=self.damage.records,
            damaged_bytes=self.damage.bytes,
            disk_full=self._disk_full,
            disk_full_count=self._disk_full_count,
            reserved_sequence=self._reserved.ceiling,
            reservation_waits=self._reservation_waits,
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
        return JournalReader(self._dir, self._archive, instance_name=self._instance, index=self.index,
                             damaged_records=self._damage_policy, damage=self.damage)
