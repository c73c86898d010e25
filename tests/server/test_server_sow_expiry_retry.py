"""A failed expiration leaves the SOW topic's expiry index as it was: the next sweep expires the same records
(``SowTopic.pop_expired`` puts the due entries back; the engine no longer rebuilds the whole index)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.errors import StorageError
from broker.messagetypes import get_message_type
from broker.sow.record import SowRecord
from broker.sow.storage import StorageSpec
from broker.sow.topic import SowTopic
from broker_plugins.storage.memory import MemoryStorage

NOW = 1_000_000_000_000


class Flaky:
    """Makes the next ``get`` or ``write`` calls of a storage raise StorageError."""

    def __init__(self, storage: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes = self.gets = 0
        real_write, real_get = storage.write, storage.get

        def write(*args: Any, **kwargs: Any) -> None:
            if self.writes:
                self.writes -= 1
                raise StorageError("leveldb storage at 'x' failed while writing: IO error: No space left on device")
            real_write(*args, **kwargs)

        def get(key: bytes) -> bytes | None:
            if self.gets:
                self.gets -= 1
                raise StorageError("leveldb storage at 'x' failed while reading: IO error")
            return real_get(key)

        monkeypatch.setattr(storage, "write", write)
        monkeypatch.setattr(storage, "get", get)


def _topic() -> SowTopic:
    return SowTopic(name="orders", message_type=get_message_type("json"),
                    storage=MemoryStorage(StorageSpec(topic="orders")), key_generator=None, default_expiration=0.0)


def _put(topic: SowTopic, key: str, expire_at_ns: int) -> None:
    topic.upsert(SowRecord(key, b'{"k": 1}', NOW, 0, expire_at_ns, "", ""), topic.get(key))


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> tuple[SowTopic, Flaky]:
    t = _topic()
    _put(t, "a", NOW + 1)
    _put(t, "b", NOW + 2)
    _put(t, "c", NOW + 3)
    _put(t, "later", NOW + 100)
    _put(t, "b", NOW + 50)  # updated: its first entry (NOW + 2) is stale
    monkeypatch.setattr(t, "rebuild_expiry_index", lambda: pytest.fail("the whole index is rebuilt"))
    return t, Flaky(t.storage, monkeypatch)


@pytest.mark.parametrize("failing", ["writes", "gets"])
def test_a_failed_expiration_puts_the_due_entries_back(topic: tuple[SowTopic, Flaky], failing: str) -> None:
    t, flaky = topic
    before = sorted(t._expiry_heap)
    setattr(flaky, failing, 1)
    with pytest.raises(StorageError):
        t.pop_expired(NOW + 10)
    assert sorted(t._expiry_heap) == before and t.next_expiry_ns() == NOW + 1
    assert t.count() == 4 and t.stats.expirations == 0
    assert sorted(r.key for r in t.pop_expired(NOW + 10)) == ["a", "c"]  # the same records, once
    assert t.count() == 2 and t.stats.expirations == 2
    assert t.pop_expired(NOW + 10) == []
    assert t.next_expiry_ns() == NOW + 50
    assert sorted(r.key for r in t.pop_expired(NOW + 1_000)) == ["b", "later"]


def test_the_engine_retries_without_rebuilding_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.engine.engine import Engine
    from broker.expr import compile_filter, compile_order_by

    t = _topic()
    _put(t, "a", NOW + 1)
    monkeypatch.setattr(t, "rebuild_expiry_index", lambda: pytest.fail("the whole index is rebuilt"))
    flaky = Flaky(t.storage, monkeypatch)
    engine = Engine(sow_topics={"orders": t}, message_types=get_message_type, compile_filter=compile_filter,
                    compile_order_by=compile_order_by)
    sent: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(engine.fanout, "send_oof",
                        lambda sow, recs, reason: sent.append((reason, [r.key for r in recs])))
    flaky.writes = 1
    assert engine.expire(NOW + 10) == 0 and engine.expiry_waiting and sent == []
    assert engine.expire(NOW + 10) == 1 and not engine.expiry_waiting
    assert sent == [("expired", ["a"])]
