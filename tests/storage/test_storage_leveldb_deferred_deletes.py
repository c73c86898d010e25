"""The leveldb engine frees obsolete files outside LevelDB's lock (broker_plugins.storage.deferred_deletes).

LevelDB 1.22 deletes the tables a compaction made obsolete while it holds the database's mutex, which every
write needs; the engine keeps a second hard link to each table and log file, so that delete only drops a link,
and a thread of its own frees the data afterwards. These tests make LevelDB compact real databases on disk and
check what a user would: every file LevelDB dropped is freed by that thread (no space is kept), the records
are intact, nothing is left after a close or a crash, and a file system without hard links still works.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from broker.sow.storage import StorageSpec
from broker_plugins.storage import deferred_deletes
from broker_plugins.storage.deferred_deletes import HOLD_DIR, DeferredDeletes
from broker_plugins.storage.leveldb import BACKGROUND_NICE, LevelDBStorage

#: A small memtable, so a few thousand records make many tables and compactions.
SMALL = {"write_buffer_size": "64KB"}


def _open(path: Path) -> LevelDBStorage:
    return LevelDBStorage(StorageSpec(topic="orders", path=str(path), options=SMALL))


def _fill(store: LevelDBStorage, rounds: int = 6, keys: int = 3000) -> dict[bytes, bytes]:
    """Rewrite ``keys`` records ``rounds`` times (each round obsoletes the tables of the one before)."""
    latest: dict[bytes, bytes] = {}
    for r in range(rounds):
        puts = [(b"key-%06d" % i, b"round %d of record %d " % (r, i) + b"x" * 200) for i in range(keys)]
        for start in range(0, keys, 500):
            store.write(puts=puts[start:start + 500])
        latest.update(puts)
    store.compact()
    return latest


def _filled_and_closed(path: Path, rounds: int) -> dict[bytes, bytes]:
    """A database at ``path`` after :func:`_fill`, closed; returns its records."""
    store = _open(path)
    try:
        return _fill(store, rounds=rounds)
    finally:
        store.close()


def _settled(store: LevelDBStorage, timeout: float = 10.0) -> None:
    """Wait until the thread has freed every file LevelDB dropped (each link in the hold directory is a file
    LevelDB still has)."""
    deadline = time.monotonic() + timeout
    hold = Path(store.path) / HOLD_DIR
    while True:
        DeferredDeletes.sweep_now()
        orphans = [p.name for p in hold.iterdir() if not (Path(store.path) / p.name).exists()]
        # A background compaction may make a table after a pass: settled is also every file held.
        unheld = [p.name for p in Path(store.path).iterdir()
                  if p.suffix in (".ldb", ".sst", ".log") and not (hold / p.name).exists()]
        if not orphans and not unheld:
            return
        assert time.monotonic() < deadline, f"files LevelDB deleted are still held: {orphans}; not held: {unheld}"
        time.sleep(0.02)


def test_files_leveldb_drops_are_freed_by_the_thread_and_records_stay_intact(tmp_path: Path) -> None:
    store = _open(tmp_path / "orders.sow")
    try:
        latest = _fill(store)
        _settled(store)
        held = store._held
        assert held is not None
        # LevelDB deleted held files (compactions obsoleted tables, flushes their logs): each delete dropped one
        # link, and the thread freed the data.
        assert held.freed > 0 and held.freed_bytes > 0
        tables = [p for p in Path(store.path).iterdir() if p.suffix in (".ldb", ".sst", ".log")]
        assert tables
        for table in tables:  # what LevelDB has now is held: its delete will be a link's
            assert table.stat().st_nlink == 2, table
            assert (Path(store.path) / HOLD_DIR / table.name).samefile(table)
        assert store.count() == len(latest)
        for key, value in latest.items():
            assert store.get(key) == value
    finally:
        store.close()


def test_close_leaves_no_links_and_the_database_reopens_whole(tmp_path: Path) -> None:
    path = tmp_path / "orders.sow"
    latest = _filled_and_closed(path, rounds=3)
    assert not (path / HOLD_DIR).exists()
    assert all(p.stat().st_nlink == 1 for p in path.iterdir() if p.is_file())
    again = _open(path)
    try:
        assert again.count() == len(latest)
        assert dict(again.scan()) == latest
    finally:
        again.close()


def test_links_left_by_a_crash_are_removed_at_open(tmp_path: Path) -> None:
    path = tmp_path / "orders.sow"
    latest = _filled_and_closed(path, rounds=2)
    # What a kill -9 leaves: links to files LevelDB still has, and a link whose file LevelDB deleted.
    hold = path / HOLD_DIR
    hold.mkdir()
    table = next(p for p in path.iterdir() if p.suffix == ".ldb")
    os.link(table, hold / table.name)
    (hold / "000001.ldb").write_bytes(b"a table a compaction made obsolete" * 1000)
    again = _open(path)
    try:
        assert not (hold / "000001.ldb").exists()
        assert {p.name for p in hold.iterdir()} <= {p.name for p in path.iterdir()}
        assert table.stat().st_nlink == 2  # held again, once
        assert dict(again.scan()) == latest
    finally:
        again.close()


def test_without_hard_links_leveldb_deletes_its_files_itself(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: str, dst: str) -> None:
        raise PermissionError(1, "Operation not permitted", dst)

    monkeypatch.setattr(deferred_deletes.os, "link", no_links)
    store = _open(tmp_path / "orders.sow")
    try:
        latest = _fill(store, rounds=3)
        assert not (Path(store.path) / HOLD_DIR).exists()
        assert store.count() == len(latest)
        assert dict(store.scan()) == latest
    finally:
        store.close()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread priorities are read from Linux's /proc")
def test_the_thread_runs_below_the_event_loop(tmp_path: Path) -> None:
    store = _open(tmp_path / "orders.sow")
    try:
        thread = DeferredDeletes._thread
        assert thread is not None and thread.is_alive() and thread.native_id is not None
        deadline = time.monotonic() + 5
        while os.getpriority(os.PRIO_PROCESS, thread.native_id) == os.getpriority(os.PRIO_PROCESS, os.getpid()):
            assert time.monotonic() < deadline, "the thread kept the event loop's priority"
            time.sleep(0.01)
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == min(
            19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + BACKGROUND_NICE)
    finally:
        store.close()


def test_an_unchanged_directory_is_not_listed_again_and_a_change_is_seen(tmp_path: Path) -> None:
    """An idle database costs the thread a ``stat`` a pass; a file made or deleted later is still held or freed."""
    db = tmp_path / "orders.sow"
    db.mkdir()
    (db / "000005.ldb").write_bytes(b"t" * 1000)
    (db / HOLD_DIR).mkdir()
    held = deferred_deletes.Held(str(db))
    held.sweep()
    assert held.names == {"000005.ldb"} and held.listings == 1
    time.sleep(0.1)  # past the coarse file clock's margin: this listing settles the directory's time
    held.sweep()
    assert held.listings == 2
    for _ in range(3):
        held.sweep()
    assert held.listings == 2  # unchanged: not listed
    (db / "000007.log").write_bytes(b"l" * 100)
    (db / "000005.ldb").unlink()  # LevelDB deleting a table: our link is the last one
    held.sweep()
    assert held.listings == 3
    assert held.names == {"000007.log"} and held.freed == 1 and held.freed_bytes == 1000
    assert not (db / HOLD_DIR / "000005.ldb").exists() and (db / HOLD_DIR / "000007.log").exists()
    held._release()
