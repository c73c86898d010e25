"""sow_and_subscribe through the official client (issue 5, acceptance 2 and 3).

Atomicity under a publish storm (every key's versions consecutive from the snapshot on), the query
options, a topic without a SOW, replacing a subscription (only the difference is sent), and delta
subscriptions (only the changed fields and the key arrive).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import AMPS
import pytest

from broker.testing.process import BrokerProcess

#: Each test's own persisted SOW topic on the module's broker (the ``orders`` fixture). The snapshot of
#: test_sow_and_delta_subscribe comes in the store's key order, which depends on the topic's name: it keeps
#: ``orders``.
ORDERS_TOPICS = {
    "test_query_options_apply_to_the_query_only": "orders-query-options",
    "test_replace_sends_only_the_difference": "orders-replace",
    "test_delta_subscribe_sends_only_changed_fields": "orders-delta",
    "test_sow_and_delta_subscribe": "orders",
}
TOPICS = """
<Topic><Name>ticks</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
""" + "".join(f"""<Topic><Name>{topic}</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>
""" for topic in ORDERS_TOPICS.values())


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module: each test's SOW records are in a topic no other test uses."""
    with BrokerProcess.from_xml(tmp_path_factory.mktemp("s-and-s"), sow=TOPICS) as proc:
        yield proc


@pytest.fixture
def orders(request: pytest.FixtureRequest) -> str:
    """This test's own persisted SOW topic (keyed on /id)."""
    assert request.node.name in ORDERS_TOPICS, f"give {request.node.name} a topic of its own in ORDERS_TOPICS"
    return ORDERS_TOPICS[request.node.name]


def settle(*clients) -> None:
    """Flush each client in turn: the first's publishes are applied, the others received their effect."""
    for c in clients:
        c.publish_flush(5000)


def split(collector) -> tuple[list[dict], list[dict]]:
    """(the snapshot's sow records, the live publish/oof messages after group_end)."""
    msgs = collector.messages
    end = next(i for i, m in enumerate(msgs) if m["command"] == "group_end")
    return ([m for m in msgs[:end] if m["command"] == "sow"],
            [m for m in msgs[end + 1 :] if m["command"] in ("publish", "oof")])


def wait_group_end(collector, n: int = 1) -> None:
    assert len(collector.wait_for(n, command="group_end", timeout=20)) >= n, "no group_end"


# -- acceptance 2: atomic under a publish storm -------------------------------------------------------
def test_snapshot_and_live_have_no_gap_and_no_duplicate(broker, client_factory, make_collector) -> None:
    keys = 20
    pub = client_factory(broker.uri)
    filler = "x" * 2000
    # Enough data that streaming the snapshot has to wait for the client (~5 MB > the 4 MB watermark),
    # so live messages arrive while the query is still being sent.
    for i in range(2500):
        pub.publish("ticks", json.dumps({"id": f"f{i}", "pad": filler}))
    for k in range(keys):
        pub.publish("ticks", json.dumps({"id": k, "ver": 0}))
    settle(pub)
    versions = [0] * keys
    stop = threading.Event()

    def storm() -> None:
        storm_client = AMPS.Client(f"storm-{time.monotonic_ns()}")
        storm_client.connect(broker.uri)
        storm_client.logon(5000)
        n = 0
        while not stop.is_set():
            k = n % keys
            versions[k] += 1
            storm_client.publish("ticks", json.dumps({"id": k, "ver": versions[k]}))
            n += 1
            if n % 20 == 0:
                time.sleep(0.002)  # a steady storm (<= ~10k/s) rather than flooding the 2-core box
        storm_client.publish_flush(10000)
        storm_client.close()

    thread = threading.Thread(target=storm, daemon=True)
    thread.start()
    subs = []
    try:
        for flt in (None, "/id < 10", None):  # staggered starts, one with a filter
            time.sleep(0.3)
            client, got = client_factory(broker.uri), make_collector()
            client.sow_and_subscribe(got, "ticks", filter=flt, batch_size=50, timeout=10000)
            subs.append((flt, got))
        for _flt, got in subs:
            wait_group_end(got)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(20)
    assert sum(versions) > 500, "the storm was too slow to test anything"
    settle(pub)
    for flt, got in subs:
        wanted = range(10) if flt else range(keys)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            snap, live = split(got)
            last = {json.loads(m["data"])["id"]: json.loads(m["data"])["ver"] for m in live}
            if all(last.get(k) == versions[k] for k in wanted):
                break
            time.sleep(0.2)
        snap, live = split(got)
        seen: dict[int, list[int]] = {}
        for m in snap + live:
            doc = json.loads(m["data"])
            if isinstance(doc["id"], int):
                seen.setdefault(doc["id"], []).append(doc["ver"])
        assert sorted(seen) == list(wanted)
        assert len([m for m in snap if str(json.loads(m["data"])["id"]).startswith("f")]) == (0 if flt else 2500)
        for k in wanted:
            vs = seen[k]
            assert vs == list(range(vs[0], versions[k] + 1)), f"key {k}: versions {vs[:5]}... not consecutive"
        assert any(len(vs) > 1 for vs in seen.values()), "no live update arrived"


