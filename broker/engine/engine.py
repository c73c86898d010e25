"""The engine: applies every command in one trio task context, so each runs atomically.

The engine is composed of objects it owns, each holding its own state and given its collaborators when made:

* :class:`~broker.engine.router.Router` (:attr:`Engine.router`): the live subscriptions, indexed for fan-out;
* :class:`~broker.engine.publishers.Publishers` (:attr:`Engine.publishers`): each publisher's highest applied
  ``s``, for de-duplication;
* :class:`~broker.engine.fanout.FanOut` (:attr:`Engine.fanout`): delivery of applied messages, and of
  out-of-focus notices for deleted and expired records;
* :class:`~broker.engine.publish.Publishing` (:attr:`Engine.publishing`): the publish steps (parse, key,
  journal, SOW write), which hand each applied run to the fan-out. Which of its four paths runs when: the table
  in :mod:`broker.engine.publish`.

A publish goes :meth:`Engine.publish_batch` -> :meth:`Publishing.publish_batch
<broker.engine.publish.Publishing.publish_batch>` -> ``Publishing._publish_run`` (chooses the path) -> a
:class:`~broker.engine.fanout.FanOut` method. Queries are planned here and streamed by the session. The engine
never awaits: the kernel and sessions own all I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from broker.engine.aggregate import AggregatePlan
from broker.engine.counters import EngineCounters
from broker.engine.fanout import FanOut
from broker.engine.journal import Journal
from broker.engine.publish import Publishing, PublishMessage, PublishOutcome
from broker.engine.publishers import Publishers
from broker.engine.queries import PAUSE_EVERY, QueryPlan, parse_options, plan_query
from broker.engine.router import Router, Subscription
from broker.engine.topics import GuardedTopicPattern, TopicPattern
from broker.errors import BrokerError, CommandError, StorageError
from broker.memo import Memo
from broker.sow.record import SowRecord
from broker.sow.topic import SowTopic

if TYPE_CHECKING:
    from broker.engine.delivery import Client
    from broker.expr import Filter, OrderBy
    from broker.messagetypes import MessageType
    from broker.stats.histogram import Histogram

log = logging.getLogger("broker.engine")

#: Estimated bytes the cache of compiled filters (by text) may keep in total (``Filter.cost``); past it
#: the cache starts over. Subscriptions keep their own filters whatever the cache holds.
FILTER_CACHE_BYTES = 64 * 1024 * 1024
#: Filters at least this long are compiled in a worker thread by the session before its command runs
#: (a filter at the 32 KiB length limit takes ~0.2 s to compile); shorter ones compile on the loop in
#: well under a millisecond.
THREADED_FILTER_LENGTH = 2048

#: Filter functions from plugins, by name.
FilterFunctions = Mapping[str, Callable[..., Any]]


class Engine:
    """The broker's state: SOW topics, subscriptions, and the journal hook.

    Args:
        sow_topics: Configured SOW topics by name.
        message_types: Resolves a message type name to its object.
        compile_filter: Compiles filter text with the filter functions (``broker.expr.compile_filter``).
        compile_order_by: Compiles OrderBy text.
        filter_functions: Extra functions for content filters (from plugins).
        journal: The transaction log, or ``None``.
        is_logged: Whether a topic is recorded in the transaction log.
        stats_topics: Topics counted individually in statistics (others aggregate as ``_other``).
        latency: A :class:`broker.stats.histogram.Histogram` of publish-to-delivery latency (one
            observation per client a message is queued for), or ``None``.
    """

    def __init__(
        self,
        *,
        sow_topics: Mapping[str, SowTopic],
        message_types: Callable[[str], MessageType],
        compile_filter: Callable[[str, FilterFunctions], Filter],
        compile_order_by: Callable[[str], OrderBy],
        filter_functions: FilterFunctions | None = None,
        journal: Journal | None = None,
        is_logged: Callable[[str], bool] = lambda topic: False,
        stats_topics: frozenset[str] = frozenset(),
        latency: Histogram | None = None,
    ) -> None:
        self.router = Router()
        self.sow_topics = dict(sow_topics)
        self.message_types = message_types
        self._compile_filter = compile_filter
        self._compile_order_by = compile_order_by
        self._functions = dict(filter_functions or {})
        #: Filter text -> compiled filter (bounded: filters come from clients).
        self._filter_cache: Memo[str, Filter] = Memo(
            lambda text: self._compile_filter(text, self._functions), 10_000,
            cost=lambda text, flt: flt.cost, max_cost=FILTER_CACHE_BYTES,
        )
        self.journal = journal
        self.is_logged = is_logged
        self.counters = EngineCounters()
        #: Each publisher's highest applied ``s`` (de-duplication).
        self.publishers = Publishers(journal)
        #: Delivery of applied messages and of out-of-focus notices.
        self.fanout = FanOut(router=self.router, counters=self.counters, stats_topics=stats_topics, latency=latency)
        #: The publish steps.
        self.publishing = Publishing(sow_topics=self.sow_topics, journal=journal, is_logged=is_logged,
                                     counters=self.counters, publishers=self.publishers, fanout=self.fanout)
        #: The last :meth:`expire` left due records for later (journal disk full, storage not writable).
        self.expiry_waiting = False

    # -- publishing (broker.engine.publish) ----------------------------------------------------------
    def publish(self, client: Client, header: Mapping[str, Any], body: bytes, *, delta: bool = False,
                max_depth: int | None = None) -> PublishOutcome:
        """Apply one publish or delta_publish: :meth:`Publishing.publish
        <broker.engine.publish.Publishing.publish>`."""
        return self.publishing.publish(client, header, body, delta=delta, max_depth=max_depth)

    def publish_batch(self, client: Client, messages: Sequence[PublishMessage],
                      max_depth: int | None = None) -> list[int | BrokerError]:
        """Apply a client's publishes in order in one engine step: :meth:`Publishing.publish_batch
        <broker.engine.publish.Publishing.publish_batch>` (which says what each result means)."""
        return self.publishing.publish_batch(client, messages, max_depth)

    @property
    def publisher_seq(self) -> dict[str, int]:
        """Highest publish-store sequence applied per publisher key (:attr:`Publishers.seq
        <broker.engine.publishers.Publishers.seq>`)."""
        return self.publishers.seq

    @property
    def publisher_expiration_ns(self) -> int:
        """``<InactiveClientAckExpiration>`` in nanoseconds: a publisher without a publish this long is forgotten
        by :attr:`publisher_seq` (and starts afresh, as in AMPS); 0: never."""
        return self.publishers.expiration_ns

    @publisher_expiration_ns.setter
    def publisher_expiration_ns(self, value: int) -> None:
        self.publishers.expiration_ns = value

    def is_duplicate(self, client_name: str, seq: int) -> bool:
        """Whether a publisher's store sequence was already applied (a re-send after reconnect)."""
        return self.publishers.is_duplicate(client_name, seq)

    # -- filters -------------------------------------------------------------------------------------
    def compile_filter(self, text: str | None) -> Filter | None:
        """A compiled filter (cached by text), or ``None`` for no filter."""
        if not text:
            return None
        return self._filter_cache[text]

    def needs_compiling(self, text: str | None) -> bool:
        """Whether ``text`` is a filter long enough to compile in a worker thread (at least
        :data:`THREADED_FILTER_LENGTH` characters) and not compiled yet."""
        return text is not None and len(text) >= THREADED_FILTER_LENGTH and text not in self._filter_cache

    def compile_uncached(self, text: str) -> Filter:
        """Compile ``text`` without the cache; thread-safe (the session runs it in a worker thread and hands
        the result to :meth:`keep_filter`).

        Raises:
            FilterError: not a valid filter.
        """
        return self._compile_filter(text, self._functions)

    def keep_filter(self, text: str, compiled: Filter) -> None:
        """Cache a filter compiled by :meth:`compile_uncached` (under the cache's bounds)."""
        self._filter_cache.keep(text, compiled)

    # -- subscriptions -------------------------------------------------------------------------------
    def subscribe(self, client: Client, header: Mapping[str, Any], *, kind: str = "subscribe",
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
            wants_oof=oof or "oof" in words, no_empties=delta and "no_empties" in words,
            since_ns=time.time_ns() if kind in ("subscribe", "delta") else 0,
        )
        self.router.add(sub)
        return sub

    def unsubscribe(self, client: Client, sub_id: str | None) -> int:
        """Remove one subscription, or all of the client's with ``all``; returns how many."""
        if not sub_id or sub_id == "all":
            return len(self.router.remove_client(client))
        removed = 0
        for one in sub_id.split(","):
            if self.router.remove(client, one.strip()) is not None:
                removed += 1
        return removed

    def disconnect(self, client: Client) -> None:
        """Forget everything about a client that went away."""
        self.router.remove_client(client)

    # -- queries -------------------------------------------------------------------------------------
    def plan_query(self, header: Mapping[str, Any]) -> tuple[QueryPlan | AggregatePlan, int]:
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

    def sow_delete(self, client: Client, header: Mapping[str, Any], body: bytes) -> tuple[int, int]:
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
        self.fanout.send_oof(sow, removed, "deleted")

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
        journal_full = self.journal is not None and self.journal.disk_full
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
                self.fanout.send_oof(sow, expired, "expired")
        return total

    def next_expiry_ns(self) -> int | None:
        """The earliest pending expiration across SOW topics."""
        times = [t for s in self.sow_topics.values() if (t := s.next_expiry_ns()) is not None]
        return min(times) if times else None

