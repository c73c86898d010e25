"""Finding damage in a journal file: its valid records, its damaged byte ranges and a torn tail.

A bad record (inconsistent header, file ending inside it, CRC mismatch, sequence not increasing) starts a
*damaged range*. The range ends where the *resync* scan finds the next record that validates: a header of a
known version and command whose lengths add up, the whole record inside the file, a matching CRC32C and a
sequence greater than the last good one. Candidates are found with one regular expression over the bytes
(the command and version bytes at offsets 40 and 41), so the scan costs little beyond the CRCs of the few
places that look like headers. When no valid record follows, the range runs to the end of the file: in the
newest file that is a *torn tail* (a write cut by a crash), anywhere else it is damage.

Files are read whole: plain files through ``mmap`` (the page cache, no copy), compressed ones decompressed
into memory. Used by recovery (:mod:`broker.txlog.recovery`), readers that skip damage, and
``broker journal verify|repair``.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.txlog.errors import JournalDamageError
from broker.txlog.file_records import open_journal_file
from broker.txlog.files import COMPRESSED_SUFFIX
from broker.txlog.records import CorruptRecord, Record, decode

# A header's command byte (1-4) followed by its version byte (1-2), at offsets 40 and 41.
_CANDIDATE = re.compile(rb"[\x01-\x04][\x01\x02]", re.DOTALL)
_COMMAND_AT = 40

#: What ``<DamagedRecords>`` may say: stop at damage (refuse to start, fail the replay) or skip it.
POLICIES = ("stop", "skip")


@dataclass(frozen=True)
class DamagedRange:
    """Bytes of a journal file that are not valid records.

    Attributes:
        path: The file.
        offset: Where the damage starts.
        end: Where the next valid record starts (the file size when none follows).
        detail: What is wrong at ``offset``.
        last_good_sequence: The last valid record before it (0 when none).
        first_good_sequence: The first valid record after it in the file; ``None`` when none follows
            (a torn tail when the file is the newest).
    """

    path: Path
    offset: int
    end: int
    detail: str
    last_good_sequence: int
    first_good_sequence: int | None

    @property
    def size(self) -> int:
        """Bytes in the range."""
        return self.end - self.offset

    @property
    def at_end(self) -> bool:
        """No valid record follows in the file."""
        return self.first_good_sequence is None

    @property
    def records(self) -> int:
        """Records lost in the range, from the sequences around it (at least 1)."""
        if self.first_good_sequence is None:
            return 1
        return max(1, self.first_good_sequence - self.last_good_sequence - 1)

    def error(self, *, hint: bool = True) -> JournalDamageError:
        """The :class:`JournalDamageError` that reports this range."""
        return JournalDamageError(self.path, self.offset, self.end, self.detail, self.last_good_sequence,
                                  self.first_good_sequence, hint=hint)

    def describe(self) -> str:
        """One line for logs and ``journal verify``."""
        return str(self.error(hint=False))


@contextlib.contextmanager
def load(path: str | os.PathLike[str]) -> Iterator[bytes | mmap.mmap]:
    """The whole (uncompressed) content of a journal file: an ``mmap`` for plain files.

    Raises:
        FileNotFoundError: The file is gone.
    """
    if str(path).endswith(COMPRESSED_SUFFIX):
        with open_journal_file(path) as f:
            yield f.read()
        return
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            yield m


def resync(buf: bytes | mmap.mmap, offset: int, after_sequence: int) -> tuple[int, Record] | None:
    """The first valid record starting after ``offset`` whose sequence exceeds ``after_sequence``.

    Returns:
        ``(its offset, the record)``, or ``None`` when no valid record follows.
    """
    pos = offset + 1
    while True:
        m = _CANDIDATE.search(buf, pos + _COMMAND_AT)
        if m is None:
            return None
        candidate = m.start() - _COMMAND_AT
        try:
            rec, _end = decode(buf, candidate)
        except CorruptRecord:
            pos = candidate + 1
            continue
        if rec.sequence > after_sequence:
            return candidate, rec
        pos = candidate + 1


def walk(buf: bytes | mmap.mmap, path: Path, offset: int = 0,
         previous_sequence: int = 0) -> Iterator[tuple[int, Record] | DamagedRange]:
    """Every valid record of a file's content as ``(offset, record)``, and every damaged range, in order.

    Args:
        buf: The file's content (:func:`load`).
        path: The file (for the damaged ranges).
        offset: Where a record starts (0, or a point of the sparse index).
        previous_sequence: The last sequence before ``offset`` (the previous file's last record at 0), for
            the ranges' ``last_good_sequence``.
    """
    last = previous_sequence
    in_file = previous_sequence if offset else 0  # sequences must increase within a file
    size = len(buf)
    while offset < size:
        try:
            rec, end = decode(buf, offset)
            if rec.sequence <= in_file:
                raise CorruptRecord(offset, f"sequence {rec.sequence} does not follow {in_file}")
        except CorruptRecord as exc:
            found = resync(buf, offset, in_file)
            if found is None:
                yield DamagedRange(path, offset, size, exc.reason, last, None)
                return
            offset, rec = found
            yield DamagedRange(path, exc.offset, offset, exc.reason, last, rec.sequence)
            end = offset + _record_size(buf, offset)
        yield offset, rec
        last = in_file = rec.sequence
        offset = end


def _record_size(buf: bytes | mmap.mmap, offset: int) -> int:
    return int.from_bytes(buf[offset : offset + 4], "little")


@dataclass
class FileScan:
    """What a full scan of one file found.

    Attributes:
        path: The file.
        size: Its (uncompressed) size.
        records: Valid records.
        first_sequence: The first valid record's sequence (0 when none).
        first_timestamp_ns: Its timestamp.
        last_sequence: The last valid record's sequence (0 when none).
        last_timestamp_ns: Its timestamp.
        valid_end: Where the last valid record ends.
        damaged: The damaged ranges, in file order.
    """

    path: Path
    size: int = 0
    records: int = 0
    first_sequence: int = 0
    first_timestamp_ns: int = 0
    last_sequence: int = 0
    last_timestamp_ns: int = 0
    valid_end: int = 0
    damaged: list[DamagedRange] | None = None

    @property
    def torn_tail(self) -> DamagedRange | None:
        """The last damaged range when no valid record follows it."""
        if self.damaged and self.damaged[-1].at_end:
            return self.damaged[-1]
        return None

    @property
    def inner_damage(self) -> list[DamagedRange]:
        """The damaged ranges that valid records follow."""
        return [d for d in self.damaged or () if not d.at_end]


def scan_file(path: Path, previous_sequence: int = 0, note: object = None) -> FileScan:
    """Read every record of a file (see :func:`walk`).

    Args:
        path: A plain or compressed journal file.
        previous_sequence: The last sequence of the file before it (for the damage reports).
        note: Called as ``note(offset, record)`` for each valid record (e.g. to fill the sparse index).
    """
    result = FileScan(path, damaged=[])
    with load(path) as buf:
        result.size = len(buf)
        for item in walk(buf, path, 0, previous_sequence):
            if isinstance(item, DamagedRange):
                assert result.damaged is not None
                result.damaged.append(item)
                continue
            offset, rec = item
            if not result.records:
                result.first_sequence, result.first_timestamp_ns = rec.sequence, rec.timestamp_ns
            result.records += 1
            result.last_sequence, result.last_timestamp_ns = rec.sequence, rec.timestamp_ns
            result.valid_end = offset + _record_size(buf, offset)
            if note is not None:
                note(offset, rec)  # type: ignore[operator]
    return result


class DamageCounter:
    """Damaged ranges skipped (``<DamagedRecords>skip</DamagedRecords>``), each counted once.

    Shared by a writer's recovery and its readers; thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int], DamagedRange] = {}

    def add(self, damage: DamagedRange, file_index: int) -> bool:
        """Count a range; ``False`` when it was counted before (by index, so archiving does not recount)."""
        key = (str(file_index), damage.offset)
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = damage
            return True

    @property
    def records(self) -> int:
        """Records lost in the ranges counted."""
        with self._lock:
            return sum(d.records for d in self._seen.values())

    @property
    def bytes(self) -> int:
        """Bytes in the ranges counted."""
        with self._lock:
            return sum(d.size for d in self._seen.values())
