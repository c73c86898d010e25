"""The websocket transport against bad input (issue 19): each kind closes only the connection that sent
it, with the right WebSocket close code, and clients already connected carry on. Also ping/pong, and the
log line for an HTTP request on a plain AMPS TCP port."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator

import pytest
from wsproto.frame_protocol import Opcode

from broker.testing.process import BrokerProcess
from broker.testing.wsclient import WsClient, WsClosed, masked_frame, raw_connect, read_until_closed

MAX = 64 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess.from_xml(tmp_path_factory.mktemp("ws"), websocket=True,
                                  websocket_extra=f"<MaxMessageSize>{MAX}</MaxMessageSize>"
                                                  "<MessageMemoryLimit>256KB</MessageMemoryLimit>").start()
    yield proc
    proc.stop()


@pytest.fixture
def witness(broker: BrokerProcess) -> Iterator[tuple[WsClient, WsClient]]:
    """A subscriber and a publisher connected before the bad input, checked after it."""
    sub = WsClient.connect(broker.websocket_port, f"witness-sub-{id(broker)}")
    pub = WsClient.connect(broker.websocket_port, f"witness-pub-{id(broker)}")
    sub.command({"c": "subscribe", "t": "witness", "sub_id": "w", "cid": "w", "a": "processed"})
    header, _ = sub.next_message()
    assert header["c"] == "ack" and header["status"] == "success"
    yield sub, pub
    sub.close()
    pub.close()


def still_working(witness: tuple[WsClient, WsClient], n: int) -> None:
    sub, pub = witness
    pub.command({"c": "publish", "t": "witness"}, f'{{"n":{n}}}')
    header, data = sub.next_message()
    assert (header["c"], header["t"], data) == ("p", "witness", f'{{"n":{n}}}'.encode())


def close_code(sock: socket.socket) -> int | None:
    """The code of the close frame the server sent last (None: it closed without one)."""
    data = read_until_closed(sock)
    at = data.rfind(b"\x88")
    if at < 0 or len(data) < at + 4:
        return None
    return struct.unpack(">H", data[at + 2:at + 4])[0]


def assert_closed(client: WsClient, code: int) -> None:
    with pytest.raises(WsClosed) as closed:
        client.next_payload()
    assert closed.value.code == code


def opened(broker: BrokerProcess) -> socket.socket:
    """A raw socket after a completed handshake and the client's "text" message."""
    sock = raw_connect(broker.websocket_port)
    sock.sendall(b"GET /amps/json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101")
    sock.sendall(masked_frame(Opcode.TEXT, b"text"))
    return sock


def test_non_websocket_bytes_get_an_http_error_and_a_close(broker, witness) -> None:
    sock = raw_connect(broker.websocket_port)
    sock.sendall(b"\x00\x00\x00\x20{\"c\":\"logon\",\"cid\":\"1\"}   this is AMPS over TCP\r\n\r\n")
    assert read_until_closed(sock).startswith(b"HTTP/1.1 400")
    still_working(witness, 1)


def test_a_plain_http_get_is_refused_with_an_http_answer(broker, witness) -> None:
    sock = raw_connect(broker.websocket_port)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_until_closed(sock).startswith(b"HTTP/1.1 4")
    still_working(witness, 2)


@pytest.mark.parametrize(("path", "status"), [("/other", 404), ("/amps/fix", 400)])
def test_an_unknown_path_or_message_type_is_refused_in_the_handshake(broker, path, status) -> None:
    with pytest.raises(WsClosed) as refused:
        WsClient.connect(broker.websocket_port, path=path)
    assert refused.value.code == status


def test_a_huge_message_closes_with_1009_before_it_is_buffered(broker, witness) -> None:
    sock = opened(broker)
    sock.sendall(masked_frame(Opcode.BINARY, b"x" * (MAX + 1024), declared=1 << 40)[:MAX + 2048])
    assert close_code(sock) == 1009
    assert "MaxMessageSize" in broker.log()
    still_working(witness, 3)


def test_a_command_whose_parts_exceed_the_limit_closes_with_1009(broker, witness) -> None:
    client = WsClient.connect(broker.websocket_port, "big-parts")
    client.command({"c": "publish", "t": "witness"}, "y" * (MAX - 10))
    assert_closed(client, 1009)
    still_working(witness, 4)


def test_an_unmasked_frame_closes_with_1002(broker, witness) -> None:
    sock = opened(broker)
    sock.sendall(masked_frame(Opcode.BINARY, struct.pack("<I", 1), mask=False))
    assert close_code(sock) == 1002
    still_working(witness, 5)


def test_a_first_message_other_than_text_or_binary_closes_with_1002(broker, witness) -> None:
    sock = raw_connect(broker.websocket_port)
    client = WsClient(sock)
    client.send_text("hello")
    assert_closed(client, 1002)
    still_working(witness, 6)


def test_a_close_in_the_middle_of_a_command_drops_it(broker, witness) -> None:
    sock = opened(broker)
    logon = b'{"c":"logon","cid":"1","client_name":"mid-close"}'
    sock.sendall(masked_frame(Opcode.BINARY, struct.pack("<I", 1)) + masked_frame(Opcode.TEXT, logon))
    # A publish announced as header + data; the header arrives, then a close frame instead of the data.
    sock.sendall(masked_frame(Opcode.BINARY, struct.pack("<I", 2))
                 + masked_frame(Opcode.TEXT, b'{"c":"publish","t":"witness"}')
                 + masked_frame(Opcode.CLOSE, struct.pack(">H", 1000)))
    assert close_code(sock) == 1000, "the server answers the close"
    still_working(witness, 7)  # and the half-sent publish never reached the subscriber (next is n=7)


