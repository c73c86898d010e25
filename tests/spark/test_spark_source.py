"""The ``amps-journal`` batch source against the broker's own journal reader (issue 15).

One journal of three files, written by the real JournalWriter: the first archived, the second archived and
compressed, the third plain in the JournalDirectory. Every read is compared with what ``broker.txlog``
yields for the same selection (``broker journal dump``'s ``iter_records``).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from broker.spark.batches import FileSlice, arrow_schema, file_batches
from broker.spark.location import locate
from broker.spark.selection import Selection
from broker.spark.source import JournalBatchReader
from broker.txlog import archive_file, compress_file, format_bookmark, instance_hash, list_files
from broker.txlog.cli import iter_records

TOPICS = ("orders", "trades", "orders.eu")
INSTANCE = "spark-test"


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory, open_writer) -> tuple[Path, Path]:  # noqa: ANN001
    """~3,600 records over three files; a binary topic, delta publishes, deletes and expirations."""
    base = tmp_path_factory.mktemp("journal")
    jdir, adir = base / "journal", base / "archive"
    writer = open_writer(jdir, adir, INSTANCE)
    ts = 1_700_000_000_000_000_000  # fixed, increasing timestamps: bounds are exact
    for i in range(3600):
        topic = TOPICS[i % 3]
        body = json.dumps({"id": i % 40, "n": i, "pad": "p" * 700}).encode()
        command = "publish"
        if i % 50 == 7:
            command = "sow_delete"
        elif i % 50 == 9:
            command = "delta_publish"
        elif i % 97 == 5:
            command = "expire"
        writer.append(command, topic, body, sow_key=str(i % 40), correlation_id=f"c{i}" if i % 5 == 0 else "",
                      timestamp_ns=ts + i * 1_000_000_123, expiration_ns=ts + i * 2_000_000_000 if i % 3 == 1 else 0)
        if i % 200 == 199:
            writer.sync()
    writer.append("publish", "blobs", bytes(range(256)), message_type="binary", timestamp_ns=ts + 3600 * 1_000_000_123)
    writer.sync()
    writer.close()
    files = list_files(jdir, adir, INSTANCE)
    assert len(files) >= 3, files
    archive_file(files[0].path, adir)
    archived = archive_file(files[1].path, adir)
    compress_file(archived, journal_directory=jdir)
    states = [f.state.value for f in list_files(jdir, adir, INSTANCE)]
    assert states[:2] == ["archived", "compressed"], states
    return jdir, adir


def _expected(jdir: Path, adir: Path, **kwargs: object) -> list[tuple]:
    return [(r.sequence, format_bookmark(p, r.sequence), r.topic, r.command.wire_name, r.sow_key.decode(),
             r.correlation_id.decode(), r.message_type, r.data.decode("utf-8", "backslashreplace"),
             r.timestamp_ns // 1000, r.expiration_ns // 1000 or None)
            for p, r in iter_records([jdir, adir], **kwargs)]  # type: ignore[arg-type]


def _rows(df) -> list[tuple]:  # noqa: ANN001 - a Spark DataFrame
    def us(value: dt.datetime | None) -> int | None:
        return None if value is None else (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)

    out = []
    for r in df.orderBy("seq").collect():
        out.append((r.seq, r.bookmark, r.topic, r.command, r.sow_key, r.correlation_id, r.message_type, r.data,
                    us(r.timestamp.replace(tzinfo=dt.UTC)),
                    us(r.expiration.replace(tzinfo=dt.UTC)) if r.expiration else None))
    return out


def _read(spark, path: str, **options: str):  # noqa: ANN001, ANN202
    reader = spark.read.format("amps-journal")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(path)


def test_every_record_of_plain_archived_and_compressed_files_one_partition_per_file(spark, journal) -> None:
    jdir, adir = journal
    df = _read(spark, f"{jdir},{adir}")
    assert df.rdd.getNumPartitions() == len(list_files(jdir, adir, INSTANCE))
    expected = _expected(jdir, adir)
    assert len(expected) == 3601
    assert _rows(df) == expected
    counts = {r.command: r["count"] for r in df.groupBy("command").count().collect()}
    assert set(counts) == {"publish", "delta_publish", "sow_delete", "expire"}


def test_batches_have_exactly_the_declared_arrow_types(spark, journal) -> None:
    jdir, adir = journal
    location = locate(f"{jdir},{adir}")
    first = list_files(jdir, adir, INSTANCE)[1]  # the compressed one
    batches = list(file_batches(location, FileSlice(first.index, Selection())))
    assert batches and all(b.schema == arrow_schema() for b in batches)
    assert batches[0].schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    from pyspark.sql.pandas.types import to_arrow_schema

    declared = _read(spark, str(jdir)).schema
    assert to_arrow_schema(declared, timezone="UTC") == arrow_schema()


@pytest.mark.parametrize("topic", ["orders", "orders.*", "^orders$", "trades|blobs"])
def test_topic_option_literal_or_regex_as_journal_dump(spark, journal, topic: str) -> None:
    jdir, adir = journal
    got = _rows(_read(spark, f"{jdir},{adir}", topic=topic, data="string"))
    assert got == _expected(jdir, adir, topic=topic)
    assert got


def test_from_and_to_as_bookmarks_and_timestamps(spark, journal) -> None:
    jdir, adir = journal
    p = instance_hash(INSTANCE)
    cases = [
        (f"{p}|300|", f"{p}|1900|"),
        ("20231114T221500", "20231114T223000.5Z"),
        (f"{p}|1000|", "20231114T224500"),
    ]
    for start, end in cases:
        got = _rows(_read(spark, f"{jdir},{adir}", **{"from": start, "to": end}))
        assert got == _expected(jdir, adir, start=start, end=end), (start, end)
        assert got


def test_a_config_file_reads_both_directories_with_the_exact_instance_name(spark, journal, tmp_path: Path) -> None:
    jdir, adir = journal
    config = tmp_path / "broker.xml"
    config.write_text(f"""<AMPSConfig><Name>{INSTANCE}</Name>
      <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
        <Protocol>amps</Protocol></Transport></Transports>
      <TransactionLog><JournalDirectory>{jdir}</JournalDirectory>
        <JournalArchiveDirectory>{adir}</JournalArchiveDirectory>
        <Topic><Name>orders.*|trades</Name><MessageType>json</MessageType></Topic>
        <Topic><Name>blobs</Name><MessageType>binary</MessageType></Topic></TransactionLog></AMPSConfig>""")
    df = _read(spark, str(config))
    assert df.count() == 3601
    binary = _read(spark, str(config), topic="blobs")
    assert dict(binary.dtypes)["data"] == "binary"
    assert binary.collect()[0].data == bytes(range(256))


def test_pushed_filters_prune_files_and_give_what_spark_would(spark, journal) -> None:
    jdir, adir = journal
    path = f"{jdir},{adir}"
    where = ("topic IN ('orders', 'trades') AND seq > 700 AND timestamp <= '2023-11-14 22:40:00' "
             "AND timestamp > '2023-11-14 22:13:21.5'")
    pushed = _rows(_read(spark, path).where(where))
    everything = _expected(jdir, adir)
    lo = (dt.datetime(2023, 11, 14, 22, 13, 21, 500000, tzinfo=dt.UTC).timestamp()) * 1e6
    hi = (dt.datetime(2023, 11, 14, 22, 40, tzinfo=dt.UTC).timestamp()) * 1e6
    by_hand = [r for r in everything if r[2] in ("orders", "trades") and r[0] > 700 and lo < r[8] <= hi]
    assert pushed == by_hand and pushed
    # The reader Spark planned kept only the files those bounds can touch, and claimed the filters.
    reader = JournalBatchReader(locate(path), Selection(), False)
    from pyspark.sql.datasource import EqualTo, GreaterThan

    left = list(reader.pushFilters([GreaterThan(("seq",), 1700), EqualTo(("topic",), "orders"),
                                    EqualTo(("data",), "x")]))
    assert [type(f).__name__ for f in left] == ["EqualTo"] and left[0].attribute == ("data",)
    assert len(reader.partitions()) < len(list_files(jdir, adir, INSTANCE))
    plan = _read(spark, path).where("seq > 1700")._jdf.queryExecution().executedPlan().toString()
    assert "> 1700" not in plan  # pushed: Spark does not evaluate it again


def test_binary_payload_read_as_string_is_escaped_not_lost(spark, journal) -> None:
    jdir, adir = journal
    row = _read(spark, f"{jdir},{adir}", topic="blobs").collect()[0]
    assert row.message_type == "binary"
    assert row.data == bytes(range(256)).decode("utf-8", "backslashreplace")
    raw = _read(spark, f"{jdir},{adir}", topic="blobs", data="binary").collect()[0]
    assert raw.data == bytes(range(256))
