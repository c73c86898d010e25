"""The statistics snapshot: the one typed value the broker kernel hands to every observer.

The kernel exposes ``statistics() -> BrokerSnapshot`` (and ``sample_statistics()``, the same built in
slices), a fresh value made of the dataclasses below, built between two awaits on the engine thread, so
it is self-consistent. Everything that reports on the broker is a *view* over it: the Prometheus
collector (:mod:`broker.stats.collector`), the ``/amps`` tree (:mod:`broker.admin.amps_tree`) and the web
console's JSON (:mod:`broker.admin.console`). Nothing on the hot path knows about any of them.

Why dataclasses rather than the dicts this replaced: a field a view reads but the kernel never fills, or
a misspelt key, is an ``AttributeError`` (and a type-checker error) at the one place it happens instead of
a ``KeyError`` at scrape time or a ``.get(..., 0)`` that shows a silent zero forever; and every field is
listed here once, with its meaning, which ``tests/admin/test_admin_snapshot_fields.py`` checks against
``docs/metrics.md``.

Rules of the contract:

* Values are frozen (``frozen=True``): the sampler hands one snapshot to every concurrent request, so
  no view may change it. The rows built once per client, subscription or journal file
  (:class:`ClientStats`, :class:`SubscriptionInfo`, :class:`JournalFileInfo`) are slotted but not frozen:
  a frozen dataclass sets each field through ``object.__setattr__``, about four times a dict's cost,
  which with thousands of clients would make a sample slower than the dicts; views treat them as
  read-only all the same. Collections are tuples, or dicts keyed by a bounded name.
* Counters (``*_total`` in Prometheus, ``messages_*``/``bytes_*``/``inserts``... here) only grow for the
  lifetime of the process; gauges (``records``, ``queued_bytes``, ``subscriptions``...) are current values.
* ``topics`` has bounded cardinality: the kernel reports configured topics by name and folds every other
  topic into the key ``"_other"``. Its keys become Prometheus label values, so it must never grow with
  client input. The same holds for ``sow`` (configured SOW topics) and ``actions`` (configured actions).
* Times are epoch seconds (``float``); durations in histograms are seconds.
* ``journal`` is ``None`` when no ``<TransactionLog>`` is configured.

This module is pure (no trio, no prometheus_client): the kernel imports it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ActionOutcomes",
    "ActionStats",
    "BrokerSnapshot",
    "ClientStats",
    "ConnectionsClosed",
    "Counters",
    "FilterErrors",
    "HistogramSnapshot",
    "InstanceInfo",
    "JournalFileInfo",
    "JournalFiles",
    "JournalStats",
    "MemoryStats",
    "OofTotals",
    "PaginationStats",
    "PublishesRefused",
    "RecoveryStats",
    "SecurityRefusals",
    "SowTopicStats",
    "SubscriptionCounts",
    "SubscriptionInfo",
    "TopicFlow",
    "counts",
    "empty_histogram_snapshot",
    "empty_snapshot",
]


def counts(value: Any) -> list[tuple[str, int]]:
    """``(field name, value)`` of a counts-by-label record (:class:`OofTotals`, :class:`JournalFiles`...), in
    declaration order: the label values of one Prometheus family, the ids of one ``/amps`` collection."""
    return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A cumulative histogram, as :meth:`broker.stats.histogram.Histogram.snapshot` returns it.

    Attributes:
        buckets: ``(upper_bound_seconds, cumulative_count)`` pairs in increasing bound order, the last one
            always ``(math.inf, count)``.
        sum: Sum of all observed values, in seconds.
        count: Number of observations (equals the ``inf`` bucket's count).
    """

    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """Who this broker is (``/amps/instance/{name,version,pid,config_path}``)."""

    name: str
    version: str
    start_time: float  # epoch seconds
    config_path: str
    pid: int


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    """Start-up recovery of the SOW from the transaction log (the client transports open when it ends)."""

    in_progress: bool = False  # recovering now: the Admin port answers, the client transports are not open
    records_read: int = 0  # journal records the replay read so far
    progress: float = 1.0  # 0 to 1: how far the replay got through the journal (1 when not recovering)


@dataclass(frozen=True, slots=True)
class PublishesRefused:
    """Publishes (and sow deletes) refused unapplied, by cause."""

    journal: int = 0  # the transaction log's disk is full ("journal_full")
    storage: int = 0  # the SOW storage failed to write ("storage_failed")


@dataclass(frozen=True, slots=True)
class FilterErrors:
    """Content-filter errors, all filters together."""

    evaluation: int = 0  # an evaluation raised on one message (no match for that subscription)
    function: int = 0  # a plugin filter function raised (its value was NULL)


