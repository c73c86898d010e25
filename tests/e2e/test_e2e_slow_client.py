"""A subscriber that stops reading is disconnected once its outbound buffer passes the bound; other
clients carry on and the disconnect is counted (slow-client offlining)."""

from __future__ import annotations

import json
import socket
import struct
import time

from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.process import BrokerProcess


def frame(header: dict, body: bytes = b"") -> bytes:
    payload = json.dumps(header, separators=(",", ":")).encode() + body
    return struct.pack(">I", len(payload)) + payload


def wait_for_frames(sock: socket.socket, count: int, timeout: float = 20.0) -> None:
    """Wait until ``count`` whole frames arrived on ``sock``, without reading them (``MSG_PEEK``): the client
    still never reads, but the test knows the broker got as far as sending them."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while True:
        data, frames = sock.recv(65536, socket.MSG_PEEK), 0
        while len(data) >= 4 and len(data) >= 4 + struct.unpack(">I", data[:4])[0]:
            data, frames = data[4 + struct.unpack(">I", data[:4])[0]:], frames + 1
        if frames >= count:
            sock.settimeout(None)
            return
        assert time.monotonic() < deadline, f"{frames} of {count} frames arrived within {timeout}s"
        time.sleep(0.01)


def metric(port: int, name: str) -> float:
    text = fresh_get(port, "/metrics")[1].decode()  # a statistics sample taken after the call
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not exported")


def wait_for_metric(port: int, name: str, at_least: float, timeout: float = 10.0) -> float:
    """The metric's value once it reaches ``at_least`` (or when ``timeout`` runs out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and metric(port, name) < at_least:
        time.sleep(0.2)
    return metric(port, name)


def test_slow_subscriber_is_offlined_and_others_carry_on(tmp_path, client_factory, make_collector) -> None:
    broker = BrokerProcess.from_xml(
        tmp_path, admin=True, transport_extra="<MessageMemoryLimit>256KB</MessageMemoryLimit>").start()
    try:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", broker.port))
        slow.sendall(frame({"c": "logon", "cid": "l", "client_name": "slow", "a": "processed"}))
        slow.sendall(frame({"c": "subscribe", "cid": "s", "t": "flood", "sub_id": "s", "a": "processed"}))
        wait_for_frames(slow, 2)  # the logon's and the subscription's acks: subscribed; and never read again
        fast = client_factory(broker.uri)
        got = make_collector()
        fast.subscribe(got, "flood")
        pub = client_factory(broker.uri)
        body = json.dumps({"pad": "x" * 1000})
        # ~3 MB in all, far past the slow client's 256 KB bound; in steps of ~100 KB that the reading
        # client takes in before the next, so only the client that stopped reading falls behind.
        for step in range(1, 31):
            for _ in range(100):
                pub.publish("flood", body)
            pub.publish_flush(10000)
            got.wait_for(100 * step, timeout=20)
        received = len(got.wait_for(3000, timeout=20))
        assert received == 3000, f"the other subscriber got {received} of 3000\n--- broker log ---\n{broker.log()}"
        assert wait_for_metric(broker.admin_port, "broker_slow_client_disconnects_total", 1) == 1
        assert "slow client" in broker.log()
        slow.close()
    finally:
        broker.stop()


SOW_FLOOD = """<Topic><Name>flood</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""


def test_live_messages_held_behind_a_stalled_snapshot_count_against_the_bound(
        tmp_path, client_factory, make_collector) -> None:
    """sow_and_subscribe holds live updates until its snapshot is sent; a client that stops reading
    mid-snapshot must not make the broker hold them without bound."""
    broker = BrokerProcess.from_xml(
        tmp_path, admin=True, sow=SOW_FLOOD, transport_extra="<MessageMemoryLimit>256KB</MessageMemoryLimit>").start()
    try:
        pub = client_factory(broker.uri)
        pad = "x" * 1000
        for i in range(5000):  # a 5 MB snapshot: far more than the socket buffers take
            pub.publish("flood", json.dumps({"id": i, "pad": pad}))
        pub.publish_flush(20000)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", broker.port))
        stalled.sendall(frame({"c": "logon", "cid": "l", "client_name": "stalled", "a": "processed"}))
        stalled.sendall(frame({"c": "sow_and_subscribe", "cid": "q", "t": "flood", "sub_id": "q", "bs": 10}))
        # The logon's ack and the query's group_begin: the broker holds live messages for it from now on, while
        # the snapshot fills the buffers and waits for a reader that never comes.
        wait_for_frames(stalled, 2)
        reader = client_factory(broker.uri)
        got = make_collector()
        reader.subscribe(got, "flood")
        for i in range(400):  # 400 KB of live updates, held for the stalled client: past its 256 KB
            pub.publish("flood", json.dumps({"id": i, "pad": pad, "v": 2}))
        pub.publish_flush(10000)
        assert len(got.wait_for(400, timeout=20)) == 400  # everyone else carries on
        assert wait_for_metric(broker.admin_port, "broker_slow_client_disconnects_total", 1) == 1
        assert "held while a query streamed" in broker.log()
        stalled.close()
    finally:
        broker.stop()


def test_a_reading_client_gets_a_snapshot_larger_than_its_bound(tmp_path, client_factory) -> None:
    """Query results stream with flow control below the client's bound, so a big SOW never trips it."""
    broker = BrokerProcess.from_xml(
        tmp_path, admin=True, sow=SOW_FLOOD, transport_extra="<MessageMemoryLimit>256KB</MessageMemoryLimit>").start()
    try:
        pub = client_factory(broker.uri)
        pad = "x" * 1000
        for i in range(3000):  # 3 MB of results against a 256 KB bound
            pub.publish("flood", json.dumps({"id": i, "pad": pad}))
        pub.publish_flush(20000)
        querier = client_factory(broker.uri)
        records = [m for m in querier.sow("flood", batch_size=10, timeout=20000) if m.get_command() == "sow"]
        assert len(records) == 3000
        assert metric(broker.admin_port, "broker_slow_client_disconnects_total") == 0
    finally:
        broker.stop()
