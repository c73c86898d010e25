"""The ``/amps`` statistics tree, shaped as AMPS shapes it (amps-config-reference.md §13).

Shape rules followed from AMPS's monitoring interface:

* nested objects mirror the path (``/amps/instance/sow`` is ``tree["amps"]["instance"]["sow"]``);
* collections are arrays of objects, each with an ``"id"`` (``/amps/instance/clients/<id>``);
* every value is rendered as a string (``"62.45"``, ``"1024"``); fractional values carry two decimals;
* ``uptime`` is ``hh:mm:ss.uuuuuu``; times are ``YYYYMMDDThhmmss.uuuuuuZ`` (UTC);
* a sub-path (``/amps/instance.json``) returns the same nesting from the root down to that node, so
  ``doc["amps"]["instance"]["clients"]`` works on both ``/amps.json`` and ``/amps/instance.json``.

The groups 60East's integrations read (``host.{memory,network,disks,cpus}``,
``instance.{processors,sow,views,queues,replication,clients}``) are always present, so their Prometheus
exporter and Datadog check run unchanged; fields we do not measure are listed in docs/metrics.md.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import trio

from broker.stats.host import HostSampler, process_memory
from broker.stats.rates import RateSampler
from broker.stats.snapshot import BrokerSnapshot, ClientStats, HistogramSnapshot, counts

__all__ = ["CLIENT_SLICE", "AmpsTreeBuilder", "format_timestamp", "format_uptime", "render_values", "select"]

Tree = dict[str, Any]

#: Clients per event-loop step when the tree is built on the loop (:meth:`AmpsTreeBuilder.build_sliced`):
#: about a millisecond of work.
CLIENT_SLICE = 100


def format_uptime(seconds: float) -> str:
    """AMPS's ``uptime`` form, ``hh:mm:ss.uuuuuu`` (hours keep counting past 24).

    Args:
        seconds: The uptime.

    Returns:
        E.g. ``"01:02:03.250000"``.
    """
    micros = max(0, round(seconds * 1_000_000))
    whole, frac = divmod(micros, 1_000_000)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{frac:06d}"


def format_timestamp(epoch: float) -> str:
    """AMPS's ISO-8601 basic form in UTC, ``YYYYMMDDThhmmss.uuuuuuZ``.

    Args:
        epoch: Seconds since the epoch.

    Returns:
        The timestamp string.
    """
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def render_values(node: Any) -> Any:
    """Render every leaf as AMPS does: strings, fractional numbers with two decimals.

    Args:
        node: A tree of dicts, lists and scalars.

    Returns:
        The same tree with string leaves.
    """
    if isinstance(node, dict):
        return {key: render_values(value) for key, value in node.items()}
    if isinstance(node, list):
        return [render_values(value) for value in node]
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, int):
        return str(node)
    if isinstance(node, float):
        return f"{node:.2f}" if math.isfinite(node) else "0"
    return "" if node is None else str(node)


def select(tree: Tree, segments: list[str]) -> tuple[Tree, Any] | None:
    """Find the node at ``/amps/<segments...>``.

    Array elements are addressed by ``id``; an id may itself contain ``/`` (SOW topic names do), so
    the longest run of segments naming an element wins.

    Args:
        tree: The whole tree (``{"amps": ...}``).
        segments: The path below ``/amps``, split on ``/``.

    Returns:
        ``(wrapped, node)``: the node nested from ``{"amps": ...}`` down, and the bare node; or ``None``
        when no such node exists.
    """
    node: Any = tree["amps"]
    steps: list[tuple[str, str]] = []  # ("key", name) or ("item", id)
    i = 0
    while i < len(segments):
        if isinstance(node, dict):
            if segments[i] not in node:
                return None
            steps.append(("key", segments[i]))
            node = node[segments[i]]
            i += 1
        elif isinstance(node, list):
            for j in range(len(segments), i, -1):
                wanted = "/".join(segments[i:j])
                found = next((e for e in node if isinstance(e, dict) and e.get("id") == wanted), None)
                if found is not None:
                    steps.append(("item", wanted))
                    node, i = found, j
                    break
            else:
                return None
        else:
            return None  # below a leaf
    wrapped: Any = node
    for depth in range(len(steps) - 1, -1, -1):
        kind, name = steps[depth]
        if kind == "key":
            wrapped = {name: wrapped}
        elif depth == len(steps) - 1:
            wrapped = [wrapped]  # the element itself was asked for
        else:
            wrapped = [{"id": name, **wrapped}]  # keep the element's id next to the selected field
    return {"amps": wrapped}, node


def _histogram_tree(snapshot: HistogramSnapshot) -> dict[str, Any]:
    """A histogram in microseconds, as AMPS reports ``write_latency``."""
    count = snapshot.count
    return {
        "count": count,
        "average": (snapshot.sum / count * 1e6) if count else 0.0,
        "histogram": [
            {"id": "inf" if math.isinf(bound) else f"{bound * 1e6:g}", "count": n}
            for bound, n in snapshot.buckets
        ],
    }


class AmpsTreeBuilder:
    """Builds the rendered ``{"amps": {"host": ..., "instance": ...}}`` tree from snapshots.

    It keeps the previous samples so ``*_per_sec`` values are averages over ``interval``.

    Args:
        interval: AMPS ``Admin/Interval`` in seconds (rate averaging window).
        clock: Returns the current epoch time.
    """

    def __init__(self, *, interval: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self._interval = interval
        self._clock = clock
        self._rates = RateSampler(interval)
        self._host = HostSampler(interval)

    def build(self, snapshot: BrokerSnapshot) -> Tree:
        """The whole tree for one snapshot.

        Args:
            snapshot: The broker's statistics.

        Returns:
            The rendered tree (all leaves are strings).
        """
        now = self._clock()
        rate = self._rate_function(snapshot, now)
        clients = [_client_row(c, rate) for c in snapshot.clients]
        return self._assemble(snapshot, now, rate, clients)

    async def build_sliced(self, snapshot: BrokerSnapshot, slice_size: int = CLIENT_SLICE) -> Tree:
        """:meth:`build`, run on the event loop: the per-client work (rates and rows, the bulk of the tree
        with many clients) in slices of ``slice_size`` clients with a trio checkpoint between them, so no
        step holds the loop for more than about a millisecond whatever the number of clients."""
        now = self._clock()
        flows = self._global_flows(snapshot)
        clients = snapshot.clients
        for start in range(0, len(clients), slice_size):
            _client_flows(flows, clients[start : start + slice_size])
            await trio.sleep(0)
        rates = self._rates.update(flows, now)
        await trio.sleep(0)

        def rate(*key: str) -> float:
            return rates.get(key, 0.0)

        rows: list[Any] = []
        for start in range(0, len(clients), slice_size):
            rows.extend(_client_row(c, rate) for c in clients[start : start + slice_size])
            await trio.sleep(0)
        return self._assemble(snapshot, now, rate, rows)

    def _global_flows(self, snap: BrokerSnapshot) -> dict[Any, float]:
        counters = snap.counters
        flows: dict[Any, float] = {
            ("all", "messages_received"): counters.messages_received,
            ("all", "matches_found"): counters.messages_delivered,
            ("all", "messages_received_bytes"): counters.bytes_in,
            ("all", "matches_found_bytes"): counters.bytes_out,
        }
        for topic, sow in snap.sow.items():
            flows[("sow", topic, "inserts")] = sow.inserts
            flows[("sow", topic, "updates")] = sow.updates
            flows[("sow", topic, "deletes")] = sow.deletes
            flows[("sow", topic, "queries")] = sow.queries
        for topic, t in snap.topics.items():
            flows[("topic", topic, "messages_received")] = t.messages_received
            flows[("topic", topic, "messages_delivered")] = t.messages_delivered
        return flows

    def _rate_function(self, snap: BrokerSnapshot, now: float) -> Callable[..., float]:
        flows = self._global_flows(snap)
        _client_flows(flows, snap.clients)
        rates = self._rates.update(flows, now)

        def rate(*key: str) -> float:
            return rates.get(key, 0.0)

        return rate

    def _assemble(self, snapshot: BrokerSnapshot, now: float, rate: Callable[..., float], clients: list[Any]) -> Tree:
        """The rendered tree, with the client rows already rendered (``clients``)."""
        tree = {"amps": {"host": self._host.sample(now), "instance": self._instance(snapshot, now, rate)}}
        rendered = render_values(tree)
        rendered["amps"]["instance"]["clients"] = clients
        return rendered

    def _instance(self, snap: BrokerSnapshot, now: float, rate: Callable[..., float]) -> dict[str, Any]:
        info, counters = snap.instance, snap.counters
        instance: dict[str, Any] = {
            "name": info.name,
            "version": info.version,
            "pid": info.pid,
            "config_path": info.config_path,
            "cwd": os.getcwd(),
            "uptime": format_uptime(now - info.start_time),
            "recovery": {"in_progress": int(snap.recovery.in_progress), "records_read": snap.recovery.records_read,
                         "progress": snap.recovery.progress},
            "memory": process_memory(),
            "statistics": {"interval": round(self._interval * 1000)},
            "processors": [
                {
                    "id": "all",
                    "description": "all message processors",
                    "messages_received": counters.messages_received,
                    "messages_received_per_sec": rate("all", "messages_received"),
                    "messages_received_bytes": counters.bytes_in,
                    "messages_received_bytes_per_sec": rate("all", "messages_received_bytes"),
                    "matches_found": counters.messages_delivered,
                    "matches_found_per_sec": rate("all", "matches_found"),
                    "matches_found_bytes": counters.bytes_out,
                    "matches_found_bytes_per_sec": rate("all", "matches_found_bytes"),
                    "denied_reads": 0,  # no entitlements yet: nothing is ever denied
                    "denied_writes": 0,
                    "throttle_count": 0,
                }
            ],
            "clients": [],  # rendered separately (_client_row), in slices by build_sliced
            "subscriptions": [
                {"id": kind, "subscription_count": n} for kind, n in counts(snap.subscriptions)
            ],
            "sow": [
                {
                    "id": topic,
                    "topic": topic,
                    "valid_keys": s.records,
                    "insert_count": s.inserts,
                    "inserts_per_sec": rate("sow", topic, "inserts"),
                    "update_count": s.updates,
                    "updates_per_sec": rate("sow", topic, "updates"),
                    "delete_count": s.deletes,
                    "deletes_per_sec": rate("sow", topic, "deletes"),
                    "query_count": s.queries,
                    "queries_per_sec": rate("sow", topic, "queries"),
                    "expiration_count": s.expirations,
                }
                for topic, s in sorted(snap.sow.items())
            ],
            "topics": [
                {
                    "id": topic,
                    "messages_received": t.messages_received,
                    "messages_received_per_sec": rate("topic", topic, "messages_received"),
                    "messages_delivered": t.messages_delivered,
                    "messages_delivered_per_sec": rate("topic", topic, "messages_delivered"),
                }
                for topic, t in sorted(snap.topics.items())
            ],
            "actions": [
                {
                    "id": name,
                    "runs": a.runs,
                    "failures": a.failures,
                    **{f"{outcome}_count": n for outcome, n in counts(a.outcomes)},
                    "running": a.running,
                    "last_run_time": "" if a.last_run_start is None else format_timestamp(a.last_run_start),
                    "last_run_duration": a.last_run_duration,
                    "trigger_failures": a.trigger_failures,
                }
                for name, a in sorted(snap.actions.items())
            ],
            "views": [],
            "queues": [],
            "replication": [],
        }
        journal = snap.journal
        if journal is not None:
            instance["transaction_log"] = {
                "journal_count": journal.files.active,
                "archived_count": journal.files.archived,
                "compressed_count": journal.files.compressed,
                "bytes": journal.bytes,
                "last_sequence": journal.last_sequence,
                "durable_sequence": journal.durable_sequence,
                "records_appended": journal.records_appended,
                "replays_active": journal.replays_active,
                "disk_full": int(journal.disk_full),
                "damaged_records": journal.damaged_records,
                "damaged_bytes": journal.damaged_bytes,
                "replay_failures": journal.replay_failures,
                "replay_held_bytes": journal.replay_held_bytes,
                "replay_held_peak_bytes": journal.replay_held_peak_bytes,
                "replay_catch_ups": journal.replay_catch_ups,
                "replay_held_offlined": journal.replay_held_offlined,
                "write_latency": _histogram_tree(journal.fsync),
            }
        return instance


def _client_flows(flows: dict[Any, float], clients: Sequence[ClientStats]) -> None:
    for c in clients:
        flows[("client", c.id, "messages_in")] = c.messages_in
        flows[("client", c.id, "messages_out")] = c.messages_out
        flows[("client", c.id, "bytes_in")] = c.bytes_in
        flows[("client", c.id, "bytes_out")] = c.bytes_out


def _per_sec(value: float) -> str:
    """A rate as :func:`render_values` renders a float."""
    return f"{value:.2f}" if math.isfinite(value) else "0"


def _client_row(c: ClientStats, rate: Callable[..., float]) -> dict[str, str]:
    """One client's element of ``/amps/instance/clients``, already rendered (what :func:`render_values`
    makes of it, written out: with thousands of clients these rows are most of the tree, and the generic
    walk over them cost twice the rest of building it)."""
    cid = c.id
    return {
        "id": cid,
        "client_name": c.client_name or "",
        "remote_address": c.remote,
        "connect_time": format_timestamp(c.connected_at),
        "messages_in": str(c.messages_in),
        "messages_in_per_sec": _per_sec(rate("client", cid, "messages_in")),
        "messages_out": str(c.messages_out),
        "messages_out_per_sec": _per_sec(rate("client", cid, "messages_out")),
        "bytes_in": str(c.bytes_in),
        "bytes_in_per_sec": _per_sec(rate("client", cid, "bytes_in")),
        "bytes_out": str(c.bytes_out),
        "bytes_out_per_sec": _per_sec(rate("client", cid, "bytes_out")),
        "subscription_count": str(c.subscriptions),
        "queued_bytes_out": str(c.queued_bytes),
        # Not measured yet; present (as 0) because 60East's exporter reads them.
        "queue_depth_out": "0",
        "queue_max_latency": "0",
        "transport_rx_queue": "0",
        "transport_tx_queue": "0",
    }
