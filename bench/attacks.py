"""Attack figures (issue 34): a bystander's round trip alone and next to a client that sends frames meant to
hold the event loop.

Run from the repository root: ``python -m bench.attacks [--quick] [--seconds 2]``. One broker serves the whole
run (TCP and WebSocket transports). Each row measures an official-client bystander's round trips (a publish to its own subscription) for
the same time twice: quiet, then while an attacker repeats one attack on a raw socket; and prints both p99s and
their ratio. Rows:

* ``publish-50mb``: a logged-on client publishes one 50 MB message (a subscriber takes it), again and again.
* ``logon-60mb``: a new connection sends, before any logon, a logon frame whose user_id is 60 MB.
* ``ws-fragments``: a logged-on WebSocket client sends a message of 200,000 one-byte frames (1.4 MB).

``--quick`` (the tests/bench test, a few seconds) uses 8 MB frames and 50,000 fragments.
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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
        return (f"{self.name:<14} quiet p99 {self.quiet_p99 * 1e3:7.2f} ms ({len(self.quiet)} trips)  "
                f"attacked p99 {self.attacked_p99 * 1e3:7.2f} ms max {self.attacked_max * 1e3:7.2f} ms "
                f"({len(self.attacked)} trips, {self.attacks} attacks)  ratio {self.ratio:6.2f}x")


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


def big_publish(size: int) -> Attack:
    """A logged-on client publishes one ``size``-byte message (a JSON string) and waits for its processed ack."""
    body = b'{"x":"' + b"a" * (size - 8) + b'"}'

    def attack(port: int, ws_port: int) -> None:
        sock, conn = _logged_on(port, f"attack-big-{time.monotonic_ns()}")
        try:
            sock.sendall(encode_frame({"c": "p", "t": "attack-big", "cid": "big", "a": "processed"}, body))
            while (header := _read_header(sock, conn)) is not None and header.get("cmd_id") != "big":
                pass
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


def run(seconds: float, quick: bool, rows: list[str] | None = None) -> list[Row]:
    """Start a broker and measure every attack (or those named in ``rows``)."""
    from broker.testing.process import BrokerProcess

    attacks: dict[str, Attack] = {
        "publish-50mb": big_publish(8_000_000 if quick else 50_000_000),
        "logon-60mb": big_logon(8_000_000 if quick else 60_000_000),
        "ws-fragments": ws_fragments(50_000 if quick else 200_000),
    }
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        proc = BrokerProcess.from_xml(Path(tmp), websocket=True).start()
        try:
            import AMPS

            taker = AMPS.Client(f"bench-attacks-subscriber-{time.monotonic_ns()}")  # the big publish is delivered
            taker.connect(proc.uri)
            taker.logon(10000)
            taker.subscribe(lambda message: None, "attack-big", timeout=10000)
            ports = (proc.port, proc.websocket_port or 0)
            for name, attack in attacks.items():
                if rows and name not in rows:
                    continue
                quiet, _ = _round_trips(proc.uri, seconds, None, ports)
                attacked, count = _round_trips(proc.uri, seconds, attack, ports)
                out.append(Row(name, quiet, attacked, count))
            taker.close()
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
