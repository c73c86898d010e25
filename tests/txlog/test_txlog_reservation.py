"""Sequence reservation (``<instance>.sequence``): no sequence is handed out above a durable ceiling, so a
restart after a crash continues above every sequence a live subscriber could have seen.

The kill -9 tests with a real child process are in ``test_txlog_kill.py``.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import JournalError
from broker.txlog import JournalFullError, JournalWriter, ReplayStart
from broker.txlog import reservation as reservation_module


def _crash(writer: JournalWriter) -> None:
    """What a kill -9 leaves: nothing more is written, the files and the directory lock are let go."""
    writer._files.close()
    writer._closed = True


def _on_disk(writer: JournalWriter) -> int:
    return int(json.loads((writer.journal_directory / f"{writer.instance}.sequence").read_text())["reserved"])


def _fail_reservations(monkeypatch: pytest.MonkeyPatch, code: int = errno.ENOSPC) -> list[int]:
    """Make every reservation write fail with ``code``; returns the list of attempts (ceilings tried)."""
    tried: list[int] = []

    def fail(path: object, data: bytes, mode: int = 0o644) -> None:
        tried.append(json.loads(data)["reserved"])
        raise OSError(code, "No space left on device" if code == errno.ENOSPC else "I/O error")

    monkeypatch.setattr(reservation_module, "write_file_durably", fail)
    return tried


def test_open_reserves_a_block(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(sequence_block=100)
    assert w.statistics().reserved_sequence == 100 == _on_disk(w)
    assert w.last_sequence == 0 and w.append("publish", "t", b"a")[0] == 1


def test_sync_extends_the_reservation_ahead_of_need(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(sequence_block=10)
    for _ in range(5):
        w.append("publish", "t", b"a")
    w.sync()
    assert _on_disk(w) == 10  # 5 + half a block is not above 10: nothing to do yet
    w.append("publish", "t", b"a")
    w.sync()
    assert _on_disk(w) == 16 == w.statistics().reserved_sequence  # 6 + 5 > 10: the next block, from 6
    for _ in range(200):
        w.append("publish", "t", b"a")
        w.sync()
        assert _on_disk(w) >= w.last_sequence + 5
    assert w.statistics().reservation_waits == 0  # append never had to reserve


def test_append_past_the_ceiling_reserves_itself(open_writer: Callable[..., JournalWriter],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """More than half a block between two syncs: the appending thread reserves before handing a number out."""
    w = open_writer(sequence_block=10)
    written = reservation_module.write_file_durably
    on_disk = {"reserved": _on_disk(w)}

    def spy(path: object, data: bytes, mode: int = 0o644) -> None:
        written(path, data, mode)  # type: ignore[arg-type]
        on_disk["reserved"] = json.loads(data)["reserved"]

    monkeypatch.setattr(reservation_module, "write_file_durably", spy)
    for expected in range(1, 26):
        seq, _bm = w.append("publish", "t", b"a")
        assert seq == expected <= on_disk["reserved"]  # never above what is on disk
    assert w.statistics().reservation_waits == 2  # at 11 (up to 21) and at 22 (up to 32)
    assert on_disk["reserved"] == 32
    assert w.sync() == 25


def test_a_clean_close_does_not_jump(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(sequence_block=1000)
    for _ in range(7):
        w.append("publish", "t", b"a")
    w.close()
    assert _on_disk(w) == 7  # lowered to the last sequence: every one handed out is durable
    w2 = open_writer(sequence_block=1000)
    assert w2.last_sequence == 7 == w2.durable_sequence
    assert w2.append("publish", "t", b"b")[0] == 8
    assert _on_disk(w2) == 1007


def test_a_crash_jumps_above_the_reservation(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(sequence_block=1000)
    w.append("publish", "t", b"durable")
    w.sync()
    for _ in range(30):
        handed, _bm = w.append("publish", "t", b"seen live, then lost")
    _crash(w)
    w2 = open_writer(sequence_block=1000)
    assert w2.durable_sequence == 1  # what the journal holds (SOW recovery compares the SOW with it)
    assert w2.last_sequence == 1000 > handed
    assert _on_disk(w2) == 2000
    assert w2.sync() == 1000  # nothing pending: the gap is covered
    seq, _bm = w2.append("publish", "t", b"after")
    assert seq == 1001
    w2.sync()
    reader = w2.reader()
    assert [r.sequence for r in reader.records(ReplayStart.epoch(), until_sequence=1001)] == [1, 1001]
    assert reader.problems == []  # the gap is legitimate


def test_a_clean_close_after_a_full_disk_keeps_the_dropped_sequences(
        open_writer: Callable[..., JournalWriter], monkeypatch: pytest.MonkeyPatch) -> None:
    """Records dropped by close() on a full disk had sequences (seen live): the next start stays above them."""
    w = open_writer(sequence_block=1000)
    w.append("publish", "t", b"a")
    w.sync()
    w.append("publish", "t", b"dropped")
    monkeypatch.setattr(w, "sync", lambda: (_ for _ in ()).throw(JournalFullError(w.current_path, "full")))
    w.close()
    assert _on_disk(w) == 2
    monkeypatch.undo()
    w2 = open_writer(sequence_block=1000)
    assert w2.durable_sequence == 1 and w2.last_sequence == 2
    assert w2.append("publish", "t", b"b")[0] == 3


def test_raise_sequence_floor_reserves_above_the_floor(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(sequence_block=100)
    w.raise_sequence_floor(5000)
    assert _on_disk(w) == 5100 and w.statistics().reservation_waits == 0
    _crash(w)  # a second crash before any new record: the floor is not forgotten
    w2 = open_writer(sequence_block=100)
    assert w2.last_sequence == 5100


def test_append_refused_while_the_reservation_cannot_be_written(
        open_writer: Callable[..., JournalWriter], monkeypatch: pytest.MonkeyPatch) -> None:
    w = open_writer(sequence_block=4)
    tried = _fail_reservations(monkeypatch)
    for _ in range(4):
        w.append("publish", "t", b"a")  # within the ceiling reserved at open
    with pytest.raises(JournalFullError):
        w.append("publish", "t", b"b")
    assert w.last_sequence == 4 and tried  # nothing handed out
    assert w.sync() == 4  # the writer itself is fine
    _fail_reservations(monkeypatch, errno.EIO)
    with pytest.raises(JournalError):
        w.append("publish", "t", b"b")
    monkeypatch.undo()
    assert w.append("publish", "t", b"b")[0] == 5
    assert _on_disk(w) == 9


def test_a_failed_extension_does_not_fail_sync(open_writer: Callable[..., JournalWriter],
                                               monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    w = open_writer(sequence_block=10)
    tried = _fail_reservations(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="broker.txlog"):
        for _ in range(3):
            for _ in range(3):
                w.append("publish", "t", b"a")
            w.sync()
    assert len(tried) >= 2 and w.durable_sequence == 9
    assert len([r for r in caplog.records if "cannot extend the sequence reservation" in r.message]) == 1
    monkeypatch.undo()
    w.append("publish", "t", b"a")  # 10: still within the ceiling
    w.sync()
    assert _on_disk(w) == 20


def test_open_on_a_full_disk_reserves_at_the_first_append(make_config: Callable[..., object],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    w = JournalWriter(make_config(), "inst-a", sequence_block=10)  # type: ignore[arg-type]
    w.open()
    w.append("publish", "t", b"a")
    w.close()
    _fail_reservations(monkeypatch)
    w = JournalWriter(make_config(), "inst-a", sequence_block=10)  # type: ignore[arg-type]
    w.open()  # no space needed
    try:
        with pytest.raises(JournalFullError):
            w.append("publish", "t", b"b")
        monkeypatch.undo()
        assert w.append("publish", "t", b"b")[0] == 2
        assert w.statistics().reservation_waits == 1
    finally:
        w.close()


def test_an_unreadable_reservation_file_is_logged(open_writer: Callable[..., JournalWriter],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    w = open_writer(sequence_block=10)
    w.append("publish", "t", b"a")
    w.close()
    path = Path(w.journal_directory) / "inst-a.sequence"
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="broker.txlog"):
        w2 = open_writer(sequence_block=10)
    assert "unreadable" in caplog.text
    assert w2.last_sequence == 1 and _on_disk(w2) == 11
