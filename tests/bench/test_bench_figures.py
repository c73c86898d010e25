"""The harness's arithmetic: ratios point the right way, percentiles, ack latencies, the OOF plan."""

from __future__ import annotations

from bench.figures import Figure, Latency, Row, percentile
from bench.messages import SIZE, doc, sent_ns
from bench.workloads.durable import ack_latencies
from bench.workloads.oof import other_threads, plan_updates


def test_ratio_is_broker_over_best_peer_for_rates() -> None:
    row = Row("W", "c", Figure("broker", 50.0, "msg/s"),
              [Figure("redis", 200.0, "msg/s"), Figure("nats", 100.0, "msg/s"), Figure("x", None, note="skipped")])
    assert row.best_peer().system == "redis"
    assert row.ratio() == 0.25


def test_ratio_for_times_still_means_bigger_is_better() -> None:
    row = Row("W", "c", Figure("broker", 40.0, "ms", higher_is_better=False),
              [Figure("redis", 20.0, "ms", higher_is_better=False), Figure("nats", 80.0, "ms", higher_is_better=False)])
    assert row.best_peer().system == "redis"
    assert row.ratio() == 0.5  # twice as slow as the best peer


def test_no_ratio_without_a_measured_peer() -> None:
    assert Row("W", "c", Figure("broker", 1.0), [Figure("redis", None, note="skipped")]).ratio() is None
    assert Row("W", "c", Figure("broker", None, note="error: TimeoutError"), [Figure("redis", 5.0)]).ratio() is None


def test_percentiles_nearest_rank() -> None:
    values = list(range(1, 1001))
    assert percentile(values, 0.5) == 500
    assert percentile(values, 0.99) == 990
    assert percentile(values, 0.999) == 999
    lat = Latency.from_ns([1_000_000] * 99 + [50_000_000])
    assert lat.p50 == 1.0 and lat.p99 == 1.0 and lat.count == 100


def test_cumulative_acks_cover_every_earlier_message() -> None:
    sent = [(1, 0), (2, 10), (3, 20), (4, 30)]
    acks = [(2, 100), (4, 150), (3, 160)]  # 3 arrives after 4's ack already covered it
    assert ack_latencies(sent, acks) == [100, 90, 130, 120]


def test_documents_are_200_bytes_and_carry_their_send_time() -> None:
    d = doc(123456, ts=1_700_000_000_123_456_789)
    assert len(d) == SIZE
    assert sent_ns(d) == 1_700_000_000_123_456_789


def test_oof_plan_moves_each_leaving_record_out_exactly_once() -> None:
    plan, leaving = plan_updates(1000, 500)
    closed = [i for i, state in plan if state == "closed"]
    assert len(plan) == 500 and len(closed) == 50 and set(closed) == leaving
    assert not any(i in leaving for i, state in plan if state == "open")


def test_a_later_oof_plan_leaves_records_already_out_of_the_filter_alone() -> None:
    _, first = plan_updates(1000, 500)
    plan, leaving = plan_updates(1000, 500, seed=9, exclude=frozenset(first))
    assert len(leaving) == 50 and not leaving & first
    assert not any(i in first for i, _state in plan)


def test_w3_other_threads_leave_out_the_event_loop_and_put_the_busiest_first() -> None:
    before = {100: (5.0, 1.0), 101: (1.0, 0.5), 102: (2.0, 0.0)}
    after = {100: (9.0, 3.0), 101: (1.5, 0.6), 102: (4.0, 1.0), 103: (0.1, 0.2)}  # 103 started in the phase
    rows = other_threads(100, before, after, updates=100_000)
    assert rows == [{"cpu_us_per_update": 20.0, "waiting_us_per_update": 10.0},
                    {"cpu_us_per_update": 5.0, "waiting_us_per_update": 1.0},
                    {"cpu_us_per_update": 1.0, "waiting_us_per_update": 2.0}]
