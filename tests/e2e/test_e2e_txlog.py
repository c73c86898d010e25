"""Transaction log through the official AMPS client: bookmark replay, live cut-over, persisted acks,
restart, kill -9 and SOW rebuild (issue 6, acceptance 1-3)."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import AMPS
import pytest

from broker.testing.process import BrokerProcess

TXLOG = """
<JournalDirectory>./journal</JournalDirectory>
<JournalSize>1MB</JournalSize>
<FlushInterval>10ms</FlushInterval>
<Topic><Name>events</Name><MessageType>json</MessageType></Topic>
<Topic><Name>^events\\..*</Name><MessageType>json</MessageType></Topic>
<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
<Topic><Name>^logged\\..*</Name><MessageType>json</MessageType></Topic>
"""
SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""


@pytest.fixture
def logged(broker_factory) -> BrokerProcess:
    """A broker of its own, for the tests that restart or kill it."""
    return broker_factory(sow=SOW, transaction_log=TXLOG)


@pytest.fixture(scope="module")
def shared_logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The module's broker for the tests that neither restart nor kill it: each replays only its own topic
    (``events``), so what the others journaled is not in its replay."""
    with BrokerProcess.from_xml(tmp_path_factory.mktemp("logged"), sow=SOW, transaction_log=TXLOG) as proc:
        yield proc


@pytest.fixture
def events(request: pytest.FixtureRequest) -> str:
    """This test's own journaled topic: ``events.<test name>``."""
    return "events." + re.sub(r"\W", "_", request.node.name)


def replay(client, topic: str, bookmark: str, *, options: str | None = None, filter: str | None = None,
           expect: int, make_collector, timeout: float = 10.0):
    """Bookmark-subscribe with a completed ack; returns (publishes, everything received)."""
    got = make_collector()
    cmd = AMPS.Command("subscribe").set_topic(topic).set_bookmark(bookmark).add_ack_type("completed")
    if options:
        cmd.set_options(options)
    if filter:
        cmd.set_filter(filter)
    client.execute_async(cmd, got)
    got.wait_for(1, timeout=timeout, command="ack")
    got.wait_for(expect, timeout=timeout, command="publish")
    return got


def wait_completed(got, timeout: float = 10.0) -> None:
    """Wait for the replay's completed ack: every replayed message arrives before it, so a message that
    should not have been replayed would be here by then."""
    deadline = time.monotonic() + timeout
    while not any(m["command"] == "ack" and m["ack_type"] == "completed" for m in got.messages):
        assert time.monotonic() < deadline, "no completed ack"
        time.sleep(0.02)


def numbers(collector) -> list[int]:
    return [json.loads(d)["n"] for d in collector.data("publish")]


def publish_numbered(client, topic: str, start: int, stop: int) -> None:
    for n in range(start, stop):
        client.publish(topic, json.dumps({"n": n}))
    client.publish_flush(5000)


def test_replay_from_epoch_then_completed_then_live(shared_logged, events, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 20)
    got = replay(sub, events, "0", expect=20, make_collector=make_collector)
    kinds = [(m["command"], m["ack_type"]) for m in got.messages]
    completed = kinds.index(("ack", "completed"))
    assert kinds[:completed] == [("publish", "")] * 20  # every replayed message before the completed ack
    publish_numbered(pub, events, 20, 25)
    got.wait_for(25, command="publish")
    assert numbers(got) == list(range(25))
    bms = [m["bookmark"] for m in got.messages if m["command"] == "publish"]
    seqs = [int(b.split("|")[1]) for b in bms]
    assert seqs == sorted(seqs) and len(set(seqs)) == 25 and all(b.split("|")[0] != "0" for b in bms)


def test_replay_from_now_is_live_only(shared_logged, events, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 5)
    got = replay(sub, events, "0|1|", expect=0, make_collector=make_collector)
    publish_numbered(pub, events, 5, 8)
    got.wait_for(3, command="publish")
    assert numbers(got) == [5, 6, 7]


def test_replay_after_a_bookmark(shared_logged, events, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 10)
    first = replay(sub, events, "0", expect=10, make_collector=make_collector)
    bm5 = [m["bookmark"] for m in first.messages if m["command"] == "publish"][4]
    other = client_factory(shared_logged.uri)
    got = replay(other, events, bm5, expect=5, make_collector=make_collector)
    wait_completed(got)
    assert numbers(got) == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("suffix", ["Z", "", ".000000Z"])
