"""Issue 34: no frame holds the event loop. An attacker on a raw socket sends what used to stall every client (a
huge logon before authentication, a 50 MB publish, a WebSocket message in thousands of one-byte frames); a bystander
on the official AMPS client keeps working, and the attacker is bounded or closed with a log line.

Behaviour, not timing: the checks are that the broker closes (or answers) the attacker, names the bound in its log,
and that the bystander's round trips (a publish to its own subscription) keep completing.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import AMPS
import pytest

from broker.protocol import CLOSED, NEED_DATA, Connection, encode_frame
from broker.testing.process import BrokerProcess
from broker.testing.wsclient import WsClient, read_until_closed
from tests.e2e.raw_amps import Raw


class Bystander:
    """An official-client session that publishes to its own subscription and waits for each message back."""

    def __init__(self, uri: str) -> None:
        self.client = AMPS.Client(f"bystander-{time.monotonic_ns()}")
        self.client.connect(uri)
        self.client.logon(10000)
        self.topic = f"bystander-{time.monotonic_ns()}"
        self._arrived = threading.Event()
        self.client.subscribe(lambda message: self._arrived.set(), self.topic, timeout=10000)
        self.trips = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def round_trip(self, timeout: float = 10.0) -> None:
        self._arrived.clear()
        self.client.publish(self.topic, "{}")
        assert self._arrived.wait(timeout), "the bystander's own message did not come back"
        self.trips += 1

    def start(self) -> None:
        """Keep round-tripping in a thread until :meth:`stop`."""
        def loop() -> None:
            while not self._stop.is_set():
                self.round_trip(30.0)
                time.sleep(0.002)
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def close(self) -> None:
        self.stop()
        self.client.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker (TCP and websocket) for the module: its tests use client names and topics of their own, and
    a test looking for a log line reads only what was logged since it began."""
    with BrokerProcess.from_xml(tmp_path_factory.mktemp("frames"), websocket=True) as proc:
        yield proc


def _answer_or_close(sock: socket.socket, timeout: float = 20.0) -> dict | None:
    """The first frame's header the broker sends on ``sock``, or ``None`` when it closes the connection first."""
    sock.settimeout(timeout)
    conn = Connection()
    while True:
        event = conn.next_event()
        if event is CLOSED:
            return None
        if event is NEED_DATA:
            try:
                conn.receive_data(sock.recv(65536))
            except (ConnectionResetError, BrokenPipeError):
                return None
            continue
        return dict(event.header.fields())


def _send_ignoring_reset(sock: socket.socket, data: bytes) -> None:
    # The broker may close the connection before taking everything: what the bound does.
    with contextlib.suppress(ConnectionResetError, BrokenPipeError):
        sock.sendall(data)


def test_a_logon_frame_over_the_logon_bound_is_closed_with_a_log_line(broker: BrokerProcess) -> None:
    logged_before = len(broker.log())
    bystander = Bystander(broker.uri)
    try:
        bystander.start()
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
        try:
            _send_ignoring_reset(sock, encode_frame({"c": "logon", "cid": "L", "client_name": "huge-logon",
                                                     "a": "processed", "user_id": "u" * 2_000_000}))
            assert _answer_or_close(sock) is None, "a 2 MB logon before authentication was read and answered"
        finally:
            sock.close()
        deadline = time.monotonic() + 10
        while "MaxLogonSize" not in broker.log()[logged_before:] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "MaxLogonSize" in broker.log()[logged_before:], broker.log()[-2000:]
        before = bystander.trips
        deadline = time.monotonic() + 20
        while bystander.trips < before + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bystander.trips >= before + 3
    finally:
        bystander.close()


