"""The bounded memo behind the hot paths' caches (filters, topics, paths, ack lists, timestamps)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.memo import Memo


def test_computes_each_key_once_and_returns_the_kept_value() -> None:
    calls: list[str] = []
    memo: Memo[str, int] = Memo(lambda k: calls.append(k) or len(k), 10)
    assert [memo["ab"], memo["abc"], memo["ab"]] == [2, 3, 2]
    assert calls == ["ab", "abc"]


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=300), st.integers(min_value=1, max_value=20))
def test_never_holds_more_than_its_limit_and_always_answers_right(keys: list[int], limit: int) -> None:
    memo: Memo[int, int] = Memo(lambda k: k * k, limit)
    for k in keys:
        assert memo[k] == k * k
        assert len(memo) <= limit


def test_a_failing_compute_keeps_nothing() -> None:
    def compute(key: str) -> int:
        raise ValueError(f"bad {key}")

    memo: Memo[str, int] = Memo(compute, 4)
    with pytest.raises(ValueError, match="bad x"):
        memo["x"]
    assert "x" not in memo


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive limit"):
        Memo(str, 0)
