"""A subscriber that stops reading is disconnected once its outbound buffer passes the bound; other
clients carry on and the disconnect is counted (slow-client offlining)."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from broker.testing.process import BrokerProcess


def frame(header: dict, body: bytes = b"") -> bytes:
    payload = json.dumps(header, separators=(",", ":")).encode() + body
    return struct.pack(">I", len(payload)) + payload


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for family in text_string_to_metric_families(r.read().decode()):
            for s in family.samples:
                if s.name == name:
                    return s.value
    raise AssertionError(f"{name} not exported")


def test_slow_subscriber_is_offlined_and_others_carry_on(tmp_path, client_factory, make_collector) -> None:
    broker = BrokerProcess.from_xml(
        tmp_path, admin=True, transport_extra="<MessageMemoryLimit>256KB</MessageMemoryLimit>").start()
    try:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", broker.port))
        slow.sendall(frame({"c": "logon", "cid": "l", "client_name": "slow", "a": "processed"}))
        slow.sendall(frame({"c": "subscribe", "cid": "s", "t": "flood", "sub_id": "s", "a": "processed"}))
        time.sleep(0.3)  # and never read again
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
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and metric(broker.admin_port, "broker_slow_client_disconnects_total") < 1:
            time.sleep(0.2)
        assert metric(broker.admin_port, "broker_slow_client_disconnects_total") == 1
        assert "slow client" in broker.log()
        slow.close()
    finally:
        broker.stop()
