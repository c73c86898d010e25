"""Attack figures (issue 34): a bystander's round trip alone and next to a client that sends frames meant to
hold the event loop.

Run from the repository root: ``python -m bench.attacks [--quick] [--seconds 2]``. One broker serves the whole
run (TCP and WebSocket transports). Each row measures an official-client bystander's round trips (a publish to its own subscription) for
the same time twice: quiet, then while an attacker repeats one attack on a raw socket; and prints both p99s and
their ratio. Rows:

* ``publish-50mb``: a logged-on client publishes one 50 MB message (a subscriber takes it), again and again.
* ``publish-50mb-filtered``: the same, to a topic whose subscriber has a content filter the message matches.
* ``publish-50mb-sow``: the same, to a SOW topic (key ``/id``) with a subscriber.
* ``publish-50mb-ws``: the same, to a topic whose subscriber is on the WebSocket transport.
* ``publish-50mb-tls``: the same, to a topic whose subscriber is on the ``tcps`` (TLS) transport.
* ``replay-50mb``: a logged-on client replays, from the journal (a bookmark subscription from EPOCH), a topic
  holding one 50 MB message (published once, before the first replay), again and again.
* ``logon-60mb``: a new connection sends, before any logon, a logon frame whose user_id is 60 MB.
* ``ws-fragments``: a logged-on WebSocket client sends a message of 200,000 one-byte frames (1.4 MB).
* ``admin-flood``: 1,000 concurrent HTTP requests to the Admin port, half ``/amps.json``, half ``/metrics``
  from four addresses (one thread, non-blocking sockets: the attacker's own Python stays off the
  bystander's GIL).
* ``logon-flood``: 40 threads log on with wrong passwords to an authenticated transport (a raw logon frame
  per try, a new connection after the broker closes one).
* ``admin-guess``: 8 threads guess Admin basic-auth passwords (``/amps/instance.json``).
* ``tls-handshakes``: 12 threads complete TLS handshakes to a ``tcps`` transport and close, 100 each.

``--quick`` (the tests/bench test, a few seconds) uses 8 MB frames, 50,000 fragments, 200 Admin requests, and
fewer tries per thread. Every attack is bounded in count and time (a burst ends within 30 s) and stops by itself.
"""

from __future__ import annotations

import argparse
import base64
import selectors
import socket
import ssl
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.protocol import CLOSED, NEED_DATA, Connection, encode_frame

#: One attack: run once against the broker (``port``, ``ws_port``), returning when its work is done.
Attack = Callable[[int, int], None]


