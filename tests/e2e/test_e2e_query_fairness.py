"""Large SOW queries in progress stall no one (issue 17, acceptance 2), with the official AMPS client.

While one client streams a whole 20,000-record topic, another runs OrderBy with top_n over it and a third
runs a filter that matches nothing, a publisher sends an ordered sequence with persisted acks to a
subscriber. The test checks order and completeness (every publish acknowledged, every message delivered in
order, every query complete and correct), not time: the latency figures come from ``python -m bench.fairness``.
"""

from __future__ import annotations

import json
import threading

import AMPS
import pytest

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
