"""Live messages held during a bookmark replay are bounded (issue 14): a slow replaying subscriber on a busy
topic catches up from the journal (every message exactly once, in order) with the broker holding at most a
quarter of its MessageMemoryLimit; where the journal cannot give back what was held, it is offlined as slow."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import AMPS
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get

TXLOG = """
<JournalDirectory>./journal</JournalDirectory>
<FlushInterval>10ms</FlushInterval>
<Topic><Name>events</Name><MessageType>json</MessageType></Topic>
<Topic><Name>hist</Name><MessageType>json</MessageType></Topic>
"""
SOW = """<Topic><Name>hist</Name><MessageType>json</MessageType><Key>/n</Key><FileName>./sow/%n.sow</FileName>
  <History><Window>1h</Window><Granularity>0s</Granularity></History></Topic>"""
LIMIT = 6 * 1024 * 1024  # MessageMemoryLimit: the replay queues up to 2 MB plus a chunk of at most 512 KiB
BOUND = LIMIT // 4  # what one replaying subscription may hold
PAD = "x" * 2000
BEFORE = 8000  # ~16 MB in the journal: more than the socket buffers and the outbound watermark together
DURING = 3000  # ~6 MB published while the subscriber does not read: four times the bound


def publish_numbered(client, topic: str, start: int, stop: int) -> None:
    for n in range(start, stop):
        client.publish(topic, json.dumps({"n": n, "pad": PAD}))
    client.publish_flush(20000)


def now_stamp() -> str:
    """An AMPS timestamp bookmark after every publish so far and before every later one (microseconds)."""
    as_of = time.time_ns()
    while time.time_ns() <= as_of + 1000:
        pass
    return dt.datetime.fromtimestamp((as_of + 1000) / 1e9, dt.UTC).strftime("%Y%m%dT%H%M%S.%f")


def start(broker_factory, client_factory, **sections: str):  # noqa: ANN201 - (broker, publisher, subscriber)
    """A broker whose clients have a MessageMemoryLimit of LIMIT, a publisher and a subscriber."""
    broker = broker_factory(admin=True, transaction_log=TXLOG,
                            transport_extra=f"<MessageMemoryLimit>{LIMIT}</MessageMemoryLimit>", **sections)
    return broker, client_factory(broker.uri), client_factory(broker.uri)


def metrics(admin_port: int) -> dict[str, float]:
    text = fresh_get(admin_port)[1].decode()  # a statistics sample taken after the call began
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


class BlockedReader:
    """A message handler that stops reading at its first message until released (the client's receive
    thread is stuck in it, so the broker's socket and outbound buffer fill), then records every message."""

    def __init__(self) -> None:
        self.first = threading.Event()
        self.release = threading.Event()
        self.numbers: list[int] = []
        self.completed = threading.Event()
        self.done = threading.Event()
        self.expect = 0

    def __call__(self, message) -> None:  # noqa: ANN001 - AMPS.Message
        command = message.get_command()
        if command == "ack":
            if message.get_ack_type() == "completed":
                self.completed.set()
            return
        if command not in ("publish", "sow"):  # group_begin, group_end of a sow_and_subscribe
            return
        if not self.first.is_set():
            self.first.set()
            self.release.wait(30)
        self.numbers.append(json.loads(message.get_data())["n"])
        if len(self.numbers) >= self.expect:
            self.done.set()


@pytest.mark.timeout(90)
def test_slow_replaying_subscriber_catches_up_exactly_once_within_the_bound(broker_factory, client_factory) -> None:
    broker, pub, sub = start(broker_factory, client_factory)
    publish_numbered(pub, "events", 0, BEFORE)

    reader = BlockedReader()
    reader.expect = BEFORE + DURING
    sub.execute_async(AMPS.Command("subscribe").set_topic("events").set_bookmark("0").add_ack_type("completed"),
                      reader)
    assert reader.first.wait(20), "the replay sent nothing"
    publish_numbered(pub, "events", BEFORE, BEFORE + DURING)  # the flood, while the subscriber reads nothing
    during = metrics(broker.admin_port)
    reader.release.set()

    assert reader.done.wait(60), f"received {len(reader.numbers)} of {BEFORE + DURING}"
    assert reader.completed.wait(20)
    reader.expect += 1
    reader.done.clear()
    pub.publish("events", json.dumps({"n": BEFORE + DURING, "pad": ""}))  # live after the cut-over
    assert reader.done.wait(20)
    assert reader.numbers == list(range(BEFORE + DURING + 1))  # every message once, in order

    after = metrics(broker.admin_port)
    assert during["broker_replays_active"] == 1, "the replay ended before the flood: socket buffers above 16 MB?"
    assert during["broker_replay_held_bytes"] <= BOUND
    assert after["broker_replay_catch_ups_total"] >= 1  # the flood went past the bound
    assert 0 < after["broker_replay_held_peak_bytes"] <= BOUND
    assert after["broker_replay_held_bytes"] == 0
    assert after["broker_slow_client_disconnects_total"] == 0
    assert after["broker_replay_held_offlined_total"] == 0


@pytest.mark.timeout(90)
def test_historical_sow_and_subscribe_catches_up_exactly_once_within_the_bound(broker_factory,
                                                                              client_factory) -> None:
    broker, pub, sub = start(broker_factory, client_factory, sow=SOW)
    pub.publish("hist", json.dumps({"n": -1, "pad": ""}))  # in the snapshot
    pub.publish_flush(5000)
    stamp = now_stamp()
    publish_numbered(pub, "hist", 0, BEFORE)  # replayed from the journal after the snapshot

    reader = BlockedReader()
    reader.expect = 1 + BEFORE + DURING
    sub.execute_async(AMPS.Command("sow_and_subscribe").set_topic("hist").set_bookmark(stamp), reader)
    assert reader.first.wait(20), "the query sent nothing"
    publish_numbered(pub, "hist", BEFORE, BEFORE + DURING)  # the flood, while the subscriber reads nothing
    reader.release.set()

    assert reader.done.wait(60), f"received {len(reader.numbers)} of {reader.expect}"
    reader.expect += 1
    reader.done.clear()
    pub.publish("hist", json.dumps({"n": BEFORE + DURING, "pad": ""}))  # live after the cut-over
    assert reader.done.wait(20)
    assert reader.numbers == list(range(-1, BEFORE + DURING + 1))  # snapshot, replay, held/live: once, in order
    after = metrics(broker.admin_port)
    assert after["broker_replay_catch_ups_total"] >= 1
    assert 0 < after["broker_replay_held_peak_bytes"] <= BOUND
    assert after["broker_replay_held_bytes"] == 0
    assert after["broker_slow_client_disconnects_total"] == 0


@pytest.mark.timeout(60)
def test_held_messages_the_journal_cannot_give_back_offline_the_client_at_the_bound(broker_factory,
                                                                                    client_factory) -> None:
    broker, pub, sub = start(broker_factory, client_factory)
    publish_numbered(pub, "events", 0, BEFORE)

    reader = BlockedReader()
    reader.expect = 10**9
    # A regex bookmark subscription that also matches `plain`, a topic the journal does not record.
    sub.execute_async(AMPS.Command("subscribe").set_topic("^(events|plain)$").set_bookmark("0"), reader)
    assert reader.first.wait(20), "the replay sent nothing"
    publish_numbered(pub, "plain", 0, DURING)
    deadline = time.monotonic() + 30
    while (got := metrics(broker.admin_port))["broker_replay_held_offlined_total"] < 1:
        assert time.monotonic() < deadline, "the replaying client was not offlined"
    reader.release.set()
    assert got["broker_replay_held_offlined_total"] == 1
    assert got["broker_slow_client_disconnects_total"] == 1
    assert "topic 'plain' is not recorded in the transaction log" in broker.log()
    # the session's own disconnect line names the replay, not a query
    assert "replayed the transaction log)" in broker.log() and "while a query streamed" not in broker.log()
    assert got["broker_replay_held_bytes"] == 0
    assert got["broker_replay_held_peak_bytes"] <= BOUND
    pub.publish("events", json.dumps({"n": -1, "pad": ""}))  # the publisher carries on
    pub.publish_flush(5000)


@pytest.mark.timeout(60)
def test_a_paginated_historical_window_that_reaches_the_bound_offlines_the_client(broker_factory,
                                                                                 client_factory) -> None:
    """Its private window needs every change of the topic in order with its own: no catch-up there."""
    broker, pub, sub = start(broker_factory, client_factory, sow=SOW)
    stamp = now_stamp()
    publish_numbered(pub, "hist", 0, BEFORE)  # every record enters the page: each one is sent

    reader = BlockedReader()
    reader.expect = 10**9
    sub.execute_async(AMPS.Command("sow_and_subscribe").set_topic("hist").set_bookmark(stamp).set_order_by("/n")
                      .set_options(f"top_n={10 * BEFORE},skip_n=0"), reader)
    assert reader.first.wait(20), "the query sent nothing"
    publish_numbered(pub, "hist", BEFORE, BEFORE + DURING)
    deadline = time.monotonic() + 30
    while (got := metrics(broker.admin_port))["broker_replay_held_offlined_total"] < 1:
        assert time.monotonic() < deadline, ("the replaying client was not offlined", {k: v for k, v in got.items() if "repl" in k or "slow" in k})
    reader.release.set()
    assert got["broker_slow_client_disconnects_total"] == 1
    assert got["broker_replay_held_bytes"] == 0
    assert got["broker_replay_catch_ups_total"] == 0
    assert "the paginated historical window needs every change" in broker.log()
    assert got["broker_replay_held_peak_bytes"] <= BOUND
