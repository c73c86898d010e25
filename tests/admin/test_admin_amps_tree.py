"""The /amps tree builder: AMPS value formats, interval rates, sub-tree selection."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.admin.amps_tree import AmpsTreeBuilder, format_timestamp, format_uptime, render_values, select
from broker.stats.rates import RateSampler
from broker.stats.snapshot import ActionOutcomes, ActionStats, ClientStats, SowTopicStats, empty_snapshot


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "00:00:00.000000"),
        (3723.25, "01:02:03.250000"),
        (90061.000001, "25:01:01.000001"),
        (-5.0, "00:00:00.000000"),
    ],
)
def test_uptime_is_hh_mm_ss_micros(seconds: float, text: str) -> None:
    assert format_uptime(seconds) == text


def test_timestamps_are_amps_iso_basic_utc() -> None:
    assert format_timestamp(0.5) == "19700101T000000.500000Z"


def test_values_render_as_strings() -> None:
    assert render_values(
        {"a": 1, "b": 2.5, "c": [{"id": "x", "ok": True}], "d": None, "e": float("nan")}
    ) == {
        "a": "1",
        "b": "2.50",
        "c": [{"id": "x", "ok": "true"}],
        "d": "",
        "e": "0",
    }


def test_rates_are_interval_averages() -> None:
    sampler = RateSampler(10.0)
    assert sampler.update({"a": 100}, now=0.0) == {}
    assert sampler.update({"a": 150}, now=5.0) == {}  # interval not over: no rate yet
    assert sampler.update({"a": 300}, now=10.0) == {"a": 20.0}
    assert sampler.update({"a": 900}, now=15.0) == {"a": 20.0}  # unchanged until the next interval ends
    assert sampler.update({"a": 900, "b": 1}, now=20.0) == {"a": 60.0}  # b is new: no rate yet
    assert sampler.update({"a": 0, "b": 1}, now=30.0) == {"a": 0.0, "b": 0.0}  # went backwards: 0
    with pytest.raises(ValueError, match="interval"):
        RateSampler(0)


def test_tree_per_sec_values_follow_the_snapshot_deltas() -> None:
    now = [1000.0]
    builder = AmpsTreeBuilder(interval=2.0, clock=lambda: now[0])
    snap = empty_snapshot("t")
    client = ClientStats(id="7", client_name="c", remote="h:1", connected_at=0.0, messages_in=0, messages_out=0,
                         bytes_in=0, bytes_out=0, subscriptions=0, queued_bytes=0)
    snap = replace(snap, instance=replace(snap.instance, start_time=990.0),
                   sow={"orders": SowTopicStats(records=1, inserts=1)}, clients=(client,))
    first = builder.build(snap)["amps"]["instance"]
    assert first["uptime"] == "00:00:10.000000"
    assert first["sow"][0]["inserts_per_sec"] == "0.00"

    now[0] = 1004.0
    snap = replace(snap, sow={"orders": SowTopicStats(records=1, inserts=11)},
                   clients=(replace(client, bytes_in=1000),), counters=replace(snap.counters, messages_received=6))
    second = builder.build(snap)["amps"]["instance"]
    assert second["sow"][0]["inserts_per_sec"] == "2.50"
    assert second["clients"][0]["bytes_in_per_sec"] == "250.00"
    assert second["processors"][0]["messages_received_per_sec"] == "1.50"
    assert second["uptime"] == "00:00:14.000000"
    assert "transaction_log" not in second  # no journal configured


def test_select_wraps_the_node_from_the_root() -> None:
    tree = {
        "amps": {"instance": {"name": "x", "sow": [{"id": "a/b", "topic": "a/b"}, {"id": "a", "topic": "a"}]}}
    }
    assert select(tree, []) == (tree, tree["amps"])
    assert select(tree, ["instance", "name"]) == ({"amps": {"instance": {"name": "x"}}}, "x")
    assert select(tree, ["instance", "sow", "a", "b"]) == (
        {"amps": {"instance": {"sow": [{"id": "a/b", "topic": "a/b"}]}}},
        {"id": "a/b", "topic": "a/b"},
    )
    assert select(tree, ["instance", "sow", "a", "topic"])[0] == {
        "amps": {"instance": {"sow": [{"id": "a", "topic": "a"}]}}
    }
    assert select(tree, ["instance", "nope"]) is None
    assert select(tree, ["instance", "name", "deeper"]) is None
    assert select(tree, ["instance", "sow", "zzz"]) is None


def test_actions_show_outcomes_and_last_run() -> None:
    builder = AmpsTreeBuilder(clock=lambda: 1000.0)
    snap = replace(empty_snapshot("x"), actions={
        "nightly": ActionStats(runs=3, failures=1, outcomes=ActionOutcomes(success=1, failure=1, skipped=1, busy=2),
                               last_run_start=1_700_000_000.5, last_run_duration=1.5, running=True),
        "never": ActionStats(),
    })
    actions = {a["id"]: a for a in builder.build(snap)["amps"]["instance"]["actions"]}
    assert actions["nightly"] == {
        "id": "nightly", "runs": "3", "failures": "1", "success_count": "1", "failure_count": "1",
        "skipped_count": "1", "busy_count": "2", "running": "true", "last_run_time": "20231114T221320.500000Z",
        "last_run_duration": "1.50", "trigger_failures": "0",
    }  # fmt: skip
    assert (actions["never"]["last_run_time"], actions["never"]["last_run_duration"]) == ("", "")