def test_a_logon_within_the_bound_works_and_the_bound_lifts_after_it(broker: BrokerProcess) -> None:
    # 16 KB of credentials pass the 64 KB default; once logged on, MaxMessageSize (64 MB) applies: a 1 MB publish
    # goes through to a subscriber.
    raw = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
    taker = AMPS.Client(f"taker-{time.monotonic_ns()}")
    try:
        taker.connect(broker.uri)
        taker.logon(10000)
        got: list[int] = []
        arrived = threading.Event()

        def on_message(message: object) -> None:
            got.append(len(message.get_data()))  # type: ignore[attr-defined]
            arrived.set()

        taker.subscribe(on_message, "lifted", timeout=10000)
        raw.sendall(encode_frame({"c": "logon", "cid": "L", "client_name": "long-credentials", "a": "processed",
                                  "mt": "json", "user_id": "u" * 16_000}))
        ack = _answer_or_close(raw)
        assert ack is not None and ack.get("status") == "success", ack
        body = b'{"x":"' + b"a" * 1_000_000 + b'"}'
        raw.sendall(encode_frame({"c": "p", "t": "lifted"}, body))
        assert arrived.wait(20), broker.log()[-2000:]
        assert got == [len(body)]
    finally:
        raw.close()
        taker.close()


def test_max_logon_size_is_configurable_and_checked(tmp_path: Path) -> None:
    proc = BrokerProcess.from_xml(tmp_path, transport_extra="<MaxLogonSize>400KB</MaxLogonSize>").start()
    try:
        raw = Raw.__new__(Raw)  # a Raw whose logon carries 300 KB of credentials
        raw.sock = socket.create_connection(("127.0.0.1", proc.port), timeout=20)
        raw.conn = Connection()
        raw.send({"c": "logon", "cid": "L", "client_name": "big-credentials", "a": "processed", "mt": "json",
                  "user_id": "u" * 300_000})
        assert raw.ack("L", "processed")["status"] == "success"
        raw.close()
    finally:
        proc.stop()
    bad = tmp_path / "bad.xml"
    bad.write_text(proc.config_path.read_text().replace("<MaxLogonSize>400KB", "<MaxLogonSize>100"))
    checked = subprocess.run([sys.executable, "-m", "broker", "check", str(bad)], capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode != 0
    assert "MaxLogonSize must be at least 256 bytes" in checked.stdout + checked.stderr


def test_a_50mb_publish_is_delivered_intact_while_a_bystander_keeps_round_tripping(broker: BrokerProcess) -> None:
    size = 50_000_000
    body = b'{"x":"' + b"a" * (size - 8) + b'"}'
    taker = AMPS.Client(f"taker-{time.monotonic_ns()}")
    taker.connect(broker.uri)
    taker.logon(10000)
    got: list[bytes] = []
    arrived = threading.Event()

    def on_message(message: object) -> None:
        got.append(message.get_data_raw() if hasattr(message, "get_data_raw") else message.get_data())  # type: ignore[attr-defined]
        arrived.set()

    taker.subscribe(on_message, "big", timeout=10000)
    bystander = Bystander(broker.uri)
    raw = Raw(broker.port, "big-publisher")
    try:
        bystander.start()
        time.sleep(0.2)
        before = bystander.trips
        sender = threading.Thread(target=raw.send, args=({"c": "p", "t": "big", "cid": "big", "a": "processed"}, body))
        sender.start()
        assert raw.ack("big", "processed")["status"] == "success"
        during = bystander.trips - before  # round trips completed while the frame was sent, read and applied
        sender.join(60)
        assert arrived.wait(60), broker.log()[-2000:]
        data = got[0]
        assert len(data) == len(body) and (data if isinstance(data, bytes) else data.encode()) == body
        assert during >= 3, f"the bystander completed only {during} round trips while 50 MB were read"
        after = bystander.trips
        deadline = time.monotonic() + 20
        while bystander.trips < after + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bystander.trips >= after + 3
    finally:
        raw.close()
        bystander.close()
        taker.close()


def _deliver_to_tcp_and_websocket(broker: BrokerProcess, topic: str, body: bytes, filter_: str | None = None,
                                  before: bytes | None = None) -> None:
    """Publish ``before`` (when given: a message the subscriptions' ``filter_`` does not match) then ``body`` to
    ``topic``, subscribed by the official client over TCP and a client over the WebSocket transport; check that
    ``body`` alone arrives intact at both and that a bystander kept round-tripping while the broker wrote it."""
    taker = AMPS.Client(f"taker-{time.monotonic_ns()}")
    taker.connect(broker.uri)
    taker.logon(10000)
    got: list[bytes] = []
    arrived = threading.Event()

    def on_message(message: object) -> None:
        got.append(message.get_data_raw() if hasattr(message, "get_data_raw") else message.get_data())  # type: ignore[attr-defined]
        arrived.set()

    taker.subscribe(on_message, topic, filter_, timeout=10000)
    assert broker.websocket_port
    ws = WsClient.connect(broker.websocket_port, f"ws-taker-{time.monotonic_ns()}", timeout=60)
    ws.command({"c": "subscribe", "cid": "s", "t": topic, "sub_id": "ws-big", "a": "processed",
                **({"filter": filter_} if filter_ else {})})
    assert ws.next_message(10)[0].get("status") == "success"
    ws_got: list[tuple[dict, bytes | None]] = []
    ws_failed: list[BaseException] = []

    def ws_read() -> None:
        try:
            ws_got.append(ws.next_message(120))
        except BaseException as exc:  # reported below
            ws_failed.append(exc)

    reader = threading.Thread(target=ws_read, daemon=True)
    reader.start()
    bystander = Bystander(broker.uri)
    raw = Raw(broker.port, f"big-publisher-{topic}")
    try:
        bystander.start()
        time.sleep(0.2)
        if before is not None:
            raw.send({"c": "p", "t": topic, "cid": "miss", "a": "processed"}, before)
            assert raw.ack("miss", "processed")["status"] == "success"
        raw.send({"c": "p", "t": topic, "cid": "big", "a": "processed"}, body)
        assert raw.ack("big", "processed")["status"] == "success"
        start = bystander.trips  # from the ack on: the broker frames and writes 50 MB to each subscriber
        assert arrived.wait(120), broker.log()[-2000:]
        reader.join(120)
        during = bystander.trips - start
        assert not ws_failed, f"the WebSocket subscriber failed: {ws_failed[0]!r}"
        assert len(got) == 1, f"the TCP subscriber got {len(got)} messages, one was meant for it"
        data = got[0]
        assert len(data) == len(body) and (data if isinstance(data, bytes) else data.encode()) == body
        header, ws_data = ws_got[0]
        assert header.get("c") == "p" and header.get("t") == topic and ws_data == body, header
        assert during >= 3, f"the bystander completed only {during} round trips while 50 MB were delivered twice"
    finally:
        raw.close()
        bystander.close()
        ws.close()
        taker.close()


def test_a_50mb_message_reaches_a_tcp_and_a_websocket_subscriber_while_a_bystander_round_trips(
        broker: BrokerProcess) -> None:
    """The delivery side: one 50 MB message framed and written to two subscribers (the official client over TCP,
    a client over the WebSocket transport) arrives intact at both, and the bystander keeps round-tripping while
    the broker writes it (the frame is written in slices with other clients served between, issue 34)."""
    _deliver_to_tcp_and_websocket(broker, "big2", b'{"x":"' + b"b" * (50_000_000 - 8) + b'"}')


def test_a_50mb_message_reaches_filtered_subscribers_intact_while_a_bystander_round_trips(
        broker: BrokerProcess) -> None:
    """The filtered path (a content filter per subscription: each message decided per client, framed whole): one
    50 MB message that the filters of a TCP and a WebSocket subscriber match arrives intact at both, one that
    they do not match reaches neither, and the bystander keeps round-tripping while the broker writes it (the
    body is written as it is, in slices, never copied whole: issue 34)."""
    size = 50_000_000
    _deliver_to_tcp_and_websocket(broker, "big3", b'{"id":1,"x":"' + b"f" * (size - 15) + b'"}', "/id = 1",
                                  before=b'{"id":2,"x":"' + b"g" * (size - 15) + b'"}')


def _tls_broker(directory: Path, protocol: str) -> tuple[BrokerProcess, Callable[[], socket.socket]]:
    """A broker (not started) with a ``tcps`` transport of ``protocol`` (``amps``, ``websocket``), and a function
    that opens a verified TLS connection to that transport."""
    import ssl

    from broker.testing.process import free_port
    from broker.testing.tls import make_ca

    ca = make_ca(directory, f"frames-tls-{protocol}-ca")
    certificate, key = ca.issue("server", server=True)
    tls_port = free_port()
    extra = f"""<Transports><Transport><Name>secure</Name><Type>tcps</Type>
      <InetAddr>127.0.0.1:{tls_port}</InetAddr><Protocol>{protocol}</Protocol>
      <Certificate>{certificate}</Certificate><PrivateKey>{key}</PrivateKey></Transport></Transports>"""
    context = ssl.create_default_context(cafile=str(ca.cert_path))

    def connect() -> socket.socket:
        return context.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=60),
                                   server_hostname="127.0.0.1")
    return BrokerProcess.from_xml(directory, extra=extra), connect


