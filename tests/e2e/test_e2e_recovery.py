"""Start-up recovery with a real broker and the official client (issue 13): a broker killed right after a SOW
write (``sow-after-write`` fault point, no client re-send) comes back with its SOW equal to the replay of its
journal and hands out no bookmark a SOW record carried; a SOW rebuilt from the journal expires per-message
expirations on time (query and OOF); a clean restart reads no journal; while a SOW is rebuilt the Admin port
shows the progress and the client port stays closed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import AMPS
import plyvel
import pytest

from broker.sow.record import SowRecord
from broker.testing.admin import fresh_get
from broker.testing.process import BrokerProcess, wait_for_port

TXLOG = """
<JournalDirectory>./journal</JournalDirectory>
<FlushInterval>1s</FlushInterval>
<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
<Topic><Name>quotes</Name><MessageType>json</MessageType></Topic>
"""
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>
<Topic><Name>quotes</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability>
  <Expiration>enabled</Expiration></Topic>"""


def journal_sow(directory: Path, topic: str) -> dict[str, tuple[str, int]]:
    """A fresh replay of the journal (``broker journal dump``): key -> (data, sequence) left in ``topic``."""
    out = subprocess.run([sys.executable, "-m", "broker", "journal", "dump", str(directory), "--topic", topic],
                         capture_output=True, text=True, check=True).stdout
    state: dict[str, tuple[str, int]] = {}
    for line in out.splitlines():
        rec = json.loads(line)
        if rec["command"] in ("publish", "delta_publish"):
            state[rec["sow_key"]] = (rec["data"], rec["sequence"])
        else:
            state.pop(rec["sow_key"], None)
    return state


def sow_rows(client: AMPS.Client, topic: str) -> dict[str, tuple[str, int]]:
    return {m.get_sow_key(): (m.get_data(), int(m.get_bookmark().split("|")[1]))
            for m in client.sow(topic, batch_size=100) if m.get_command() == "sow"}


