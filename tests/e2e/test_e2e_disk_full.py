"""A real full disk under a real broker, through the official client (issue 13, acceptance 3).

A 24 MB tmpfs holds the JournalDirectory and the SOW's LevelDB files; a filler file takes most of it. A
publisher storms a logged topic with persisted acks requested, each publish under its own command id (the
client's global ack handler records every ack by id: success, or failure with its reason), until publishes are
refused: with ``tx store failure`` for a journal-only topic (deterministic), or with either documented reason for
the SOW topic (LevelDB may meet the full disk first). The broker stays up, a second client's SOW query and
subscription still work, and ``/metrics`` shows the full disk and the refusals. Once the filler is deleted the
broker resumes by itself, every publish has exactly one persisted ack, new publishes are persisted, and every
success-acked message is in a bookmark replay from EPOCH once (and in the SOW), also after a restart. A disk
full to the last block makes the SOW's write fail first: those refused publishes leave no trace anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import AMPS
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.disk import small_tmpfs
from broker.testing.process import BrokerProcess

TXLOG = """<JournalDirectory>./disk/journal</JournalDirectory>
  <JournalSize>10MB</JournalSize><PreallocatedJournalFiles>1</PreallocatedJournalFiles>
  <FlushInterval>10ms</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>"""
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./disk/sow/%n.sow</FileName></Topic>"""
#: Bytes left free on the tmpfs after the filler: a few hundred publishes' worth.
LEFT_FREE = 1_000_000
PAD = "p" * 1500
#: Bigger than a page: on a disk full to the last block, LevelDB's write of one fails at once.
BIG_PAD = "q" * 9000
#: The storm's bounds.
STORM_MESSAGES = 4000
STORM_SECONDS = 15.0
TX_STORE_FAILURE = "tx store failure"
SOW_STORE_FAILED = "sow store failed"
@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MB tmpfs at ``tmp_path/disk`` (skips when it cannot be mounted); unmounted at the end."""
    with small_tmpfs(tmp_path / "disk", "24m") as mount_point:
        yield mount_point


@pytest.fixture
def broker(tmp_path: Path, disk: Path) -> Iterator[BrokerProcess]:
    """A broker whose journal and SOW live on ``disk``; stopped before the tmpfs is unmounted."""
    proc = BrokerProcess.from_xml(tmp_path, transaction_log=TXLOG, sow=SOW, admin=True).start()
    try:
        yield proc
    finally:
        proc.stop()


class Acks:
    """Every ack a client gets, by command id (the client's global ack handler)."""

    def __init__(self) -> None:
        self.by_id: dict[str, list[tuple[str, str, str]]] = {}
        self._cv = threading.Condition()

    def __call__(self, message: AMPS.Message) -> None:
        with self._cv:
            self.by_id.setdefault(message.get_command_id(), []).append(
                (message.get_ack_type(), message.get_status(), message.get_reason()))
            self._cv.notify_all()

    def persisted(self, cid: str) -> list[tuple[str, str]]:
        """``(status, reason)`` of every persisted ack of ``cid``."""
        with self._cv:
            return [(status, reason) for kind, status, reason in self.by_id.get(cid, []) if kind == "persisted"]

    def failures(self) -> dict[str, str]:
        """Command id -> reason of the persisted acks with ``status=failure``."""
        with self._cv:
            return {cid: reason for cid, acks in self.by_id.items() for kind, status, reason in acks
                    if kind == "persisted" and status == "failure"}

    def successes(self) -> set[str]:
        with self._cv:
            return {cid for cid, acks in self.by_id.items()
                    if any(kind == "persisted" and status == "success" for kind, status, _ in acks)}

    def wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cv:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.2))
        return True


def connect(uri: str, name: str, acks: Acks | None = None) -> AMPS.Client:
    client = AMPS.Client(name)
    if acks is not None:
        client.set_global_command_type_message_handler("ack", acks)
    client.connect(uri)
    client.logon(5000)
    return client


