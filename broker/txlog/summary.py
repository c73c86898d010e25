"""Per-file summaries: what a sealed journal file holds, and a stat stamp that makes the start-up check cheap.

When the writer leaves a full file (rotation) it writes ``<instance>.<index>.summary`` in the JournalDirectory
(JSON, format 2). The summary describes the *logical* file, the same whether it is plain, archived or
compressed: size and CRC32C of the uncompressed content, record count, first and last sequence. Its
``stamp`` describes the *physical* file last checked against it: size on disk, ``st_mtime_ns``, inode, and
when the check (or the seal) happened.

At open (:mod:`broker.txlog.recovery`) a sealed file whose ``stat`` matches its stamp is trusted without
being read: any write to a file changes its mtime, so a byte flipped by a later write (``dd``, an editor, a
stray program) is noticed. A file that does not match (or has no stamp: a format 1 summary) is read once and
its CRC compared; when it matches, the stamp is renewed, so the next start trusts it again; when it does not,
the file is scanned record by record to locate the damage. A file with no summary is scanned and gets one.
Damage that no write made (a disk's own bit rot) is found by ``broker journal verify``, which reads every
record.

*Racy stamps.* A file's mtime has the granularity of the kernel's coarse clock (a few ms), so a write in the
same tick as the stamp would leave the mtime unchanged. A stamp is trusted only when it was taken at least
:data:`RACY_NS` after the mtime it records; the writer therefore sets a file's mtime :data:`RACY_NS` into the
past when it seals it (:func:`seal_mtime`), so that any later write moves it forward.

The stamp follows the file: a rename to the archive directory keeps the inode, the size and the mtime; a copy
to another file system and a compression are stamped again by :mod:`broker.txlog.maintenance`
(:func:`restamp`) when the content they copied has the summary's CRC.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import google_crc32c

from broker.txlog.file_records import CHUNK, open_journal_file
from broker.txlog.files import JOURNAL_SUFFIX, journal_name, write_file_durably

log = logging.getLogger("broker.txlog")

SUMMARY_SUFFIX = ".summary"
_VERSION = 2
_READABLE = (1, 2)
#: A stamp is trusted only when taken this long after the mtime it records (see "Racy stamps").
RACY_NS = 2_000_000_000


@dataclass(frozen=True)
class Stamp:
    """The physical file a summary was last checked against (``os.stat`` fields)."""

    size: int
    mtime_ns: int
    inode: int
    checked_ns: int

    @classmethod
    def of(cls, st: os.stat_result, checked_ns: int | None = None) -> Stamp:
        """The stamp of a file from its ``stat``, checked now (or at ``checked_ns``)."""
        return cls(st.st_size, st.st_mtime_ns, st.st_ino,
                   time.time_ns() if checked_ns is None else checked_ns)

    def matches(self, st: os.stat_result) -> bool:
        """Whether a file with this ``stat`` is the one stamped, unwritten since (and the stamp is not racy)."""
        return (st.st_size == self.size and st.st_mtime_ns == self.mtime_ns and st.st_ino == self.inode
                and self.checked_ns - self.mtime_ns >= RACY_NS)


@dataclass(frozen=True)
class FileSummary:
    """What a sealed file held when it was sealed, and the physical file last checked against it."""

    size: int
    crc32c: int
    records: int
    first_sequence: int
    last_sequence: int
    stamp: Stamp | None = None


def summary_path(journal_directory: Path, instance: str, index: int) -> Path:
    """Where the summary of file ``index`` lives (always in the JournalDirectory)."""
    return journal_directory / (journal_name(instance, index).removesuffix(JOURNAL_SUFFIX) + SUMMARY_SUFFIX)


def content_crc(path: Path) -> tuple[int, int]:
    """``(size, CRC32C)`` of a file's uncompressed content.

    Raises:
        OSError: The file cannot be read.
    """
    crc = 0
    size = 0
    with open_journal_file(path) as f:
        while chunk := f.read(CHUNK):
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
    return size, crc


def seal_mtime(fd: int) -> os.stat_result:
    """Set a file's mtime :data:`RACY_NS` into the past (see "Racy stamps") and return its new ``stat``.

    Called by the writer when it leaves a full file, before its summary is stamped.
    """
    st = os.fstat(fd)
    os.utime(fd, ns=(st.st_atime_ns, time.time_ns() - RACY_NS))
    return os.fstat(fd)


def read_summary(path: Path) -> FileSummary | None:
    """The summary at ``path``; ``None`` when missing or unreadable."""
    try:
        doc = json.loads(path.read_bytes())
        if doc.pop("version", None) not in _READABLE:
            return None
        raw_stamp = doc.pop("stamp", None)
        stamp = Stamp(**{k: int(v) for k, v in raw_stamp.items()}) if raw_stamp else None
        return FileSummary(**{k: int(v) for k, v in doc.items()}, stamp=stamp)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        log.warning("ignoring unreadable journal summary %s (%s)", path, exc)
        return None


def write_summary(path: Path, summary: FileSummary) -> bool:
    """Write a summary atomically and durably (:func:`~broker.txlog.files.write_file_durably`).

    Returns:
        False when it could not be written (logged): a summary only makes start-up cheaper, and a full
        disk must not stop the broker for it.
    """
    doc = {"version": _VERSION, **asdict(summary)}
    try:
        write_file_durably(path, json.dumps(doc).encode())
    except OSError as exc:
        log.warning("cannot write journal summary %s (%s); the file is scanned in full at next start", path, exc)
        return False
    return True


def restamp(path: Path, file: Path, st: os.stat_result, crc32c: int) -> bool:
    """Stamp a summary with a new physical file (a copy or a compression of the one it describes).

    Only when ``crc32c``, the CRC of the content that was copied, is the summary's: a copy of a damaged file
    is not made trusted, and the next start checks it.

    Args:
        path: The summary file.
        file: The new physical file (for the log).
        st: Its ``stat``.
        crc32c: The CRC32C of the uncompressed content written to it.

    Returns:
        Whether the summary now trusts ``file``.
    """
    summary = read_summary(path)
    if summary is None or summary.crc32c != crc32c:
        if summary is not None:
            log.warning("journal %s: the content copied does not match its summary %s; the next start checks it",
                        file, path.name)
        return False
    return write_summary(path, replace(summary, stamp=Stamp.of(st)))
