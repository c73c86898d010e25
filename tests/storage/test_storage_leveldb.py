"""The leveldb engine: the conformance suite plus locking, options and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.options import OptionError
from broker.sow.storage import StorageSpec
from broker.testing import StorageConformance
from broker_plugins.storage.leveldb import OPTIONS, LevelDBStorage


class TestLevelDBStorage(StorageConformance):
    durable = True

    def make_storage(self, path: Path) -> LevelDBStorage:
        return LevelDBStorage(StorageSpec(topic="orders", path=str(path)))


class TestLevelDBStorageSync(StorageConformance):
    """The same contract with fsync'd write batches."""

    durable = True
    many = 2_000  # sync writes are slow on some disks; the bulk test writes in 1000-record batches anyway

    def make_storage(self, path: Path) -> LevelDBStorage:
        return LevelDBStorage(StorageSpec(topic="orders", path=str(path), options={"sync": "true"}))


def test_creates_missing_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "orders.sow"
    store = LevelDBStorage(StorageSpec(topic="orders", path=str(path)))
    store.write(puts=[(b"k", b"v")])
    store.close()
    assert path.is_dir()


def test_second_open_of_same_path_names_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "orders.sow"
    first = LevelDBStorage(StorageSpec(topic="orders", path=str(path)))
    try:
        with pytest.raises(StorageError, match="another broker holds the lock on") as info:
            LevelDBStorage(StorageSpec(topic="orders", path=str(path)))
        assert str(path) in str(info.value)
    finally:
        first.close()
    LevelDBStorage(StorageSpec(topic="orders", path=str(path))).close()  # lock released by close()


def test_count_is_restored_at_open(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    store = LevelDBStorage(StorageSpec(topic="t", path=path))
    store.write(puts=[(b"%d" % i, b"v") for i in range(123)])
    store.close()
    reopened = LevelDBStorage(StorageSpec(topic="t", path=path))
    assert reopened.count() == 123
    reopened.write(puts=[(b"0", b"again"), (b"new", b"v")], deletes=[b"1"])
    assert reopened.count() == 123
    reopened.close()


def test_requires_a_path() -> None:
    with pytest.raises(StorageError, match="FileName"):
        LevelDBStorage(StorageSpec(topic="orders"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sync": "maybe"}, r"option <sync>: 'maybe' is not a boolean"),
        ({"compression": "zstd"}, r"option <compression>: 'zstd' is not one of none, snappy"),
        ({"write_buffer_size": "lots"}, r"option <write_buffer_size>: 'lots' is not a size"),
        ({"write_buffer_size": "0"}, r"option <write_buffer_size>: '0' must be a positive size"),
        ({"cache": "1"}, r"unknown option <cache> \(accepted: sync, compression, write_buffer_size"),
        ({"bloom_filter_bits": "-3"}, r"option <bloom_filter_bits>: -3 is negative"),
    ],
)
def test_bad_options_name_the_engine_the_topic_and_the_option(tmp_path: Path, options: dict[str, str],
                                                              message: str) -> None:
    with pytest.raises(OptionError, match=message) as info:
        LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t"), options=options))
    assert str(info.value).startswith("storage engine 'leveldb' of topic 't'")
    assert not (tmp_path / "t").exists()  # refused before anything is created


def test_accepts_tuning_options(tmp_path: Path) -> None:
    store = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t"), options={
        "compression": "none", "write_buffer_size": "1048576", "lru_cache_size": "1048576",
        "bloom_filter_bits": "0"}))
    store.write(puts=[(b"k", b"v")])
    assert store.get(b"k") == b"v"
    store.close()


def test_sizes_take_amps_units(tmp_path: Path) -> None:
    store = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t"), options={
        "sync": "true", "compression": "snappy", "write_buffer_size": "4MB", "lru_cache_size": "32MB",
        "bloom_filter_bits": "12"}))
    assert store.sync is True
    store.write(puts=[(b"k", b"v" * 1000)])
    store.close()
    reopened = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t")))  # other options, same data
    assert reopened.get(b"k") == b"v" * 1000 and reopened.sync is False
    reopened.close()