def test_a_large_message_reaches_a_wss_subscriber_intact(tmp_path: Path) -> None:
    """WebSocket over TLS (``wss``): a message larger than LARGE_BODY, written in slices (issue 34), arrives
    whole, as one WebSocket data message after its header message."""
    body = b'{"x":"' + b"w" * 3_000_000 + b'"}'
    proc, connect = _tls_broker(tmp_path, "websocket")
    with proc as broker:
        ws = WsClient(connect())
        ws.send_text("text")
        ws.command({"c": "logon", "cid": "L", "client_name": "wss-taker", "a": "processed"})
        assert ws.next_message(10)[0].get("status") == "success"
        ws.command({"c": "subscribe", "cid": "s", "t": "big-wss", "sub_id": "wss", "a": "processed"})
        assert ws.next_message(10)[0].get("status") == "success"
        raw = Raw(broker.port, "big-publisher-wss")
        try:
            raw.send({"c": "p", "t": "big-wss", "cid": "big", "a": "processed"}, body)
            assert raw.ack("big", "processed")["status"] == "success"
            header, data = ws.next_message(60)
            assert header.get("c") == "p" and header.get("t") == "big-wss" and data == body, header
        finally:
            raw.close()
            ws.close()


def test_a_50mb_message_reaches_a_tls_subscriber_intact_while_a_bystander_round_trips(tmp_path: Path) -> None:
    """The TLS writer: one 50 MB message to a subscriber on a ``tcps`` transport arrives intact (encrypted a
    slice at a time, not in one 50 MB ``send_all`` on the loop, issue 34) while a TCP bystander round-trips."""
    size = 50_000_000
    body = b'{"x":"' + b"t" * (size - 8) + b'"}'
    proc, connect = _tls_broker(tmp_path, "amps")
    with proc as broker:
        sock = connect()
        conn = Connection()

        def next_frame() -> tuple[dict, bytes]:
            while (event := conn.next_event()) is NEED_DATA:
                conn.receive_data(sock.recv(1 << 20))
            assert event is not CLOSED, "the broker closed the TLS subscriber"
            if not hasattr(event, "header"):
                event = event.join()  # type: ignore[attr-defined]
            return dict(event.header.fields()), bytes(event.body)  # type: ignore[attr-defined]

        sock.sendall(encode_frame({"c": "logon", "cid": "L", "client_name": "tls-taker", "a": "processed"}))
        assert next_frame()[0].get("status") == "success"
        sock.sendall(encode_frame({"c": "subscribe", "cid": "s", "t": "big-tls", "sub_id": "tls", "a": "processed"}))
        assert next_frame()[0].get("status") == "success"
        bystander = Bystander(broker.uri)
        raw = Raw(broker.port, "big-publisher-tls")
        try:
            bystander.start()
            time.sleep(0.2)
            raw.send({"c": "p", "t": "big-tls", "cid": "big", "a": "processed"}, body)
            assert raw.ack("big", "processed")["status"] == "success"
            before = bystander.trips
            header, data = next_frame()
            during = bystander.trips - before
            assert header.get("command") == "publish" and header.get("topic") == "big-tls", header
            assert data == body
            assert during >= 3, f"the bystander completed only {during} round trips while 50 MB were sent over TLS"
        finally:
            raw.close()
            bystander.close()
            sock.close()


