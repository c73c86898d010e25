"""A pathological filter stalls no one (issue 14, acceptance 1, filter half), with the official AMPS client.

Each test runs a normal second client publishing an ordered sequence next to the offending one and
checks that it receives everything, in order, within a generous deadline (completeness and ordering,
not timing: the latency figures come from ``python -m bench.bench_filter --isolation``).
"""

from __future__ import annotations

import json
import socket
import struct
import threading

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


@pytest.fixture
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    """The module's broker: each test publishes on its own topic (``feed``)."""
    return shared_broker


@pytest.fixture
def feed(own_topic: str) -> str:
    """This test's topic."""
    return own_topic


def test_catastrophic_like_does_not_delay_other_clients(broker: BrokerProcess, feed: str, client_factory,
                                                        make_collector) -> None:
    victim, attacker, pub = (client_factory(broker.uri) for _ in range(3))
    evil_got, normal = make_collector(), make_collector()
    # With a backtracking engine each of these values costs ~2**34 steps: minutes of a frozen broker.
    attacker.subscribe(evil_got, feed, filter="/a LIKE '(a+)+$'", timeout=5000)
    victim.subscribe(normal, feed, filter="/seq >= 0", timeout=5000)
    _sequence(pub, feed, evil=json.dumps({"a": "a" * 34 + "b"}))
    pub.publish(feed, json.dumps({"a": "aaaa"}))  # the sentinel the LIKE subscription must receive

    normal.wait_for(COUNT, timeout=60)
    assert _seqs(normal) == list(range(COUNT))
    assert evil_got.wait_for(1, timeout=30) and evil_got.data() == ['{"a": "aaaa"}']


def test_like_with_a_pcre_only_construct_is_a_bad_filter(broker: BrokerProcess, feed: str, client_factory) -> None:
    client = client_factory(broker.uri)
    with pytest.raises(AMPS.BadFilterException) as info:
        client.subscribe(lambda m: None, feed, filter="/a LIKE '(.)\\1'", timeout=5000)
    assert "bad filter" in str(info.value)
    # the wire carries only the reason; the broker's log says what is wrong and where to read more
    assert "LIKE does not support back-references" in broker.log() and "docs/filters.md" in broker.log()


def test_a_1mb_filter_is_refused_quickly_naming_the_limit(broker: BrokerProcess, feed: str, client_factory,
                                                          make_collector) -> None:
    victim, attacker, pub = (client_factory(broker.uri) for _ in range(3))
    normal = make_collector()
    victim.subscribe(normal, feed, timeout=5000)
    huge = " OR ".join(f"/abc = {i:06d}" for i in range(60_000))
    assert len(huge) > 1_000_000
    with pytest.raises(AMPS.BadFilterException) as info:
        attacker.subscribe(lambda m: None, feed, filter=huge, timeout=10_000)
    assert "bad filter" in str(info.value)
    refusal = [line for line in broker.log().splitlines() if "MAX_FILTER_LENGTH" in line]
    assert len(refusal) == 1 and f"over the limit of {MAX_FILTER_LENGTH:,}" in refusal[0]
    assert len(refusal[0]) < 1000  # the megabyte of filter is not copied into the log
    _sequence(pub, feed)
    normal.wait_for(COUNT, timeout=60)
    assert _seqs(normal) == list(range(COUNT))
    # the refused client carries on
    again = make_collector()
    attacker.subscribe(again, feed, filter="/seq = 7", timeout=5000)
    pub.publish(feed, json.dumps({"seq": 7}))
    assert again.wait_for(1, timeout=30) and again.data() == ['{"seq": 7}']


def test_a_deep_body_is_no_match_for_that_filter_only(broker: BrokerProcess, feed: str, client_factory,
                                                      make_collector) -> None:
    filtered, pub = client_factory(broker.uri), client_factory(broker.uri)
    by_filter = make_collector()
    filtered.subscribe(by_filter, feed, filter="/a/b = 1 OR /seq >= 0", timeout=5000)
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    # The broker may refuse the body at publish (a failure ack naming its depth limit) or store it;
    # either way neither the publisher nor the subscriber is disconnected and no one misses a message.
    _sequence(pub, feed, evil=deep)
    pub.publish(feed, json.dumps({"a": {"b": 1}}))
    by_filter.wait_for(COUNT + 1, timeout=60)
    data = by_filter.data()
    assert _seqs(by_filter) == list(range(COUNT))
    assert data[-1] == '{"a": {"b": 1}}' and deep not in data


