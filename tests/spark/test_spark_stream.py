"""The ``amps-journal`` streaming reader (issue 15, acceptance 2).

A streaming query reads a journal that the broker's JournalWriter keeps appending to, into a Parquet file
sink with a checkpoint. While it runs, the journal rolls over into new files and the sealed files are
archived and compressed (the functions the journal actions call). Every sequence arrives exactly once; a
restart from the checkpoint with ``trigger(availableNow=True)`` adds exactly the records appended since.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from broker.txlog import FileState, archive_file, compress_file, list_files

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


def _maintain(jdir: Path, adir: Path) -> tuple[int, int]:
    """Archive, then compress, every sealed journal file; returns (archived, compressed)."""
    archived = compressed = 0
    for jf in list_files(jdir, adir, INSTANCE):
        if jf.state is FileState.FULL:
            archive_file(jf.path, adir)
            archived += 1
    for jf in list_files(jdir, adir, INSTANCE):
        if jf.state is FileState.ARCHIVED:
            compress_file(jf.path, journal_directory=jdir)
            compressed += 1
    return archived, compressed


@pytest.mark.timeout(300)
def test_stream_follows_appends_across_rollover_archive_and_compress_exactly_once(
        spark, open_writer, tmp_path: Path) -> None:  # noqa: ANN001
    jdir, adir = tmp_path / "journal", tmp_path / "archive"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    writer = open_writer(jdir, adir, INSTANCE)
    try:
        _append(writer, 0, 300)
        stream = spark.readStream.format("amps-journal").load(f"{jdir},{adir}")
        query = (stream.writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(processingTime="1 second").start())
        try:
            assert sorted(_wait_for(spark, out, 300, query)) == list(range(1, 301))
            # Published after the query started: ~3 MB, so the journal rolls over twice (1 MiB files) ...
            _append(writer, 300, 1200)
            assert len(list_files(jdir, adir, INSTANCE)) >= 2
            got = _wait_for(spark, out, 1500, query)
            assert sorted(got) == list(range(1, 1501))
            _append(writer, 1500, 1500)
            # ... and the sealed files are archived and compressed while the query reads on.
            archived, compressed = _maintain(jdir, adir)
            assert archived >= 2 and compressed >= 2
            _append(writer, 3000, 500)
            got = _wait_for(spark, out, 3500, query)
        finally:
            query.stop()
        assert len(got) == 3500, "a record is missing or was written twice"
        assert sorted(got) == list(range(1, 3501))
        states = {jf.state for jf in list_files(jdir, adir, INSTANCE)}
        assert FileState.COMPRESSED in states and FileState.CURRENT in states

        # Restart from the checkpoint: only what was appended since, once, then the query ends by itself.
        _append(writer, 3500, 400)
        _maintain(jdir, adir)
        again = (spark.readStream.format("amps-journal").load(f"{jdir},{adir}").writeStream
                 .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert again.awaitTermination(120)
        assert again.exception() is None
        final = _sink_sequences(spark, out)
        assert sorted(final) == list(range(1, 3901))
    finally:
        writer.close()


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
