"""Small helpers over the official AMPS Python client (``import AMPS``), which drives the broker.

The client is a blocking C extension with its own receive thread per connection: handlers run on
that thread, so work in a handler is kept to a counter and a timestamp.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterable
from typing import Any

_names = itertools.count(1)


def with_nodelay(uri: str) -> str:
    """``uri`` with the client's ``tcp_nodelay=true`` option (unless it already sets it).

    Without it the client's socket runs Nagle's algorithm: a small publish waits for the ACK of the
    previous one, up to the peer's delayed-ACK timer (40 ms on Linux), and the latency figures would
    measure that timer instead of the broker. Latency-sensitive AMPS applications set the option; the
    peers' Python clients here set TCP_NODELAY by default (nats-py through asyncio's transports, redis-py
    on every connection it opens), as the broker does on its side (trio).
    """
    if "tcp_nodelay=" in uri:
        return uri
    return uri + ("&" if "?" in uri else "?") + "tcp_nodelay=true"


def connect(uri: str, role: str, *, publish_store: bool = False) -> Any:
    """A connected, logged-on client named ``bench-<role>-<n>``, with ``tcp_nodelay`` (:func:`with_nodelay`).

    Args:
        uri: The broker's URI.
        role: Part of the client name (names must be unique per broker).
        publish_store: Give the client a ``MemoryPublishStore`` (publishes then ask for persisted acks).
    """
    import AMPS

    client = AMPS.Client(f"bench-{role}-{next(_names)}-{time.time_ns() % 10**9}")
    if publish_store:
        client.set_publish_store(AMPS.MemoryPublishStore(10_000))
    client.connect(with_nodelay(uri))
    client.logon(10_000)
    return client


def close(client: Any) -> None:
    """Close a client, ignoring a connection that is already gone."""
    with contextlib.suppress(Exception):  # the AMPS exceptions vary; the client is being dropped anyway
        client.close()


def publish_all(client: Any, topic: str, docs: Iterable[str], timeout_s: float) -> float:
    """Publish ``docs`` and wait until the broker has applied them (``publish_flush``); returns seconds."""
    publish = client.publish
    t0 = time.perf_counter()
    for d in docs:
        publish(topic, d)
    client.publish_flush(int(timeout_s * 1000))
    return time.perf_counter() - t0


def flush(client: Any, timeout_s: float) -> None:
    """Wait until the broker has processed everything this client sent before: a ``flush`` command and its
    processed ack, one round trip.

    The official client's own ``flush()`` / ``publish_flush()`` (without a publish store) take at least 10 ms
    whatever the server does: against a server that answers at once they return after 10.1-10.2 ms, even with
    a 1 ms timeout, while the same command sent with ``execute_async`` has its ack handler called 0.08 ms after
    sending. A workload that flushes every 1,000 messages would measure that wait (10 µs per message) instead
    of the broker, so this sends the command itself and waits on the ack handler.

    Raises:
        TimeoutError: no ack within ``timeout_s``.
        RuntimeError: the flush failed.
    """
    import AMPS

    done = threading.Event()
    status: list[str] = []

    def on_ack(message: Any) -> None:
        if message.get_command() == "ack":
            status.append(message.get_status())
            done.set()

    client.execute_async(AMPS.Command("flush").set_ack_type("processed"), on_ack)
    if not done.wait(timeout_s):
        raise TimeoutError(f"no flush ack within {timeout_s:g}s")
    if status[0] != "success":
        raise RuntimeError(f"flush failed: {status[0]}")


class Completion:
    """A handler that counts delivered messages and signals the ack that ends a command."""

    def __init__(self, end_ack: str = "completed", end_command: str | None = None) -> None:
        self.end_ack = end_ack
        self.end_command = end_command
        self.count = 0
        self.first_ns = 0
        #: When the command was sent (perf_counter_ns), for the time to the first message.
        self.sent_ns = 0
        self.bookmarks: dict[int, str] = {}
        self.keep_bookmarks: set[int] = set()
        self.failure: str | None = None
        self.done = threading.Event()

    def __call__(self, message: Any) -> None:
        cmd = message.get_command()
        if cmd in ("publish", "sow"):
            self.count += 1
            if self.count == 1:
                self.first_ns = time.perf_counter_ns()
            if self.count in self.keep_bookmarks:
                self.bookmarks[self.count] = message.get_bookmark()
        elif cmd == "ack":
            if message.get_status() == "failure":
                self.failure = message.get_reason() or "failure"
                self.done.set()
            elif message.get_ack_type() == self.end_ack:
                self.done.set()
        elif self.end_command is not None and cmd == self.end_command:
            self.done.set()


def run_command(client: Any, command: Any, timeout_s: float, *, end_command: str | None = None,
                keep_bookmarks: Iterable[int] = ()) -> tuple[int, float, Completion, str]:
    """Execute a ``sow`` or bookmark ``subscribe`` command and wait for its end.

    A ``sow`` ends with ``group_end`` (the handler form of the client does not pass the completed ack on);
    a bookmark subscription's replay ends with the completed ack.

    Returns:
        Messages delivered, seconds from sending to the end, the handler, and the command's id.

    Raises:
        TimeoutError: the end did not come within ``timeout_s``.
        RuntimeError: the broker answered with a failure.
    """
    handler = Completion("completed", end_command)
    handler.keep_bookmarks = set(keep_bookmarks)
    t0 = time.perf_counter()
    handler.sent_ns = time.perf_counter_ns()
    command_id = client.execute_async(command, handler)
    if not handler.done.wait(timeout_s):
        raise TimeoutError(f"no {end_command or 'completed ack'} after {timeout_s:.0f}s "
                           f"({handler.count} messages so far)")
    elapsed = time.perf_counter() - t0
    if handler.failure:
        raise RuntimeError(handler.failure)
    return handler.count, elapsed, handler, command_id


def query(client: Any, command: Any, timeout_s: float) -> tuple[int, float]:
    """Run a ``sow`` command; returns the records delivered and the seconds until ``group_end``."""
    count, seconds, _, _ = run_command(client, command, timeout_s, end_command="group_end")
    return count, seconds
