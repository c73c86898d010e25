"""SOW expiration through the official AMPS client (issue 4): per-message expiration, the topic default,
disabled topics, out-of-focus notices and records that expire while the broker is down."""

from __future__ import annotations

import json
import time

import AMPS

TOPICS = """
<Topic><Name>per-message</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability><Expiration>enabled</Expiration></Topic>
<Topic><Name>default-2s</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability><Expiration>2s</Expiration></Topic>
<Topic><Name>no-expiry</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>durable</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>
  <Expiration>enabled</Expiration></Topic>
"""


def ids(client: AMPS.Client, topic: str) -> list[int]:
    return sorted(json.loads(m.get_data())["id"] for m in client.sow(topic, timeout=5000) if m.get_command() == "sow")


def wait_for_ids(client: AMPS.Client, topic: str, expected: list[int], timeout: float = 15.0) -> None:
    """Query until the topic holds exactly ``expected`` (expiry is asynchronous), or fail."""
    deadline = time.monotonic() + timeout
    while (found := ids(client, topic)) != expected:
        assert time.monotonic() < deadline, f"{topic} still holds {found}, expected {expected}"
        time.sleep(0.05)


def test_records_expire_on_time(broker_factory, client_factory, make_collector) -> None:
    """Records expire, never early (how late they are is a benchmark figure: bench/bench_expiration.py)."""
    b = broker_factory(sow=TOPICS)
    c = client_factory(b.uri)
    oof = make_collector()
    c.sow_and_subscribe(oof, "per-message", options="oof", timeout=5000)
    start = time.monotonic()
    c.publish("per-message", '{"id":1}', expiration=2)
    c.publish("per-message", '{"id":2}')  # no expiration: kept
    c.publish("default-2s", '{"id":1}')  # the topic default: 2 s
    c.publish("default-2s", '{"id":2}', expiration=30)  # a message's own expiration wins
    c.publish("no-expiry", '{"id":1}', expiration=1)  # expiration disabled on the topic: ignored
    c.publish_flush(5000)
    expired = [m for m in oof.wait_for(1, command="oof", timeout=15) if m["command"] == "oof"]
    assert time.monotonic() - start >= 1.9, "a record expired before its 2 s expiration"
    assert [(m["reason"], json.loads(m["data"])["id"]) for m in expired] == [("expired", 1)]
    wait_for_ids(c, "default-2s", [2])
    assert time.monotonic() - start >= 1.9, "a record expired before the topic's 2 s expiration"
    assert ids(c, "per-message") == [2]
    assert ids(c, "no-expiry") == [1]


def test_records_that_expired_while_down_are_gone_at_start(broker_factory, client_factory) -> None:
    b = broker_factory(sow=TOPICS)
    c = client_factory(b.uri)
    c.publish("durable", '{"id":1}', expiration=1)
    c.publish("durable", '{"id":2}', expiration=60)
    c.publish("durable", '{"id":3}')
    c.publish_flush(5000)
    c.close()
    b.stop()
    time.sleep(1.1)
    b.start()
    c = client_factory(b.uri)
    assert ids(c, "durable") == [2, 3]
