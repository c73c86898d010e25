"""Historical SOW queries through the official AMPS client (issue 16, acceptance 1 and 3): the state at points
in time around updates and deletes, Window pruning, Granularity, historical sow_and_subscribe (snapshot, then
the journal replayed, then live, no gap or duplicate), and history surviving a restart and kill -9.

Every expected answer is computed by the test from what it published and the wall-clock times it read
between publishes (the broker stamps records with the same clock).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from pathlib import Path

import AMPS
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.client import sow_stream
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(90)

SOW = """
<Topic><Name>hist</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>
  <History><Window>1h</Window><Granularity>0s</Granularity></History></Topic>
<Topic><Name>hist.mem</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability>
  <History><Window>1h</Window></History></Topic>
<Topic><Name>short</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>
  <History><Window>1s</Window></History></Topic>
<Topic><Name>gran</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName>
  <History><Window>1h</Window><Granularity>1s</Granularity></History></Topic>
<Topic><Name>plain</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
"""
TXLOG = """
<JournalDirectory>./journal</JournalDirectory>
<FlushInterval>10ms</FlushInterval>
<Topic><Name>hist</Name><MessageType>json</MessageType></Topic>
<Topic><Name>hist.mem</Name><MessageType>json</MessageType></Topic>
<Topic><Name>plain</Name><MessageType>json</MessageType></Topic>
"""


def stamp(t_ns: int) -> str:
    """An AMPS timestamp bookmark (UTC, microseconds)."""
    t = dt.datetime.fromtimestamp(t_ns / 1e9, dt.UTC)
    return t.strftime("%Y%m%dT%H%M%S.%f")


def mark(client: AMPS.Client) -> int:
    """A time strictly after every publish so far and before every later one (flush waits for them)."""
    client.publish_flush(5000)
    t = time.time_ns()
    while time.time_ns() <= t + 1000:  # one microsecond apart: the bookmark has microsecond precision
        pass
    return t + 1000


def sow(client: AMPS.Client, topic: str, bookmark: str | None = None, *, filter: str | None = None,
        order_by: str | None = None, top_n: int | None = None, options: str | None = None,
        batch_size: int = 7) -> list[dict]:
    return [json.loads(m.get_data()) for m in sow_stream(client, topic, batch_size=batch_size, bookmark=bookmark,
                                                         filter=filter, order_by=order_by, top_n=top_n,
                                                         options=options)
            if m.get_command() == "sow"]


def by_id(rows: list[dict]) -> dict[int, dict]:
    return {r["id"]: r for r in rows}


@pytest.fixture(scope="module")
def hist_broker(tmp_path_factory: pytest.TempPathFactory):
    proc = BrokerProcess.from_xml(tmp_path_factory.mktemp("history"), admin=True, sow=SOW,
                                  transaction_log=TXLOG).start()
    yield proc
    proc.stop()


def sow_metric(proc: BrokerProcess, name: str, topic: str) -> float:
    """One per-topic SOW metric from the broker's /metrics."""
    _headers, body = fresh_get(proc.admin_port)
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("topic") == topic:
                return sample.value
    raise AssertionError(f"{name}{{topic={topic!r}}} is not in /metrics")


@pytest.fixture
def client(hist_broker, client_factory):
    return client_factory(hist_broker.uri)


