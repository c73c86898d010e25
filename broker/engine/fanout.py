"""Fan-out: delivering each applied message to the subscriptions it reaches, with out-of-focus notices and
deltas, and telling oof subscriptions about deleted and expired records.

:class:`FanOut` is an object the engine owns (:attr:`broker.engine.engine.Engine.fanout`): the publish steps
(:class:`broker.engine.publish.Publishing`) hand it each applied run of one topic (:meth:`FanOut.deliver_run`,
or :meth:`FanOut.deliver_whole` for a run every subscription takes whole), and the engine's deletes and expiry
hand it the records that left a topic (:meth:`FanOut.send_oof`). Which of these runs when:
:mod:`broker.engine.publish`'s table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.engine.delivery import Client, Delivery, deliver_templates
from broker.engine.pagination import Predicate
from broker.engine.router import HeldMessage, Router, Subscription, filter_passes
from broker.messagetypes import LARGE_MESSAGE
from broker.protocol import DeliveryBatch, DeliveryTemplate

if TYPE_CHECKING:
    from broker.engine.counters import EngineCounters
    from broker.engine.run_message import RunMessage
    from broker.errors import BrokerError
    from broker.messagetypes import Message
    from broker.sow.record import SowRecord
    from broker.sow.topic import SowTopic
    from broker.stats.histogram import Histogram

#: ``(client, its sub_ids as a comma list)``: who takes every message of a run whole.
Targets = list[tuple[Client, str]]
#: One message of a run delivered whole: ``(body, bm, k, x)``, absent values ``None``.
WholeItem = tuple[bytes, "str | None", "str | None", "str | None"]


class FanOut:
    """Delivery of applied messages to the subscriptions of one engine.

    Args:
        router: The engine's subscriptions.
        counters: The engine's totals (messages delivered, out-of-focus notices, per-topic flow).
        stats_topics: Topics counted individually (every other topic is counted as ``_other``).
        latency: Publish-to-delivery latency, one observation per client a message is queued for; ``None``:
            not measured.
    """

    def __init__(self, *, router: Router, counters: EngineCounters, stats_topics: frozenset[str],
                 latency: Histogram | None) -> None:
        self._router = router
        self._counters = counters
        self._stats_topics = stats_topics
        self._latency = latency
        #: Single deliveries, with this engine's reuse of the last message's encoded header (bound once: the
        #: per-message fan-out calls it).
        self._deliver = Delivery().deliver

    def count_topic(self, topic: str, received: int, delivered: int) -> None:
        """Add to ``topic``'s flow in the statistics (``_other`` for a topic not configured)."""
        self._counters.count_topic(topic if topic in self._stats_topics else "_other", received, delivered)

    def idle(self, topic: str) -> bool:
        """Whether nothing on ``topic`` reads what a publish replaces: no subscription, no paginated window."""
        router = self._router
        return not router.candidates(topic) and not router.windows.covers(topic)

    def whole_targets(self, topic: str) -> Targets | None:
        """Who takes every message published to ``topic`` whole (``[]``: nobody subscribes), or ``None`` when
        some subscription decides per message (a filter, a delta, a replay holding live messages)."""
        candidates = self._router.candidates(topic)
        return _plain_targets(candidates) if candidates else []

    def deliver_whole(self, topic: str, items: list[WholeItem], targets: Targets, now_ns: int) -> None:
        """Deliver a run of ``topic`` to ``targets``, each client's frames of the run in one step, and count it.

        Args:
            topic: The topic of every message.
            items: The messages (``(body, bm, k, x)`` each).
            targets: :meth:`whole_targets`' answer for ``topic``.
            now_ns: When the run's publish began (for the latency).
        """
        delivered = 0
        if targets:
            batch, count = DeliveryBatch(topic, items), len(items)
            for client, sids in targets:  # the hot path: no call between a client's frames
                client.emit(batch.frames(sids), messages=count)
            delivered = len(targets) * count
            if self._latency is not None:
                self._latency.observe((time.time_ns() - now_ns) / 1e9, delivered)
        self._counters.messages_delivered += delivered
        self.count_topic(topic, len(items), delivered)

    def deliver_run(self, topic: str, sow: SowTopic | None, run: list[RunMessage],
                    results: list[int | BrokerError], now_ns: int) -> None:
        """Fan out each message of an applied run in order (and update paginated windows); each message's
        result becomes its journal sequence.

        Subscriptions without a filter, delta or replay in progress get every message whole: who gets what is
        then the same for the whole run and each client takes the run in one step (:meth:`deliver_whole`),
        unless a paginated window or an expired record also sends between the messages. Otherwise each message
        is decided per subscription (:meth:`_fan_out`).
        """
        router = self._router
        candidates = router.candidates(topic)
        windows = router.windows if sow is not None and router.windows.covers(topic) else None
        plain = _plain_targets(candidates)
        # Only a SOW topic's records expire (an expired one not swept yet gets its oof before the message).
        no_expiry = sow is None or all(one.expired is None for one in run)
        if plain is not None and windows is None and no_expiry:
            for one in run:
                results[one.index] = one.sequence
            self.deliver_whole(topic, [(one.body, one.bm or None, one.key or None, one.x or None) for one in run],
                               plain, now_ns)
            return
        # Per message, but each client's whole messages are queued in one step at the end of the run (or
        # before anything else goes to that client): none when windows or expiries also send.
        pending: dict[Client, list[tuple[DeliveryTemplate, str]]] | None = None
        if windows is None and no_expiry:
            pending = {}
        deliver = self._deliver
        counters = self._counters
        delivered = clients = 0
        for one in run:
            results[one.index] = one.sequence
            if one.expired is not None:
                assert sow is not None  # only a SOW topic's records expire
                self.send_oof(sow, [one.expired], "expired")
            if plain is not None:
                x = one.x or None
                for client, sids in plain:
                    deliver(client, topic, sids, one.body, one.bm, one.key, x)
                delivered += len(plain)
                clients += len(plain)
            elif candidates:
                d, c = self._fan_out(candidates, topic, one.body, one.msg, one.bm, one.key, one.x or None,
                                     one.previous, sow, pending)
                delivered += d
                clients += c
            if windows is not None:
                assert sow is not None and one.key is not None  # windows cover SOW topics only
                paged = windows.on_change(sow, one.key, one.previous, one.record, one.msg, counters.oof)
                delivered += paged
                clients += paged
        if pending:
            for client, deliveries in pending.items():
                deliver_templates(client, deliveries)
        if clients and self._latency is not None:  # one clock read per run: every client was served just now
            self._latency.observe((time.time_ns() - now_ns) / 1e9, clients)
        counters.messages_delivered += delivered
        self.count_topic(topic, len(run), delivered)

    def _fan_out(self, candidates: tuple[Subscription, ...], topic: str, body: bytes, msg: Message | None,
                 bm: str | None, key: str | None, x: str | None, previous: SowRecord | None, sow: SowTopic | None,
                 pending: dict[Client, list[tuple[DeliveryTemplate, str]]] | None = None) -> tuple[int, int]:
        """Deliver one message to the subscriptions among ``candidates`` it reaches; returns (messages
        delivered, clients served). With ``pending``, whole messages are added to it (the caller sends each
        client's at once) and a client's pending ones go out before an oof or a delta to it."""
        # client -> its sub_ids the message goes to whole: the usual case, one publish per client.
        pubs: dict[Client, list[str]] = {}
        # client -> the sub_ids it gets an oof or a delta on: only clients some subscription sends one to.
        others: dict[Client, _OtherSids] = {}
        # Each distinct filter is evaluated once per message (subscribers with the same filter text share
        # one compiled filter): filter -> passes the new state.
        passed: dict[Predicate, bool] = {}
        before: _PreviousState | None = None  # the same for the previous state, made when first needed
        deliver = self._deliver
        ok: bool | None
        if msg is not None and len(body) >= LARGE_MESSAGE and (paths := _filter_paths(candidates)):
            # Every filter's fields read together: a large JSON body is then scanned once, not decoded whole
            # (and not at all when no filter reads it).
            msg.prefetch(paths)
        for sub in candidates:
            if sub.capture_all and sub.replay_buffer is not None:  # a historical paginated replay: everything
                sub.replay_buffer.append(HeldMessage(topic, body, bm, key, x))
                continue
            flt = sub.filter
            if flt is None:
                ok = msg is not None
            else:
                ok = passed.get(flt)
                if ok is None:
                    ok = passed[flt] = _passes(flt, msg)
            if ok:
                if sub.replay_buffer is not None:  # replaying from the journal: live waits for the cut-over
                    sub.replay_buffer.append(HeldMessage(topic, body, bm, key, x))
                    continue
                if sub.delta and previous is not None:
                    as_delta = True
                    if flt is not None:  # a record entering the filter is sent whole
                        if before is None:
                            before = _PreviousState(previous, sow)
                        as_delta = before.passes(flt)
                    if as_delta:
                        other = _other_sids(others, sub.client)
                        other.deltas.append(sub.sub_id)
                        if sub.no_empties:
                            other.quiet.append(sub.sub_id)
                        continue
                sids = pubs.get(sub.client)
                if sids is None:
                    pubs[sub.client] = [sub.sub_id]
                else:
                    sids.append(sub.sub_id)
            elif sub.oof and previous is not None and flt is not None and sub.saw(previous):
                if before is None:
                    before = _PreviousState(previous, sow)
                if not before.passes(flt):
                    continue
                if sub.replay_buffer is not None:  # after the replay, in order with the live messages
                    sub.replay_buffer.append(HeldMessage(topic, body, bm, key, x, "match"))
                    continue
                _other_sids(others, sub.client).oofs.append(sub.sub_id)
        if pending is None:
            for client, sids in pubs.items():
                deliver(client, topic, sids[0] if len(sids) == 1 else ",".join(sids), body, bm, key, x)
        elif pubs:
            template = DeliveryTemplate("p", topic, body, bm=bm or None, k=key or None, x=x or None)
            for client, sids in pubs.items():
                queued = pending.get(client)
                delivery = (template, sids[0] if len(sids) == 1 else ",".join(sids))
                if queued is None:
                    pending[client] = [delivery]
                else:
                    queued.append(delivery)
        delivered = clients = len(pubs)
        if others:
            for client, other in others.items():
                if pending and client in pending:  # in order: its earlier messages first
                    deliver_templates(client, pending.pop(client))
                if other.deltas:
                    assert sow is not None and previous is not None
                    diff = sow.message_type.diff(previous.data, body, sow.key_fields)
                    sids = other.deltas
                    # no_empties: a diff holding no more than the key fields (the diff of the message with
                    # itself) changes nothing.
                    if other.quiet and diff == sow.message_type.diff(body, body, sow.key_fields):
                        sids = [sid for sid in sids if sid not in other.quiet]
                    if sids:
                        deliver(client, topic, ",".join(sids), diff, bm, key, x)
                        delivered += 1
                if other.oofs:
                    deliver(client, topic, ",".join(other.oofs), body, bm, key, x, command="oof", reason="match")
                    self._counters.oof.match += len(other.oofs)
            clients += sum(1 for c in others if c not in pubs)
        return delivered, clients

    def send_oof(self, sow: SowTopic, records: list[SowRecord], reason: str) -> None:
        """Tell oof subscriptions (and paginated windows) that saw these records of ``sow`` that they are gone
        (``reason``: ``deleted`` or ``expired``)."""
        router = self._router
        if records and router.windows.covers(sow.name):
            router.windows.on_removed(sow, records, reason, self._counters.oof)
        subs = [s for s in router.candidates(sow.name) if s.oof or s.capture_all]
        if not subs or not records:
            return
        deliver = self._deliver
        for rec in records:
            msg = sow.message_type.parse(rec.data)
            targets: dict[Client, list[str]] = {}
            for sub in subs:
                if sub.capture_all and sub.replay_buffer is not None:  # a historical paginated replay
                    sub.replay_buffer.append(HeldMessage(sow.name, rec.data, rec.bookmark or None, rec.key,
                                                         rec.correlation_id or None, reason))
                    continue
                if sub.oof and _passes(sub.filter, msg) and sub.saw(rec):
                    if sub.replay_buffer is not None:  # after the replay, in order with the live messages
                        sub.replay_buffer.append(HeldMessage(sow.name, rec.data, rec.bookmark or None, rec.key,
                                                             rec.correlation_id or None, reason))
                        continue
                    targets.setdefault(sub.client, []).append(sub.sub_id)
            for client, sids in targets.items():
                deliver(client, sow.name, ",".join(sids), rec.data, rec.bookmark or None, rec.key,
                        rec.correlation_id or None, command="oof", reason=reason)
                self._counters.oof.add(reason, len(sids))


