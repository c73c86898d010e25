"""The durability metrics of issue 13 in a real broker's ``/metrics`` (and ``/amps.json``): documented names,
types, labels and HELP text (docs/metrics.md), zero on a healthy journal, and the damage counters' exact
values after a start with ``<DamagedRecords>skip`` (each damaged range counted once, replays included)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import AMPS
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.process import BrokerProcess
from broker.txlog.records import decode

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
TXLOG = """<JournalDirectory>./journal</JournalDirectory><FlushInterval>10ms</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""

#: name -> (type, label names, phrases its HELP text and its docs/metrics.md row both carry, in any case).
DURABILITY = {
    "broker_journal_disk_full": ("gauge", set(), [
        "1 while the transaction log cannot be written because its disk is full", "else 0",
        "Publishes to logged topics are refused", "resumes by itself"]),
    "broker_publishes_refused_total": ("counter", {"reason"}, [
        "Publishes (and SOW deletes) refused with a failure ack and applied to nothing, by reason",
        "journal_full (the transaction log's disk is full", "storage_failed (the SOW storage failed to write"]),
    "broker_journal_damaged_records_total": ("counter", set(), [
        "Damaged transaction log records met (at start-up or by replays)."]),
    "broker_journal_damaged_bytes_total": ("counter", set(), [
        "Bytes of the damaged transaction log records met."]),
    "broker_replay_failures_total": ("counter", set(), [
        "Bookmark replays ended by a transaction log problem", "the client got a failure notice and stayed connected"]),
}


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator:
    started: list[BrokerProcess] = []

    def make(**sections: str) -> BrokerProcess:
        proc = BrokerProcess.from_xml(tmp_path, admin=True, **sections).start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


def families(port: int) -> dict:
    """``/metrics`` parsed: family name (as users type it, counters with ``_total``) -> family."""
    text = fresh_get(port, "/metrics")[1].decode()  # a sample taken after the call
    return {f.name + ("_total" if f.type == "counter" else ""): f for f in text_string_to_metric_families(text)}


def amps_journal(port: int) -> dict[str, str]:
    body = fresh_get(port, "/amps/instance/transaction_log.json")[1]
    return json.loads(body)["amps"]["instance"]["transaction_log"]


def doc_row(name: str) -> tuple[str, str]:
    """``(type, help)`` of ``name`` in docs/metrics.md, backticks removed."""
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith(f"| `{name}` |"))
    cells = [cell.strip().replace("`", "") for cell in row.split("|")]
    return cells[2], cells[4]


def test_durability_metrics_are_scraped_with_their_documented_names_types_and_help(make_broker) -> None:
    broker = make_broker(transaction_log=TXLOG, sow=SOW)
    scraped = families(broker.admin_port)
    for name, (kind, labels, phrases) in DURABILITY.items():
        assert name in scraped, f"{name} is not in /metrics"
        family = scraped[name]
        doc_type, doc_help = doc_row(name)
        assert family.type == kind == doc_type, (name, family.type, doc_type)
        for phrase in phrases:
            assert phrase.lower() in family.documentation.lower(), f"{name} HELP lacks {phrase!r}: {family.documentation!r}"
            assert phrase.lower() in doc_help.lower(), f"docs/metrics.md row of {name} lacks {phrase!r}"
        values = [s for s in family.samples if not s.name.endswith("_created")]
        assert {key for s in values for key in s.labels} == labels, (name, values)
        assert all(s.value == 0 for s in values), (name, values)  # a healthy journal on a roomy disk
    refused = {s.labels["reason"] for s in scraped["broker_publishes_refused_total"].samples}
    assert refused == {"journal_full", "storage_failed"}  # both series exist before anything is refused
    tree = amps_journal(broker.admin_port)
    assert {k: tree[k] for k in ("disk_full", "damaged_records", "damaged_bytes", "replay_failures")} == {
        "disk_full": "0", "damaged_records": "0", "damaged_bytes": "0", "replay_failures": "0"}


def test_without_a_journal_only_the_refusal_counter_is_there(make_broker) -> None:
    scraped = families(make_broker(sow=SOW).admin_port)
    assert "broker_publishes_refused_total" in scraped
    assert not {name for name in DURABILITY if name != "broker_publishes_refused_total"} & set(scraped)


def test_damage_skipped_at_start_is_counted_once_with_its_bytes(make_broker, tmp_path: Path) -> None:
    broker = make_broker(transaction_log=TXLOG, sow=SOW)
    client = AMPS.Client("damage-pub")
    client.connect(broker.uri)
    client.logon(5000)
    for n in range(30):
        client.publish("orders", json.dumps({"id": n, "pad": "z" * 500}))
    client.publish_flush(5000)
    client.close()
    assert broker.stop() == 0
    (journal,) = [p for p in (tmp_path / "journal").glob("*.journal") if p.stat().st_size]
    raw = bytearray(journal.read_bytes())
    offset = 0
    for _ in range(15):  # to the 16th record
        offset = decode(raw, offset)[1]
    length = decode(raw, offset)[1] - offset
    raw[offset + length - 100] ^= 0xFF  # in its data
    journal.write_bytes(bytes(raw))
    config = broker.config_path.read_text()
    broker.config_path.write_text(
        config.replace("</JournalDirectory>", "</JournalDirectory><DamagedRecords>skip</DamagedRecords>"))

    broker.start()
    expected = {"broker_journal_damaged_records_total": 1, "broker_journal_damaged_bytes_total": length,
                "broker_replay_failures_total": 0, "broker_journal_disk_full": 0}

    def values() -> dict[str, float]:
        scraped = families(broker.admin_port)
        return {name: scraped[name].samples[0].value for name in expected}

    assert values() == expected
    # A replay from EPOCH passes over the same range (skip): not counted again, and not a failure.
    reader = AMPS.Client("damage-reader")
    reader.connect(broker.uri)
    reader.logon(5000)
    got: list[str] = []
    done = threading.Event()

    def handler(m) -> None:  # noqa: ANN001 - AMPS.Message
        got.append(m.get_command())
        if m.get_command() == "ack":
            done.set()

    reader.execute_async(AMPS.Command("subscribe").set_topic("orders").set_bookmark("0").add_ack_type("completed"),
                         handler)
    assert done.wait(10)
    reader.close()
    assert got.count("publish") == 29
    assert values() == expected
    tree = amps_journal(broker.admin_port)
    assert (tree["damaged_records"], tree["damaged_bytes"]) == ("1", str(length))
    assert re.search(r"damaged at offset \d+", broker.log())
