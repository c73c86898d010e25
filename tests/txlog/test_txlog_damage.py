"""Damage: a flipped byte in the current or an older file, start-up, skip, verify, repair; and the lock."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.cli import main
from broker.errors import JournalError
from broker.txlog import JournalDamageError, JournalReader, JournalWriter, ReplayStart
from broker.txlog.cli import repair, verify
from broker.txlog.summary import read_summary, summary_path

MB = 1024 * 1024


def _fill(writer: JournalWriter, n: int, size: int = 100) -> None:
    for i in range(n):
        writer.append("publish", "t", b"%06d." % i + b"x" * size, publisher=(9, i + 1))
    writer.sync()


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def _seqs(writer: JournalWriter) -> list[int]:
    return [r.sequence for r in writer.replay(ReplayStart.epoch())]


def test_flipped_byte_in_the_current_file_stops_start_up(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 200)
    path = w.current_path
    w.close()
    size = path.stat().st_size
    _flip(path, size // 2)
    with pytest.raises(JournalDamageError) as caught:
        open_writer()
    err = caught.value
    assert err.path == path and 0 < err.offset <= size // 2 < err.end
    assert 0 < err.last_good_sequence < 200 and err.first_good_sequence == err.last_good_sequence + 2
    text = str(err)
    assert str(path) in text and f"offset {err.offset}" in text and f"broker journal repair {path}" in text
    assert "DamagedRecords>skip" in text
    assert path.stat().st_size == size  # nothing after the damage was deleted
    # skip: starts, keeps every later record, counts the damage, writes on.
    w2 = open_writer(damaged_records="skip")
    lost = err.last_good_sequence + 1
    assert w2.last_sequence == 200
    assert _seqs(w2) == [s for s in range(1, 201) if s != lost]
    stats = w2.statistics()
    assert (stats.damaged_records, stats.damaged_bytes) == (1, err.end - err.offset)
    assert w2.append("publish", "t", b"after")[0] == 201
    w2.sync()
    assert _seqs(w2)[-2:] == [200, 201]
    assert w2.statistics().damaged_records == 1  # the replays met the same range: counted once


def test_flipped_byte_in_an_older_file(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 12, size=250_000)  # 4 records per 1 MiB file: 3 files
    files = [f for f in w.files() if f.size > 0]
    assert len(files) == 3
    w.close()
    assert read_summary(summary_path(w.journal_directory, "inst-a", files[0].index)) is not None
    older = files[0].path
    size = older.stat().st_size
    _flip(older, size // 2 + 100)
    with pytest.raises(JournalDamageError) as caught:
        open_writer()
    assert caught.value.path == older and older.stat().st_size == size
    assert caught.value.last_good_sequence == 2 and caught.value.first_good_sequence == 4
    # A replay that meets it (with stop) fails with the located error; with skip it goes on.
    w2 = open_writer(damaged_records="skip")
    assert _seqs(w2) == [1, 2, *range(4, 13)]
    assert w2.statistics().damaged_records == 1
    w2.close()
    stopping = JournalReader(w.journal_directory, w.archive_directory)  # default policy: stop
    with pytest.raises(JournalDamageError, match="is damaged at offset"):
        list(stopping.records(until_sequence=12))


def test_an_older_file_without_summary_is_scanned_once(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 8, size=250_000)
    w.close()
    first = summary_path(w.journal_directory, "inst-a", 0)
    first.unlink()
    w2 = open_writer()
    assert read_summary(first) is not None and read_summary(first).last_sequence == 4  # type: ignore[union-attr]
    w2.close()


def test_cut_tail_of_an_older_file_is_damage(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 8, size=250_000)
    w.close()
    older = [f for f in w.files() if f.size > 0][0].path
    size = older.stat().st_size
    with open(older, "r+b") as f:
        f.truncate(size - 5)
    with pytest.raises(JournalDamageError, match="records after sequence 3 in this file"):
        open_writer()
    assert older.stat().st_size == size - 5


def test_verify_and_repair(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 100)
    path = w.current_path
    w.close()
    out = io.StringIO()
    assert verify([w.journal_directory], out=out) == 0
    assert "no damage found" in out.getvalue()
    _flip(path, 3000)
    out = io.StringIO()
    assert verify([path], out=out) == 1
    report = out.getvalue()
    assert f"DAMAGED {path}" in report and "is damaged at offset" in report and "records after sequence" in report
    assert main(["journal", "verify", str(w.journal_directory)]) == 1
    before = path.read_bytes()
    out = io.StringIO()
    assert repair(path, out=out) == 0
    side = list(path.parent.glob(path.name + ".damaged-*"))
    assert len(side) == 1
    offset = int(side[0].name.rsplit("-", 1)[1])
    assert before[offset : offset + side[0].stat().st_size] == side[0].read_bytes()
    assert path.stat().st_size + side[0].stat().st_size == len(before)
    assert main(["journal", "verify", str(path)]) == 0
    w2 = open_writer()  # the default policy starts again: the damage is gone, every other record kept
    assert len(_seqs(w2)) == 99 and _seqs(w2)[-1] == 100


def test_repair_refuses_a_directory_in_use(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    _fill(w, 3)
    with pytest.raises(JournalError, match="stop it before repairing"):
        repair(w.current_path, out=io.StringIO())


def test_second_writer_is_refused_by_the_lock(open_writer: Callable[..., JournalWriter],
                                              make_config: Callable[..., object]) -> None:
    w = open_writer()
    other = JournalWriter(make_config(), "inst-a")  # type: ignore[arg-type]
    with pytest.raises(JournalError, match="another broker is using the journal directory .* is another broker "
                                           "running with this config"):
        other.open()
    w.close()
    other.open()  # released at close
    other.close()