@pytest.mark.parametrize("topic", ["hist", "hist.mem"])
def test_state_at_points_in_time_around_updates_and_deletes(client, topic) -> None:
    states: list[tuple[int, dict[int, dict]]] = []  # (time, the state the test expects then)
    current: dict[int, dict] = {}

    def publish(row: dict) -> None:
        client.publish(topic, json.dumps(row))
        current[row["id"]] = row

    def delete(i: int) -> None:
        client.execute(AMPS.Command("sow_delete").set_topic(topic).set_filter(f"/id = {i}")).timeout(5000)
        del current[i]

    t0 = mark(client)
    for i in range(1, 6):
        publish({"id": i, "v": 1, "region": "eu" if i % 2 else "us"})
    states.append((mark(client), dict(current)))
    publish({"id": 2, "v": 2, "region": "eu"})
    delete(3)
    publish({"id": 6, "v": 1, "region": "us"})
    states.append((mark(client), dict(current)))
    delete(1)
    publish({"id": 3, "v": 3, "region": "us"})  # re-inserted after its delete
    publish({"id": 2, "v": 3, "region": "us"})
    states.append((mark(client), dict(current)))

    mine = "/id < 100"  # other tests of this module publish ids from 100 up to the same topic
    assert sow(client, topic, stamp(t0), filter=mine) == []  # before anything was published
    for t, expected in states:
        got = sow(client, topic, stamp(t), filter=mine)
        assert by_id(got) == expected
        assert len(got) == len(expected)  # each once
        eu = [r for r in expected.values() if r["region"] == "eu"]
        assert by_id(sow(client, topic, stamp(t), filter=f"{mine} AND /region = 'eu'")) == by_id(eu)
        ordered = sorted(expected.values(), key=lambda r: (-r["v"], r["id"]))
        assert sow(client, topic, stamp(t), filter=mine, order_by="/v DESC, /id", top_n=2, batch_size=1) == ordered[:2]
        assert sow(client, topic, stamp(t), filter=mine, order_by="/v DESC, /id",
                   options="top_n=2,skip_n=1") == ordered[1:3]
    assert by_id(sow(client, topic, filter=mine)) == current  # the current state, unchanged
    assert sow(client, topic, "20000101T000000") == []  # before the Window


def test_historical_sow_on_a_topic_without_history_is_an_error_naming_it(client) -> None:
    client.publish("plain", json.dumps({"id": 1}))
    with pytest.raises(AMPS.AMPSException, match="plain"):
        sow(client, "plain", stamp(mark(client)))
    with pytest.raises(AMPS.InvalidBookmarkException):
        sow(client, "hist", "0|1|")
    # History but no transaction log to replay from: a historical sow_and_subscribe cannot continue it.
    cmd = AMPS.Command("sow_and_subscribe").set_topic("short").set_bookmark(stamp(time.time_ns()))
    with pytest.raises(AMPS.InvalidTopicException):
        client.execute(cmd).timeout(5000)


def test_historical_sow_and_subscribe_on_a_topic_without_history_is_a_plain_one(client, make_collector) -> None:
    client.publish("plain", json.dumps({"id": 7, "v": 1}))
    t = mark(client)
    client.publish("plain", json.dumps({"id": 7, "v": 2}))
    client.publish_flush(5000)
    got = make_collector()
    cmd = AMPS.Command("sow_and_subscribe").set_topic("plain").set_filter("/id = 7").set_bookmark(stamp(t))
    client.execute_async(cmd, got)
    assert [json.loads(d)["v"] for d in got.wait_for(1, command="sow") and got.data("sow")] == [2]
    client.publish("plain", json.dumps({"id": 7, "v": 3}))
    got.wait_for(1, command="publish")
    assert [json.loads(d)["v"] for d in got.data("publish")] == [3]


def test_window_pruning_keeps_the_current_state(client, hist_broker) -> None:
    client.publish("short", json.dumps({"id": 1, "v": 1}))
    client.publish("short", json.dumps({"id": 2, "v": 1}))
    t1 = mark(client)
    client.publish("short", json.dumps({"id": 1, "v": 2}))
    client.execute(AMPS.Command("sow_delete").set_topic("short").set_filter("/id = 2")).timeout(5000)
    t2 = mark(client)
    assert by_id(sow(client, "short", stamp(t1))) == {1: {"id": 1, "v": 1}, 2: {"id": 2, "v": 1}}
    # Past the 1s Window (plus the pruner's period): t1 is before the Window now, the current state stays.
    deadline = time.monotonic() + 30
    while sow(client, "short", stamp(t1)):
        assert time.monotonic() < deadline, "t1 never left the Window"
        time.sleep(0.2)
    # The pruner (every 0.25s with a 1s Window) removed the superseded version and the delete.
    while sow_metric(hist_broker, "broker_sow_history_pruned_total", "short") < 2:
        assert time.monotonic() < deadline, "nothing was pruned"
        time.sleep(0.2)
    assert sow_metric(hist_broker, "broker_sow_history_versions_total", "short") >= 3
    assert sow_metric(hist_broker, "broker_sow_historical_queries_total", "short") >= 2
    assert sow(client, "short", stamp(t2)) == []  # t2 is before the Window too
    assert sow(client, "short", stamp(time.time_ns())) == [{"id": 1, "v": 2}]
    assert sow(client, "short") == [{"id": 1, "v": 2}]