@dataclass
class Row:
    """One attack's figures: the bystander's round trips (seconds) quiet and attacked, and the attacks run."""

    name: str
    quiet: list[float]
    attacked: list[float]
    attacks: int
    #: What the attacker saw, by outcome (HTTP status, logon ack status, "handshake", "error"...).
    outcomes: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def _p99(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")

    @property
    def quiet_p99(self) -> float:
        return self._p99(self.quiet)

    @property
    def attacked_p99(self) -> float:
        return self._p99(self.attacked)

    @property
    def attacked_max(self) -> float:
        return max(self.attacked, default=float("nan"))

    @property
    def ratio(self) -> float:
        return self.attacked_p99 / self.quiet_p99 if self.quiet else float("nan")

    def line(self) -> str:
        return (f"{self.name:<21} quiet p99 {self.quiet_p99 * 1e3:7.2f} ms ({len(self.quiet)} trips)  "
                f"attacked p99 {self.attacked_p99 * 1e3:7.2f} ms max {self.attacked_max * 1e3:7.2f} ms "
                f"({len(self.attacked)} trips, {self.attacks} attacks)  ratio {self.ratio:6.2f}x"
                + (f"  [{', '.join(f'{k}: {v}' for k, v in sorted(self.outcomes.items()))}]" if self.outcomes else ""))


# -- raw attackers ---------------------------------------------------------------------------------------------
def _read_header(sock: socket.socket, conn: Connection) -> dict[str, Any] | None:
    """The next frame's header from ``sock`` (``None`` once it closed)."""
    while True:
        event = conn.next_event()
        if event is CLOSED:
            return None
        if event is NEED_DATA:
            try:
                conn.receive_data(sock.recv(1 << 20))
            except (ConnectionResetError, BrokenPipeError):
                return None
            continue
        return dict(event.header.fields())


def _logged_on(port: int, name: str) -> tuple[socket.socket, Connection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    conn = Connection()
    sock.sendall(encode_frame({"c": "logon", "cid": "L", "client_name": name, "a": "processed", "mt": "json"}))
    header = _read_header(sock, conn)
    assert header is not None and header.get("status") == "success", header
    return sock, conn


def big_publish(size: int, topic: str = "attack-big") -> Attack:
    """A logged-on client publishes one ``size``-byte message (a JSON string) to ``topic`` and waits for its
    processed ack."""
    body = b'{"id":1,"x":"' + b"a" * (size - 15) + b'"}'

    def attack(port: int, ws_port: int) -> None:
        sock, conn = _logged_on(port, f"attack-big-{time.monotonic_ns()}")
        try:
            sock.sendall(encode_frame({"c": "p", "t": topic, "cid": "big", "a": "processed"}, body))
            while (header := _read_header(sock, conn)) is not None and header.get("cmd_id") != "big":
                pass
        finally:
            sock.close()
    return attack


def big_replay(size: int, topic: str = "attack-replay") -> Attack:
    """A logged-on client replays ``topic`` from the journal (bookmark ``0``: EPOCH), where one ``size``-byte
    message was published before the first replay, and reads until that many bytes came (not decoded here:
    no Python work per byte in this process, next to the bystander)."""
    publish = big_publish(size, topic)
    published: list[bool] = []

    def attack(port: int, ws_port: int) -> None:
        if not published:
            publish(port, ws_port)
            published.append(True)
        sock, _ = _logged_on(port, f"attack-replay-{time.monotonic_ns()}")
        try:
            sock.sendall(encode_frame({"c": "subscribe", "t": topic, "cid": "r", "sub_id": "r", "bm": "0",
                                       "a": "processed"}))
            buffer, got = bytearray(1 << 20), 0
            while got < size and (n := sock.recv_into(buffer)):
                got += n
        finally:
            sock.close()
    return attack


def big_logon(size: int) -> Attack:
    """A new connection sends a logon frame whose ``user_id`` is ``size`` bytes, and waits for the answer or
    the close."""
    frame = encode_frame({"c": "logon", "cid": "L", "client_name": "attack-logon", "a": "processed",
                          "user_id": "u" * size})

    def attack(port: int, ws_port: int) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        try:
            try:
                sock.sendall(frame)
            except (ConnectionResetError, BrokenPipeError):
                return  # closed before the whole frame went: the bound at work
            _read_header(sock, Connection())
        finally:
            sock.close()
    return attack


def _ws_frame(opcode: int, payload: bytes, fin: bool) -> bytes:
    """A masked client-to-server WebSocket frame (payload under 126 bytes)."""
    key = b"\x01\x02\x03\x04"
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes(((0x80 if fin else 0) | opcode, 0x80 | len(payload))) + key + masked


def ws_fragments(count: int) -> Attack:
    """A logged-on WebSocket client sends a command whose header message comes in ``count`` one-byte frames,
    and waits until the broker answers or closes."""
    count_message = struct.pack(">BBI", 0x82, 0x84, 0x01020304) + bytes(
        b ^ k for b, k in zip(struct.pack("<I", 1), b"\x01\x02\x03\x04", strict=True))
    flood = (count_message + _ws_frame(0x1, b"{", False) + _ws_frame(0x0, b" ", False) * (count - 2)
             + _ws_frame(0x0, b"}", True))

    def attack(port: int, ws_port: int) -> None:
        from broker.testing.wsclient import WsClient

        client = WsClient.connect(ws_port, f"attack-ws-{time.monotonic_ns()}", timeout=60)
        try:
            try:
                client.sock.sendall(flood)
                client.command({"c": "flush", "cid": "f", "a": "processed"})
                while client.next_message(60)[0].get("cid") != "f":
                    pass
            except (OSError, Exception):  # closed by the broker: the bound at work
                return
        finally:
            client.close()
    return attack


@dataclass
class Targets:
    """The ports and secrets the new rows attack (filled in once the broker runs)."""

    admin_port: int = 0
    secure_port: int = 0
    tls_port: int = 0
    ca_path: str = ""
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str, n: int = 1) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + n


#: A burst never runs longer than this (its sockets time out, its loop stops).
BURST_SECONDS = 30.0


def admin_flood(targets: Targets, count: int) -> Attack:
    """``count`` concurrent Admin requests (half ``/amps.json``, half ``/metrics``, ``Connection: close``) from
    one thread over non-blocking sockets; waits for every answer (or ``BURST_SECONDS``)."""
    def attack(port: int, ws_port: int) -> None:
        selector = selectors.DefaultSelector()
        pending: dict[socket.socket, tuple[bytes, bytearray]] = {}
        for i in range(count):
            sock = socket.socket()
            sock.bind((f"127.0.0.{2 + i % 4}", 0))  # four addresses: past 8 each the Admin answers 503
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", targets.admin_port))
            path = "/amps.json" if i % 2 else "/metrics"
            pending[sock] = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode(),
                             bytearray())
            selector.register(sock, selectors.EVENT_WRITE)
        deadline = time.monotonic() + BURST_SECONDS
        try:
            while pending and time.monotonic() < deadline:
                for key, events in selector.select(1.0):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    request, answer = pending[sock]
                    try:
                        if events & selectors.EVENT_WRITE:
                            sock.send(request)
                            selector.modify(sock, selectors.EVENT_READ)
                            continue
                        chunk = sock.recv(1 << 20)
                    except OSError:
                        chunk = b""
                    if chunk:
                        answer += chunk
                        continue
                    targets.count(answer[9:12].decode() if answer.startswith(b"HTTP/1.1 ") else "no answer")
                    selector.unregister(sock)
                    sock.close()
                    del pending[sock]
        finally:
            targets.count("unfinished", len(pending))
            for sock in pending:
                sock.close()
            selector.close()
    return attack