def publish(client: AMPS.Client, n: int, pad: str = PAD, topic: str = "orders") -> str:
    """Publish ``{"id": n}`` with a persisted ack requested under the command id ``m<n>``; returns the id."""
    cid = f"m{n}"
    client.execute_async(AMPS.Command("publish").set_topic(topic).set_command_id(cid).add_ack_type("persisted")
                         .set_data(json.dumps({"id": n, "pad": pad})), None)
    return cid


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = fresh_get(port, "/metrics")[1].decode()  # a statistics sample taken after the call
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def disk_full(port: int) -> float:
    return scrape(port)[("broker_journal_disk_full", ())]


def replay_ids(uri: str, name: str, timeout: float = 20.0) -> list[int]:
    """The ids a bookmark replay of both logged topics from EPOCH delivers before its completed ack."""
    client = connect(uri, name)
    try:
        got: list[tuple[str, str, str]] = []
        done = threading.Event()

        def handler(message: AMPS.Message) -> None:
            got.append((message.get_command(), message.get_data(), message.get_status()))
            if message.get_command() == "ack" and message.get_ack_type() == "completed":
                done.set()

        client.execute_async(AMPS.Command("subscribe").set_topic("^(orders|events)$").set_bookmark("0")
                             .add_ack_type("completed"), handler)
        assert done.wait(timeout), "the replay from EPOCH never completed"
        completed = next(i for i, (command, _, _) in enumerate(got) if command == "ack")
        assert got[completed][2] == "success"
        return [json.loads(data)["id"] for command, data, _ in got[:completed] if command == "publish"]
    finally:
        client.close()


def sow_ids(client: AMPS.Client) -> list[int]:
    return [json.loads(m.get_data())["id"] for m in client.sow("orders", batch_size=500, timeout=20_000)
            if m.get_command() == "sow"]


def ids_of(cids: set[str]) -> list[int]:
    return sorted(int(cid[1:]) for cid in cids)


def fill(disk: Path, leave: int) -> Path:
    """A filler file taking all but ``leave`` bytes of ``disk`` (every last block when ``leave`` is 0)."""
    filler = disk / "filler"
    stats = os.statvfs(disk)
    with open(filler, "wb", buffering=0) as f:
        if leave:
            f.write(b"\0" * (stats.f_bavail * stats.f_frsize - leave))
        else:
            with contextlib.suppress(OSError):  # ENOSPC: full to the last block
                for size in (1 << 20, 4096, 1):
                    while True:
                        f.write(b"\0" * size)
    return filler


def storm(pub: AMPS.Client, acks: Acks, *, pad: str = PAD, first: int = 0, topic: str = "orders",
          journal_full: bool = True) -> list[str]:
    """Publish until a good number of publishes were refused (for a full journal disk when ``journal_full``,
    else for any reason), or the storm's bounds; returns the command ids."""
    sent: list[str] = []

    def enough() -> bool:
        refused = acks.failures()
        return len(refused) >= 100 and (not journal_full or TX_STORE_FAILURE in refused.values())

    stop_at = time.monotonic() + STORM_SECONDS
    while len(sent) < STORM_MESSAGES and time.monotonic() < stop_at:
        sent.append(publish(pub, first + len(sent), pad, topic))
        if len(sent) % 50 == 0 and enough():
            break
    wanted = (lambda: TX_STORE_FAILURE in acks.failures().values()) if journal_full else (lambda: acks.failures())
    assert acks.wait(wanted, 10), f"no refusal ack after {len(sent)} publishes on a full disk: {acks.failures()}"
    return sent


