"""The statistics snapshot contract between the broker kernel and its observers.

The kernel exposes one call, ``statistics() -> BrokerSnapshot``, that returns a fresh, plain-data dict
(built between two awaits on the engine thread, so it is self-consistent). Everything that reports on
the broker is a *view* over that dict, built at read time: the Prometheus collector
(:mod:`broker.stats.collector`) and the ``/amps`` JSON tree of the Admin server
(:mod:`broker.admin.amps_tree`). Nothing on the hot path knows about either.

Rules of the contract:

* Counters (``*_total`` in Prometheus, ``messages_*``/``bytes_*``/``inserts``... here) only grow for the
  lifetime of the process; gauges (``records``, ``queued_bytes``, ``subscriptions``...) are current values.
* ``topics`` has bounded cardinality: the kernel reports configured topics by name and folds every other
  topic into the key ``"_other"``. Its keys become Prometheus label values, so it must never grow with
  client input.
* Times are epoch seconds (``float``); durations in histograms are seconds.
* ``journal`` is ``None`` when no ``<TransactionLog>`` is configured.

This module is pure (no trio, no prometheus_client): the kernel imports it.
"""

from __future__ import annotations

import os
import time
from typing import TypedDict

__all__ = [
    "ActionOutcomes",
    "ActionStats",
    "BrokerSnapshot",
    "ClientStats",
    "Counters",
    "HistogramSnapshot",
    "InstanceInfo",
    "JournalFileInfo",
    "JournalFiles",
    "JournalStats",
    "OofCounts",
    "SowTopicStats",
    "SubscriptionCounts",
    "SubscriptionInfo",
    "TopicCounters",
    "empty_histogram_snapshot",
    "empty_snapshot",
]


class HistogramSnapshot(TypedDict):
    """A cumulative histogram, as :meth:`broker.stats.histogram.Histogram.snapshot` returns it.

    Attributes:
        buckets: ``(upper_bound_seconds, cumulative_count)`` pairs in increasing bound order, the last one
            always ``(math.inf, count)``.
        sum: Sum of all observed values, in seconds.
        count: Number of observations (equals the ``inf`` bucket's count).
    """

    buckets: list[tuple[float, int]]
    sum: float
    count: int


class InstanceInfo(TypedDict):
    """Who this broker is (``/amps/instance/{name,version,pid,config_path}``)."""

    name: str
    version: str
    start_time: float  # epoch seconds
    config_path: str
    pid: int


class Counters(TypedDict):
    """Instance-wide cumulative counters."""

    messages_received: int  # publishes (and delta publishes, sow deletes) accepted from clients
    messages_delivered: int  # messages written to subscribers (one per matching subscription)
    bytes_in: int  # bytes read from client sockets
    bytes_out: int  # bytes written to client sockets
    client_disconnects: int  # connections closed, for any reason
    slow_client_disconnects: int  # connections closed because their outbound buffer overflowed
    protocol_errors: int  # connections closed because of malformed frames
    commands_failed: int  # commands answered with a failure ack
    # publishes (and sow deletes) refused unapplied, by cause: "journal" (the transaction log's disk is full),
    # "storage" (the SOW storage failed to write)
    publishes_refused: dict[str, int]
    # publishes refused because a known publisher's s jumped more than <PublisherSequenceJumpLimit> ahead
    sequence_jumps_refused: int
    # content-filter errors, all filters together: "evaluation" (an evaluation raised on one message and
    # counted as no match for that subscription), "function" (a plugin filter function raised: NULL)
    filter_errors: dict[str, int]
    # connections closed by the broker, by cause: "logon_timeout" (no logon within <LogonTimeout>),
    # "idle_timeout" (nothing received within <IdleTimeout>), "duplicate_name" (another logon took the name)
    connections_closed: dict[str, int]
    # refusals by the security modules, by what: "logon", "read", "write", "replay", "admin"
    security_refusals: dict[str, int]
    # <TotalMessageMemoryLimit>: "limit", the bytes buffered now ("input_bytes": frames being received,
    # "output_bytes": outbound queues), and the refusals ("frames_refused", "consumers_offlined")
    memory: dict[str, int]


class ClientStats(TypedDict):
    """One connected client (``/amps/instance/clients/<id>``)."""

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


class TopicCounters(TypedDict):
    """Message flow for one configured topic (or ``"_other"``)."""

    messages_received: int
    messages_delivered: int


class SubscriptionCounts(TypedDict):
    """Current number of subscriptions of each kind."""

    subscribe: int
    sow_and_subscribe: int
    bookmark: int
    delta: int


class PaginationStats(TypedDict):
    """Paginated sow_and_subscribe (``top_n`` with ``skip_n``): windows and the sorted results they share."""

    paginated_subscriptions: int  # current windows
    result_sets: int  # sorted result sets, one per distinct (topic, filter, order)
    result_set_entries: int  # records held in those result sets


class SowTopicStats(TypedDict):
    """One SOW topic (``/amps/instance/sow/<id>``)."""

    records: int  # current number of records (gauge)
    inserts: int
    updates: int
    deletes: int
    queries: int
    expirations: int
    history_versions_written: int  # versions stored for historical queries (0 without <History>)
    history_pruned: int  # history entries pruned past the Window
    historical_queries: int  # point-in-time reads (historical sow, sow_and_subscribe, aggregate)


class OofCounts(TypedDict):
    """Out-of-focus notifications sent, by reason."""

    match: int  # a record stopped matching a subscription's filter
    deleted: int  # a record was deleted
    expired: int  # a record expired


