"""The engine's typed counters: a reason or topic slot nobody reports is refused where it is counted."""

from __future__ import annotations

import pytest

from broker.engine.counters import OOF_REASONS, EngineCounters, OofCounts, TopicCounts


def test_oof_add_counts_each_known_reason_in_its_own_field() -> None:
    counts = OofCounts()
    counts.add("match")
    counts.add("deleted", 3)
    counts.add("expired", 2)
    assert (counts.match, counts.deleted, counts.expired) == (1, 3, 2)


@pytest.mark.parametrize("reason", ["entitlement", "Match", "", "topics"])
def test_oof_add_refuses_a_reason_no_statistic_shows(reason: str) -> None:
    counts = OofCounts()
    with pytest.raises(ValueError, match="unknown out-of-focus reason"):
        counts.add(reason)
    assert counts == OofCounts()  # nothing counted


def test_oof_reasons_are_the_fields() -> None:
    assert tuple(OofCounts.__slots__) == OOF_REASONS


def test_count_topic_accumulates_by_name() -> None:
    counters = EngineCounters()
    counters.count_topic("orders", 1, 4)
    counters.count_topic("orders", 1, 0)
    counters.count_topic("_other", 1, 2)
    assert counters.topics == {"orders": TopicCounts(2, 4), "_other": TopicCounts(1, 2)}
    with pytest.raises(AttributeError):
        counters.misspelt = 1  # type: ignore[attr-defined]
