"""How big each workload is in each mode (``--quick`` for CI, ``full`` for the published table)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Sizes:
    """Counts and bounds of one run.

    Attributes:
        mode: ``quick`` or ``full``.
        ingest_messages: W1 publishes (upserts).
        ingest_keys: W1 distinct keys.
        query_records: W2 records in the queried topic.
        batch_sizes: W2 BatchSize values.
        query_repeats: W2 runs per case (the best is reported: queries are short and noisy).
        oof_records: W3 records in the snapshot.
        oof_updates: W3 updates published while subscribed (10% leave the filter).
        oof_rate: W3 publisher pace, updates per second (latency is measured below saturation).
        oof_subscribers: W3 subscriber counts (one case each, on the same loaded topic).
        replay_messages: W4 messages in the journal.
        fanout_messages: W5 messages published (each delivered to every subscriber).
        fanout_subscribers: W5 subscriber counts.
        durable_messages: W6 publishes with persisted acks.
        peer_window: Requests a Python peer client (nats-py) keeps in flight.
        limit_seconds: Time each machine-limit probe runs.
        workload_timeout: Seconds after which a workload is abandoned and reported as an error.
    """

    mode: str
    ingest_messages: int
    ingest_keys: int
    query_records: int
    batch_sizes: tuple[int, ...]
    query_repeats: int
    oof_records: int
    oof_updates: int
    oof_rate: int
    oof_subscribers: tuple[int, ...]
    replay_messages: int
    fanout_messages: int
    fanout_subscribers: tuple[int, ...]
    durable_messages: int
    peer_window: int = 256
    limit_seconds: float = 1.0
    workload_timeout: float = 300.0

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the results file."""
        return asdict(self)

    def scaled(self, factor: float) -> Sizes:
        """The same run with every message/record count (and, for ``factor > 1``, the time bound) multiplied."""
        def n(v: int) -> int:
            return max(100, int(v * factor))
        return replace(self, ingest_messages=n(self.ingest_messages), ingest_keys=n(self.ingest_keys),
                       query_records=n(self.query_records), oof_records=n(self.oof_records),
                       oof_updates=n(self.oof_updates), replay_messages=n(self.replay_messages),
                       fanout_messages=n(self.fanout_messages), durable_messages=n(self.durable_messages),
                       workload_timeout=self.workload_timeout * max(1.0, factor))


QUICK = Sizes(
    mode="quick", ingest_messages=5_000, ingest_keys=5_000, query_records=10_000, batch_sizes=(1, 10, 100, 1000),
    query_repeats=1, oof_records=5_000, oof_updates=2_000, oof_rate=2_000, oof_subscribers=(1, 4),
    replay_messages=5_000, fanout_messages=2_000, fanout_subscribers=(1, 4, 16), durable_messages=2_000, peer_window=256,
    limit_seconds=0.3, workload_timeout=60.0,
)

FULL = Sizes(
    mode="full", ingest_messages=100_000, ingest_keys=100_000, query_records=100_000,
    batch_sizes=(1, 10, 100, 1000), query_repeats=2, oof_records=100_000, oof_updates=50_000, oof_rate=10_000,
    oof_subscribers=(1, 4), replay_messages=100_000, fanout_messages=100_000, fanout_subscribers=(1, 4, 16),
    durable_messages=50_000, peer_window=256, limit_seconds=1.0, workload_timeout=300.0,
)
