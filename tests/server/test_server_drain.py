"""open_broker and the drain on shutdown (issue 35, acceptance 3 and 4).

* SIGTERM to ``broker serve`` while a publisher streams with persisted acks: every publish acknowledged as
  persisted is in the journal, the client's connection ends cleanly after its last ack (no reset), the broker
  logs why it closed it, and it exits 0 within its ``<ShutdownTimeout>``.
* Two brokers opened in one process with :func:`open_broker` keep their own counters, client names,
  connection ids and SOW.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import socket
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import load_config
from broker.config.model import TransactionLogConfig
from broker.errors import JournalError
from broker.protocol import CLOSED, NEED_DATA, Connection, encode_frame
from broker.server.kernel import Broker, build_broker, open_broker
from broker.testing.process import BrokerProcess, config_xml, free_port
from broker.testing.wsclient import WsClient, WsClosed
from broker.txlog import Command, JournalWriter, ReplayStart

pytestmark = pytest.mark.timeout(90)

TXLOG = ("<JournalDirectory>./journal</JournalDirectory><FlushInterval>20ms</FlushInterval>"
         "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>")
SOW = ("<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>"
       "<FileName>./sow/orders.sow</FileName></Topic>")
SHUTDOWN_TIMEOUT = 5.0


class StreamingPublisher:
    """A publisher over raw frames on a blocking socket: one thread sends publishes asking for persisted acks as
    fast as the socket takes them, the caller's thread reads the acks until the broker ends the stream."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.conn = Connection()
        self.acked = 0  # the highest s acknowledged as persisted
        self.failed: list[dict[str, Any]] = []
        self.sent = 0
        self.ended_by: str = ""
        self._stop = threading.Event()
        self.sock.sendall(encode_frame({"c": "logon", "cid": "logon", "client_name": "streamer", "a": "processed"}))
        self._until(lambda header: header.get("cmd_id") == "logon")
        self._sender = threading.Thread(target=self._send, daemon=True)

    def _until(self, done: Any) -> None:
        while True:
            data = self.sock.recv(65536)
            assert data, "the broker closed before the logon ack"
            self.conn.receive_data(data)
            while (event := self.conn.next_event()) is not NEED_DATA:
                if event is not CLOSED and done(dict(event.header.fields())):
                    return

    def _send(self) -> None:
        try:
            while not self._stop.is_set():
                frames = []
                for _ in range(20):
                    self.sent += 1
                    frames.append(encode_frame({"c": "p", "t": "orders", "a": "persisted", "s": self.sent},
                                               json.dumps({"id": self.sent}).encode()))
                self.sock.sendall(b"".join(frames))
                time.sleep(0.001)
        except OSError:  # the broker is gone: the reader tells how
            pass

    def start(self) -> None:
        self._sender.start()

    def read_until_closed(self) -> None:
        """Read acks until the stream ends; ``ended_by`` says how (``"eof"``: a clean close)."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    self.ended_by = "eof"
                    return
                self.conn.receive_data(data)
                while (event := self.conn.next_event()) is not NEED_DATA:
                    if event is CLOSED:
                        self.ended_by = "eof"
                        return
                    header = dict(event.header.fields())
                    if header.get("ack_type") != "persisted":
                        continue
                    if header.get("status") == "failure":
                        self.failed.append(header)
                    else:
                        self.acked = max(self.acked, int(header.get("seq") or 0))
        except OSError as exc:
            self.ended_by = f"error: {exc!r}"
        finally:
            self._stop.set()
            self._sender.join(10)
            self.sock.close()


def journaled_ids(directory: Path, instance: str) -> set[int]:
    with JournalWriter(TransactionLogConfig(str(directory)), instance) as journal:
        return {json.loads(r.data)["id"] for r in journal.replay(ReplayStart.epoch()) if r.command == Command.PUBLISH}


def test_sigterm_while_a_publisher_streams_drains_acks_and_exits_cleanly(tmp_path: Path) -> None:
    broker = BrokerProcess.from_xml(tmp_path, transaction_log=TXLOG, sow=SOW,
                                    extra=f"<ShutdownTimeout>{SHUTDOWN_TIMEOUT:g}s</ShutdownTimeout>").start()
    publisher = StreamingPublisher(broker.port)
    publisher.start()
    try:
        while publisher.acked < 2000:  # the stream is under way, acks flowing
            publisher.conn.receive_data(publisher.sock.recv(65536))
            while (event := publisher.conn.next_event()) is not NEED_DATA:
                if event is not CLOSED and event.header.ack_type == "persisted":
                    publisher.acked = max(publisher.acked, event.header.seq or 0)
        while publisher.sent <= publisher.acked:  # publishes in flight when the signal comes
            time.sleep(0.001)
        assert broker.proc is not None
        stopped_at = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)  # while the publisher keeps sending
        publisher.read_until_closed()
        code = broker.wait_exit(SHUTDOWN_TIMEOUT + 10)
        took = time.monotonic() - stopped_at
    finally:
        log = broker.log()
        broker.kill()
    assert code == 0, log
    assert took < SHUTDOWN_TIMEOUT + 5, f"exited {took:.1f}s after SIGTERM:\n{log}"
    assert publisher.ended_by == "eof", f"the client saw {publisher.ended_by}, not a clean end of the stream"
    assert publisher.failed == []
    # (The drain may apply every publish already in its socket buffer, so sent == acked is a clean drain too.)
    assert publisher.sent >= publisher.acked
    logged = journaled_ids(tmp_path / "journal", "test-broker")
    missing = set(range(1, publisher.acked + 1)) - logged
    assert not missing, f"{len(missing)} publishes acknowledged as persisted are not in the journal"
    # Drained, not cut off: every publish the broker applied before it stopped reading got its persisted ack.
    assert max(logged) == publisher.acked, f"{max(logged) - publisher.acked} journaled publishes never acknowledged"
    assert "disconnected: the broker is shutting down" in log
    assert "drained in" in log


def test_a_websocket_client_is_told_the_broker_is_going_away(tmp_path: Path) -> None:
    broker = BrokerProcess.from_xml(tmp_path, websocket=True).start()
    client = WsClient.connect(broker.websocket_port or 0, "ws-client")
    try:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
        with pytest.raises(WsClosed) as closed:
            client.next_message(timeout=10)
        assert broker.wait_exit(15) == 0
    finally:
        client.close()
        broker.kill()
    assert str(closed.value) == "closed by the server: 1001 the broker is shutting down"


def _config(tmp_path: Path, name: str) -> Any:
    directory = tmp_path / name
    directory.mkdir()
    path = directory / "config.xml"
    path.write_text(config_xml(port=0, name=name, sow=SOW.replace("./sow", str(directory / "sow")),
                               transaction_log=TXLOG.replace("./journal", str(directory / "journal"))))
    return load_config(path)


async def _logged_on(broker: Broker, name: str) -> tuple[trio.SocketStream, Connection]:
    host, port = broker.addresses[0]
    stream = await trio.open_tcp_stream(host, port)
    conn = Connection()
    await stream.send_all(encode_frame({"c": "logon", "cid": "logon", "client_name": name, "a": "processed"}))
    await _frames(stream, conn, "logon")
    return stream, conn


async def _frames(stream: trio.SocketStream, conn: Connection, cid: str) -> list[dict[str, Any]]:
    """Frames until the processed (or completed) ack of ``cid``."""
    got: list[dict[str, Any]] = []
    with trio.fail_after(10):
        while True:
            conn.receive_data(await stream.receive_some(65536))
            while (event := conn.next_event()) is not NEED_DATA and event is not CLOSED:
                header = dict(event.header.fields())
                got.append(header)
                if header.get("cmd_id") == cid and header.get("ack_type") in ("processed", "completed"):
                    return got


async def test_two_brokers_in_one_process_share_nothing(tmp_path: Path) -> None:
    async with open_broker(_config(tmp_path, "one")) as one, open_broker(_config(tmp_path, "two")) as two:
        assert one.addresses[0][1] != two.addresses[0][1]
        a, a_conn = await _logged_on(one, "same-name")
        b, b_conn = await _logged_on(two, "same-name")
        for i in range(5):
            await a.send_all(encode_frame({"c": "p", "t": "orders"}, json.dumps({"id": i}).encode()))
        await a.send_all(encode_frame({"c": "sow", "cid": "q", "t": "orders", "a": "completed"}))
        await _frames(a, a_conn, "q")
        await b.send_all(encode_frame({"c": "sow", "cid": "q", "t": "orders", "a": "completed"}))
        answer = await _frames(b, b_conn, "q")
        # The SOW (and its cache), the counters and the client registries are each broker's own.
        assert one.engine.sow_topics["orders"].count() == 5 and two.engine.sow_topics["orders"].count() == 0
        assert [h for h in answer if h.get("command") == "sow"] == []
        assert one.statistics().counters.messages_received == 5
        assert two.statistics().counters.messages_received == 0
        # The same client name on both: neither logon displaced the other (their names are not shared).
        for broker in (one, two):
            stats = broker.statistics()
            assert stats.counters.connections_closed.duplicate_name == 0
            assert [c.id for c in stats.clients] == ["client-1"]  # connection ids are numbered per broker
            assert broker.clients.named("same-name") is not None
        assert one.clients.named("same-name") is not two.clients.named("same-name")
        await a.aclose()
        await b.aclose()


async def test_a_client_that_does_not_read_is_closed_at_the_deadline(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with open_broker(_config(tmp_path, "deadline"), shutdown_timeout=1.0) as broker:
        stalled, _ = await _logged_on(broker, "stalled")
        await stalled.send_all(encode_frame({"c": "subscribe", "cid": "s", "sub_id": "s", "t": "orders"}))
        publisher, publisher_conn = await _logged_on(broker, "publisher")
        body = json.dumps({"id": 1, "v": "x" * 60_000}).encode()
        for _ in range(200):  # 12 MB the subscriber never reads
            await publisher.send_all(encode_frame({"c": "p", "t": "orders"}, body))
        await publisher.send_all(encode_frame({"c": "flush", "cid": "f", "a": "processed"}))
        await _frames(publisher, publisher_conn, "f")
        consumer = broker.clients.named("stalled")
        assert consumer is not None and consumer.outbound.held > 1_000_000
        stopping = trio.current_time()
    took = trio.current_time() - stopping
    # The publisher drained at once; the subscriber held the drain until the deadline, then was cut off.
    assert 1.0 <= took < 4.0, took
    assert "1 client(s) still open at the shutdown deadline of 1s" in caplog.text
    assert re.search(r"client-\d+ publisher \(127\.0\.0\.1:\d+\) disconnected: the broker is shutting down", caplog.text)
    await stalled.aclose()
    await publisher.aclose()


def test_constructing_a_broker_touches_no_file(tmp_path: Path) -> None:
    config = _config(tmp_path, "quiet")
    before = sorted(tmp_path.rglob("*"))
    first, second = Broker(config), Broker(config)  # no journal lock taken, no store opened
    assert sorted(tmp_path.rglob("*")) == before
    first.open()  # now the journal directory is created and locked
    try:
        assert (tmp_path / "quiet" / "journal").is_dir()
        with pytest.raises(JournalError, match="another broker"):
            second.open()
    finally:
        trio.run(first.aclose)
    again = build_broker(config)  # aclose released the lock
    trio.run(again.aclose)


def test_a_second_sigterm_stops_waiting_for_a_client_that_does_not_read(tmp_path: Path) -> None:
    """An operator pressing Ctrl-C twice: the second signal cuts a long drain short and the broker exits 0."""
    broker = BrokerProcess.from_xml(tmp_path, transaction_log=TXLOG,
                                    extra="<ShutdownTimeout>120s</ShutdownTimeout>").start()
    stalled = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    publisher = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    try:
        for sock, name in ((stalled, "stalled"), (publisher, "publisher")):
            sock.sendall(encode_frame({"c": "logon", "cid": "l", "client_name": name}))
        stalled.sendall(encode_frame({"c": "subscribe", "cid": "s", "sub_id": "s", "t": "orders", "a": "processed"}))
        time.sleep(0.5)  # subscribed before the publishes
        body = json.dumps({"id": 1, "v": "x" * 60_000}).encode()
        publisher.sendall(b"".join(encode_frame({"c": "p", "t": "orders"}, body) for _ in range(200)))
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while "shutting down" not in broker.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the drain waits for the subscriber that reads nothing
        assert broker.proc.poll() is None, "the broker did not wait for its client"
        hurried_at = time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        code = broker.wait_exit(30)
        took = time.monotonic() - hurried_at
    finally:
        log = broker.log()
        broker.kill()
        stalled.close()
        publisher.close()
    assert code == 0, log
    assert took < 10, f"exited {took:.1f}s after the second SIGTERM:\n{log}"
    assert "received SIGTERM again: not waiting for the on-shutdown actions or the clients" in log
    assert "1 client(s) still open when shutdown was hurried: closing them now" in log, log


STOP_ACTION = """<Actions><Action>
  <On><Module>amps-action-on-admin</Module><Options><Path>stop</Path></Options></On>
  <Do><Module>amps-action-do-shutdown</Module></Do></Action></Actions>"""


async def test_the_admin_stop_request_gets_its_whole_reply(tmp_path: Path) -> None:
    """The Admin request that shuts the broker down is answered in full before the Admin server stops (the
    drain of a broker without clients is instant)."""
    import urllib.request

    directory = tmp_path / "stop"
    directory.mkdir()
    path = directory / "config.xml"
    path.write_text(config_xml(port=0, admin_port=free_port(), name="stop", extra=STOP_ACTION))
    replies: list[tuple[int, bytes]] = []

    def stop(port: int) -> None:
        url = f"http://127.0.0.1:{port}/amps/administrator/actions/stop"
        with urllib.request.urlopen(url, timeout=10) as reply:
            replies.append((reply.status, reply.read()))

    # The nursery is outside the broker: it waits for the request's thread after the broker closed.
    async with trio.open_nursery() as nursery, open_broker(load_config(path)) as broker:
        assert broker.admin_port is not None
        nursery.start_soon(partial(trio.to_thread.run_sync, stop, broker.admin_port))
        await broker.stop_requested.wait()  # then leave at once, as `broker serve` does
    assert len(replies) == 1 and replies[0][0] == 200, replies
    assert b"success" in replies[0][1], replies
