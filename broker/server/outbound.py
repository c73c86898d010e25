"""A client's bounded outbound buffer: the engine appends encoded frames without awaiting; one writer
task drains them with one ``send_all`` per batch (batched I/O)."""

from __future__ import annotations

import trio

from broker.server.sockio import socket_fd, write_all


class SlowClient(Exception):
    """The client fell behind past its outbound bound and must be disconnected."""


class Outbound:
    """Encoded frames waiting to be written to one client.

    Args:
        limit: Bytes that may wait before the client is declared slow.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self.size = 0
        self._ready = trio.Event()
        self._drained = trio.Event()
        self.closed = False
        self.overflowed = False
        self.bytes_out = 0

    def put(self, data: bytes) -> None:
        """Queue one encoded frame. Never blocks; marks the buffer overflowed past the limit."""
        if self.closed:
            return
        self._chunks.append(data)
        self.size += len(data)
        if self.size > self.limit:
            self.overflowed = True
            self.closed = True
        self._ready.set()

    async def wait_below(self, watermark: int) -> None:
        """Wait until at most ``watermark`` bytes are queued (flow control for long query results)."""
        while self.size > watermark and not self.closed:
            self._drained = trio.Event()
            await self._drained.wait()

    async def write_to(self, stream: trio.abc.SendStream) -> None:
        """Drain forever into ``stream`` (runs as the session's writer task).

        Raises:
            SlowClient: the buffer overflowed.
        """
        fd = socket_fd(stream)
        while True:
            if not self._chunks:
                if self.overflowed:
                    raise SlowClient()
                self._drained.set()
                if self.closed:
                    return
                self._ready = trio.Event()
                await self._ready.wait()
                continue
            if self.overflowed:
                raise SlowClient()
            data = b"".join(self._chunks)
            self._chunks.clear()
            self.size = 0
            self._drained.set()
            if fd is not None:
                await write_all(fd, data)
            else:
                await stream.send_all(data)
            self.bytes_out += len(data)

    def close(self) -> None:
        """Stop accepting frames; the writer finishes what is queued, then returns."""
        self.closed = True
        self._ready.set()
