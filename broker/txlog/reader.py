"""Replay: iterate an instance's journal records from a bookmark or a time, across all its files.

Files are read in index order from the JournalDirectory and the JournalArchiveDirectory, plain or
compressed. The first file is found by binary search on each file's first record (cached in the shared
:class:`~broker.txlog.index.JournalIndex`), the first record inside it through the index's sparse points.
Readers run in worker threads, any number at once, next to the writer: they never read past the
``until_sequence`` they are given (the durable end), and they follow files that are archived or compressed
while they read (an open file keeps working; a file not yet opened is looked up again).

While a replay runs, the lowest file index it may still read is registered here, so that
:func:`broker.txlog.maintenance.remove_file` never removes a file a replay still needs.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from broker.errors import JournalError
from broker.txlog.bookmarks import ReplayStart
from broker.txlog.damage import DamageCounter, DamagedRange, load, walk
from broker.txlog.file_records import first_header, iter_runs, open_journal_file
from broker.txlog.files import JournalFile, list_files, safe_instance
from broker.txlog.index import JournalIndex
from broker.txlog.records import (
    CorruptRecord,
    Record,
    RecordMaker,
    decode_run,
    encode,
    peek_sequence_timestamp,
)

log = logging.getLogger("broker.txlog")

_registry_lock = threading.Lock()
_active: dict[int, tuple[str, int]] = {}
_ids = itertools.count()
_T = TypeVar("_T")


def lowest_file_in_use(instance_name: str) -> int | None:
    """The lowest file index a running replay of this instance may still read (``None``: no replay)."""
    instance = safe_instance(instance_name)
    with _registry_lock:
        positions = [pos for inst, pos in _active.values() if inst == instance]
    return min(positions, default=None)


class JournalReader:
    """Reads an instance's journal files.

    Args:
        directory: The JournalDirectory.
        archive_directory: The JournalArchiveDirectory, if any.
        instance_name: Whose files to read; ``None`` means the only instance found in the directories.
        index: The index shared with the writer (and other readers); a private one when omitted.
        damaged_records: ``stop`` (default): a replay with ``until_sequence`` that meets a damaged record
            raises :class:`~broker.txlog.errors.JournalDamageError`; ``skip``: it passes over the damaged
            range (counted in ``damage``, logged once) and goes on with the next valid record.
        damage: Where skipped ranges are counted (the writer's, shared); a private counter when omitted.

    Raises:
        JournalError: ``instance_name`` is ``None`` and files of several instances are present.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        archive_directory: str | os.PathLike[str] | None = None,
        *,
        instance_name: str | None = None,
        index: JournalIndex | None = None,
        damaged_records: str = "stop",
        damage: DamageCounter | None = None,
    ) -> None:
        self._dir = Path(directory)
        self._skip_damage = damaged_records == "skip"
        #: Damaged ranges skipped by this reader's replays (shared with the writer when given).
        self.damage = damage if damage is not None else DamageCounter()
        self._archive = Path(archive_directory) if archive_directory is not None else None
        if instance_name is None:
            found = sorted({f.instance for f in list_files(self._dir, self._archive)})
            if len(found) > 1:
                raise JournalError(
                    f"{self._dir} holds the journals of several instances ({', '.join(found)}); name one"
                )
            instance_name = found[0] if found else ""
        self._instance = safe_instance(instance_name) if instance_name else ""
        self.index = index if index is not None else JournalIndex()
        self._pinned: list[JournalFile] | None = None
        #: Problems met by replays, as messages: missing files, cut tails and, for replays without
        #: ``until_sequence`` (which pass over damage and go on) or skipping damage, damaged ranges.
        self.problems: list[str] = []

    @classmethod
    def from_files(cls, files: list[JournalFile]) -> JournalReader:
        """A reader over exactly these files (one instance, any directories), e.g. for offline tools.

        Raises:
            JournalError: The files belong to several instances.
        """
        instances = {f.instance for f in files}
        if len(instances) > 1:
            raise JournalError(f"journal files of several instances given ({', '.join(sorted(instances))})")
        reader = cls(files[0].path.parent if files else ".", instance_name=files[0].instance if files else "")
        reader._pinned = sorted((f for f in files if f.size > 0), key=lambda f: f.index)
        return reader

    @property
    def instance(self) -> str:
        """The instance whose files are read (file-name form)."""
        return self._instance

    def files(self) -> list[JournalFile]:
        """The instance's journal files that hold data, in log order."""
        if self._pinned is not None:
            return list(self._pinned)
        if not self._instance:
            return []
        return [f for f in list_files(self._dir, self._archive, self._instance) if f.size > 0]

    def first_record_of(self, jf: JournalFile) -> tuple[int, int] | None:
        """``(sequence, timestamp_ns)`` of a file's first record (cached), ``None`` if it has none."""
        known = self.index.first(jf.index)
        if known is not None:
            return known
        header = self._with_relocation(jf, first_header)
        if header is None:
            return None
        seq, ts = peek_sequence_timestamp(header)
        self.index.note(jf.index, seq, ts, 0)
        return seq, ts

    def records(self, start: ReplayStart | None = None, *, until_sequence: int | None = None) -> Iterator[Record]:
        """Yield the records a replay from ``start`` delivers, in sequence order (:meth:`runs`, one at a time)."""
        for run in self.runs(start, until_sequence=until_sequence):
            yield from run

    def runs(self, start: ReplayStart | None = None, *, until_sequence: int | None = None,
             make: RecordMaker | None = None) -> Iterator[list[Any]]:
        """Yield the records a replay from ``start`` delivers, in sequence order, in runs (lists) of those read
        together: a replay's hot loop handles a run at a time rather than resuming a generator per record.

        Args:
            start: Where to start (default EPOCH). NOW yields nothing: the caller goes live at once.
            until_sequence: The last sequence to yield (the writer's durable sequence); records after it are
                never read, so a record being written is never seen. ``None`` reads to the end of the files
                (offline tools), passing over damaged ranges (resynchronising on the next valid record) and
                noting them in :attr:`problems`.
            make: What to build of each record instead of a :class:`~broker.txlog.records.Record` (see
                :func:`~broker.txlog.records.decode_run`; a replay builds its delivery frames). A record read
                past a damaged range is still a ``Record``.

        Yields:
            Runs of records (never empty), lazily: the caller reads at its own pace. Closing the generator
            releases the files.

        Raises:
            JournalDamageError: With ``until_sequence`` and the ``stop`` policy, a damaged record (located:
                file, offset, the sequences around it). A file whose end is cut (no valid record after the
                bad bytes) never raises: its records end there, noted in :attr:`problems`.
            JournalError: A file was removed under the replay.
        """
        start = start or ReplayStart.epoch()
        if start.now or (until_sequence is not None and until_sequence <= 0):
            return
        if (
            until_sequence is not None
            and start.from_timestamp_ns is None
            and start.after_sequence is not None
            and start.after_sequence >= until_sequence
        ):
            return
        # Hold every file before listing them, so that journal removal (which checks this registry) cannot
        # take a listed file away between the listing and the registration of the real position.
        reg = next(_ids)
        with _registry_lock:
            _active[reg] = (self._instance, -1)
        try:
            files = self.files()
            if not files:
                return
            pos = self._start_position(files, start)
            with _registry_lock:
                _active[reg] = (self._instance, files[pos].index)
            last_seq = 0
            prev_index: int | None = None
            first = True
            # Whether every later record is in the replay: sequences increase and timestamps never decrease
            # (the writer clamps them), so the records a start selects are a suffix of the log: once one is in,
            # all the later ones are.
            all_in = start.is_epoch
            while True:
                for jf in files[pos:]:
                    with _registry_lock:
                        _active[reg] = (self._instance, jf.index)
                    # Sequence gaps are legitimate (the writer's raise_sequence_floor skips sequences); only a
                    # missing file index next to a sequence jump means records are missing.
                    missing = prev_index is not None and jf.index != prev_index + 1
                    prev_index = jf.index
                    offset = self.index.seek(jf.index, start.after_sequence, start.from_timestamp_ns) if first else 0
                    first = False
                    for run in self._file_runs(jf, offset, until_sequence, make):
                        if run[0].sequence <= last_seq:  # overlap of a duplicated file (crash during archive/compress)
                            run = _after(run, last_seq)
                            if not run:
                                continue
                        if missing:
                            missing = False
                            if run[0].sequence != last_seq + 1:
                                self._note(f"gap in {self._instance}'s journal: sequence {last_seq} is followed by "
                                           f"{run[0].sequence} in {jf.path}, and the files before it are missing "
                                           "(removed, or moved elsewhere?)")
                        last_seq = run[-1].sequence
                        if not all_in:
                            includes = start.includes
                            run = [rec for rec in run if includes(rec.sequence, rec.timestamp_ns)]
                            all_in = bool(run)
                        if run:
                            yield run
                        if until_sequence is not None and last_seq >= until_sequence:
                            return
                # The writer may have moved on to new files while we read: pick them up.
                if self._pinned is not None:
                    break
                done = files[-1].index
                files = [f for f in self.files() if f.index > done]
                pos = 0
                if not files:
                    break
            # Ending below until_sequence is no error: the sequences after the last record may have been
            # skipped (raise_sequence_floor after a cut tail), and what does not exist cannot be replayed.
        finally:
            with _registry_lock:
                _active.pop(reg, None)

    def _start_position(self, files: list[JournalFile], start: ReplayStart) -> int:
        """Binary search: the last file whose first record is not past the start (0 when none)."""

        def before(jf: JournalFile) -> bool:
            first = self.first_record_of(jf)
            if first is None:
                return True  # no readable first record: let the scan report it
            seq, ts = first
            # Not past the first record wanted by either rule (a comma list of a bookmark and a time starts at the
            # earlier): by sequence when one is given, and by time when one is given.
            by_seq = start.after_sequence is None or seq <= start.after_sequence + 1
            by_time = start.from_timestamp_ns is None or ts < start.from_timestamp_ns
            return by_seq and by_time

        lo, hi = 0, len(files)  # invariant: files[:lo] are "before"; files[hi:] are not
        while lo < hi:
            mid = (lo + hi) // 2
            if before(files[mid]):
                lo = mid + 1
            else:
                hi = mid
        return max(lo - 1, 0)

    def _file_runs(self, jf: JournalFile, offset: int, until_sequence: int | None,
                   make: RecordMaker | None = None) -> Iterator[list[Any]]:
        """A file's records from ``offset`` on, in runs; noting index points as they pass."""
        bad: CorruptRecord | None = None
        last = 0
        f = self._with_relocation(jf, open_journal_file)
        index, wants, note = jf.index, self.index.wants, self.index.note
        with f:
            try:
                for offsets, run in iter_runs(f, offset, make):
                    done = until_sequence is not None and run[-1].sequence >= until_sequence
                    if done and run[-1].sequence > until_sequence:  # a run is a read buffer: never past the end
                        assert until_sequence is not None
                        keep = _upto(run, until_sequence)
                        del run[keep:], offsets[keep:]
                    if run:
                        _note_points(wants, note, index, offsets, run)
                        last = run[-1].sequence
                        yield run
                    if done:
                        return
            except CorruptRecord as exc:
                bad = exc
        if bad is not None:
            for rec in self._past_damage(jf, bad.offset, until_sequence, last):
                if until_sequence is not None and rec.sequence > until_sequence:
                    return
                yield [rec] if make is None else decode_run(encode(rec), 0, 0, 1, make)[0]

    def _past_damage(self, jf: JournalFile, offset: int, until_sequence: int | None,
                     previous: int) -> Iterator[Record]:
        """Read on from a bad record at ``offset``: locate the damage, then stop, skip it or end the file."""
        with load(self._where(jf)) as buf:
            for item in walk(buf, jf.path, offset, previous):
                if isinstance(item, DamagedRange):
                    if item.at_end:
                        self._note(f"{jf.path} ends in {item.size} bytes that are not a record at offset "
                                   f"{item.offset} ({item.detail}): a cut or torn tail; its records end at "
                                   f"sequence {item.last_good_sequence}")
                        return
                    if until_sequence is not None and not self._skip_damage:
                        raise item.error()
                    if self.damage.add(item, jf.index) or until_sequence is None:
                        self._note(f"{item.describe()}; skipped")
                    continue
                rec_offset, rec = item
                if self.index.wants(jf.index, rec_offset):
                    self.index.note(jf.index, rec.sequence, rec.timestamp_ns, rec_offset)
                yield rec
                if until_sequence is not None and rec.sequence >= until_sequence:
                    return

    def _where(self, jf: JournalFile) -> Path:
        if jf.path.exists() or self._pinned is not None:
            return jf.path
        for again in list_files(self._dir, self._archive, self._instance):
            if again.index == jf.index:
                return again.path
        raise JournalError(f"journal file {jf.path} was removed while a replay needed it")

    def _note(self, message: str) -> None:
        log.warning("%s", message)
        self.problems.append(message)

    def _with_relocation(self, jf: JournalFile, opener: Callable[[Path], _T]) -> _T:
        """Call ``opener(path)``, looking the file up again if maintenance moved it meanwhile."""
        try:
            return opener(jf.path)
        except FileNotFoundError:
            moved = [] if self._pinned is not None else list_files(self._dir, self._archive, self._instance)
            for again in moved:
                if again.index == jf.index:
                    return opener(again.path)
            raise JournalError(f"journal file {jf.path} was removed while a replay needed it") from None


