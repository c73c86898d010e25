"""The web console's data and files (issue 19): rates between samples, subscriptions per client, journal
files, and the static files served at / (the browser test is tests/node/test_console_browser.py)."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from broker.admin import jsclient
from broker.admin.console import ConsoleView
from broker.admin.static_files import console_file
from broker.stats.snapshot import (
    ActionOutcomes,
    ActionStats,
    ClientStats,
    SowTopicStats,
    SubscriptionInfo,
    TopicFlow,
    empty_snapshot,
)
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(60)


def test_rates_are_counter_deltas_over_the_time_between_samples() -> None:
    view = ConsoleView([{"name": "ws", "port": 9008}])
    first = replace(empty_snapshot(), topics={"orders": TopicFlow(100, 400)},
                    sow={"orders": SowTopicStats(records=7, inserts=7)})
    state = view.build(first, taken_at=10.0)
    assert state["totals"]["in_per_sec"] == 0.0 and state["interval"] is None, "no rate from one sample"
    second = replace(
        first,
        topics={"orders": TopicFlow(150, 600)},
        counters=replace(first.counters, messages_received=50, messages_delivered=200),
        clients=(ClientStats(id="client-1", client_name="alice", remote="127.0.0.1:1", connected_at=1.0,
                             messages_in=0, messages_out=0, bytes_in=0, bytes_out=0, subscriptions=1,
                             queued_bytes=42),),
        subscription_details=(SubscriptionInfo(client="client-1", sub_id="s1", topic="orders", filter="/a = 1",
                                               kind="sow_and_subscribe"),),
        actions={"nightly": ActionStats(runs=3, failures=1, outcomes=ActionOutcomes(success=2, failure=1),
                                        last_run_start=1000.0, last_run_duration=0.25, running=False)},
    )
    state = view.build(second, taken_at=12.0)
    assert state["actions"] == [{"name": "nightly", "runs": 3, "failures": 1, "running": False,
                                 "last_run_start": 1000.0, "last_run_duration": 0.25}]
    (orders,) = state["topics"]
    assert (orders["name"], orders["sow_records"], orders["in_per_sec"], orders["out_per_sec"]) == ("orders", 7, 25.0, 100.0)
    assert (state["totals"]["in_per_sec"], state["totals"]["out_per_sec"], state["interval"]) == (25.0, 100.0, 2.0)
    (client,) = state["clients"]
    assert client["queued_bytes"] == 42
    assert client["subscriptions"] == [{"sub_id": "s1", "topic": "orders", "filter": "/a = 1", "kind": "sow_and_subscribe"}]
    assert state["websockets"] == [{"name": "ws", "port": 9008}]


def test_console_files_are_the_package_files_and_the_installed_client(tmp_path: Path, monkeypatch) -> None:
    body, content_type = console_file("index.html")
    assert b"/console/vendor/amps.js" in body and content_type.startswith("text/html")
    assert console_file("../pyproject.toml") is None and console_file("vendor/../../app.py") is None
    monkeypatch.setenv(jsclient.ENV, str(tmp_path))  # nothing installed there
    monkeypatch.setattr(jsclient, "PACKAGE_VENDOR", tmp_path / "none")
    body, _ = console_file("vendor/amps.js")
    assert body == b"window.ampsMissing = true;\n", "the console says how to install it"
    assert console_file("vendor/LICENSE") is None


def test_state_json_of_a_running_broker(tmp_path: Path) -> None:
    broker = BrokerProcess.from_xml(tmp_path, admin=True, websocket=True, transaction_log=(
        "<JournalDirectory>./journal</JournalDirectory><Topic><Name>events</Name><MessageType>json</MessageType>"
        "</Topic>")).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/", timeout=10) as reply:
            assert reply.headers["content-type"].startswith("text/html")
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.admin_port}/console/state.json", timeout=10) as reply:
            state = json.loads(reply.read())
        assert state["websockets"] == [{"name": "amps-ws", "port": broker.websocket_port}]
        assert state["journal"]["files"][0]["state"] in ("current", "preallocated")
        assert state["instance"]["name"] == "test-broker"
    finally:
        broker.stop()
