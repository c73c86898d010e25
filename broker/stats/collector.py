"""The one Prometheus collector: a view over ``statistics()`` snapshots, built at scrape time.

:class:`BrokerCollector` calls its source once per scrape and turns the snapshot
(:class:`broker.stats.snapshot.BrokerSnapshot`) into metric families. :func:`make_registry` puts it on a
private :class:`~prometheus_client.CollectorRegistry` (never the global one, so two brokers in one
process, or a test, never clash) together with prometheus_client's process, platform and GC collectors.

Every broker metric is declared once in :data:`METRICS` (name as exposed, type, labels, help); the
docs (``docs/metrics.md``) list the same names and a test keeps them in step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from broker.stats.snapshot import ActionStats, BrokerSnapshot, HistogramSnapshot, counts

__all__ = ["METRICS", "BrokerCollector", "MetricSpec", "make_registry"]

SnapshotSource = Callable[[], BrokerSnapshot]


@dataclass(frozen=True)
class MetricSpec:
    """One broker metric as it appears on ``/metrics``.

    Attributes:
        name: The exposed name (counters end in ``_total``, info metrics in ``_info``).
        type: ``counter``, ``gauge``, ``histogram`` or ``info``.
        labels: Label names, in order.
        help: The HELP text.
    """

    name: str
    type: str
    labels: tuple[str, ...]
    help: str


def _spec(name: str, type_: str, help_: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, type_, labels, help_)


#: Every metric the broker collector can emit, in exposition order.
METRICS: tuple[MetricSpec, ...] = (
    _spec("broker_instance_info", "info", "Broker instance name and version (value is always 1).",
          "name", "version"),
    _spec("broker_uptime_seconds", "gauge", "Seconds since the broker instance started."),
    _spec("broker_recovery_in_progress", "gauge",
          "1 while start-up recovery rebuilds or checks the SOW from the transaction log (the client ports "
          "open when it ends), else 0."),
    _spec("broker_recovery_records_read", "gauge", "Transaction log records start-up recovery has read."),
    _spec("broker_recovery_progress_ratio", "gauge",
          "How far start-up recovery's replay got through the transaction log, 0 to 1 (1 when done)."),
    _spec("broker_messages_received_total", "counter", "Messages published to the broker by clients."),
    _spec("broker_messages_delivered_total", "counter",
          "Messages delivered to subscribers (one per matching subscription)."),
    _spec("broker_topic_messages_received_total", "counter",
          "Messages published, by configured topic; all other topics are counted under topic=\"_other\".",
          "topic"),
    _spec("broker_topic_messages_delivered_total", "counter",
          "Messages delivered, by configured topic; all other topics are counted under topic=\"_other\".",
          "topic"),
    _spec("broker_bytes_received_total", "counter", "Bytes read from client connections."),
    _spec("broker_bytes_sent_total", "counter", "Bytes written to client connections."),
    _spec("broker_delivery_latency_seconds", "histogram",
          "Time from a publish arriving to its delivery being queued to a subscriber."),
    _spec("broker_clients_connected", "gauge", "Clients currently connected."),
    _spec("broker_client_queued_bytes", "gauge",
          "Bytes waiting in all client outbound buffers (a growing value means slow consumers)."),
    _spec("broker_client_disconnects_total", "counter", "Client connections closed, for any reason."),
    _spec("broker_slow_client_disconnects_total", "counter",
          "Clients disconnected because their outbound buffer exceeded its bound (slow client offlining)."),
    _spec("broker_protocol_errors_total", "counter",
          "Client connections closed because they sent malformed AMPS frames."),
    _spec("broker_commands_failed_total", "counter", "Client commands answered with a failure ack."),
    _spec("broker_publishes_refused_total", "counter",
          "Publishes (and SOW deletes) refused with a failure ack and applied to nothing, by reason: "
          "journal_full (the transaction log's disk is full), storage_failed (the SOW storage failed to write).",
          "reason"),
    _spec("broker_sequence_jumps_refused_total", "counter",
          "Publishes refused because a known publisher's s jumped more than the TransactionLog's "
          "PublisherSequenceJumpLimit ahead of its last one (another client using its name)."),
    _spec("broker_filter_errors_total", "counter",
          "Content-filter evaluations that raised on one message, all filters together, by kind: evaluation "
          "(the message counted as not matching for that subscription or query only) and function (a plugin "
          "filter function raised; its value was NULL).", "kind"),
    _spec("broker_client_buffered_bytes", "gauge",
          "Bytes in client buffers, all connections together, by direction: input (frames being received, "
          "reserved at their declared size) and output (outbound queues).", "direction"),
    _spec("broker_client_memory_limit_bytes", "gauge",
          "The broker-wide TotalMessageMemoryLimit on client buffers (0: none)."),
    _spec("broker_memory_limit_refusals_total", "counter",
          "Actions taken at the TotalMessageMemoryLimit: frame_refused (a connection that started a frame "
          "that did not fit was closed), consumer_offlined (the largest consumer was disconnected as slow).",
          "action"),
    _spec("broker_connections_closed_total", "counter",
          "Client connections the broker closed, by reason: logon_timeout (no logon within the Transport's "
          "LogonTimeout), idle_timeout (nothing received within IdleTimeout), duplicate_name (another "
          "connection logged on with the same client name).", "reason"),
    _spec("broker_security_refusals_total", "counter",
          "Refusals by the authentication and entitlement modules, by what was refused: logon (a logon's "
          "credentials), read, write, replay (a command the identity is not entitled to), admin (an Admin "
          "request without valid credentials). Each also writes a broker.audit log line.", "what"),
    _spec("broker_subscriptions", "gauge", "Current subscriptions, by kind.", "kind"),
    _spec("broker_paginated_subscriptions", "gauge",
          "Paginated sow_and_subscribe windows (top_n with skip_n) currently live."),
    _spec("broker_pagination_result_sets", "gauge",
          "Sorted result sets the paginated windows share (one per topic, filter and order)."),
    _spec("broker_pagination_result_set_entries", "gauge",
          "Records held in the paginated windows' shared sorted result sets."),
    _spec("broker_sow_records", "gauge", "Records currently stored in a SOW topic.", "topic"),
    _spec("broker_sow_inserts_total", "counter", "Records inserted into a SOW topic.", "topic"),
    _spec("broker_sow_updates_total", "counter", "Records updated in a SOW topic.", "topic"),
    _spec("broker_sow_deletes_total", "counter", "Records deleted from a SOW topic.", "topic"),
    _spec("broker_sow_queries_total", "counter", "SOW queries run against a topic.", "topic"),
    _spec("broker_sow_history_versions_total", "counter",
          "Versions a SOW topic with History stored (updates replacing one in the same Granularity interval "
          "included).", "topic"),
    _spec("broker_sow_history_pruned_total", "counter",
          "History entries of a SOW topic pruned because they left the Window.", "topic"),
    _spec("broker_sow_historical_queries_total", "counter",
          "Point-in-time reads of a SOW topic's history (historical sow, sow_and_subscribe, aggregate).", "topic"),
    _spec("broker_sow_expirations_total", "counter", "Records expired from a SOW topic.", "topic"),
    _spec("broker_sow_record_cache_bytes", "gauge",
          "Bytes a SOW topic's record cache holds (keys, values, overhead); RecordCacheMemoryLimit bounds it.",
          "topic"),
    _spec("broker_sow_record_cache_hits_total", "counter",
          "Reads of the record a publish replaces that a SOW topic's record cache answered.", "topic"),
    _spec("broker_sow_record_cache_misses_total", "counter",
          "Reads of the record a publish replaces that went to a SOW topic's storage engine (not in the cache).",
          "topic"),
    _spec("broker_oof_total", "counter",
          "Out-of-focus notifications sent, by reason (match, deleted, expired).", "reason"),
    _spec("broker_journal_files", "gauge",
          "Transaction log journal files, by state (active, archived, compressed).", "state"),
    _spec("broker_journal_bytes", "gauge", "Bytes used by all transaction log journal files."),
    _spec("broker_journal_last_sequence", "gauge", "Sequence number of the last journal record appended."),
    _spec("broker_journal_durable_sequence", "gauge",
          "Sequence number of the last journal record covered by an fsync."),
    _spec("broker_journal_records_appended_total", "counter", "Records appended to the transaction log."),
    _spec("broker_journal_fsync_seconds", "histogram", "Time taken by each transaction log fsync."),
    _spec("broker_replays_active", "gauge", "Bookmark replays currently reading the transaction log."),
    _spec("broker_journal_disk_full", "gauge",
          "1 while the transaction log cannot be written because its disk is full (publishes to logged topics "
          "are refused; the broker retries and resumes by itself), else 0."),
    _spec("broker_journal_damaged_records_total", "counter",
          "Damaged transaction log records met (at start-up or by replays)."),
    _spec("broker_journal_damaged_bytes_total", "counter", "Bytes of the damaged transaction log records met."),
    _spec("broker_replay_failures_total", "counter",
          "Bookmark replays ended by a transaction log problem (the client got a failure notice and stayed "
          "connected)."),
    _spec("broker_replay_held_bytes", "gauge", "Live messages held by replaying subscriptions until their cut-over."),
    _spec("broker_replay_held_peak_bytes", "gauge", "The most live-message bytes one replaying subscription held."),
    _spec("broker_replay_catch_ups_total", "counter",
          "Replays that dropped their held live messages at the bound and read them back from the journal."),
    _spec("broker_replay_held_offlined_total", "counter",
          "Replaying clients offlined: held live messages at the bound that the journal cannot give back."),
    _spec("broker_action_runs_total", "counter",
          "Runs of a configured action, by outcome: success, failure (a step failed), skipped (an If gate "
          "said no), busy (fired while still running, so not run).", "action", "outcome"),
    _spec("broker_action_failures_total", "counter",
          "Failed runs of a configured action (the same count as broker_action_runs_total{outcome=\"failure\"}).",
          "action"),
    _spec("broker_action_running", "gauge", "1 while a run of the action is in progress, else 0.", "action"),
    _spec("broker_action_last_run_timestamp_seconds", "gauge",
          "When the action's last run started (epoch seconds); absent before its first run.", "action"),
    _spec("broker_action_last_run_duration_seconds", "gauge",
          "How long the action's last run took; absent before its first run.", "action"),
    _spec("broker_action_trigger_failures_total", "counter",
          "Triggers of the action that failed after starting (they no longer fire; see the log).", "action"),
)  # fmt: skip

_BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}
_F = TypeVar("_F", bound=Metric)


def _family(name: str) -> Metric:
    """An empty metric family for the declared metric ``name``."""
    spec = _BY_NAME[name]
    labels = list(spec.labels)
    if spec.type == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=labels)  # strips "_total" itself
    if spec.type == "gauge":
        return GaugeMetricFamily(spec.name, spec.help, labels=labels)
    if spec.type == "histogram":
        return HistogramMetricFamily(spec.name, spec.help, labels=labels)
    return InfoMetricFamily(spec.name.removesuffix("_info"), spec.help, labels=labels)


def _family_as(name: str, kind: type[_F]) -> _F:
    """:func:`_family` as the family class its spec declares, for that class's ``add_metric()``."""
    family = _family(name)
    if not isinstance(family, kind):
        raise TypeError(f"metric {name} is declared as a {type(family).__name__}, not a {kind.__name__}")
    return family


