"""The ``broker spark`` jobs over a journal: ``sow-at``, ``export`` and ``stats``.

Each takes a SparkSession with the ``amps-journal`` source registered (:func:`broker.spark.session.build_session`)
and the ``path`` of a read (a broker config file or journal directories). Times are UTC.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from broker.txlog.bookmarks import parse_timestamp

log = logging.getLogger("broker.spark")

#: Columns of a ``sow-at`` result before the message's own fields.
SOW_COLUMNS = ("topic", "sow_key", "seq", "bookmark", "timestamp", "expiration", "correlation_id", "data")


def read_journal(spark: Any, path: str, **options: str | None) -> Any:
    """``spark.read.format("amps-journal")`` with the options that are set."""
    reader = spark.read.format("amps-journal")
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    return reader.load(path)


def sow_at(spark: Any, path: str, topic: str, at: str) -> Any:
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

    Raises:
        CommandError: ``at`` is not a timestamp.
    """
    return _flattened(spark, _sow_state(spark, path, topic, at))


def write_sow_at(spark: Any, path: str, topic: str, at: str, out: str) -> int:
    """:func:`sow_at` written as Parquet to ``out`` (replaced); returns the number of records.

    The state is computed once and kept in memory meanwhile: the message types, the JSON schema and the
    output all read it.
    """
    state = _sow_state(spark, path, topic, at).persist()
    try:
        _flattened(spark, state).write.mode("overwrite").parquet(out)
        return state.count()
    finally:
        state.unpersist()


def _sow_state(spark: Any, path: str, topic: str, at: str) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    at_us = parse_timestamp(at) // 1000
    df = read_journal(spark, path, topic=topic, to=at).where(F.col("sow_key") != "")
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


def export(spark: Any, path: str, topic: str | None, start: str | None, end: str | None) -> Any:
    """Journal records (every column of the source) with a ``date`` column (UTC) to partition by."""
    from pyspark.sql import functions as F

    df = read_journal(spark, path, topic=topic, **{"from": start, "to": end})
    return df.withColumn("date", F.to_date("timestamp"))


@dataclass(frozen=True)
class HourStats:
    """One row of ``broker spark stats``."""

    topic: str
    #: ``YYYY-mm-dd HH:00`` (UTC).
    hour: str
    messages: int
    bytes: int
    keys: int


def stats(spark: Any, path: str, topic: str | None = None) -> list[HourStats]:
    """Per topic and hour (UTC): records, bytes of message data, distinct SOW keys; sorted by hour, topic."""
    from pyspark.sql import functions as F

    df = read_journal(spark, path, topic=topic, data="binary")
    # Formatted by Spark in the session's time zone (UTC): collected timestamps would be in the local one.
    rows = (df.groupBy("topic", F.date_format("timestamp", "yyyy-MM-dd HH:00").alias("hour"))
            .agg(F.count(F.lit(1)).alias("messages"), F.sum(F.octet_length("data")).alias("bytes"),
                 F.count_distinct(F.when(F.col("sow_key") != "", F.col("sow_key"))).alias("keys"))
            .orderBy("hour", "topic").collect())
    return [HourStats(r.topic, r.hour, int(r.messages), int(r.bytes or 0), int(r.keys)) for r in rows]


def plot_stats(rows: list[HourStats], out: str) -> None:
    """Draw messages and bytes per hour, one line per topic, into a PNG (matplotlib, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import datetime as dt

    import matplotlib.pyplot as plt

    def hour(r: HourStats) -> dt.datetime:
        return dt.datetime.strptime(r.hour, "%Y-%m-%d %H:%M")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for topic in sorted({r.topic for r in rows}):
        mine = [r for r in rows if r.topic == topic]
        top.plot([hour(r) for r in mine], [r.messages for r in mine], marker="o", label=topic)
        bottom.plot([hour(r) for r in mine], [r.bytes for r in mine], marker="o", label=topic)
    top.set_ylabel("messages / hour")
    bottom.set_ylabel("bytes / hour")
    bottom.set_xlabel("hour (UTC)")
    top.legend(loc="upper left", fontsize="small")
    top.set_title("journal records per topic and hour")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