class _PreviousState:
    """The state a publish replaces, during one fan-out: parsed when a subscription first needs it, and each
    filter's answer on it memoised (oof and delta subscriptions ask whether it passed their filter)."""

    __slots__ = ("_msg", "_parsed", "passed", "record", "sow")

    def __init__(self, record: SowRecord, sow: SowTopic | None) -> None:
        self.record = record
        self.sow = sow
        #: Filter -> whether the previous state passes it.
        self.passed: dict[Predicate, bool] = {}
        self._msg: Message | None = None
        self._parsed = False

    def passes(self, flt: Predicate) -> bool:
        """Whether the previous state passed ``flt``."""
        was = self.passed.get(flt)
        if was is None:
            if not self._parsed:
                self._msg = self.sow.message_type.parse(self.record.data) if self.sow is not None else None
                self._parsed = True
            was = self.passed[flt] = _passes(flt, self._msg)
        return was


@dataclass(slots=True)
class _OtherSids:
    """One client's subscriptions that get an out-of-focus notice, or a delta, of the message being fanned out."""

    oofs: list[str] = field(default_factory=list)
    deltas: list[str] = field(default_factory=list)
    #: The ``deltas`` asking for ``no_empties``: left out when the update changes no field.
    quiet: list[str] = field(default_factory=list)


