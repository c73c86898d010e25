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


def test_a_cost_bound_keeps_the_summed_cost_under_max_cost() -> None:
    memo: Memo[str, str] = Memo(str.upper, 1000, cost=lambda k, v: len(k), max_cost=10)
    assert memo["abcd"] == "ABCD" and memo["efgh"] == "EFGH"
    assert memo.total_cost == 8 and len(memo) == 2
    assert memo["ijk"] == "IJK"  # 8 + 3 > 10: the memo starts over
    assert list(memo) == ["ijk"] and memo.total_cost == 3


def test_a_value_costing_more_than_max_cost_is_returned_but_not_kept() -> None:
    memo: Memo[str, str] = Memo(str.upper, 1000, cost=lambda k, v: len(k), max_cost=10)
    memo["ab"]
    assert memo["x" * 11] == "X" * 11
    assert "x" * 11 not in memo and list(memo) == ["ab"]


@given(
    st.lists(st.text(max_size=30), max_size=200),
    st.integers(min_value=1, max_value=20),
    st.integers(min_value=1, max_value=60),
)
def test_never_costs_more_than_max_cost_nor_holds_more_than_limit(keys: list[str], limit: int, max_cost: int) -> None:
    memo: Memo[str, int] = Memo(len, limit, cost=lambda k, v: v + 1, max_cost=max_cost)
    for k in keys:
        assert memo[k] == len(k)
        assert len(memo) <= limit
        assert memo.total_cost == sum(len(x) + 1 for x in memo) <= max_cost


def test_clear_resets_the_cost_and_cost_needs_max_cost() -> None:
    memo: Memo[str, int] = Memo(len, 10, cost=lambda k, v: v, max_cost=100)
    memo["abc"]
    memo.clear()
    assert memo.total_cost == 0
    with pytest.raises(ValueError, match="positive max_cost"):
        Memo(len, 10, cost=lambda k, v: v)