def _values(name: str) -> CounterMetricFamily | GaugeMetricFamily:
    """The family of a counter or a gauge (one value per label set)."""
    family = _family(name)
    if not isinstance(family, CounterMetricFamily | GaugeMetricFamily):
        raise TypeError(f"metric {name} is declared as a {type(family).__name__}, not a counter or gauge")
    return family


def _scalar(name: str, value: float) -> Metric:
    family = _values(name)
    family.add_metric([], value)
    return family


def _labelled(name: str, values: Iterable[tuple[str, float]]) -> Metric:
    family = _values(name)
    for label, value in values:
        family.add_metric([label], value)
    return family


def _histogram(name: str, snapshot: HistogramSnapshot) -> Metric:
    buckets: list[tuple[str, float]] = []
    for bound, count in snapshot.buckets:
        buckets.append((floatToGoString(bound), count))
    if not buckets or not math.isinf(snapshot.buckets[-1][0]):
        buckets.append(("+Inf", snapshot.count))  # Prometheus requires the +Inf bucket
    family = _family_as(name, HistogramMetricFamily)
    family.add_metric([], buckets, sum_value=snapshot.sum)
    return family


def _column(rows: Mapping[str, Any], attribute: str) -> list[tuple[str, float]]:
    """One attribute of every row, labelled by the row's name (sorted): a per-topic or per-action family."""
    return [(label, getattr(row, attribute)) for label, row in sorted(rows.items())]