def _fragments(count: int) -> bytes:
    """A command (count message, then a header message of ``count`` one-byte frames: ``{`` spaces ``}``)."""
    key = b"\x01\x02\x03\x04"

    def frame(opcode: int, payload: bytes, fin: bool) -> bytes:
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        return bytes(((0x80 if fin else 0) | opcode, 0x80 | len(payload))) + key + masked

    return (frame(0x2, (1).to_bytes(4, "little"), True) + frame(0x1, b"{", False)
            + frame(0x0, b" ", False) * (count - 2) + frame(0x0, b"}", True))


def test_a_websocket_fragment_flood_is_closed_and_bystanders_work(broker: BrokerProcess) -> None:
    logged_before = len(broker.log())
    bystander = Bystander(broker.uri)
    ws_bystander = WsClient.connect(broker.websocket_port or 0, f"ws-bystander-{time.monotonic_ns()}")
    attacker = WsClient.connect(broker.websocket_port or 0, f"ws-attacker-{time.monotonic_ns()}")
    try:
        bystander.start()
        _send_ignoring_reset(attacker.sock, _fragments(20_000))
        closing = read_until_closed(attacker.sock, 30)
        assert b"frames" in closing, closing[-200:]  # the close frame's reason names the fragment bound
        assert "more than 4096 frames" in broker.log()[logged_before:]
        ws_bystander.command({"c": "flush", "cid": "f1", "a": "processed"})
        header, _ = ws_bystander.next_message(20)
        assert header.get("c") == "ack" and header.get("cid") == "f1", header
        before = bystander.trips
        deadline = time.monotonic() + 20
        while bystander.trips < before + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bystander.trips >= before + 3
    finally:
        attacker.close()
        ws_bystander.close()
        bystander.close()


