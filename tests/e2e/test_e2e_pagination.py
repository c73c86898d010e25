"""Paginated sow_and_subscribe (top_n + skip_n) (issue 5, acceptance 3).

The AMPS manual's example first, through the official client: records with ids 1, 2 and 5, a window of
top_n=2, skip_n=1 ordered by /id (ids 2 and 5); publishing id 4 publishes 4 and puts 5 out of focus.
Then the window's other moves, and, in process, a model check of windows against a from-scratch slice
and the release of window state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import AMPS
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.config import load_config
from broker.engine.pagination import SortedEntries
from broker.engine.sow_subscribe import start_sow
from broker.server.kernel import Broker, build_broker
from broker.sow.record import SowRecord
from broker.stats.snapshot import PaginationStats
from broker.testing.clients import Delivered, RecordingClient
from broker.testing.process import config_xml

TOPIC = """
<Topic><Name>rows</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
"""


def paginated(client, collector, *, top_n: int, skip_n: int, order_by: str | None = "/id", oof: bool = True,
              filter: str | None = None, sub_id: str = "page", replace: bool = False) -> None:
    """Place a paginated sow_and_subscribe and wait for its snapshot."""
    cmd = AMPS.Command("sow_and_subscribe").set_topic("rows").set_sub_id(sub_id).set_batch_size(10)
    cmd.set_top_n(top_n)
    options = [f"skip_n={skip_n}"] + (["oof"] if oof else []) + (["replace"] if replace else [])
    cmd.set_options(",".join(options))
    if order_by:
        cmd.set_order_by(order_by)
    if filter:
        cmd.set_filter(filter)
    ends = len([m for m in collector.messages if m["command"] == "group_end"])
    client.execute_async(cmd, collector)
    assert len(collector.wait_for(ends + 1, command="group_end")) == ends + 1


def settle(*clients) -> None:
    """Flush each client in turn: the first's publishes are applied, the others received their effect."""
    for c in clients:
        c.publish_flush(5000)


def events(collector, start: int = 0) -> list[tuple[str, int]]:
    """(command, id) of the messages after the first group_end (or from ``start``)."""
    msgs = collector.messages
    end = next(i for i, m in enumerate(msgs) if m["command"] == "group_end")
    return [(m["command"], json.loads(m["data"])["id"]) for m in msgs[max(end + 1, start):]
            if m["command"] in ("publish", "oof")]


def sow_ids(collector) -> list[int]:
    return [json.loads(m["data"])["id"] for m in collector.messages if m["command"] == "sow"]


@pytest.fixture
def rows(broker_factory):
    return broker_factory(sow=TOPIC)


def test_manual_example_new_record_enters_window(rows, client_factory, make_collector) -> None:
    pub, sub = client_factory(rows.uri), client_factory(rows.uri)
    for i in (1, 2, 5):
        pub.publish("rows", json.dumps({"id": i}))
    settle(pub)
    got = make_collector()
    paginated(sub, got, top_n=2, skip_n=1)
    assert sow_ids(got) == [2, 5]
    pub.publish("rows", json.dumps({"id": 4}))
    settle(pub)
    assert events(got) == [("publish", 4), ("oof", 5)]
    oof = [m for m in got.messages if m["command"] == "oof"][0]
    assert oof["reason"] == "match" and oof["sub_id"] == "page"


