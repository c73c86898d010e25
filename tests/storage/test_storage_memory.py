"""The memory engine: the conformance suite plus its copy-on-write costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.options import OptionError
from broker.sow.storage import StorageSpec
from broker.testing import StorageConformance
from broker_plugins.storage.memory import MemoryStorage


class TestMemoryStorage(StorageConformance):
    durable = False

    def make_storage(self, path: Path) -> MemoryStorage:
        return MemoryStorage(StorageSpec(topic="orders"))


def test_writes_without_open_snapshot_copy_nothing() -> None:
    store = MemoryStorage(StorageSpec(topic="t"))
    store.write(puts=[(b"a", b"1")])
    with store.snapshot():
        pass
    store.write(puts=[(b"b", b"2")])
    store.write(puts=[(b"c", b"3")])
    assert store.statistics()["snapshot_copies"] == 0


def test_open_snapshot_costs_one_copy_not_one_per_write() -> None:
    store = MemoryStorage(StorageSpec(topic="t"))
    store.write(puts=[(b"a", b"1")])
    with store.snapshot() as snap:
        for i in range(10):
            store.write(puts=[(b"k%d" % i, b"v")])
        assert [k for k, _ in snap.scan()] == [b"a"]
    assert store.statistics()["snapshot_copies"] == 1


def test_bulk_inserts_merge_into_order() -> None:
    # More pending keys than the insort limit take the sort-merge path.
    store = MemoryStorage(StorageSpec(topic="t"))
    store.write(puts=[(b"%05d" % i, b"v") for i in range(0, 2000, 2)])
    assert store.count() == 1000
    list(store.scan())
    store.write(puts=[(b"%05d" % i, b"v") for i in range(1, 2000, 2)],
                deletes=[b"%05d" % i for i in range(0, 2000, 3)])
    assert [k for k, _ in store.scan()] == [b"%05d" % i for i in range(2000) if i % 3]


def test_any_option_is_refused_naming_the_engine_and_the_option() -> None:
    with pytest.raises(OptionError, match=r"storage engine 'memory' of topic 't': unknown option <sync> "
                                          r"\(accepted: none\)"):
        MemoryStorage(StorageSpec(topic="t", options={"sync": "true"}))