# -- query options, topics without a SOW ---------------------------------------------------------------
def test_query_options_apply_to_the_query_only(broker, orders, client_factory, make_collector) -> None:
    pub, sub = client_factory(broker.uri), client_factory(broker.uri)
    for i in range(10):
        pub.publish(orders, json.dumps({"id": i, "v": i * 10}))
    settle(pub)
    got = make_collector()
    sub.sow_and_subscribe(got, orders, filter="/v >= 20", batch_size=3, top_n=4, order_by="/v DESC",
                          timeout=5000)
    wait_group_end(got)
    pub.publish(orders, json.dumps({"id": 0, "v": 25}))  # enters the filter: live, although not top 4
    pub.publish(orders, json.dumps({"id": 1, "v": 5}))  # never matched
    settle(pub, sub)
    snap, live = split(got)
    assert [json.loads(m["data"])["v"] for m in snap] == [90, 80, 70, 60]
    assert [json.loads(m["data"]) for m in live] == [{"id": 0, "v": 25}]


def test_topic_without_sow_returns_an_empty_group_then_subscribes(broker, client_factory, make_collector) -> None:
    pub, sub = client_factory(broker.uri), client_factory(broker.uri)
    pub.publish("chatter", '{"before":1}')
    settle(pub)
    got = make_collector()
    sub.sow_and_subscribe(got, "chatter", timeout=5000)
    wait_group_end(got)
    pub.publish("chatter", '{"after":1}')
    settle(pub, sub)
    commands = [m["command"] for m in got.messages]
    assert commands == ["group_begin", "group_end", "publish"]
    assert got.messages[-1]["data"] == '{"after":1}'


# -- replace ---------------------------------------------------------------------------------------------
def replace(client, collector, topic: str, flt: str, *, sub_id: str = "book") -> None:
    ends = len([m for m in collector.messages if m["command"] == "group_end"])
    cmd = (AMPS.Command("sow_and_subscribe").set_topic(topic).set_sub_id(sub_id).set_filter(flt)
           .set_options("replace,oof").set_batch_size(10))
    client.execute_async(cmd, collector)
    wait_group_end(collector, ends + 1)