@dataclass(frozen=True, slots=True)
class ConnectionsClosed:
    """Connections the broker closed, by cause."""

    logon_timeout: int = 0  # no logon within <LogonTimeout>
    idle_timeout: int = 0  # nothing received within <IdleTimeout>
    duplicate_name: int = 0  # another logon took the name
    logons_refused: int = 0  # refused logons
    entitlement_change: int = 0  # an entitlement reload changed the client's entitlements


@dataclass(frozen=True, slots=True)
class SecurityRefusals:
    """Refusals by the security modules, by what was refused."""

    logon: int = 0
    read: int = 0
    write: int = 0
    replay: int = 0
    admin: int = 0


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """``<TotalMessageMemoryLimit>``: the limit, the bytes buffered now, and the refusals at it."""

    limit: int = 0  # bytes; 0: none
    input_bytes: int = 0  # frames being received
    output_bytes: int = 0  # outbound queues (and replay-held messages)
    frames_refused: int = 0  # cumulative
    consumers_offlined: int = 0  # cumulative


@dataclass(frozen=True, slots=True)
class Counters:
    """Instance-wide cumulative counters (and the memory gauges)."""

    messages_received: int = 0  # publishes (and delta publishes, sow deletes) accepted from clients
    messages_delivered: int = 0  # messages written to subscribers (one per matching subscription)
    bytes_in: int = 0  # bytes read from client sockets
    bytes_out: int = 0  # bytes written to client sockets
    client_disconnects: int = 0  # connections closed, for any reason
    slow_client_disconnects: int = 0  # connections closed because their outbound buffer overflowed
    protocol_errors: int = 0  # connections closed because of malformed frames
    commands_failed: int = 0  # commands answered with a failure ack
    publishes_refused: PublishesRefused = PublishesRefused()
    # publishes refused because a known publisher's s jumped more than <PublisherSequenceJumpLimit> ahead
    sequence_jumps_refused: int = 0
    filter_errors: FilterErrors = FilterErrors()
    connections_closed: ConnectionsClosed = ConnectionsClosed()
    security_refusals: SecurityRefusals = SecurityRefusals()
    memory: MemoryStats = MemoryStats()


@dataclass(slots=True)
class ClientStats:
    """One connected client (``/amps/instance/clients/<id>``); slotted, not frozen (module docstring)."""

    id: str  # connection id, unique for the life of the process
    client_name: str
    remote: str  # "host:port"
    connected_at: float  # epoch seconds
    messages_in: int
    messages_out: int
    bytes_in: int
    bytes_out: int
    subscriptions: int  # current subscription count
    queued_bytes: int  # bytes waiting in the client's outbound buffer


@dataclass(frozen=True, slots=True)
class TopicFlow:
    """Message flow for one configured topic (or ``"_other"``)."""

    messages_received: int = 0
    messages_delivered: int = 0


@dataclass(frozen=True, slots=True)
class SubscriptionCounts:
    """Current number of subscriptions of each kind."""

    subscribe: int = 0
    sow_and_subscribe: int = 0
    bookmark: int = 0
    delta: int = 0


@dataclass(frozen=True, slots=True)
class PaginationStats:
    """Paginated sow_and_subscribe (``top_n`` with ``skip_n``): windows and the sorted results they share."""

    paginated_subscriptions: int = 0  # current windows
    result_sets: int = 0  # sorted result sets, one per distinct (topic, filter, order)
    result_set_entries: int = 0  # records held in those result sets


@dataclass(frozen=True, slots=True)
class SowTopicStats:
    """One SOW topic (``/amps/instance/sow/<id>``)."""

    records: int = 0  # current number of records (gauge)
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    queries: int = 0
    expirations: int = 0
    history_versions_written: int = 0  # versions stored for historical queries (0 without <History>)
    history_pruned: int = 0  # history entries pruned past the Window
    historical_queries: int = 0  # point-in-time reads (historical sow, sow_and_subscribe, aggregate)
    record_cache_bytes: int = 0  # bytes the record cache holds (gauge; RecordCacheMemoryLimit bounds it)
    record_cache_hits: int = 0  # previous-record reads the cache answered (a held record, or a key known absent)
    record_cache_misses: int = 0  # previous-record reads that read the storage engine


@dataclass(frozen=True, slots=True)
class OofTotals:
    """Out-of-focus notifications sent, by reason (the engine's :class:`~broker.engine.counters.OofCounts`)."""

    match: int = 0  # a record stopped matching a subscription's filter
    deleted: int = 0  # a record was deleted
    expired: int = 0  # a record expired


@dataclass(frozen=True, slots=True)
class JournalFiles:
    """Journal files by state."""

    active: int = 0
    archived: int = 0
    compressed: int = 0


