"""Connections cannot hold the broker's resources forever (issue 14): logon and idle timeouts."""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request

import pytest

pytest.importorskip("AMPS")


def frame(header: dict, body: bytes = b"") -> bytes:
    """One AMPS frame: 4-byte length, JSON header, body."""
    payload = json.dumps(header).encode() + body
    return struct.pack(">I", len(payload)) + payload


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the broker closed ``sock`` (reading and discarding), or ``None`` if it stayed open."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < seconds:
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    return None


def closed_metric(admin_port: int, reason: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(f'broker_connections_closed_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"broker_connections_closed_total{{reason={reason!r}}} not exported")


def test_a_connection_that_never_logs_on_is_closed_after_the_logon_timeout(broker_factory, client_factory) -> None:
    broker = broker_factory(admin=True, transport_extra="<LogonTimeout>1s</LogonTimeout>")
    connected = time.monotonic()
    silent = socket.create_connection(("127.0.0.1", broker.port))
    chatty = socket.create_connection(("127.0.0.1", broker.port))  # sends, but never a logon
    chatty.sendall(frame({"c": "heartbeat", "o": "beat"}))
    logged_on = client_factory(broker.uri)

    assert closed_within(silent, 10) is not None, "a silent connection was kept"
    assert time.monotonic() - connected >= 0.9  # not before the timeout
    assert closed_within(chatty, 10) is not None, "a connection sending no logon was kept"
    logged_on.publish("orders", '{"id":1}')  # the logged-on client stays (sentinel: it still works)
    time.sleep(1.5)  # admin statistics are sampled once per Interval (1s)
    assert closed_metric(broker.admin_port, "logon_timeout") == 2
    assert "no logon within 1s of connecting" in broker.log()


def test_idle_timeout_closes_silent_clients_and_keeps_heartbeating_ones(broker_factory) -> None:
    broker = broker_factory(admin=True, transport_extra="<IdleTimeout>2s</IdleTimeout>")
    silent = socket.create_connection(("127.0.0.1", broker.port))
    silent.sendall(frame({"c": "logon", "cid": "1", "client_name": "silent", "mt": "json"}))
    beating = socket.create_connection(("127.0.0.1", broker.port))
    beating.sendall(frame({"c": "logon", "cid": "1", "client_name": "beating", "mt": "json"}))
    beating.sendall(frame({"c": "heartbeat", "o": "start,1"}))

    start = time.monotonic()
    beating.settimeout(0.2)
    beats = 0
    silent_closed = None
    while time.monotonic() - start < 5:
        if silent_closed is None and closed_within(silent, 0.1) is not None:
            silent_closed = time.monotonic() - start
        try:
            data = beating.recv(65536)
            assert data, "the heartbeating client was closed"
            beats += data.count(b'"heartbeat"')
            beating.sendall(frame({"c": "heartbeat", "o": "beat"}))
        except TimeoutError:
            pass
    assert silent_closed is not None and 1.5 < silent_closed < 4, silent_closed
    assert beats >= 3  # positive sentinel: the heartbeating client was served all along
    time.sleep(1.5)
    assert closed_metric(broker.admin_port, "idle_timeout") == 1
