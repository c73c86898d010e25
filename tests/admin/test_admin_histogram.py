"""The hot-path histogram: Prometheus bucket semantics, and no prometheus_client on the hot path."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.stats.histogram import DEFAULT_LATENCY_BUCKETS, Histogram
from broker.stats.snapshot import HistogramSnapshot


def test_values_fall_in_the_first_bucket_whose_bound_is_not_below_them() -> None:
    h = Histogram([0.1, 1.0])
    for v in (0.05, 0.1, 0.5, 1.0, 3.0):
        h.observe(v)
    snap = h.snapshot()
    assert snap.buckets == ((0.1, 2), (1.0, 4), (math.inf, 5))
    assert snap.count == 5
    assert snap.sum == pytest.approx(4.65)


def test_negative_and_nan_durations_count_as_zero() -> None:
    h = Histogram([0.1])
    h.observe(-2.0)
    h.observe(float("nan"))
    assert h.snapshot() == HistogramSnapshot(buckets=((0.1, 2), (math.inf, 2)), sum=0.0, count=2)


def test_observing_with_a_count_equals_observing_that_many_times() -> None:
    once, repeated = Histogram([0.1, 1.0]), Histogram([0.1, 1.0])
    once.observe(0.5, 4)
    once.observe(0.05)
    for _ in range(4):
        repeated.observe(0.5)
    repeated.observe(0.05)
    assert once.snapshot() == repeated.snapshot()
    assert once.snapshot().count == 5


@pytest.mark.parametrize("bounds", [[], [1.0, 1.0], [2.0, 1.0], [1.0, math.inf]])
def test_bad_bounds_are_rejected(bounds) -> None:
    with pytest.raises(ValueError, match="Histogram"):
        Histogram(bounds)


@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=200))
def test_snapshot_matches_a_naive_count(values: list[float]) -> None:
    h = Histogram()
    for v in values:
        h.observe(v)
    snap = h.snapshot()
    expected = [(b, sum(1 for v in values if v <= b)) for b in DEFAULT_LATENCY_BUCKETS]
    assert list(snap.buckets[:-1]) == expected
    assert snap.buckets[-1] == (math.inf, len(values))
    assert snap.count == len(values)
    assert snap.sum == pytest.approx(math.fsum(values))


def test_the_hot_path_does_not_import_prometheus_client() -> None:
    code = (
        "import sys\n"
        "import broker.stats, broker.stats.histogram, broker.stats.snapshot\n"
        "from broker.stats import Histogram\n"
        "Histogram().observe(0.001)\n"
        "assert 'prometheus_client' not in sys.modules, 'prometheus_client was imported'\n"
        "assert 'trio' not in sys.modules, 'trio was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