def test_granularity_keeps_one_copy_per_interval(client) -> None:
    """Granularity 1s: a query at any time inside a second answers the state at the start of that second."""
    publishes: list[tuple[int, int, int]] = []  # (before, after, v)
    v = 0
    second = 1_000_000_000
    begin = time.time_ns()
    while time.time_ns() < begin + 2_600_000_000:
        to_boundary = second - time.time_ns() % second
        if to_boundary < 100_000_000:  # publish clear of each second's start, so that each one can be checked
            time.sleep((to_boundary + 20_000_000) / 1e9)
        v += 1
        before = time.time_ns()
        client.publish("gran", json.dumps({"id": 1, "v": v}))
        client.publish_flush(5000)
        publishes.append((before, time.time_ns(), v))
        time.sleep(0.04)
    checked = 0
    for boundary in range((begin // second + 1) * second, publishes[-1][1], second):
        if any(b <= boundary <= a for b, a, _ in publishes):
            continue  # a publish straddles the boundary: the test cannot tell which side it fell on
        before = [v for b, a, v in publishes if a < boundary]
        expected = [{"id": 1, "v": before[-1]}] if before else []
        updated_inside = [v for b, a, v in publishes if boundary < b and a < boundary + second - 1_000_000]
        if not updated_inside:
            continue  # a very slow machine: no update inside this second, nothing to show
        for offset in (1_000_000, second // 2, second - 1_000_000):  # updates inside, yet one state for all
            assert sow(client, "gran", stamp(boundary + offset)) == expected
        checked += 1
    assert checked >= 1


def test_historical_sow_and_subscribe_replays_then_goes_live(client, client_factory, hist_broker,
                                                             make_collector) -> None:
    topic = "hist"
    for i in range(100, 105):
        client.publish(topic, json.dumps({"id": i, "v": 0, "on": True}))
    t = mark(client)
    client.publish(topic, json.dumps({"id": 100, "v": 1, "on": True}))
    client.publish(topic, json.dumps({"id": 101, "v": 1, "on": False}))  # leaves the filter: oof
    client.execute(AMPS.Command("sow_delete").set_topic(topic).set_filter("/id = 102")).timeout(5000)  # oof
    client.publish(topic, json.dumps({"id": 105, "v": 1, "on": True}))
    client.publish_flush(5000)

    # A publisher keeps updating /id 110 while the subscription is placed: the counter must arrive in order.
    stop = threading.Event()
    sent: list[int] = []
    pub = client_factory(hist_broker.uri)

    def run() -> None:
        n = 0
        while not stop.is_set() and n < 3000:
            n += 1
            pub.publish(topic, json.dumps({"id": 110, "v": n, "on": True}))
            sent.append(n)
        pub.publish_flush(5000)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.1)
    got = make_collector()
    cmd = (AMPS.Command("sow_and_subscribe").set_topic(topic).set_filter("/on = true AND /id >= 100")
           .set_bookmark(stamp(t)).set_options("oof").set_batch_size(3))
    client.execute_async(cmd, got)
    time.sleep(0.2)
    stop.set()
    thread.join()
    client.publish(topic, json.dumps({"id": 103, "v": 9, "on": True}))  # live
    client.publish_flush(5000)
    deadline = time.monotonic() + 20
    while not any(m["command"] == "publish" and json.loads(m["data"])["id"] == 103 for m in got.messages):
        assert time.monotonic() < deadline, "the live update never arrived"
        time.sleep(0.05)

    kinds = [m["command"] for m in got.messages if m["command"] != "ack"]
    snapshot = [json.loads(m["data"]) for m in got.messages if m["command"] == "sow"]
    assert sorted(r["id"] for r in snapshot) == [100, 101, 102, 103, 104]  # as of t
    assert all(r["v"] == 0 for r in snapshot)
    first_after = kinds.index("group_end")
    assert set(kinds[:first_after]) <= {"group_begin", "sow"}
    after = [m for m in got.messages if m["command"] in ("publish", "oof")]
    summary = [(m["command"], json.loads(m["data"])["id"] if m["data"] else None, m["reason"]) for m in after
               if not m["data"] or json.loads(m["data"])["id"] != 110]
    assert summary[:4] == [("publish", 100, ""), ("oof", 101, "match"), ("oof", 102, "deleted"),
                           ("publish", 105, "")]
    assert summary[-1] == ("publish", 103, "")
    counter = [json.loads(m["data"])["v"] for m in after if m["data"] and json.loads(m["data"])["id"] == 110]
    assert counter == sent  # every update of /id 110 once, in order: no gap, no duplicate at either cut-over


def test_history_survives_restart_and_kill_9(tmp_path: Path, client_factory) -> None:
    """LevelDB history survives as it is; a transient topic's history is rebuilt from the journal at the
    original times. Either way a query for a time before the restart answers the same after it."""
    proc = BrokerProcess.from_xml(tmp_path, sow=SOW, transaction_log=TXLOG).start()
    topics = ("hist", "hist.mem")
    try:
        client = client_factory(proc.uri)
        times = []
        for round_ in range(3):
            for topic in topics:
                for i in range(20):
                    client.publish(topic, json.dumps({"id": i, "v": round_}))
                client.execute(AMPS.Command("sow_delete").set_topic(topic).set_filter(f"/id = {round_}")).timeout(5000)
            times.append(mark(client))
        answers = {topic: [sow(client, topic, stamp(t)) for t in times] for topic in topics}
        for topic in topics:
            for round_, answer in enumerate(answers[topic]):
                assert by_id(answer) == {i: {"id": i, "v": round_} for i in range(20) if i != round_}
        client.close()
        proc.stop()
        proc.start()
        client = client_factory(proc.uri)
        for topic in topics:  # after a clean restart
            assert [sow(client, topic, stamp(t)) for t in times] == answers[topic], topic
            client.publish(topic, json.dumps({"id": 50, "v": 9}))
        t4 = mark(client)
        client.publish_flush(10000, AMPS.Message.AckType.PersistedEnum)  # in the journal before the kill
        for topic in topics:
            answers[topic].append(sow(client, topic, stamp(t4)))
            assert by_id(answers[topic][-1])[50] == {"id": 50, "v": 9}
        client.close()
        proc.kill()
        proc.start()
        client = client_factory(proc.uri)
        for topic in topics:  # after kill -9
            assert [sow(client, topic, stamp(t)) for t in [*times, t4]] == answers[topic], topic
    finally:
        proc.stop()

def test_paginated_historical_sow_and_subscribe(client, make_collector) -> None:
    """top_n=3, skip_n=1, OrderBy /v from a point in time: the page as of then, then the page moving through
    the replayed changes, then live; to the subscriber only the page exists (seed 000)."""
    topic = "hist"
    state = {i: float(i) for i in range(200, 210)}  # id -> /v
    for i, v in state.items():
        client.publish(topic, json.dumps({"id": i, "v": v}))
    t = mark(client)

    def page(s: dict[int, float]) -> list[int]:
        return [i for i, _v in sorted(s.items(), key=lambda kv: (kv[1], str(kv[0])))][1:4]

    expected_events: list[tuple[str, int]] = []

    def change(i: int, v: float | None) -> None:
        before = page(state)
        if v is None:
            client.execute(AMPS.Command("sow_delete").set_topic(topic).set_filter(f"/id = {i}")).timeout(5000)
            del state[i]
        else:
            client.publish(topic, json.dumps({"id": i, "v": v}))
            state[i] = v
        after = page(state)
        if i in after:
            expected_events.append(("publish", i))
        elif i in before:
            expected_events.append(("oof", i))
        expected_events.extend(("oof", k) for k in before if k not in after and k != i)
        expected_events.extend(("publish", k) for k in after if k not in before and k != i)

    start_page = page(state)
    change(215, 201.5)  # enters the page, pushes one out
    change(203, None)  # deleted outside the page (pushed out just before)
    change(205, 300.0)  # moves from outside to outside
    change(201, 150.0)  # moves to the front: out of the page, another pulled in
    client.publish_flush(5000)
    got = make_collector()
    cmd = (AMPS.Command("sow_and_subscribe").set_topic(topic).set_filter("/id >= 200 AND /id < 300")
           .set_bookmark(stamp(t)).set_order_by("/v").set_options("oof,top_n=3,skip_n=1").set_batch_size(2))
    client.execute_async(cmd, got)
    got.wait_for(1, command="group_end")
    change(216, 200.5)  # live
    change(202, None)  # live delete inside the page
    client.publish_flush(5000)
    deadline = time.monotonic() + 20
    while len([m for m in got.messages if m["command"] in ("publish", "oof")]) < len(expected_events):
        assert time.monotonic() < deadline, (got.messages, expected_events)
        time.sleep(0.05)
    time.sleep(0.3)  # nothing more should come
    assert [json.loads(m["data"])["id"] for m in got.messages if m["command"] == "sow"] == start_page
    events = [(m["command"], json.loads(m["data"])["id"]) for m in got.messages if m["command"] in ("publish", "oof")]
    assert events == expected_events
    held = set(start_page)
    for kind, i in events:
        (held.add if kind == "publish" else held.discard)(i)
    assert held == set(page(state))


def test_positions_in_configs_full_answers_historical_queries(tmp_path: Path, client_factory) -> None:
    """configs/full.xml promises historical queries on `positions` (History 7d, Granularity 1m): its topic
    definition, served as written (FileName moved under the test's directory), answers them."""
    from lxml import etree

    full = etree.parse(str(Path(__file__).resolve().parents[2] / "configs" / "full.xml"))
    (topic,) = [t for t in full.iterfind("SOW/Topic") if t.findtext("Name") == "positions"]
    topic.find("FileName").text = "./sow/%n.sow"
    txlog = ("<JournalDirectory>./journal</JournalDirectory>"
             "<Topic><Name>positions</Name><MessageType>json</MessageType></Topic>")
    proc = BrokerProcess.from_xml(tmp_path, sow=etree.tostring(topic).decode(), transaction_log=txlog).start()
    try:
        client = client_factory(proc.uri)
        before = mark(client)
        rows = [{"account": a, "symbol": s, "qty": q} for a, s, q in (("A", "IBM", 10), ("A", "MSFT", 5),
                                                                        ("B", "IBM", 7))]
        for row in rows:
            client.publish("positions", json.dumps(row))
        client.publish_flush(5000)
        minute = 60_000_000_000
        later = stamp(time.time_ns() + 2 * minute)  # past the next 1m boundary: every publish is in
        got = sow(client, "positions", later)
        assert sorted(got, key=lambda r: (r["account"], r["symbol"])) == rows
        assert sow(client, "positions", later, filter="/symbol = 'IBM'", order_by="/qty") == [rows[2], rows[0]]
        assert sow(client, "positions", stamp(before - minute)) == []  # the boundary before any publish
    finally:
        proc.stop()


def test_historical_sow_and_subscribe_without_oof_replays_matching_messages_only(client, make_collector) -> None:
    client.publish("hist", json.dumps({"id": 300, "v": 1, "on": True}))
    client.publish("hist", json.dumps({"id": 301, "v": 1, "on": True}))
    t = mark(client)
    client.publish("hist", json.dumps({"id": 300, "v": 2, "on": True}))
    client.publish("hist", json.dumps({"id": 301, "v": 2, "on": False}))  # leaves the filter: no oof asked
    client.publish("hist", json.dumps({"id": 302, "v": 1, "on": True}))
    client.publish_flush(5000)
    got = make_collector()
    cmd = (AMPS.Command("sow_and_subscribe").set_topic("hist").set_filter("/on = true AND /id >= 300")
           .set_bookmark(stamp(t)))
    client.execute_async(cmd, got)
    got.wait_for(1, command="group_end")
    client.publish("hist", json.dumps({"id": 303, "v": 1, "on": True}))
    client.publish_flush(5000)
    got.wait_for(3, command="publish")
    assert sorted((r["id"], r["v"]) for r in map(json.loads, got.data("sow"))) == [(300, 1), (301, 1)]
    assert [(r["id"], r["v"]) for r in map(json.loads, got.data("publish"))] == [(300, 2), (302, 1), (303, 1)]
    assert got.data("oof") == []
