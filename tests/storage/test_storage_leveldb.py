"""The leveldb engine: the conformance suite plus locking, options and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.sow.storage import StorageSpec
from broker.testing import StorageConformance
from broker_plugins.storage.leveldb import LevelDBStorage


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
        ({"sync": "maybe"}, "sync='maybe'"),
        ({"compression": "zstd"}, "snappy or none"),
        ({"write_buffer_size": "lots"}, "positive byte count"),
        ({"cache": "1"}, "Known options: sync"),
        ({"bloom_filter_bits": "-3"}, "bloom_filter_bits='-3'"),
    ],
)
def test_bad_options_are_named(tmp_path: Path, options: dict[str, str], message: str) -> None:
    with pytest.raises(StorageError, match=message):
        LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t"), options=options))


def test_accepts_tuning_options(tmp_path: Path) -> None:
    store = LevelDBStorage(StorageSpec(topic="t", path=str(tmp_path / "t"), options={
        "compression": "none", "write_buffer_size": "1048576", "lru_cache_size": "1048576",
        "bloom_filter_bits": "0"}))
    store.write(puts=[(b"k", b"v")])
    assert store.get(b"k") == b"v"
    store.close()


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
