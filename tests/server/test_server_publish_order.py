"""A publish whose SOW write fails leaves nothing in the journal (its record is taken back before it is written),
its publisher's re-send is applied, no sequence is handed out twice; deletes and expirations journal nothing
when their SOW write fails; and the expiration sweeper waits while the journal's disk is full."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_fakes import Client, FailingWrites, broker_from

from broker.errors import StorageError
from broker.server.kernel import Broker
from broker.txlog import ReplayStart

CONFIG = """<AMPSConfig><Name>order-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>
    <Expiration>enabled</Expiration></Topic>
</SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>1s</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Broker]:
    yield from broker_from(CONFIG, tmp_path, monkeypatch)


def _journal(b: Broker) -> list[tuple[int, str, bytes]]:
    b.durability.journal.sync()
    return [(r.sequence, r.command.wire_name, r.sow_key) for r in b.durability.journal.replay(ReplayStart.epoch())]


def _pub(b: Broker, client: Client, n: int, seq: int, **extra: Any) -> Any:
    return b.engine.publish(client, {"topic": "orders", "seq": seq, **extra}, json.dumps({"id": n}).encode())


def test_a_failed_sow_write_takes_the_journal_record_back(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    b = broker
    client = Client(b)
    orders = b.engine.sow_topics["orders"]
    failing = FailingWrites(orders.storage, monkeypatch)
    assert _pub(b, client, 1, seq=1).sequence == 1
    failing.failures = 1
    with pytest.raises(StorageError):
        _pub(b, client, 2, seq=2)
    assert orders.count() == 1
    assert [s for s, _c, _k in _journal(b)] == [1]  # not replayed: its publisher was told it failed
    assert not b.engine.is_duplicate(client.name, 2)  # the re-send is applied, once
    again = _pub(b, client, 2, seq=2)
    assert again.sequence == 3  # sequence 2 is a gap: never handed out twice
    assert [s for s, _c, _k in _journal(b)] == [1, 3] and orders.count() == 2
    assert b.engine.is_duplicate(client.name, 2)
    assert b.durability.journal.durable_sequence == 3 and b.durability.journal.dedup.last_persisted(client.name) == 2


def test_a_held_record_is_not_written_until_released(broker: Broker) -> None:
    journal = broker.durability.journal
    journal.append("publish", "orders", b"{}", sow_key=b"a")
    seq, _bm = journal.append("publish", "orders", b"{}", sow_key=b"b", publisher=(5, 7), held=True)
    assert journal.sync() == seq - 1  # the sync met the publish while its SOW was written: not taken
    assert journal.statistics().pending_records == 1 and journal.dedup.last_persisted_hash(5) == 0
    assert journal.retract(seq)  # still unwritten: taken back
    assert not journal.retract(seq) and journal.statistics().pending_records == 0
    assert not journal.dedup.is_duplicate_hash(5, 7)
    seq2, _bm = journal.append("publish", "orders", b"{}", sow_key=b"c", publisher=(5, 7), held=True)
    assert seq2 == seq + 1
    journal.release(seq2)
    assert journal.sync() == seq2 and journal.dedup.last_persisted_hash(5) == 7
    assert [r.sequence for r in journal.replay(ReplayStart.epoch())] == [1, seq2]


def test_a_sync_racing_a_publish_never_writes_a_record_taken_back(broker: Broker,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Publishes whose SOW write fails every other time, with a thread syncing all along."""
    b = broker
    client = Client(b)
    failing = FailingWrites(b.engine.sow_topics["orders"].storage, monkeypatch)
    stop = threading.Event()

    def syncer() -> None:
        while not stop.is_set():
            b.durability.journal.sync()

    thread = threading.Thread(target=syncer)
    thread.start()
    failed: set[int] = set()
    try:
        for n in range(1, 2001):
            failing.failures = n % 2
            try:
                _pub(b, client, n, seq=n)
            except StorageError:
                failed.add(n)
    finally:
        stop.set()
        thread.join()
    logged = [json.loads(r.data)["id"] for r in b.durability.journal.replay(ReplayStart.epoch(), b.durability.journal.sync())]
    assert failed and logged == [n for n in range(1, 2001) if n not in failed]


def test_deletes_and_expirations_journal_nothing_when_the_sow_write_fails(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    b = broker
    client = Client(b)
    _pub(b, client, 1, seq=1)
    _pub(b, client, 2, seq=2, expiration="0.01")
    failing = FailingWrites(b.engine.sow_topics["orders"].storage, monkeypatch)
    failing.failures = 1
    with pytest.raises(StorageError):
        b.engine.sow_delete(client, {"topic": "orders", "filter": "/id = 1"}, b"")
    failing.failures = 1
    with pytest.raises(StorageError):
        b.engine.sow_delete(client, {"topic": "orders"}, b'{"id": 1}')
    assert [c for _s, c, _k in _journal(b)] == ["publish", "publish"]
    assert b.engine.sow_topics["orders"].count() == 2
    time.sleep(0.02)
    failing.failures = 1  # the expiration's SOW write fails: nothing journaled, the record expires later
    assert b.engine.expire() == 0 and b.engine.expiry_waiting
    assert [c for _s, c, _k in _journal(b)] == ["publish", "publish"]
    assert b.engine.expire() == 1
    assert [c for _s, c, _k in _journal(b)] == ["publish", "publish", "expire"]


def test_the_sweeper_waits_while_the_journal_disk_is_full(broker: Broker) -> None:
    b = broker
    client = Client(b)
    _pub(b, client, 1, seq=1, expiration="0.01")
    time.sleep(0.02)
    b.durability.journal._disk_full = True  # as after a sync that met ENOSPC
    assert b.engine.expire() == 0 and b.engine.expiry_waiting  # nothing removed, nothing journaled
    assert b.engine.sow_topics["orders"].count() == 1 and [c for _s, c, _k in _journal(b)] == ["publish"]
    b.durability.journal._disk_full = False
    assert b.engine.expire() == 1 and not b.engine.expiry_waiting
    assert [c for _s, c, _k in _journal(b)] == ["publish", "expire"]
