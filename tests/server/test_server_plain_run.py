"""A publish run to a topic without SOW or journal whose subscriptions all take every message whole goes through
the *plain* publish path's one pass (:meth:`Publishing._plain_run`, its loop compiled or in Python): results, deliveries, counters
and the publisher's highest ``s`` are what the general per-message path gives, over re-sends, bodies nested too
deep (or with more brackets than the bound but not too deep), correlation ids, no subscriber, and subscriptions of
several clients."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from engine_fakes import Client, broker_from
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker import speedups
from broker.engine import publish
from broker.engine.publish import PublishMessage
from broker.server.kernel import Broker
from broker.testing.clients import Delivered

CONFIG = """<AMPSConfig><Name>plain-run-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports></AMPSConfig>"""


class Recorder(Client):
    """Records every delivery as ``(sids, body, bm, k, x)`` (whole batches, one message at a time)."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        self.got: list[tuple[Any, ...]] = []

    def record(self, delivered: Delivered) -> None:
        h = delivered.header
        self.got.append((delivered.command, delivered.topic, delivered.sids, delivered.body,
                         h.get("bookmark") or None, h.get("sow_key") or None, h.get("correlation_id") or None))


@pytest.fixture(params=["compiled", "pure-python"])
def brokers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, Broker]]:
    """The same broker twice: the second without the one-pass path (the reference); the one pass with its
    compiled loop (broker/speedups/plainrun.pyx) or the pure-Python one."""
    if request.param == "compiled":
        if speedups.load("plainrun") is None:
            pytest.skip("broker.speedups is not built")
        monkeypatch.setattr(publish, "plain_items", speedups.load("plainrun").plain_items)
    else:
        monkeypatch.setattr(publish, "plain_items", publish._plain_items)
    one = broker_from(CONFIG, tmp_path_factory.mktemp("fast"), monkeypatch)
    two = broker_from(CONFIG, tmp_path_factory.mktemp("general"), monkeypatch)
    fast, general = next(one), next(two)
    monkeypatch.setattr(general.engine.fanout, "whole_targets", lambda topic: None)  # never the plain path
    yield fast, general
    for gen in (one, two):
        next(gen, None)


BODIES = (st.sampled_from([{"a": 1}, {"a": [[[[1]]]]}, [1, 2], "text", {"s": "[[[[["}, [[[], []]]])
          .map(lambda v: json.dumps(v).encode()) | st.binary(max_size=8))
MESSAGES = st.lists(st.tuples(st.sampled_from(["plain", "other"]), BODIES, st.one_of(st.none(), st.integers(1, 8)),
                              st.sampled_from([None, "", "cid-1"])), max_size=12)


def _run(b: Broker, subscribers: list[tuple[int, str]], batches: list[list[PublishMessage]], max_depth: int | None
         ) -> tuple[Any, ...]:
    publisher = Recorder(b)
    clients = [Recorder(b) for _ in range(3)]
    for n, (who, topic) in enumerate(subscribers):
        b.engine.subscribe(clients[who], {"sub_id": f"s{n}", "topic": topic})
    results = [b.engine.publish_batch(publisher, batch, max_depth) for batch in batches]
    c = b.engine.counters
    return (results, [cl.got for cl in clients], c.messages_received, c.messages_delivered,
            dict(b.engine.publisher_seq))


@example(batches=[[("plain", b"{}", 5, None), ("plain", b"{}", 3, "c"), ("plain", b"{}", 5, None)]], max_depth=64,
         subscribers=[(0, "plain")])  # re-sends within one run
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(MESSAGES, min_size=1, max_size=3), max_depth=st.sampled_from([None, 3, 64]),
       subscribers=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["plain", "^pl.*", "other"])), max_size=4))
def test_the_one_pass_gives_what_the_general_path_gives(brokers, batches, max_depth, subscribers) -> None:
    fast, general = brokers  # shared by the examples: both see the same ones, so their state stays comparable
    publish = [[(topic, body, False, seq, None, x, None) for topic, body, seq, x in batch] for batch in batches]
    assert _comparable(_run(fast, subscribers, publish, max_depth)) == _comparable(
        _run(general, subscribers, publish, max_depth))


def _comparable(outcome: tuple[Any, ...]) -> tuple[Any, ...]:
    results = [[type(r).__name__ + str(r) if isinstance(r, Exception) else r for r in batch] for batch in outcome[0]]
    return (results, *outcome[1:])


def test_a_filtered_subscription_sends_the_run_through_the_general_path(brokers) -> None:
    fast, _ = brokers
    calls: list[bool] = []
    real = fast.engine.publishing._plain_run

    def spy(*args: Any) -> None:
        calls.append(True)
        real(*args)

    fast.engine.publishing._plain_run = spy  # type: ignore[method-assign]
    sub = Recorder(fast)
    fast.engine.subscribe(sub, {"sub_id": "f", "topic": "plain", "filter": "/a = 1"})
    fast.engine.publish_batch(Recorder(fast), [("plain", b'{"a":1}', False, None, None, None, None),
                                               ("plain", b'{"a":2}', False, None, None, None, None)], 64)
    assert calls == []
    assert [g[3] for g in sub.got] == [b'{"a":1}']
