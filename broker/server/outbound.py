"""A client's bounded outbound buffer: the engine appends encoded frames without awaiting; one writer
task drains them with one ``send_all`` per batch (batched I/O)."""

from __future__ import annotations

import trio

from broker.server.sockio import socket_fd, write_all


class SlowClient(Exception):
    """The client fell behind past its outbound bound and must be disconnected."""


class MemoryBudget:
    """The broker-wide bound on client buffers (``<TotalMessageMemoryLimit>``), shared by every connection.

    ``output`` counts the bytes in every client's outbound buffer, including a batch being written;
    ``input`` counts the frames being received: a connection reserves a frame's whole declared size as soon
    as its 4-byte length arrives, before its payload is buffered. Sessions act on it: a frame that does
    not fit closes its connection, and output past the limit offlines the largest consumers first.

    Args:
        limit: Bytes of input and output buffers together; 0: no broker-wide limit.
    """

    __slots__ = ("input", "limit", "output", "refused_frames", "offlined_consumers")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.input = 0
        self.output = 0
        #: Connections closed because a frame they started did not fit.
        self.refused_frames = 0
        #: Consumers offlined (as slow clients) to bring the output back under the limit.
        self.offlined_consumers = 0

    @property
    def over(self) -> bool:
        """Whether the buffers together exceed the limit."""
        return 0 < self.limit < self.input + self.output

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes stay within the limit."""
        return not self.limit or self.input + self.output + size <= self.limit


class Outbound:
    """Encoded frames waiting to be written to one client.

    Args:
        limit: Bytes that may wait before the client is declared slow.
        budget: The broker-wide budget the queued bytes count against (none: counted nowhere).
    """

    def __init__(self, limit: int, budget: MemoryBudget | None = None) -> None:
        self.limit = limit
        self.budget = budget if budget is not None else MemoryBudget(0)
        #: Bytes taken by the writer and not yet written (still in memory, still counted in the budget).
        self._writing = 0
        self._chunks: list[bytes] = []
        self.size = 0
        self._ready = trio.Event()
        #: Whether the writer waits on ``_ready`` (only then does :meth:`put` need to set it).
        self._idle = False
        self._drained = trio.Event()
        self.closed = False
        self.overflowed = False
        self.bytes_out = 0

    def put(self, data: bytes) -> bool:
        """Queue one encoded frame (or several, joined). Never blocks; marks the buffer overflowed past the limit.

        Returns:
            Whether the caller must act (one check on the delivery path instead of two): the buffer overflowed
            (:attr:`overflowed`: the client is slow), or the broker-wide budget is over its limit.
        """
        if self.closed:
            return False
        size = len(data)
        self._chunks.append(data)
        self.size += size
        budget = self.budget
        budget.output += size
        if self._idle:  # wake the writer once per batch, not once per frame
            self._idle = False
            self._ready.set()
        if self.size > self.limit:
            self.overflowed = True
            self.closed = True
            self._ready.set()
            return True
        return 0 < budget.limit < budget.input + budget.output

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
                self._idle = True
                try:
                    await self._ready.wait()
                finally:
                    self._idle = False
                continue
            if self.overflowed:
                raise SlowClient()
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._writing, self.size = self.size, 0
            self._drained.set()
            try:
                if fd is not None:
                    await write_all(fd, data)
                else:
                    await stream.send_all(data)
            finally:
                self.budget.output -= self._writing
                self._writing = 0
            self.bytes_out += len(data)

    def discard(self) -> None:
        """Drop every queued frame and stop accepting more (the client is being disconnected): the bytes
        leave the broker-wide budget at once."""
        self.budget.output -= self.size
        self.size = 0
        self._chunks.clear()
        self.closed = True
        self._ready.set()

    def close(self) -> None:
        """Stop accepting frames; the writer finishes what is queued, then returns."""
        self.closed = True
        self._ready.set()
