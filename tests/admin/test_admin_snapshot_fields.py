"""Every field of the statistics snapshot reaches a user, where docs/metrics.md says it does.

A snapshot is built with a distinct value in every field (walked from the dataclass types, so a field
added to :mod:`broker.stats.snapshot` is filled too), then rendered the three ways the Admin server serves
it: the Prometheus text exposition (read back with prometheus_client's own parser), the ``/amps`` tree
and the console's JSON. :data:`WHERE` names, for every field, the metric, ``/amps`` node and console key
that show it; the test checks that table covers exactly the snapshot's fields, that each view shows that
field's own value there, and that docs/metrics.md documents each metric and each ``/amps`` field name.
A new field without a view, a view that reads the wrong field, or an undocumented name fails here.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.admin.amps_tree import (
    AmpsTreeBuilder,
    _client_row,
    format_timestamp,
    format_uptime,
    render_values,
    select,
)
from broker.admin.console import ConsoleView
from broker.stats import snapshot as snapshot_types
from broker.stats.collector import make_registry
from broker.stats.snapshot import BrokerSnapshot, ClientStats, HistogramSnapshot

DOCS = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
NOW = 1_800_000_000.0

# ------------------------------------------------------------------------------------------------
# A snapshot with a distinct value in every field
# ------------------------------------------------------------------------------------------------


def _fill(cls: type, values: Iterator[int]) -> Any:
    """An instance of the snapshot dataclass ``cls`` with a fresh value in every field."""
    if cls is HistogramSnapshot:
        below, total = next(values), next(values)
        return HistogramSnapshot(((0.001, below), (math.inf, below + total)), next(values) + 0.25, below + total)
    hints = typing.get_type_hints(cls, vars(snapshot_types))
    return cls(**{f.name: _value(hints[f.name], values) for f in dataclasses.fields(cls)})


def _value(hint: Any, values: Iterator[int]) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):  # X | None: the X
        return _value(next(a for a in args if a is not type(None)), values)
    if origin is Mapping or origin is dict:
        return {f"k{next(values)}": _value(args[1], values)}
    if origin is tuple:
        return (_value(args[0], values),)
    if hint is bool:
        return True
    if hint is int:
        return next(values)
    if hint is float:
        return next(values) + 0.25  # exact in binary and in two decimals
    if hint is str:
        return f"s{next(values)}"
    return _fill(hint, values)


def distinct_snapshot() -> BrokerSnapshot:
    snap = _fill(BrokerSnapshot, itertools.count(101))
    client = snap.clients[0]
    return replace(
        snap,
        instance=replace(snap.instance, start_time=NOW - 3725.5),
        subscription_details=(replace(snap.subscription_details[0], client=client.id),),
    )


def leaf_paths(cls: type, prefix: str = "") -> set[str]:
    """``a.b.*.c`` for every leaf of the dataclass ``cls`` (``*``: the key or element of a collection)."""
    if cls is HistogramSnapshot:
        return {f"{prefix}{name}" for name in ("buckets", "sum", "count")}
    hints = typing.get_type_hints(cls, vars(snapshot_types))
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        hint, path = hints[f.name], f"{prefix}{f.name}"
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (types.UnionType, typing.Union):
            hint = next(a for a in args if a is not type(None))
            origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (Mapping, dict):
            hint, path = args[1], f"{path}.*"
        elif origin is tuple:
            hint, path = args[0], f"{path}.*"
        out |= leaf_paths(hint, f"{path}.") if dataclasses.is_dataclass(hint) else {path}
    return out


def resolve(snap: BrokerSnapshot, path: str) -> tuple[Any, str]:
    """The value at ``path`` and the key of the (single) collection entry it passed, if any."""
    node: Any = snap
    key = ""
    for part in path.split("."):
        if part == "*":
            if isinstance(node, Mapping):
                key, node = next(iter(node.items()))
            else:
                node = node[0]
                key = getattr(node, "id", key)
        else:
            node = getattr(node, part)
    return node, key


# ------------------------------------------------------------------------------------------------
# Where each field is shown
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """``name{labels}`` on /metrics equals the field (``{key}`` in a label: the collection entry's key)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    show: Callable[[Any], float] = float


@dataclass(frozen=True)
class Amps:
    """The ``/amps`` node at ``path`` (``{key}``: the entry's id) shows the field as AMPS renders it."""

    path: str
    show: Callable[[Any], str] = render_values


@dataclass(frozen=True)
class Console:
    """The console state at ``path`` (``name={key}`` picks a list element) equals the field."""

    path: str


def M(metric: str, show: Callable[[Any], float] = float, /, **labels: str) -> Metric:  # noqa: N802
    return Metric(metric, tuple(sorted(labels.items())), show)


def _uptime(start: float) -> float:
    return NOW - start


def _buckets(h: Any) -> list[tuple[str, float]]:
    return [("+Inf" if math.isinf(b) else repr(b), float(n)) for b, n in h]


def _amps_buckets(h: Any) -> list[tuple[str, str]]:
    return [("inf" if math.isinf(b) else f"{b * 1e6:g}", str(n)) for b, n in h]


TX = "instance/transaction_log"
CLIENT = "instance/clients/{key}"
ACTION = "instance/actions/{key}"

#: Every snapshot field -> where users see it. Keep in step with docs/metrics.md.
WHERE: dict[str, tuple[Metric | Amps | Console, ...]] = {
    "instance.name": (M("broker_instance_info", lambda v: 1.0, name="{value}"), Amps("instance/name"),
                      Console("instance/name")),
    "instance.version": (M("broker_instance_info", lambda v: 1.0, version="{value}"), Amps("instance/version"),
                         Console("instance/version")),
    "instance.start_time": (M("broker_uptime_seconds", _uptime), Amps("instance/uptime", lambda v: format_uptime(NOW - v)),
                            Console("instance/start_time")),
    "instance.config_path": (Amps("instance/config_path"), Console("instance/config_path")),
    "recovery.in_progress": (M("broker_recovery_in_progress"), Amps("instance/recovery/in_progress", lambda v: str(int(v)))),
    "recovery.records_read": (M("broker_recovery_records_read"), Amps("instance/recovery/records_read")),
    "recovery.progress": (M("broker_recovery_progress_ratio"), Amps("instance/recovery/progress")),
    "instance.pid": (Amps("instance/pid"), Console("instance/pid")),
    "counters.messages_received": (M("broker_messages_received_total"), Amps("instance/processors/all/messages_received"),
                                   Console("totals/messages_in")),
    "counters.messages_delivered": (M("broker_messages_delivered_total"), Amps("instance/processors/all/matches_found"),
                                    Console("totals/messages_out")),
    "counters.bytes_in": (M("broker_bytes_received_total"), Amps("instance/processors/all/messages_received_bytes")),
    "counters.bytes_out": (M("broker_bytes_sent_total"), Amps("instance/processors/all/matches_found_bytes")),
    "counters.client_disconnects": (M("broker_client_disconnects_total"),),
    "counters.slow_client_disconnects": (M("broker_slow_client_disconnects_total"),),
    "counters.protocol_errors": (M("broker_protocol_errors_total"),),
    "counters.commands_failed": (M("broker_commands_failed_total"),),
    "counters.publishes_refused.journal": (M("broker_publishes_refused_total", reason="journal_full"),),
    "counters.publishes_refused.storage": (M("broker_publishes_refused_total", reason="storage_failed"),),
    "counters.sequence_jumps_refused": (M("broker_sequence_jumps_refused_total"),),
    "counters.filter_errors.evaluation": (M("broker_filter_errors_total", kind="evaluation"),),
    "counters.filter_errors.function": (M("broker_filter_errors_total", kind="function"),),
    **{f"counters.connections_closed.{reason}": (M("broker_connections_closed_total", reason=reason),)
       for reason in ("logon_timeout", "idle_timeout", "duplicate_name", "logons_refused", "entitlement_change")},
    **{f"counters.security_refusals.{what}": (M("broker_security_refusals_total", what=what),)
       for what in ("logon", "read", "write", "replay", "admin")},
    "counters.memory.limit": (M("broker_client_memory_limit_bytes"),),
    "counters.memory.input_bytes": (M("broker_client_buffered_bytes", direction="input"),),
    "counters.memory.output_bytes": (M("broker_client_buffered_bytes", direction="output"),),
    "counters.memory.frames_refused": (M("broker_memory_limit_refusals_total", action="frame_refused"),),
    "counters.memory.consumers_offlined": (M("broker_memory_limit_refusals_total", action="consumer_offlined"),),
    "clients.*.id": (Amps(f"{CLIENT}/id"), Console("clients/id={key}/id")),
    "clients.*.client_name": (Amps(f"{CLIENT}/client_name"), Console("clients/id={key}/name")),
    "clients.*.remote": (Amps(f"{CLIENT}/remote_address"), Console("clients/id={key}/remote")),
    "clients.*.connected_at": (Amps(f"{CLIENT}/connect_time", format_timestamp), Console("clients/id={key}/connected_at")),
    "clients.*.messages_in": (Amps(f"{CLIENT}/messages_in"), Console("clients/id={key}/messages_in")),
    "clients.*.messages_out": (Amps(f"{CLIENT}/messages_out"), Console("clients/id={key}/messages_out")),
    "clients.*.bytes_in": (Amps(f"{CLIENT}/bytes_in"),),
    "clients.*.bytes_out": (Amps(f"{CLIENT}/bytes_out"),),
    "clients.*.subscriptions": (Amps(f"{CLIENT}/subscription_count"), Console("clients/id={key}/subscription_count")),
    "clients.*.queued_bytes": (M("broker_client_queued_bytes"), Amps(f"{CLIENT}/queued_bytes_out"),
                               Console("clients/id={key}/queued_bytes")),
    "topics.*.messages_received": (M("broker_topic_messages_received_total", topic="{key}"),
                                   Amps("instance/topics/{key}/messages_received"),
                                   Console("topics/name={key}/messages_received")),
    "topics.*.messages_delivered": (M("broker_topic_messages_delivered_total", topic="{key}"),
                                    Amps("instance/topics/{key}/messages_delivered"),
                                    Console("topics/name={key}/messages_delivered")),
    **{f"subscriptions.{kind}": (M("broker_subscriptions", kind=kind),
                                 Amps(f"instance/subscriptions/{kind}/subscription_count"))
       for kind in ("subscribe", "sow_and_subscribe", "bookmark", "delta")},
    "subscription_details.*.client": (Console("clients/0/id"),),
    **{f"subscription_details.*.{f}": (Console(f"clients/0/subscriptions/0/{f}"),)
       for f in ("sub_id", "topic", "filter", "kind")},
    "pagination.paginated_subscriptions": (M("broker_paginated_subscriptions"),),
    "pagination.result_sets": (M("broker_pagination_result_sets"),),
    "pagination.result_set_entries": (M("broker_pagination_result_set_entries"),),
    "sow.*.records": (M("broker_sow_records", topic="{key}"), Amps("instance/sow/{key}/valid_keys"),
                      Console("topics/name={key}/sow_records")),
    **{f"sow.*.{field}": (M(f"broker_sow_{field}_total", topic="{key}"), Amps(f"instance/sow/{{key}}/{amps}"))
       for field, amps in (("inserts", "insert_count"), ("updates", "update_count"), ("deletes", "delete_count"),
                           ("queries", "query_count"), ("expirations", "expiration_count"))},
    "sow.*.history_versions_written": (M("broker_sow_history_versions_total", topic="{key}"),),
    "sow.*.history_pruned": (M("broker_sow_history_pruned_total", topic="{key}"),),
    "sow.*.historical_queries": (M("broker_sow_historical_queries_total", topic="{key}"),),
    "sow.*.record_cache_bytes": (M("broker_sow_record_cache_bytes", topic="{key}"),),
    "sow.*.record_cache_hits": (M("broker_sow_record_cache_hits_total", topic="{key}"),),
    "sow.*.record_cache_misses": (M("broker_sow_record_cache_misses_total", topic="{key}"),),
    **{f"oof.{reason}": (M("broker_oof_total", reason=reason),) for reason in ("match", "deleted", "expired")},
    "latency.buckets": (M("broker_delivery_latency_seconds_bucket", _buckets),),
    "latency.sum": (M("broker_delivery_latency_seconds_sum"),),
    "latency.count": (M("broker_delivery_latency_seconds_count"),),
    "journal.files.active": (M("broker_journal_files", state="active"), Amps(f"{TX}/journal_count")),
    "journal.files.archived": (M("broker_journal_files", state="archived"), Amps(f"{TX}/archived_count")),
    "journal.files.compressed": (M("broker_journal_files", state="compressed"), Amps(f"{TX}/compressed_count")),
    "journal.bytes": (M("broker_journal_bytes"), Amps(f"{TX}/bytes"), Console("journal/bytes")),
    "journal.last_sequence": (M("broker_journal_last_sequence"), Amps(f"{TX}/last_sequence"),
                              Console("journal/last_sequence")),
    "journal.durable_sequence": (M("broker_journal_durable_sequence"), Amps(f"{TX}/durable_sequence"),
                                 Console("journal/durable_sequence")),
    "journal.fsync.buckets": (M("broker_journal_fsync_seconds_bucket", _buckets),
                              Amps(f"{TX}/write_latency/histogram", _amps_buckets)),
    "journal.fsync.sum": (M("broker_journal_fsync_seconds_sum"),),
    "journal.fsync.count": (M("broker_journal_fsync_seconds_count"), Amps(f"{TX}/write_latency/count")),
    "journal.replays_active": (M("broker_replays_active"), Amps(f"{TX}/replays_active")),
    "journal.records_appended": (M("broker_journal_records_appended_total"), Amps(f"{TX}/records_appended")),
    "journal.disk_full": (M("broker_journal_disk_full"), Amps(f"{TX}/disk_full", lambda v: str(int(v))),
                          Console("journal/disk_full")),
    "journal.damaged_records": (M("broker_journal_damaged_records_total"), Amps(f"{TX}/damaged_records")),
    "journal.damaged_bytes": (M("broker_journal_damaged_bytes_total"), Amps(f"{TX}/damaged_bytes")),
    "journal.replay_failures": (M("broker_replay_failures_total"), Amps(f"{TX}/replay_failures")),
    "journal.replay_held_bytes": (M("broker_replay_held_bytes"), Amps(f"{TX}/replay_held_bytes")),
    "journal.replay_held_peak_bytes": (M("broker_replay_held_peak_bytes"), Amps(f"{TX}/replay_held_peak_bytes")),
    "journal.replay_catch_ups": (M("broker_replay_catch_ups_total"), Amps(f"{TX}/replay_catch_ups")),
    "journal.replay_held_offlined": (M("broker_replay_held_offlined_total"), Amps(f"{TX}/replay_held_offlined")),
    **{f"journal.file_list.*.{f}": (Console(f"journal/files/0/{f}"),) for f in ("name", "state", "size")},
    "actions.*.runs": (Amps(f"{ACTION}/runs"), Console("actions/name={key}/runs")),
    "actions.*.failures": (M("broker_action_failures_total", action="{key}"), Amps(f"{ACTION}/failures"),
                           Console("actions/name={key}/failures")),
    **{f"actions.*.outcomes.{o}": (M("broker_action_runs_total", action="{key}", outcome=o),
                                   Amps(f"{ACTION}/{o}_count"))
       for o in ("success", "failure", "skipped", "busy")},
    "actions.*.last_run_start": (M("broker_action_last_run_timestamp_seconds", action="{key}"),
                                 Amps(f"{ACTION}/last_run_time", format_timestamp),
                                 Console("actions/name={key}/last_run_start")),
    "actions.*.last_run_duration": (M("broker_action_last_run_duration_seconds", action="{key}"),
                                    Amps(f"{ACTION}/last_run_duration"), Console("actions/name={key}/last_run_duration")),
    "actions.*.running": (M("broker_action_running", action="{key}"), Amps(f"{ACTION}/running"),
                          Console("actions/name={key}/running")),
    "actions.*.trigger_failures": (M("broker_action_trigger_failures_total", action="{key}"),
                                   Amps(f"{ACTION}/trigger_failures")),
}  # fmt: skip


# ------------------------------------------------------------------------------------------------
# The three views
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def views() -> tuple[BrokerSnapshot, list[Any], dict[str, Any], dict[str, Any]]:
    snap = distinct_snapshot()
    text = generate_latest(make_registry(lambda: snap, clock=lambda: NOW, runtime_metrics=False)).decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    tree = AmpsTreeBuilder(clock=lambda: NOW).build(snap)
    console = orjson.loads(orjson.dumps(ConsoleView().build(snap, taken_at=1.0)))
    return snap, samples, tree, console


def _console_at(state: Any, path: str, key: str) -> Any:
    node = state
    for part in path.replace("{key}", key).split("/"):
        if "=" in part:
            field, wanted = part.split("=", 1)
            node = next(e for e in node if e[field] == wanted)
        elif isinstance(node, list):
            node = node[int(part)]
        else:
            node = node[part]
    return node


def test_every_snapshot_field_has_a_place_to_be_seen() -> None:
    fields = leaf_paths(BrokerSnapshot)
    assert not fields - set(WHERE), f"snapshot fields no view shows (add them to WHERE and the views): {sorted(fields - set(WHERE))}"
    assert not set(WHERE) - fields, f"WHERE names fields the snapshot does not have: {sorted(set(WHERE) - fields)}"
    assert all(WHERE.values())


@pytest.mark.parametrize("path", sorted(WHERE))
def test_each_view_shows_the_field_s_own_value(path: str, views) -> None:
    snap, samples, tree, console = views
    value, key = resolve(snap, path)
    for where in WHERE[path]:
        if isinstance(where, Metric):
            labels = {k: v.replace("{key}", key).replace("{value}", str(value)) for k, v in where.labels}
            found = [s for s in samples if s.name == where.name and labels.items() <= s.labels.items()]
            if where.show is _buckets:
                assert [(s.labels["le"], s.value) for s in found] == _buckets(value), (path, where)
                continue
            assert len(found) == 1, (path, where, found)
            assert found[0].value == where.show(value), (path, where)
        elif isinstance(where, Amps):
            hit = select(tree, where.path.replace("{key}", key).split("/"))
            assert hit is not None, (path, where)
            node = hit[1]
            if where.show is _amps_buckets:
                node = [(e["id"], e["count"]) for e in node]
            assert node == where.show(value), (path, where)
        else:
            assert _console_at(console, where.path, key) == value, (path, where)


def test_docs_name_every_metric_and_amps_field_shown() -> None:
    documented_metrics = set(re.findall(r"^\| `([a-z0-9_]+)` \|", DOCS, re.MULTILINE))
    amps_section = DOCS[DOCS.index("## The `/amps` statistics tree"):]
    amps_words = set(re.findall(r"`([^`]+)`", amps_section))
    amps_words |= {w for word in amps_words for w in re.split(r"[/ (),.]+", word)}
    for path, places in WHERE.items():
        for where in places:
            if isinstance(where, Metric):
                family = re.sub(r"_(bucket|sum|count)$", "", where.name) if "seconds_" in where.name else where.name
                assert family in documented_metrics, f"{path}: docs/metrics.md has no row for {family}"
            elif isinstance(where, Amps):
                leaf = where.path.split("/")[-1]
                assert leaf in amps_words or leaf in ("id",), f"{path}: docs/metrics.md's /amps table lacks {leaf}"


@given(
    st.builds(ClientStats, id=st.text(min_size=1), client_name=st.text(), remote=st.text(),
              connected_at=st.floats(0, 4e9), messages_in=st.integers(0, 2**63), messages_out=st.integers(0, 2**63),
              bytes_in=st.integers(0, 2**63), bytes_out=st.integers(0, 2**63), subscriptions=st.integers(0, 10**6),
              queued_bytes=st.integers(0, 2**40)),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_client_rows_render_as_the_generic_rendering_would(client: ClientStats, rate: float) -> None:
    row = _client_row(client, lambda *key: rate)
    assert all(isinstance(v, str) for v in row.values())
    assert row["bytes_in"] == render_values(client.bytes_in) and row["queued_bytes_out"] == render_values(client.queued_bytes)
    assert row["bytes_out_per_sec"] == render_values(rate) == row["messages_in_per_sec"]
    assert row["connect_time"] == format_timestamp(client.connected_at)
    assert row["client_name"] == render_values(client.client_name)