def test_end_of_stream_in_the_middle_of_a_frame(broker, witness) -> None:
    sock = opened(broker)
    sock.sendall(masked_frame(Opcode.BINARY, b"abcdef", declared=1000)[:20])
    sock.close()
    still_working(witness, 8)


def test_ping_is_answered_with_pong(broker) -> None:
    client = WsClient.connect(broker.websocket_port, "pinger")
    client.ping(b"are-you-there")
    client.command({"c": "heartbeat", "cid": "hb", "a": "processed"})
    client.next_payload()
    assert client.pongs == [b"are-you-there"]
    client.close()


def test_an_http_request_on_the_tcp_port_logs_which_port_speaks_websocket(broker) -> None:
    sock = raw_connect(broker.port)
    sock.sendall(b"GET /amps/json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n")
    read_until_closed(sock)
    lines = [line for line in broker.log().splitlines() if "HTTP request" in line]
    assert len(lines) == 1, broker.log()
    assert "speaks AMPS over TCP" in lines[0] and f"port {broker.websocket_port}" in lines[0]
    assert "MaxMessageSize" not in lines[0]


def test_a_websocket_client_that_stops_reading_is_offlined_as_a_slow_client(broker, witness) -> None:
    import AMPS

    slow = WsClient.connect(broker.websocket_port, "slow-reader")
    slow.command({"c": "subscribe", "t": "flood", "sub_id": "f", "cid": "f", "a": "processed"})
    assert slow.next_message()[0]["status"] == "success"
    publisher = AMPS.Client("flood-publisher")
    publisher.connect(broker.uri)
    publisher.logon()
    try:
        body = '{"pad":"' + "x" * 1000 + '"}'
        offlined = False
        for _ in range(100):  # until the broker says so: socket buffers absorb a few MB first
            for _ in range(1000):
                publisher.publish("flood", body)
            publisher.publish_flush()
            offlined = "(slow-reader) disconnected: outbound buffer exceeded 262144 bytes" in broker.log()
            if offlined:
                break
        assert offlined, "the slow websocket client was never offlined"
    finally:
        publisher.close()
        slow.sock.close()
    still_working(witness, 9)


def test_a_partial_message_counts_against_the_broker_wide_memory_limit(tmp_path) -> None:
    """Bytes of a WebSocket message still being received are reserved in TotalMessageMemoryLimit: a message
    that does not fit closes its connection before more is buffered."""
    # MaxLogonSize 4MB: the message below (sent before any logon) passes the logon bound (64KB by default, which
    # would close it first) and meets the memory budget this test is about.
    proc = BrokerProcess.from_xml(tmp_path, websocket=True,
                                  extra="<TotalMessageMemoryLimit>1MB</TotalMessageMemoryLimit>",
                                  websocket_extra="<MaxLogonSize>4MB</MaxLogonSize>").start()
    try:
        sock = opened(proc)
        chunk = 256 * 1024
        sock.sendall(masked_frame(Opcode.BINARY, b"m" * chunk, fin=False))
        for _ in range(6):  # continuation frames: 1.75 MB in all, never finished
            try:
                sock.sendall(masked_frame(Opcode.CONTINUATION, b"m" * chunk, fin=False))
            except OSError:
                break
        read_until_closed(sock)  # the close frame (1009) may be lost to a reset: the client was still sending
        assert "does not fit the broker-wide TotalMessageMemoryLimit" in proc.log()
        other = WsClient.connect(proc.websocket_port, "after-the-refusal")
        other.command({"c": "subscribe", "t": "x", "sub_id": "x", "cid": "x", "a": "processed"})
        assert other.next_message()[0]["status"] == "success"
        other.close()
    finally:
        proc.stop()


def test_a_client_the_broker_ends_learns_why_in_a_close_frame(broker, witness) -> None:
    """A disconnect the broker decides (here: a second logon with the same name, AMPS's rule) reaches a
    WebSocket client as close 1008 with the reason, not as a connection cut without a close frame (1006)."""
    first = WsClient.connect(broker.websocket_port, "same-name")
    second = WsClient.connect(broker.websocket_port, "same-name")
    with pytest.raises(WsClosed) as closed:
        first.next_payload()
    assert closed.value.code == 1008
    assert "same-name" in closed.value.reason or "logon" in closed.value.reason, closed.value.reason
    second.close()
    still_working(witness, 10)


def test_websocket_pings_keep_a_connection_within_the_idle_timeout(tmp_path) -> None:
    """<IdleTimeout> counts WebSocket pings as traffic: a client that only pings stays; one that sends
    nothing is closed with 1008 naming the timeout."""
    proc = BrokerProcess.from_xml(tmp_path, websocket=True,
                                  websocket_extra="<IdleTimeout>1s</IdleTimeout>").start()
    try:
        pinger = WsClient.connect(proc.websocket_port, "pinger")
        silent = WsClient.connect(proc.websocket_port, "silent")
        for _ in range(8):  # 2 s of pings every 0.25 s: twice the timeout
            pinger.ping(b"still-here")
            with contextlib.suppress(TimeoutError):
                pinger.next_payload(timeout=0.25)
        with pytest.raises(WsClosed) as closed:
            silent.next_payload(timeout=10)
        assert closed.value.code == 1008 and "idle" in closed.value.reason
        pinger.command({"c": "heartbeat", "cid": "hb", "a": "processed"})
        header, _ = pinger.next_message()
        assert header["c"] == "ack" and header["status"] == "success"
        assert b"still-here" in pinger.pongs
        pinger.close()
    finally:
        proc.stop()
