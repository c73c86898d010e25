"""Sequences: expiration times through the writer, the sequence floor, and replay over a cut tail."""

from __future__ import annotations

import os
from collections.abc import Callable

from broker.txlog import JournalWriter, ReplayStart


def _seqs(writer: JournalWriter) -> list[int]:
    return [r.sequence for r in writer.replay(ReplayStart.epoch())]


def test_expiration_round_trip(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    w.append("publish", "t", b"a", expiration_ns=1_700_000_000_123_456_789)
    w.append("publish", "t", b"b")
    w.sync()
    w.close()
    w2 = open_writer()
    assert [r.expiration_ns for r in w2.replay(ReplayStart.epoch())] == [1_700_000_000_123_456_789, 0]


def test_raise_sequence_floor_after_open(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    w.append("publish", "t", b"a")
    w.sync()
    w.raise_sequence_floor(100)
    assert w.last_sequence == 100 and w.durable_sequence == 100  # nothing pending: the gap is covered
    w.raise_sequence_floor(50)  # lower: no effect
    assert w.append("publish", "t", b"b")[0] == 101
    assert w.sync() == 101
    reader = w.reader()
    assert [r.sequence for r in reader.records(until_sequence=101)] == [1, 101]
    assert reader.problems == []  # a sequence gap is not damage


def test_raise_sequence_floor_with_pending_records_waits_for_sync(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    w.append("publish", "t", b"a")
    w.raise_sequence_floor(10)
    assert w.durable_sequence == 0  # record 1 is not on disk yet: no persisted ack may cover it
    assert w.sync() == 10 == w.durable_sequence
    assert w.sync() == 10


def test_raise_sequence_floor_before_open(make_config: Callable[..., object]) -> None:
    w = JournalWriter(make_config(), "inst-a")  # type: ignore[arg-type]
    w.raise_sequence_floor(7)
    w.open()
    try:
        assert w.append("publish", "t", b"a")[0] == 8
    finally:
        w.close()


def test_replay_after_a_tail_cut_while_stopped(open_writer: Callable[..., JournalWriter]) -> None:
    """The issue's "cut by 5 bytes": the snapshot covers the lost record; replays must not fail."""
    w = open_writer()
    for i in range(10):
        w.append("publish", "t", b"%d" % i, publisher=(5, i + 1))
    w.sync()
    path = w.current_path
    w.close()  # the publisher snapshot now covers sequence 10
    os.truncate(path, path.stat().st_size - 5)
    w2 = open_writer()
    assert w2.statistics().truncated_bytes > 0
    assert w2.last_sequence == 10  # sequence 10 was handed out once: never again
    assert _seqs(w2) == list(range(1, 10))  # ends quietly where the records end
    assert w2.append("publish", "t", b"x")[0] == 11
    w2.sync()
    assert _seqs(w2) == [*range(1, 10), 11]