def test_catastrophic_regex_topic_does_not_delay_other_clients(
    broker: BrokerProcess, feed: str, client_factory, make_collector
) -> None:
    victim, attacker, pub = (client_factory(broker.uri) for _ in range(3))
    evil_got, normal = make_collector(), make_collector()
    # A backtracking engine needs ~2**34 steps to reject each topic below: the regex runs on RE2.
    attacker.subscribe(evil_got, "^(a+)+$", timeout=5000)
    victim.subscribe(normal, feed, timeout=5000)
    evil_topic = "a" * 34 + "b"
    for i in range(COUNT):
        if i % 20 == 0:
            pub.publish(evil_topic, json.dumps({"evil": i}))
        pub.publish(feed, json.dumps({"seq": i}))
    pub.publish("aaaa", json.dumps({"sentinel": True}))  # the regex subscription must receive this one

    normal.wait_for(COUNT, timeout=60)
    assert _seqs(normal) == list(range(COUNT))
    assert evil_got.wait_for(1, timeout=30) and evil_got.data() == ['{"sentinel": true}']


def test_regex_topic_with_a_pcre_only_construct_is_a_bad_regex_topic(broker: BrokerProcess, client_factory) -> None:
    client = client_factory(broker.uri)
    with pytest.raises(AMPS.BadRegexTopicException):
        client.subscribe(lambda m: None, "^(?!internal).*", timeout=5000)
    assert "a regex topic does not support negative look-ahead" in broker.log()
    collector_ok = []
    client.subscribe(collector_ok.append, "^orders\\..*", timeout=5000)  # a regex RE2 runs is accepted


def _long_filter(first: int) -> str:
    """A valid filter just under MAX_FILTER_LENGTH (compiles in about 0.3 s) matching ``/abc = first``."""
    text = " OR ".join(f"/abc = {i}" for i in range(first, first + 4000))
    return text[: text.rfind(" OR ", 0, MAX_FILTER_LENGTH)]


def test_long_filters_compile_without_delaying_other_clients(
    broker: BrokerProcess, feed: str, client_factory, make_collector
) -> None:
    victim, attacker, pub = (client_factory(broker.uri) for _ in range(3))
    normal = make_collector()
    victim.subscribe(normal, feed, filter="/seq >= 0", timeout=5000)
    got = [make_collector() for _ in range(4)]
    done = threading.Thread(
        target=lambda: [attacker.subscribe(c, feed, filter=_long_filter(i * 10_000), timeout=30_000)
                        for i, c in enumerate(got)])
    done.start()
    _sequence(pub, feed)
    done.join(60)
    assert not done.is_alive()
    normal.wait_for(COUNT, timeout=60)
    assert _seqs(normal) == list(range(COUNT))
    for i in range(len(got)):  # each long-filter subscription is in place and filters
        pub.publish(feed, json.dumps({"abc": i * 10_000}))
    for i, collector in enumerate(got):
        assert collector.wait_for(1, timeout=30) and collector.data() == [json.dumps({"abc": i * 10_000})]


def test_a_long_filter_keeps_its_clients_commands_in_order(broker: BrokerProcess, feed: str) -> None:
    """Sent in one write: a subscribe whose filter compiles in a worker thread, a subscribe with a short
    filter, and a publish matching both. The acks come in command order, and the publish reaches both
    subscriptions (one delivery naming both sub_ids) (the long one was in place before the publish ran)."""
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    frames = b"".join(_raw(h, b) for h, b in (
        ({"c": "logon", "cid": "L", "client_name": "raw", "a": "processed", "mt": "json"}, b""),
        ({"c": "subscribe", "cid": "long", "sub_id": "long", "t": feed, "a": "processed",
          "filter": _long_filter(0)}, b""),
        ({"c": "subscribe", "cid": "short", "sub_id": "short", "t": feed, "a": "processed",
          "filter": "/abc = 0"}, b""),
        ({"c": "p", "t": feed}, b'{"abc": 0}'),
    ))
    sock.sendall(frames)
    seen: list[tuple[str, str]] = []
    buffer = b""
    while not any(c == "p" for c, _ in seen):
        data = sock.recv(65536)
        assert data, f"the broker closed the connection after {seen}"
        buffer += data
        while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">I", buffer[:4])[0]:
            size = struct.unpack(">I", buffer[:4])[0]
            header, _ = json.JSONDecoder().raw_decode(buffer[4:4 + size].decode())
            buffer = buffer[4 + size:]
            seen.append((header["c"], header.get("cid") or header.get("sids") or header.get("sub_id")))
    sock.close()
    assert seen[:3] == [("ack", "L"), ("ack", "long"), ("ack", "short")]
    assert len(seen) == 4 and seen[3][0] == "p" and set(seen[3][1].split(",")) == {"long", "short"}


def _raw(header: dict, body: bytes) -> bytes:
    payload = json.dumps(header).encode() + body
    return struct.pack(">I", len(payload)) + payload
