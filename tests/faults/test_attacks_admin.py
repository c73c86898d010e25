"""Issue 34: a flood of Admin HTTP requests, over real TCP with urllib and raw sockets, next to an official-client
bystander.

* 300 concurrent ``/amps.json`` and ``/metrics`` requests from four addresses: every one is answered 200 or
  refused with a clean 503 (no reset, no timeout), the bystander's every publish comes back in order, and the
  broker stays up;
* the Admin port serves at most ``MAX_CONNECTIONS_PER_ADDRESS`` connections from one address (the next waits
  its turn without a slot, and past ``MAX_WAITING_PER_ADDRESS`` more is answered 503 at once) and at most
  ``MAX_CONNECTIONS`` in all (the next waits in the backlog and is answered
  as soon as one closes).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path

import AMPS
import pytest

from broker.admin.server import (
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_ADDRESS,
    MAX_WAITING_PER_ADDRESS,
)
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess.from_xml(tmp_path, admin=True) as proc:
        yield proc


class _SourceConnection(HTTPConnection):
    """An HTTP connection from a chosen loopback address."""

    def __init__(self, port: int, source: str) -> None:
        super().__init__("127.0.0.1", port, timeout=30, source_address=(source, 0))


def get(port: int, path: str, source: str) -> int:
    """The status of ``GET path`` from ``source`` (a raised error: the request failed uncleanly)."""
    connection = _SourceConnection(port, source)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        reply.read()
        return reply.status
    finally:
        connection.close()


def idle_connections(port: int, source: str, count: int) -> list[socket.socket]:
    """``count`` connections from ``source`` that send nothing (each holds one of the Admin's slots)."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        held.append(sock)
    return held


def test_an_admin_flood_is_answered_or_refused_cleanly_and_the_bystander_gets_every_message(broker) -> None:
    received: list[int] = []
    bystander = AMPS.Client("admin-flood-bystander")
    bystander.connect(broker.uri)
    bystander.logon(10000)
    bystander.subscribe(lambda m: received.append(json.loads(m.get_data())["i"]), "ticks", timeout=10000)
    assert urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/metrics", timeout=10).status == 200

    statuses: list[int | str] = []
    lock = threading.Lock()
    gate = threading.Barrier(300)

    def request(i: int) -> None:
        gate.wait(30)
        try:
            status: int | str = get(broker.admin_port, "/amps.json" if i % 2 else "/metrics", f"127.0.0.{2 + i % 4}")
        except OSError as exc:  # a reset or a timeout: not a clean answer
            status = repr(exc)
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=request, args=(i,), daemon=True) for i in range(300)]
    for thread in threads:
        thread.start()
    for i in range(100):
        bystander.publish("ticks", json.dumps({"i": i}))
        time.sleep(0.01)
    bystander.publish_flush(10000)
    for thread in threads:
        thread.join(60)
    deadline = time.monotonic() + 10
    while len(received) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    bystander.close()

    assert received == list(range(100))
    assert len(statuses) == 300
    unclean = [s for s in statuses if s not in (200, 503)]
    assert not unclean, f"{len(unclean)} requests failed uncleanly, e.g. {unclean[:3]}"
    assert statuses.count(200) >= 4 * MAX_CONNECTIONS_PER_ADDRESS, statuses.count(200)
    assert get(broker.admin_port, "/amps.json", "127.0.0.1") == 200  # and the Admin still answers
    assert broker.proc is not None and broker.proc.poll() is None
    assert "Traceback" not in broker.log()


def test_one_address_holds_a_bounded_share_and_past_the_total_connections_wait(broker) -> None:
    port = broker.admin_port
    held = idle_connections(port, "127.0.0.2", MAX_CONNECTIONS_PER_ADDRESS)
    try:
        # Past its share, an address's request waits its turn (holding no slot: another address is served)...
        turned: list[int] = []
        queued = threading.Thread(target=lambda: turned.append(get(port, "/metrics", "127.0.0.2")), daemon=True)
        queued.start()
        queued.join(1.5)
        assert not turned, "an address was served past MAX_CONNECTIONS_PER_ADDRESS at once"
        assert get(port, "/metrics", "127.0.0.3") == 200
        held.pop(0).close()
        queued.join(15)
        assert turned == [200]
        held += idle_connections(port, "127.0.0.2", 1)
        # ...and past MAX_WAITING_PER_ADDRESS more waiting, it is answered 503 at once, saying what to do...
        held += idle_connections(port, "127.0.0.2", MAX_WAITING_PER_ADDRESS)
        time.sleep(0.5)  # the waiting ones accepted
        started = time.monotonic()
        connection = _SourceConnection(port, "127.0.0.2")
        try:
            connection.request("GET", "/metrics")
            reply = connection.getresponse()
            body = reply.read().decode()
        finally:
            connection.close()
        assert reply.status == 503 and "Too many connections from 127.0.0.2" in body, (reply.status, body[:200])
        assert time.monotonic() - started < 5
        assert "refusing connections from 127.0.0.2" in broker.log()
        # ...while another address is served.
        assert get(port, "/metrics", "127.0.0.3") == 200

        # With every slot held, a new connection waits (it is not refused) until one closes.
        held += idle_connections(port, "127.0.0.3", MAX_CONNECTIONS - MAX_CONNECTIONS_PER_ADDRESS)
        time.sleep(0.5)  # accepted
        answer: list[int] = []
        waiting = threading.Thread(target=lambda: answer.append(get(port, "/amps.json", "127.0.0.4")), daemon=True)
        waiting.start()
        waiting.join(1.5)
        assert not answer, "the Admin served more than MAX_CONNECTIONS connections at once"
        held.pop().close()
        waiting.join(15)
        assert answer == [200]
    finally:
        for sock in held:
            sock.close()
