"""Per-file summaries: a sealed journal file's size, CRC32C and sequence range, checked at start-up.

When the writer leaves a full file (rotation) it writes ``<instance>.<index>.summary`` in the JournalDirectory
(JSON: format, size and CRC32C of the uncompressed content, record count, first and last sequence). At
open, each older file is read once and its CRC compared (one sequential read and a hardware CRC, no record
decoding); only a file whose summary is missing or does not match is scanned record by record, which
locates the damage. The summary stays in the JournalDirectory when the file is archived or compressed
(the CRC is of the uncompressed content), so every file of the log is checked.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import google_crc32c

from broker.txlog.file_records import CHUNK, open_journal_file
from broker.txlog.files import JOURNAL_SUFFIX, fsync_directory, journal_name

log = logging.getLogger("broker.txlog")

SUMMARY_SUFFIX = ".summary"
_VERSION = 1


@dataclass(frozen=True)
class FileSummary:
    """What a sealed file held when it was sealed."""

    size: int
    crc32c: int
    records: int
    first_sequence: int
    last_sequence: int


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


def read_summary(path: Path) -> FileSummary | None:
    """The summary at ``path``; ``None`` when missing or unreadable."""
    try:
        doc = json.loads(path.read_bytes())
        if doc.pop("version", None) != _VERSION:
            return None
        return FileSummary(**{k: int(v) for k, v in doc.items()})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("ignoring unreadable journal summary %s (%s)", path, exc)
        return None


def write_summary(path: Path, summary: FileSummary) -> bool:
    """Write a summary atomically (temp file, fsync, rename, directory fsync).

    Returns:
        False when it could not be written (logged): a summary only makes start-up cheaper, and a full
        disk must not stop the broker for it.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, json.dumps({"version": _VERSION, **asdict(summary)}).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_directory(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        log.warning("cannot write journal summary %s (%s); the file is scanned in full at next start", path, exc)
        return False
    return True
