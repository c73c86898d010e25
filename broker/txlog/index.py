"""In-memory sparse indexes of journal files, shared by the writer and the readers of one instance.

For each file (by index, which survives archiving and compression) it remembers the first record's
``(sequence, timestamp_ns)`` and a point ``(sequence, timestamp_ns, offset)`` about every
:data:`STRIDE` bytes, offsets being positions in the uncompressed file. A replay from a bookmark or a time
then reads at most one stride of headers before its first record. The writer fills the index of the files
it writes; a reader fills it for older files the first time it reads them from the start. Nothing is
stored on disk: after a restart the first replay of an old file scans it once.

Thread-safe: one lock per index, held only for list operations.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

#: Bytes between two index points.
STRIDE = 128 * 1024


@dataclass
class _FileIndex:
    points: list[tuple[int, int, int]] = field(default_factory=list)
    #: Offset up to which every stride has its point; points are only added past it, in order.
    covered: int = -1


class JournalIndex:
    """Sparse per-file indexes; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[int, _FileIndex] = {}

    def first(self, file_index: int) -> tuple[int, int] | None:
        """``(sequence, timestamp_ns)`` of the file's first record, if known."""
        with self._lock:
            fi = self._files.get(file_index)
            if fi is None or not fi.points or fi.points[0][2] != 0:
                return None
            return fi.points[0][0], fi.points[0][1]

    def wants(self, file_index: int, offset: int) -> bool:
        """Whether a record at ``offset`` should be reported with :meth:`note` (cheap pre-check)."""
        fi = self._files.get(file_index)
        if fi is None:
            return offset == 0
        if offset <= fi.covered:
            return False
        last = fi.points[-1][2] if fi.points else -STRIDE
        return offset - last >= STRIDE or offset == 0

    def note(self, file_index: int, sequence: int, timestamp_ns: int, offset: int) -> None:
        """Record a point for the record at ``offset``. Points must be noted in file order from offset 0.

        A point that does not continue the covered range (a reader that started mid-file) is ignored.
        """
        with self._lock:
            fi = self._files.setdefault(file_index, _FileIndex())
            if offset <= fi.covered:
                return
            if fi.covered < 0 and offset != 0:
                return
            last = fi.points[-1][2] if fi.points else -STRIDE
            if offset - last >= STRIDE or offset == 0:
                fi.points.append((sequence, timestamp_ns, offset))
            fi.covered = offset

    def seek(self, file_index: int, after_sequence: int | None, from_timestamp_ns: int | None) -> int:
        """The greatest known offset in the file at or before the first record a replay wants.

        Args:
            file_index: The file.
            after_sequence: The replay wants records with a greater sequence (``None``: not by sequence).
            from_timestamp_ns: The replay wants records logged at or after this time (``None``: not by time).

        Returns:
            An offset where a record starts (0 when nothing better is known).
        """
        with self._lock:
            fi = self._files.get(file_index)
            if fi is None or not fi.points:
                return 0
            points = fi.points
            best = None
            if after_sequence is not None:
                # The last point whose record is at most after_sequence + 1 comes no later than the target.
                i = bisect.bisect_right(points, after_sequence + 1, key=lambda p: p[0]) - 1
                best = points[i][2] if i >= 0 else 0
            if from_timestamp_ns is not None:
                # Strictly earlier: records with equal timestamps may precede a point.
                i = bisect.bisect_left(points, from_timestamp_ns, key=lambda p: p[1]) - 1
                offset = points[i][2] if i >= 0 else 0
                best = offset if best is None else min(best, offset)
            return best or 0

    def forget(self, file_index: int) -> None:
        """Drop a file's index (after its file was removed or truncated)."""
        with self._lock:
            self._files.pop(file_index, None)
