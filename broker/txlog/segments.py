"""The journal files the writer appends to: the directory lock, the current file, rotation, preallocation.

:class:`SegmentFiles` is used by :class:`~broker.txlog.writer.JournalWriter` under its sync lock only (one
thread at a time). It knows bytes, not records: the writer decides where records go.

* **Lock.** ``journal.lock`` in the JournalDirectory is held with an exclusive ``flock`` from :meth:`lock`
  to :meth:`close`, so a second broker (or writer) on the same directory is refused instead of interleaving
  its writes. The lock file is never removed (a later start needs no space to create it again).
* **Durable size.** The size of the current file after its last fsync; a failed write (full disk) is undone
  by :meth:`truncate_to_durable`, so nothing half-written is left behind.
* **Rotation.** The full file is fsynced by the writer, then the next file is opened *before* the full one
  is closed (a full disk leaves the writer on the old file, retrying later), and the full file's summary
  (:mod:`broker.txlog.summary`) is written from the CRC kept while writing, stamped with the file's ``stat``
  after its mtime is set into the past (:func:`~broker.txlog.summary.seal_mtime`: a later write, even in the
  same clock tick, then changes it).
* **Preallocation.** Empty files ahead only make problems show early: failing to create them is logged, not
  an error, until one is needed.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import logging
import os
import time
from pathlib import Path

import google_crc32c

from broker.errors import JournalError
from broker.faults import fault_point
from broker.txlog.files import fsync_directory, journal_name
from broker.txlog.summary import FileSummary, Stamp, content_crc, seal_mtime, summary_path, write_summary

log = logging.getLogger("broker.txlog")

#: The lock file's name in the JournalDirectory.
LOCK_NAME = "journal.lock"
#: Upper bounds (seconds) of the fsync latency histogram buckets; the last bucket is unbounded.
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
#: errno values that mean "no space" (a full disk or a quota): retried, not fatal.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})

_datasync = getattr(os, "fdatasync", os.fsync)


def is_no_space(exc: BaseException) -> bool:
    """Whether an error is a full disk or an exceeded quota."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


