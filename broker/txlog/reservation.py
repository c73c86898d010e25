"""Sequence reservation: a durable ceiling above every sequence the writer has handed out.

A record's sequence (so its bookmark) is handed out by :meth:`~broker.txlog.writer.JournalWriter.append`, and
live subscribers see it at once, before the group commit makes the record durable. A crash loses the records
not yet durable, so the journal alone cannot say which sequences were seen. The writer therefore never hands
out a sequence above a *ceiling* recorded durably in ``<instance>.sequence`` in the JournalDirectory (JSON
``{"reserved": N}``, replaced with :func:`~broker.txlog.files.write_file_durably`), and ``open()`` continues
above it: after any crash, the next sequence is above every sequence that could have been seen.

* ``open()`` reserves a block (the ceiling becomes the last sequence + ``block``).
* ``sync()`` (the sync thread) extends the reservation by a block once the last sequence comes within half a
  block of the ceiling, so ``append`` normally only compares two integers.
* ``append`` reserves synchronously (one small durable write on the appending thread) when the next sequence
  would be above the ceiling: only at more than half a block of records between two syncs.
* A clean ``close()`` lowers the ceiling to the last sequence, so a restart after it does not jump.

File I/O only; thread-safe (a lock orders the writes of the file).
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from broker.txlog.files import write_file_durably

log = logging.getLogger("broker.txlog")

#: Suffix of the reservation file (``<instance>.sequence`` in the JournalDirectory).
SEQUENCE_SUFFIX = ".sequence"
#: Sequences reserved at a time. Half of it is the most records appended between two syncs without the
#: appending thread waiting for a reservation; a crash makes the next sequence jump by at most this much.
DEFAULT_BLOCK = 1_000_000


class SequenceReservation:
    """The durable ceiling of an instance's sequences (see the module docstring).

    Args:
        directory: The JournalDirectory.
        instance: The instance name in its file-name form.
        block: Sequences reserved at a time (at least 2).

    Attributes:
        path: The reservation file.
        block: Sequences reserved at a time.
        ceiling: No sequence above it is handed out; durable on disk, except after :meth:`settle` (the
            writer is closed then) and before the first reservation of :meth:`open`.
        writes: Reservations written since creation.
    """

    def __init__(self, directory: Path, instance: str, block: int = DEFAULT_BLOCK) -> None:
        if block < 2:
            raise ValueError(f"the sequence reservation block must be at least 2, not {block}")
        self.path = Path(directory) / f"{instance}{SEQUENCE_SUFFIX}"
        self.block = block
        self.half = block // 2
        self.ceiling = 0
        self.writes = 0
        self._lock = threading.Lock()
        self._failing = False

    def load(self) -> int:
        """The ceiling recorded on disk (0 when there is no file; an unreadable one is logged and ignored)."""
        try:
            value = int(json.loads(self.path.read_bytes())["reserved"])
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("sequence reservation %s is unreadable (%s); continuing above the journal's last record "
                        "and the SOW recovery floor only", self.path, exc)
            return 0
        return max(value, 0)

    def ensure(self, sequence: int, margin: int = 0) -> bool:
        """Make the ceiling at least ``sequence + margin``; when it is not, record ``sequence + block`` durably.

        Returns:
            True when a reservation was written.

        Raises:
            OSError: The file could not be written (the ceiling is unchanged).
        """
        with self._lock:
            if sequence + margin <= self.ceiling:
                return False
            self._write(sequence + self.block)
            return True

    def extend(self, last_sequence: int) -> None:
        """The sync thread's part: reserve the next block once ``last_sequence`` is within half a block of the
        ceiling. A failure is logged (once until a write succeeds) and left to the next call, or to
        :meth:`ensure` when the ceiling is reached."""
        if last_sequence + self.half <= self.ceiling:
            return
        try:
            self.ensure(last_sequence, self.half)
        except OSError as exc:
            if not self._failing:
                log.warning("cannot extend the sequence reservation %s (%s): appends wait for it past sequence %d",
                            self.path, exc, self.ceiling)
            self._failing = True
            return
        if self._failing:
            log.info("sequence reservation %s extended again (up to %d)", self.path, self.ceiling)
        self._failing = False

    def settle(self, last_sequence: int) -> None:
        """Lower the ceiling to ``last_sequence`` (a clean close: every sequence handed out is durable).

        Raises:
            OSError: The file could not be written; the old, higher ceiling stays (a later start jumps).
        """
        with self._lock:
            self._write(last_sequence)

    def _write(self, ceiling: int) -> None:
        write_file_durably(self.path, json.dumps({"reserved": ceiling}).encode())
        self.ceiling = ceiling
        self.writes += 1
