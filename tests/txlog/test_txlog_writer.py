"""The journal writer: sequences, group commit, rotation, recovery of torn tails, publisher dedup."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import JournalError
from broker.txlog import FileState, JournalWriter, client_name_hash, instance_hash, journal_name
from broker.txlog.records import Command

MB = 1024 * 1024


def _all(writer: JournalWriter) -> list[int]:
    return [r.sequence for r in writer.reader().records(until_sequence=writer.durable_sequence)]


def _crash(writer: JournalWriter) -> None:
    """What a kill -9 leaves: nothing more is written, the files and the directory lock are let go."""
    writer._files.close()
    writer._closed = True


def test_append_returns_sequence_and_bookmark(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer("inst-a")
    seq, bookmark = w.append("publish", "orders", b'{"id":1}', sow_key="1")
    assert seq == 1
    assert bookmark == f"{instance_hash('inst-a')}|1|"
    assert w.durable_sequence == 0 and w.last_sequence == 1
    assert w.append(Command.SOW_DELETE, "orders", b"")[0] == 2
    assert w.sync() == 2 == w.durable_sequence


def test_group_commit_one_fsync_per_sync(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    for i in range(100):
        w.append("publish", "t", b"x%d" % i)
    before = w.statistics().fsync_count
    assert w.statistics().pending_records == 100
    assert w.sync() == 100
    stats = w.statistics()
    assert stats.fsync_count == before + 1
    assert stats.pending_records == 0 and stats.appended_records == 100
    assert stats.fsync_buckets[-1] == (float("inf"), stats.fsync_count)
    assert w.sync() == 100  # nothing new: no fsync
    assert w.statistics().fsync_count == before + 1


def test_sequence_continues_across_reopen(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    for _ in range(5):
        w.append("publish", "t", b"a")
    w.close()
    w2 = open_writer()
    assert w2.last_sequence == w2.durable_sequence == 5
    assert w2.append("publish", "t", b"b")[0] == 6
    w2.sync()
    assert _all(w2) == [1, 2, 3, 4, 5, 6]


def test_unsynced_records_are_not_durable_after_crash(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    w.append("publish", "t", b"a")
    w.sync()
    w.append("publish", "t", b"lost")  # never synced: a crash now loses it (no close)
    _crash(w)
    w2 = open_writer()
    assert w2.durable_sequence == 1 and _all(w2) == [1]  # the record is lost ...
    assert w2.last_sequence >= 2  # ... but its sequence was handed out: never again (the reservation)


def test_garbage_tail_is_cut_and_everything_before_is_readable(
    open_writer: Callable[..., JournalWriter], make_config: Callable[..., object]
) -> None:
    w = open_writer()
    for i in range(20):
        w.append("publish", "t", b"%d" % i)
    w.close()
    path = Path(make_config().journal_directory) / journal_name("inst-a", 0)
    good = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x17garbage that is not a record" * 3)
    w2 = open_writer()
    assert path.stat().st_size == good
    assert w2.statistics().truncated_bytes == len(b"\x17garbage that is not a record") * 3
    assert _all(w2) == list(range(1, 21))
    assert w2.append("publish", "t", b"next")[0] == 21
    w2.sync()
    assert _all(w2) == list(range(1, 22))


def test_torn_tail_at_every_offset(tmp_path: Path, make_config: Callable[..., object]) -> None:
    base = make_config(journal_directory=str(tmp_path / "base"))
    w = JournalWriter(base, "inst-a")
    w.open()
    ends = []
    for i in range(4):
        w.append("publish", "t", b"body-%d" % i, sow_key=b"k")
        w.sync()
        ends.append((w.current_path.stat().st_size, w.durable_sequence))
    w.close()
    full = (Path(base.journal_directory) / journal_name("inst-a", 0)).read_bytes()
    start = ends[2][0] - 1  # cut anywhere in the last record, and just before it
    for cut in range(start, len(full) + 1):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        (directory / journal_name("inst-a", 0)).write_bytes(full[:cut])
        config = make_config(journal_directory=str(directory), journal_archive_directory=None, preallocated_journal_files=1)
        w = JournalWriter(config, "inst-a")
        w.open()
        expected = max(seq for size, seq in ends if size <= cut)
        assert w.last_sequence == expected, cut
        assert _all(w) == list(range(1, expected + 1)), cut
        if cut % 5 == 0:  # writing on after the cut (fsyncs are slow on shared disks: not at every offset)
            assert w.append("publish", "t", b"after")[0] == expected + 1
            assert w.sync() == expected + 1
        w.close()
        shutil.rmtree(directory)


def test_file_with_only_garbage_falls_back_to_previous_file(
    open_writer: Callable[..., JournalWriter], make_config: Callable[..., object]
) -> None:
    w = open_writer()
    for _ in range(3):
        w.append("publish", "t", b"x" * 400_000)
    w.sync()
    w.close()
    directory = Path(make_config().journal_directory)
    assert (directory / journal_name("inst-a", 1)).stat().st_size > 0
    # A torn first record in the newest file: that file is emptied, the sequence comes from the one before.
    (directory / journal_name("inst-a", 2)).write_bytes(b"\x01\x02\x03")
    w2 = open_writer()
    assert w2.last_sequence == 3
    assert (directory / journal_name("inst-a", 2)).stat().st_size == 0


def test_rotation_at_one_megabyte(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(journal_size=MB)
    body = b"y" * 10_000
    for i in range(250):  # ~2.5 MB
        w.append("publish", "t", body)
        if i % 37 == 0:
            w.sync()
    w.sync()
    files = w.files()
    data_files = [f for f in files if f.size > 0]
    assert len(data_files) == 3
    assert all(f.size <= MB for f in data_files)
    assert [f.state for f in data_files] == [FileState.FULL, FileState.FULL, FileState.CURRENT]
    assert files[-1].state is FileState.PREALLOCATED
    assert w.statistics().rotations == 2
    assert _all(w) == list(range(1, 251))
    w.close()


def test_small_journal_size_is_raised_to_one_megabyte(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(journal_size=1000)
    for _ in range(50):
        w.append("publish", "t", b"z" * 1000)
    w.sync()
    assert len([f for f in w.files() if f.size > 0]) == 1


def test_preallocated_files(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer(preallocated_journal_files=3)
    states = [f.state for f in w.files()]
    assert states == [FileState.PREALLOCATED] * 3  # nothing written yet
    w.append("publish", "t", b"a")
    w.sync()
    assert [f.state for f in w.files()] == [FileState.CURRENT, FileState.PREALLOCATED, FileState.PREALLOCATED]


def test_dedup_rebuilt_after_reopen(open_writer: Callable[..., JournalWriter], make_config: Callable[..., object]) -> None:
    alice, bob = client_name_hash("alice"), client_name_hash("bob")
    w = open_writer()
    for s in range(1, 6):
        w.append("publish", "t", b"a", publisher=(alice, s))
    w.append("publish", "t", b"b", publisher=(bob, 3))
    assert w.dedup.last_persisted("alice") == 0  # appended, not yet durable
    assert w.dedup.is_duplicate("alice", 5) and not w.dedup.is_duplicate("alice", 6)
    w.sync()
    assert w.dedup.last_persisted("alice") == 5
    w.append("publish", "t", b"a", publisher=(alice, 6))
    w.sync()
    # Crash (no close, so the snapshot is stale or absent): the journal alone rebuilds the table.
    _crash(w)
    w2 = open_writer()
    assert w2.dedup.last_persisted("alice") == 6
    assert w2.dedup.last_persisted("bob") == 3
    assert w2.dedup.last_persisted("carol") == 0
    assert w2.dedup.is_duplicate("bob", 3) and not w2.dedup.is_duplicate("bob", 4)
    assert not w2.dedup.is_duplicate("bob", 0)
    w2.close()
    snapshot = Path(make_config().journal_directory) / "inst-a.clients.ack"
    assert snapshot.exists()
    w3 = open_writer()
    assert (w3.dedup.last_persisted("alice"), w3.dedup.last_persisted("bob")) == (6, 3)


def test_dedup_snapshot_plus_later_records(open_writer: Callable[..., JournalWriter]) -> None:
    pub = client_name_hash("p")
    w = open_writer()
    for s in range(1, 150):  # several rotations write snapshots
        w.append("publish", "t", b"q" * 20_000, publisher=(pub, s))
        w.sync()
    w.append("publish", "t", b"q", publisher=(pub, 150))
    w.sync()  # no close: the snapshot is older than the last record
    _crash(w)
    w2 = open_writer()
    assert w2.dedup.last_persisted("p") == 150


def test_concurrent_append_and_sync(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    done = threading.Event()
    durable: list[int] = []

    def syncer() -> None:
        while not done.is_set():
            durable.append(w.sync())
        durable.append(w.sync())

    thread = threading.Thread(target=syncer)
    thread.start()
    for i in range(20_000):
        w.append("publish", "t", b"%d" % i)
    done.set()
    thread.join()
    assert durable == sorted(durable) and durable[-1] == 20_000
    assert _all(w) == list(range(1, 20_001))


def test_closed_writer_refuses_appends(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    w.close()
    w.close()
    with pytest.raises(JournalError, match="not open"):
        w.append("publish", "t", b"")


def test_timestamps_never_decrease(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    w.append("publish", "t", b"", timestamp_ns=2_000)
    w.append("publish", "t", b"", timestamp_ns=1_000)
    w.sync()
    assert [r.timestamp_ns for r in w.reader().records()] == [2_000, 2_000]


def test_statistics_counts_files_and_bytes(open_writer: Callable[..., JournalWriter]) -> None:
    w = open_writer()
    w.append("publish", "t", b"abc")
    w.sync()
    stats = w.statistics()
    assert stats.files.current == 1 and stats.files.preallocated == 1
    assert stats.bytes_on_disk == stats.appended_bytes == os.path.getsize(stats.current_file)
    assert stats.last_sequence == stats.durable_sequence == 1