class SegmentFiles:
    """The writer's side of the journal files (see the module docstring).

    Args:
        directory: The JournalDirectory.
        instance: The instance name as used in file names.
        preallocated: PreallocatedJournalFiles (at least 1: the current file).
    """

    def __init__(self, directory: Path, instance: str, preallocated: int) -> None:
        self.directory = directory
        self.instance = instance
        self.preallocated = max(1, preallocated)
        self._lock_fd = -1
        self.fd = -1
        #: Index of the current file.
        self.index = 0
        #: Bytes in the current file (written, maybe not yet durable).
        self.size = 0
        #: Size of the current file at its last fsync (or when opened).
        self.durable_size = 0
        #: Records in the current file, its first and last sequence (for its summary).
        self.records = 0
        self.first_sequence = 0
        self.last_sequence = 0
        self._crc = 0
        self._durable_crc = 0
        self._durable_marks = (0, 0, 0)
        # Counters.
        self.fsyncs = 0
        self.fsync_sum = 0.0
        self.fsync_counts = [0] * (len(FSYNC_BUCKETS) + 1)
        self.rotations = 0

    @property
    def path(self) -> Path:
        """The current file."""
        return self.directory / journal_name(self.instance, self.index)

    @property
    def lock_path(self) -> Path:
        """The lock file."""
        return self.directory / LOCK_NAME

    # -- lock ---------------------------------------------------------------------------------------------

    def lock(self) -> None:
        """Take the directory lock.

        Raises:
            JournalError: Another broker (or writer) holds it, or it cannot be created.
        """
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalError(
                f"another broker is using the journal directory {self.directory.resolve()} (lock "
                f"{self.lock_path.resolve()}): is another broker running with this config? Stop it, or give this "
                "instance its own JournalDirectory."
            ) from None
        except OSError:
            os.close(fd)
            raise
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the directory lock (closing the lock file releases it)."""
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- the current file ---------------------------------------------------------------------------------

    def open(self, index: int, *, records: int = 0, first_sequence: int = 0, last_sequence: int = 0) -> None:
        """Make file ``index`` current (created when missing), continuing after what it holds.

        Raises:
            OSError: It cannot be opened or created (a full disk included).
        """
        path = self.directory / journal_name(self.instance, index)
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if not existed:
                fsync_directory(self.directory)
            size = os.fstat(fd).st_size
            crc = content_crc(path)[1] if size else 0
        except OSError:
            os.close(fd)
            raise
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.index, self.size, self.durable_size = fd, index, size, size
        self.records, self.first_sequence, self.last_sequence = records, first_sequence, last_sequence
        self._crc = self._durable_crc = crc
        self._durable_marks = (records, first_sequence, last_sequence)

    def write(self, data: bytes, records: int, first_sequence: int, last_sequence: int) -> None:
        """Append records' bytes to the current file (not durable until :meth:`fsync`).

        Raises:
            OSError: The write failed; part of ``data`` may be in the file (see :meth:`truncate_to_durable`).
        """
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            self._crc = google_crc32c.extend(self._crc, bytes(view[:written]))
            view = view[written:]
            self.size += written
        if not self.records:
            self.first_sequence = first_sequence
        self.records += records
        self.last_sequence = last_sequence

    def fsync(self) -> None:
        """Make the current file's data durable (``fdatasync``), timing it.

        Raises:
            OSError: The fsync failed.
        """
        start = time.perf_counter()
        _datasync(self.fd)
        elapsed = time.perf_counter() - start
        self.fsyncs += 1
        self.fsync_sum += elapsed
        self.fsync_counts[bisect.bisect_left(FSYNC_BUCKETS, elapsed)] += 1
        self.durable_size = self.size
        self._durable_crc = self._crc
        self._durable_marks = (self.records, self.first_sequence, self.last_sequence)

    def truncate_to_durable(self) -> None:
        """Undo what was written since the last fsync (after a full disk), durably.

        Raises:
            OSError: The file cannot be truncated or fsynced.
        """
        if self.fd < 0:
            return
        os.ftruncate(self.fd, self.durable_size)
        os.fsync(self.fd)
        self.size = self.durable_size
        self._crc = self._durable_crc
        self.records, self.first_sequence, self.last_sequence = self._durable_marks

    def rotate(self) -> None:
        """Leave the current file (already fsynced) for the next one and write its summary.

        Raises:
            OSError: The next file cannot be opened; the writer stays on the current one.
        """
        assert self.size == self.durable_size, "rotate() needs the full file fsynced first"
        fault_point("journal-mid-rotation")
        full_index = self.index
        try:
            stamp: Stamp | None = Stamp.of(seal_mtime(self.fd))
        except OSError as exc:  # only makes the next start check this file once
            log.warning("cannot stamp journal %s for its summary (%s)", self.path, exc)
            stamp = None
        summary = FileSummary(self.size, self._crc, self.records, self.first_sequence, self.last_sequence, stamp)
        self.open(full_index + 1)
        self.rotations += 1
        write_summary(summary_path(self.directory, self.instance, full_index), summary)

    def ensure_preallocated(self) -> None:
        """Create the empty files ahead of the current one; a full disk is logged, not raised.

        Raises:
            OSError: Any other failure (a permission problem shows up here, early).
        """
        created = False
        try:
            for index in range(self.index + 1, self.index + self.preallocated):
                path = self.directory / journal_name(self.instance, index)
                if not path.exists():
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
                    created = True
            if created:
                fsync_directory(self.directory)
        except OSError as exc:
            if not is_no_space(exc):
                raise
            log.warning("cannot preallocate journal files in %s (%s); they are created when needed",
                        self.directory, exc)

    def close(self) -> None:
        """Close the current file and release the lock."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.unlock()
