"""Socket reads and writes with one scheduler yield each, for the per-message hot path.

``trio.SocketStream.send_all`` and ``receive_some`` are correct for any stream but cost two scheduler
checkpoints and a conflict detector per call: about 25 us per ``send_all`` of a small frame on the
development machine, against about 3 us for the ``write(2)`` itself. A broker writing one small batch
per subscriber per incoming publish spends most of its time there. These helpers do the system call
first and wait (``trio.lowlevel.wait_readable``/``wait_writable``, which are cancellation points) only
when the socket is not ready, as trio's own socket methods do inside.

Sessions use them when their stream is a ``trio.SocketStream`` (:class:`SocketInput` for a client's input); any
other stream (tests' memory streams, TLS) goes through the generic ``trio.abc.Stream`` calls.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from time import perf_counter
from typing import Any

import trio

#: ``read(2)`` errors that mean the peer is gone (the same end as an orderly close).
_GONE = frozenset({errno.ECONNRESET, errno.ETIMEDOUT, errno.EPIPE, errno.ENOTCONN})


def socket_fd(stream: Any) -> int | None:
    """The file descriptor behind ``stream`` when it is a plain trio socket stream, else ``None``.

    Always ``None`` on Windows, where sockets are not file descriptors ``os.read`` accepts.
    """
    if isinstance(stream, trio.SocketStream) and sys.platform != "win32":
        return stream.socket.fileno()
    return None


#: A client streaming input (a run of reads took GATHER_RUN publishes or more, and its input comes at GATHER_RATE
#: or faster) has its socket's reader woken only once GATHER_BYTES wait in the socket (``SO_RCVLOWAT``), or
#: GATHER_WAIT_SECONDS have passed: each wake-up of the reader (and of the sending client, whose write wakes it)
#: costs both processes more than the few messages it brings.
GATHER_RUN = 8
GATHER_BYTES = 16384
#: Shorter is no shorter: the event loop's ``epoll`` wait counts whole milliseconds.
GATHER_WAIT_SECONDS = 0.001
#: Bytes per second: input this fast reaches GATHER_BYTES within twice GATHER_WAIT_SECONDS, so a wait ends by the
#: mark about as often as by the clock, or more often. A slower client (a paced one, whose bursts catch up on its
#: pace: W3's 10,000 updates/s are 3 MB/s) is not gathered: its waits would end by the clock, adding up to that time
#: to its every message's latency.
GATHER_RATE = GATHER_BYTES / (2 * GATHER_WAIT_SECONDS)
#: The input rate is measured over spans of at least this long.
RATE_SPAN_SECONDS = 0.002


#: Frames (AMPS frames the session dispatches one by one, WebSocket frames the stream parses) one connection's reader
#: handles before it lets other tasks run, whatever one socket read brought: 64 KB of tiny frames are thousands, and at
#: 10 to 20 us each they would hold the event loop for tens of milliseconds (issue 34).
TURN_FRAMES = 256


class TurnBudget:
    """One connection's work per turn of the event loop, shared by its layers (a websocket connection's stream
    parses WebSocket frames and its session dispatches the AMPS frames they carry: both spend from the same budget).

    :meth:`spend` counts frames; once TURN_FRAMES were spent since the last yield, :meth:`pace` yields
    (``trio.lowlevel.checkpoint``). A read that waited for input is a yield too (:meth:`yielded`).
    """

    __slots__ = ("frames", "yields")

    def __init__(self) -> None:
        self.frames = 0
        self.yields = 0  # times pace() let others run (statistics, tests)

    def spend(self, frames: int = 1) -> bool:
        """Count ``frames``; ``True`` when the turn's budget is spent (call :meth:`pace`)."""
        self.frames += frames
        return self.frames >= TURN_FRAMES

    def left(self) -> int:
        """Frames this turn may still handle (at least 1)."""
        return max(1, TURN_FRAMES - self.frames)

    def yielded(self) -> None:
        """Other tasks ran (the reader waited or checkpointed): a new turn starts."""
        self.frames = 0

    async def pace(self) -> None:
        """Yield to other tasks when this turn's budget is spent."""
        if self.frames >= TURN_FRAMES:
            self.frames = 0
            self.yields += 1
            await trio.lowlevel.checkpoint()


