"""The web console's data: ``/console/state.json``, a view over the Admin server's statistics samples, and
``/console/history.json``, the chart's last ten minutes.

The console (``broker/admin/static``: plain HTML, CSS and JavaScript, no build step) loads the history
once, then polls the state once a second and draws what changed. Rates are computed here, between two
consecutive samples (one per ``<Admin><Interval>``), so every browser sees the same figures; the history
is the sampler's (:attr:`~broker.admin.sampler.StatisticsSampler.history`), kept whether or not a browser
is open.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

from broker.admin.sampler import SamplePoint
from broker.stats.snapshot import BrokerSnapshot, TopicFlow

__all__ = ["ConsoleView", "WebSocketEndpoint", "history_points"]

#: Subscriptions shown per client.
SUBSCRIPTIONS_PER_CLIENT = 20

WebSocketEndpoint = Mapping[str, Any]  # {"name": transport name, "port": bound port}

#: The flow of a SOW topic that is not a configured statistics topic (nothing counted under its name).
_NO_FLOW = TopicFlow()


class ConsoleView:
    """Builds the console's state from statistics samples.

    Args:
        websockets: The broker's websocket transports (``name``, ``port``): the query panel connects to the
            first one, on the host the console was loaded from.
    """

    def __init__(self, websockets: Sequence[WebSocketEndpoint] | None = None) -> None:
        #: Used by reference: the broker adds its websocket transports once they listen.
        self.websockets = websockets if websockets is not None else []
        self._previous: tuple[float, BrokerSnapshot] | None = None

    def build(self, snapshot: BrokerSnapshot, taken_at: float, *,
              previous: tuple[float, BrokerSnapshot] | None = None, interval_setting: float | None = None,
              sample_duration: float | None = None, late_samples: int = 0) -> dict[str, Any]:
        """The console state for ``snapshot``, taken at ``taken_at`` (monotonic seconds).

        Args:
            snapshot: The latest sample.
            taken_at: When it was taken.
            previous: The sample before it and when it was taken (the sampler's
                :attr:`~broker.admin.sampler.StatisticsSampler.previous`): rates are the counters' growth
                between the two. Without it, the sample this view built the state of last time (call once per
                sample, in sample order).
            interval_setting: ``<Admin><Interval>`` seconds (the page says a sample is late past twice that).
            sample_duration: Seconds the sample took.
            late_samples: Grid points the sampler skipped because a sample overran its interval.
        """
        if previous is None:
            previous = self._previous
        self._previous = (taken_at, snapshot)
        seconds = taken_at - previous[0] if previous is not None else 0.0

        def rate(now: float, before: float | None) -> float:
            if before is None or seconds <= 0:
                return 0.0
            return max(0.0, (now - before) / seconds)

        before = previous[1] if previous is not None else None
        counters = snapshot.counters
        old_counters = before.counters if before is not None else None
        old_topics = before.topics if before is not None else {}
        names = sorted(set(snapshot.topics) | set(snapshot.sow))
        topics = []
        for name in names:
            flow = snapshot.topics.get(name, _NO_FLOW)
            old = old_topics.get(name)
            sow = snapshot.sow.get(name)
            topics.append({
                "name": name,
                "sow_records": sow.records if sow is not None else None,
                "messages_received": flow.messages_received,
                "messages_delivered": flow.messages_delivered,
                "in_per_sec": rate(flow.messages_received, old.messages_received if old else None),
                "out_per_sec": rate(flow.messages_delivered, old.messages_delivered if old else None),
            })
        subscriptions: dict[str, list[dict[str, str]]] = {}
        for sub in snapshot.subscription_details:
            listed = subscriptions.setdefault(sub.client, [])
            if len(listed) < SUBSCRIPTIONS_PER_CLIENT:
                listed.append({"sub_id": sub.sub_id, "topic": sub.topic, "filter": sub.filter, "kind": sub.kind})
        clients = [{
            "id": c.id, "name": c.client_name, "remote": c.remote, "connected_at": c.connected_at,
            "messages_in": c.messages_in, "messages_out": c.messages_out, "queued_bytes": c.queued_bytes,
            "subscription_count": c.subscriptions, "subscriptions": subscriptions.get(c.id, []),
        } for c in sorted(snapshot.clients, key=lambda c: c.connected_at)]
        journal = snapshot.journal
        actions = [{"name": name, "runs": a.runs, "failures": a.failures, "running": a.running,
                    "last_run_start": a.last_run_start, "last_run_duration": a.last_run_duration}
                   for name, a in sorted(snapshot.actions.items())]
        info = snapshot.instance
        return {
            "instance": {"name": info.name, "version": info.version, "start_time": info.start_time,
                         "config_path": info.config_path, "pid": info.pid},
            "taken_at": taken_at,
            "interval": seconds or None,
            "interval_setting": interval_setting,
            "sample_duration": sample_duration,
            "late_samples": late_samples,
            "totals": {
                "messages_in": counters.messages_received, "messages_out": counters.messages_delivered,
                "in_per_sec": rate(counters.messages_received,
                                   old_counters.messages_received if old_counters else None),
                "out_per_sec": rate(counters.messages_delivered,
                                    old_counters.messages_delivered if old_counters else None),
                "clients": len(snapshot.clients),
            },
            "topics": topics,
            "clients": clients,
            "journal": None if journal is None else {
                "last_sequence": journal.last_sequence, "durable_sequence": journal.durable_sequence,
                "bytes": journal.bytes, "disk_full": journal.disk_full,
                "files": [{"name": f.name, "state": f.state, "size": f.size} for f in journal.file_list],
            },
            "actions": actions,
            "websockets": [dict(w) for w in self.websockets],
        }



def history_points(points: Iterable[SamplePoint], interval_setting: float) -> dict[str, Any]:
    """``/console/history.json``: the totals' rates between consecutive samples, oldest first.

    Args:
        points: The sampler's :attr:`~broker.admin.sampler.StatisticsSampler.history`.
        interval_setting: ``<Admin><Interval>`` seconds.

    Returns:
        ``{"interval_setting": s, "points": [{"t": epoch, "taken_at": monotonic, "in": per s, "out": per s}]}``;
        a point's ``taken_at`` equals the ``taken_at`` of the state built from the same sample, so the page
        appends live states after the history without drawing one twice.
    """
    rows = []
    for before, now in pairwise(points):
        seconds = now.taken_at - before.taken_at
        if seconds <= 0:
            continue
        rows.append({"t": now.epoch, "taken_at": now.taken_at,
                     "in": max(0.0, (now.messages_received - before.messages_received) / seconds),
                     "out": max(0.0, (now.messages_delivered - before.messages_delivered) / seconds)})
    return {"interval_setting": interval_setting, "points": rows}