def _parallel(threads: int, work: Callable[[int], None]) -> None:
    """``work(i)`` in ``threads`` threads at once; returns when all are done."""
    started = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(BURST_SECONDS + 30)


def logon_flood(targets: Targets, threads: int, tries: int) -> Attack:
    """``threads`` threads each send ``tries`` logons with a wrong password for ``alice`` to the authenticated
    transport (a new connection whenever the broker closes one) and read each answer."""
    def work(i: int) -> None:
        deadline = time.monotonic() + BURST_SECONDS
        done = 0
        while done < tries and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", targets.secure_port), timeout=10) as sock:
                    conn = Connection()
                    while done < tries:
                        sock.sendall(encode_frame({"c": "logon", "cid": f"g{done}", "client_name": f"guess-{i}-{done}",
                                                   "user_id": "alice", "pw": f"wrong-{done}", "a": "processed"}))
                        done += 1
                        header = _read_header(sock, conn)
                        if header is None:
                            targets.count("closed")
                            break
                        targets.count(str(header.get("status")))
            except OSError:
                targets.count("error")
                done += 1

    def attack(port: int, ws_port: int) -> None:
        _parallel(threads, work)
    return attack


def admin_guess(targets: Targets, threads: int, tries: int) -> Attack:
    """``threads`` threads each send ``tries`` Admin requests with a guessed basic-auth password."""
    import urllib.error
    import urllib.request

    def work(i: int) -> None:
        deadline = time.monotonic() + BURST_SECONDS
        for n in range(tries):
            if time.monotonic() > deadline:
                return
            token = base64.b64encode(f"alice:guess-{i}-{n}".encode()).decode()
            request = urllib.request.Request(f"http://127.0.0.1:{targets.admin_port}/amps/instance.json",
                                             headers={"Authorization": f"Basic {token}"})
            try:
                with urllib.request.urlopen(request, timeout=10) as reply:
                    reply.read()
                    targets.count(str(reply.status))
            except urllib.error.HTTPError as exc:
                targets.count(str(exc.code))
            except OSError:
                targets.count("error")

    def attack(port: int, ws_port: int) -> None:
        _parallel(threads, work)
    return attack


def tls_handshakes(targets: Targets, threads: int, tries: int) -> Attack:
    """``threads`` threads (from 127.0.0.2 and 127.0.0.3) each complete ``tries`` TLS handshakes with the
    ``tcps`` transport and close."""
    def work(i: int) -> None:
        context = ssl.create_default_context(cafile=targets.ca_path)
        deadline = time.monotonic() + BURST_SECONDS
        for _ in range(tries):
            if time.monotonic() > deadline:
                return
            try:
                with socket.socket() as raw:
                    raw.bind((f"127.0.0.{2 + i % 2}", 0))
                    raw.settimeout(10)
                    raw.connect(("127.0.0.1", targets.tls_port))
                    with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                        targets.count("handshake")
            except (ssl.SSLError, OSError):
                targets.count("error")

    def attack(port: int, ws_port: int) -> None:
        _parallel(threads, work)
    return attack


