"""Publish/subscribe through the official AMPS Python client over real TCP (issue 3, acceptance 1 and 3)."""

from __future__ import annotations

import json
import socket
import struct
import time

import AMPS
import pytest

from broker.testing.process import BrokerProcess


def frame(header: dict, body: bytes = b"") -> bytes:
    payload = json.dumps(header, separators=(",", ":")).encode() + body
    return struct.pack(">I", len(payload)) + payload


def read_frames(sock: socket.socket, timeout: float = 5.0) -> list[dict]:
    """Read whatever frames arrive within ``timeout`` (stops early at EOF)."""
    sock.settimeout(0.3)
    buf = b""
    deadline = time.monotonic() + timeout
    frames = []
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if frames:
                break
            continue
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 4:
            (n,) = struct.unpack(">I", buf[:4])
            if len(buf) < 4 + n:
                break
            payload = buf[4 : 4 + n]
            buf = buf[4 + n :]
            end = payload.index(b"}") + 1
            frames.append(json.loads(payload[:end]))
    return frames


def raw_logon(port: int, name: str = "raw") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(frame({"c": "logon", "cid": "auto0", "client_name": name, "mt": "json", "a": "processed"}))
    acks = read_frames(sock)
    assert acks and acks[0]["status"] == "success"
    return sock


@pytest.fixture
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    """The module's broker: these tests use their own topics and client names (those restarting a broker or
    changing its config start their own)."""
    return shared_broker


def test_logon_reports_server_version(broker: BrokerProcess, client_factory) -> None:
    client = client_factory(broker.uri)
    assert client.get_server_version() == 5030400


def test_publish_reaches_subscriber(broker, client_factory, make_collector) -> None:
    sub, pub = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    sub_id = sub.subscribe(got, "news")
    for i in range(5):
        pub.publish("news", json.dumps({"n": i}), correlation_id="Y29ycg==")
    msgs = got.wait_for(5)
    assert [json.loads(m["data"])["n"] for m in msgs] == [0, 1, 2, 3, 4]
    assert all(m["sub_id"] == sub_id and m["topic"] == "news" for m in msgs)
    assert msgs[0]["correlation_id"] == "Y29ycg=="


def test_content_filter_selects_messages(broker, client_factory, make_collector) -> None:
    sub, pub = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    sub.subscribe(got, "trades", filter="/qty > 100 AND /sym IN ('IBM', 'MSFT')")
    rows = [{"sym": "IBM", "qty": 50}, {"sym": "IBM", "qty": 150}, {"sym": "AAPL", "qty": 500},
            {"sym": "MSFT", "qty": 101}, {"sym": "MSFT", "qty": "200"}]
    for r in rows:
        pub.publish("trades", json.dumps(r))
    pub.publish("trades", json.dumps({"sym": "END", "qty": 1000}))
    sentinel = {"sym": "MSFT", "qty": 1001, "sentinel": True}  # matches, sent last: once it is here, all is
    pub.publish("trades", json.dumps(sentinel))
    pub.publish_flush(5000)
    got.wait_for(4, timeout=10)
    assert [json.loads(d) for d in got.data()] == [rows[1], rows[3], rows[4], sentinel]


def test_regex_topic_subscription(broker, client_factory, make_collector) -> None:
    sub, pub = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    sub.subscribe(got, "^orders\\.(us|eu)$")
    for topic in ("orders.us", "orders.jp", "orders.eu", "xorders.us", "orders.eu"):  # the last: a sentinel
        pub.publish(topic, json.dumps({"t": topic}))
    got.wait_for(3)
    assert [m["topic"] for m in got.messages] == ["orders.us", "orders.eu", "orders.eu"]


def test_unsubscribe_stops_delivery(broker, client_factory, make_collector) -> None:
    sub, pub = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    sid = sub.subscribe(got, "ticks")
    pub.publish("ticks", '{"n":1}')
    got.wait_for(1)
    sub.unsubscribe(sid)
    sentinel = make_collector()
    sub.subscribe(sentinel, "sentinel")
    sub.publish_flush(5000)
    pub.publish("ticks", '{"n":2}')
    pub.publish("sentinel", "{}")  # after the unwanted message, on the same connections: arrives after it
    pub.publish_flush(5000)
    assert sentinel.wait_for(1) and sentinel.data() == ["{}"]
    assert got.data() == ['{"n":1}']


def test_unsubscribe_all(broker, client_factory, make_collector) -> None:
    sub, pub = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    sub.subscribe(got, "a")
    sub.subscribe(got, "b")
    sub.unsubscribe()  # every subscription
    sentinel = make_collector()
    sub.subscribe(sentinel, "sentinel-all")
    sub.publish_flush(5000)
    pub.publish("a", "{}")
    pub.publish("b", "{}")
    pub.publish("sentinel-all", "{}")  # after the unwanted messages: once it is here, they would be too
    pub.publish_flush(5000)
    assert sentinel.wait_for(1) and sentinel.data() == ["{}"]
    assert got.data() == []


def test_message_stream_and_two_subscriptions_on_one_connection(broker, client_factory) -> None:
    sub, pub = client_factory(broker.uri), client_factory(broker.uri)
    low = sub.subscribe("levels", filter="/v < 10", timeout=5000)
    any_ = sub.subscribe("levels", timeout=5000)
    pub.publish("levels", '{"v":5}')
    pub.publish("levels", '{"v":50}')
    assert next(iter(low)).get_data() == '{"v":5}'
    seen = [m.get_data() for _, m in zip(range(2), any_, strict=False)]
    assert seen == ['{"v":5}', '{"v":50}']


