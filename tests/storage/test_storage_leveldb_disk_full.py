"""LevelDB on a full disk: a real small tmpfs fills up, writes fail (and keep failing, LevelDB latches the
error), reads go on, and once space is freed the storage reopens itself and writes again, with every write
that succeeded kept and the failed one not applied."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.sow.storage import StorageSpec
from broker.testing.disk import small_tmpfs
from broker_plugins.storage import leveldb
from broker_plugins.storage.leveldb import LevelDBStorage


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs root; skipped with the reason when mount is refused)."""
    with small_tmpfs(tmp_path / "disk", "4m") as disk:
        yield disk


def _fill(store: LevelDBStorage) -> tuple[dict[bytes, bytes], bytes]:
    """Write 1 KB records until the disk is full: the records written, and the key whose write failed."""
    written: dict[bytes, bytes] = {}
    for i in range(100_000):
        key, value = b"k%06d" % i, os.urandom(1000)
        try:
            store.write(puts=[(key, value)])
        except StorageError as exc:
            assert "No space left" in str(exc)
            return written, key
        written[key] = value
    raise AssertionError("the disk never filled up")


def test_writes_resume_by_themselves_when_space_returns(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leveldb, "RECOVER_BACKOFF", (0.0, 0.0))  # no waiting between attempts in a test
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 1_500_000)
    store = LevelDBStorage(StorageSpec(topic="orders", path=str(small_disk / "orders.sow"),
                                       options={"write_buffer_size": "256KB"}))
    written, failed = _fill(store)
    assert len(written) > 500 and store.count() == len(written)
    # Still full: writes fail at once, without reopening; reads go on from the open database.
    for _ in range(3):
        with pytest.raises(StorageError, match="cannot be written since a write failed"):
            store.write(puts=[(b"small", b"v")])
    assert not store.writable() and store.reopens == 0
    some = next(iter(written))
    assert store.get(some) == written[some] and store.get(failed) is None
    filler.unlink()  # space returns
    assert store.writable() and store.reopens == 1
    store.write(puts=[(b"after", b"v")])
    assert store.count() == len(written) + 1 and store.get(failed) is None
    store.close()
    again = LevelDBStorage(StorageSpec(topic="orders", path=str(small_disk / "orders.sow")))
    try:
        assert again.count() == len(written) + 1
        assert dict(again.scan()) == {**written, b"after": b"v"}  # nothing half-written, nothing lost
    finally:
        again.close()


def test_the_failed_state_is_left_by_the_next_write_after_the_back_off(
        small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 1_500_000)
    store = LevelDBStorage(StorageSpec(topic="orders", path=str(small_disk / "orders.sow"),
                                       options={"write_buffer_size": "256KB"}))
    written, _failed = _fill(store)
    filler.unlink()
    now = [leveldb.time.monotonic()]
    monkeypatch.setattr(leveldb.time, "monotonic", lambda: now[0])
    with pytest.raises(StorageError):  # within the back-off: not tried yet
        store.write(puts=[(b"x", b"v")])
    now[0] += leveldb.RECOVER_BACKOFF[1]
    store.write(puts=[(b"x", b"v")])  # reopens, then writes
    assert store.reopens == 1 and store.count() == len(written) + 1
    store.close()
