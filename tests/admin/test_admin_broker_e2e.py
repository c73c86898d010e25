"""The real broker's Admin port: /metrics parsed with prometheus_client's parser moves by exactly the
work done through the official AMPS client, /amps.json has the instance tree, and a real Prometheus
server scrapes the broker (issue 7, acceptance 1-3 end to end)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import AMPS
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.process import BrokerProcess

SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>"""
TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""


@pytest.fixture
def admin_broker(tmp_path: Path):
    proc = BrokerProcess.from_xml(tmp_path, admin=True, sow=SOW, transaction_log=TXLOG).start()
    yield proc
    proc.stop()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The metrics of a sample taken after the call (statistics are sampled once per Admin/Interval)."""
    headers, body = fresh_get(port, "/metrics")
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    text = body.decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return values


def client(uri: str, name: str):
    c = AMPS.Client(name)
    c.connect(uri)
    c.logon()
    return c


def test_counters_move_by_exactly_the_work_done(admin_broker) -> None:
    before = scrape(admin_broker.admin_port)
    sub = client(admin_broker.uri, "metrics-sub")
    pub = client(admin_broker.uri, "metrics-pub")
    received = []
    sub.subscribe(lambda m: received.append(m), "orders")
    sub.subscribe(lambda m: received.append(m), "ticks", filter="/n > 4")
    sub2 = client(admin_broker.uri, "metrics-sub2")
    sub2.subscribe(lambda m: received.append(m), "orders")
    for i in range(10):
        pub.publish("orders", json.dumps({"id": i % 6, "q": i}))  # 6 inserts, 4 updates
        pub.publish("ticks", json.dumps({"n": i}))
    pub.publish_flush(5000)
    pub.sow_delete("orders", "/id < 2", 5000)
    after = scrape(admin_broker.admin_port)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("broker_messages_received_total") == 20
    assert delta("broker_messages_delivered_total") == 25  # 10 orders to 2 clients + 5 ticks with n > 4
    # One latency observation per message queued for a client, with the latency it had.
    assert delta("broker_delivery_latency_seconds_count") == 25
    assert 0 < delta("broker_delivery_latency_seconds_sum") < 25 * 5.0
    assert delta("broker_topic_messages_received_total", topic="orders") == 10
    assert after[("broker_sow_records", (("topic", "orders"),))] == 4
    assert delta("broker_sow_inserts_total", topic="orders") == 6
    assert delta("broker_sow_updates_total", topic="orders") == 4
    assert delta("broker_sow_deletes_total", topic="orders") == 2
    assert after[("broker_clients_connected", ())] == 3
    assert after[("broker_journal_last_sequence", ())] >= 10 + 2  # 10 publishes + 2 logged deletes
    sub.close()
    sub2.close()
    pub.close()


def test_pagination_gauges_follow_windows_and_their_shared_results(admin_broker) -> None:
    pub = client(admin_broker.uri, "page-pub")
    for i in range(10):
        pub.publish("orders", json.dumps({"id": i, "side": "buy" if i < 6 else "sell"}))
    pub.publish_flush(5000)
    subs = [client(admin_broker.uri, f"page-sub-{n}") for n in range(3)]
    done = []
    for n, (sub, flt) in enumerate(zip(subs, ["/side = 'buy'", "/side = 'buy'", None], strict=True)):
        cmd = (AMPS.Command("sow_and_subscribe").set_topic("orders").set_sub_id(f"w{n}").set_top_n(2)
               .set_options(f"skip_n={n}").set_order_by("/id"))
        if flt:
            cmd.set_filter(flt)
        got = []
        sub.execute_async(cmd, got.append)
        done.append(got)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(any(m.get_command() == "group_end" for m in g) for g in done):
        time.sleep(0.05)
    values = scrape(admin_broker.admin_port)
    assert values[("broker_paginated_subscriptions", ())] == 3
    # The two windows on the same filter and order share one sorted result (6 buys); the third has its own (10).
    assert values[("broker_pagination_result_sets", ())] == 2
    assert values[("broker_pagination_result_set_entries", ())] == 6 + 10
    subs[0].unsubscribe("w0")
    subs[2].close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and scrape(admin_broker.admin_port)[("broker_paginated_subscriptions", ())] > 1:
        time.sleep(0.05)
    values = scrape(admin_broker.admin_port)
    assert values[("broker_paginated_subscriptions", ())] == 1
    assert values[("broker_pagination_result_sets", ())] == 1
    assert values[("broker_pagination_result_set_entries", ())] == 6
    for c in (pub, subs[0], subs[1]):
        c.close()


def test_amps_json_tree_and_404(admin_broker) -> None:
    c = client(admin_broker.uri, "tree-client")
    c.publish("orders", '{"id":1}')
    c.publish_flush(5000)
    tree = json.loads(fresh_get(admin_broker.admin_port, "/amps.json")[1])
    instance = tree["amps"]["instance"]
    assert instance["name"] == "test-broker"
    assert any(cl["client_name"] == "tree-client" for cl in instance["clients"])
    assert any(s["id"] == "orders" for s in instance["sow"])
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{admin_broker.admin_port}/no/such/path", timeout=5)
    assert err.value.code == 404
    c.close()


async def test_real_prometheus_scrapes_the_broker(admin_broker, prometheus) -> None:
    pub = client(admin_broker.uri, "prom-pub")
    for i in range(25):
        pub.publish("orders", json.dumps({"id": i}))
    pub.publish_flush(5000)
    server = prometheus([f"127.0.0.1:{admin_broker.admin_port}"])
    targets = await server.wait_targets_up()
    assert targets[0]["health"] == "up"
    await server.wait_for_value('broker_sow_records{topic="orders"}', 25)
    await server.wait_for_value("broker_messages_received_total", 25)
    pub.close()


def test_byte_counters_never_go_down_when_clients_leave(admin_broker) -> None:
    sub = client(admin_broker.uri, "bytes-sub")
    pub = client(admin_broker.uri, "bytes-pub")
    got = []
    sub.subscribe(lambda m: got.append(m), "bytes")
    for i in range(50):
        pub.publish("bytes", json.dumps({"i": i, "pad": "x" * 100}))
    pub.publish_flush(5000)
    deadline = time.monotonic() + 10
    while len(got) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    before = scrape(admin_broker.admin_port)[("broker_bytes_sent_total", ())]
    assert before > 50 * 100
    sub.close()
    pub.close()
    time.sleep(0.5)
    after = scrape(admin_broker.admin_port)[("broker_bytes_sent_total", ())]
    assert after >= before
