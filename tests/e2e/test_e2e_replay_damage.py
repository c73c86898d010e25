"""Journal damage under a real broker, through the official client (issue 13, acceptance 2).

A flipped byte in a record's data, in the current journal or in an older (sealed) one: the broker refuses to
start with a message naming the file, the offset, the sequences affected and ``broker journal repair``,
nothing is deleted, ``broker journal verify`` exits 1 naming the damage; with ``<DamagedRecords>skip`` (and,
with the default policy, after ``broker journal repair``) it starts and a replay from EPOCH has every record
but the damaged one, in order. Damage a replay meets at run time ends that subscription with an ``oof``
notice (reason ``txn replay failed: ...``) and a failed completed ack; the client stays connected. A cut tail
is cut at start-up and never disconnects readers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import AMPS
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.process import BrokerProcess
from broker.txlog.records import decode

TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <JournalSize>10MB</JournalSize><PreallocatedJournalFiles>1</PreallocatedJournalFiles>
  <FlushInterval>10ms</FlushInterval>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
#: ~100 KB messages: a 10 MB journal file holds about 100 of them.
BIG = "x" * 100_000
REPLAY_FAILED = "txn replay failed"


class Collector:
    """Every message a handler gets, as ``(command, ack_type, status, reason, data)``; waitable."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, str, str, str]] = []
        self._cv = threading.Condition()

    def __call__(self, m: AMPS.Message) -> None:
        with self._cv:
            self.messages.append((m.get_command(), m.get_ack_type(), m.get_status(), m.get_reason(), m.get_data()))
            self._cv.notify_all()

    def wait(self, condition: Callable[[list], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not condition(self.messages):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def numbers(self) -> list[int]:
        with self._cv:
            return [json.loads(data)["n"] for command, _, _, _, data in self.messages if command == "publish"]

    def of(self, command: str, ack_type: str | None = None) -> list[tuple[str, str, str, str, str]]:
        with self._cv:
            return [m for m in self.messages if m[0] == command and (ack_type is None or m[1] == ack_type)]


def completed(messages: list) -> bool:
    return any(m[0] == "ack" and m[1] == "completed" for m in messages)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker with the journal above (not started); stopped at the end."""
    proc = BrokerProcess.from_xml(tmp_path, transaction_log=TXLOG, sow=SOW, admin=True)
    yield proc
    proc.stop()


def set_policy(broker: BrokerProcess, policy: str | None) -> None:
    """Write ``<DamagedRecords>policy</DamagedRecords>`` into the broker's config (``None``: the default)."""
    text = re.sub(r"<DamagedRecords>\w+</DamagedRecords>", "", broker.config_path.read_text())
    if policy is not None:
        text = text.replace("</JournalDirectory>", f"</JournalDirectory><DamagedRecords>{policy}</DamagedRecords>")
    broker.config_path.write_text(text)


def publish_numbered(client: AMPS.Client, count: int, pad: str = "", first: int = 0) -> None:
    for n in range(first, first + count):
        client.publish("events", json.dumps({"n": n, "pad": pad}))
    client.publish_flush(20_000)


def journal_files(directory: Path) -> list[Path]:
    return sorted((directory / "journal").glob("test-broker.*.journal"))


def sizes(directory: Path) -> dict[str, int]:
    """Every file of the journal directory and its size."""
    return {p.name: p.stat().st_size for p in (directory / "journal").iterdir()}


def records(path: Path) -> list[tuple[int, int, int, int]]:
    """``(offset, length, sequence, data offset)`` of each record of a journal file."""
    raw = path.read_bytes()
    out, offset = [], 0
    while offset < len(raw):
        rec, end = decode(raw, offset)
        out.append((offset, end - offset, rec.sequence, end - len(rec.data)))
        offset = end
    return out


def flip_in_data(path: Path, sequence: int) -> tuple[int, int]:
    """Flip one byte in the middle of the data of record ``sequence`` in place; ``(record offset, length)``."""
    offset, length, _, data_at = next(r for r in records(path) if r[2] == sequence)
    middle = data_at + (offset + length - data_at) // 2
    with open(path, "r+b") as f:
        f.seek(middle)
        byte = f.read(1)[0]
        f.seek(middle)
        f.write(bytes([byte ^ 0xFF]))
    return offset, length


def serve_once(broker: BrokerProcess) -> subprocess.CompletedProcess[str]:
    """``broker serve`` that is expected to exit by itself (a refused start)."""
    return subprocess.run([sys.executable, "-m", "broker", "serve", str(broker.config_path)], cwd=broker.cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def journal_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", "journal", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def replay(client: AMPS.Client, sub_id: str, topic: str = "events") -> Collector:
    """A bookmark subscription from EPOCH asking for the completed ack."""
    got = Collector()
    client.execute_async(AMPS.Command("subscribe").set_topic(topic).set_sub_id(sub_id).set_bookmark("0")
                         .add_ack_type("completed"), got)
    return got


def scrape(port: int) -> dict[str, float]:
    text = fresh_get(port, "/metrics")[1].decode()  # a statistics sample taken after the call
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if not s.labels}


@pytest.mark.parametrize("where", ["current", "older"])
def test_flipped_byte_refuses_start_until_skipped_or_repaired(
        where: str, broker: BrokerProcess, tmp_path: Path, client_factory: Callable) -> None:
    # "current": 40 small records in one file; "older": 130 ~100 KB records in two files, damage in the first.
    total, pad, damaged_sequence = (40, "", 20) if where == "current" else (130, BIG, 50)
    broker.start()
    publish_numbered(client_factory(broker.uri, "pub-1"), total, pad)
    assert broker.stop() == 0
    files = journal_files(tmp_path)
    assert len(files) == (1 if where == "current" else 2)
    damaged = files[0]
    offset, length = flip_in_data(damaged, damaged_sequence)
    before = sizes(tmp_path)

    # The default policy (stop): the broker refuses to start and says where, what and what to do.
    refused = serve_once(broker)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert damaged.name in output and f"offset {offset}" in output
    assert f"records after sequence {damaged_sequence - 1} and before {damaged_sequence + 1} are affected" in output
    assert "broker journal repair" in output and "broker journal verify" in output
    assert sizes(tmp_path) == before  # nothing was cut or deleted

    verified = journal_cli("verify", str(tmp_path / "journal"), cwd=tmp_path)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"DAMAGED {damaged}" in verified.stdout and f"offset {offset}" in verified.stdout
    assert f"fix: broker journal repair {damaged}" in verified.stdout
    if where == "older":
        assert f"ok {files[1]}" in verified.stdout
    expected = [n for n in range(total) if n != damaged_sequence - 1]  # sequence s holds n = s - 1

    # skip: it starts, logs and counts the damage, keeps every later record, and writes on.
    set_policy(broker, "skip")
    broker.start()
    assert sizes(tmp_path)[damaged.name] == before[damaged.name]
    reader = client_factory(broker.uri, "reader-skip")
    got = replay(reader, "epoch-skip")
    assert got.wait(completed), got.messages
    assert got.numbers() == expected
    metrics = scrape(broker.admin_port)  # type: ignore[arg-type]
    assert metrics["broker_journal_damaged_records_total"] >= 1
    assert metrics["broker_journal_damaged_bytes_total"] >= length
    assert damaged.name in broker.log() and f"offset {offset}" in broker.log()
    publish_numbered(client_factory(broker.uri, "pub-2"), 1, first=total)
    assert got.wait(lambda ms: len([m for m in ms if m[0] == "publish"]) == len(expected) + 1)
    assert got.numbers() == [*expected, total]  # live after the replay
    assert broker.stop() == 0

    # repair, then the default policy again: it starts and nothing but the damaged record is missing.
    set_policy(broker, None)
    size = damaged.stat().st_size  # (the current file grew by the record published with skip)
    repaired = journal_cli("repair", str(damaged), cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    side = damaged.with_name(f"{damaged.name}.damaged-{offset}")
    assert side.stat().st_size == length
    assert damaged.stat().st_size == size - length
    assert journal_cli("verify", str(tmp_path / "journal"), cwd=tmp_path).returncode == 0
    broker.start()
    got = replay(client_factory(broker.uri, "reader-repaired"), "epoch-repaired")
    assert got.wait(completed), got.messages
    assert got.numbers() == [*expected, total]
    assert got.of("ack", "completed")[0][2] == "success"


def damage_behind_the_running_broker(broker: BrokerProcess, tmp_path: Path, client_factory: Callable
                                     ) -> tuple[Path, int]:
    """130 ~100 KB records in two files, then a flipped byte in record 50 of the first (sealed) file while the
    broker runs: its start-up check never saw it. Returns the file and the damaged record's offset."""
    broker.start()
    publish_numbered(client_factory(broker.uri, "pub"), 130, BIG)
    deadline = time.monotonic() + 10
    while scrape(broker.admin_port)["broker_journal_durable_sequence"] < 130:  # type: ignore[arg-type]
        assert time.monotonic() < deadline, "the journal never became durable up to 130"
        time.sleep(0.05)
    files = journal_files(tmp_path)
    assert len(files) == 2
    offset, _ = flip_in_data(files[0], 50)
    return files[0], offset


def replay_to_the_damage(client: AMPS.Client) -> Collector:
    got = replay(client, "epoch")
    assert got.wait(lambda ms: any(m[0] == "oof" for m in ms) and completed(ms)), got.messages
    return got


def test_damage_met_by_a_replay_at_run_time_fails_that_subscription_only(
        broker: BrokerProcess, tmp_path: Path, client_factory: Callable) -> None:
    damaged, offset = damage_behind_the_running_broker(broker, tmp_path, client_factory)
    before = scrape(broker.admin_port)["broker_replay_failures_total"]  # type: ignore[arg-type]
    client = client_factory(broker.uri, "replayer")
    live = Collector()
    client.execute_async(AMPS.Command("subscribe").set_topic("orders").set_sub_id("live"), live)

    got = replay_to_the_damage(client)
    # The notice: an oof routed to the subscription's handler, naming the damage, then the failed completed ack.
    ((_, _, _, reason, _),) = got.of("oof")
    assert reason.startswith(f"{REPLAY_FAILED}:"), reason
    assert damaged.name in reason and f"offset {offset}" in reason
    assert "records after sequence 49 and before 51" in reason
    ((_, _, status, ack_reason, _),) = got.of("ack", "completed")
    assert (status, ack_reason) == ("failure", REPLAY_FAILED)
    kinds = [m[0] for m in got.messages]
    assert kinds[-2:] == ["oof", "ack"]
    delivered = got.numbers()
    assert delivered == list(range(len(delivered))) and len(delivered) <= 49  # in order, nothing past the damage
    assert scrape(broker.admin_port)["broker_replay_failures_total"] == before + 1  # type: ignore[arg-type]

    # The client stays connected: its other subscription gets live messages and its publishes succeed.
    client.publish("orders", json.dumps({"id": 1, "n": 1}))
    client.publish_flush(5000)
    assert live.wait(lambda ms: len(ms) == 1) and json.loads(live.messages[0][4]) == {"id": 1, "n": 1}
    assert [m.get_data() for m in client.sow("orders", timeout=5000) if m.get_command() == "sow"] == [
        '{"id": 1, "n": 1}']
    client.publish("events", json.dumps({"n": 1000}))
    client.publish("orders", json.dumps({"id": 2, "n": 2}))  # a sentinel, after it, to the live subscription
    client.publish_flush(5000)
    assert live.wait(lambda ms: len(ms) == 2)
    assert got.numbers() == delivered  # the failed subscription ended: no live message after the notice
    assert broker.proc is not None and broker.proc.poll() is None


def test_a_replay_delivers_every_record_before_the_damage_then_the_notice(
        broker: BrokerProcess, tmp_path: Path, client_factory: Callable) -> None:
    damage_behind_the_running_broker(broker, tmp_path, client_factory)
    got = replay_to_the_damage(client_factory(broker.uri, "replayer"))
    assert got.numbers() == list(range(49))  # sequences 1-49 (n = sequence - 1); 50 is damaged


def test_a_cut_tail_is_cut_at_start_and_never_disconnects_readers(
        broker: BrokerProcess, tmp_path: Path, client_factory: Callable) -> None:
    broker.start()
    publish_numbered(client_factory(broker.uri, "pub-1"), 40)
    assert broker.stop() == 0
    (current,) = journal_files(tmp_path)
    size = current.stat().st_size
    last_offset = records(current)[-1][0]
    with open(current, "r+b") as f:
        f.truncate(size - 5)

    broker.start()  # the torn tail is cut, not refused
    assert current.stat().st_size == last_offset
    assert "test-broker.0000000000.journal" in broker.log()
    client = client_factory(broker.uri, "reader")
    got = replay(client, "epoch")
    assert got.wait(completed), got.messages
    assert got.numbers() == list(range(39))  # every record but the torn one
    assert got.of("ack", "completed")[0][2] == "success" and got.of("oof") == []
    # Still connected, and the replay went live: a publish after it arrives.
    publish_numbered(client_factory(broker.uri, "pub-2"), 1, first=100)
    assert got.wait(lambda ms: 100 in [json.loads(m[4])["n"] for m in ms if m[0] == "publish"])
    assert got.numbers() == [*range(39), 100]
    client.publish("events", json.dumps({"n": 101}))
    client.publish_flush(5000)
    assert got.wait(lambda ms: len([m for m in ms if m[0] == "publish"]) == 41)
    assert broker.proc is not None and broker.proc.poll() is None