def _read_now(fd: int, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` from the socket; ``None`` when none are waiting, ``b""`` once the peer is gone."""
    try:
        return os.read(fd, max_bytes)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno in _GONE:
            return b""
        raise trio.BrokenResourceError(f"socket read failed: {exc}") from exc


async def read_some(fd: int, max_bytes: int, *, drained: bool = False) -> bytes:
    """Up to ``max_bytes`` from the socket, waiting until some arrive; ``b""`` once the peer is gone.

    Always yields to the scheduler once, so a client that never stops sending cannot starve other tasks:
    by waiting until the socket is readable, or (when data was there at once) by a checkpoint after the read.

    Args:
        drained: The caller's last read came back short of ``max_bytes``, so the socket was empty then: wait
            until it is readable before reading (a paced client's every read holds one message; this spares
            each the ``read(2)`` that would fail with ``EAGAIN``, and the checkpoint after the wait).
    """
    waited = drained
    if drained:
        await trio.lowlevel.wait_readable(fd)
    while (data := _read_now(fd, max_bytes)) is None:
        await trio.lowlevel.wait_readable(fd)
        waited = True
    if not waited:
        await trio.lowlevel.checkpoint()
    return data


def read_waiting(fd: int, max_bytes: int) -> bytes:
    """Up to ``max_bytes`` already waiting in the socket, without waiting or yielding; ``b""`` when none are
    (or the socket failed or the peer is gone: the next :func:`read_some` meets that again and says so)."""
    try:
        return os.read(fd, max_bytes)
    except OSError:  # BlockingIOError included
        return b""


class SocketInput:
    """A client's TCP socket as its session reads it: :func:`read_some` and :func:`read_waiting`, remembering
    whether the last read emptied the socket, and gathering a streaming client's input in the kernel.

    After each run of reads the session says how many publishes it took (:meth:`ran`; none when they ask for acks:
    their publisher waits for those, and a wait for more input would delay them). From a run of GATHER_RUN or
    more, while the input comes at GATHER_RATE or faster, the socket is set to wake its reader only once
    GATHER_BYTES wait (``SO_RCVLOWAT``), and a wait for input lasts at most GATHER_WAIT_SECONDS. A shorter run, a
    slower rate, or a wait that ends by the clock sets it back, so a paced client's every message, and a stream's
    last, still wake the reader at once (the latter within GATHER_WAIT_SECONDS). On a platform without
    ``SO_RCVLOWAT`` every read is as :func:`read_some`'s.
    """

    def __init__(self, sock: Any, max_bytes: int) -> None:
        self.fd: int = sock.fileno()
        self.max_bytes = max_bytes
        self.gathering = False
        self.gathered = 0  # how many times the mark was set
        self._sock = sock
        self._drained = False  # the last read came back short: the socket was empty then
        self._fast = False  # the input came at GATHER_RATE or faster over the last span measured
        self._span_start = perf_counter()
        self._span_bytes = 0
        self._can_gather = hasattr(socket, "SO_RCVLOWAT") and sock.family in (socket.AF_INET, socket.AF_INET6)

    @classmethod
    def of(cls, stream: Any, max_bytes: int) -> SocketInput | None:
        """The input of ``stream`` when it is a plain trio socket stream (:func:`socket_fd`), else ``None``."""
        return cls(stream.socket, max_bytes) if socket_fd(stream) is not None else None

    async def read(self) -> bytes:
        """As :func:`read_some`: some bytes, waiting until some arrive (a scheduling point either way); ``b""`` once
        the peer is gone."""
        fd, max_bytes = self.fd, self.max_bytes
        waited = self._drained
        if waited:
            if self.gathering:
                with trio.move_on_after(GATHER_WAIT_SECONDS) as wait:
                    await trio.lowlevel.wait_readable(fd)
                if wait.cancelled_caught:  # the stream slowed down or ended: what comes next wakes the reader
                    self._gather(False)
            else:
                await trio.lowlevel.wait_readable(fd)
        while (data := _read_now(fd, max_bytes)) is None:
            self._gather(False)  # a wait that is not bounded in time must end on any input
            await trio.lowlevel.wait_readable(fd)
            waited = True
        if not waited:
            await trio.lowlevel.checkpoint()
        self._drained = len(data) < max_bytes
        self._span_bytes += len(data)
        return data

    def read_waiting(self) -> bytes:
        """As :func:`read_waiting`: what is already there, without waiting or yielding."""
        data = read_waiting(self.fd, self.max_bytes)
        self._drained = len(data) < self.max_bytes
        self._span_bytes += len(data)
        return data

    def ran(self, publishes: int) -> None:
        """A run of reads, until the socket was empty, took ``publishes`` publishes: gather the input that follows
        when it is a fast stream's."""
        if publishes < GATHER_RUN:  # a paced client's every run: nothing more to look at
            if self.gathering:
                self._gather(False)
            return
        now = perf_counter()
        span = now - self._span_start
        if span >= RATE_SPAN_SECONDS:  # the rate since the last look, however long ago
            self._fast = self._span_bytes >= GATHER_RATE * span
            self._span_start, self._span_bytes = now, 0
        if self._fast is not self.gathering:
            self._gather(self._fast)

    def _gather(self, on: bool) -> None:
        if on and not self._can_gather or on is self.gathering:
            return
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, GATHER_BYTES if on else 1)
        except OSError:  # the platform or socket does not take it: read as before
            self._can_gather = False
            on = False
        self.gathering = on
        self.gathered += on


async def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data``, waiting whenever the socket's send buffer is full.

    Raises:
        trio.BrokenResourceError: the peer is gone.
    """
    sent, total = 0, len(data)
    while sent < total:
        try:
            sent += os.write(fd, data if not sent else memoryview(data)[sent:])
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)
        except OSError as exc:
            raise trio.BrokenResourceError(f"socket write failed: {exc}") from exc