def test_a_websocket_message_in_a_few_fragments_is_still_accepted(broker: BrokerProcess) -> None:
    client = WsClient.connect(broker.websocket_port or 0, f"ws-fragmented-{time.monotonic_ns()}")
    try:
        client.sock.sendall(_fragments(1000))  # a header "{ ... }" in 1,000 frames: an empty command, refused
        client.command({"c": "flush", "cid": "f2", "a": "processed"})
        seen = []
        while True:
            header, _ = client.next_message(20)
            seen.append(header)
            if header.get("cid") == "f2":
                break
        assert seen[-1].get("status") == "success", seen
    finally:
        client.close()


@pytest.mark.parametrize("chunk", [1000, 65536, 3_000_000])
def test_a_large_frame_is_gathered_read_by_read_and_joined_by_the_caller(chunk: int) -> None:
    # Sans-IO: a connection made with large_frames hands a frame of LARGE_FRAME bytes or more out as a LargeFrame
    # (header decoded, body in the parts as read; the session joins them in a worker thread), and the frame after it
    # as usual, whatever the read sizes.
    from broker.protocol._connection import LARGE_FRAME, LargeFrame

    body = b'{"a":"' + b"a" * (3 * LARGE_FRAME) + b'"}'
    wire = encode_frame({"c": "logon"}) + encode_frame({"c": "p", "t": "big"}, body) + encode_frame(
        {"c": "p", "t": "small"}, b"{}")
    conn = Connection(large_frames=True)
    out: list = []
    for i in range(0, len(wire), chunk):
        conn.receive_data(wire[i:i + chunk])
        while (event := conn.next_event()) is not NEED_DATA:
            out.append(event)
            if type(event) is LargeFrame:
                assert conn.pending_frame_size() < LARGE_FRAME
    assert [type(e).__name__ for e in out] == ["Frame", "LargeFrame", "Frame"]
    big = out[1].join()
    assert big.header.topic == "big" and big.body == body and len(out[1].parts) > 1 or chunk > len(body)
    assert out[2].header.topic == "small" and out[2].body == b"{}"


def test_a_websocket_logon_over_the_logon_bound_is_closed_and_the_bound_lifts_after_logon(
        broker: BrokerProcess) -> None:
    from broker.testing.wsclient import WsClosed

    stranger = WsClient.connect(broker.websocket_port or 0)  # says "text", does not log on
    try:
        stranger.command({"c": "logon", "cid": "L", "client_name": "ws-huge-logon", "a": "processed",
                          "user_id": "u" * 1_000_000})
        with pytest.raises(WsClosed) as closed:
            stranger.next_message(20)
        assert closed.value.code == 1009 and "MaxLogonSize" in str(closed.value), closed.value
    finally:
        stranger.close()
    client = WsClient.connect(broker.websocket_port or 0, f"ws-after-logon-{time.monotonic_ns()}")
    try:
        client.command({"c": "publish", "t": "ws-big", "cid": "p1", "a": "processed"},
                       '{"x":"' + "a" * 1_000_000 + '"}')
        header, _ = client.next_message(20)
        assert header.get("c") == "ack" and header.get("status") == "success", header
    finally:
        client.close()