#: The transaction log's families, in exposition order: (metric, :class:`JournalStats` attribute).
_JOURNAL_SCALARS: tuple[tuple[str, str], ...] = (
    ("broker_journal_bytes", "bytes"),
    ("broker_journal_last_sequence", "last_sequence"),
    ("broker_journal_durable_sequence", "durable_sequence"),
    ("broker_journal_records_appended_total", "records_appended"),
    ("broker_journal_fsync_seconds", "fsync"),
    ("broker_replays_active", "replays_active"),
    ("broker_journal_disk_full", "disk_full"),  # 1 or 0
    ("broker_journal_damaged_records_total", "damaged_records"),
    ("broker_journal_damaged_bytes_total", "damaged_bytes"),
    ("broker_replay_failures_total", "replay_failures"),
    ("broker_replay_held_bytes", "replay_held_bytes"),
    ("broker_replay_held_peak_bytes", "replay_held_peak_bytes"),
    ("broker_replay_catch_ups_total", "replay_catch_ups"),
    ("broker_replay_held_offlined_total", "replay_held_offlined"),
)


class BrokerCollector(Collector):
    """Turns a statistics snapshot into Prometheus metric families at scrape time.

    Args:
        source: Returns the current snapshot; called once per scrape, on the scraping thread (the
            Admin server calls it on the trio thread, between two engine steps).
        clock: Returns the current epoch time (for ``broker_uptime_seconds``).
    """

    def __init__(self, source: SnapshotSource, *, clock: Callable[[], float] = time.time) -> None:
        self._source = source
        self._clock = clock

    def describe(self) -> Iterator[Metric]:
        """The declared families, without samples (lets the registry check names without a scrape)."""
        for spec in METRICS:
            yield _family(spec.name)

    def collect(self) -> Iterator[Metric]:
        """Take one snapshot and yield every family (the journal ones only when a journal exists)."""
        snap = self._source()
        instance = snap.instance
        counters = snap.counters

        info = _family_as("broker_instance_info", InfoMetricFamily)
        info.add_metric([], {"name": instance.name, "version": instance.version})
        yield info
        yield _scalar("broker_uptime_seconds", max(0.0, self._clock() - instance.start_time))
        recovery = snap.recovery
        yield _scalar("broker_recovery_in_progress", float(recovery.in_progress))
        yield _scalar("broker_recovery_records_read", recovery.records_read)
        yield _scalar("broker_recovery_progress_ratio", recovery.progress)

        yield _scalar("broker_messages_received_total", counters.messages_received)
        yield _scalar("broker_messages_delivered_total", counters.messages_delivered)
        yield _labelled("broker_topic_messages_received_total", _column(snap.topics, "messages_received"))
        yield _labelled("broker_topic_messages_delivered_total", _column(snap.topics, "messages_delivered"))
        yield _scalar("broker_bytes_received_total", counters.bytes_in)
        yield _scalar("broker_bytes_sent_total", counters.bytes_out)
        yield _histogram("broker_delivery_latency_seconds", snap.latency)

        clients = snap.clients
        yield _scalar("broker_clients_connected", len(clients))
        yield _scalar("broker_client_queued_bytes", sum(c.queued_bytes for c in clients))
        yield _scalar("broker_client_disconnects_total", counters.client_disconnects)
        yield _scalar("broker_slow_client_disconnects_total", counters.slow_client_disconnects)
        yield _scalar("broker_protocol_errors_total", counters.protocol_errors)
        yield _scalar("broker_commands_failed_total", counters.commands_failed)
        refused = counters.publishes_refused
        yield _labelled("broker_publishes_refused_total",
                        [("journal_full", refused.journal), ("storage_failed", refused.storage)])
        yield _scalar("broker_sequence_jumps_refused_total", counters.sequence_jumps_refused)
        yield _labelled("broker_filter_errors_total", counts(counters.filter_errors))
        memory = counters.memory
        yield _labelled("broker_client_buffered_bytes", [("input", memory.input_bytes), ("output", memory.output_bytes)])
        yield _scalar("broker_client_memory_limit_bytes", memory.limit)
        yield _labelled("broker_memory_limit_refusals_total",
                        [("consumer_offlined", memory.consumers_offlined), ("frame_refused", memory.frames_refused)])
        yield _labelled("broker_connections_closed_total", sorted(counts(counters.connections_closed)))
        yield _labelled("broker_security_refusals_total", sorted(counts(counters.security_refusals)))
        yield _labelled("broker_subscriptions", sorted(counts(snap.subscriptions)))
        pagination = snap.pagination
        yield _scalar("broker_paginated_subscriptions", pagination.paginated_subscriptions)
        yield _scalar("broker_pagination_result_sets", pagination.result_sets)
        yield _scalar("broker_pagination_result_set_entries", pagination.result_set_entries)

        sow = snap.sow
        yield _labelled("broker_sow_records", _column(sow, "records"))
        yield _labelled("broker_sow_inserts_total", _column(sow, "inserts"))
        yield _labelled("broker_sow_updates_total", _column(sow, "updates"))
        yield _labelled("broker_sow_deletes_total", _column(sow, "deletes"))
        yield _labelled("broker_sow_queries_total", _column(sow, "queries"))
        yield _labelled("broker_sow_history_versions_total", _column(sow, "history_versions_written"))
        yield _labelled("broker_sow_history_pruned_total", _column(sow, "history_pruned"))
        yield _labelled("broker_sow_historical_queries_total", _column(sow, "historical_queries"))
        yield _labelled("broker_sow_expirations_total", _column(sow, "expirations"))
        yield _labelled("broker_sow_record_cache_bytes", _column(sow, "record_cache_bytes"))
        yield _labelled("broker_sow_record_cache_hits_total", _column(sow, "record_cache_hits"))
        yield _labelled("broker_sow_record_cache_misses_total", _column(sow, "record_cache_misses"))
        yield _labelled("broker_oof_total", sorted(counts(snap.oof)))

        journal = snap.journal
        if journal is not None:
            yield _labelled("broker_journal_files", sorted(counts(journal.files)))
            for name, attribute in _JOURNAL_SCALARS:
                if attribute == "fsync":
                    yield _histogram(name, journal.fsync)
                else:
                    yield _scalar(name, float(getattr(journal, attribute)))

        yield from _action_families(snap.actions)


