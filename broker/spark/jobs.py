"""The ``broker spark`` jobs over a journal: ``sow-at``, ``export`` and ``stats``.

Each takes a SparkSession with the ``amps-journal`` source registered (:func:`broker.spark.session.build_session`)
and the ``path`` of a read (a broker config file or journal directories); ``workdir`` is the broker's working
directory, from which a config's relative paths are resolved (as ``broker serve`` does; default: the current
one), and ``skipped`` (a :class:`SkippedDamage`) makes the reads pass over damaged records and count them
(by default a damaged record fails the job). Times are UTC.

Output files: ``sow-at`` writes one Parquet file per :data:`FILE_ROWS` rows; ``export`` reads about
:data:`TASK_BYTES` of journal per task and writes one file per date per task, split at :data:`FILE_ROWS`
rows; neither writes a file per shuffle partition.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from broker.spark import SOURCE_NAME
from broker.txlog.bookmarks import parse_timestamp

log = logging.getLogger("broker.spark")

#: Columns of a ``sow-at`` result before the message's own fields.
SOW_COLUMNS = ("topic", "sow_key", "seq", "bookmark", "timestamp", "expiration", "correlation_id", "data")

#: Rows per output Parquet file, at most (``--rows-per-file``).
FILE_ROWS = 1_000_000

#: Journal bytes an ``export`` task reads, about: small journal files are read together, into one file per date.
TASK_BYTES = 256 << 20


@dataclass(frozen=True)
class Written:
    """What a job wrote: ``rows`` in ``files`` Parquet files (``partitions`` date directories) in ``seconds``."""

    rows: int
    files: int
    seconds: float
    partitions: int = 0


class SkippedDamage:
    """Damaged records the reads of a job passed over (``--skip-damaged``), as the executors reported them.

    Registers a counting copy of the source with ``spark`` (:func:`broker.spark.source.counting_source`).
    """

    def __init__(self, spark: Any) -> None:
        from broker.spark.source import counting_source

        self.source, self._accumulator = counting_source(spark)

    @property
    def ranges(self) -> list[tuple[int, int, int, int, str, int, int]]:
        """The damaged ranges skipped (:data:`broker.spark.batches.SkippedRange`), in log order."""
        return sorted(self._accumulator.value)

    @property
    def records(self) -> int:
        """Records lost in those ranges (from the sequences around each; at least one per range)."""
        return sum(r[3] for r in self.ranges)

    def summary(self) -> str:
        """One line: how many damaged records were skipped, and where."""
        ranges = self.ranges
        if not ranges:
            return "damaged records skipped: 0"
        where = "; ".join(f"{path} at offset {offset} ({size} bytes, sequences after {last} and before {first})"
                          for _i, offset, size, _n, path, last, first in ranges[:5])
        more = f"; and {len(ranges) - 5} more range(s)" if len(ranges) > 5 else ""
        return f"damaged records skipped: {self.records} in {len(ranges)} range(s): {where}{more}"


def read_journal(spark: Any, path: str, *, workdir: str | None = None, skipped: SkippedDamage | None = None,
                 **options: str | None) -> Any:
    """``spark.read.format("amps-journal")`` with the options that are set (``damaged=skip`` with ``skipped``)."""
    reader = spark.read.format(skipped.source if skipped is not None else SOURCE_NAME)
    options = {**options, "workdir": workdir, "damaged": "skip" if skipped is not None else None}
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    return reader.load(path)


def _written(spark: Any, out: str, started: float, rows: int | None = None) -> Written:
    """Count what a write left in ``out`` (rows from the Parquet footers when not known)."""
    from pyspark.errors import AnalysisException

    try:
        written = spark.read.parquet(out)
    except AnalysisException:  # nothing written (no rows, partitioned output): no file to infer a schema from
        return Written(rows or 0, 0, time.monotonic() - started)
    files = written.inputFiles()
    partitions = len({f.rsplit("/", 2)[-2] for f in files if "/date=" in f})
    return Written(written.count() if rows is None else rows, len(files), time.monotonic() - started, partitions)


def sow_at(spark: Any, path: str, topic: str, at: str, *, workdir: str | None = None,
           skipped: SkippedDamage | None = None) -> Any:
    """The SOW of ``topic`` as of ``at``: for every key, its last record logged at or before ``at``.

    A key whose last record is a ``sow_delete`` or an ``expire``, or whose message had expired by ``at``
    (its journaled expiration time is at or before ``at``), is absent, as it was from the broker's SOW
    queries. A delta publish's record holds the merged message, so it is the key's state. For json topics
    the message's top-level fields become columns after :data:`SOW_COLUMNS` (a field named like one of
    them gets a ``data_`` prefix).

    Args:
        spark: The session.
        path: A config file or journal directories.
        topic: A topic name (or regular expression).
        at: A timestamp ``YYYYmmddTHHMMSS[.fraction][Z]`` (UTC).
        workdir: The broker's working directory (a config's relative paths are taken from it).
        skipped: Pass over damaged records and count them there (default: a damaged record fails).

    Raises:
        CommandError: ``at`` is not a timestamp.
    """
    return _flattened(spark, _sow_state(spark, path, topic, at, workdir, skipped))


def write_sow_at(spark: Any, path: str, topic: str, at: str, out: str, *, workdir: str | None = None,
                 skipped: SkippedDamage | None = None, rows_per_file: int = FILE_ROWS) -> Written:
    """:func:`sow_at` written as Parquet to ``out`` (replaced), in files of at most ``rows_per_file`` rows.

    The state is computed once and kept in memory meanwhile: the count, the message types, the JSON schema
    and the output all read it. It is written by one task when it fits in a file, else by tasks of key
    ranges (in key order) of about 90% of ``rows_per_file`` each: not one file per shuffle partition.
    """
    started = time.monotonic()
    state = _sow_state(spark, path, topic, at, workdir, skipped).persist()
    try:
        rows = state.count()
        flat = _flattened(spark, state)
        if rows <= rows_per_file:
            flat = flat.coalesce(1)  # one task, one file, no shuffle
        else:  # key ranges of about 90% of a file each (the ranges come from a sample), in key order
            flat = flat.repartitionByRange(math.ceil(rows / (rows_per_file * 0.9)), "topic", "sow_key")
        flat.write.mode("overwrite").option("maxRecordsPerFile", rows_per_file).parquet(out)
        return _written(spark, out, started, rows)
    finally:
        state.unpersist()


def _sow_state(spark: Any, path: str, topic: str, at: str, workdir: str | None = None,
               skipped: SkippedDamage | None = None) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    at_us = parse_timestamp(at) // 1000
    df = read_journal(spark, path, workdir=workdir, skipped=skipped, topic=topic, to=at).where(F.col("sow_key") != "")
    last = Window.partitionBy("topic", "sow_key").orderBy(F.col("seq").desc())
    return (df.withColumn("_rank", F.row_number().over(last)).where(F.col("_rank") == 1)
            .where(F.col("command").isin("publish", "delta_publish"))
            .where(F.col("expiration").isNull() | (F.col("expiration") > F.timestamp_micros(F.lit(at_us))))
            .select(*SOW_COLUMNS, "message_type"))


def _flattened(spark: Any, state: Any) -> Any:
    types = {r.message_type for r in state.select("message_type").distinct().collect()}
    result = state.drop("message_type")
    return _flatten_json(spark, result) if types == {"json"} else result


def _flatten_json(spark: Any, df: Any) -> Any:
    """``df`` with the top-level fields of its JSON ``data`` as columns (schema inferred from the data)."""
    from pyspark.sql import functions as F

    schema = spark.read.json(df.select("data").rdd.map(lambda r: r.data)).schema
    fields = [f.name for f in schema.fields if f.name != "_corrupt_record"]
    if not fields:
        return df
    parsed = df.withColumn("_message", F.from_json("data", schema))
    return parsed.select(*SOW_COLUMNS, *(F.col("_message").getField(name).alias(
        f"data_{name}" if name in SOW_COLUMNS else name) for name in fields))


def export(spark: Any, path: str, topic: str | None, start: str | None, end: str | None, *,
           workdir: str | None = None, skipped: SkippedDamage | None = None) -> Any:
    """Journal records (every column of the source) with a ``date`` column (UTC) to partition by."""
    from pyspark.sql import functions as F

    df = read_journal(spark, path, workdir=workdir, skipped=skipped, topic=topic, **{"from": start, "to": end})
    return df.withColumn("date", F.to_date("timestamp"))


def write_export(spark: Any, path: str, out: str, topic: str | None = None, start: str | None = None,
                 end: str | None = None, *, workdir: str | None = None, skipped: SkippedDamage | None = None,
                 rows_per_file: int = FILE_ROWS) -> Written:
    """:func:`export` written as Parquet partitioned by ``date`` to ``out`` (replaced).

    Journal files are read together, about :data:`TASK_BYTES` per task (no shuffle: records stay in log
    order), each task writing one file per date it holds, split at ``rows_per_file`` rows.
    """
    from broker.spark.location import locate

    started = time.monotonic()
    journal_bytes = sum(f.size for f in locate(path, workdir=workdir).files())
    tasks = max(1, math.ceil(journal_bytes / TASK_BYTES))
    df = export(spark, path, topic, start, end, workdir=workdir, skipped=skipped)
    (df.coalesce(tasks).write.mode("overwrite").partitionBy("date").option("maxRecordsPerFile", rows_per_file)
     .parquet(out))
    return _written(spark, out, started)


@dataclass(frozen=True)
class HourStats:
    """One row of ``broker spark stats``."""

    topic: str
    #: ``YYYY-mm-dd HH:00`` (UTC).
    hour: str
    messages: int
    bytes: int
    keys: int


def stats(spark: Any, path: str, topic: str | None = None, *, workdir: str | None = None,
          skipped: SkippedDamage | None = None) -> list[HourStats]:
    """Per topic and hour (UTC): records, bytes of message data, distinct SOW keys; sorted by hour, topic."""
    from pyspark.sql import functions as F

    df = read_journal(spark, path, workdir=workdir, skipped=skipped, topic=topic, data="binary")
    # Formatted by Spark in the session's time zone (UTC): collected timestamps would be in the local one.
    rows = (df.groupBy("topic", F.date_format("timestamp", "yyyy-MM-dd HH:00").alias("hour"))
            .agg(F.count(F.lit(1)).alias("messages"), F.sum(F.octet_length("data")).alias("bytes"),
                 F.count_distinct(F.when(F.col("sow_key") != "", F.col("sow_key"))).alias("keys"))
            .orderBy("hour", "topic").collect())
    return [HourStats(r.topic, r.hour, int(r.messages), int(r.bytes or 0), int(r.keys)) for r in rows]


def plot_stats(rows: list[HourStats], out: str) -> tuple[Any, Any]:
    """Draw messages and bytes per hour, one line per topic, into a PNG (matplotlib, no display).

    The x axis spans the hours of ``rows`` (half an hour either side, so that one hour is a point in the
    middle, not a point in a four-year axis), the y axes start at 0.

    Returns:
        The x axis limits drawn, as UTC datetimes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import datetime as dt

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    def hour(r: HourStats) -> dt.datetime:
        return dt.datetime.strptime(r.hour, "%Y-%m-%d %H:%M").replace(tzinfo=dt.UTC)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for topic in sorted({r.topic for r in rows}):
        mine = [r for r in rows if r.topic == topic]
        top.plot([hour(r) for r in mine], [r.messages for r in mine], marker="o", label=topic)
        bottom.plot([hour(r) for r in mine], [r.bytes for r in mine], marker="o", label=topic)
    hours = [hour(r) for r in rows] or [dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)]
    limits = (min(hours) - dt.timedelta(minutes=30), max(hours) + dt.timedelta(minutes=30))
    bottom.set_xlim(*limits)
    locator = mdates.AutoDateLocator(tz=dt.UTC, minticks=1, maxticks=12)
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.UTC))
    for axis, values in ((top, [r.messages for r in rows]), (bottom, [r.bytes for r in rows])):
        axis.set_ylim(0, max(values, default=0) * 1.1 or 1)
        axis.grid(True, alpha=0.3)
    top.set_ylabel("messages / hour")
    bottom.set_ylabel("bytes / hour")
    bottom.set_xlabel("hour (UTC)")
    if rows:
        top.legend(loc="upper left", fontsize="small")
    top.set_title("journal records per topic and hour")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    drawn = tuple(mdates.num2date(x, tz=dt.UTC) for x in bottom.get_xlim())
    plt.close(fig)
    return drawn[0], drawn[1]
