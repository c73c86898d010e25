"""Journal records to pyarrow RecordBatches of the source's schema, one journal file at a time.

Needs pyarrow, not pyspark: executors call :func:`file_batches` for their partition. Records are read with
:class:`~broker.txlog.reader.JournalReader` (record format, CRC checks, plain, archived and ``.zst`` files),
pinned to the one file of the partition, looked up again by index when maintenance archived or compressed it
after planning. A damaged record (bad bytes with valid records after them) fails the read, naming the file,
the byte offset and the sequences around it, unless the slice skips damage: then the range is passed over,
logged and reported (:data:`SkippedRange`). A torn tail (bad bytes ending a file: a record being written, or
cut by a crash) ends the file's records either way, as it does for the broker's own replays.

The batches' Arrow types are exactly those Spark expects for the declared schema (``timestamp`` as
``timestamp[us, tz=UTC]``, ``seq`` as ``int64``, ``data`` as ``string`` or ``binary``): a batch of other
types would be refused or converted column by column.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from broker.errors import JournalError
from broker.spark.location import JournalLocation
from broker.spark.selection import Selection
from broker.txlog.bookmarks import ReplayStart
from broker.txlog.damage import DamageCounter, DamagedRange
from broker.txlog.errors import JournalDamageError
from broker.txlog.reader import JournalReader
from broker.txlog.records import Command, Record

log = logging.getLogger("broker.spark")

#: Records per Arrow batch.
BATCH_ROWS = 32_768

#: A damaged range a read skipped: ``(file index, offset, bytes, records lost, path, last good sequence,
#: first good sequence)``.
SkippedRange = tuple[int, int, int, int, str, int, int]

#: ``until_sequence`` of a read to the end that must stop at damage (the reader stops only with a bound).
_NO_END = (1 << 63) - 1

#: The columns, as a Spark DDL string (``data`` is ``string`` or ``binary``, see :func:`ddl`).
COLUMNS = (
    ("seq", "long", pa.int64()),
    ("bookmark", "string", pa.string()),
    ("timestamp", "timestamp", pa.timestamp("us", tz="UTC")),
    ("topic", "string", pa.string()),
    ("command", "string", pa.string()),
    ("sow_key", "string", pa.string()),
    ("correlation_id", "string", pa.string()),
    ("message_type", "string", pa.string()),
    ("data", "string", pa.string()),
    ("expiration", "timestamp", pa.timestamp("us", tz="UTC")),
)


def ddl(binary: bool = False) -> str:
    """The source's schema as Spark DDL."""
    return ", ".join(f"{name} {'binary' if binary and name == 'data' else kind}" for name, kind, _ in COLUMNS)


def arrow_schema(binary: bool = False) -> pa.Schema:
    """The Arrow schema of the batches (matches :func:`ddl`)."""
    return pa.schema([(name, pa.binary() if binary and name == "data" else t) for name, _, t in COLUMNS])


