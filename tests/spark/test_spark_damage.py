"""A damaged journal record: a Spark read fails by default, naming the file, the byte offset and the
sequences around it; ``damaged=skip`` (``--skip-damaged`` for the jobs) leaves it out and reports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.cli import main as broker_main
from broker.txlog.file_records import iter_raw, open_journal_file
from broker.txlog.files import list_files

INSTANCE = "spark-damage"
RECORDS = 120
DAMAGED = 60  # the sequence of the record whose bytes are broken


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory, open_writer) -> tuple[Path, Path, int]:  # noqa: ANN001
    """A journal of RECORDS records whose record DAMAGED has a byte flipped (its CRC no longer matches).

    Returns: the journal directory, the damaged file and the offset of the damaged record.
    """
    jdir = tmp_path_factory.mktemp("damaged") / "journal"
    writer = open_writer(jdir, None, INSTANCE)
    for i in range(RECORDS):
        writer.append("publish", "orders", json.dumps({"id": i, "pad": "x" * 200}).encode(), sow_key=str(i))
    writer.sync()
    writer.close()
    (jf,) = list_files(jdir, None, INSTANCE)
    with open_journal_file(jf.path) as f:
        offsets = {n + 1: (at, len(raw)) for n, (at, raw) in enumerate(iter_raw(f))}
    at, size = offsets[DAMAGED]
    with open(jf.path, "r+b") as f:
        f.seek(at + size - 5)  # inside the message, so that only the CRC check finds it
        byte = f.read(1)
        f.seek(at + size - 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    return jdir, jf.path, at


def _read(spark, path: Path, **options: str):  # noqa: ANN001, ANN202
    reader = spark.read.format("amps-journal")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


def test_a_damaged_record_fails_the_read_naming_file_offset_and_sequences(spark, damaged) -> None:  # noqa: ANN001
    jdir, path, offset = damaged
    with pytest.raises(Exception) as caught:  # noqa: B017, PT011 - Spark wraps the executor's error
        _read(spark, jdir).count()
    message = str(caught.value)
    assert f"journal {path} is damaged at offset {offset}" in message, message[-3000:]
    assert f"records after sequence {DAMAGED - 1} and before {DAMAGED + 1} are affected" in message
    assert "option('damaged', 'skip')" in message and "--skip-damaged" in message


def test_skip_leaves_the_damaged_record_out(spark, damaged) -> None:  # noqa: ANN001
    jdir, _path, _offset = damaged
    seqs = [r.seq for r in _read(spark, jdir, damaged="skip").select("seq").orderBy("seq").collect()]
    assert seqs == [s for s in range(1, RECORDS + 1) if s != DAMAGED]
    with pytest.raises(Exception, match="damaged='sometimes'"):  # noqa: PT011
        _read(spark, jdir, damaged="sometimes").count()


def test_jobs_fail_on_damage_and_report_what_they_skipped(spark, damaged, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    jdir, path, offset = damaged
    out = tmp_path / "export"
    assert broker_main(["spark", "export", str(jdir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"journal {path} is damaged at offset {offset}" in err and "Traceback" not in err, err[-3000:]
    assert broker_main(["spark", "export", str(jdir), "--out", str(out), "--skip-damaged"]) == 0
    printed = capsys.readouterr().out
    assert f"export: {RECORDS - 1} rows in 1 file(s)" in printed, printed
    assert f"damaged records skipped: 1 in 1 range(s): {path} at offset {offset}" in printed, printed
    assert f"sequences after {DAMAGED - 1} and before {DAMAGED + 1}" in printed
    assert spark.read.parquet(str(out)).count() == RECORDS - 1