def test_window_moves(rows, client_factory, make_collector) -> None:
    pub, sub, quiet = client_factory(rows.uri), client_factory(rows.uri), client_factory(rows.uri)
    for i in (10, 20, 30, 40, 50, 60):
        pub.publish("rows", json.dumps({"id": i, "rank": i}))
    settle(pub, sub)
    got, no_oof = make_collector(), make_collector()
    paginated(sub, got, top_n=2, skip_n=1, order_by="/rank DESC")  # ranks 50, 40
    paginated(quiet, no_oof, top_n=2, skip_n=1, order_by="/rank DESC", oof=False)
    assert sow_ids(got) == [50, 40] and sow_ids(no_oof) == [50, 40]
    pub.publish("rows", json.dumps({"id": 20, "rank": 21}))  # outside the window: nothing
    pub.publish("rows", json.dumps({"id": 40, "rank": 41}))  # in place: an update
    pub.sow_delete("rows", "/id = 50", 5000)  # leaves: oof deleted, 30 is pulled in
    pub.publish("rows", json.dumps({"id": 60, "rank": 5}))  # from before the window to the end:
    settle(pub, sub, quiet)  # the window shifts up: 40 out (oof), 30 stays, 20 in
    assert events(got) == [("publish", 40), ("oof", 50), ("publish", 30), ("oof", 40), ("publish", 20)]
    reasons = [m["reason"] for m in got.messages if m["command"] == "oof"]
    assert reasons == ["deleted", "match"]
    assert events(no_oof) == [("publish", 40), ("publish", 30), ("publish", 20)]
    # What a fresh query with the same window returns now.
    fresh = make_collector()
    paginated(pub, fresh, top_n=2, skip_n=1, order_by="/rank DESC", sub_id="fresh")
    assert sow_ids(fresh) == [30, 20]


def test_window_by_sow_key_and_filter(rows, client_factory, make_collector) -> None:
    pub, sub = client_factory(rows.uri), client_factory(rows.uri)
    for i in range(8):
        pub.publish("rows", json.dumps({"id": i, "odd": i % 2}))
    settle(pub)
    keys = {json.loads(m.get_data())["id"]: m.get_sow_key()
            for m in pub.sow("rows", timeout=5000) if m.get_command() == "sow"}
    evens = sorted((keys[i], i) for i in range(0, 8, 2))
    got = make_collector()
    paginated(sub, got, top_n=2, skip_n=1, order_by=None, filter="/odd = 0")  # SowKey order
    assert sow_ids(got) == [evens[1][1], evens[2][1]]
    pub.publish("rows", json.dumps({"id": evens[1][1], "odd": 1}))  # leaves the filter
    settle(pub, sub)
    assert events(got) == [("oof", evens[1][1]), ("publish", evens[3][1])]


def test_replace_pages_through(rows, client_factory, make_collector) -> None:
    pub, sub = client_factory(rows.uri), client_factory(rows.uri)
    for i in range(1, 8):
        pub.publish("rows", json.dumps({"id": i}))
    settle(pub)
    got = make_collector()
    paginated(sub, got, top_n=3, skip_n=0)
    assert sow_ids(got) == [1, 2, 3]
    paginated(sub, got, top_n=3, skip_n=2, replace=True)  # next page, overlapping by one
    assert sow_ids(got) == [1, 2, 3, 4, 5]  # only the records not held already
    got.wait_for(2, command="oof")  # the records that left the window: they follow the page's group_end
    assert events(got) == [("oof", 1), ("oof", 2)]
    pub.publish("rows", json.dumps({"id": 0}))  # shifts the window to 2, 3, 4: 5 out, 2 in
    settle(pub, sub)
    assert events(got)[2:] == [("oof", 5), ("publish", 2)]