def test_heartbeats_keep_an_idle_connection_alive(broker, client_factory, make_collector) -> None:
    sub, pub = client_factory(broker.uri), client_factory(broker.uri)
    sub.set_heartbeat(1)
    got = make_collector()
    sub.subscribe(got, "quiet")
    time.sleep(3.5)  # longer than the client's 2x read timeout: only heartbeats keep it up
    pub.publish("quiet", '{"still":"here"}')
    assert got.wait_for(1) and got.data() == ['{"still":"here"}']


def test_server_sends_heartbeats(broker) -> None:
    sock = raw_logon(broker.port)
    sock.sendall(frame({"c": "heartbeat", "o": "start,1"}))
    frames = read_frames(sock, timeout=2.5)
    assert {"c": "heartbeat"} in frames
    sock.close()


def test_publish_flush_acks(broker, client_factory) -> None:
    pub = client_factory(broker.uri)
    for i in range(100):
        pub.publish("flushme", json.dumps({"i": i}))
    pub.publish_flush(5000)  # raises TimedOutException without the processed ack


def test_bad_filter_raises_and_other_clients_carry_on(broker, client_factory, make_collector) -> None:
    good, bad, pub = (client_factory(broker.uri) for _ in range(3))
    got = make_collector()
    good.subscribe(got, "feed")
    with pytest.raises(AMPS.BadFilterException):
        bad.subscribe(lambda m: None, "feed", filter="/a = = 1", timeout=5000)
    # the failing connection is still usable
    again = make_collector()
    bad.subscribe(again, "feed", filter="/a = 1", timeout=5000)
    pub.publish("feed", '{"a":1}')
    assert got.wait_for(1) and again.wait_for(1)


def test_invalid_regex_topic(broker, client_factory) -> None:
    client = client_factory(broker.uri)
    with pytest.raises(AMPS.BadRegexTopicException):
        client.subscribe(lambda m: None, "orders(", timeout=5000)


def test_unknown_command_gets_error_ack(broker) -> None:
    sock = raw_logon(broker.port)
    sock.sendall(frame({"c": "frobnicate", "cid": "x1", "a": "processed"}))
    frames = read_frames(sock)
    assert frames[0]["status"] == "failure" and frames[0]["cid"] == "x1"
    assert "command" in frames[0]["reason"]
    # still connected and working
    sock.sendall(frame({"c": "flush", "cid": "x2", "a": "processed"}))
    assert read_frames(sock)[0] == {"c": "ack", "cid": "x2", "a": "processed", "status": "success"}
    sock.close()


def test_command_before_logon_is_refused(broker) -> None:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    sock.sendall(frame({"c": "subscribe", "cid": "s1", "t": "x", "a": "processed"}))
    assert read_frames(sock)[0]["reason"] == "logon required"
    sock.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x05hello",  # header does not start with '{'
        b"\x00\x00\x00\x08{\"c\":\"px",  # unterminated header
        b"\x00\x00\x00\x0d{\"c\":{\"x\":1}}",  # nested object
        b"\x7f\xff\xff\xff",  # oversized frame
    ],
)
def test_malformed_frame_closes_only_that_connection(broker, client_factory, make_collector, garbage) -> None:
    good, pub = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    good.subscribe(got, "steady")
    sock = raw_logon(broker.port, "garbage-sender")
    sock.sendall(garbage)
    sock.settimeout(5)
    assert sock.recv(100) == b""  # the broker closed the broken connection
    sock.close()
    pub.publish("steady", '{"ok":true}')
    assert got.wait_for(1) and got.data() == ['{"ok":true}']


def test_oversized_message_is_refused(broker_factory, client_factory, make_collector) -> None:
    broker = broker_factory(transport_extra="<MaxMessageSize>64KB</MaxMessageSize>")
    sub = client_factory(broker.uri)
    got = make_collector()
    sub.subscribe(got, "big")
    pub = client_factory(broker.uri)
    with pytest.raises(AMPS.AMPSException):
        pub.publish("big", "x" * 100_000)
        pub.publish_flush(3000)
    small = client_factory(broker.uri)
    small.publish("big", '{"fits":1}')
    assert got.wait_for(1) and got.data() == ['{"fits":1}']
    assert "MaxMessageSize" in broker.log() or "exceeds" in broker.log()


def test_ha_client_reconnects_and_resubscribes(tmp_path, make_collector) -> None:
    proc = BrokerProcess.from_xml(tmp_path).start()
    got = make_collector()
    ha = AMPS.HAClient("ha-sub")
    chooser = AMPS.DefaultServerChooser()
    chooser.add(proc.uri)
    ha.set_server_chooser(chooser)
    ha.connect_and_logon()
    try:
        ha.subscribe(got, "ha-topic", sub_id="ha-sub-1")
        pub = AMPS.Client("ha-pub-1")
        pub.connect(proc.uri)
        pub.logon()
        pub.publish("ha-topic", '{"n":1}')
        assert got.wait_for(1)
        pub.close()
        assert proc.stop() == 0
        time.sleep(0.5)
        proc.start()
        deadline = time.monotonic() + 20
        pub = AMPS.Client("ha-pub-2")
        pub.connect(proc.uri)
        pub.logon()
        while time.monotonic() < deadline and len(got.data()) < 2:
            pub.publish("ha-topic", '{"n":2}')
            got.wait_for(2, timeout=0.5)
        pub.close()
        assert got.data()[0] == '{"n":1}' and '{"n":2}' in got.data()[1:]
        assert all(m["sub_id"] == "ha-sub-1" for m in got.messages)
    finally:
        ha.close()
        proc.stop()
