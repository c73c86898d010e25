"""Journal actions on a schedule while publishers publish, seen through the official client (issue 12,
acceptance 1).

Journals rotate at the 10MB floor; ~100 KB messages fill a file every ~100 messages. An
``amps-action-on-schedule`` archives then compresses sealed journals every second while a publisher keeps
publishing: a bookmark replay from EPOCH still returns every message once and in order, before and after
a restart, and ``broker journal dump`` reads the archived, compressed files. A scheduled remove-journal
leaves a contiguous tail of the log, the SOW intact, and a replay from EPOCH starts where the tail begins.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import AMPS
import pytest

from broker.testing.process import BrokerProcess
from broker.txlog import FileState, JournalReader, list_files
from broker.txlog.cli import dump

PAD = "x" * 100_000
TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <JournalArchiveDirectory>./archive</JournalArchiveDirectory>
  <JournalSize>10MB</JournalSize><PreallocatedJournalFiles>1</PreallocatedJournalFiles>
  <FlushInterval>10ms</FlushInterval>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""


def _every_second(*steps: str) -> str:
    dos = "".join(f"<Do><Module>amps-action-do-{step}-journal</Module><Options><Age>0s</Age></Options></Do>"
                  for step in steps)
    return (f"<Actions><Action><On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every>"
            f"<Name>journals</Name></Options></On>{dos}</Action></Actions>")


def _publish(client: AMPS.Client, topic: str, count: int, *, ids: int | None = None, pause: float = 0.0) -> None:
    for n in range(count):
        body = {"n": n, "pad": PAD} if ids is None else {"id": n % ids, "n": n, "pad": PAD}
        client.publish(topic, json.dumps(body))
        if pause and n % 20 == 19:
            client.publish_flush(5000)
            time.sleep(pause)  # let the action run between rotations
    client.publish_flush(10_000)


def _subscribe(client: AMPS.Client, topic: str, make_collector: Callable):  # noqa: ANN202 - Collector
    """A bookmark subscription from EPOCH with a completed ack; returns its collector."""
    got = make_collector()
    client.execute_async(AMPS.Command("subscribe").set_topic(topic).set_bookmark("0")
                         .add_ack_type("completed"), got)
    got.wait_for(1, timeout=30, command="ack")
    return got


def _replay(client: AMPS.Client, topic: str, expect: int, make_collector: Callable) -> list[dict]:
    """Replay from EPOCH until the completed ack, which follows every replayed message (so a duplicate
    would show); ``expect`` is how many to wait for first."""
    got = _subscribe(client, topic, make_collector)
    got.wait_for(expect, timeout=30, command="publish")
    deadline = time.monotonic() + 30
    while not any(m["command"] == "ack" and m["ack_type"] == "completed" for m in got.messages):
        assert time.monotonic() < deadline, "the replay never completed"
        time.sleep(0.02)
    return [m for m in got.messages if m["command"] == "publish"]


def _numbers(messages: list[dict]) -> list[int]:
    return [json.loads(m["data"])["n"] for m in messages]


def _files(directory: Path) -> list:
    return list_files(directory / "journal", directory / "archive", "test-broker")


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_archive_and_compress_while_publishing_keep_every_message(
        tmp_path: Path, broker_factory: Callable[..., BrokerProcess], client_factory: Callable,
        make_collector: Callable) -> None:
    broker = broker_factory(transaction_log=TXLOG, extra=_every_second("archive", "compress"))
    total = 450
    publisher = threading.Thread(target=_publish, args=(client_factory(broker.uri), "events", total),
                                 kwargs={"pause": 0.25})
    publisher.start()
    # A subscriber from EPOCH that replays, then goes live, while files are archived and compressed.
    early = _subscribe(client_factory(broker.uri), "events", make_collector)
    publisher.join()
    _wait(lambda: len([f for f in _files(tmp_path) if f.state is FileState.COMPRESSED and f.archived]) >= 3,
          "three archived, compressed journals")
    assert FileState.CURRENT in {f.state for f in _files(tmp_path)}
    early.wait_for(total, timeout=30, command="publish")
    assert _numbers([m for m in early.messages if m["command"] == "publish"]) == list(range(total))

    messages = _replay(client_factory(broker.uri), "events", total, make_collector)
    assert _numbers(messages) == list(range(total))  # every message once, in order
    sequences = [int(m["bookmark"].split("|")[1]) for m in messages]
    assert sequences == sorted(set(sequences))

    broker.stop()
    broker.start()
    after = _replay(client_factory(broker.uri), "events", total, make_collector)
    assert _numbers(after) == list(range(total))
    assert [m["bookmark"] for m in after] == [m["bookmark"] for m in messages]

    out = io.StringIO()
    dump([tmp_path / "journal", tmp_path / "archive"], out=out, err=None)
    dumped = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [json.loads(d["data"])["n"] for d in dumped if d["topic"] == "events"] == list(range(total))


def test_remove_journal_leaves_a_tail_and_the_sow(tmp_path: Path, broker_factory: Callable[..., BrokerProcess],
                                                  client_factory: Callable, make_collector: Callable) -> None:
    broker = broker_factory(sow=SOW, transaction_log=TXLOG, extra=_every_second("remove"))
    total, ids = 400, 50
    _publish(client_factory(broker.uri), "orders", total, ids=ids, pause=0.25)

    def settled() -> bool:  # the oldest files are gone and a further run removes nothing more
        before = [f.index for f in _files(tmp_path)]
        time.sleep(1.5)
        return before[0] > 0 and before == [f.index for f in _files(tmp_path)]

    _wait(settled, "journal files removed")
    files = _files(tmp_path)
    indexes = [f.index for f in files]
    assert indexes[0] >= 3  # several files were written, then removed from the oldest end
    assert indexes == list(range(indexes[0], indexes[0] + len(indexes)))  # contiguous
    assert files[-1].state is FileState.CURRENT  # PreallocatedJournalFiles 1: none ahead of it
    first_left = next(JournalReader.from_files([files[0]]).records()).sequence

    client = client_factory(broker.uri)
    sow = {json.loads(m.get_data())["id"]: json.loads(m.get_data())["n"]
           for m in client.sow("orders", timeout=10_000) if m.get_command() == "sow"}
    assert sow == {i: total - ids + i for i in range(ids)}  # every record, at its last update

    messages = _replay(client, "orders", total - first_left + 1, make_collector)
    assert _numbers(messages) == list(range(first_left - 1, total))  # the replay starts where the tail begins
    assert int(messages[0]["bookmark"].split("|")[1]) == first_left


def test_kill_9_while_journals_are_archived_and_compressed(
        tmp_path: Path, broker_factory: Callable[..., BrokerProcess], client_factory: Callable,
        make_collector: Callable) -> None:
    broker = broker_factory(transaction_log=TXLOG, extra=_every_second("archive", "compress"))
    total = 300
    _publish(client_factory(broker.uri), "events", total)  # flushed: every message is persisted
    # Kill while the action works through the files just sealed (a copy may be half written).
    _wait(lambda: any(f.archived for f in _files(tmp_path)), "a journal archived", timeout=10)
    broker.kill()
    broker.start()
    assert _numbers(_replay(client_factory(broker.uri), "events", total, make_collector)) == list(range(total))
    _wait(lambda: sum(f.compressed for f in _files(tmp_path)) >= 2, "the rest compressed after the restart")
    assert _numbers(_replay(client_factory(broker.uri), "events", total, make_collector)) == list(range(total))