def _plain_targets(candidates: tuple[Subscription, ...]) -> Targets | None:
    """``(client, sub_ids)`` per client when every candidate gets every message of the topic whole (no filter,
    no delta, no replay holding live messages); ``None`` when some subscription decides per message. Each
    client's sub_ids in the order :meth:`FanOut._fan_out` lists them."""
    if not candidates:
        return None
    by_client: dict[Client, list[str]] = {}
    for sub in candidates:
        if sub.filter is not None or sub.delta or sub.replay_buffer is not None or sub.capture_all:
            return None
        sids = by_client.get(sub.client)
        if sids is None:
            by_client[sub.client] = [sub.sub_id]
        else:
            sids.append(sub.sub_id)
    return [(client, ",".join(sids)) for client, sids in by_client.items()]


def _filter_paths(candidates: tuple[Subscription, ...]) -> list[str]:
    """The field paths the filters of ``candidates`` read (:attr:`broker.expr.Filter.paths`)."""
    return [path for sub in candidates if sub.filter is not None for path in getattr(sub.filter, "paths", ())]


def _other_sids(others: dict[Client, _OtherSids], client: Client) -> _OtherSids:
    """``client``'s entry in a fan-out's ``others`` (made on first use)."""
    other = others.get(client)
    if other is None:
        other = others[client] = _OtherSids()
    return other


def _passes(flt: Predicate | None, message: Message | None) -> bool:
    """Whether ``message`` passes ``flt`` (no filter: yes; no message: no); see :func:`filter_passes`."""
    return message is not None and filter_passes(flt, message)
