"""Recovery at open: find the last valid record, cut a torn tail, and check every older file for damage.

The rule (``docs/txlog.md``, "Recovery"): a bad record is a *torn tail* (a write cut by a crash) only when no
valid record follows it and it is in the newest file holding data; then the plain file is truncated there.
Anywhere else it is *damage*: with ``<DamagedRecords>stop</DamagedRecords>`` (the default) start-up refuses
with :class:`~broker.txlog.errors.JournalDamageError` naming the file, the offset, the sequences around it and
what to do; with ``skip`` the damage is logged and counted, and every later record is kept (readers skip the
range). A file with valid records after a bad one is never truncated.

Older files are checked against their summaries (:mod:`broker.txlog.summary`): a file whose ``stat`` (size,
mtime, inode) matches its summary's stamp is trusted without reading it; any other is read once and its CRC
compared (and stamped again when it matches); a file without a summary, or not matching it, is scanned
record by record (and gets a summary when sound).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from broker.txlog.damage import DamageCounter, DamagedRange, FileScan, load, scan_file, walk
from broker.txlog.files import JournalFile
from broker.txlog.index import JournalIndex
from broker.txlog.records import Record
from broker.txlog.summary import FileSummary, Stamp, content_crc, read_summary, summary_path, write_summary

log = logging.getLogger("broker.txlog")


@dataclass
class Recovery:
    """What recovery found.

    Attributes:
        last_file: The file holding the last valid record (``None``: the log is empty).
        last_sequence: The last valid record's sequence (0 when none).
        last_timestamp_ns: Its timestamp.
        last_file_records: Valid records in ``last_file``.
        last_file_first_sequence: The first of them.
        truncated_bytes: Bytes of torn tail cut.
        skipped: Damaged ranges kept in place under the ``skip`` policy.
        trusted: Sealed files trusted without reading them (their ``stat`` matches their summary's stamp).
        checked: Sealed files read once to compare their CRC with their summary.
        scanned: Sealed files scanned record by record (no summary, or not matching it).
    """

    last_file: JournalFile | None = None
    last_sequence: int = 0
    last_timestamp_ns: int = 0
    last_file_records: int = 0
    last_file_first_sequence: int = 0
    truncated_bytes: int = 0
    skipped: list[DamagedRange] = field(default_factory=list)
    trusted: int = 0
    checked: int = 0
    scanned: int = 0


def recover(files: list[JournalFile], journal_directory: Path, instance: str, index: JournalIndex,
            policy: str = "stop", counter: DamageCounter | None = None) -> Recovery:
    """Recover an instance's log (see the module docstring).

    Args:
        files: The instance's files (:func:`~broker.txlog.files.list_files`), in log order.
        journal_directory: The JournalDirectory (where summaries live).
        instance: The instance (file-name form).
        index: The sparse index to fill for the files scanned.
        policy: ``stop`` or ``skip`` (``<DamagedRecords>``).
        counter: Counts the damage skipped.

    Raises:
        JournalDamageError: Damage with ``policy="stop"``.
        OSError: A file cannot be read or truncated.
    """
    result = Recovery()
    data = [jf for jf in files if jf.size > 0]
    newest = len(data)
    for pos in range(len(data) - 1, -1, -1):
        jf = data[pos]
        scan = _scan(jf, index)
        tail = scan.torn_tail
        if tail is not None:
            if jf.archived or jf.compressed:
                _damaged(tail, jf, policy, counter, result)  # never modified: report it as damage
            else:
                cut = scan.size - tail.offset
                log.warning("journal %s: %s at offset %d with no valid record after it; cutting %d bytes "
                            "(a write interrupted by a crash)", jf.path, tail.detail, tail.offset, cut)
                truncate(jf.path, tail.offset)
                result.truncated_bytes += cut
                if scan.records == 0:
                    summary_path(journal_directory, instance, jf.index).unlink(missing_ok=True)
        for damage in scan.inner_damage:
            _damaged(damage, jf, policy, counter, result)
        if scan.records:
            result.last_file = jf
            result.last_sequence = scan.last_sequence
            result.last_timestamp_ns = scan.last_timestamp_ns
            result.last_file_records = scan.records
            result.last_file_first_sequence = scan.first_sequence
            newest = pos
            break
    _verify_sealed(data[:newest], journal_directory, instance, index, policy, counter, result)
    return result


def _scan(jf: JournalFile, index: JournalIndex, previous_sequence: int = 0) -> FileScan:
    index.forget(jf.index)

    def note(offset: int, rec: Record) -> None:
        index.note(jf.index, rec.sequence, rec.timestamp_ns, offset)

    return scan_file(jf.path, previous_sequence, note)


def _damaged(damage: DamagedRange, jf: JournalFile, policy: str, counter: DamageCounter | None,
             result: Recovery) -> None:
    if policy != "skip":
        raise damage.error()
    log.error("%s; skipping it (<DamagedRecords>skip</DamagedRecords>): later records are kept",
              damage.describe())
    result.skipped.append(damage)
    if counter is not None:
        counter.add(damage, jf.index)


def _verify_sealed(files: list[JournalFile], journal_directory: Path, instance: str, index: JournalIndex,
                   policy: str, counter: DamageCounter | None, result: Recovery) -> None:
    """Check the files before the newest one: trust a file whose ``stat`` matches its summary's stamp, read
    and CRC the others, scan the ones that do not match (see :mod:`broker.txlog.summary`)."""
    previous = 0
    for jf in files:
        where = summary_path(journal_directory, instance, jf.index)
        summary = read_summary(where)
        st = os.stat(jf.path)  # before reading: a write during the check makes the stamp not match
        if summary is not None:
            if summary.stamp is not None and summary.stamp.matches(st):
                result.trusted += 1
                previous = summary.last_sequence
                continue
            size, crc = content_crc(jf.path)
            result.checked += 1
            if (size, crc) == (summary.size, summary.crc32c):
                write_summary(where, replace(summary, stamp=Stamp.of(st)))
                previous = summary.last_sequence
                continue
            log.warning("journal %s does not match its summary %s (size %d, expected %d): scanning it",
                        jf.path, where.name, size, summary.size)
        scan = _scan(jf, index, previous)
        result.scanned += 1
        for damage in scan.damaged or ():
            # In a sealed file even a bad end is damage: later files hold records.
            _damaged(damage, jf, policy, counter, result)
        if not scan.damaged:
            write_summary(where, summary_of(scan, st))
        previous = scan.last_sequence or previous


def summary_of(scan: FileScan, st: os.stat_result | None = None) -> FileSummary:
    """The summary of a sound file from its scan (the CRC is computed here: one more read), stamped with
    ``st`` (the file's ``stat`` taken before the scan) when given."""
    size, crc = content_crc(scan.path)
    return FileSummary(size, crc, scan.records, scan.first_sequence, scan.last_sequence,
                       Stamp.of(st) if st is not None else None)


def truncate(path: Path, size: int) -> None:
    """Cut a file to ``size`` bytes and make that durable."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def publisher_table(files: list[JournalFile], covered: int, table: dict[int, int],
                    first_sequence: Callable[[JournalFile], int | None]) -> dict[int, int]:
    """Add the publishers of the records after ``covered`` to a de-duplication table (hash -> highest ``s``).

    Only the files that may hold records after ``covered`` are read: from the last file that starts at or
    before ``covered + 1``. Damaged ranges are passed over (recovery has reported them).

    Args:
        files: The instance's files, in log order.
        covered: The sequence the publisher snapshot covers.
        table: The snapshot's table, updated in place.
        first_sequence: The first sequence of a file (cached by the caller), ``None`` when unknown.

    Returns:
        ``table``.
    """
    nonempty = [f for f in files if f.size > 0]
    start = 0
    for pos in range(len(nonempty) - 1, -1, -1):
        first = first_sequence(nonempty[pos])
        if first is not None and first <= covered + 1:
            start = pos
            break
    for jf in nonempty[start:]:
        with load(jf.path) as buf:
            for item in walk(buf, jf.path):
                if isinstance(item, DamagedRange):
                    continue
                rec = item[1]
                if rec.sequence > covered and rec.publisher_seq and rec.publisher_seq > table.get(rec.publisher_hash, 0):
                    table[rec.publisher_hash] = rec.publisher_seq
    return table