_COMMAND_NAMES: dict[Command, str] = {}


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def to_batch(records: list[Record], publisher: int, binary: bool = False) -> pa.RecordBatch:
    """One RecordBatch of records (``publisher`` is the ``P`` of their bookmarks)."""
    prefix = f"{publisher}|"
    seqs = [r.sequence for r in records]
    stamps = [r.timestamp_ns // 1000 for r in records]
    commands = [_COMMAND_NAMES.get(r.command) or _COMMAND_NAMES.setdefault(r.command, r.command.wire_name)
                for r in records]
    if binary:
        data: list[object] = [r.data for r in records]
    else:
        data = []
        for r in records:
            try:
                data.append(r.data.decode())
            except UnicodeDecodeError:
                data.append(_text(r.data))
    schema = arrow_schema(binary)
    arrays = [
        pa.array(seqs, pa.int64()),
        pa.array([f"{prefix}{s}|" for s in seqs], pa.string()),
        pa.array(stamps, pa.int64()).cast(schema.field("timestamp").type),
        pa.array([r.topic for r in records], pa.string()),
        pa.array(commands, pa.string()),
        pa.array([r.sow_key.decode("utf-8", "backslashreplace") for r in records], pa.string()),
        pa.array([r.correlation_id.decode("utf-8", "backslashreplace") for r in records], pa.string()),
        pa.array([r.message_type for r in records], pa.string()),
        pa.array(data, schema.field("data").type),
        pa.array([r.expiration_ns // 1000 or None for r in records], pa.int64()).cast(schema.field("expiration").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class FileSlice:
    """One partition: the records of journal file ``index`` that a selection keeps.

    Attributes:
        index: The journal file's index (it keeps it when archived or compressed).
        selection: What to keep.
        hint: ``(sequence, offset)``: a record boundary in the file at or before the first record wanted
            (the stream reader knows where the previous micro-batch ended), ``None`` to search.
        bounded: Never read past ``selection.until_sequence`` (a micro-batch: the records after it may be
            half-written).
        skip_damaged: Pass over damaged records (logged, reported) instead of failing the read.
    """

    index: int
    selection: Selection
    hint: tuple[int, int] | None = None
    bounded: bool = False
    skip_damaged: bool = False


class _Collecting(DamageCounter):
    """A reader's damage counter that keeps the ranges it counts, as :data:`SkippedRange` tuples."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges: list[SkippedRange] = []

    def add(self, damage: DamagedRange, file_index: int) -> bool:
        new = super().add(damage, file_index)
        if new:
            self.ranges.append((file_index, damage.offset, damage.size, damage.records, str(damage.path),
                                damage.last_good_sequence, damage.first_good_sequence or 0))
        return new


def _damage_error(exc: JournalDamageError) -> JournalError:
    """``exc`` with what a Spark reader can do about it."""
    located = JournalDamageError(exc.path, exc.offset, exc.end, exc.detail, exc.last_good_sequence,
                                 exc.first_good_sequence, hint=False)
    return JournalError(
        f"{located}. Run `broker journal verify {exc.path}` to list the damage and `broker journal repair "
        f"{exc.path}` to move it aside, or read past it with .option('damaged', 'skip') "
        "(`broker spark ... --skip-damaged`), which leaves the damaged records out and reports them"
    )


def file_records(location: JournalLocation, part: FileSlice,
                 skipped: Callable[[list[SkippedRange]], None] | None = None) -> Iterator[Record]:
    """The records of one partition, in sequence order.

    Args:
        location: Where the journal is.
        part: The partition.
        skipped: Called with the damaged ranges passed over (``part.skip_damaged``), once the file is read.

    Raises:
        JournalError: The file was removed, or holds a damaged record (unless ``part.skip_damaged``): the
            message names the file, the byte offset and the sequences around it.
    """
    sel = part.selection
    keep = sel.record_test()
    attempts = 0
    # Without a bound the reader passes over damage; with one it stops there (the broker's "stop" policy).
    until = None if part.skip_damaged else (sel.until_sequence if part.bounded else _NO_END)
    while True:
        jf = location.file(part.index)
        reader = JournalReader.from_files([jf])
        counter = reader.damage = _Collecting()
        by_sequence = sel.from_ns is None or sel.after_sequence > 0
        start = ReplayStart.after(sel.after_sequence) if by_sequence else ReplayStart.since(sel.from_ns or 0)
        if part.hint is not None and by_sequence and part.hint[1] > 0:
            first = reader.first_record_of(jf)
            if first is not None:  # seed the reader's index so that it seeks straight to the hint
                reader.index.note(jf.index, first[0], first[1], 0)
                reader.index.note(jf.index, min(part.hint[0], sel.after_sequence + 1), first[1], part.hint[1])
        produced = 0
        try:
            for rec in reader.records(start, until_sequence=until):
                if sel.past_end(rec):
                    break
                if keep(rec):
                    produced += 1
                    yield rec
        except JournalDamageError as exc:
            raise _damage_error(exc) from None
        except JournalError:
            # Moved between the look-up and the open (compressed, archived): look it up again, unless
            # records were already produced (then the error is real).
            attempts += 1
            if produced or attempts >= 5:
                raise
            continue
        finally:
            for problem in reader.problems:
                log.warning("%s", problem)
        if skipped is not None and counter.ranges:
            skipped(counter.ranges)
        return


def file_batches(location: JournalLocation, part: FileSlice, binary: bool = False,
                 skipped: Callable[[list[SkippedRange]], None] | None = None) -> Iterator[pa.RecordBatch]:
    """:func:`file_records` as RecordBatches of at most :data:`BATCH_ROWS` rows."""
    publisher = location.publisher
    chunk: list[Record] = []
    for rec in file_records(location, part, skipped):
        chunk.append(rec)
        if len(chunk) >= BATCH_ROWS:
            yield to_batch(chunk, publisher, binary)
            chunk = []
    if chunk:
        yield to_batch(chunk, publisher, binary)
