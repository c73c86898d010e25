"""Start-up recovery of logged SOW topics (issue 13): after a crash each SOW equals the replay of its journal up
to the last durable record (applied-but-not-durable records rolled back, lost ones caught up), the next sequence
is above every sequence a SOW record carried, expirations survive a rebuild, and clean restarts read no
journal. Crashes are real: the first broker runs in a child process that SIGKILLs itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import plyvel
import pytest
import trio
from engine_fakes import Client

from broker.config import load_config
from broker.errors import JournalError
from broker.server.kernel import Broker, build_broker
from broker.server.recovery import RecoveryState, read_state, state_path, write_state
from broker.sow.record import SowRecord
from broker.txlog import Command, JournalReader, ReplayStart
from broker.txlog.reservation import DEFAULT_BLOCK

CONFIG = """<AMPSConfig><Name>recovery-test</Name>
<Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr><Protocol>amps</Protocol>
</Transport></Transports>
<SOW>
  <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
  <Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability>
    <Expiration>enabled</Expiration></Topic>
  <Topic><Name>plain</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
</SOW>
<TransactionLog><JournalDirectory>./journal</JournalDirectory><FlushInterval>1s</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>quotes</Name><MessageType>json</MessageType></Topic>
</TransactionLog></AMPSConfig>"""


@pytest.fixture(autouse=True)
def _cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.xml").write_text(CONFIG)


def open_broker(tmp_path: Path) -> Broker:
    return build_broker(load_config(tmp_path / "config.xml"))


def close(broker: Broker) -> None:
    trio.run(broker.aclose)


def run_and_crash(tmp_path: Path, body: str) -> None:
    """Run ``body`` (``b`` is a Broker over the test's config, ``pub(topic, id, v, **header)`` publishes) in a
    child process that then SIGKILLs itself."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import json, os, signal, sys
        sys.path[:0] = {path!r}
        from broker.config import load_config
        from broker.server.kernel import Broker, build_broker
        from engine_fakes import Client
        b = build_broker(load_config("config.xml"))
        client = Client(b)
        def pub(topic, id, v, **header):
            return b.engine.publish(client, {{"topic": topic, **header}}, json.dumps({{"id": id, "v": v}}).encode())
    """).format(path=sys.path) + textwrap.dedent(body) + "\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def journal_state(tmp_path: Path, topic: str) -> dict[str, tuple[bytes, int, int]]:
    """A fresh replay of the journal: key -> (data, sequence, expiration) of what it leaves in ``topic``."""
    state: dict[str, tuple[bytes, int, int]] = {}
    reader = JournalReader(tmp_path / "journal", instance_name="recovery-test")
    for rec in reader.records(ReplayStart.epoch()):
        if rec.topic != topic or not rec.sow_key:
            continue
        if rec.command in (Command.PUBLISH, Command.DELTA_PUBLISH):
            state[rec.sow_key.decode()] = (rec.data, rec.sequence, rec.expiration_ns)
        else:
            state.pop(rec.sow_key.decode(), None)
    return state


def sow_state(broker: Broker, topic: str) -> dict[str, tuple[bytes, int, int]]:
    out = {}
    for key, value in broker.engine.sow_topics[topic].storage.scan():
        rec = SowRecord.decode(key.decode(), value)
        assert rec.bookmark == broker.durability.journal.bookmark(rec.sequence)
        out[rec.key] = (rec.data, rec.sequence, rec.expire_at_ns)
    return out


def leveldb_sequences(path: Path) -> dict[bytes, int]:
    db = plyvel.DB(str(path))
    try:
        return {k: SowRecord.peek_sequence(v) for k, v in db}
    finally:
        db.close()


def test_applied_but_not_durable_is_rolled_back_and_its_bookmarks_never_reused(tmp_path: Path) -> None:
    run_and_crash(tmp_path, """
        for i in range(10):
            pub("orders", i, 1)
        b.durability.journal.sync()                         # durable: ids 0-9 v1
        pub("orders", 3, 0)
        b.engine.sow_delete(client, {"topic": "orders", "filter": "/id = 3"}, b"")
        b.durability.journal.sync()                         # durable: id 3 deleted
        for i in range(5):
            pub("orders", i, 2)                  # updates, applied to the SOW only
        for i in range(10, 15):
            pub("orders", i, 2)                  # inserts, applied to the SOW only
    """)
    before = leveldb_sequences(tmp_path / "sow" / "orders.sow")
    expected = journal_state(tmp_path, "orders")
    assert len(before) == 15 and len(expected) == 9 and max(before.values()) > max(s for _d, s, _e in expected.values())
    # A second crash right after recovery: the bookmarks seen before the first one must still never come back.
    run_and_crash(tmp_path, "assert b.recovery.rolled_back == {'orders': 10}, b.recovery\n")
    broker = open_broker(tmp_path)
    try:
        report = broker.recovery
        assert report is not None and not report.clean and report.journal_scanned
        assert report.rolled_back == {"orders": 0} and report.caught_up == {"orders": 0}
        assert sow_state(broker, "orders") == expected
        outcome = broker.engine.publish(Client(broker), {"topic": "orders"}, b'{"id": 20, "v": 3}')
        assert outcome.sequence > max(before.values())
    finally:
        close(broker)


def test_sow_behind_its_journal_is_caught_up(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    client = Client(broker)
    for i in range(20):
        broker.engine.publish(client, {"topic": "orders"}, json.dumps({"id": i, "v": 1}).encode())
    old = {k: v for k, v in broker.engine.sow_topics["orders"].storage.scan()}
    for i in range(5):
        broker.engine.publish(client, {"topic": "orders"}, json.dumps({"id": i, "v": 2}).encode())
    broker.engine.sow_delete(client, {"topic": "orders", "sow_keys": ",".join(
        r.key for r, _m in broker.engine.sow_topics["orders"].query(
            broker.engine.sow_topics["orders"].storage.snapshot(), predicate=broker.engine.compile_filter("/id >= 18")))},
        b"")
    close(broker)
    expected = journal_state(tmp_path, "orders")
    assert len(expected) == 18
    # A power cut lost LevelDB's last writes: two updates, the delete, and one insert never reached the disk.
    db = plyvel.DB(str(tmp_path / "sow" / "orders.sow"))
    by_id = {json.loads(SowRecord.decode(k.decode(), v).data)["id"]: k for k, v in old.items()}
    for i in (0, 1, 18):  # updates of 0 and 1 lost, the delete of 18 lost
        db.put(by_id[i], old[by_id[i]])
    db.delete(by_id[10])  # a record that was in place before the lost writes (a lost insert)
    db.close()
    write_state(state_path(broker_journal_stub(tmp_path)), RecoveryState(clean=False))
    broker = open_broker(tmp_path)
    try:
        report = broker.recovery
        assert report is not None and report.journal_scanned
        assert report.caught_up == {"orders": 4} and report.rolled_back == {"orders": 0}
        assert sow_state(broker, "orders") == expected
    finally:
        close(broker)


def broker_journal_stub(tmp_path: Path) -> Any:
    class Stub:
        journal_directory = tmp_path / "journal"
        instance = "recovery-test"

    return Stub()


def test_clean_restart_reads_no_journal_and_the_state_file_says_so(tmp_path: Path) -> None:
    # Without a logged transient topic (which is rebuilt from the journal at every start).
    config = tmp_path / "config.xml"
    config.write_text(config.read_text().replace(
        "<Topic><Name>quotes</Name><MessageType>json</MessageType></Topic>", ""))
    broker = open_broker(tmp_path)
    client = Client(broker)
    for i in range(10):
        broker.engine.publish(client, {"topic": "orders"}, json.dumps({"id": i}).encode())
    path = state_path(broker.durability.journal)
    assert read_state(path) == RecoveryState(clean=False, last_sequence=0, sequence_floor=0)  # while running
    close(broker)
    state = read_state(path)
    assert state is not None and state.clean and state.last_sequence == 10
    broker = open_broker(tmp_path)
    try:
        report = broker.recovery
        assert report is not None and report.clean and not report.journal_scanned and report.records_replayed == 0
        assert broker.engine.sow_topics["orders"].count() == 10
        assert read_state(path) == RecoveryState(clean=False, last_sequence=0, sequence_floor=10)
    finally:
        close(broker)


def test_rebuilt_sow_expires_records_on_time(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    client = Client(broker)
    now = time.time_ns()
    broker.engine.publish(client, {"topic": "quotes", "expiration": "0.3"}, b'{"id": 1}')
    broker.engine.publish(client, {"topic": "quotes", "expiration": "60"}, b'{"id": 2}')
    broker.engine.publish(client, {"topic": "quotes"}, b'{"id": 3}')
    close(broker)
    time.sleep(0.4)
    broker = open_broker(tmp_path)  # quotes is transient: rebuilt from the journal
    try:
        quotes = broker.engine.sow_topics["quotes"]
        assert quotes.count() == 3
        expiring = {json.loads(r.data)["id"]: r.expire_at_ns for r, _m in quotes.query(quotes.storage.snapshot())}
        assert expiring[3] == 0 and now + 60e9 <= expiring[2] <= time.time_ns() + 60e9 and expiring[1] < time.time_ns()
        assert broker.engine.next_expiry_ns() == expiring[1]
        assert broker.engine.expire() == 1  # already past its time at start-up: expires at the first sweep
        assert quotes.count() == 2 and broker.engine.next_expiry_ns() == expiring[2]
        broker.durability.journal.sync()
        expires = [r for r in JournalReader(tmp_path / "journal", instance_name="recovery-test").records(
            ReplayStart.epoch()) if r.command == Command.EXPIRE]
        assert len(expires) == 1 and expires[0].topic == "quotes"
    finally:
        close(broker)
    broker = open_broker(tmp_path)
    try:
        assert {json.loads(r.data)["id"] for r, _m in broker.engine.sow_topics["quotes"].query(
            broker.engine.sow_topics["quotes"].storage.snapshot())} == {2, 3}
    finally:
        close(broker)


def test_unlogged_topic_and_removed_journal_keep_the_sow(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = open_broker(tmp_path)
    client = Client(broker)
    for i in range(5):
        broker.engine.publish(client, {"topic": "orders"}, json.dumps({"id": i}).encode())
        broker.engine.publish(client, {"topic": "plain"}, json.dumps({"id": i}).encode())
    close(broker)
    for f in (tmp_path / "journal").iterdir():
        f.unlink()
    broker = open_broker(tmp_path)
    try:
        assert broker.engine.sow_topics["orders"].count() == 5 and broker.engine.sow_topics["plain"].count() == 5
        assert "journal removed?" in caplog.text
        assert broker.engine.publish(client, {"topic": "orders"}, b'{"id": 9}').sequence == 6
    finally:
        close(broker)


def test_a_second_broker_on_the_same_data_is_refused_by_the_journal_lock_first(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    try:
        with pytest.raises(JournalError) as info:
            open_broker(tmp_path)  # the journal is opened (and locked) before any SOW store
        text = str(info.value)
        assert "another broker" in text and "journal.lock" in text
    finally:
        close(broker)


def test_sow_after_write_fault_point_leaves_a_sow_ahead_of_its_journal(tmp_path: Path) -> None:
    script = tmp_path / "fault.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = {sys.path!r}
        from broker.config import load_config
        from broker.server.kernel import Broker, build_broker
        from engine_fakes import Client
        b = build_broker(load_config("config.xml"))
        c = Client(b)
        for i in range(10):
            b.engine.publish(c, {{"topic": "orders"}}, ('{{"id": %d}}' % i).encode())
    """))
    env = {**os.environ, "BROKER_FAULT": "sow-after-write", "BROKER_FAULT_AFTER": "6"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert len(leveldb_sequences(tmp_path / "sow" / "orders.sow")) == 7  # killed right after the 7th upsert
    broker = open_broker(tmp_path)
    try:
        assert broker.recovery is not None and broker.recovery.rolled_back == {"orders": 7}
        assert broker.engine.sow_topics["orders"].count() == 0
        # Above the sequences reserved before the kill (the first block), not only above the SOW's 7.
        assert broker.engine.publish(Client(broker), {"topic": "orders"}, b'{"id": 1}').sequence == DEFAULT_BLOCK + 1
    finally:
        close(broker)