def test_replace_sends_only_the_difference(broker, orders, client_factory, make_collector) -> None:
    pub, sub = client_factory(broker.uri), client_factory(broker.uri)
    for i in range(10):
        pub.publish(orders, json.dumps({"id": i, "v": i}))
    settle(pub)
    got = make_collector()
    cmd = (AMPS.Command("sow_and_subscribe").set_topic(orders).set_sub_id("book").set_filter("/v < 5")
           .set_options("oof").set_batch_size(10))
    sub.execute_async(cmd, got)
    wait_group_end(got)

    def after(n: int) -> list[tuple[str, int]]:
        """(command, v) of sow/publish/oof after the n-th group_end."""
        ends = [i for i, m in enumerate(got.messages) if m["command"] == "group_end"]
        start = ends[n - 1] + 1 if n else 0
        return [(m["command"], json.loads(m["data"])["v"]) for m in got.messages[start:]
                if m["command"] in ("sow", "publish", "oof")]

    assert sorted(v for _c, v in after(0)) == [0, 1, 2, 3, 4]
    replace(sub, got, orders, "/v < 8")  # widen: only 5, 6, 7 are sent
    settle(sub)
    assert sorted(after(1)) == [("sow", 5), ("sow", 6), ("sow", 7)]
    replace(sub, got, orders, "/v >= 3")  # shift: 8, 9 sent; 0, 1, 2 out of focus
    settle(sub)
    assert sorted(after(2)) == [("oof", 0), ("oof", 1), ("oof", 2), ("sow", 8), ("sow", 9)]
    assert [m["command"] for m in got.messages[-3:]] == ["oof", "oof", "oof"]  # after the group
    pub.publish(orders, json.dumps({"id": 1, "v": 11}))  # live continues with the new filter
    pub.publish(orders, json.dumps({"id": 4, "v": 2}))  # held since the first query: now out
    settle(pub, sub)
    assert after(3)[3:] == [("publish", 11), ("oof", 2)]
    assert {m["sub_id"] for m in got.messages if m["command"] in ("publish", "oof")} == {"book"}


# -- delta subscriptions ---------------------------------------------------------------------------------
def test_delta_subscribe_sends_only_changed_fields(broker, orders, client_factory, make_collector) -> None:
    pub, sub = client_factory(broker.uri), client_factory(broker.uri)
    pub.publish(orders, json.dumps({"id": 1, "sym": "IBM", "qty": 10, "px": 100.5}))
    settle(pub)
    got = make_collector()
    sub.delta_subscribe(got, orders, timeout=5000)
    pub.publish(orders, json.dumps({"id": 1, "sym": "IBM", "qty": 20, "px": 100.5}))
    pub.publish(orders, json.dumps({"id": 2, "sym": "MSFT", "qty": 5, "px": 30.0}))  # new: whole
    settle(pub, sub)
    assert [json.loads(d) for d in got.data()] == [
        {"id": 1, "qty": 20}, {"id": 2, "sym": "MSFT", "qty": 5, "px": 30.0}]


def test_sow_and_delta_subscribe(broker, orders, client_factory, make_collector) -> None:
    pub, sub = client_factory(broker.uri), client_factory(broker.uri)
    for i in (1, 2):
        pub.publish(orders, json.dumps({"id": i, "state": "open", "qty": 10, "note": "n"}))
    settle(pub)
    got = make_collector()
    sub.sow_and_delta_subscribe(got, orders, filter='/state = "open"', oof_enabled=True, timeout=5000)
    wait_group_end(got)
    pub.publish(orders, json.dumps({"id": 1, "state": "open", "qty": 15, "note": "n"}))
    pub.publish(orders, json.dumps({"id": 2, "state": "done", "qty": 10, "note": "n"}))  # oof: whole
    pub.publish(orders, json.dumps({"id": 2, "state": "open", "qty": 10, "note": "m"}))  # back: whole
    pub.publish(orders, json.dumps({"id": 2, "state": "open", "qty": 10, "note": "k"}))
    settle(pub, sub)
    snap, live = split(got)
    assert [json.loads(m["data"]) for m in snap] == [
        {"id": 1, "state": "open", "qty": 10, "note": "n"}, {"id": 2, "state": "open", "qty": 10, "note": "n"}]
    assert [(m["command"], json.loads(m["data"])) for m in live] == [
        ("publish", {"id": 1, "qty": 15}),
        ("oof", {"id": 2, "state": "done", "qty": 10, "note": "n"}),
        ("publish", {"id": 2, "state": "open", "qty": 10, "note": "m"}),
        ("publish", {"id": 2, "note": "k"}),
    ]