def test_kill_after_sow_write_rolls_back_and_reuses_no_bookmark(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    b = BrokerProcess.from_xml(tmp_path, sow=SOW, transaction_log=TXLOG)
    with monkeypatch.context() as env:  # the broker inherits the environment: armed for this run only
        env.setenv("BROKER_FAULT", "sow-after-write")
        env.setenv("BROKER_FAULT_AFTER", "29")
        b.start()
    try:
        pub = AMPS.Client("pub-no-store")
        pub.connect(b.uri)
        pub.logon()
        for i in range(20):
            pub.publish("orders", json.dumps({"id": i, "v": 1}))
        pub.publish_flush(5000)
        time.sleep(2.5)  # durable (FlushInterval 1s)
        for i in list(range(5)) + list(range(20, 25)):  # the 30th publish kills the broker after its SOW write
            pub.publish("orders", json.dumps({"id": i, "v": 2}))
        assert b.proc is not None and b.proc.wait(10) == -9
    finally:
        b.kill()
    db = plyvel.DB(str(tmp_path / "sow" / "orders.sow"))
    seen = max(SowRecord.peek_sequence(v) for _k, v in db)
    ahead = sum(1 for _k, v in db if json.loads(SowRecord.decode("", v).data)["v"] == 2)
    db.close()
    assert ahead == 10  # every update and insert reached the SOW, none the disk of the journal
    b.start()
    try:
        reader = AMPS.Client("reader")
        reader.connect(b.uri)
        reader.logon()
        expected = journal_sow(tmp_path / "journal", "orders")
        assert len(expected) == 20 and sow_rows(reader, "orders") == expected
        assert "rolled back 10 records" in b.log()
        reader.publish("orders", json.dumps({"id": 99}))
        reader.publish_flush(5000)
        rows = sow_rows(reader, "orders")
        assert min(seq for data, seq in rows.values() if '"id": 99' in data) > seen
        reader.close()
    finally:
        b.stop()


def test_rebuilt_sow_expires_on_time_and_clean_restart_reads_no_journal(tmp_path: Path) -> None:
    b = BrokerProcess.from_xml(tmp_path, sow=SOW, transaction_log=TXLOG).start()
    try:
        pub = AMPS.Client("pub")
        pub.connect(b.uri)
        pub.logon()
        pub.publish("quotes", json.dumps({"id": 1}), expiration=6)
        pub.publish("quotes", json.dumps({"id": 2}))
        pub.publish("orders", json.dumps({"id": 1}))
        pub.publish_flush(5000)
        published = time.monotonic()
        pub.close()
        assert b.stop() == 0
        b.start()  # quotes is transient: rebuilt from the journal, with its expiration
        assert "clean shutdown, the journal is not read" not in b.log()  # the transient topic needs the journal
        client = AMPS.Client("sub")
        client.connect(b.uri)
        client.logon()
        assert sorted(json.loads(d)["id"] for d, _s in sow_rows(client, "quotes").values()) == [1, 2]
        got: list[tuple[str, str, str]] = []
        cmd = AMPS.Command("sow_and_subscribe").set_topic("quotes").set_options("oof")
        client.execute_async(cmd, lambda m: got.append((m.get_command(), m.get_reason(), m.get_data())))
        deadline = published + 6
        while time.monotonic() < deadline - 0.5:
            assert not [g for g in got if g[0] == "oof"]
            time.sleep(0.2)
        while time.monotonic() < deadline + 5 and not [g for g in got if g[0] == "oof"]:
            time.sleep(0.1)
        assert time.monotonic() >= deadline - 0.5
        assert [(c, r, json.loads(d)["id"]) for c, r, d in got if c == "oof"] == [("oof", "expired", 1)]
        assert [json.loads(d)["id"] for d, _s in sow_rows(client, "quotes").values()] == [2]
        client.close()
    finally:
        b.stop()
    # Without the transient topic logged, a clean restart does not read the journal at all.
    b.config_path.write_text(b.config_path.read_text().replace(
        "<Topic><Name>quotes</Name><MessageType>json</MessageType></Topic>", ""))
    b.start()
    try:
        assert b.log().count("SOW recovery: clean shutdown, the journal is not read") == 1  # this start only
        reader = AMPS.Client("reader2")
        reader.connect(b.uri)
        reader.logon()
        assert [json.loads(d)["id"] for d, _s in sow_rows(reader, "orders").values()] == [1]
        reader.close()
    finally:
        b.stop()


def metric(admin_port: int, name: str) -> float:
    """One unlabelled series from a statistics sample taken after the call."""
    for line in fresh_get(admin_port)[1].decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


@pytest.mark.slow
def test_the_admin_port_shows_recovery_progress_before_the_client_port_opens(tmp_path: Path) -> None:
    """A SOW rebuilt from a long journal: while it is rebuilt (held mid-replay by the ``recovery-mid-replay``
    hold point, so the moment cannot pass unseen) the Admin port answers with the progress and the client port
    refuses connections; released, the client port opens on the whole SOW."""
    records = 20_000
    b = BrokerProcess.from_xml(tmp_path, admin=True, sow=SOW, transaction_log=TXLOG).start()
    assert b.admin_port is not None
    try:
        pub = AMPS.Client("pub")
        pub.connect(b.uri)
        pub.logon()
        for i in range(records):
            pub.publish("quotes", json.dumps({"id": i, "v": "x" * 20}))
        pub.publish_flush(60_000)
        pub.close()
    finally:
        assert b.stop() == 0
    release = tmp_path / "release-recovery"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BROKER_HOLD": "recovery-mid-replay",
           "BROKER_HOLD_FILE": str(release)}
    with open(b.log_path, "ab") as log:  # quotes is transient: this start rebuilds it from the journal
        b.proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(b.config_path)], cwd=b.cwd,
                                  stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_port(b.admin_port, 60, b.proc)
        while metric(b.admin_port, "broker_recovery_records_read") == 0:  # the hold point reports first
            pass
        assert metric(b.admin_port, "broker_recovery_in_progress") == 1
        assert 0 < metric(b.admin_port, "broker_recovery_progress_ratio") < 1
        tree = json.loads(fresh_get(b.admin_port, "/amps/instance.json")[1])["amps"]["instance"]["recovery"]
        assert tree["in_progress"] == "1" and int(tree["records_read"]) >= 4096, tree
        with pytest.raises(ConnectionRefusedError):  # AMPS accepts no client before recovery ends
            socket.create_connection(("127.0.0.1", b.port), timeout=5).close()
        release.touch()
        wait_for_port(b.port, 120, b.proc)
        assert metric(b.admin_port, "broker_recovery_in_progress") == 0
        assert metric(b.admin_port, "broker_recovery_progress_ratio") == 1
        assert metric(b.admin_port, "broker_recovery_records_read") >= records
        reader = AMPS.Client("reader")
        reader.connect(b.uri)
        reader.logon()
        assert sorted(json.loads(d)["id"] for d, _s in sow_rows(reader, "quotes").values()) == list(range(records))
        reader.close()
        assert "SOW topic quotes: rebuilt 20000 records" in b.log()
    finally:
        b.stop()