def test_replay_from_a_timestamp(shared_logged, events, client_factory, make_collector, suffix) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 5)
    time.sleep(1.1)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + suffix
    time.sleep(1.1)
    publish_numbered(pub, events, 5, 9)
    got = replay(sub, events, stamp, expect=4, make_collector=make_collector)
    wait_completed(got)
    assert numbers(got) == [5, 6, 7, 8]


def test_replay_from_a_list_starts_at_the_oldest(shared_logged, events, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 10)
    first = replay(sub, events, "0", expect=10, make_collector=make_collector)
    bms = [m["bookmark"] for m in first.messages if m["command"] == "publish"]
    got = replay(client_factory(shared_logged.uri), events, f"{bms[7]},{bms[2]}", expect=7,
                 make_collector=make_collector)
    wait_completed(got)
    assert numbers(got) == list(range(3, 10))


def test_replay_with_filter_and_regex_topic(shared_logged, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    for i in range(10):
        pub.publish("logged.a" if i % 2 else "logged.b", json.dumps({"n": i}))
    pub.publish("unlogged.c", json.dumps({"n": 100}))
    pub.publish_flush(5000)
    got = replay(sub, "^(logged|unlogged)\\.", "0", filter="/n >= 4", expect=6, make_collector=make_collector)
    wait_completed(got)
    assert numbers(got) == [4, 5, 6, 7, 8, 9]  # only logged topics are replayed


def test_live_cut_over_has_no_gap_and_no_duplicate(shared_logged, events, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 2000)
    stop = threading.Event()
    count = [2000]

    def storm() -> None:
        while not stop.is_set() and count[0] < 20000:
            pub.publish(events, json.dumps({"n": count[0]}))
            count[0] += 1

    t = threading.Thread(target=storm)
    t.start()
    try:
        time.sleep(0.05)
        got = replay(sub, events, "0", expect=2000, make_collector=make_collector)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join()
    pub.publish_flush(5000)
    got.wait_for(count[0], command="publish", timeout=20)
    assert numbers(got) == list(range(count[0]))


def test_bookmark_subscribe_to_unlogged_topic_is_an_error(shared_logged, client_factory) -> None:
    sub = client_factory(shared_logged.uri)
    with pytest.raises(AMPS.InvalidTopicException):
        sub.bookmark_subscribe(lambda m: None, "not-logged", "0", timeout=5000)


def test_invalid_bookmark_is_an_error(shared_logged, events, client_factory) -> None:
    sub = client_factory(shared_logged.uri)
    with pytest.raises(AMPS.InvalidBookmarkException):
        sub.bookmark_subscribe(lambda m: None, events, "2024-01-01 garbage", timeout=5000)


def test_replay_rate_limits_delivery(shared_logged, events, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 60)
    started = time.monotonic()
    got = replay(sub, events, "0", options="rate=100", expect=60, make_collector=make_collector)
    took = time.monotonic() - started
    assert numbers(got) == list(range(60))
    assert took >= 0.45  # 60 messages at 100/s cannot arrive in under ~0.6 s


def test_pause_and_resume(shared_logged, events, client_factory, make_collector) -> None:
    pub, sub = client_factory(shared_logged.uri), client_factory(shared_logged.uri)
    publish_numbered(pub, events, 0, 10)
    got = make_collector()
    sub.bookmark_subscribe(got, events, "0", sub_id="paused-sub", options="pause", timeout=5000)
    sentinel = make_collector()  # a replay on the same connection, placed after the paused one, completes:
    replay(sub, events, "0", expect=10, make_collector=lambda: sentinel)  # the paused one would have sent
    wait_completed(sentinel)  # its messages by now
    assert got.data() == []
    sub.bookmark_subscribe(got, events, "0", sub_id="paused-sub", options="resume", timeout=5000)
    got.wait_for(10, command="publish")
    assert numbers(got) == list(range(10))


def test_replay_and_bookmarks_continue_after_restart(logged, client_factory, make_collector) -> None:
    pub = client_factory(logged.uri)
    publish_numbered(pub, "events", 0, 5)
    first = replay(client_factory(logged.uri), "events", "0", expect=5, make_collector=make_collector)
    before = [int(m["bookmark"].split("|")[1]) for m in first.messages if m["command"] == "publish"]
    assert logged.stop() == 0
    logged.start()
    pub = client_factory(logged.uri)
    publish_numbered(pub, "events", 5, 8)
    got = replay(client_factory(logged.uri), "events", "0", expect=8, make_collector=make_collector)
    assert numbers(got) == list(range(8))
    seqs = [int(m["bookmark"].split("|")[1]) for m in got.messages if m["command"] == "publish"]
    assert seqs[:5] == before and seqs == sorted(seqs) and len(set(seqs)) == 8


def _journal_ids(directory: Path, topic: str) -> list[int]:
    out = subprocess.run([sys.executable, "-m", "broker", "journal", "dump", str(directory), "--topic", topic],
                         capture_output=True, text=True, check=True).stdout
    ids = []
    for line in out.splitlines():
        rec = json.loads(line)
        if rec.get("command") in ("publish", "delta_publish"):
            ids.append(json.loads(rec["data"])["id"])
    return ids


def test_kill_9_loses_nothing_persisted_and_applies_nothing_twice(logged, make_collector, tmp_path) -> None:
    total = 3000
    ha = AMPS.HAClient("durable-publisher")
    ha.set_publish_store(AMPS.MemoryPublishStore(10000))
    chooser = AMPS.DefaultServerChooser()
    chooser.add(logged.uri)
    ha.set_server_chooser(chooser)
    ha.connect_and_logon()
    try:
        for i in range(total // 2):
            ha.publish("orders", json.dumps({"id": i, "v": 1}))
        time.sleep(0.2)
        logged.kill()  # SIGKILL mid-stream
        t = threading.Thread(target=lambda: [ha.publish("orders", json.dumps({"id": i, "v": 1}))
                                             for i in range(total // 2, total)])
        t.start()
        time.sleep(0.5)
        logged.start()
        t.join(60)
        ha.publish_flush(30000, AMPS.Message.AckType.PersistedEnum)
        assert ha.get_unpersisted_count() == 0
    finally:
        ha.close()
    reader = AMPS.Client("reader")
    reader.connect(logged.uri)
    reader.logon()
    ids = [json.loads(m.get_data())["id"] for m in reader.sow("orders", batch_size=1000) if m.get_command() == "sow"]
    reader.close()
    assert sorted(ids) == list(range(total))
    journal = _journal_ids(logged.cwd / "journal", "orders")
    assert sorted(journal) == list(range(total))  # each exactly once: re-sent publishes were de-duplicated


def test_sow_rebuilt_from_journal_including_deletes(logged, client_factory) -> None:
    pub = client_factory(logged.uri)
    for i in range(50):
        pub.publish("orders", json.dumps({"id": i, "v": 1}))
    pub.publish("orders", json.dumps({"id": 7, "v": 2}))
    pub.sow_delete("orders", "/id >= 40", 5000)
    pub.publish_flush(5000)
    assert logged.stop() == 0
    shutil.rmtree(logged.cwd / "sow")
    logged.start()
    reader = client_factory(logged.uri)
    rows = {json.loads(m.get_data())["id"]: json.loads(m.get_data())["v"]
            for m in reader.sow("orders", batch_size=100) if m.get_command() == "sow"}
    assert sorted(rows) == list(range(40)) and rows[7] == 2
    assert "rebuilt" in logged.log()


def test_garbage_after_the_last_record_is_cut_at_start_up(logged, client_factory, make_collector) -> None:
    pub = client_factory(logged.uri)
    publish_numbered(pub, "events", 0, 10)
    assert logged.stop() == 0
    journals = sorted(p for p in (logged.cwd / "journal").iterdir() if p.stat().st_size > 0)
    with open(journals[-1], "ab") as f:
        f.write(b"\x00\x01garbage-garbage-garbage" * 10)
    logged.start()
    got = replay(client_factory(logged.uri), "events", "0", expect=10, make_collector=make_collector)
    wait_completed(got)
    assert numbers(got) == list(range(10))
