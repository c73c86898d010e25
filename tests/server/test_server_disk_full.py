"""A full journal disk inside a real (in-process) broker over TCP: the journal writer's writes fail with
ENOSPC at the edge (``os.write`` as the writer module sees it), publishes to logged topics are refused with
``tx store failure`` and applied to nothing, subscriptions, queries and bookmark replays keep working, the
broker resumes by itself when "space returns", and every persisted-acked message is in a replay once."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from broker.config import load_config
from broker.protocol import CLOSED, NEED_DATA, Connection, decode_sow_batch, encode_frame
from broker.server.kernel import Broker, build_broker

CONFIG = """<AMPSConfig><Name>disk-full</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW><Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic></SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>10ms</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog></AMPSConfig>"""


class Disk:
    """``os`` as the journal writer sees it, with writes failing with ENOSPC while ``full``."""

    def __init__(self) -> None:
        self.full = False
        self.refused_writes = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def write(fd: int, data: Any) -> int:
            if self.full:
                self.refused_writes += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return os.write(fd, data)

        proxy = SimpleNamespace(**{name: getattr(os, name) for name in dir(os) if not name.startswith("__")})
        proxy.write = write
        monkeypatch.setattr(writer_io(), "os", proxy)


def writer_io() -> Any:
    """The module whose ``os.write`` and ``_datasync`` put journal bytes on disk."""
    from broker.txlog import segments

    return segments


#: Canonical header names -> the wire keys the tests use.
_WIRE = {"command": "c", "cmd_id": "cid", "ack_type": "a", "seq": "s", "sub_ids": "sids", "topic": "t"}


class RawClient:
    """An AMPS client over raw frames: what the official client sends, and every frame it gets back."""

    def __init__(self, stream: trio.SocketStream, name: str) -> None:
        self.stream = stream
        self.name = name
        self.conn = Connection()
        self.frames: list[tuple[dict[str, Any], bytes]] = []
        self.sow_records: list[bytes] = []
        self.changed = trio.Event()

    async def reader(self) -> None:
        while True:
            data = await self.stream.receive_some(65536)
            self.conn.receive_data(data)
            while (event := self.conn.next_event()) is not NEED_DATA:
                if event is CLOSED:
                    return
                fields = dict(event.header.fields())
                self.frames.append(({_WIRE.get(k, k): v for k, v in fields.items()}, bytes(event.body)))
                if fields.get("command") == "sow":
                    self.sow_records.extend(data for _inner, data in decode_sow_batch(event))
                self.changed.set()
                self.changed = trio.Event()

    async def send(self, body: bytes = b"", **header: Any) -> None:
        await self.stream.send_all(encode_frame(header, body))

    def matching(self, **want: Any) -> list[tuple[dict[str, Any], bytes]]:
        """Frames whose header has these fields (wire keys: ``c``, ``cid``, ``a``, ``s``, ``sids``...)."""
        return [(h, b) for h, b in self.frames if all(h.get(k) == v for k, v in want.items())]

    async def wait_for(self, count: int = 1, timeout: float = 10, **want: Any) -> list[tuple[dict[str, Any], bytes]]:
        with trio.fail_after(timeout):
            while len(got := self.matching(**want)) < count:
                await self.changed.wait()
        return got


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Broker:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.xml").write_text(CONFIG)
    return build_broker(load_config(tmp_path / "config.xml"))


async def connect(broker: Broker, nursery: trio.Nursery, name: str) -> RawClient:
    host, port = broker.addresses[0]
    client = RawClient(await trio.open_tcp_stream(host, port), name)
    nursery.start_soon(client.reader)
    await client.send(c="logon", cid="logon", client_name=name, a="processed")
    await client.wait_for(cid="logon", a="processed")
    return client


def order(n: int) -> bytes:
    return json.dumps({"id": n, "qty": n * 10}).encode()


async def test_publishes_refused_while_full_then_resumed_with_nothing_acked_lost(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    disk = Disk()
    disk.install(monkeypatch)
    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        pub = await connect(broker, nursery, "pub")
        sub = await connect(broker, nursery, "sub")
        await sub.send(c="subscribe", cid="live", sub_id="live", t="orders", a="processed")
        await sub.wait_for(cid="live", a="processed")

        for n in range(1, 6):
            await pub.send(order(n), c="p", t="orders", a="persisted", s=n)
        await pub.wait_for(a="persisted", s=5)

        # The disk fills: the next publish is accepted (the journal keeps it), its sync fails.
        disk.full = True
        await pub.send(order(6), c="p", t="orders", a="persisted", s=6)
        with trio.fail_after(5):
            while not broker.durability.disk_full:
                await trio.sleep(0.01)
        assert broker.statistics().journal.disk_full is True
        assert pub.matching(a="persisted", s=6) == []  # not durable: no persisted ack

        # Now publishes to the logged topic are refused whole, with the reason, and applied to nothing.
        for n in (7, 8):
            await pub.send(order(n), c="p", t="orders", a="persisted", s=n)
        refused = await pub.wait_for(2, a="persisted", status="failure")
        assert [(h["s"], h["reason"]) for h, _ in refused] == [(7, "tx store failure"), (8, "tx store failure")]
        # A re-send of the kept publish (a duplicate, appended but not durable) is acked only once durable.
        await pub.send(order(6), c="p", t="orders", a="persisted", s=6)
        await pub.send(order(9), c="p", t="orders", cid="sync-pub", a="processed")
        (failed,) = await pub.wait_for(cid="sync-pub", a="processed")
        assert failed[0]["status"] == "failure" and failed[0]["reason"] == "tx store failure"

        # Reads keep working: the live subscription has 1-6 only, a SOW query answers, and a bookmark replay
        # delivers what is durable (1-5) at once.
        live = await sub.wait_for(6, c="publish", sids="live")
        assert [json.loads(b)["id"] for _, b in live] == [1, 2, 3, 4, 5, 6]
        await sub.send(c="sow", cid="q1", query_id="q1", t="orders", a="processed,completed")
        await sub.wait_for(cid="q1", a="completed")
        ids = sorted(json.loads(data)["id"] for data in sub.sow_records)
        assert ids == [1, 2, 3, 4, 5, 6]
        await sub.send(c="subscribe", cid="replay", sub_id="replay", t="orders", bookmark="0",
                       a="processed,completed")
        await sub.wait_for(5, c="publish", sids="replay")
        # The sentinel: the replay reports that it sent what is durable and waits for the journal; by then it
        # has sent 5 records (1-5), not 6, and has not completed.
        replay = next(r for _, sub_id, r in broker.replays.running() if sub_id == "replay")
        while not replay.waiting_for_journal:
            await trio.sleep(0.01)
        assert replay.sent == 5
        assert len(sub.matching(c="publish", sids="replay")) == 5 and sub.matching(cid="replay", a="completed") == []

        stats = broker.statistics()
        assert stats.counters.publishes_refused.journal == 3
        assert [r.message for r in caplog.records if "journal disk full at" in r.message][0].endswith(
            "the broker retries by itself")
        assert len([r for r in caplog.records if "journal disk full at" in r.message]) == 1

        # Space returns: the broker writes the kept record by itself, acks it, and accepts publishes again.
        disk.full = False
        await pub.wait_for(2, a="persisted", s=6, status="success")  # the publish and its re-send
        await sub.wait_for(cid="replay", a="completed")
        assert [json.loads(b)["id"] for _, b in sub.matching(c="publish", sids="replay")] == [1, 2, 3, 4, 5, 6]
        assert not broker.durability.disk_full
        await pub.send(order(10), c="p", t="orders", a="persisted", s=10)
        await pub.wait_for(a="persisted", s=10, status="success")
        assert len([r for r in caplog.records if "is writable again" in r.message]) == 1

        # Every persisted-acked message is in a replay from EPOCH, once; the refused ones are not. Persisted acks
        # may be conflated (a success ack for s covers every s below it the broker did not refuse).
        top = max(h["s"] for h, _ in pub.matching(a="persisted", status="success"))
        refused_s = {h["s"] for h, _ in pub.matching(a="persisted", status="failure")}
        acked = [s for s in (1, 2, 3, 4, 5, 6, 7, 8, 10) if s <= top and s not in refused_s]
        await sub.send(c="subscribe", cid="epoch", sub_id="epoch", t="orders", bookmark="0",
                       a="processed,completed")
        await sub.wait_for(cid="epoch", a="completed")
        replayed = [json.loads(b)["id"] for _, b in sub.matching(c="publish", sids="epoch")]
        assert acked == [1, 2, 3, 4, 5, 6, 10]
        assert replayed == acked
        nursery.cancel_scope.cancel()


async def test_sow_delete_refused_while_full_and_its_persisted_ack_waits_for_durability(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = Disk()
    disk.install(monkeypatch)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        pub = await connect(broker, nursery, "pub")
        for n in range(1, 4):
            await pub.send(order(n), c="p", t="orders", a="persisted", s=n)
        await pub.wait_for(a="persisted", s=3)

        disk.full = True
        # A journaled delete is acknowledged as persisted only once durable (not at once, as it was).
        await pub.send(c="sow_delete", cid="d1", t="orders", filter="/id = 1", a="processed,stats,persisted", s=4)
        await pub.wait_for(cid="d1", a="stats")
        with trio.fail_after(5):
            while not broker.durability.disk_full:
                await trio.sleep(0.01)
        assert pub.matching(cid="d1", a="persisted") == []
        # While full, deletes on logged topics are refused like publishes (nothing deleted).
        await pub.send(c="sow_delete", cid="d2", t="orders", filter="/id = 2", a="processed,stats,persisted", s=5)
        (ack,) = await pub.wait_for(cid="d2", a="processed")
        assert ack[0]["status"] == "failure" and ack[0]["reason"] == "tx store failure"
        assert broker.engine.sow_topics["orders"].count() == 2
        disk.full = False
        await pub.wait_for(cid="d1", a="persisted", status="success")
        nursery.cancel_scope.cancel()


async def test_a_journal_failure_other_than_a_full_disk_stops_the_broker_with_one_clear_line(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def eio(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    from broker.errors import JournalError

    with pytest.raises(BaseExceptionGroup) as caught:  # noqa: PT012 - the broker runs until the failure
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.serve)
            pub = await connect(broker, nursery, "pub")
            monkeypatch.setattr(writer_io(), "_datasync", eio)
            await pub.send(order(1), c="p", t="orders", a="persisted", s=1)
            await trio.sleep(5)
    matched, _rest = caught.value.split(JournalError)
    assert matched is not None
    critical = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1 and "journal write failed at" in critical[0].message
    assert "restart it" in critical[0].message
