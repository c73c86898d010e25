"""Configured filter limits (``<MaxFilterLength>``, ``<MaxFilterDepth>``) and the Prometheus count of filter
evaluation errors, with the official AMPS client (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import AMPS
import pytest

from broker.testing.admin import fresh_get

PLUGIN = Path(__file__).resolve().parents[1] / "fixtures" / "plugins" / "fixture_modules_plugin.py"

LIMITS = "<MaxFilterLength>200</MaxFilterLength><MaxFilterDepth>3</MaxFilterDepth>"


def test_configured_filter_limits_refuse_longer_and_deeper_filters(broker_factory, client_factory,
                                                                    make_collector) -> None:
    broker = broker_factory(extra=LIMITS)
    client, pub = client_factory(broker.uri), client_factory(broker.uri)
    too_long = " OR ".join(f"/a = {i}" for i in range(30))
    assert len(too_long) > 200
    with pytest.raises(AMPS.BadFilterException):
        client.subscribe(lambda m: None, "feed", filter=too_long, timeout=5000)
    assert "over the limit of 200 (<MaxFilterLength>" in broker.log()
    with pytest.raises(AMPS.BadFilterException):
        client.subscribe(lambda m: None, "feed", filter="((((/a = 1))))", timeout=5000)
    assert "nests more than 3 levels deep (<MaxFilterDepth>)" in broker.log()
    # At the limits the filters work.
    got = make_collector()
    at_limit = " OR ".join(f"/a = {i}" for i in range(19))
    assert len(at_limit) <= 200
    client.subscribe(got, "feed", filter=at_limit, timeout=5000)
    client.subscribe(got, "feed", filter="(((/a = 100)))", timeout=5000)
    for a in (5, 50, 100):
        pub.publish("feed", json.dumps({"a": a}))
    got.wait_for(2, timeout=30)
    assert sorted(got.data()) == ['{"a": 100}', '{"a": 5}']


def test_filter_errors_are_counted_and_match_nothing(broker_factory, client_factory, make_collector) -> None:
    """A plugin filter function that raises on one message: that message is NULL for the filter (no match),
    the next one is evaluated normally, and broker_filter_errors_total{kind="function"} counts it."""
    broker = broker_factory(admin=True, extra=f"<Modules><Module><Name>fixture</Name><Library>{PLUGIN}</Library>"
                                              "</Module></Modules>")
    client, pub = client_factory(broker.uri), client_factory(broker.uri)
    got, everything = make_collector(), make_collector()
    client.subscribe(got, "feed", filter="STRICT_INT(/a) = 1", timeout=5000)
    client.subscribe(everything, "feed", timeout=5000)
    pub.publish("feed", json.dumps({"a": "not a number"}))
    pub.publish("feed", json.dumps({"a": "1"}))
    assert got.wait_for(1, timeout=30) and got.data() == ['{"a": "1"}']
    everything.wait_for(2, timeout=30)
    assert everything.data() == ['{"a": "not a number"}', '{"a": "1"}']  # the publisher's messages all went out
    _, metrics = fresh_get(broker.admin_port)
    lines = [line for line in metrics.decode().splitlines() if line.startswith("broker_filter_errors_total")]
    assert lines == ['broker_filter_errors_total{kind="evaluation"} 0.0', 'broker_filter_errors_total{kind="function"} 1.0']
