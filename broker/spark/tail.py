"""The end of a live journal, for the stream reader's ``latestOffset``: the last complete record's sequence.

The driver keeps where it stopped (file index, byte offset just past the last complete record, its
sequence) and reads on from there at each trigger, so each look costs what was appended since, not the
file. A record counts once its whole length is there and its CRC matches: the writer's record being
written is not complete yet and is left for the next trigger. Offsets are in the uncompressed content, so
they stay valid when the file is archived or compressed meanwhile.

The record after a micro-batch's end starts where the tail stopped when that end was taken: the stream
reader hands that position to the partition of the next micro-batch, which then seeks straight to it
instead of reading the file from its start.
"""

from __future__ import annotations

from broker.spark.location import JournalLocation
from broker.txlog.file_records import iter_raw, open_journal_file
from broker.txlog.records import CorruptRecord, decode_exact


class JournalTail:
    """See the module docstring."""

    def __init__(self, location: JournalLocation) -> None:
        self.location = location
        self._index = -1
        self._offset = 0
        self._sequence = 0
        #: sequence -> (file index, offset just past that record), for the ends handed out.
        self._ends: dict[int, tuple[int, int]] = {}

    def latest(self) -> tuple[int, tuple[int, int] | None]:
        """``(sequence of the last complete record, (file index, offset past it))``; ``(0, None)``: empty."""
        files = self.location.files()
        if self._index < 0:  # first look: the newest file holding a complete record
            for jf in reversed(files):
                found = self._scan(jf.path, 0)
                if found is not None:
                    self._index, self._offset, self._sequence = jf.index, found[1], found[0]
                    break
        else:  # read on from where the last look stopped, into any newer files
            for jf in files:
                if jf.index < self._index:
                    continue
                found = self._scan(jf.path, self._offset if jf.index == self._index else 0)
                if found is not None:
                    self._index, self._offset, self._sequence = jf.index, found[1], found[0]
        if self._index < 0:
            return 0, None
        self._ends[self._sequence] = (self._index, self._offset)
        return self._sequence, (self._index, self._offset)

    def _scan(self, path: object, offset: int) -> tuple[int, int] | None:
        """The last complete record from ``offset`` on: ``(sequence, offset past it)``; ``None``: none."""
        last = None
        try:
            f = open_journal_file(path)  # type: ignore[arg-type]
        except FileNotFoundError:  # moved meanwhile: the caller looks again at the next trigger
            return None
        with f:
            try:
                for at, raw in iter_raw(f, offset):
                    rec = decode_exact(raw, at)
                    last = (rec.sequence, at + len(raw))
            except CorruptRecord:
                pass  # the record being written (or damage, which the read of that file reports)
        return last

    def position_after(self, sequence: int) -> tuple[int, int] | None:
        """``(file index, offset)`` where the record after ``sequence`` starts, if this tail ended there."""
        return self._ends.get(sequence)

    def forget_before(self, sequence: int) -> None:
        """Drop the positions of ends older than ``sequence`` (committed micro-batches)."""
        for seq in [s for s in self._ends if s < sequence]:
            del self._ends[seq]
