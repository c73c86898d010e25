"""AMPS timestamps on query results: the cached second gives the same text as formatting from scratch."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from broker.server.session_queries import amps_timestamp


def reference(ns: int) -> str:
    moment = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC)
    return moment.strftime("%Y%m%dT%H%M%S") + f".{ns % 1_000_000_000 // 1000:06d}Z"


@given(st.lists(st.integers(min_value=0, max_value=4_102_444_800 * 10**9), min_size=1, max_size=50))
def test_matches_a_fresh_format_for_any_time(times: list[int]) -> None:
    for ns in times + times:  # the second pass is served from the cache
        assert amps_timestamp(ns) == reference(ns)


def test_known_value() -> None:
    assert amps_timestamp(1_700_000_000_123_456_789) == "20231114T221320.123456Z"