# -- in process: window state against a from-scratch answer ---------------------------------------------
class FakeClient(RecordingClient):
    """What the engine needs of a session; records ``(command, sids, data)`` of what it was sent."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker.services.message_type("json"), "fake")

    def record(self, delivered: Delivered) -> None:
        self.sent.append((delivered.command, delivered.sids, json.loads(delivered.body)))


@pytest.fixture(scope="module")
def engine_broker(tmp_path_factory) -> Broker:
    path = Path(tmp_path_factory.mktemp("pagination")) / "config.xml"
    path.write_text(config_xml(port=1, sow=TOPIC))
    return build_broker(load_config(path))


def open_window(engine, client, sub_id: str, top_n: int, skip_n: int, flt: str | None = None) -> list[dict]:
    header = {"topic": "rows", "sub_id": sub_id, "order_by": "/v DESC", "top_n": top_n,
              "options": f"skip_n={skip_n},oof", "filter": flt}
    start = start_sow(engine, client, header, subscribe=True)
    try:
        return [json.loads(r.data) for _t, r, _m in start.plan.records()]
    finally:
        start.plan.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.integers(0, 11), st.one_of(st.none(), st.integers(0, 6))), max_size=40),
       top_n=st.integers(1, 4), skip_n=st.integers(0, 3))
def test_window_matches_a_fresh_query_after_every_change(engine_broker, ops, top_n, skip_n) -> None:
    engine = engine_broker.engine
    sow = engine.sow_topics["rows"]
    sow.delete_matching(None)
    client = FakeClient(engine_broker)
    for i in range(6):
        engine.publish(client, {"topic": "rows"}, json.dumps({"id": i, "v": i}).encode())
    held = {r["id"]: r for r in open_window(engine, client, "w", top_n, skip_n, "/v > 0")}
    try:
        for rid, v in ops:  # v None: delete
            client.sent.clear()
            if v is None:
                engine.sow_delete(client, {"topic": "rows", "filter": f"/id = {rid}"}, b"")
            else:
                engine.publish(client, {"topic": "rows"}, json.dumps({"id": rid, "v": v}).encode())
            for command, _sids, data in client.sent:
                if command == "oof":
                    assert held.pop(data["id"], None) is not None, "oof for a record not held"
                else:
                    held[data["id"]] = data
            records = [json.loads(SowRecord.decode(k.decode(), v).data) for k, v in sow.storage.scan()]
            ranked = sorted((r for r in records if r["v"] > 0), key=lambda r: -r["v"])
            # ties in /v are broken by SowKey, so compare the window's size and the rank values
            expect = ranked[skip_n : skip_n + top_n]
            assert sorted(r["v"] for r in held.values()) == sorted(r["v"] for r in expect)
            assert all(held[r["id"]] == r for r in expect if r["id"] in held)
    finally:
        engine.unsubscribe(client, "w")
    assert engine.router.windows.statistics().result_sets == 0


def test_windows_share_one_result_set_and_release_it(engine_broker) -> None:
    engine = engine_broker.engine
    engine.sow_topics["rows"].delete_matching(None)
    a, b = FakeClient(engine_broker), FakeClient(engine_broker)
    for i in range(50):
        engine.publish(a, {"topic": "rows"}, json.dumps({"id": i, "v": i}).encode())
    assert [r["v"] for r in open_window(engine, a, "p1", 5, 0)] == [49, 48, 47, 46, 45]
    assert [r["v"] for r in open_window(engine, b, "p2", 5, 5)] == [44, 43, 42, 41, 40]
    open_window(engine, b, "p3", 5, 0, flt="/v < 10")
    stats = engine.router.windows.statistics()
    assert stats == PaginationStats(paginated_subscriptions=3, result_sets=2, result_set_entries=60)
    # Per window: only its keys.
    assert all(len(s.window.keys) <= 5 for s in engine.router.subscriptions())
    engine.unsubscribe(a, "p1")
    assert engine.router.windows.statistics().result_sets == 2
    engine.disconnect(b)
    assert engine.router.windows.statistics() == PaginationStats(
        paginated_subscriptions=0, result_sets=0, result_set_entries=0)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=300), st.integers(2, 5))
def test_sorted_entries_is_a_sorted_list(ops, block) -> None:
    entries = SortedEntries(block=block)
    model: list[tuple[Any, str]] = []
    for add, n in ops:
        item = ((n % 7,), f"{n:04d}")
        if add and item not in model:
            model.append(item)
            model.sort()
            assert entries.add(item) == model.index(item)
        elif not add and item in model:
            assert entries.remove(item) == model.index(item)
            model.remove(item)
        assert list(entries) == model and len(entries) == len(model)
        assert entries.slice(2, 5) == model[2:5]
