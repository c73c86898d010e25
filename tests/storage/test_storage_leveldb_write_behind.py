"""Large logged puts are written by a thread of their own (issue 34): a 50 MB LevelDB put held the event loop 80-135
ms. Real LevelDB files; the thread is held at a gate while the test looks, so "pending" is a fact, not a race."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plyvel
import pytest

from broker.errors import StorageError
from broker.sow.deferred import DeferredValue
from broker.sow.record import SowRecord
from broker.sow.storage import StorageSpec
from broker_plugins.storage.leveldb import LevelDBStorage
from broker_plugins.storage.write_behind import LARGE_VALUE

BIG = b"B" * (LARGE_VALUE + 1)
BIGGER = b"C" * (LARGE_VALUE * 3)


class Gate:
    """Holds the storage's write-behind thread before each batch it applies until :meth:`open`; records the thread
    that applied each batch (what the storage's ``_apply_behind`` is handed)."""

    def __init__(self, storage: LevelDBStorage) -> None:
        self.opened = threading.Event()
        self.reached = threading.Event()
        self.batches: list[tuple[str, dict[bytes, Any]]] = []
        self._real = storage._apply_behind
        storage._apply_behind = self._apply  # type: ignore[method-assign]

    def _apply(self, batch: dict[bytes, Any]) -> None:
        self.reached.set()
        assert self.opened.wait(20), "the test never opened the gate"
        self.batches.append((threading.current_thread().name, dict(batch)))
        self._real(batch)

    def open(self) -> None:
        self.opened.set()


def _open(path: Path) -> LevelDBStorage:
    return LevelDBStorage(StorageSpec(topic="t", path=str(path)))


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[LevelDBStorage]:
    store = _open(tmp_path / "db")
    yield store
    store.close()


def _in_file(storage: LevelDBStorage, key: bytes) -> bytes | None:
    """What LevelDB itself holds under ``key`` (not the pending writes)."""
    db: Any = storage._db
    value: bytes | None = db.get(key)
    return value


def test_a_large_logged_put_is_written_by_the_thread_and_read_at_once(storage: LevelDBStorage, tmp_path: Path) -> None:
    storage.write_puts([(b"a", b"small")], 1)
    gate = Gate(storage)
    storage.write_logged_puts([(b"b", BIG)], 1)  # returns with the thread held at the gate
    assert gate.reached.wait(20)
    assert _in_file(storage, b"b") is None  # not in LevelDB yet ...
    assert storage.get(b"b") == BIG  # ... but every read sees it
    assert storage.count() == 2
    assert list(storage.scan()) == [(b"a", b"small"), (b"b", BIG)]
    assert list(storage.scan(b"b", b"c")) == [(b"b", BIG)]
    with storage.snapshot() as snap:
        assert snap.get(b"b") == BIG
        assert list(snap.scan()) == [(b"a", b"small"), (b"b", BIG)]
        assert snap.first(b"b", b"z") == (b"b", BIG)
        gate.open()
        storage.make_durable()  # waits for the thread
        storage.write_puts([(b"b", b"later")], 0)
        assert snap.get(b"b") == BIG  # a snapshot is not moved by later writes
    assert [name for name, _batch in gate.batches] == ["leveldb-write-behind-t"]
    assert _in_file(storage, b"b") == b"later"
    storage.close()
    again = _open(tmp_path / "db")
    try:
        assert again.get(b"b") == b"later" and again.count() == 2
    finally:
        again.close()


def test_later_writes_of_a_pending_key_land_after_it(storage: LevelDBStorage, tmp_path: Path) -> None:
    gate = Gate(storage)
    storage.write_logged_puts([(b"k", BIG), (b"m", b"m1")], 2)
    assert gate.reached.wait(20)  # the thread holds the first batch
    storage.write_puts([(b"k", b"small")], 0)  # queued behind it: not written before it
    storage.write_known([(b"n", b"n1")], [b"m"], {})  # a put and a delete, together
    storage.write_logged_puts([(b"p", BIGGER)], 1)
    storage.write(deletes=[b"p"])  # a large put then a delete of its key
    assert storage.get(b"k") == b"small" and storage.get(b"m") is None and storage.get(b"p") is None
    assert dict(storage.scan()) == {b"k": b"small", b"n": b"n1"}
    assert storage.count() == 2
    assert _in_file(storage, b"k") is None
    gate.open()
    storage.close()
    again = _open(tmp_path / "db")
    try:
        assert dict(again.scan()) == {b"k": b"small", b"n": b"n1"} and again.count() == 2
    finally:
        again.close()
    # The first batch was the large put alone; what came while it was held was coalesced into the second.
    assert len(gate.batches) == 2
    assert gate.batches[1][1] == {b"k": b"small", b"n": b"n1", b"m": None, b"p": None}


def test_puts_the_journal_does_not_cover_stay_on_the_callers_thread(storage: LevelDBStorage) -> None:
    storage.write_puts([(b"b", BIG), (b"c", b"c")], 2)  # a topic without a transaction log
    storage.write_known([(b"d", BIG)], (), {})
    assert _in_file(storage, b"b") == BIG and _in_file(storage, b"d") == BIG
    assert storage.statistics()["write_behind_batches"] == 0


def test_a_failed_write_stays_pending_and_visible_until_the_reopen(storage: LevelDBStorage,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real = storage._apply_behind
    failures = [plyvel.IOError(b"IO error: No space left on device")]

    def apply(batch: dict[bytes, bytes | None]) -> None:
        if failures:
            raise failures.pop()
        real(batch)

    monkeypatch.setattr(storage, "_apply_behind", apply)
    storage.write_logged_puts([(b"b", BIG)], 1)
    storage._behind.wait_idle()  # type: ignore[union-attr]
    assert storage.get(b"b") == BIG and storage.count() == 1  # kept, visible
    with pytest.raises(StorageError):  # refused while the database is not writable, as after any failed write
        storage.write_puts([(b"c", b"c")], 1)
    with pytest.raises(StorageError, match="pending writes failed"):
        storage.make_durable()
    storage._next_try = 0.0
    assert storage.writable()  # reopened: the pending write is handed back
    storage.make_durable()
    assert _in_file(storage, b"b") == BIG and storage.count() == 1


def test_a_deferred_value_is_joined_by_the_thread_and_read_as_bytes(storage: LevelDBStorage, tmp_path: Path) -> None:
    record = SowRecord("k", b"D" * (LARGE_VALUE + 5), 7, 3, 0, "abc|3|", "cid")
    deferred = DeferredValue.of(record)
    assert deferred is not None and len(deferred) == len(record.encode())
    gate = Gate(storage)
    storage.write_logged_puts([(b"k", deferred)], 1)
    assert gate.reached.wait(20)
    assert "not joined" in repr(deferred)  # the caller copied nothing
    with storage.snapshot() as snap:  # a reader before the thread joins it gets the bytes
        assert snap.get(b"k") == record.encode() and list(snap.scan()) == [(b"k", record.encode())]
    gate.open()
    storage.make_durable()
    assert _in_file(storage, b"k") == record.encode()
    assert storage.get(b"k") == record.encode()
    storage.close()
    again = _open(tmp_path / "db")
    try:
        assert SowRecord.decode("k", again.get(b"k") or b"") == record
    finally:
        again.close()


def test_a_deferred_value_is_joined_by_the_thread_when_nobody_reads_it_first(storage: LevelDBStorage) -> None:
    deferred = DeferredValue.of(SowRecord("k", b"D" * (LARGE_VALUE + 5), 7))
    assert deferred is not None
    gate = Gate(storage)
    storage.write_logged_puts([(b"k", deferred)], 1)
    gate.open()
    storage.make_durable()
    assert "joined" in repr(deferred) and "not joined" not in repr(deferred)
    assert gate.batches[0][0] == "leveldb-write-behind-t"
