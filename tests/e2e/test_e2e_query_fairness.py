"""Large SOW queries in progress stall no one (issue 17, acceptance 2), with the official AMPS client.

While one client streams a whole 20,000-record topic, another runs OrderBy with top_n over it and a third
runs a filter that matches nothing, a publisher sends an ordered sequence with persisted acks to a
subscriber. The test checks order and completeness (every publish acknowledged, every message delivered in
order, every query complete and correct), not time: the latency figures come from ``python -m bench.fairness``.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import AMPS
import pytest

from broker.protocol import encode_frame
from broker.testing.client import sow_stream

pytestmark = pytest.mark.timeout(180)

RECORDS = 20_000
COUNT = 300
SOW = """<Topic><Name>big</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""


def query(client: AMPS.Client, topic: str, *, filter: str | None = None, top_n: int | None = None,
          order_by: str | None = None, batch_size: int | None = None) -> list[dict]:
    """A sow with the official Command API: every message of the stream (command and data)."""
    return [{"command": m.get_command(), "data": m.get_data()}
            for m in sow_stream(client, topic, timeout_ms=60_000, filter=filter, top_n=top_n, order_by=order_by,
                                batch_size=batch_size)]


def _value(i: int) -> int:
    return (i * 7919) % RECORDS


def test_large_queries_do_not_hold_back_other_clients(broker_factory, client_factory, make_collector) -> None:
    broker = broker_factory(sow=SOW)
    loader = client_factory(broker.uri)
    for i in range(RECORDS):
        loader.publish("big", json.dumps({"id": i, "v": _value(i), "pad": "x" * 40}))
    loader.publish_flush(60_000)

    results: dict[str, list[dict]] = {}
    errors: list[BaseException] = []

    def run(name: str, **kwargs: object) -> None:
        try:
            results[name] = query(client_factory(broker.uri), "big", **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    subscriber = client_factory(broker.uri)
    publisher = AMPS.Client("fair-publisher")
    publisher.set_publish_store(AMPS.MemoryPublishStore())  # every publish acknowledged as persisted
    publisher.connect(broker.uri)
    publisher.logon(5000)
    got = make_collector()
    subscriber.subscribe(got, "feed", timeout=5000)
    queries = [threading.Thread(target=run, args=(name,), kwargs=kwargs) for name, kwargs in (
        ("all", {"batch_size": 100}),
        ("top", {"order_by": "/v DESC", "top_n": 10}),
        ("none", {"filter": "/v < 0"}),
    )]
    for thread in queries:
        thread.start()
    for i in range(COUNT):
        publisher.publish("feed", json.dumps({"seq": i}))
    publisher.publish_flush(60_000)  # returns once every publish is acknowledged
    for thread in queries:
        thread.join(120)
    unpersisted = publisher.get_unpersisted_count()
    publisher.close()
    assert not errors and not any(thread.is_alive() for thread in queries)

    got.wait_for(COUNT, timeout=60)
    assert [json.loads(d)["seq"] for d in got.data()] == list(range(COUNT))
    assert unpersisted == 0

    rows = [m for m in results["all"] if m["command"] == "sow"]
    assert sorted(json.loads(m["data"])["id"] for m in rows) == list(range(RECORDS))
    top = [json.loads(m["data"])["v"] for m in results["top"] if m["command"] == "sow"]
    assert top == sorted((_value(i) for i in range(RECORDS)), reverse=True)[:10]
    assert [m for m in results["none"] if m["command"] == "sow"] == []
    assert results["none"][-1]["command"] == "group_end"


def test_a_large_delete_by_filter_deletes_exactly_and_holds_back_no_one(broker_factory, client_factory,
                                                                        make_collector) -> None:
    broker = broker_factory(sow=SOW)
    loader = client_factory(broker.uri)
    for i in range(RECORDS):
        loader.publish("big", json.dumps({"id": i, "v": _value(i)}))
    loader.publish_flush(60_000)
    subscriber, publisher, deleter = (client_factory(broker.uri) for _ in range(3))
    got = make_collector()
    subscriber.subscribe(got, "feed", timeout=5000)
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(
        ack=deleter.sow_delete("big", "/v % 10 = 3", 60_000)))
    thread.start()
    for i in range(COUNT):
        publisher.publish("feed", json.dumps({"seq": i}))
    thread.join(120)
    assert not thread.is_alive()
    got.wait_for(COUNT, timeout=60)
    assert [json.loads(d)["seq"] for d in got.data()] == list(range(COUNT))
    expected_gone = {i for i in range(RECORDS) if _value(i) % 10 == 3}
    assert int(outcome["ack"].get_matches()) == len(expected_gone)  # type: ignore[attr-defined]
    left = [json.loads(m["data"])["id"] for m in query(deleter, "big", batch_size=1000) if m["command"] == "sow"]
    assert sorted(left) == sorted(set(range(RECORDS)) - expected_gone)