def _drained(sock: socket.socket) -> socket.socket:
    """``sock``, read by a thread (without decoding) until it closes."""
    sock.settimeout(None)

    def drain() -> None:
        buffer = bytearray(1 << 20)
        try:
            while sock.recv_into(buffer):
                pass
        except OSError:
            pass
    threading.Thread(target=drain, daemon=True).start()
    return sock


def _tls_subscriber(targets: Targets, topic: str) -> socket.socket:
    """A client on the ``tcps`` transport subscribed to ``topic``, its socket drained (see :func:`_drained`)."""
    context = ssl.create_default_context(cafile=targets.ca_path)
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", targets.tls_port), timeout=60),
                               server_hostname="127.0.0.1")
    conn = Connection()
    for frame in ({"c": "logon", "cid": "L", "client_name": f"bench-attacks-tls-{time.monotonic_ns()}",
                   "a": "processed", "mt": "json"},
                  {"c": "subscribe", "cid": "s", "t": topic, "sub_id": "tls", "a": "processed"}):
        sock.sendall(encode_frame(frame))
        header = _read_header(sock, conn)
        assert header is not None and header.get("status") == "success", header
    return _drained(sock)


def _ws_subscriber(ws_port: int, topic: str) -> socket.socket:
    """A WebSocket client subscribed to ``topic`` whose socket a thread drains without decoding (no Python work
    per byte in this process, next to the bystander); closing the socket ends the thread."""
    from broker.testing.wsclient import WsClient

    ws = WsClient.connect(ws_port, f"bench-attacks-ws-subscriber-{time.monotonic_ns()}", timeout=60)
    ws.command({"c": "subscribe", "cid": "s", "t": topic, "sub_id": "ws", "a": "processed"})
    assert ws.next_message(10)[0].get("status") == "success"
    return _drained(ws.sock)


# -- the bystander ---------------------------------------------------------------------------------------------
def _round_trips(uri: str, seconds: float, attack: Attack | None, ports: tuple[int, int]) -> tuple[list[float], int]:
    """A bystander's round trips (publish, delivery back to it) for ``seconds`` while ``attack`` (when given) repeats in a thread."""
    import AMPS

    client = AMPS.Client(f"bench-attacks-bystander-{time.monotonic_ns()}")
    client.connect(uri)
    client.logon(10000)
    topic = f"bystander-{time.monotonic_ns()}"
    arrived = threading.Event()
    client.subscribe(lambda message: arrived.set(), topic, timeout=10000)
    stop = threading.Event()
    attacks = 0
    failure: list[BaseException] = []

    def attacker() -> None:
        nonlocal attacks
        try:
            while not stop.is_set():
                assert attack is not None
                attack(*ports)
                attacks += 1
        except BaseException as exc:  # reported by the caller
            failure.append(exc)

    thread = threading.Thread(target=attacker, daemon=True) if attack is not None else None
    trips: list[float] = []
    try:
        if thread is not None:
            thread.start()
            time.sleep(0.05)  # the attack is under way
        end = time.perf_counter() + seconds
        while (now := time.perf_counter()) < end or (thread is not None and not attacks and now < end + 60):
            arrived.clear()
            client.publish(topic, "{}")
            if not arrived.wait(60):
                raise RuntimeError("the bystander's message did not come back within 60 s")
            trips.append(time.perf_counter() - now)
            time.sleep(0.001)  # a busy client, not a flood
    finally:
        stop.set()
        if thread is not None:
            thread.join(120)
        client.close()
    if failure:
        raise RuntimeError(f"the attack failed: {failure[0]!r}") from failure[0]
    return trips, attacks


