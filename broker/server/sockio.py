"""Socket reads and writes with one scheduler yield each, for the per-message hot path.

``trio.SocketStream.send_all`` and ``receive_some`` are correct for any stream but cost two scheduler
checkpoints and a conflict detector per call: about 25 us per ``send_all`` of a small frame on the
development machine, against about 3 us for the ``write(2)`` itself. A broker writing one small batch
per subscriber per incoming publish spends most of its time there. These helpers do the system call
first and wait (``trio.lowlevel.wait_readable``/``wait_writable``, which are cancellation points) only
when the socket is not ready, as trio's own socket methods do inside.

Sessions use them when their stream is a ``trio.SocketStream``; any other stream (tests' memory
streams, TLS) goes through the generic ``trio.abc.Stream`` calls.
"""

from __future__ import annotations

import errno
import os
import sys
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
    while True:
        try:
            data = os.read(fd, max_bytes)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
            waited = True
            continue
        except OSError as exc:
            if exc.errno in _GONE:
                return b""
            raise trio.BrokenResourceError(f"socket read failed: {exc}") from exc
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


async def write_all(fd: int, data: bytes) -> None:
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
