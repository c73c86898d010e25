"""Fan-out: delivering each applied message to the subscriptions it reaches, with out-of-focus notices and
deltas, and telling oof subscriptions about deleted and expired records.

:class:`FanOut` is the part of :class:`broker.engine.engine.Engine` that delivers (the engine inherits it and
holds the state named here); :mod:`broker.engine.publish` calls :meth:`FanOut._deliver_run` once per applied
run of one topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker import speedups
from broker.engine.delivery import Client, deliver, deliver_templates
from broker.engine.publish import DUPLICATE
from broker.engine.router import HeldMessage, Router, Subscription, filter_passes
from broker.errors import BrokerError
from broker.messagetypes import JsonMessageType
from broker.protocol import DeliveryBatch, DeliveryTemplate

if TYPE_CHECKING:
    from broker.engine.counters import EngineCounters
    from broker.engine.publish import PublishMessage, RunMessage
    from broker.sow.record import SowRecord
    from broker.sow.topic import SowTopic


class FanOut:
    """Delivery, for :class:`broker.engine.engine.Engine` (which inherits it and holds the state named here)."""

    router: Router
    counters: EngineCounters
    latency: Any

    publisher_seq: dict[str, int]
    publisher_expiration_ns: int

    if TYPE_CHECKING:
        def _count_topic(self, topic: str, received: int, delivered: int) -> None: ...

        def _note_publisher(self, name: str, now_ns: int) -> None: ...

    def _plain_run(self, client: Any, topic: str, messages: Sequence[PublishMessage], start: int, end: int,
                   results: list[int | BrokerError], now_ns: int, max_depth: int | None, high: int) -> bool:
        """Apply and deliver ``messages[start:end]`` to a topic without SOW or journal when no subscription decides
        per message (no filter, delta or replay): what :meth:`~broker.engine.publish.Publishing._publish_run` and
        :meth:`_deliver_run` do for such a run, without a ``RunMessage`` or a parsed message per publish (only the
        depth check of ``lazy`` is kept). ``False``, with nothing done, when some subscription decides per message.

        ``high`` is the publisher's highest ``s`` applied before (a message at or below it is a re-send).
        """
        candidates = self.router.candidates(topic)
        plain = _plain_targets(candidates) if candidates else []
        if plain is None:
            return False
        mt, name = client.message_type, client.publisher_key
        items, received, high, top = plain_items(messages, start, end, results, high, bool(name), DUPLICATE,
                                                 mt.lazy if max_depth is not None else None, max_depth,
                                                 type(mt) is JsonMessageType)
        self.counters.messages_received += received
        if not items:
            return True
        if top and name:  # only once applied: a publish that failed may be sent again
            if top > self.publisher_seq.get(name, 0):
                self.publisher_seq[name] = top
            if self.publisher_expiration_ns:
                self._note_publisher(name, now_ns)
        delivered = 0
        if plain:
            batch, count = DeliveryBatch(topic, items), len(items)
            for target, sids in plain:  # each client's frames of the run in one step (the hot path: no call between)
                target.emit(batch.frames(sids), messages=count)
            delivered = len(plain) * len(items)
            if self.latency is not None:
                self.latency.observe((time.time_ns() - now_ns) / 1e9, delivered)
        self.counters.messages_delivered += delivered
        self._count_topic(topic, len(items), delivered)
        return True

    def _deliver_run(self, topic: str, sow: SowTopic | None, run: list[RunMessage],
                     results: list[int | BrokerError], now_ns: int) -> None:
        """Fan out each message of an applied run in order (and update paginated windows)."""
        candidates = self.router.candidates(topic)
        windows = self.router.windows if sow is not None and self.router.windows.covers(topic) else None
        # Subscriptions without a filter, delta or replay in progress get every message whole: who gets what is
        # the same for the whole run, so it is worked out once (the usual fan-out, decided per message, else).
        plain = _plain_targets(candidates)
        # Only a SOW topic's records expire (an expired one not swept yet gets its oof before the message).
        no_expiry = sow is None or all(one.expired is None for one in run)
        if plain is not None and windows is None and no_expiry:
            # Nothing else goes out between the messages of the run: each client takes the run in one step.
            batch = DeliveryBatch(topic, [(one.body, one.bm or None, one.key or None, one.x or None) for one in run])
            for one in run:
                results[one.index] = one.sequence
            count = len(run)
            for client, sids in plain:  # each client's frames of the run in one step (the hot path: no call between)
                client.emit(batch.frames(sids), messages=count)
            delivered = clients = len(plain) * len(run)
            if self.latency is not None:
                self.latency.observe((time.time_ns() - now_ns) / 1e9, clients)
            self.counters.messages_delivered += delivered
            self._count_topic(topic, len(run), delivered)
            return
        # Per message, but each client's whole messages are queued in one step at the end of the run (or
        # before anything else goes to that client): none when windows or expiries also send.
        pending: dict[Client, list[tuple[DeliveryTemplate, str]]] | None = None
        if windows is None and no_expiry:
            pending = {}
        delivered = clients = 0
        for one in run:
            results[one.index] = one.sequence
            if one.expired is not None:
                self._send_oof(sow, [one.expired], "expired")  # type: ignore[arg-type]
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
                paged = windows.on_change(sow, one.key, one.previous, one.record, one.msg,  # type: ignore[arg-type]
                                          self.counters.oof)
                delivered += paged
                clients += paged
        if pending:
            for client, deliveries in pending.items():
                deliver_templates(client, deliveries)
        if clients and self.latency is not None:  # one clock read per run: every client was served just now
            self.latency.observe((time.time_ns() - now_ns) / 1e9, clients)
        self.counters.messages_delivered += delivered
        self._count_topic(topic, len(run), delivered)

    def _fan_out(self, candidates: tuple[Subscription, ...], topic: str, body: bytes, msg: Any, bm: str | None,
                 key: str | None, x: str | None, previous: SowRecord | None, sow: SowTopic | None,
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
        passed: dict[Callable[[Any], bool], bool] = {}
        before: _PreviousState | None = None  # the same for the previous state, made when first needed
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
                    self.counters.oof.match += len(other.oofs)
            clients += sum(1 for c in others if c not in pubs)
        return delivered, clients

    def _send_oof(self, sow: SowTopic, records: list[SowRecord], reason: str) -> None:
        """Tell oof subscriptions that saw these records that they are gone (deleted or expired)."""
        if records and self.router.windows.covers(sow.name):
            self.router.windows.on_removed(sow, records, reason, self.counters.oof)
        subs = [s for s in self.router.candidates(sow.name) if s.oof or s.capture_all]
        if not subs or not records:
            return
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
                self.counters.oof.add(reason, len(sids))


class _PreviousState:
    """The state a publish replaces, during one fan-out: parsed when a subscription first needs it, and each
    filter's answer on it memoised (oof and delta subscriptions ask whether it passed their filter)."""

    __slots__ = ("_msg", "_parsed", "passed", "record", "sow")

    def __init__(self, record: SowRecord, sow: SowTopic | None) -> None:
        self.record = record
        self.sow = sow
        #: Filter -> whether the previous state passes it.
        self.passed: dict[Callable[[Any], bool], bool] = {}
        self._msg: Any = None
        self._parsed = False

    def passes(self, flt: Callable[[Any], bool]) -> bool:
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


