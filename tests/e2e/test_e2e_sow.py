"""State of the World through the official AMPS client over TCP (issue 4): upserts, restarts, refused
writes, queries (topic regex, filter, SowKeys, QueryId, BatchSize, top_n, skip_n, OrderBy, stats, record
headers, atomicity), sow_delete and delta_publish."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator

import AMPS
import pytest

from broker.testing.client import sow_stream
from broker.testing.process import BrokerProcess

SOW = """
<Topic><Name>upsert</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
<Topic><Name>strict</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>book</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
<Topic><Name>book.eu</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>plain</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>atomic</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>del</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>delta</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
<Topic><Name>wide</Name><MessageType>json</MessageType><Key>/id</Key><FileName>./sow/%n.sow</FileName></Topic>
"""
TXLOG = """
<JournalDirectory>./journal</JournalDirectory>
<FlushInterval>10ms</FlushInterval>
<Topic><Name>book</Name><MessageType>json</MessageType></Topic>
"""

# 30 orders: dates repeat (ties for OrderBy), customers interleave.
BOOK = [
    {"id": i, "orderDate": f"2024-01-{1 + i % 5:02d}", "customerName": f"c{(i * 7) % 11:02d}",
     "qty": i * 10, "region": "eu" if i % 3 == 0 else "us"}
    for i in range(30)
]


@pytest.fixture(scope="module")
def sow_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the query tests (each test uses its own topics)."""
    proc = BrokerProcess.from_xml(tmp_path_factory.mktemp("sow"), sow=SOW, transaction_log=TXLOG).start()
    client = AMPS.Client("book-loader")
    client.connect(proc.uri)
    client.logon(5000)
    for row in BOOK:
        client.publish("book", json.dumps(row), correlation_id=f"Y29y{row['id']}")
    client.publish("book.eu", json.dumps({"id": 100, "region": "eu"}))
    client.publish("book.unsowed", json.dumps({"id": 200}))  # matches ^book but has no SOW
    client.publish_flush(5000)
    client.close()
    yield proc
    proc.stop()


def as_dict(m: AMPS.Message) -> dict:
    return {
        "command": m.get_command(), "topic": m.get_topic(), "data": m.get_data(), "sow_key": m.get_sow_key(),
        "timestamp": m.get_timestamp(), "bookmark": m.get_bookmark(), "correlation_id": m.get_correlation_id(),
        "query_id": m.get_query_id(), "batch_size": m.get_batch_size(), "ack_type": m.get_ack_type(),
        "records_returned": m.get_records_returned(), "topic_matches": m.get_topic_matches(),
        "status": m.get_status(), "reason": m.get_reason(),
    }


def query(client: AMPS.Client, topic: str, *, filter: str | None = None, options: str | None = None,
          top_n: int | None = None, order_by: str | None = None, batch_size: int | None = None,
          sow_keys: str | None = None, query_id: str | None = None, stats: bool = False) -> list[dict]:
    """Run a sow with the official Command API; every message of the stream, as dicts."""
    return [as_dict(m) for m in sow_stream(client, topic, filter=filter, options=options, top_n=top_n,
                                           order_by=order_by, batch_size=batch_size, sow_keys=sow_keys,
                                           query_id=query_id, ack_types=("stats",) if stats else ())]


def records(messages: list[dict]) -> list[dict]:
    return [json.loads(m["data"]) for m in messages if m["command"] == "sow"]


def ids(messages: list[dict]) -> list[int]:
    return [r["id"] for r in records(messages)]