def resume(broker: BrokerProcess, filler: Path, pub: AMPS.Client, acks: Acks, sent: list[str]) -> list[str]:
    """Free the space; wait until the broker resumed and answered every publish; publish until one is persisted
    again (within 15 s), then 20 more (all persisted); returns those publishes' ids."""
    filler.unlink()
    deadline = time.monotonic() + 15
    while disk_full(broker.admin_port) != 0:  # type: ignore[arg-type]
        assert time.monotonic() < deadline, f"still disk full 15 s after space returned\n{broker.log()[-3000:]}"
        time.sleep(0.1)
    assert acks.wait(lambda: all(acks.persisted(cid) for cid in sent), 15), (
        f"{sum(1 for cid in sent if not acks.persisted(cid))} publishes never got a persisted ack")
    assert [cid for cid in sent if len(acks.persisted(cid)) != 1] == []  # one answer each
    # A store that met the full disk may take a back-off before it writes again: probe until a publish is
    # persisted (a refusal meanwhile must carry a documented reason), then 20 in a row must be.
    after: list[str] = []
    while True:
        after.append(publish(pub, len(sent) + len(after)))
        assert acks.wait(lambda: acks.persisted(after[-1]), 10)
        (answer,) = acks.persisted(after[-1])
        if answer == ("success", ""):
            break
        assert answer[1] in (TX_STORE_FAILURE, SOW_STORE_FAILED), answer
        assert time.monotonic() < deadline, f"publishes still refused 15 s after space returned: {answer}"
        time.sleep(0.1)
    more = [publish(pub, n) for n in range(len(sent) + len(after), len(sent) + len(after) + 20)]
    assert acks.wait(lambda: all(acks.persisted(cid) for cid in more), 10)
    assert {cid: acks.persisted(cid) for cid in more} == {cid: [("success", "")] for cid in more}
    after += more
    assert broker.proc is not None and broker.proc.poll() is None
    return after


@pytest.mark.parametrize("topic", ["events", "orders"])
def test_publish_storm_on_a_full_disk_refuses_then_resumes_and_keeps_every_acked_message(
        topic: str, broker: BrokerProcess, disk: Path) -> None:
    """``events`` is logged without a SOW: only the journal writes, so it meets the full disk (deterministic).
    ``orders`` also writes its LevelDB SOW on the same disk, and either store may meet the full disk first:
    refusals then say ``tx store failure`` or ``sow store failed``."""
    began = time.monotonic()
    acks = Acks()
    pub = connect(broker.uri, "storm-publisher", acks)
    reader = connect(broker.uri, "reader")
    try:
        for n in range(5):  # SOW records from before the disk filled
            publish(pub, n)
        assert acks.wait(lambda: len(acks.successes()) == 5, 10)
        filler = fill(disk, LEFT_FREE)
        sent = [f"m{n}" for n in range(5)] + storm(pub, acks, first=5, topic=topic, journal_full=topic == "events")
        storm_cids = sent[5:] if topic == "events" else []
        refused = acks.failures()
        by_reason = Counter(refused.values())
        if topic == "events":
            assert set(by_reason) == {TX_STORE_FAILURE}, refused
        else:  # the journal's full disk, or the SOW storage's when LevelDB met it first: documented reasons
            assert set(by_reason) <= {TX_STORE_FAILURE, SOW_STORE_FAILED}, refused
        assert broker.proc is not None and broker.proc.poll() is None, "the broker died on a full disk"

        # While the disk is full: the metrics say so, reads work, a subscription gets live messages.
        metrics = scrape(broker.admin_port)  # type: ignore[arg-type]
        journal_met_it = TX_STORE_FAILURE in by_reason
        if journal_met_it:  # (LevelDB meeting it first may leave the journal writable: no tx store failure)
            assert metrics[("broker_journal_disk_full", ())] == 1
        assert metrics[("broker_publishes_refused_total", (("reason", "journal_full"),))] >= by_reason[TX_STORE_FAILURE]
        assert metrics[("broker_publishes_refused_total", (("reason", "storage_failed"),))] >= (
            by_reason[SOW_STORE_FAILED])
        assert set(sow_ids(reader)) >= {0, 1, 2, 3, 4} | set(orders_acked(acks, storm_cids))
        live: list[str] = []
        arrived = threading.Event()
        reader.execute_async(AMPS.Command("subscribe").set_topic("chat"),
                             lambda m: (live.append(m.get_data()), arrived.set()))
        pub.publish("chat", json.dumps({"text": "still here"}))  # not logged: not refused
        assert arrived.wait(10) and live == ['{"text": "still here"}']
        assert disk_full(broker.admin_port) == metrics[("broker_journal_disk_full", ())]  # type: ignore[arg-type]

        # Space returns: the broker resumes by itself, answers every publish once, and accepts new ones.
        after = resume(broker, filler, pub, acks, sent)
        success = ids_of(acks.successes())
        failed = ids_of(set(acks.failures()))
        assert not set(success) & set(failed)
        assert len(success) + len(failed) == len(sent) + len(after)
        metrics = scrape(broker.admin_port)  # type: ignore[arg-type]
        refused_total = sum(v for (name, _), v in metrics.items() if name == "broker_publishes_refused_total")
        assert refused_total == len(failed)  # every failure ack is a refused publish, counted once

        # Every success-acked message is there once, in publish order: replay and SOW.
        replayed = replay_ids(broker.uri, "replay-1")
        assert present_once(replayed, success)
        assert set(orders_acked(acks, storm_cids)) <= set(sow_ids(reader))
    finally:
        for client in (pub, reader):
            client.close()

    assert broker.stop() == 0
    broker.start()
    assert present_once(replay_ids(broker.uri, "replay-2"), success)
    again = connect(broker.uri, "reader-2")
    try:
        lost = sorted(set(orders_acked(acks, storm_cids)) - set(sow_ids(again)))
    finally:
        again.close()
    assert time.monotonic() - began < 60
    assert lost == []  # LevelDB's writes after it met the full disk survive the restart too