@dataclass(slots=True)
class JournalFileInfo:
    """One journal file (the newest ``JOURNAL_FILES_LISTED`` are listed); slotted, not frozen."""

    name: str
    state: str  # current, full, preallocated, archived, compressed
    size: int  # bytes on disk


@dataclass(slots=True)
class SubscriptionInfo:
    """One subscription (the first ``SUBSCRIPTION_DETAILS`` are listed), for the web console; not frozen."""

    client: str  # the client's connection id (ClientStats.id)
    sub_id: str
    topic: str
    filter: str
    kind: str  # subscribe, sow_and_subscribe, bookmark, delta


@dataclass(frozen=True, slots=True)
class JournalStats:
    """The transaction log (``/amps/instance/transaction_log``)."""

    files: JournalFiles
    bytes: int  # total size of all journal files on disk
    last_sequence: int  # last sequence appended
    durable_sequence: int  # last sequence covered by an fsync
    fsync: HistogramSnapshot  # seconds per fsync
    replays_active: int = 0  # bookmark replays currently reading the journal
    records_appended: int = 0  # cumulative
    disk_full: bool = False  # the journal cannot be written (disk full): publishes to logged topics are refused
    damaged_records: int = 0  # cumulative: damaged journal records met (at start-up or by replays)
    damaged_bytes: int = 0  # cumulative: bytes of those records
    replay_failures: int = 0  # cumulative: bookmark replays ended by a journal problem (the client was told)
    replay_held_bytes: int = 0  # live messages held by replaying subscriptions until their cut-over (bytes)
    replay_held_peak_bytes: int = 0  # the most one replaying subscription held since start (bytes)
    replay_catch_ups: int = 0  # cumulative: held messages dropped and read back from the journal
    replay_held_offlined: int = 0  # cumulative: replaying clients offlined because what they held was not journaled
    file_list: tuple[JournalFileInfo, ...] = ()  # the newest journal files with their state


@dataclass(frozen=True, slots=True)
class ActionOutcomes:
    """Runs of one action by outcome (cumulative)."""

    success: int = 0  # every step ran
    failure: int = 0  # a step failed (the later ones were skipped)
    skipped: int = 0  # an If gate said no
    busy: int = 0  # fired while still running: this run did not happen


@dataclass(frozen=True, slots=True)
class ActionStats:
    """One configured action (by its name: the first ``On``'s ``Name``, else ``action-<n>``)."""

    runs: int = 0  # runs that happened: success + failure + skipped
    failures: int = 0  # = outcomes.failure
    outcomes: ActionOutcomes = ActionOutcomes()
    last_run_start: float | None = None  # epoch seconds; None before the first run
    last_run_duration: float | None = None  # seconds
    running: bool = False
    trigger_failures: int = 0  # triggers that crashed after starting (they no longer fire)


@dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    """What ``statistics()`` returns. See the module docstring for the rules."""

    instance: InstanceInfo
    recovery: RecoveryStats = RecoveryStats()
    counters: Counters = Counters()
    clients: tuple[ClientStats, ...] = ()
    topics: Mapping[str, TopicFlow] = field(default_factory=dict)
    subscriptions: SubscriptionCounts = SubscriptionCounts()
    subscription_details: tuple[SubscriptionInfo, ...] = ()
    pagination: PaginationStats = PaginationStats()
    sow: Mapping[str, SowTopicStats] = field(default_factory=dict)
    oof: OofTotals = OofTotals()
    latency: HistogramSnapshot = field(default_factory=lambda: empty_histogram_snapshot())  # publish-to-delivery
    journal: JournalStats | None = None
    actions: Mapping[str, ActionStats] = field(default_factory=dict)


def empty_histogram_snapshot(bounds: tuple[float, ...] = ()) -> HistogramSnapshot:
    """A histogram snapshot with no observations.

    Args:
        bounds: Finite upper bounds in increasing order (the ``inf`` bucket is added).

    Returns:
        The snapshot.
    """
    return HistogramSnapshot(tuple((b, 0) for b in bounds) + ((math.inf, 0),), 0.0, 0)


def empty_snapshot(name: str = "broker", version: str = "0.0.0", config_path: str = "") -> BrokerSnapshot:
    """A valid snapshot of a broker that has done nothing yet (all counters zero, no journal).

    Useful in tests: ``dataclasses.replace`` makes the variations.

    Args:
        name: The instance name.
        version: The broker version.
        config_path: The configuration file path.

    Returns:
        The snapshot.
    """
    return BrokerSnapshot(InstanceInfo(name, version, time.time(), config_path, os.getpid()))
