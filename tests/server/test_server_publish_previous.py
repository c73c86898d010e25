"""The record an update replaces is decoded only when something reads it (issue 17, W1 at 1M publishes over 100k
keys): with no subscription or paginated window on the topic and no delta, :meth:`Engine.publish_batch` only
learns that the key holds a record (``previous`` is :data:`broker.engine.publish.STORED`) and whether it has
expired. These tests check that the SOW, its insert/update counts and the expiry of replaced records come out
the same with and without a reader, against a dict model."""

from __future__ import annotations

import itertools
import json
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_fakes import Client, broker_from
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.engine import publish
from broker.engine.publish import PublishMessage
from broker.server.kernel import Broker

CONFIG = """<AMPSConfig><Name>previous-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>
    <Expiration>enabled</Expiration></Topic>
  <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
</SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>1s</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Broker]:
    yield from broker_from(CONFIG, tmp_path, monkeypatch)


def msg(topic: str, body: dict[str, Any], *, delta: bool = False, expiration: str | None = None) -> PublishMessage:
    return topic, json.dumps(body).encode(), delta, None, None, None, expiration


def stored(b: Broker, topic: str, ident: int) -> dict[str, Any] | None:
    sow = b.engine.sow_topics[topic]
    key = sow.key_for(sow.message_type.parse(json.dumps({"id": ident}).encode(), keyed=True), None)
    record = sow.get(key)
    return None if record is None else json.loads(record.data)


_namespaces = itertools.count()

#: A batch: whether a subscription watches the topic while it is applied, and its messages (key, value, delta).
batches = st.lists(st.tuples(st.booleans(), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.booleans()),
                                                     min_size=1, max_size=8)), min_size=1, max_size=5)


@pytest.mark.parametrize("topic", ["orders", "quotes"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches)
def test_records_and_counts_are_the_same_with_and_without_a_reader(broker: Broker, topic: str,
                                                                   batches: list[Any]) -> None:
    b = broker
    base = next(_namespaces) * 10  # each example its own keys (one broker for every example)
    sow = b.engine.sow_topics[topic]
    inserts, updates = sow.stats.inserts, sow.stats.updates
    model: dict[int, dict[str, Any]] = {}
    client = Client(b)
    for watched, messages in batches:
        watcher = Client(b)
        if watched:  # a reader: the replaced records are decoded (the fan-out compares with them)
            b.engine.subscribe(watcher, {"sub_id": "w", "topic": topic})
        batch, expected = [], []
        for k, value, delta in messages:
            ident = base + k
            body = {"id": ident, f"f{value % 3}": value}
            batch.append(msg(topic, body, delta=delta))
            if ident in model:
                updates += 1
            else:
                inserts += 1
            model[ident] = {**model[ident], **body} if delta and ident in model else body
            expected.append(model[ident])
        results = b.engine.publish_batch(client, batch)
        assert all(isinstance(r, int) for r in results), results
        if watched:
            assert [json.loads(body) for _c, body, _r in watcher.sent] == expected
            b.engine.unsubscribe(watcher, "w")
        for ident, doc in model.items():
            assert stored(b, topic, ident) == doc
        assert (sow.stats.inserts, sow.stats.updates) == (inserts, updates)


@pytest.mark.parametrize("watched", [False, True])
def test_a_replaced_record_that_expired_unswept_counts_as_an_insert_and_its_holders_get_the_oof(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, watched: bool) -> None:
    b = broker
    now = [time.time_ns() + 10**9]  # after the subscription (it has seen what is published from then on)
    monkeypatch.setattr(publish, "time", types.SimpleNamespace(time_ns=lambda: now[0]))
    client, watcher = Client(b), Client(b)
    orders = b.engine.sow_topics["orders"]
    if watched:
        b.engine.subscribe(watcher, {"sub_id": "w", "topic": "orders", "options": "oof"})
    assert b.engine.publish_batch(client, [msg("orders", {"id": 1, "v": 1}, expiration="1"),
                                           msg("orders", {"id": 2, "v": 1}, expiration="60")]) == [1, 2]
    now[0] += 5 * 10**9  # id 1 has expired, id 2 has not; the sweeper has not run
    assert b.engine.publish_batch(client, [msg("orders", {"id": 1, "v": 2}), msg("orders", {"id": 2, "v": 2})]) \
        == [3, 4]
    assert (orders.stats.inserts, orders.stats.updates) == (3, 1)  # the expired one was gone: an insert
    assert stored(b, "orders", 1) == {"id": 1, "v": 2} and stored(b, "orders", 2) == {"id": 2, "v": 2}
    assert orders.count() == 2
    if watched:
        assert [(c, json.loads(body)) for c, body, _r in watcher.sent] == [
            ("p", {"id": 1, "v": 1}), ("p", {"id": 2, "v": 1}), ("oof", {"id": 1, "v": 1}), ("p", {"id": 1, "v": 2}), ("p", {"id": 2, "v": 2})]