def _action_families(actions: Mapping[str, ActionStats]) -> Iterator[Metric]:
    ordered = sorted(actions.items())
    runs = _values("broker_action_runs_total")
    for name, a in ordered:
        for outcome, count in counts(a.outcomes):
            runs.add_metric([name, outcome], count)
    yield runs
    yield _labelled("broker_action_failures_total", _column(actions, "failures"))
    yield _labelled("broker_action_running", [(n, float(a.running)) for n, a in ordered])
    yield _labelled("broker_action_last_run_timestamp_seconds",
                    [(n, a.last_run_start) for n, a in ordered if a.last_run_start is not None])
    yield _labelled("broker_action_last_run_duration_seconds",
                    [(n, a.last_run_duration) for n, a in ordered if a.last_run_duration is not None])
    yield _labelled("broker_action_trigger_failures_total", _column(actions, "trigger_failures"))


def make_registry(
    source: SnapshotSource, *, clock: Callable[[], float] = time.time, runtime_metrics: bool = True
) -> CollectorRegistry:
    """A private registry holding a :class:`BrokerCollector` over ``source``.

    Args:
        source: Returns the current statistics snapshot.
        clock: Returns the current epoch time.
        runtime_metrics: Also register prometheus_client's process (``process_*``), platform
            (``python_info``) and garbage-collector (``python_gc_*``) collectors.

    Returns:
        The registry, ready for ``generate_latest``.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(source, clock=clock))
    if runtime_metrics:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry
