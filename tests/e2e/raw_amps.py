"""A raw AMPS connection, for the e2e tests that shape frames by hand (the official client numbers ``s`` itself
and writes one frame per publish). Imported as ``tests.e2e.raw_amps``."""

from __future__ import annotations

import socket
from collections.abc import Iterator

from broker.protocol import CLOSED, NEED_DATA, Connection, encode_frame

#: One AMPS frame from a header (wire keys such as ``c``, ``t``, ``cid``) and a body.
frame = encode_frame


class Raw:
    """A TCP connection to the broker, logged on as ``name`` (with a ``processed`` ack), frames by hand.

    Args:
        port: The broker's AMPS port on 127.0.0.1.
        name: The client name.
        timeout: Socket timeout in seconds: a read that waits longer fails the test.
        nodelay: Set ``TCP_NODELAY``, so each ``send`` leaves at once (frames keep the shape the test gives).
    """

    def __init__(self, port: int, name: str, *, timeout: float = 10.0, nodelay: bool = False) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if nodelay:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = Connection()
        self.send({"c": "logon", "cid": "L", "client_name": name, "a": "processed", "mt": "json"})
        logon = self.ack("L", "processed")
        assert logon["status"] == "success", logon

    def send(self, header: dict, body: bytes = b"") -> None:
        """Write one frame."""
        self.sock.sendall(frame(header, body))

    def send_bytes(self, data: bytes) -> None:
        """Write ``data`` (several frames, say) in one ``sendall``."""
        self.sock.sendall(data)

    def frames(self) -> Iterator[dict]:
        """The headers of the frames the broker sends (canonical field names: ``command``, ``cmd_id``,
        ``ack_type``, ``status``), until it closes the connection."""
        while True:
            event = self.conn.next_event()
            if event is CLOSED:
                return
            if event is NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))  # b"" at the end: the next event is CLOSED
                continue
            yield dict(event.header.fields())

    def ack(self, cid: str, ack_type: str | None = None) -> dict:
        """The next ack of ``cid`` (of ``ack_type``, when given); frames before it are skipped."""
        for header in self.frames():
            if header.get("command") == "ack" and header.get("cmd_id") == cid and ack_type in (
                    None, header.get("ack_type")):
                return header
        raise AssertionError(f"connection closed before the {ack_type or ''} ack of {cid}")

    def publish(self, s: int, data: str, topic: str = "orders") -> dict:
        """Publish ``data`` with sequence ``s`` asking for a ``persisted`` ack, and return the ack."""
        self.send({"c": "p", "t": topic, "cid": f"p{s}", "s": s, "a": "persisted"}, data.encode())
        return self.ack(f"p{s}", "persisted")

    def close(self) -> None:
        self.sock.close()
