"""A conformance suite for storage engines (:class:`broker.sow.storage.Storage`).

Subclass :class:`StorageConformance` in a test module, implement :meth:`~StorageConformance.make_storage`,
and pytest runs every contract test against your engine::

    from broker.testing import StorageConformance
    from my_plugin import MyStorage

    class TestMyStorage(StorageConformance):
        durable = True  # data survives close() + reopen at the same path

        def make_storage(self, path):
            return MyStorage(StorageSpec(topic="t", path=str(path)))

Every test gets a fresh directory; durable engines are reopened at the same path to check persistence.

The ``test_versions_*`` tests run :class:`broker.sow.history.History` (a topic's past versions, kept in a second
storage of the same engine for ``<History>``) over the engine: points in time around updates and deletes,
Granularity, Window pruning in bounded slices that keeps the current state, a point-in-time read that costs in
proportion to the keys it returns (not to the versions kept), and, for durable engines, versions surviving a
reopen. They use only the :class:`Storage` methods, so an engine passes them when its ordered scans are right.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.errors import StorageError
from broker.sow.storage import Storage
from broker.testing.storage_versions import VersionConformance

__all__ = ["StorageConformance"]


class StorageConformance(VersionConformance):
    """The contract every storage engine passes. Subclass it in a ``Test*`` class.

    Attributes:
        durable: ``True`` when records survive :meth:`Storage.close` and reopening at the same path.
        many: How many records the bulk test writes.
    """

    durable: bool = False
    many: int = 10_000

    def make_storage(self, path: Path) -> Storage:
        """Open the engine under test at ``path`` (a directory path that may not exist yet).

        Called again with the same path by the persistence test after the first storage was closed.
        """
        raise NotImplementedError("subclasses of StorageConformance implement make_storage(path)")

    # -- fixtures --------------------------------------------------------------------------------------
    @pytest.fixture
    def storage_path(self, tmp_path: Path) -> Path:
        """Where the storage under test lives."""
        return tmp_path / "store"

    @pytest.fixture
    def storage(self, storage_path: Path) -> Iterator[Storage]:
        """A fresh, empty storage; closed after the test."""
        store = self.make_storage(storage_path)
        try:
            yield store
        finally:
            store.close()

    # -- point reads and writes ------------------------------------------------------------------------
    def test_starts_empty(self, storage: Storage) -> None:
        assert storage.count() == 0
        assert storage.get(b"missing") is None
        assert list(storage.scan()) == []

    def test_put_then_get(self, storage: Storage) -> None:
        storage.write(puts=[(b"k1", b"v1"), (b"k2", b"")])
        assert storage.get(b"k1") == b"v1"
        assert storage.get(b"k2") == b""  # an empty value is a value, not a missing record
        assert storage.get(b"k3") is None
        assert storage.count() == 2

    def test_put_replaces_value(self, storage: Storage) -> None:
        storage.write(puts=[(b"k", b"old")])
        storage.write(puts=[(b"k", b"new")])
        assert storage.get(b"k") == b"new"
        assert storage.count() == 1

    def test_delete(self, storage: Storage) -> None:
        storage.write(puts=[(b"a", b"1"), (b"b", b"2")])
        storage.write(deletes=[b"a", b"never-existed"])
        assert storage.get(b"a") is None
        assert storage.get(b"b") == b"2"
        assert storage.count() == 1

    def test_puts_apply_before_deletes(self, storage: Storage) -> None:
        storage.write(puts=[(b"x", b"1"), (b"y", b"2")], deletes=[b"x"])
        assert storage.get(b"x") is None
        assert storage.get(b"y") == b"2"
        assert storage.count() == 1

    def test_last_put_of_a_key_in_one_batch_wins(self, storage: Storage) -> None:
        storage.write(puts=[(b"k", b"1"), (b"k", b"2")])
        assert storage.get(b"k") == b"2"
        assert storage.count() == 1

    def test_reinsert_after_delete(self, storage: Storage) -> None:
        storage.write(puts=[(b"k", b"1")])
        storage.write(deletes=[b"k"])
        storage.write(puts=[(b"k", b"2")])
        assert storage.get(b"k") == b"2"
        assert [k for k, _ in storage.scan()] == [b"k"]
        assert storage.count() == 1

    def test_write_accepts_generators(self, storage: Storage) -> None:
        storage.write(puts=((bytes([i]), b"v") for i in range(5)), deletes=(k for k in [b"\x01"]))
        assert storage.count() == 4

    # -- atomicity -------------------------------------------------------------------------------------
    def test_failing_batch_changes_nothing(self, storage: Storage) -> None:
        storage.write(puts=[(b"keep", b"1")])

        def deletes() -> Iterator[bytes]:
            yield b"keep"
            raise RuntimeError("the caller failed half way through the batch")

        with pytest.raises(RuntimeError):
            storage.write(puts=[(b"new", b"2")], deletes=deletes())
        assert storage.get(b"keep") == b"1"
        assert storage.get(b"new") is None
        assert storage.count() == 1

    def test_non_bytes_rejected_without_partial_write(self, storage: Storage) -> None:
        with pytest.raises((TypeError, StorageError)):
            storage.write(puts=[(b"ok", b"1"), (b"bad", "not bytes")])  # type: ignore[list-item]
        assert storage.get(b"ok") is None
        assert storage.count() == 0

    # -- ordered scans ---------------------------------------------------------------------------------
    def test_scan_is_bytewise_ordered(self, storage: Storage) -> None:
        keys = [b"b", b"\xff", b"a", b"ab", b"\x00", b"B", b"a\x00"]
        storage.write(puts=[(k, k + b"!") for k in keys])
        assert list(storage.scan()) == [(k, k + b"!") for k in sorted(keys)]

    def test_scan_start_inclusive_stop_exclusive(self, storage: Storage) -> None:
        storage.write(puts=[(k, b"v") for k in (b"a", b"b", b"c", b"d")])
        assert [k for k, _ in storage.scan(b"b", b"d")] == [b"b", b"c"]
        assert [k for k, _ in storage.scan(start=b"bb")] == [b"c", b"d"]
        assert [k for k, _ in storage.scan(stop=b"b")] == [b"a"]
        assert list(storage.scan(b"x", b"z")) == []
        assert list(storage.scan(b"c", b"c")) == []

    def test_scan_sees_adds_and_deletes_in_order(self, storage: Storage) -> None:
        storage.write(puts=[(b"%03d" % i, b"v") for i in range(0, 100, 2)])
        assert len(list(storage.scan())) == 50
        storage.write(puts=[(b"%03d" % i, b"v") for i in range(1, 100, 2)], deletes=[b"%03d" % i for i in range(0, 100, 4)])
        expected = [b"%03d" % i for i in range(100) if i % 4]
        assert [k for k, _ in storage.scan()] == expected

    def test_scan_in_progress_is_not_disturbed_by_writes(self, storage: Storage) -> None:
        storage.write(puts=[(b"%02d" % i, b"old") for i in range(10)])
        scan = storage.scan()
        first = next(scan)
        storage.write(puts=[(b"%02d" % i, b"new") for i in range(10)] + [(b"99", b"new")], deletes=[b"05"])
        rest = list(scan)
        assert first == (b"00", b"old")
        assert [k for k, _ in rest] == [b"%02d" % i for i in range(1, 10)]
        assert {v for _, v in rest} == {b"old"}

    # -- snapshots -------------------------------------------------------------------------------------
    def test_snapshot_isolated_from_later_writes(self, storage: Storage) -> None:
        storage.write(puts=[(b"a", b"1"), (b"b", b"2")])
        with storage.snapshot() as snap:
            storage.write(puts=[(b"a", b"changed"), (b"c", b"3")], deletes=[b"b"])
            assert snap.get(b"a") == b"1"
            assert snap.get(b"b") == b"2"
            assert snap.get(b"c") is None
            assert list(snap.scan()) == [(b"a", b"1"), (b"b", b"2")]
            assert list(snap.scan(start=b"b")) == [(b"b", b"2")]
        assert storage.get(b"a") == b"changed"
        assert [k for k, _ in storage.scan()] == [b"a", b"c"]

    def test_two_snapshots_see_their_own_instant(self, storage: Storage) -> None:
        storage.write(puts=[(b"k", b"1")])
        first = storage.snapshot()
        storage.write(puts=[(b"k", b"2")])
        second = storage.snapshot()
        storage.write(puts=[(b"k", b"3")])
        try:
            assert first.get(b"k") == b"1"
            assert second.get(b"k") == b"2"
            assert storage.get(b"k") == b"3"
        finally:
            first.close()
            second.close()

    def test_snapshot_close_is_idempotent(self, storage: Storage) -> None:
        snap = storage.snapshot()
        snap.close()
        snap.close()
        storage.write(puts=[(b"k", b"v")])  # the storage carries on after its snapshots close
        assert storage.get(b"k") == b"v"

    def test_closed_snapshot_cannot_be_read(self, storage: Storage) -> None:
        snap = storage.snapshot()
        snap.close()
        with pytest.raises(StorageError):
            snap.get(b"k")

    # -- count, compact, close -------------------------------------------------------------------------
    def test_count_tracks_inserts_updates_and_deletes(self, storage: Storage) -> None:
        storage.write(puts=[(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
        storage.write(puts=[(b"a", b"2"), (b"d", b"1")], deletes=[b"b", b"zz"])
        assert storage.count() == 3
        assert storage.statistics()["records"] == 3

    def test_write_puts_keeps_the_records_and_the_count(self, storage: Storage) -> None:
        """``write_puts`` (a batch of publishes, told how many of its distinct keys are new) stores what
        ``write`` stores, the last put of a key winning, and counts exactly that many new records."""
        storage.write(puts=[(b"a", b"1")])
        storage.write_puts([(b"a", b"2"), (b"b", b"1"), (b"b", b"2")], new_keys=1)
        storage.write_puts([(b"c", b"1")], new_keys=1)
        storage.write_puts([(b"c", b"2")], new_keys=0)
        assert [storage.get(k) for k in (b"a", b"b", b"c")] == [b"2", b"2", b"2"]
        assert storage.count() == 3

    def test_compact_keeps_records(self, storage: Storage) -> None:
        storage.write(puts=[(b"%04d" % i, b"x" * 100) for i in range(500)])
        storage.write(deletes=[b"%04d" % i for i in range(0, 500, 2)])
        storage.compact()
        assert storage.count() == 250
        assert storage.get(b"0001") == b"x" * 100

    def test_a_healthy_store_is_writable(self, storage: Storage) -> None:
        assert storage.writable()
        storage.write(puts=[(b"k", b"v")])
        assert storage.writable()

    def test_close_is_idempotent(self, storage: Storage) -> None:
        storage.close()
        storage.close()

    def test_use_after_close_raises_storage_error(self, storage: Storage) -> None:
        storage.close()
        with pytest.raises(StorageError):
            storage.get(b"k")
        with pytest.raises(StorageError):
            storage.write(puts=[(b"k", b"v")])

    def test_reopen_keeps_records(self, storage: Storage, storage_path: Path) -> None:
        if not self.durable:
            pytest.skip("engine is not durable (durable = False)")
        storage.write(puts=[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
        storage.write(deletes=[b"b"])
        storage.close()
        reopened = self.make_storage(storage_path)
        try:
            assert list(reopened.scan()) == [(b"a", b"1"), (b"c", b"3")]
            assert reopened.count() == 2
        finally:
            reopened.close()

    # -- volume ----------------------------------------------------------------------------------------
    def test_many_records(self, storage: Storage) -> None:
        n = self.many
        # Keys written out of order, in several batches, so ordering cannot come from insertion order.
        order = sorted(range(n), key=lambda i: (i * 7919) % n)
        for chunk in range(0, n, 1000):
            storage.write(puts=[(b"key-%08d" % i, b"value-%d" % i) for i in order[chunk:chunk + 1000]])
        assert storage.count() == n
        keys = [k for k, _ in storage.scan()]
        assert keys == [b"key-%08d" % i for i in range(n)]
        assert storage.get(b"key-%08d" % (n // 2)) == b"value-%d" % (n // 2)
        with contextlib.closing(storage.snapshot()) as snap:
            storage.write(deletes=[b"key-%08d" % i for i in range(0, n, 2)])
            assert sum(1 for _ in snap.scan()) == n
        assert storage.count() == n - (n + 1) // 2

