"""A restart needs no more free space than the broker needed to keep serving (issue 34).

A broker whose journal and LevelDB SOW share a 20 MB tmpfs is fed publishes with persisted acks (official
client) until the disk is full and publishes are refused with ``tx store failure`` (issue 13's behaviour); it is
then stopped (SIGTERM, or kill -9) and started again on the same, still full, file system. Measured before the
fix: the restart died in LevelDB's open (``No space left on device``): opening a LevelDB replays its log into a
new table, which needs about the log's size free, and the log held up to a memtable's worth (16 MiB) of writes.
Now the storage flushes its memtable into a table while the disk still has room for it (the log stays smaller
than the free space), so the restart starts and every acknowledged message is in a replay from EPOCH and in the
SOW; and when a LevelDB log is still too big for the free space, the start refuses with a message naming the
space it needs (``test_a_start_without_room_for_the_log_names_the_space_it_needs``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import AMPS
import pytest

from broker.testing.disk import small_tmpfs
from broker.testing.process import BrokerProcess

TXLOG = """<JournalDirectory>./disk/journal</JournalDirectory>
  <JournalSize>10MB</JournalSize><PreallocatedJournalFiles>2</PreallocatedJournalFiles>
  <FlushInterval>10ms</FlushInterval>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./disk/sow/%n.sow</FileName></Topic>"""
PAD = "p" * 1500
TX_STORE_FAILURE = "tx store failure"
SOW_STORE_FAILED = "sow store failed"
#: The refusal's wording (plugins/storage/leveldb.py, ``_room_to_open``): the size it needs, and where.
NEEDS = re.compile(r"needs about ([\d.]+) MB free to replay its log .* ([\d.]+) MB are free on ([^\s:]+):")


class Acks:
    """Every persisted ack by command id: ``(status, reason)``."""

    def __init__(self) -> None:
        self.by_id: dict[str, tuple[str, str]] = {}
        self._cv = threading.Condition()

    def __call__(self, message: AMPS.Message) -> None:
        if message.get_ack_type() != "persisted":
            return
        with self._cv:
            assert message.get_command_id() not in self.by_id, "two persisted acks for one publish"
            self.by_id[message.get_command_id()] = (message.get_status(), message.get_reason())
            self._cv.notify_all()

    def successes(self) -> set[int]:
        with self._cv:
            return {int(cid[1:]) for cid, (status, _) in self.by_id.items() if status == "success"}

    def failures(self) -> dict[str, str]:
        with self._cv:
            return {cid: reason for cid, (status, reason) in self.by_id.items() if status == "failure"}

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


def fill_by_publishing(broker: BrokerProcess) -> Acks:
    """Publish ``{"id": n}`` with persisted acks until the full disk refuses them: with ``tx store failure``
    (the journal met it), or ``sow store failed`` (LevelDB met it first: a table it writes did not fit; the
    journal then keeps the rest of the space, and the broker serves on with publishes refused)."""
    acks = Acks()
    pub = connect(broker.uri, "filler", acks)
    sent = 0
    try:
        stop_at = time.monotonic() + 90
        while time.monotonic() < stop_at:
            for _ in range(50):
                pub.execute_async(AMPS.Command("publish").set_topic("orders").set_command_id(f"m{sent}")
                                  .add_ack_type("persisted").set_data(json.dumps({"id": sent, "pad": PAD})), None)
                sent += 1
            if sent % 500 == 0:  # let the acks catch up: the storm ends soon after the first refusals
                acks.wait(lambda sent=sent: len(acks.by_id) >= sent - 1000, 10)
            refused = list(acks.failures().values())
            if refused.count(TX_STORE_FAILURE) >= 50 or len(refused) >= 300:
                break
        # Publishes the journal accepted but cannot make durable on the full disk stay unanswered until space
        # returns (issue 13): they are not acknowledged, so the restart owes them nothing.
        acks.wait(lambda: len(acks.by_id) == sent, 3)
    finally:
        pub.close()
    refused = acks.failures()
    assert refused, f"the disk never filled: {len(acks.successes())} persisted"
    assert set(refused.values()) <= {TX_STORE_FAILURE, SOW_STORE_FAILED}, set(refused.values())
    assert broker.proc is not None and broker.proc.poll() is None, "the broker died on the full disk"
    return acks


def replay_ids(uri: str) -> list[int]:
    """The ids of a bookmark replay of ``orders`` from EPOCH, up to its completed ack."""
    client = connect(uri, "replayer")
    try:
        got: list[int] = []
        done = threading.Event()

        def handler(message: AMPS.Message) -> None:
            if message.get_command() == "publish":
                got.append(json.loads(message.get_data())["id"])
            elif message.get_command() == "ack" and message.get_ack_type() == "completed":
                done.set()

        client.execute_async(AMPS.Command("subscribe").set_topic("orders").set_bookmark("0")
                             .add_ack_type("completed"), handler)
        assert done.wait(60), "the replay from EPOCH never completed"
        return got
    finally:
        client.close()


def sow_ids(uri: str) -> set[int]:
    client = connect(uri, "sow-reader")
    try:
        return {json.loads(m.get_data())["id"] for m in client.sow("orders", batch_size=1000, timeout=60_000)
                if m.get_command() == "sow"}
    finally:
        client.close()


def free_mb(path: Path) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / 1e6


def grow(disk: Path, size: str) -> None:
    """Give the tmpfs more room (what an operator does when told the space a start needs)."""
    done = subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def assert_every_acked_message_is_there(broker: BrokerProcess, acked: set[int]) -> None:
    replayed = replay_ids(broker.uri)
    missing = sorted(acked - set(replayed))
    assert missing == [], f"{len(missing)} acknowledged messages missing from the replay: {missing[:10]}"
    assert len(replayed) == len(set(replayed)), "a message replayed twice"
    lost = sorted(acked - sow_ids(broker.uri))
    assert lost == [], f"{len(lost)} acknowledged messages missing from the SOW: {lost[:10]}"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_a_restart_on_the_disk_the_broker_filled_starts_or_names_the_space_it_needs(
        stop: str, tmp_path: Path) -> None:
    """The restart starts with every acknowledged message (the usual outcome: LevelDB's log was kept small and
    its reserve pays for the replay), or, when LevelDB's writes at the open (a compaction) need more room than
    the disk has, refuses with a message naming the topic, the size it needs, the free space and the mount; the
    disk made bigger (40 MB, the tester's figure), it starts with every acknowledged message. Before the fix
    the restart died with LevelDB's ``No space left on device`` (no size named)."""
    with small_tmpfs(tmp_path / "disk", "20m") as disk:
        broker = BrokerProcess.from_xml(tmp_path, transaction_log=TXLOG, sow=SOW)
        try:
            broker.start()
            acks = fill_by_publishing(broker)
            acked = acks.successes()
            if stop == "sigterm":
                assert broker.stop() == 0
            else:
                broker.kill()
            left = free_mb(disk)
            try:
                broker.start(timeout=120)
                print(f"restarted with {left:.2f} MB free; {len(acked)} acknowledged publishes")
            except RuntimeError as exc:
                text = str(exc)
                print(f"refused with {left:.2f} MB free: {[line for line in text.splitlines() if line.startswith('error:')]}")
                needs = re.search(r"needs about ([\d.]+) MB free to (?:replay its log|write) .* ([\d.]+) MB are free "
                                  r"on ([^\s:]+):", text)
                assert needs, (f"the restart with {left:.2f} MB free on the disk the broker had kept serving on "
                               f"failed without naming the space it needs ({len(acked)} publishes persisted):\n"
                               f"{text[-2500:]}")
                assert float(needs.group(1)) > float(needs.group(2)) and needs.group(3) == str(disk), needs.group(0)
                assert "topic orders" in text and "FileName" in text and "Traceback" not in text
                grow(disk, "40m")
                broker.start(timeout=120)
            assert_every_acked_message_is_there(broker, acked)
        finally:
            broker.stop()


@pytest.mark.timeout(120)
def test_a_start_without_room_for_the_log_names_the_space_it_needs(tmp_path: Path) -> None:
    """A SOW store whose LevelDB log is bigger than the free space, without the open-space reserve (a store from
    before it, or whose disk never had room for it), the disk then filled by another program: the start refuses,
    naming the topic, the size it needs, the free space and the mount, and what to do; once space is freed it
    starts and has every acknowledged message."""
    with small_tmpfs(tmp_path / "disk", "40m") as disk:
        broker = BrokerProcess.from_xml(tmp_path, transaction_log=TXLOG, sow=SOW)
        COUNT = 4000  # noqa: N806
        try:
            broker.start()
            acks = Acks()
            pub = connect(broker.uri, "writer", acks)
            try:
                for n in range(COUNT):  # about 6 MB in LevelDB's log: far below a memtable's 16 MiB
                    pub.execute_async(AMPS.Command("publish").set_topic("orders").set_command_id(f"m{n}")
                                      .add_ack_type("persisted")
                                      .set_data(json.dumps({"id": n, "pad": PAD})), None)
                assert acks.wait(lambda: len(acks.by_id) == COUNT, 30)
            finally:
                pub.close()
            assert acks.failures() == {}
            broker.kill()
            logs = sum(f.stat().st_size for f in (disk / "sow" / "orders.sow").glob("*.log"))
            assert logs > 5_000_000, f"LevelDB's log holds {logs} bytes"
            (disk / "sow" / "orders.sow" / "broker-open-reserve").unlink()
            filler = disk / "filler"
            with open(filler, "wb") as f:  # leave a quarter of the log's size free (and the reserve)
                f.write(b"\0" * int((free_mb(disk) * 1e6) - logs // 4))
            with pytest.raises(RuntimeError) as refused:
                broker.start(timeout=60)
            text = str(refused.value)
            found = NEEDS.search(text)
            assert found, f"the refusal does not name the space it needs:\n{text[-2500:]}"
            needs, free = float(found.group(1)), float(found.group(2))
            assert logs / 1e6 <= needs <= logs / 1e6 + 2, (needs, logs)
            assert free < needs
            assert found.group(3) == str(disk)
            assert "orders" in text and "FileName" in text
            assert "Traceback" not in text
            filler.unlink()
            broker.start()
            assert_every_acked_message_is_there(broker, acks.successes())
        finally:
            broker.stop()