# -- upsert, durability, refused writes -----------------------------------------------------------------
def test_publish_upserts_by_sow_key(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    c.publish("upsert", '{"id":1,"v":"a"}')
    c.publish("upsert", '{"id":2,"v":"b"}')
    c.publish("upsert", '{"id":1,"v":"c"}')
    c.publish("upsert", '{"id":"1","v":"d"}')  # "1" and 1 are the same key (AMPS keys on the field's text)
    c.publish_flush(5000)
    got = query(c, "upsert")
    assert sorted(records(got), key=lambda r: str(r["id"])) == [{"id": "1", "v": "d"}, {"id": 2, "v": "b"}]
    assert len({m["sow_key"] for m in got if m["command"] == "sow"}) == 2


def test_records_survive_restart_and_crash(broker_factory, client_factory) -> None:
    b = broker_factory(sow="<Topic><Name>keep</Name><MessageType>json</MessageType><Key>/id</Key>"
                           "<FileName>./sow/%n.sow</FileName></Topic>")
    c = client_factory(b.uri)
    for i in range(50):
        c.publish("keep", json.dumps({"id": i % 20, "v": i}))
    c.publish_flush(5000)
    before = {m["sow_key"]: m["data"] for m in query(c, "keep") if m["command"] == "sow"}
    assert len(before) == 20
    c.close()
    b.stop()
    b.start()
    c = client_factory(b.uri)
    after = {m["sow_key"]: m["data"] for m in query(c, "keep") if m["command"] == "sow"}
    assert after == before
    c.publish("keep", '{"id":99,"v":"x"}')
    c.publish_flush(5000)
    c.close()
    b.kill()  # a crash: LevelDB's own log brings the last writes back
    b.start()
    c = client_factory(b.uri)
    survived = records(query(c, "keep"))
    assert len(survived) == 21 and {"id": 99, "v": "x"} in survived


def test_unparseable_or_keyless_publish_fires_failed_write_and_stores_nothing(sow_broker) -> None:
    client = AMPS.Client(f"store-{time.monotonic_ns()}")
    client.set_publish_store(AMPS.MemoryPublishStore())
    failed: list[tuple[str | None, str]] = []
    client.set_failed_write_handler(lambda m, reason: failed.append((m.get_data() if m else None, reason)))
    client.connect(sow_broker.uri)
    client.logon(5000)
    try:
        client.publish("strict", "this is not json")
        client.publish("strict", '{"no_id":1}')
        client.publish("strict", '{"id":null}')
        client.publish("strict", '{"id":7,"ok":true}')
        client.publish_flush(5000)  # every stored publish was acknowledged, failed or not
        deadline = time.monotonic() + 5
        while len(failed) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert failed == [("this is not json", "parse error"), ('{"no_id":1}', "bad sow key"),
                          ('{"id":null}', "bad sow key")]
        # Other tests on this broker may store their own ids in "strict"; none of this test's refusals is stored.
        stored = records(query(client, "strict"))
        assert [r for r in stored if r.get("id") in (7, None) or "no_id" in r] == [{"id": 7, "ok": True}]
    finally:
        client.close()


def test_refused_publish_without_store_is_logged(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    c.publish("strict", '{"id": 8')  # truncated JSON, no publish store: nothing comes back
    c.publish("strict", '{"id":9}')
    c.publish_flush(5000)
    assert 8 not in ids(query(c, "strict"))
    assert 9 in ids(query(c, "strict"))
    log = sow_broker.log()
    assert re.search(r"publish failed: invalid json message", log), log[-2000:]


# -- queries ----------------------------------------------------------------------------------------
def test_filter_and_record_headers(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    got = query(c, "book", filter="/region = 'eu' AND /qty >= 100")
    expect = [r for r in BOOK if r["region"] == "eu" and r["qty"] >= 100]
    assert sorted(ids(got)) == [r["id"] for r in expect]
    rows = [m for m in got if m["command"] == "sow"]
    for m in rows:
        body = json.loads(m["data"])
        assert m["topic"] == "book"
        assert m["correlation_id"] == f"Y29y{body['id']}"
        assert re.fullmatch(r"\d{8}T\d{6}\.\d{6}Z", m["timestamp"]), m["timestamp"]
        assert re.fullmatch(r"\d+\|\d+\|", m["bookmark"]), m["bookmark"]  # the topic is logged
        assert m["sow_key"].isdigit()
    assert len({m["sow_key"] for m in rows}) == len(rows)
    # the same record's key is stable across queries and equals the key delivered to subscribers
    again = {json.loads(m["data"])["id"]: m["sow_key"] for m in query(c, "book") if m["command"] == "sow"}
    assert all(again[json.loads(m["data"])["id"]] == m["sow_key"] for m in rows)


def test_unlogged_topic_records_have_no_bookmark(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    c.publish("plain", '{"id":1}', correlation_id="eHl6")
    c.publish("plain", '{"id":2}')
    c.publish_flush(5000)
    rows = [m for m in query(c, "plain") if m["command"] == "sow"]
    assert [m["bookmark"] for m in rows] == ["", ""]
    # the second record must not inherit the first one's correlation id (fields carry over in a batch)
    assert sorted(m["correlation_id"] for m in rows) == ["", "eHl6"]


def test_regex_topic_queries_every_matching_sow_topic(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    got = query(c, "^book", filter="/region = 'eu'")
    topics = {m["topic"] for m in got if m["command"] == "sow"}
    assert topics == {"book", "book.eu"}  # book.unsowed has no SOW: not part of a query
    assert sorted(ids(got)) == sorted([r["id"] for r in BOOK if r["region"] == "eu"] + [100])


def test_sow_keys_restrict_the_query(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    keys = {json.loads(m["data"])["id"]: m["sow_key"] for m in query(c, "book") if m["command"] == "sow"}
    wanted = f"{keys[3]},{keys[17]},12345"  # an unknown key matches nothing
    assert sorted(ids(query(c, "book", sow_keys=wanted))) == [3, 17]
    assert ids(query(c, "book", sow_keys=wanted, filter="/qty > 100")) == [17]


def test_query_id_is_echoed_on_group_begin_and_end(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    got = query(c, "book", query_id="my-query-1", top_n=2)
    assert [m["command"] for m in got] == ["group_begin", "sow", "sow", "group_end"]
    assert {m["query_id"] for m in got} == {"my-query-1"}


def test_batch_size_groups_records_per_frame(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    for size, expect in ((1, [1] * 30), (7, [7] * 28 + [2] * 2), (100, [30] * 30)):
        got = [m for m in query(c, "book", batch_size=size) if m["command"] == "sow"]
        assert [int(m["batch_size"]) for m in got] == expect, size
    with pytest.raises(AMPS.InvalidOptionsException):
        query(c, "book", batch_size=10001)


def test_server_default_batch_size_is_one(sow_broker) -> None:
    # The official client always sends batch_size, so the server default is checked on raw frames.
    sock = socket.create_connection(("127.0.0.1", sow_broker.port), timeout=5)
    try:
        send(sock, {"c": "logon", "cid": "l", "client_name": "raw-sow", "a": "processed"})
        send(sock, {"c": "sow", "cid": "q", "t": "book", "query_id": "q", "a": "processed,completed",
                    "filter": "/id < 3"})
        frames = read_until(sock, lambda h: h.get("a") == "completed")
    finally:
        sock.close()
    sow_frames = [(h, n) for h, n, _payload in frames if h.get("c") == "sow"]
    assert [n for _h, n in sow_frames] == [1, 1, 1]
    assert [h["batch_size"] for h, _n in sow_frames] == [1, 1, 1]


def test_top_n_skip_n_and_order_by(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    ordered = sorted(BOOK, key=lambda r: r["customerName"])  # stable: ties keep id (SowKey) order
    ordered = sorted(ordered, key=lambda r: r["orderDate"], reverse=True)
    got = records(query(c, "book", order_by="/orderDate DESC, /customerName ASC"))
    assert got == ordered
    # default ascending; ties keep the SowKey order, which is the order of a plain query
    plain = ids(query(c, "book"))
    by_date = sorted(plain, key=lambda i: BOOK[i]["orderDate"])
    assert ids(query(c, "book", order_by="/orderDate")) == by_date
    # top_n as the header (Command.set_top_n) and as an option; skip_n as an option
    assert ids(query(c, "book", order_by="/qty DESC", top_n=3)) == [29, 28, 27]
    assert ids(query(c, "book", order_by="/qty DESC", options="top_n=3,skip_n=2")) == [27, 26, 25]
    assert ids(query(c, "book", order_by="/qty", top_n=4, options="skip_n=28")) == [28, 29]
    assert len(ids(query(c, "book", top_n=5))) == 5
    with pytest.raises(AMPS.InvalidOptionsException):
        query(c, "book", options="skip_n=2")  # skip_n needs top_n
    with pytest.raises(AMPS.InvalidOrderByException):
        query(c, "book", order_by="/qty SIDEWAYS")


def test_skip_n_header_is_honoured(sow_broker) -> None:
    # The official client has no skip_n setter; other clients send a skip_n header, which works too.
    sock = socket.create_connection(("127.0.0.1", sow_broker.port), timeout=5)
    try:
        send(sock, {"c": "logon", "cid": "l", "client_name": "raw-skip", "a": "processed"})
        send(sock, {"c": "sow", "cid": "q", "t": "book", "query_id": "q", "a": "processed,completed",
                    "orderby": "/qty DESC", "top_n": 2, "skip_n": 1, "batch_size": 10})
        frames = read_until(sock, lambda h: h.get("a") == "completed")
    finally:
        sock.close()
    bodies = [body for h, _n, body in frames_with_bodies(frames) if h.get("c") == "sow"]
    assert [json.loads(b)["id"] for b in bodies[0]] == [28, 27]


def test_stats_ack_counts_returned_and_matching_records(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    got = query(c, "book", filter="/region = 'us'", top_n=4, stats=True)
    stats = [m for m in got if m["command"] == "ack" and m["ack_type"] == "stats"]
    assert len(stats) == 1 and got[-1] is stats[0]
    n_us = sum(1 for r in BOOK if r["region"] == "us")
    assert (int(stats[0]["records_returned"]), int(stats[0]["topic_matches"])) == (4, n_us)
    ordered = query(c, "book", filter="/region = 'us'", top_n=4, order_by="/qty", stats=True)
    assert (int(ordered[-1]["records_returned"]), int(ordered[-1]["topic_matches"])) == (4, n_us)


def test_sow_on_a_topic_without_sow_is_invalid_topic(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    with pytest.raises(AMPS.InvalidTopicException):
        list(c.sow("book.unsowed", timeout=5000))
    with pytest.raises(AMPS.InvalidTopicException):
        query(c, "^nothing-like-this")
    assert len(ids(query(c, "book"))) == 30  # the connection carries on


def test_query_results_are_atomic_for_a_subscriber(sow_broker, client_factory) -> None:
    """Live messages published while a big query streams reach the querying client only after
    group_end. The subscriber reads slowly, so the server is still streaming the query (waiting on the
    client) when the publishes are applied; without the hold, they would be interleaved."""
    n_records, n_live = 6000, 300
    filler = "x" * 1500
    loader, sub, pub = (client_factory(sow_broker.uri) for _ in range(3))
    for i in range(n_records):
        loader.publish("atomic", json.dumps({"id": i, "pad": filler}))
    loader.publish_flush(10000)

    events: list[tuple[str, int]] = []
    began, ended = threading.Event(), threading.Event()

    def on_message(m: AMPS.Message) -> None:
        command = m.get_command()
        if command == "group_begin":
            began.set()
        elif command == "group_end":
            ended.set()
        elif command == "sow":
            time.sleep(0.0002)  # a slow consumer: the query waits on the socket
        data = m.get_data()
        events.append((command, json.loads(data)["id"] if data else -1))

    sub.subscribe(on_message, "atomic")
    sub.sow(on_message, "atomic", batch_size=50)
    assert began.wait(10)
    for j in range(n_live):
        pub.publish("atomic", json.dumps({"id": n_records + j, "live": True}))
    pub.publish_flush(10000)  # all live publishes applied by the server...
    overlapped = not ended.is_set()  # ...while the query was still being delivered
    assert ended.wait(30)
    deadline = time.monotonic() + 10
    while sum(1 for c, _ in events if c == "publish") < n_live and time.monotonic() < deadline:
        time.sleep(0.02)
    assert overlapped, "the publishes finished after the query: the test proved nothing; make the query bigger"
    commands = [c for c, _ in events]
    end = commands.index("group_end")
    live = [i for c, i in events if c == "publish"]
    assert live == list(range(n_records, n_records + n_live))
    assert "publish" not in commands[:end], "a live message arrived inside the query results"
    assert sorted(i for c, i in events if c == "sow") == list(range(n_records))


# -- sow_delete -------------------------------------------------------------------------------------
def test_sow_delete_by_filter_keys_and_data(sow_broker, client_factory) -> None:
    c = client_factory(sow_broker.uri)
    for i in range(10):
        c.publish("del", json.dumps({"id": i, "even": i % 2 == 0}))
    c.publish_flush(5000)
    keys = {json.loads(m["data"])["id"]: m["sow_key"] for m in query(c, "del") if m["command"] == "sow"}

    ack = c.sow_delete("del", "/even = true AND /id < 6", 5000)  # 0, 2, 4
    assert ack.get_ack_type() == "stats"
    assert (int(ack.get_matches()), int(ack.get_sow_deleted())) == (3, 3)

    ack = c.sow_delete_by_keys("del", f"{keys[1]},{keys[3]},{keys[0]},999", 5000)  # 0 is already gone
    assert (int(ack.get_matches()), int(ack.get_sow_deleted())) == (2, 2)

    ack = c.sow_delete_by_data("del", json.dumps({"id": 5, "whatever": 1}), 5000)
    assert (int(ack.get_matches()), int(ack.get_sow_deleted())) == (1, 1)

    ack = c.sow_delete("del", "/id > 100", 5000)
    assert (int(ack.get_matches()), int(ack.get_sow_deleted())) == (0, 0)
    assert sorted(ids(query(c, "del"))) == [6, 7, 8, 9]

    with pytest.raises(AMPS.InvalidTopicException):
        c.sow_delete("book.unsowed", "/id = 1", 5000)


# -- delta_publish ----------------------------------------------------------------------------------
def test_delta_publish_merges_and_delivers_the_merged_record(sow_broker, client_factory, make_collector) -> None:
    c = client_factory(sow_broker.uri)
    live = make_collector()
    c.subscribe(live, "delta")
    c.publish("delta", json.dumps({"id": 1, "name": "a", "addr": {"city": "Paris", "zip": "75001"}, "tags": [1, 2]}))
    c.delta_publish("delta", json.dumps({"id": 1, "addr": {"zip": "75002"}, "tags": [3], "qty": 5}))
    c.delta_publish("delta", json.dumps({"id": 2, "name": "new"}))  # a delta to a missing key inserts it
    c.publish_flush(5000)
    merged = {"id": 1, "name": "a", "addr": {"city": "Paris", "zip": "75002"}, "tags": [3], "qty": 5}
    stored = {r["id"]: r for r in records(query(c, "delta"))}
    assert stored == {1: merged, 2: {"id": 2, "name": "new"}}
    live.wait_for(3)
    assert [json.loads(d) for d in live.data()] == [
        {"id": 1, "name": "a", "addr": {"city": "Paris", "zip": "75001"}, "tags": [1, 2]},
        merged,
        {"id": 2, "name": "new"},
    ]


def test_integers_wider_than_64_bits_are_distinct_keys_and_stay_exact(sow_broker, client_factory,
                                                                       make_collector) -> None:
    """Ids that differ only past a float's precision: two records, each found by its own filter, merged exactly."""
    a, b = 123456789012345678901234567890, 123456789012345678901234567891
    c = client_factory(sow_broker.uri)
    live = make_collector()
    c.subscribe(live, "wide", f"/id = {b}")
    c.publish("wide", f'{{"id": {a}, "v": 1}}')
    c.publish("wide", f'{{"id": {b}, "v": 2}}')
    c.delta_publish("wide", f'{{"id": {b}, "w": 3}}')
    c.publish_flush(5000)
    assert sorted(m["data"] for m in query(c, "wide") if m["command"] == "sow") == [
        f'{{"id": {a}, "v": 1}}', f'{{"id":{b},"v":2,"w":3}}']
    assert [m["data"] for m in query(c, "wide", filter=f"/id = {a}") if m["command"] == "sow"] == [
        f'{{"id": {a}, "v": 1}}']
    live.wait_for(2)
    assert live.data() == [f'{{"id": {b}, "v": 2}}', f'{{"id":{b},"v":2,"w":3}}']


# -- raw frames (for what the official client cannot send) -------------------------------------------
def send(sock: socket.socket, header: dict, body: bytes = b"") -> None:
    payload = json.dumps(header, separators=(",", ":")).encode() + body
    sock.sendall(len(payload).to_bytes(4, "big") + payload)


def read_until(sock: socket.socket, done: Callable[[dict], bool], timeout: float = 10.0) -> list[tuple[dict, int, bytes]]:
    """Frames as (outer header, record count or 0, raw payload) until ``done(header)``."""
    buf = b""
    out = []
    deadline = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + n:
                break
            payload, buf = buf[4 : 4 + n], buf[4 + n :]
            end = payload.index(b"}") + 1
            header = json.loads(payload[:end])
            count = payload[end:].count(b'"l":') if header.get("c") == "sow" else 0
            out.append((header, count, payload[end:]))
            if done(header):
                return out
    raise AssertionError(f"no final frame within {timeout}s; got {[h for h, _c, _p in out]}")


def frames_with_bodies(frames: list) -> Iterator[tuple[dict, int, list[bytes]]]:
    """Split each sow frame's payload into its records' data."""
    for header, count, payload in frames:
        bodies = []
        rest = payload
        while rest:
            end = rest.index(b"}") + 1
            inner = json.loads(rest[:end])
            length = int(inner["l"])
            bodies.append(rest[end : end + length])
            rest = rest[end + length :]
        yield header, count, bodies

