"""broker_messages_delivered_total counts paginated deliveries too, so the per-topic counters add up to
it, as docs/metrics.md promises (issue 14: a paginated window's publishes and oofs were counted per
topic only)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import AMPS
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.process import BrokerProcess

SOW = """<Topic><Name>rows</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability></Topic>"""


def delivered(port: int) -> tuple[float, dict[str, float]]:
    """broker_messages_delivered_total and broker_topic_messages_delivered_total by topic."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    total, by_topic = 0.0, {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "broker_messages_delivered_total":
                total = s.value
            elif s.name == "broker_topic_messages_delivered_total":
                by_topic[s.labels["topic"]] = s.value
    return total, by_topic


def test_paginated_deliveries_are_in_the_total(tmp_path: Path, client_factory, make_collector) -> None:
    broker = BrokerProcess.from_xml(tmp_path, admin=True, sow=SOW).start()
    try:
        pub, sub = client_factory(broker.uri), client_factory(broker.uri)
        for i in (1, 2, 5):
            pub.publish("rows", json.dumps({"id": i}))
        pub.publish_flush(5000)
        page = make_collector()
        cmd = AMPS.Command("sow_and_subscribe").set_topic("rows").set_sub_id("page").set_top_n(2)
        cmd.set_options("skip_n=1,oof").set_order_by("/id").set_batch_size(10)
        sub.execute_async(cmd, page)
        assert page.wait_for(1, command="group_end")
        plain = make_collector()
        sub.subscribe(plain, "ticks")
        pub.publish("rows", json.dumps({"id": 4}))  # into the window: publish 4, oof 5
        pub.publish("ticks", json.dumps({"n": 1}))  # a plain subscription: one delivery
        pub.publish_flush(5000)
        assert page.wait_for(1, command="oof") and page.wait_for(1, command="publish")
        assert plain.wait_for(1, command="publish")
        deadline = time.monotonic() + 15  # statistics are sampled once per Admin Interval
        while True:
            total, by_topic = delivered(broker.admin_port)
            if by_topic.get("rows") == 2 and sum(by_topic.values()) == 3:
                break
            assert time.monotonic() < deadline, f"delivered per topic: {by_topic}"
            time.sleep(0.1)
        assert total == sum(by_topic.values()) == 3
    finally:
        broker.stop()
