"""The ``amps-journal`` PySpark data source (Spark 4 Python data source API): batch and streaming reads.

::

    broker.spark.register(spark)
    df = spark.read.format("amps-journal").option("topic", "orders").load("configs/quickstart.xml")

Options: ``topic`` (a name, or a regular expression searched in topic names), ``from`` and ``to`` (a
bookmark ``P|S|`` or a timestamp ``YYYYmmddTHHMMSS[.fraction][Z]``), ``instance`` (which instance, when
the directories hold several), ``data`` (``string`` or ``binary``; default ``binary`` when the config logs
every selected topic as ``binary``), ``workdir`` (the broker's working directory: a config's relative
paths are taken from it, as ``broker serve`` takes them; default: the current directory), ``damaged``
(``stop``, the default: a damaged record fails the read; ``skip``: damaged records are left out and
logged). Batch reads have one partition per journal file, prune files by their first sequence and time,
and take pushed-down filters on ``topic`` (``=``, ``IN``), ``timestamp`` and ``seq`` (comparisons), which
needs ``spark.sql.python.filterPushdown.enabled=true`` (:func:`broker.spark.register` sets it). A batch
read that finds no journal file fails, naming the directories it looked in.

Streaming reads use journal sequence numbers as offsets (``{"seq": N}``: every record up to N was
delivered), follow the files the broker appends to, rotates, archives and compresses, and re-read a
micro-batch's records identically after a restart from a checkpoint (what a file sink needs for
exactly-once output).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from broker.errors import BrokerError, JournalError
from broker.spark import SOURCE_NAME
from broker.spark.batches import FileSlice, SkippedRange, ddl, file_batches
from broker.spark.location import JournalLocation, locate
from broker.spark.selection import PUSHABLE, Selection
from broker.spark.tail import JournalTail
from broker.txlog.bookmarks import ReplayStart
from broker.txlog.reader import JournalReader

log = logging.getLogger("broker.spark")


_KINDS = {EqualTo: "eq", GreaterThan: "gt", GreaterThanOrEqual: "ge", LessThan: "lt", LessThanOrEqual: "le",
          In: "in"}
#: The filters of :data:`_KINDS`: each has a ``value``.
_VALUED = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)


@dataclass
class _Partition(InputPartition):
    """One journal file's slice (picklable; shipped to an executor)."""

    location: JournalLocation
    slice: FileSlice
    binary: bool
    #: The accumulator damaged ranges skipped are added to (:func:`counting_source`), if any.
    skipped: Any = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        report = None if self.skipped is None else (lambda ranges: self.skipped.add(frozenset(ranges)))
        return file_batches(self.location, self.slice, self.binary, report)


def _binary(options: dict[str, str], location: JournalLocation) -> bool:
    mode = options.get("data")
    if mode is None:
        return location.data_is_binary(options.get("topic"))
    if mode not in ("string", "binary"):
        raise BrokerError(f"option data={mode!r}: use string or binary")
    return mode == "binary"


def _skip_damaged(options: dict[str, str]) -> bool:
    mode = options.get("damaged", "stop").strip().lower()
    if mode not in ("stop", "skip"):
        raise BrokerError(f"option damaged={mode!r}: use stop (the default: a damaged record fails the read) "
                          "or skip (damaged records are left out)")
    return mode == "skip"


class SkippedRanges(AccumulatorParam):
    """An accumulator of :data:`~broker.spark.batches.SkippedRange` sets (a retried task adds nothing new)."""

    def zero(self, value: frozenset[SkippedRange]) -> frozenset[SkippedRange]:
        return frozenset()

    def addInPlace(self, value1: frozenset[SkippedRange], value2: frozenset[SkippedRange]
                   ) -> frozenset[SkippedRange]:
        return value1 | value2


_counted = itertools.count(1)


def counting_source(spark: Any) -> tuple[str, Any]:
    """Register a copy of the source whose reads report the damaged ranges they skip (option
    ``damaged=skip``) to the driver.

    Returns:
        ``(format name, accumulator)``: read with ``spark.read.format(name)``; the accumulator's ``value``
        is then the frozenset of :data:`~broker.spark.batches.SkippedRange` the reads passed over.
    """
    accumulator = spark.sparkContext.accumulator(frozenset(), SkippedRanges())
    name = f"{SOURCE_NAME}-counted-{next(_counted)}"
    # A class made here is pickled by value, the accumulator with it, to the planner and the executors.
    source = type(f"CountedJournalDataSource{name.rsplit('-', 1)[1]}", (JournalDataSource,),
                  {"skipped": accumulator, "name": classmethod(lambda cls: name)})
    spark.dataSource.register(source)
    return name, accumulator