class JournalFiles(TypedDict):
    """Journal files by state."""

    active: int
    archived: int
    compressed: int


class JournalFileInfo(TypedDict):
    """One journal file (the newest ``JOURNAL_FILES_LISTED`` are listed)."""

    name: str
    state: str  # current, full, preallocated, archived, compressed
    size: int  # bytes on disk


class SubscriptionInfo(TypedDict):
    """One subscription (the first ``SUBSCRIPTION_DETAILS`` are listed): for the web console."""

    client: str  # the client's connection id (ClientStats.id)
    sub_id: str
    topic: str
    filter: str
    kind: str  # subscribe, sow_and_subscribe, bookmark, delta


class JournalStats(TypedDict):
    """The transaction log (``/amps/instance/transaction_log``)."""

    files: JournalFiles
    bytes: int  # total size of all journal files on disk
    last_sequence: int  # last sequence appended
    durable_sequence: int  # last sequence covered by an fsync
    fsync: HistogramSnapshot  # seconds per fsync
    replays_active: int  # bookmark replays currently reading the journal
    records_appended: int  # cumulative
    disk_full: bool  # the journal cannot be written (disk full): publishes to logged topics are refused
    damaged_records: int  # cumulative: damaged journal records met (at start-up or by replays)
    damaged_bytes: int  # cumulative: bytes of those records
    replay_failures: int  # cumulative: bookmark replays ended by a journal problem (the client was told)
    replay_held_bytes: int  # live messages held by replaying subscriptions until their cut-over (bytes)
    replay_held_peak_bytes: int  # the most one replaying subscription held since start (bytes)
    replay_catch_ups: int  # cumulative: held messages dropped and read back from the journal past the cut-over
    replay_held_offlined: int  # cumulative: replaying clients offlined because what they held was not journaled
    file_list: list[JournalFileInfo]  # the newest journal files with their state


class ActionOutcomes(TypedDict):
    """Runs of one action by outcome (cumulative)."""

    success: int  # every step ran
    failure: int  # a step failed (the later ones were skipped)
    skipped: int  # an If gate said no
    busy: int  # fired while still running: this run did not happen


class ActionStats(TypedDict):
    """One configured action (by its name: the first ``On``'s ``Name``, else ``action-<n>``)."""

    runs: int  # runs that happened: success + failure + skipped
    failures: int  # = outcomes["failure"]
    outcomes: ActionOutcomes
    last_run_start: float | None  # epoch seconds; None before the first run
    last_run_duration: float | None  # seconds
    running: bool
    trigger_failures: int  # triggers that crashed after starting (they no longer fire)


class BrokerSnapshot(TypedDict):
    """What ``statistics()`` returns. See the module docstring for the rules."""

    instance: InstanceInfo
    counters: Counters
    clients: list[ClientStats]
    topics: dict[str, TopicCounters]
    subscriptions: SubscriptionCounts
    subscription_details: list[SubscriptionInfo]
    pagination: PaginationStats
    sow: dict[str, SowTopicStats]
    oof: OofCounts
    latency: HistogramSnapshot  # publish-to-delivery, seconds
    journal: JournalStats | None
    actions: dict[str, ActionStats]


def empty_histogram_snapshot(bounds: tuple[float, ...] = ()) -> HistogramSnapshot:
    """A histogram snapshot with no observations.

    Args:
        bounds: Finite upper bounds in increasing order (the ``inf`` bucket is added).

    Returns:
        The snapshot.
    """
    return {"buckets": [(b, 0) for b in bounds] + [(float("inf"), 0)], "sum": 0.0, "count": 0}


def empty_snapshot(name: str = "broker", version: str = "0.0.0", config_path: str = "") -> BrokerSnapshot:
    """A valid snapshot of a broker that has done nothing yet (all counters zero, no journal).

    Useful to start a kernel's statistics from, and in tests.

    Args:
        name: The instance name.
        version: The broker version.
        config_path: The configuration file path.

    Returns:
        The snapshot; the caller owns it and may mutate it.
    """
    return {
        "instance": {
            "name": name,
            "version": version,
            "start_time": time.time(),
            "config_path": config_path,
            "pid": os.getpid(),
        },
        "counters": {
            "messages_received": 0,
            "messages_delivered": 0,
            "bytes_in": 0,
            "bytes_out": 0,
            "client_disconnects": 0,
            "slow_client_disconnects": 0,
            "protocol_errors": 0,
            "commands_failed": 0,
            "publishes_refused": {"journal": 0, "storage": 0},
            "sequence_jumps_refused": 0,
            "filter_errors": {"evaluation": 0, "function": 0},
            "connections_closed": {"logon_timeout": 0, "idle_timeout": 0, "duplicate_name": 0},
            "security_refusals": {"logon": 0, "read": 0, "write": 0, "replay": 0, "admin": 0},
            "memory": {"limit": 0, "input_bytes": 0, "output_bytes": 0, "frames_refused": 0,
                       "consumers_offlined": 0},
        },
        "clients": [],
        "topics": {},
        "subscriptions": {"subscribe": 0, "sow_and_subscribe": 0, "bookmark": 0, "delta": 0},
        "subscription_details": [],
        "pagination": {"paginated_subscriptions": 0, "result_sets": 0, "result_set_entries": 0},
        "sow": {},
        "oof": {"match": 0, "deleted": 0, "expired": 0},
        "latency": empty_histogram_snapshot(),
        "journal": None,
        "actions": {},
    }
