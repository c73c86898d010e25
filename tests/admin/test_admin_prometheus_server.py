"""A real Prometheus scrapes the Admin server and sees the values the statistics source handed out."""

from __future__ import annotations

import pytest
import trio

from broker.admin import serve_admin

pytestmark = pytest.mark.timeout(60)


async def test_prometheus_scrapes_broker_metrics(nursery: trio.Nursery, source, prometheus) -> None:
    port = await nursery.start(serve_admin, "127.0.0.1", 0, source)
    server = prometheus([f"127.0.0.1:{port}"])

    targets = await server.wait_targets_up(timeout=20)
    assert targets[0]["scrapeUrl"] == f"http://127.0.0.1:{port}/metrics"
    assert source.served, "Prometheus reported the target up without scraping it"

    # Freeze the source, then wait for a scrape that saw the frozen values.
    source.frozen = True
    frozen = source.current
    await server.wait_for_value(
        "broker_messages_received_total", float(frozen.counters.messages_received), timeout=20
    )
    assert frozen.counters.messages_received > 0

    labelled = await server.query('broker_topic_messages_received_total{topic="orders"}')
    assert float(labelled[0]["value"][1]) == frozen.topics["orders"].messages_received

    latency_count = await server.query("broker_delivery_latency_seconds_count")
    assert float(latency_count[0]["value"][1]) == frozen.latency.count

    info = await server.query("broker_instance_info")
    assert info[0]["metric"]["name"] == "synthetic"
    assert info[0]["metric"]["version"] == "9.9.9"
