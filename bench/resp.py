"""A minimal pipelining Redis client (RESP2) for the workloads redis-benchmark cannot express.

Only what the harness needs: send many commands at once, read their replies in order. Replies are
decoded to ``bytes``/``int``/``list``/``None``; errors raise :class:`RedisError`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from typing import Any


class RedisError(Exception):
    """An error reply from Redis."""


def encode(*args: str | bytes | int) -> bytes:
    """One command in RESP."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Redis:
    """A connection to ``127.0.0.1:port``."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.pos = 0

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def __enter__(self) -> Redis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0

    def _line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = self.buf[self.pos:end]
                self.pos = end + 2
                return line
            self._fill()

    def _reply(self) -> Any:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) - self.pos < n + 2:
                self._fill()
            data = self.buf[self.pos:self.pos + n]
            self.pos += n + 2
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        if kind == b"-":
            raise RedisError(rest.decode(errors="replace"))
        raise RedisError(f"unexpected reply {line[:50]!r}")

    def pipeline(self, commands: Iterable[Sequence[str | bytes | int]]) -> list[Any]:
        """Send all ``commands`` at once and return their replies in order."""
        encoded = [encode(*c) for c in commands]
        self.sock.sendall(b"".join(encoded))
        return [self._reply() for _ in encoded]

    def call(self, *args: str | bytes | int) -> Any:
        """One command, one reply."""
        self.sock.sendall(encode(*args))
        return self._reply()