def _secured(directory: Path, targets: Targets) -> str:
    """Config sections for the new rows: an Admin port with basic authentication (``/metrics`` and
    ``/amps.json`` open, as for a Prometheus scrape), a transport with password authentication and a ``tcps``
    transport; fills ``targets``."""
    from broker.security.passwords import set_password
    from broker.testing.process import free_port
    from broker.testing.tls import make_ca

    set_password(directory / "users.passwd", "alice", "alice-pw")
    ca = make_ca(directory, "bench-attacks-ca")
    certificate, key = ca.issue("server", server=True)
    targets.admin_port, targets.secure_port, targets.tls_port = free_port(), free_port(), free_port()
    targets.ca_path = str(ca.cert_path)
    password_file = f"""<Authentication><Module>password-file</Module>
      <Options><PasswordFile>{directory / "users.passwd"}</PasswordFile></Options></Authentication>"""
    return f"""<Admin><InetAddr>127.0.0.1:{targets.admin_port}</InetAddr><Interval>1s</Interval>
      <AnonymousPaths>^/(metrics|amps\\.json)$</AnonymousPaths>{password_file}</Admin>
    <Transports>
      <Transport><Name>secure-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:{targets.secure_port}</InetAddr>
        <Protocol>amps</Protocol>{password_file}</Transport>
      <Transport><Name>secure-tls</Name><Type>tcps</Type><InetAddr>127.0.0.1:{targets.tls_port}</InetAddr>
        <Protocol>amps</Protocol><Certificate>{certificate}</Certificate><PrivateKey>{key}</PrivateKey></Transport>
    </Transports>"""


def run(seconds: float, quick: bool, rows: list[str] | None = None) -> list[Row]:
    """Start a broker and measure every attack (or those named in ``rows``)."""
    from broker.testing.process import BrokerProcess, wait_for_port

    attacks: dict[str, Attack] = {
        "publish-50mb": big_publish(8_000_000 if quick else 50_000_000),
        "publish-50mb-filtered": big_publish(8_000_000 if quick else 50_000_000, "attack-filtered"),
        "publish-50mb-sow": big_publish(8_000_000 if quick else 50_000_000, "attack-sow"),
        "publish-50mb-ws": big_publish(8_000_000 if quick else 50_000_000, "attack-ws"),
        "publish-50mb-tls": big_publish(8_000_000 if quick else 50_000_000, "attack-tls"),
        "replay-50mb": big_replay(8_000_000 if quick else 50_000_000),
        "logon-60mb": big_logon(8_000_000 if quick else 60_000_000),
        "ws-fragments": ws_fragments(50_000 if quick else 200_000),
    }
    targets = Targets()
    attacks.update({
        "admin-flood": admin_flood(targets, 200 if quick else 1000),
        "logon-flood": logon_flood(targets, 40, 3 if quick else 20),
        "admin-guess": admin_guess(targets, 8, 5 if quick else 50),
        "tls-handshakes": tls_handshakes(targets, 12, 5 if quick else 100),
    })
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        sow = ("<Topic><Name>attack-sow</Name><MessageType>json</MessageType><Key>/id</Key>"
               "<FileName>./sow/%n.sow</FileName></Topic>")
        journal = ("<JournalDirectory>./journal</JournalDirectory>"
                   "<Topic><Name>attack-replay</Name><MessageType>json</MessageType></Topic>")
        proc = BrokerProcess.from_xml(Path(tmp), websocket=True, sow=sow, transaction_log=journal,
                                      extra=_secured(Path(tmp), targets)).start()
        try:
            wait_for_port(targets.admin_port, 30, proc.proc)
            import AMPS

            taker = AMPS.Client(f"bench-attacks-subscriber-{time.monotonic_ns()}")  # the big publish is delivered
            taker.connect(proc.uri)
            taker.logon(10000)
            taker.subscribe(lambda message: None, "attack-big", timeout=10000)
            taker.subscribe(lambda message: None, "attack-filtered", "/id = 1", timeout=10000)
            taker.subscribe(lambda message: None, "attack-sow", timeout=10000)
            ws_taker = _ws_subscriber(proc.websocket_port or 0, "attack-ws")
            tls_taker = _tls_subscriber(targets, "attack-tls")
            ports = (proc.port, proc.websocket_port or 0)
            for name, attack in attacks.items():
                if rows and name not in rows:
                    continue
                quiet, _ = _round_trips(proc.uri, seconds, None, ports)
                targets.outcomes = {}
                attacked, count = _round_trips(proc.uri, seconds, attack, ports)
                out.append(Row(name, quiet, attacked, count, dict(targets.outcomes)))
            taker.close()
            ws_taker.close()
            tls_taker.close()
        finally:
            proc.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller attacks and a short window (for CI)")
    parser.add_argument("--seconds", type=float, default=None, help="window per measurement (default 3, quick 0.5)")
    parser.add_argument("--row", action="append", help="only this attack (repeatable)")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (0.5 if args.quick else 3.0)
    print(f"attacks: a bystander's publish-to-delivery round trips for {seconds:g}s quiet, then {seconds:g}s attacked")
    for row in run(seconds, args.quick, args.row):
        print("  " + row.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
