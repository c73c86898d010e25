"""The engine: applies every command in one trio task context, so each runs atomically.

Publishing (:mod:`broker.engine.publish`, which the engine inherits) parses the message once, generates the
SOW key, appends to the journal, upserts the SOW; the engine fans out to subscriptions (with out-of-focus
notices). Queries are planned here and streamed by the session. The engine never awaits: the kernel and sessions own all I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.engine.counters import EngineCounters
from broker.engine.publish import Journal, PublishSteps, RunMessage
from broker.engine.queries import PAUSE_EVERY, QueryPlan, parse_options, plan_query
from broker.engine.router import HeldMessage, Router, Subscription
from broker.engine.topics import GuardedTopicPattern, TopicPattern
from broker.errors import BrokerError, CommandError, StorageError
from broker.memo import Memo
from broker.sow.record import SowRecord
from broker.sow.topic import SowTopic

log = logging.getLogger("broker.engine")

#: Estimated bytes the cache of compiled filters (by text) may keep in total (``Filter.cost``); past it
#: the cache starts over. Subscriptions keep their own filters whatever the cache holds.
FILTER_CACHE_BYTES = 64 * 1024 * 1024
#: Filters at least this long are compiled in a worker thread by the session before its command runs
#: (a filter at the 32 KiB length limit takes ~0.2 s to compile); shorter ones compile on the loop in
#: well under a millisecond.
THREADED_FILTER_LENGTH = 2048


class Client(Protocol):
    """What the engine needs from a connected client (a :class:`broker.server.session.Session`)."""

    name: str
    message_type: Any

    def send_publish(self, topic: str, sids: str, body: bytes, bm: str | None, k: str | None,
                     x: str | None, command: str = "p", reason: str | None = None) -> None: ...


class Engine(PublishSteps):
    """The broker's state: SOW topics, subscriptions, and the journal hook.

    Args:
        sow_topics: Configured SOW topics by name.
        message_types: Resolves a message type name to its object.
        filter_functions: Extra functions for content filters (from plugins).
        journal: The transaction log, or ``None``.
        is_logged: Whether a topic is recorded in the transaction log.
        compile_filter: Compiles filter text (``broker.expr.compile_filter``).
        compile_order_by: Compiles OrderBy text.
        stats_topics: Topics counted individually in statistics (others aggregate as ``_other``).
        latency: A :class:`broker.stats.histogram.Histogram` of publish-to-delivery latency (one
            observation per client a message is queued for), or ``None``.
    """

    def __init__(
        self,
        *,
        sow_topics: Mapping[str, SowTopic],
        message_types: Callable[[str], Any],
        compile_filter: Callable[..., Any],
        compile_order_by: Callable[[str], Any],
        filter_functions: Mapping[str, Callable[..., Any]] | None = None,
        journal: Journal | None = None,
        is_logged: Callable[[str], bool] = lambda topic: False,
        stats_topics: frozenset[str] = frozenset(),
        latency: Any = None,
    ) -> None:
        self.router = Router()
        self.sow_topics = dict(sow_topics)
        self.message_types = message_types
        self._compile_filter = compile_filter
        self._compile_order_by = compile_order_by
        self._functions = dict(filter_functions or {})
        #: Filter text -> compiled filter (bounded: filters come from clients).
        self._filter_cache: Memo[str, Any] = Memo(
            lambda text: self._compile_filter(text, self._functions), 10_000,
            cost=lambda text, flt: getattr(flt, "cost", len(text)), max_cost=FILTER_CACHE_BYTES,
        )
        self.journal = journal
        self.is_logged = is_logged
        self.counters = EngineCounters()
        self._stats_topics = stats_topics
        self.latency = latency
        #: Highest publish-store sequence applied per publisher name (de-duplication).
        self.publisher_seq: dict[str, int] = {}
        #: ``<InactiveClientAckExpiration>`` in nanoseconds: a publisher without a publish this long is
        #: forgotten by :attr:`publisher_seq` (and starts afresh, as in AMPS); 0: never.
        self.publisher_expiration_ns = 0
        self._publisher_active: dict[str, int] = {}
        self._next_publisher_sweep = 0
        #: The last :meth:`expire` left due records for later (journal disk full, storage not writable).
        self.expiry_waiting = False

    # -- helpers -------------------------------------------------------------------------------------
    def is_duplicate(self, client_name: str, seq: int) -> bool:
        """Whether a publisher's store sequence was already applied (a re-send after reconnect)."""
        if seq <= self.publisher_seq.get(client_name, 0):
            return True
        dedup = getattr(self.journal, "dedup", None)
        return dedup is not None and dedup.is_duplicate(client_name, seq)

    def compile_filter(self, text: str | None) -> Any:
        """A compiled filter (cached by text), or ``None`` for no filter."""
        if not text:
            return None
        return self._filter_cache[text]

    def needs_compiling(self, text: str | None) -> bool:
        """Whether ``text`` is a filter long enough to compile in a worker thread (at least
        :data:`THREADED_FILTER_LENGTH` characters) and not compiled yet."""
        return bool(text) and len(text) >= THREADED_FILTER_LENGTH and text not in self._filter_cache  # type: ignore[arg-type]

    def compile_uncached(self, text: str) -> Any:
        """Compile ``text`` without the cache; thread-safe (the session runs it in a worker thread and hands
        the result to :meth:`keep_filter`).

        Raises:
            FilterError: not a valid filter.
        """
        return self._compile_filter(text, self._functions)

    def keep_filter(self, text: str, compiled: Any) -> None:
        """Cache a filter compiled by :meth:`compile_uncached` (under the cache's bounds)."""
        self._filter_cache.keep(text, compiled)

    def _count_topic(self, topic: str, received: int, delivered: int) -> None:
        self.counters.count_topic(topic if topic in self._stats_topics else "_other", received, delivered)

    # -- fan-out (publishing itself: broker.engine.publish) -------------------------------------------
    def _deliver_run(self, topic: str, sow: SowTopic | None, run: list[RunMessage],
                     results: list[int | BrokerError], now_ns: int) -> None:
        """Fan out each message of an applied run in order (and update paginated windows)."""
        candidates = self.router.candidates(topic)
        windows = self.router.windows if sow is not None and self.router.windows.covers(topic) else None
        # Subscriptions without a filter, delta or replay in progress get every message whole: who gets what is
        # the same for the whole run, so it is worked out once (the usual fan-out, decided per message, else).
        plain = _plain_targets(candidates)
        delivered = clients = 0
        for one in run:
            results[one.index] = one.sequence
            if one.expired is not None:
                self._send_oof(sow, [one.expired], "expired")  # type: ignore[arg-type]
            if plain is not None:
                x = one.x or None
                for client, sids in plain:
                    client.send_publish(topic, sids, one.body, one.bm, one.key, x)
                delivered += len(plain)
                clients += len(plain)
            elif candidates:
                d, c = self._fan_out(candidates, topic, one.body, one.msg, one.bm, one.key, one.x or None,
                                     one.previous, sow)
                delivered += d
                clients += c
            if windows is not None:
                paged = windows.on_change(sow, one.key, one.previous, one.record, one.msg,  # type: ignore[arg-type]
                                          self.counters.oof)
                delivered += paged
                clients += paged
        if clients and self.latency is not None:  # one clock read per run: every client was served just now
            self.latency.observe((time.time_ns() - now_ns) / 1e9, clients)
        self.counters.messages_delivered += delivered
        self._count_topic(topic, len(run), delivered)

    def _fan_out(self, candidates: tuple[Subscription, ...], topic: str, body: bytes, msg: Any, bm: str | None,
                 key: str | None, x: str | None, previous: SowRecord | None, sow: SowTopic | None) -> tuple[int, int]:
        """Deliver one message to the subscriptions among ``candidates`` it reaches; returns (messages
        delivered, clients served)."""
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
                        _other_sids(others, sub.client).deltas.append(sub.sub_id)
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
        for client, sids in pubs.items():
            client.send_publish(topic, sids[0] if len(sids) == 1 else ",".join(sids), body, bm, key, x)
        delivered = clients = len(pubs)
        if others:
            for client, other in others.items():
                if other.deltas:
                    assert sow is not None and previous is not None
                    diff = sow.message_type.diff(previous.data, body, sow.key_fields)
                    client.send_publish(topic, ",".join(other.deltas), diff, bm, key, x)
                    delivered += 1
                if other.oofs:
                    client.send_publish(topic, ",".join(other.oofs), body, bm, key, x, command="oof", reason="match")
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
                client.send_publish(sow.name, ",".join(sids), rec.data, rec.bookmark or None, rec.key,
                                    rec.correlation_id or None, command="oof", reason=reason)
                self.counters.oof.add(reason, len(sids))

    # -- subscriptions -------------------------------------------------------------------------------
    def subscribe(self, client: Any, header: Mapping[str, Any], *, kind: str = "subscribe",
                  delta: bool = False, oof: bool = False,
                  topic_guard: Callable[[str], bool] | None = None) -> Subscription:
        """Register a subscription (replacing one with the same sub_id when ``replace`` is given).

        Args:
            topic_guard: For a regex topic: only topics it accepts are delivered (entitlements).

        Raises:
            CommandError: bad topic, bad filter, or the sub_id is in use without ``replace``.
        """
        sub_id = header.get("sub_id") or header.get("cmd_id")
        if not sub_id:
            raise CommandError("invalid subid", "subscribe without sub_id or cid")
        words, _pairs = parse_options(header.get("options"))
        topic = TopicPattern.compile(header.get("topic") or "")
        if topic_guard is not None and topic.regex is not None:
            topic = GuardedTopicPattern(topic.text, topic.regex, topic_guard)
        flt = self.compile_filter(header.get("filter"))
        existing = self.router.get(client, sub_id)
        if existing is not None and "replace" not in words:
            raise CommandError("subid in use", f"subscription {sub_id!r} already exists; use replace")
        sub = Subscription(
            client=client, sub_id=sub_id, topic=topic, filter=flt, options=words, kind=kind,
            delta=delta, filter_text=header.get("filter") or "",
            wants_oof=oof or "oof" in words,
            since_ns=time.time_ns() if kind in ("subscribe", "delta") else 0,
        )
        self.router.add(sub)
        return sub

    def unsubscribe(self, client: Any, sub_id: str | None) -> int:
        """Remove one subscription, or all of the client's with ``all``; returns how many."""
        if not sub_id or sub_id == "all":
            return len(self.router.remove_client(client))
        removed = 0
        for one in sub_id.split(","):
            if self.router.remove(client, one.strip()) is not None:
                removed += 1
        return removed

    def disconnect(self, client: Any) -> None:
        """Forget everything about a client that went away."""
        self.router.remove_client(client)

    # -- queries -------------------------------------------------------------------------------------
    def plan_query(self, header: Mapping[str, Any]) -> tuple[QueryPlan, int]:
        """Plan a sow query (or the query half of sow_and_subscribe).

        Returns:
            The plan and the effective batch size.

        Raises:
            CommandError: no SOW topic matches, bad filter, bad options.
        """
        return plan_query(header, self.sow_topics, self.compile_filter, self._compile_order_by)

    def has_sow(self, topic_text: str) -> bool:
        """Whether ``topic_text`` (literal or regex) names at least one SOW topic."""
        pattern = TopicPattern.compile(topic_text)
        return any(pattern.matches(name) for name in self.sow_topics)

    def sow_delete(self, client: Any, header: Mapping[str, Any], body: bytes) -> tuple[int, int]:
        """Delete by filter, by SowKeys, or by message data.

        Returns:
            (matches, records deleted).

        Raises:
            CommandError: the topic has no SOW, or the command mixes forms.
        """
        topic = header.get("topic") or ""
        sow = self._sow_to_delete_from(topic)
        flt_text = header.get("filter")
        sow_keys = header.get("sow_keys")
        forms = sum(1 for f in (flt_text, sow_keys, body) if f)
        if forms > 1:
            raise CommandError(
                "sow_delete command only supports one of: filter, sow_keys, bookmark, or data",
                "sow_delete takes one of filter, sow_keys or data",
            )
        if sow_keys:
            removed = sow.delete_keys(k for k in str(sow_keys).split(",") if k)
            matches = len(removed)
        elif body:
            msg = sow.message_type.parse(body)
            removed = sow.delete_keys([sow.key_for(msg, header.get("sow_key"))])
            matches = len(removed)
        else:
            return self.delete_by_filter(topic, flt_text)
        self._deleted(sow, removed)
        return matches, len(removed)

    def delete_by_filter(self, topic: str, filter_text: str | None) -> tuple[int, int]:
        """Delete the records of SOW topic ``topic`` matching ``filter_text`` (every record when empty),
        exactly as a client's ``sow_delete`` with a filter does: journaled when the topic is logged,
        ``deleted`` OOF to the subscriptions that saw them. Actions delete through here too.

        Returns:
            (matches, records deleted).

        Raises:
            CommandError: the topic has no SOW, or the filter does not compile.
        """
        sow = self._sow_to_delete_from(topic)
        _examined, removed = sow.delete_matching(self.compile_filter(filter_text))
        self._deleted(sow, removed)
        return len(removed), len(removed)

    def delete_candidates(self, topic: str, filter_text: str | None) -> Iterator[str | None]:
        """The keys of the records of SOW topic ``topic`` matching ``filter_text`` in a snapshot taken now, with
        ``None`` pauses at least every :data:`~broker.engine.queries.PAUSE_EVERY` records read: the scan half
        of a ``sow_delete`` by filter, which the session runs in a query thread before
        :meth:`delete_still_matching` (in steps on the loop).

        Raises:
            CommandError: the topic has no SOW, or the filter does not compile.
        """
        sow = self._sow_to_delete_from(topic)
        predicate = self.compile_filter(filter_text)
        snapshot = sow.storage.snapshot()

        def keys() -> Iterator[str | None]:
            try:
                for item in sow.query(snapshot, predicate=predicate, pause_every=PAUSE_EVERY):
                    yield None if item is None else item[0].key
            finally:
                snapshot.close()

        return keys()

    def delete_still_matching(self, topic: str, filter_text: str | None, keys: list[str]) -> tuple[int, int]:
        """Delete the records under ``keys`` that still match ``filter_text`` now (a record updated since the
        scan to something the filter rejects is kept), journaled and announced as :meth:`delete_by_filter`
        does. One step, costing the matches, not the topic.

        Returns:
            (matches, records deleted).
        """
        sow = self._sow_to_delete_from(topic)
        predicate = self.compile_filter(filter_text)
        parse = sow.message_type.parse
        still = [key for key in keys if (rec := sow.get(key)) is not None
                 and (predicate is None or predicate(parse(rec.data)))]
        removed = sow.delete_keys(still)
        self._deleted(sow, removed)
        return len(removed), len(removed)

    def _sow_to_delete_from(self, topic: str) -> SowTopic:
        sow = self.sow_topics.get(topic)
        if sow is None:
            if not topic:
                raise CommandError("invalid topic", "sow_delete without a topic")
            raise CommandError("invalid topic", f"topic {topic!r} has no SOW; configure it under <SOW>")
        return sow

    def _deleted(self, sow: SowTopic, removed: list[SowRecord]) -> None:
        """Journal (when logged) and announce (OOF ``deleted``) records just deleted from ``sow``."""
        if removed and self.journal is not None and self.is_logged(sow.name):
            now_ns = time.time_ns()
            for rec in removed:
                self.journal.append("sow_delete", sow.name, b"", sow_key=rec.key,
                                    message_type=sow.message_type.name, timestamp_ns=now_ns)
        self._send_oof(sow, removed, "deleted")

    def expire(self, now_ns: int | None = None) -> int:
        """Remove expired SOW records, sending ``expired`` OOF notices; returns how many.

        A logged topic waits while the journal's disk is full (its ``expire`` records could not be written, so
        the SOW and the journal would disagree), and any topic waits while its storage cannot be written
        (``Storage.writable``); :attr:`expiry_waiting` then tells the sweeper to come back later. Records past
        their time are hidden from queries meanwhile, and a publish over one sends its ``expired`` OOF.
        """
        now_ns = now_ns or time.time_ns()
        total = 0
        self.expiry_waiting = False
        journal_full = bool(getattr(self.journal, "disk_full", False))
        for sow in self.sow_topics.values():
            nxt = sow.next_expiry_ns()
            if nxt is None or nxt > now_ns:
                continue
            if (journal_full and self.is_logged(sow.name)) or not sow.storage.writable():
                self.expiry_waiting = True
                continue
            try:
                expired = sow.pop_expired(now_ns)
            except StorageError as exc:  # the records stay, and stay due on the topic's expiry index
                log.error("SOW topic %s: expiring records failed (%s); retrying later", sow.name, exc)
                self.expiry_waiting = True
                continue
            if expired:
                total += len(expired)
                if self.journal is not None and self.is_logged(sow.name):
                    for rec in expired:
                        self.journal.append("expire", sow.name, b"", sow_key=rec.key,
                                            message_type=sow.message_type.name, timestamp_ns=now_ns)
                self._send_oof(sow, expired, "expired")
        return total

    def next_expiry_ns(self) -> int | None:
        """The earliest pending expiration across SOW topics."""
        times = [t for s in self.sow_topics.values() if (t := s.next_expiry_ns()) is not None]
        return min(times) if times else None


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
    """Whether ``message`` passes ``flt`` (no filter: yes; no message: no).

    A filter that fails to evaluate on this message (a field of an unexpected type) counts as no match.
    """
    if message is None:
        return False
    if flt is None:
        return True
    try:
        return bool(flt(message))
    except BrokerError:
        return False
