"""The versions part of the storage conformance suite: :class:`broker.sow.history.History` over an engine.

A topic with ``<History>`` keeps its past versions in a second storage of its engine
(``StorageSpec(history=True)``); :class:`broker.testing.StorageConformance` inherits these tests, so every
engine that passes the suite can keep history.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.sow.history import HistoricalSnapshot, History
from broker.sow.record import SowRecord
from broker.sow.storage import Snapshot, Storage

__all__ = ["VersionConformance"]


_S = 1_000_000_000


def _value(key: str, v: int, t: int) -> bytes:
    return SowRecord(key, b'{"v":%d}' % v, t).encode()


def _as_of(history: History, t: int, now: int | None = None) -> dict[str, int]:
    """``key -> v`` of the records present as of ``t``."""
    with contextlib.closing(history.snapshot(t, now if now is not None else t)) as snap:
        return {k.decode(): int(SowRecord.decode(k.decode(), v).data[5:-1]) for k, v in snap.scan()}


class _CountingSnapshot(Snapshot):
    """Counts the entries a snapshot hands out."""

    def __init__(self, inner: Snapshot) -> None:
        self.inner = inner
        self.read = 0

    def get(self, key: bytes) -> bytes | None:
        self.read += 1
        return self.inner.get(key)

    def scan(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        for item in self.inner.scan(start, stop):
            self.read += 1
            yield item

    def close(self) -> None:
        self.inner.close()


class VersionConformance:
    """Tests of History over the engine under test (mixed into StorageConformance)."""

    def test_versions_answer_points_in_time_around_updates_and_deletes(self, storage: Storage) -> None:
        h = History(storage, window_ns=3600 * _S)
        h.record("a", 10 * _S, _value("a", 1, 10 * _S))
        h.record("b", 11 * _S, _value("b", 1, 11 * _S))
        h.record("a", 20 * _S, _value("a", 2, 20 * _S))
        h.record("b", 21 * _S, None)  # deleted
        h.record("c", 22 * _S, _value("c", 1, 22 * _S))
        h.record("b", 30 * _S, _value("b", 3, 30 * _S))  # back again
        h.record("zz", 5 * _S, None)  # a delete of a key history never saw is nothing
        assert _as_of(h, 9 * _S) == {}
        assert _as_of(h, 10 * _S) == {"a": 1}
        assert _as_of(h, 15 * _S) == {"a": 1, "b": 1}
        assert _as_of(h, 20 * _S) == {"a": 2, "b": 1}
        assert _as_of(h, 21 * _S) == {"a": 2}
        assert _as_of(h, 25 * _S) == {"a": 2, "c": 1}
        assert _as_of(h, 31 * _S) == {"a": 2, "b": 3, "c": 1}
        with contextlib.closing(h.snapshot(21 * _S, 21 * _S)) as snap:
            assert snap.get(b"b") is None
            assert snap.get(b"a") == _value("a", 2, 20 * _S)
        with contextlib.closing(h.snapshot(15 * _S, 15 * _S)) as snap:
            assert [k for k, _ in snap.scan(b"b")] == [b"b"]
            assert [k for k, _ in snap.scan(None, b"b")] == [b"a"]
        # Before the Window: nothing, whatever was stored then.
        assert _as_of(h, 15 * _S, now=15 * _S + 2 * 3600 * _S) == {}

    def test_versions_granularity_keeps_one_copy_per_interval(self, storage: Storage) -> None:
        h = History(storage, window_ns=3600 * _S, granularity_ns=10 * _S)
        for i, t in enumerate((101, 103, 109, 112, 118, 135)):
            h.record("k", t * _S, _value("k", i, t * _S))
        # Intervals [100, 110): v2 is its last state; [110, 120): v4; [130, 140): v5.
        assert h.versions() == 3
        assert _as_of(h, 105 * _S) == {}  # as of 100
        assert _as_of(h, 110 * _S) == _as_of(h, 119 * _S) == {"k": 2}
        assert _as_of(h, 120 * _S) == _as_of(h, 139 * _S) == {"k": 4}
        assert _as_of(h, 140 * _S) == {"k": 5}

    def test_versions_pruning_is_sliced_and_keeps_the_current_state(self, storage: Storage) -> None:
        h = History(storage, window_ns=100 * _S)
        for t in range(1, 51):
            for key in ("a", "b", "c"):
                h.record(key, t * _S, _value(key, t, t * _S))
        h.record("c", 60 * _S, None)
        assert h.versions() == 151  # 50 states of each key, and c's delete
        now = 300 * _S  # everything older than 200s is out of the Window
        slices = []
        while (handled := h.prune(now, limit=40)) == 40:
            slices.append(handled)
        slices.append(handled)
        assert len(slices) > 3  # bounded slices, not one long stall
        assert h.versions() == 2  # the current states of a and b; c's delete left the Window
        assert _as_of(h, now, now=now) == {"a": 50, "b": 50}
        assert h.prune(now) == 0
        h.record("a", 301 * _S, _value("a", 51, 301 * _S))
        assert _as_of(h, 300 * _S, now=301 * _S) == {"a": 50, "b": 50}
        assert _as_of(h, 302 * _S, now=302 * _S) == {"a": 51, "b": 50}

    def test_versions_point_in_time_read_costs_the_keys_not_the_versions(self, storage: Storage) -> None:
        h = History(storage, window_ns=10**6 * _S)
        keys = [f"k{i:03d}" for i in range(20)]
        for t in range(1, 31):
            storage_batch = [(k, t * _S, _value(k, t, t * _S)) for k in keys]
            for k, ts, v in storage_batch:
                h.record(k, ts, v)
        for t in (1, 15, 30):
            snap = _CountingSnapshot(storage.snapshot())
            with contextlib.closing(HistoricalSnapshot(snap, t * _S)) as hist:
                got = {k.decode(): SowRecord.decode(k.decode(), v).data for k, v in hist.scan()}
            assert got == {k: b'{"v":%d}' % t for k in keys}
            assert snap.read <= 2 * len(keys)  # a head and at most one version per key, of 30 kept

    def test_versions_survive_reopen(self, storage: Storage, storage_path: Path) -> None:
        if not self.durable:  # type: ignore[attr-defined]
            pytest.skip("engine is not durable (durable = False)")
        h = History(storage, window_ns=3600 * _S)
        h.record("a", 10 * _S, _value("a", 1, 10 * _S))
        h.record("a", 20 * _S, _value("a", 2, 20 * _S))
        h.record("b", 15 * _S, _value("b", 1, 15 * _S))
        h.record("b", 25 * _S, None)
        before = [_as_of(h, t * _S) for t in (12, 17, 22, 30)]
        storage.close()
        reopened = self.make_storage(storage_path)  # type: ignore[attr-defined]
        try:
            h2 = History(reopened, window_ns=3600 * _S)
            assert [_as_of(h2, t * _S) for t in (12, 17, 22, 30)] == before == [
                {"a": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 1}, {"a": 2}]
        finally:
            reopened.close()

    def test_snapshot_first_finds_the_first_key_in_a_range(self, storage: Storage) -> None:
        storage.write(puts=[(b"a1", b"1"), (b"a3", b"3"), (b"b1", b"4")])
        with contextlib.closing(storage.snapshot()) as snap:
            storage.write(puts=[(b"a2", b"2")], deletes=[b"a3"])  # not seen by the snapshot
            assert snap.first(b"a", b"b") == (b"a1", b"1")
            assert snap.first(b"a2", b"b") == (b"a3", b"3")
            assert snap.first(b"a4", b"b") is None  # b1 is past the stop
            assert snap.first(b"a4", b"c") == (b"b1", b"4")
            assert snap.first(b"a1", b"a1") is None
            assert snap.first(b"c", b"d") is None
            assert snap.first(b"a", b"b") == (b"a1", b"1")  # a cursor reused after reaching the end
