"""A small blocking AMPS-over-WebSocket client for tests and benchmarks (what the npm ``amps`` client sends,
see :mod:`broker.protocol.websocket`), built on wsproto; and raw-socket helpers to send broken input.

Example::

    c = WsClient.connect(port, "t1")          # handshake, "text", logon
    c.command({"c": "subscribe", "t": "orders", "sub_id": "s1"})
    c.command({"c": "publish", "t": "orders"}, b'{"id":1}')
    header, data = c.next_message()
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)


class WsClosed(Exception):
    """The server closed the connection (``code`` is the WebSocket close code, or ``None``)."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"closed by the server: {code} {reason}".strip())
        self.code = code
        self.reason = reason


class WsClient:
    """One AMPS-over-WebSocket connection.

    Args:
        sock: A connected socket.
        path: The request path (``/amps/json``).
    """

    def __init__(self, sock: socket.socket, path: str = "/amps/json") -> None:
        self.sock = sock
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._events: list[Any] = []
        self._parts: list[Any] = []
        self.pongs: list[bytes] = []
        self._send(Request(host="127.0.0.1", target=path))
        while True:
            event = self._next_event(10.0)
            if isinstance(event, AcceptConnection):
                break
            if isinstance(event, RejectConnection):
                raise WsClosed(event.status_code, "handshake refused")

    @classmethod
    def connect(cls, port: int, name: str | None = None, *, path: str = "/amps/json",
                timeout: float = 10.0) -> WsClient:
        """Connect, say ``text`` and (when ``name``) log on."""
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        client = cls(sock, path)
        client.send_text("text")
        if name:
            client.command({"c": "logon", "cid": "logon", "client_name": name, "a": "processed"})
            header, _ = client.next_message(timeout)
            assert header.get("c") == "ack" and header.get("status") == "success", header
        return client

    # -- sending -------------------------------------------------------------------------------------------
    def _send(self, event: Any) -> None:
        self.sock.sendall(self.ws.send(event))

    def send_text(self, text: str) -> None:
        self._send(TextMessage(data=text))

    def command(self, header: dict[str, Any], data: bytes | str | None = None) -> None:
        """Send one command as the JavaScript client does: the message count, the header, the data."""
        parts = [json.dumps(header, separators=(",", ":"))]
        if data is not None:
            parts.append(data.decode() if isinstance(data, bytes) else data)
        out = self.ws.send(BytesMessage(data=struct.pack("<I", len(parts))))
        for part in parts:
            out += self.ws.send(TextMessage(data=part))
        self.sock.sendall(out)

    def ping(self, payload: bytes = b"hi") -> None:
        self._send(Ping(payload=payload))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing anyway
            self._send(CloseConnection(code=1000))
        self.sock.close()

    # -- receiving -----------------------------------------------------------------------------------------
    def _next_event(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while not self._events:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("nothing from the server")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            self.ws.receive_data(data or None)
            for event in self.ws.events():
                if isinstance(event, Ping):
                    self._send(event.response())
                elif isinstance(event, Pong):
                    self.pongs.append(bytes(event.payload))
                else:
                    self._events.append(event)
            if not data and not self._events:
                raise WsClosed(None, "connection ended")
        return self._events.pop(0)

    def next_payload(self, timeout: float = 10.0) -> bytes:
        """The next whole WebSocket message's bytes."""
        parts: list[Any] = []
        while True:
            event = self._next_event(timeout)
            if isinstance(event, CloseConnection):
                raise WsClosed(event.code, event.reason or "")
            if isinstance(event, Message):
                parts.append(event.data)
                if event.message_finished:
                    return "".join(parts).encode() if isinstance(event, TextMessage) else b"".join(parts)

    def next_message(self, timeout: float = 10.0) -> tuple[dict[str, Any], bytes | None]:
        """The next header and, for a message that carries data, its data (sow batches: the outer header)."""
        header = json.loads(self.next_payload(timeout))
        data = None
        if header.get("c") in ("p", "publish", "oof") and header.get("l") != 0:
            data = self.next_payload(timeout)
        return header, data


def raw_connect(port: int, timeout: float = 10.0) -> socket.socket:
    """A plain socket to ``port`` (for sending broken input)."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def masked_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bool = True,
                 declared: int | None = None) -> bytes:
    """A client-to-server WebSocket frame, possibly broken (unmasked, or declaring ``declared`` bytes)."""
    n = len(payload) if declared is None else declared
    first = (0x80 if fin else 0) | opcode
    bit = 0x80 if mask else 0
    if n < 126:
        head = bytes((first, bit | n))
    elif n < 65536:
        head = struct.pack(">BBH", first, bit | 126, n)
    else:
        head = struct.pack(">BBQ", first, bit | 127, n)
    if not mask:
        return head + payload
    key = b"\x01\x02\x03\x04"
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return out
        if not data:
            return out
        out += data