def _plain_items(messages: Sequence[PublishMessage], start: int, end: int, results: list[int | BrokerError],
                 high: int, named: bool, duplicate: int, lazy: Callable[..., Any] | None, max_depth: int | None,
                 json_bodies: bool) -> tuple[list[tuple[bytes, None, None, str | None]], int, int, int]:
    """The delivery items of a plain-topic run (``(body, None, None, x)`` each), the messages received, the
    publisher's highest ``s`` and the run's highest ``s`` (:meth:`FanOut._plain_run`; twin
    :mod:`broker.speedups.plainrun`, which leaves ``lazy`` out for a JSON body within the depth bound).

    A message whose ``s`` is at most ``high`` (when the publisher is ``named``) is a re-send: ``duplicate`` in
    ``results``; ``lazy`` (the depth check, ``None``: none) refuses a body with its error in ``results``.
    """
    items: list[tuple[bytes, None, None, str | None]] = []
    received = top = 0
    for i in range(start, end):
        _topic, body, _delta, seq, _key, x, _expiration = messages[i]
        if seq and named and seq <= high:
            results[i] = duplicate
            continue
        received += 1
        if lazy is not None:
            try:
                lazy(body, max_depth=max_depth)
            except BrokerError as exc:
                results[i] = exc
                continue
        items.append((body, None, None, x or None))
        if seq:
            if seq > high:
                high = seq
            if seq > top:
                top = seq
    return items, received, high, top


#: The compiled twin of :func:`_plain_items` when built.
plain_items = _plainrun.plain_items if (_plainrun := speedups.load("plainrun")) is not None else _plain_items


def _plain_targets(candidates: tuple[Subscription, ...]) -> list[tuple[Client, str]] | None:
    """``(client, sub_ids)`` per client when every candidate gets every message of the topic whole (no filter,
    no delta, no replay holding live messages); ``None`` when some subscription decides per message. Each
    client's sub_ids in the order :meth:`Engine._fan_out` lists them."""
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


def _other_sids(others: dict[Client, _OtherSids], client: Client) -> _OtherSids:
    """``client``'s entry in a fan-out's ``others`` (made on first use)."""
    other = others.get(client)
    if other is None:
        other = others[client] = _OtherSids()
    return other


def _passes(flt: Callable[[Any], bool] | None, message: Any) -> bool:
    """Whether ``message`` passes ``flt`` (no filter: yes; no message: no); see :func:`filter_passes`."""
    return message is not None and filter_passes(flt, message)