def orders_acked(acks: Acks, elsewhere: list[str]) -> list[int]:
    """The success-acked ids, but those of ``elsewhere`` (the storm's, when it went to ``events``)."""
    return ids_of(acks.successes() - set(elsewhere))


def present_once(replayed: list[int], acked: list[int]) -> bool:
    """Every acked id is in the replay exactly once, and they come in publish (id) order."""
    counts = Counter(replayed)
    missing_or_twice = {i: counts[i] for i in acked if counts[i] != 1}
    assert not missing_or_twice, f"acked messages missing (0) or repeated: {missing_or_twice}"
    in_order = [i for i in replayed if i in set(acked)]
    assert in_order == sorted(in_order)
    return True


def test_a_full_disk_met_by_the_sow_first_refuses_publishes_that_leave_no_trace(
        broker: BrokerProcess, disk: Path) -> None:
    """The disk full to the last block: the SOW's LevelDB write of the first publish fails before the journal's
    group commit runs, so that publish is refused with ``sow store failed``; the later ones with
    ``tx store failure`` if the journal meets the full disk too. A refused publish is applied to nothing (its
    journal record is taken back): not in a replay, not in the SOW, also after a restart; LevelDB writes again
    once space returns."""
    acks = Acks()
    pub = connect(broker.uri, "sow-first-publisher", acks)
    reader = connect(broker.uri, "sow-first-reader")
    try:
        for n in range(5):
            publish(pub, n)
        assert acks.wait(lambda: len(acks.successes()) == 5, 10)
        filler = fill(disk, 0)
        sent = [f"m{n}" for n in range(5)] + storm(pub, acks, pad=BIG_PAD, first=5, journal_full=False)
        refused = acks.failures()
        assert refused.get("m5") == SOW_STORE_FAILED, refused
        assert set(refused.values()) <= {SOW_STORE_FAILED, TX_STORE_FAILURE}
        after = resume(broker, filler, pub, acks, sent)
        success = ids_of(acks.successes())
        failed = ids_of(set(acks.failures()))
        assert len(success) + len(failed) == len(sent) + len(after)
        assert set(ids_of(set(after[-20:]))) <= set(sow_ids(reader))  # LevelDB writes again
        assert replay_ids(broker.uri, "replay-1") == success
        assert sorted(sow_ids(reader)) == success
    finally:
        for client in (pub, reader):
            client.close()
    assert broker.stop() == 0
    broker.start()
    assert replay_ids(broker.uri, "replay-2") == success
    again = connect(broker.uri, "sow-first-reader-2")
    try:
        assert sorted(sow_ids(again)) == success
    finally:
        again.close()