def _upto(run: list[Record], sequence: int) -> int:
    """How many records at the start of ``run`` (sequences increase) are at or before ``sequence``."""
    lo, hi = 0, len(run)
    while lo < hi:
        mid = (lo + hi) // 2
        if run[mid].sequence <= sequence:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _after(run: list[Record], sequence: int) -> list[Record]:
    """The records of ``run`` after ``sequence``."""
    return [rec for rec in run if rec.sequence > sequence]


def _note_points(wants: Callable[[int, int], bool], note: Callable[[int, int, int, int], None], index: int,
                 offsets: list[int], run: list[Record]) -> None:
    """Note the index points of a run: what asking :meth:`~broker.txlog.index.JournalIndex.wants` for every
    record in turn notes, with a few calls per point instead of one per record.

    Past offset 0 (wanted by a rule of its own), ``wants`` is false up to the next point's offset and true from
    there (points are STRIDE bytes apart, after what is already covered), so each point is found by a binary
    search over the rest of the run.
    """
    i, n = 0, len(offsets)
    if n and offsets[0] == 0 and wants(index, 0):
        note(index, run[0].sequence, run[0].timestamp_ns, 0)
        i = 1
    while i < n:
        lo, hi = i, n
        while lo < hi:
            mid = (lo + hi) // 2
            if wants(index, offsets[mid]):
                hi = mid
            else:
                lo = mid + 1
        if lo == n:
            return
        note(index, run[lo].sequence, run[lo].timestamp_ns, offsets[lo])
        i = lo + 1
