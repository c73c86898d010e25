"""The ``amps-journal`` streaming reader (issue 15, acceptance 2).

A streaming query reads the journal of a running broker into a Parquet file sink with a checkpoint. While
it runs, messages published through the official client roll the journal over into new files, and the
broker's scheduled journal actions archive and compress the sealed ones. Every message arrives exactly
once; a restart from the checkpoint with ``trigger(availableNow=True)`` adds exactly the messages published
since.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from broker.txlog import FileState, list_files

INSTANCE = "stream-test"
PAD = "s" * 900


def _append(writer, first: int, count: int) -> None:  # noqa: ANN001 - JournalWriter
    for n in range(first, first + count):
        writer.append("publish", "orders" if n % 4 else "ticks", json.dumps({"n": n, "pad": PAD}).encode(),
                      sow_key=str(n % 25))
        if n % 50 == 49:
            writer.sync()
    writer.sync()


def _sink_sequences(spark, out: Path) -> list[int]:  # noqa: ANN001
    """The sequences in the sink (read through its _spark_metadata log: committed files only)."""
    from pyspark.errors import AnalysisException

    try:
        return [r.seq for r in spark.read.parquet(str(out)).select("seq").collect()]
    except AnalysisException:  # no micro-batch committed yet
        return []


def _wait_for(spark, out: Path, count: int, query, timeout: float = 90.0) -> list[int]:  # noqa: ANN001
    """Wait until the sink holds ``count`` rows (or the query fails or time runs out)."""
    deadline = time.monotonic() + timeout
    while True:
        if query.exception() is not None:
            raise AssertionError(f"the streaming query failed: {query.exception()}")
        got = _sink_sequences(spark, out)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def test_stream_topic_and_from_options(spark, open_writer, tmp_path: Path) -> None:  # noqa: ANN001
    jdir = tmp_path / "journal"
    writer = open_writer(jdir, None, INSTANCE)
    try:
        _append(writer, 0, 200)
    finally:
        writer.close()
    out = tmp_path / "out"
    from broker.txlog import instance_hash

    query = (spark.readStream.format("amps-journal").option("topic", "ticks")
             .option("from", f"{instance_hash(INSTANCE)}|100|").load(str(jdir))
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.seq for r in rows) == [n + 1 for n in range(100, 200) if n % 4 == 0]
    assert {r.topic for r in rows} == {"ticks"}


BROKER_TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <JournalArchiveDirectory>./archive</JournalArchiveDirectory>
  <JournalSize>10MB</JournalSize><PreallocatedJournalFiles>1</PreallocatedJournalFiles>
  <FlushInterval>10ms</FlushInterval><Topic><Name>events</Name><MessageType>json</MessageType></Topic>"""
#: The journal actions archive, then compress, every sealed journal each second.
ACTIONS = ("<Actions><Action><On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every>"
           "<Name>journals</Name></Options></On>"
           + "".join(f"<Do><Module>amps-action-do-{step}-journal</Module><Options><Age>0s</Age></Options></Do>"
                     for step in ("archive", "compress"))
           + "</Action></Actions>")
BIG = "b" * 60_000


def _publish(client, first: int, count: int) -> None:  # noqa: ANN001 - AMPS.Client
    for n in range(first, first + count):
        client.publish("events", json.dumps({"n": n, "pad": BIG}))
    client.publish_flush(30_000)


def _numbers(spark, out: Path) -> list[int]:  # noqa: ANN001
    from pyspark.sql import functions as F

    return [r.n for r in spark.read.parquet(str(out)).select(
        F.get_json_object("data", "$.n").cast("int").alias("n")).collect()]


@pytest.mark.timeout(300)
def test_stream_of_a_running_broker_across_rollover_and_its_archive_compress_actions(
        spark, tmp_path: Path) -> None:  # noqa: ANN001
    """Acceptance 2 with a real broker: published while the query runs, 60 KB messages roll the 10 MB
    journals over; the broker's own scheduled actions archive and compress them; every message once."""
    import AMPS

    from broker.testing.process import BrokerProcess

    broker = BrokerProcess.from_xml(tmp_path, transaction_log=BROKER_TXLOG, extra=ACTIONS).start()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    jdir, adir = tmp_path / "journal", tmp_path / "archive"
    try:
        client = AMPS.Client(f"spark-stream-{time.monotonic_ns()}")
        client.connect(broker.uri)
        client.logon(5000)
        _publish(client, 0, 50)
        query = ((spark.readStream.format("amps-journal").option("workdir", str(broker.cwd))
                  .load(str(broker.config_path))).writeStream
                 .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="1 second").start())
        try:
            _wait_for(spark, out, 50, query)
            _publish(client, 50, 400)  # ~27 MB after the query started: two rollovers
            deadline = time.monotonic() + 60
            while not [f for f in list_files(jdir, adir, "test-broker") if f.state is FileState.COMPRESSED]:
                assert time.monotonic() < deadline, "the actions never archived and compressed a journal"
                time.sleep(0.5)
            _publish(client, 450, 50)
            got = _wait_for(spark, out, 500, query)
        finally:
            query.stop()
        assert len(got) == len(set(got)) == 500  # no sequence twice
        assert sorted(_numbers(spark, out)) == list(range(500))  # no message missing
        files = list_files(jdir, adir, "test-broker")
        assert [f for f in files if f.archived and f.compressed] and len(files) >= 3
        # Published while no query ran; then a restart from the checkpoint with availableNow reads exactly
        # those, once, and ends by itself.
        _publish(client, 500, 30)
        client.close()
    finally:
        broker.stop()
    again = ((spark.readStream.format("amps-journal").option("workdir", str(broker.cwd))
                  .load(str(broker.config_path))).writeStream
             .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert again.awaitTermination(120) and again.exception() is None
    assert sorted(_numbers(spark, out)) == list(range(530))
    assert len(set(_sink_sequences(spark, out))) == 530