def _raw_query_then_hang_up(port: int, frame: bytes, read_bytes: int) -> None:
    """Log on over a raw socket, start a query, read about ``read_bytes`` of its results and disconnect."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_frame({"c": "logon", "cid": "1", "client_name": "hangs-up", "a": "processed"}))
        sock.sendall(frame)
        got = 0
        while got < read_bytes:
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection"
            got += len(chunk)


def _wait_for_log(broker, pattern: str, timeout: float = 60) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(pattern, broker.log())
        if found or time.monotonic() > deadline:
            assert found, f"no log line matching {pattern!r}\n--- broker log ---\n{broker.log()}"
            return found
        time.sleep(0.05)


def test_a_query_whose_client_hangs_up_stops_mid_scan_and_others_carry_on(broker_factory, client_factory,
                                                                        make_collector) -> None:
    """The worker thread of a query stops at the client's disconnect (its snapshot is closed, its thread turn
    handed on): the broker logs how far it got, short of the whole topic, and a full query and a
    publish/subscribe pair that run afterwards and meanwhile are complete and in order."""
    broker = broker_factory(sow=SOW)
    loader = client_factory(broker.uri)
    pad = "x" * 1000  # 20 MB of results: far more than the outbound buffer, the socket buffers and the channel
    for i in range(RECORDS):
        loader.publish("big", json.dumps({"id": i, "v": _value(i), "pad": pad}))
    loader.publish_flush(60_000)
    subscriber, publisher = client_factory(broker.uri), client_factory(broker.uri)
    got = make_collector()
    subscriber.subscribe(got, "feed", timeout=5000)
    for round_ in range(3):  # more cancelled queries than query threads: each must give its turn back
        query_frame = encode_frame({"c": "sow", "cid": f"q{round_}", "query_id": f"q{round_}", "t": "big",
                                    "batch_size": 10})
        _raw_query_then_hang_up(broker.port, query_frame, 200_000)
        for i in range(100):
            publisher.publish("feed", json.dumps({"seq": round_ * 100 + i}))
        stopped = _wait_for_log(broker, rf"query q{round_} stopped after (\d+) matching records")
        assert int(stopped.group(1)) < RECORDS
    got.wait_for(300, timeout=60)
    assert [json.loads(d)["seq"] for d in got.data()] == list(range(300))
    rows = [m for m in query(loader, "big", batch_size=1000) if m["command"] == "sow"]
    assert sorted(json.loads(m["data"])["id"] for m in rows) == list(range(RECORDS))


def test_sow_and_subscribe_stays_atomic_while_the_records_change(broker_factory, client_factory) -> None:
    """Every record reaches a sow_and_subscribe exactly once in each of its states from the snapshot on: its
    snapshot version, then every later update in order (none lost, none twice, none before the snapshot's
    group_end), while a publisher updates the topic throughout the query."""
    broker = broker_factory(sow=SOW)
    loader = client_factory(broker.uri)
    for i in range(RECORDS):
        loader.publish("big", json.dumps({"id": i, "ver": 0}))
    loader.publish_flush(60_000)
    hot, versions = 500, 6  # ids 0..499 are updated 6 times each, round-robin, during the query
    publisher = client_factory(broker.uri)
    started = threading.Event()

    def publish() -> None:
        started.wait(30)
        for ver in range(1, versions + 1):
            for i in range(hot):
                publisher.publish("big", json.dumps({"id": i, "ver": ver}))
        publisher.publish_flush(60_000)

    thread = threading.Thread(target=publish)
    thread.start()
    subscriber = client_factory(broker.uri)
    seen: dict[int, list[int]] = {}
    commands: list[str] = []
    stream = subscriber.execute(AMPS.Command("sow_and_subscribe").set_topic("big").set_batch_size(50))
    stream.timeout(1000)  # an idle second yields None: checked against the deadline below
    started.set()
    waiting = set(range(hot))  # hot records whose last version has not arrived yet
    deadline = time.monotonic() + 120
    try:
        for message in stream:
            assert time.monotonic() < deadline, f"still waiting for the last version of {len(waiting)} records"
            if message is None:
                continue
            command = message.get_command()
            commands.append(command)
            if command in ("sow", "publish"):
                doc = json.loads(message.get_data())
                seen.setdefault(doc["id"], []).append(doc["ver"])
                if doc["ver"] == versions:
                    waiting.discard(doc["id"])
                    if not waiting:
                        break
    finally:
        thread.join(120)
    assert not thread.is_alive()
    end = commands.index("group_end")
    assert set(commands[:end]) <= {"group_begin", "sow"} and set(commands[end + 1:]) == {"publish"}
    assert sorted(seen) == list(range(RECORDS))
    assert any(len(seen[i]) > 1 for i in range(hot)), "no update arrived live: the test raced nothing"
    for i in range(RECORDS):
        first = seen[i][0]
        expected = list(range(first, versions + 1)) if i < hot else [0]
        assert seen[i] == expected, f"record {i}: {seen[i]}"


def test_a_delete_by_filter_while_the_same_records_change(broker_factory, client_factory) -> None:
    """A sow_delete by filter deletes what matches when it runs: a record updated during the delete to a value
    the filter rejects is either deleted before the update (then the update inserts it again) or kept with
    the new value, never lost and never kept with a matching value; the ack counts what was deleted."""
    broker = broker_factory(sow=SOW)
    loader = client_factory(broker.uri)
    for i in range(RECORDS):
        loader.publish("big", json.dumps({"id": i, "v": _value(i)}))
    loader.publish_flush(60_000)
    matching = [i for i in range(RECORDS) if _value(i) % 10 == 3]
    moved = matching[::2]  # updated during the delete to a value the filter rejects
    publisher, deleter = client_factory(broker.uri), client_factory(broker.uri)
    outcome: dict[str, object] = {}
    thread = threading.Thread(target=lambda: outcome.update(ack=deleter.sow_delete("big", "/v % 10 = 3", 60_000)))
    thread.start()
    for i in moved:
        publisher.publish("big", json.dumps({"id": i, "v": _value(i) + 1}))
    publisher.publish_flush(60_000)
    thread.join(120)
    assert not thread.is_alive()
    left = {json.loads(m["data"])["id"]: json.loads(m["data"])["v"]
            for m in query(deleter, "big", batch_size=1000) if m["command"] == "sow"}
    assert all(v % 10 != 3 for v in left.values())
    assert set(left) >= set(range(RECORDS)) - set(matching)  # nothing else touched
    assert set(left) >= set(moved)  # an update lands after the delete, or the delete skipped it: never lost
    assert all(left[i] == _value(i) + 1 for i in moved)
    assert len(left) == RECORDS - len(matching) + len(moved)
    # Every matching record that was not moved is deleted; a moved one only if the delete reached it first.
    deleted = int(outcome["ack"].get_matches())  # type: ignore[attr-defined]
    assert len(matching) - len(moved) <= deleted <= len(matching)
