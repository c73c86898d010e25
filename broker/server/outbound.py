"""A client's bounded outbound buffer: the engine appends encoded frames without awaiting; they are written
with one ``write`` per batch (batched I/O).

Each client has a writer task, but on a plain socket the usual write does not wake it: the first frame queued
while the writer waits hands the buffer to the :class:`Flusher`, one task of the event loop that writes every
such buffer in turn with a non-blocking ``write`` (one task switch per round for all the clients an engine
step reached, instead of one per client). Only what the socket does not take at once (a full send buffer, an
error) goes back to the client's writer, which waits until the socket is writable.

A queue of LARGE_WRITE bytes or more (one holding a :class:`~broker.protocol._frames.LargeFrame`, a large message's
delivery, always is) is never joined or copied whole on the event loop: the flusher leaves it to the writer, which
writes it in slices of WRITE_SLICE bytes (memoryviews of large parts, small frames joined a slice at a time) with a
checkpoint between (issue 34: one 50 MB frame must cost other clients no more than a slice's write). The size is
looked at once per batch (flush or write), never per queued frame.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio

from broker.protocol._frames import LargeFrame
from broker.server.sockio import socket_fd, write_all

#: An outbound frame too large to copy (:class:`~broker.protocol._frames.LargeFrame`): written in parts.
LargeBody = LargeFrame

#: A queue this large or larger (a LargeFrame always is) is written the large way (see the module's docstring).
LARGE_WRITE = 1 << 20
#: Bytes the writer writes (or copies, joining small frames) between two checkpoints on the large way.
WRITE_SLICE = 1 << 20


class SlowClient(Exception):
    """The client fell behind past its outbound bound and must be disconnected."""


class MemoryBudget:
    """The broker-wide bound on client buffers (``<TotalMessageMemoryLimit>``), shared by every connection.

    ``output`` counts the bytes in every client's outbound buffer, including a batch being written;
    ``input`` counts the frames being received: a connection reserves a frame's whole declared size as soon
    as its 4-byte length arrives, before its payload is buffered. Sessions act on it: a frame that does
    not fit closes its connection (a logged-on client's ordinary one, at most a tenth of the limit, first offlines
    the largest consumers), and output past the limit offlines the largest consumers first.

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
        self._chunks: list[Any] = []  # bytes, memoryview (a partly written rest), LargeFrame
        self.size = 0
        self._ready = trio.Event()
        #: Whether the writer waits on ``_ready`` with nothing queued and no flush pending: only then does
        #: :meth:`put` need to act (hand the buffer to the flusher, or wake the writer).
        self._idle = False
        #: Whether the writer is parked on ``_ready`` (the flusher writes only then).
        self._parked = False
        #: The socket's file descriptor and the loop's :class:`Flusher` (``None``: the writer writes everything).
        self._fd: int | None = None
        self._flusher: Flusher | None = None
        self._drained = trio.Event()
        self.closed = False
        self.overflowed = False
        self.bytes_out = 0

    def put(self, data: bytes | LargeFrame) -> bool:
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
        if self._idle:  # once per batch, not once per frame
            self._idle = False
            flusher = self._flusher
            if flusher is not None:
                flusher.add(self)
            else:
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
        fd = self._fd = socket_fd(stream)
        if fd is not None:
            self._flusher = Flusher.current()
        while True:
            if not self._chunks:
                if self.overflowed:
                    raise SlowClient()
                self._drained.set()
                if self.closed:
                    return
                self._ready = trio.Event()
                self._idle = self._parked = True
                try:
                    await self._ready.wait()
                finally:
                    self._idle = self._parked = False
                continue
            if self.overflowed:
                raise SlowClient()
            if self.size >= LARGE_WRITE:  # a LargeFrame is always this large
                await self._write_large(fd, stream)
                continue
            chunks = self._chunks
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
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

    async def _write_large(self, fd: int | None, stream: trio.abc.SendStream) -> None:
        """Write the queue, LARGE_WRITE bytes or more, without a long step on the loop.

        On a socket: each large part in memoryview slices of WRITE_SLICE bytes, the small frames between them
        joined a slice at a time, a checkpoint after each slice. On TLS: the same slices, each encrypted by its
        own ``send_all`` (one whole 50 MB ``send_all`` encrypted on the loop at once). On another stream (the
        WebSocket: its encoder takes whole frames): the parts joined in a worker thread, then one ``send_all``.
        """
        buffers: list[Any] = []
        for chunk in self._chunks:
            if type(chunk) is LargeFrame:
                buffers += chunk.parts
            else:
                buffers.append(chunk)
        self._chunks = []
        self._writing, self.size = self.size, 0
        self._drained.set()
        try:
            if fd is None and isinstance(stream, trio.SSLStream):
                await self._write_slices(buffers, partial(self._send_slice, stream))
                return
            if fd is None:
                data = await trio.to_thread.run_sync(b"".join, buffers)
                await stream.send_all(data)
                self.bytes_out += len(data)
                return
            if fd is None:  # for mypy: the other streams returned above
                return
            await self._write_slices(buffers, partial(self._write_slice, fd))
        finally:
            self.budget.output -= self._writing
            self._writing = 0

    @staticmethod
    async def _write_slices(buffers: list[Any], write: Callable[[Any], Awaitable[None]]) -> None:
        """``write`` each large buffer in memoryview slices of WRITE_SLICE bytes, the small ones between them
        joined a slice at a time."""
        small: list[Any] = []
        small_size = 0
        for buffer in buffers:
            n = len(buffer)
            if n < WRITE_SLICE:
                small.append(buffer)
                small_size += n
                if small_size < WRITE_SLICE:
                    continue
            if small:
                await write(small[0] if len(small) == 1 else b"".join(small))
                small, small_size = [], 0
            if n >= WRITE_SLICE:
                view = memoryview(buffer).cast("B")
                for start in range(0, n, WRITE_SLICE):
                    await write(view[start:start + WRITE_SLICE])
        if small:
            await write(small[0] if len(small) == 1 else b"".join(small))

    async def _send_slice(self, stream: trio.abc.SendStream, data: Any) -> None:
        """Send one slice of a large queue on a TLS stream (counted as written), then let other tasks run."""
        await stream.send_all(data)
        self.bytes_out += len(data)
        n = min(len(data), self._writing)  # none once the queue was discarded (it gave its bytes back then)
        self.budget.output -= n
        self._writing -= n
        await trio.lowlevel.checkpoint()

    async def _write_slice(self, fd: int, data: Any) -> None:
        """Write one slice of a large queue (each write counted as it goes), then let other tasks run.

        Raises:
            trio.BrokenResourceError: the peer is gone.
        """
        view = memoryview(data)
        sent, total = 0, len(view)
        while sent < total:
            try:
                written = os.write(fd, view[sent:] if sent else view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(fd)
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(f"socket write failed: {exc}") from exc
            sent += written
            self.bytes_out += written
            n = min(written, self._writing)  # none once the queue was discarded (it gave its bytes back then)
            self.budget.output -= n
            self._writing -= n
        await trio.lowlevel.checkpoint()

    def flush_now(self) -> None:
        """Write what is queued without waiting (the :class:`Flusher`'s part): all of it when the socket takes it
        at once, else the rest goes to the writer task, which waits until the socket is writable."""
        chunks = self._chunks
        if not self._parked or not chunks or self._fd is None or self.overflowed:  # the writer takes over
            return
        if self.size >= LARGE_WRITE:  # written in slices by the writer, never joined here
            self._ready.set()
            return
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            written = os.write(self._fd, data)
        except BlockingIOError:
            written = 0
        except OSError:  # the writer meets the error again and ends the session as for any failed write
            self._ready.set()
            return
        self.bytes_out += written
        self.budget.output -= written
        self.size -= written
        if written == len(data):
            chunks.clear()
            self._drained.set()
            self._idle = True  # still parked: the next put hands it to the flusher again
        else:
            chunks[:] = [memoryview(data)[written:]]  # the rest, not a copy of it
            self._ready.set()

    @property
    def held(self) -> int:
        """Bytes this client holds in the broker-wide budget: queued, and taken by the writer but not yet
        written (a stalled consumer's last batch waits there for its socket)."""
        return self.size + self._writing

    def discard(self) -> None:
        """Drop every queued frame and stop accepting more (the client is being disconnected): the bytes
        leave the broker-wide budget at once, the batch the writer is blocked on included (its task ends at
        the next checkpoint; until then another consumer must not be shed for bytes already given up)."""
        self.budget.output -= self.size + self._writing
        self.size = self._writing = 0
        self._chunks.clear()
        self.closed = True
        self._ready.set()

    def close(self) -> None:
        """Stop accepting frames; the writer finishes what is queued, then returns."""
        self.closed = True
        self._ready.set()


class Flusher:
    """Writes the outbound buffers handed to it (:meth:`Outbound.put` on a plain socket whose writer waits), one
    round per wake-up: one task of the event loop (a trio system task, started on first use) for every client."""

    _current: trio.lowlevel.RunVar[Flusher] = trio.lowlevel.RunVar("outbound_flusher")

    def __init__(self) -> None:
        self._pending: list[Outbound] = []
        self._wake = trio.Event()
        #: Set while a session applies one socket read's publishes: it writes the buffers they reached itself
        #: when done (:meth:`flush`), so this task is not woken for them (a paced publisher's reads hold one
        #: message each: a wake-up and a scheduler pass per message).
        self.deferred = False

    @classmethod
    def current(cls) -> Flusher:
        """The flusher of the running event loop (started on first use)."""
        try:
            return cls._current.get()
        except LookupError:
            flusher = cls()
            cls._current.set(flusher)
            trio.lowlevel.spawn_system_task(flusher._run, name="outbound flusher")
            return flusher

    def add(self, outbound: Outbound) -> None:
        """Write ``outbound``'s queue in the next round."""
        pending = self._pending
        pending.append(outbound)
        if len(pending) == 1 and not self.deferred:
            self._wake.set()

    def flush(self) -> None:
        """Write every buffer handed over so far, now (one round, run by the caller)."""
        pending, self._pending = self._pending, []
        for outbound in pending:
            outbound.flush_now()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.flush()
