"""A pathological filter stalls no one (issue 14, acceptance 1, filter half), with the official AMPS client.

Each test runs a normal second client publishing an ordered sequence next to the offending one and
checks that it receives everything, in order, within a generous deadline (completeness and ordering,
not timing: the latency figures come from ``python -m bench.bench_filter --isolation``).
"""

from __future__ import annotations

import json

import AMPS
import pytest

from broker.expr import MAX_FILTER_LENGTH
from broker.testing.process import BrokerProcess

COUNT = 200


def _sequence(pub, topic: str, evil: str | None = None) -> None:  # noqa: ANN001 - AMPS.Client
    """Publish ``{"seq": i}`` for ``i < COUNT``, with ``evil`` every 20 messages."""
    for i in range(COUNT):
        if evil is not None and i % 20 == 0:
            pub.publish(topic, evil)
        pub.publish(topic, json.dumps({"seq": i}))


def _seqs(collector) -> list[int]:  # noqa: ANN001 - Collector
    return [json.loads(d)["seq"] for d in collector.data() if '"seq"' in d]


def test_catastrophic_like_does_not_delay_other_clients(broker: BrokerProcess, client_factory, make_collector) -> None:
    victim, attacker, pub = (client_factory(broker.uri) for _ in range(3))
    evil_got, normal = make_collector(), make_collector()
    # With a backtracking engine each of these values costs ~2**34 steps: minutes of a frozen broker.
    attacker.subscribe(evil_got, "feed", filter="/a LIKE '(a+)+$'", timeout=5000)
    victim.subscribe(normal, "feed", filter="/seq >= 0", timeout=5000)
    _sequence(pub, "feed", evil=json.dumps({"a": "a" * 34 + "b"}))
    pub.publish("feed", json.dumps({"a": "aaaa"}))  # the sentinel the LIKE subscription must receive

    normal.wait_for(COUNT, timeout=60)
    assert _seqs(normal) == list(range(COUNT))
    assert evil_got.wait_for(1, timeout=30) and evil_got.data() == ['{"a": "aaaa"}']


def test_like_with_a_pcre_only_construct_is_a_bad_filter(broker: BrokerProcess, client_factory) -> None:
    client = client_factory(broker.uri)
    with pytest.raises(AMPS.BadFilterException) as info:
        client.subscribe(lambda m: None, "feed", filter="/a LIKE '(.)\\1'", timeout=5000)
    assert "bad filter" in str(info.value)
    # the wire carries only the reason; the broker's log says what is wrong and where to read more
    assert "LIKE does not support back-references" in broker.log() and "docs/filters.md" in broker.log()


def test_a_1mb_filter_is_refused_quickly_naming_the_limit(broker: BrokerProcess, client_factory, make_collector) -> None:
    victim, attacker, pub = (client_factory(broker.uri) for _ in range(3))
    normal = make_collector()
    victim.subscribe(normal, "feed", timeout=5000)
    huge = " OR ".join(f"/abc = {i:06d}" for i in range(60_000))
    assert len(huge) > 1_000_000
    with pytest.raises(AMPS.BadFilterException) as info:
        attacker.subscribe(lambda m: None, "feed", filter=huge, timeout=10_000)
    assert "bad filter" in str(info.value)
    refusal = [line for line in broker.log().splitlines() if "MAX_FILTER_LENGTH" in line]
    assert len(refusal) == 1 and f"over the limit of {MAX_FILTER_LENGTH:,}" in refusal[0]
    assert len(refusal[0]) < 1000  # the megabyte of filter is not copied into the log
    _sequence(pub, "feed")
    normal.wait_for(COUNT, timeout=60)
    assert _seqs(normal) == list(range(COUNT))
    # the refused client carries on
    again = make_collector()
    attacker.subscribe(again, "feed", filter="/seq = 7", timeout=5000)
    pub.publish("feed", json.dumps({"seq": 7}))
    assert again.wait_for(1, timeout=30) and again.data() == ['{"seq": 7}']


def test_a_deep_body_is_no_match_for_that_filter_only(broker: BrokerProcess, client_factory, make_collector) -> None:
    filtered, pub = client_factory(broker.uri), client_factory(broker.uri)
    by_filter = make_collector()
    filtered.subscribe(by_filter, "feed", filter="/a/b = 1 OR /seq >= 0", timeout=5000)
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    # The broker may refuse the body at publish (a failure ack naming its depth limit) or store it;
    # either way neither the publisher nor the subscriber is disconnected and no one misses a message.
    _sequence(pub, "feed", evil=deep)
    pub.publish("feed", json.dumps({"a": {"b": 1}}))
    by_filter.wait_for(COUNT + 1, timeout=60)
    data = by_filter.data()
    assert _seqs(by_filter) == list(range(COUNT))
    assert data[-1] == '{"a": {"b": 1}}' and deep not in data