class JournalDataSource(DataSource):
    """``spark.read.format("amps-journal")``: see the module docstring."""

    #: Where reads add the damaged ranges they skip (set on the copies :func:`counting_source` makes).
    skipped: ClassVar[Any] = None

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        path = options.get("path")
        if not path:
            raise BrokerError("amps-journal needs a path: .load(JOURNAL_DIRECTORY or CONFIG_FILE)")
        self.location = locate(path, options.get("instance"), options.get("workdir"))
        self.binary = _binary(dict(options), self.location)
        self.skip_damaged = _skip_damaged(dict(options))
        self.selection = Selection.from_options(options.get("topic"), options.get("from"), options.get("to"))

    def schema(self) -> str:
        return ddl(self.binary)

    def reader(self, schema: StructType) -> DataSourceReader:
        self.location.require_files()  # a batch read of nothing is a wrong path, not an empty journal
        return JournalBatchReader(self.location, self.selection, self.binary, self.skip_damaged, self.skipped)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if not any(Path(d).is_dir() for d in self.location.directories):  # files may come later, not folders
            raise JournalError(f"no journal directory: {', '.join(self.location.directories)} do not exist"
                               + (f" (relative paths of {self.location.config} are taken from the working "
                                  f"directory {self.location.workdir}, as `broker serve` takes them; name "
                                  "the broker's with .option('workdir', DIR))" if self.location.config else ""))
        return JournalStreamReader(self.location, self.selection, self.binary, self.skip_damaged, self.skipped)


def _first_records(reader: JournalReader, files: list) -> list[tuple[int, int] | None]:
    return [reader.first_record_of(jf) for jf in files]


class JournalBatchReader(DataSourceReader):
    """A batch read: one partition per journal file that may hold selected records."""

    def __init__(self, location: JournalLocation, selection: Selection, binary: bool, skip_damaged: bool = False,
                 skipped: Any = None) -> None:
        self.location = location
        self.options_selection = selection
        self.selection = selection
        self.binary = binary
        self.skip_damaged = skip_damaged
        self.skipped = skipped

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        # Spark may plan several queries with one reader: each planning starts from the options alone.
        self.selection = self.options_selection
        for f in filters:
            kind = _KINDS.get(type(f))
            attribute: tuple[str, ...] = getattr(f, "attribute", ())  # Not(...) has a child filter instead
            column = attribute[0] if len(attribute) == 1 else None
            if (kind is None or column not in PUSHABLE or kind not in PUSHABLE[column]
                    or not isinstance(f, _VALUED)):
                yield f  # Spark evaluates it
                continue
            value = f.value if kind != "in" else tuple(f.value)
            self.selection = self.selection.narrowed(kind, column, value)

    def partitions(self) -> Sequence[InputPartition]:
        files = self.location.files()
        reader = JournalReader.from_files(files) if files else None
        wanted = self.selection.wanted_files(files, _first_records(reader, files)) if reader else []
        log.info("amps-journal: %d of %d journal files to read", len(wanted), len(files))
        return [_Partition(self.location, FileSlice(jf.index, self.selection, skip_damaged=self.skip_damaged),
                           self.binary, self.skipped) for jf in wanted]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, _Partition):  # Spark reads one empty partition when there are none
            yield from partition.batches()


class JournalStreamReader(DataSourceStreamReader):
    """A streaming read: offsets are journal sequences (see the module docstring)."""

    def __init__(self, location: JournalLocation, selection: Selection, binary: bool, skip_damaged: bool = False,
                 skipped: Any = None) -> None:
        self.location = location
        self.selection = selection
        self.binary = binary
        self.skip_damaged = skip_damaged
        self.skipped = skipped
        self.tail = JournalTail(location)
        self._index_reader: JournalReader | None = None

    def initialOffset(self) -> dict[str, Any]:
        sel = self.selection
        if sel.from_ns is None or sel.after_sequence:
            return {"seq": sel.after_sequence}
        # From a time: just before the first record logged at or after it (or the end, when none is yet).
        files = self.location.files()
        if files:
            for rec in JournalReader.from_files(files).records(ReplayStart.since(sel.from_ns)):
                return {"seq": rec.sequence - 1}
        return {"seq": self.tail.latest()[0]}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        seq, _ = self.tail.latest()
        if self.selection.until_sequence is not None:
            seq = min(seq, self.selection.until_sequence)
        if start is not None:
            seq = max(seq, int(start["seq"]))
        return {"seq": seq}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, until = int(start["seq"]), int(end["seq"])
        if until <= after:
            return []
        files = self.location.files()
        if not files:
            return []
        reader = self._index_reader = self._index_reader or JournalReader.from_files(files)
        sel = replace(self.selection, after_sequence=max(after, self.selection.after_sequence),
                      until_sequence=until)
        hint = self.tail.position_after(after)
        parts = []
        for jf in sel.wanted_files(files, _first_records(reader, files)):
            at = hint[1] if hint is not None and hint[0] == jf.index else None
            parts.append(_Partition(self.location, FileSlice(jf.index, sel, (after + 1, at) if at else None,
                                                             bounded=True, skip_damaged=self.skip_damaged),
                                    self.binary, self.skipped))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, _Partition):  # Spark reads one empty partition when there are none
            yield from partition.batches()

    def commit(self, end: dict[str, Any]) -> None:
        self.tail.forget_before(int(end["seq"]))