def test_declared_options_are_what_the_engine_parses() -> None:
    """broker check validates against the registration's OptionSet: it must be the one the engine uses."""
    from broker.plugins import build_plugin_manager

    registration = build_plugin_manager().storage_engines.registration("leveldb")
    assert registration.options is OPTIONS
    assert OPTIONS.parse({}, owner="leveldb") == {
        "sync": False, "compression": "none", "write_buffer_size": 16 * 1024 * 1024, "lru_cache_size": None,
        "bloom_filter_bits": 10}


def test_count_stays_exact_when_writes_follow_reads_of_other_keys(tmp_path: Path) -> None:
    """The remembered outcome of the last read applies only to that key, and only until a write."""
    store = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t")))
    assert store.get(b"a") is None
    store.write(puts=[(b"a", b"1")])  # insert after reading it: +1
    assert store.count() == 1
    assert store.get(b"a") == b"1"
    store.write(puts=[(b"a", b"2")])  # update after reading it: +0
    assert store.count() == 1
    assert store.get(b"a") == b"2"
    store.write(puts=[(b"b", b"1")])  # a different key than the one read: +1
    store.write(puts=[(b"a", b"3")])  # the read of a is stale now (a write came between): still +0
    assert store.count() == 2
    assert store.get(b"c") is None
    store.write(deletes=[b"a"])  # a delete of another key after a miss on c: -1
    store.write(puts=[(b"c", b"1")])  # the miss on c is stale: still counted correctly, +1
    assert store.count() == 2
    assert store.get(b"b") == b"1"
    store.write(puts=[(b"b", b"2"), (b"d", b"1")], deletes=[b"c"])  # batch: +1 -1
    assert store.count() == 2
    assert sorted(k for k, _ in store.scan()) == [b"b", b"d"]
    store.close()
    reopened = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t")))
    assert reopened.count() == 2
    reopened.close()


def test_snapshot_outliving_close_raises_storage_error(tmp_path: Path) -> None:
    store = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t")))
    store.write(puts=[(b"k", b"v")])
    snap = store.snapshot()
    store.close()
    with pytest.raises(StorageError, match="closed"):
        snap.get(b"k")
    snap.close()


def test_path_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError, match="file"):
        LevelDBStorage(StorageSpec(topic="t", path=str(blocker / "db")))



_BACKGROUND_PROBE = r"""
import os, sys
from broker.sow.storage import StorageSpec
from broker_plugins.storage.leveldb import LevelDBStorage

def threads():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[int(tid)] = (int(fields[16]), int(fields[11]) + int(fields[12]))  # nice, utime + stime (ticks)
    return out

main = os.getpid()
nice_before = os.getpriority(os.PRIO_PROCESS, main)
store = LevelDBStorage(StorageSpec(topic="t", path=sys.argv[1]))
before = threads()
for n in range(8):  # memtable flushes and compactions: the work of LevelDB's background thread
    store.write(puts=[(b"%08d" % (i * 7919 % 200_000), b"x" * 200) for i in range(n * 25_000, (n + 1) * 25_000)])
    store._db.compact_range()
after = threads()
store.close()
print(nice_before, after[main][0], *[f"{tid}:{after[tid][0]}:{after[tid][1] - before.get(tid, (0, 0))[1]}"
                                     for tid in after if tid != main])
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread priorities are read from Linux's /proc")
def test_leveldb_background_thread_runs_below_the_event_loop(tmp_path: Path) -> None:
    """LevelDB's compactions run on a thread niced below the event loop's, which keeps its priority (in a fresh
    process, as in the broker)."""
    import subprocess
    import sys

    from broker_plugins.storage.leveldb import BACKGROUND_NICE

    out = subprocess.run([sys.executable, "-c", _BACKGROUND_PROBE, str(tmp_path / "t")], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    nice_before, main_nice = int(out[0]), int(out[1])
    others = [tuple(map(int, item.split(":"))) for item in out[2:]]
    assert main_nice == nice_before
    worker = max(others, key=lambda t: t[2])  # the thread that did the compactions' work
    assert worker[2] > 0, others
    assert worker[1] == min(19, nice_before + BACKGROUND_NICE), others
