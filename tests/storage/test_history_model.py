"""History against a plain model, property-tested: random updates and deletes at non-decreasing times, any
Granularity, queries at any time, and pruning at any moment never changes an answer inside the Window."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.sow.history import History
from broker.sow.record import SowRecord
from broker.sow.storage import StorageSpec
from broker_plugins.storage.memory import MemoryStorage

KEYS = ("a", "b", "c", "d")

events = st.lists(
    st.tuples(st.integers(0, 7), st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, 99))),
    min_size=1, max_size=40,
)


def model(history: History, log: list[tuple[int, str, int | None]], t: int) -> dict[str, int]:
    """The SOW as of ``t``: for each key, its last event stamped at or before the query's bound."""
    bound = history.as_of_bound(t)
    state: dict[str, int | None] = {}
    for when, key, value in log:
        if history.version_time(when) <= bound:
            state[key] = value
    return {k: v for k, v in state.items() if v is not None}


def answer(history: History, t: int, now: int) -> dict[str, int]:
    with contextlib.closing(history.snapshot(t, now)) as snap:
        return {k.decode(): int(SowRecord.decode(k.decode(), v).data) for k, v in snap.scan()}


@settings(max_examples=200, deadline=None)
@given(events, st.sampled_from([0, 1, 3, 10]), st.integers(5, 60), st.integers(0, 80))
def test_history_answers_like_the_model_and_pruning_changes_nothing_inside_the_window(
        steps: list[tuple[int, str, int | None]], granularity: int, window: int, prune_at: int) -> None:
    history = History(MemoryStorage(StorageSpec(topic="t", history=True)), window_ns=window,
                      granularity_ns=granularity)
    log: list[tuple[int, str, int | None]] = []
    now = 100
    current: dict[str, int] = {}
    for gap, key, value in steps:
        now += gap
        if value is None and key not in current:
            continue  # deleting a record that does not exist stores nothing (as SowTopic does)
        history.record(key, now, None if value is None else SowRecord(key, str(value).encode(), now).encode())
        log.append((now, key, value))
        if value is None:
            del current[key]
        else:
            current[key] = value
    times = range(90, now + 2 * max(granularity, 1) + 2)
    for t in times:
        assert answer(history, t, now) == (model(history, log, t) if t >= now - window else {})
    later = now + prune_at
    while history.prune(later, limit=3) == 3:
        pass
    for t in times:
        if t >= later - window:
            assert answer(history, t, later) == model(history, log, t), t
    # The current state is never pruned (as of the last boundary once every interval has closed).
    assert answer(history, later + 2 * max(granularity, 1), later) == current
