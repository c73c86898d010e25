"""The SOW side of a large publish (issue 34): on a logged SOW topic a value above LARGE_VALUE is written to LevelDB
by a thread, and queries see it at once; the record a publish replaces is decoded only when the fan-out reads it.
In-process engine, real LevelDB files."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_fakes import Client, broker_from

from broker.engine.publish import PublishMessage
from broker.server.kernel import Broker
from broker.sow.deferred import DeferredValue
from broker.sow.record import SowRecord
from broker_plugins.storage.write_behind import LARGE_VALUE

CONFIG = """<AMPSConfig><Name>write-behind-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW>
  <Topic><Name>logged</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
  <Topic><Name>plain</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
</SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>1s</FlushInterval>
  <Topic><Name>logged</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Broker]:
    yield from broker_from(CONFIG, tmp_path, monkeypatch)


def big(ident: int, fill: str) -> bytes:
    return json.dumps({"id": ident, "x": fill * (LARGE_VALUE + 10)}).encode()


def msg(topic: str, body: bytes) -> PublishMessage:
    return topic, body, False, None, None, None, None


def _engine_storage(b: Broker, topic: str) -> Any:
    return b.engine.sow_topics[topic].storage.inner  # under the record cache


def key_of(b: Broker, topic: str, ident: int) -> bytes:
    sow = b.engine.sow_topics[topic]
    return sow.key_for(sow.message_type.parse(json.dumps({"id": ident}).encode(), keyed=True), None).encode()


def _query(b: Broker, header: dict[str, Any]) -> list[bytes]:
    plan, _ = b.engine.plan_query(header)
    try:
        return [row[2] for row in plan.rows() if row is not None]
    finally:
        plan.close()


def _data(values: list[bytes]) -> list[dict[str, Any]]:
    return [json.loads(SowRecord.decode("", value).data) for value in values]


def test_a_large_publish_to_a_logged_topic_is_written_by_the_thread_and_queried_at_once(broker: Broker) -> None:
    b = broker
    storage = _engine_storage(b, "logged")
    opened, reached = threading.Event(), threading.Event()
    real = storage._apply_behind

    def gated(batch: dict[bytes, bytes | None]) -> None:
        reached.set()
        assert opened.wait(20)
        real(batch)

    storage._apply_behind = gated
    client = Client(b)
    body = big(1, "a")
    assert b.engine.publish_batch(client, [msg("logged", body)]) == [1]  # a large publish comes alone
    assert b.engine.publish_batch(client, [msg("logged", b'{"id":2}')]) == [2]
    assert reached.wait(20)
    try:
        held = b.engine.sow_topics["logged"].storage.held[key_of(b, "logged", 1)]
        assert "not joined" in repr(held)  # the publish copied nothing: the header and the body, kept apart
        assert storage._db.get(key_of(b, "logged", 1)) is None  # the thread holds it: not in LevelDB yet
        assert sorted(d["id"] for d in _data(_query(b, {"topic": "logged"}))) == [1, 2]  # a scan
        assert _data(_query(b, {"topic": "logged", "filter": "/id = 1"})) == [json.loads(body)]  # a key lookup
        # A sow_and_subscribe's query reads the same snapshot.
        plan, _ = b.engine.plan_query({"topic": "logged", "filter": "/id = 1", "sub_id": "s"})
        try:
            assert [json.loads(rec.data)["id"] for rec in
                    (item[1] for item in plan.steps() if item is not None)] == [1]
        finally:
            plan.close()
        assert b.engine.sow_topics["logged"].count() == 2
    finally:
        opened.set()
    storage.make_durable()
    assert storage._db.get(key_of(b, "logged", 1)) is not None
    assert storage.statistics()["write_behind_batches"] >= 1


def test_a_large_publish_to_a_topic_without_a_journal_is_written_before_the_publish_returns(broker: Broker) -> None:
    b = broker
    storage = _engine_storage(b, "plain")
    assert b.engine.publish_batch(Client(b), [msg("plain", big(1, "a"))]) == [0]
    assert storage._db.get(key_of(b, "plain", 1)) is not None  # kill -9 now would keep it, as before
    assert storage.statistics()["write_behind_batches"] == 0


@pytest.mark.parametrize("topic", ["logged", "plain"])
def test_the_replaced_record_is_decoded_only_when_the_fan_out_reads_it(broker: Broker, topic: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    b = broker
    decoded: list[str] = []
    real = SowRecord.decode.__func__  # type: ignore[attr-defined]

    def counting(cls: type[SowRecord], key: str, value: bytes, data: bytes | None = None) -> SowRecord:
        decoded.append(key)
        return real(cls, key, value, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(SowRecord, "decode", classmethod(counting))
    client, whole, oof = Client(b), Client(b), Client(b)
    b.engine.subscribe(whole, {"sub_id": "w", "topic": topic})  # takes every message whole
    first, second = big(1, "a"), big(1, "b")
    b.engine.publish_batch(client, [msg(topic, first)])
    b.engine.publish_batch(client, [msg(topic, second)])
    assert decoded == []  # the replaced 1 MB record was not copied out
    held = b.engine.sow_topics[topic].storage.held[key_of(b, topic, 1)]
    # The stored value: built by the publish without a journal; joined by the write-behind thread with one.
    assert type(held) is (DeferredValue if topic == "logged" else bytes)
    assert [body for _c, body, _r in whole.sent] == [first, second]
    # An oof subscription with a filter must know whether the replaced record matched: then it is decoded.
    b.engine.subscribe(oof, {"sub_id": "o", "topic": topic, "filter": "/x LIKE '^b'", "options": "oof"})
    b.engine.publish_batch(client, [msg(topic, second)])
    b.engine.publish_batch(client, [msg(topic, big(1, "c"))])
    key = key_of(b, topic, 1).decode()
    assert decoded == [key, key]  # the per-message fan-out of each of the two
    assert [(c, json.loads(body)["x"][0]) for c, body, _r in oof.sent] == [("p", "b"), ("oof", "c")]


def test_the_next_publish_reads_a_pending_large_record_without_joining_it(broker: Broker) -> None:
    b = broker
    storage = _engine_storage(b, "logged")
    opened, reached = threading.Event(), threading.Event()
    real = storage._apply_behind

    def gated(batch: dict[bytes, Any]) -> None:
        reached.set()
        assert opened.wait(20)
        real(batch)

    storage._apply_behind = gated
    client, oof = Client(b), Client(b)
    key = key_of(b, "logged", 1)
    b.engine.subscribe(oof, {"sub_id": "o", "topic": "logged", "filter": "/x LIKE '^a'", "options": "oof"})
    assert b.engine.publish_batch(client, [msg("logged", big(1, "a"))]) == [1]
    assert reached.wait(20)  # the thread holds the first value, not joined: its join comes with its write
    first = b.engine.sow_topics["logged"].storage.held[key]
    try:
        # The replaced record is read from its parts: expiry, existence, and for the oof its record and message.
        assert b.engine.publish_batch(client, [msg("logged", big(1, "b"))]) == [2]
        assert "not joined" in repr(first)
        assert [c for c, _body, _r in oof.sent] == ["p", "oof"]
        assert b.engine.sow_topics["logged"].stats.updates == 1
    finally:
        opened.set()
    storage.make_durable()
    assert json.loads(SowRecord.decode("", storage._db.get(key)).data)["x"][0] == "b"
