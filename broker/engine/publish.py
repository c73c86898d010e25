"""The publish steps of the engine: de-duplication, parse, key, journal, SOW write, in runs of one topic.

:class:`PublishSteps` is the part of :class:`broker.engine.engine.Engine` that applies publishes (the engine
inherits it): a batch of one client's publishes (:data:`PublishMessage` each, read by the session from one
socket read) is cut into runs of one topic; each run gets one journal append, one storage write, then its
fan-out (:meth:`Engine._deliver_run`), in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker import speedups
from broker.engine.acks import JOURNAL_FULL_REASON, journal_full_detail
from broker.engine.counters import EngineCounters
from broker.errors import BrokerError, CommandError
from broker.faults import fault_point
from broker.messagetypes import JsonMessageType
from broker.sow.cache import CachedStorage
from broker.sow.record import EXPIRY_OFFSET, RECORD_EXPIRY, SowRecord, record_value
from broker.sow.topic import SowTopic
from broker.txlog.records import Command

_compiled = speedups.load("publish")
#: The compiled keyed run's two passes (:meth:`PublishSteps._keyed_run`); ``None``: the Python loop does every run.
_keyed_scan = _compiled.keyed_scan if _compiled is not None else None
_stored_values = _compiled.stored_values if _compiled is not None else None


@dataclass
class PublishOutcome:
    """What :meth:`Engine.publish` did (the batch path answers with plain sequences)."""

    sequence: int = 0
    duplicate: bool = False


#: :meth:`Engine.publish_batch`'s answer for a re-sent publish (its ``s`` was applied before): not applied again.
DUPLICATE = -1
#: One message for :meth:`Engine.publish_batch`, its header fields read once by the session: ``(topic, body,
#: delta, s, sow_key, correlation_id, expiration)`` (``delta``: a ``delta_publish``; absent fields ``None``).
PublishMessage = tuple[str | None, bytes, bool, int | None, str | None, str | None, Any]
_PUBLISH = int(Command.PUBLISH)
_DELTA = int(Command.DELTA_PUBLISH)
#: :attr:`RunMessage.previous` of an update whose replaced record is not decoded, because nothing in its run
#: reads it (no subscription or paginated window on the topic, not a delta): only "not an insert" is known.
#: Never delivered, compared or stored.
STORED = SowRecord("", b"", 0, 0, 0, "", "")
_peek_expiry = RECORD_EXPIRY.unpack_from


class Journal(Protocol):
    """The part of the transaction log the engine uses (see :mod:`broker.txlog`)."""

    instance_hash: int

    def append(self, command: str, topic: str, data: bytes, **fields: Any) -> tuple[int, str]: ...

    def append_many(self, topic: str, entries: Sequence[tuple[int, bytes, bytes, int, bytes, int, int]], *,
                    publisher_hash: int = 0, message_type: str = "json", held: bool = False) -> int: ...

    def release(self, sequence: int) -> None: ...

    def retract(self, sequence: int) -> bool: ...


class PublishSteps:
    """Publishing, for :class:`broker.engine.engine.Engine` (which inherits it and holds the state named here)."""

    sow_topics: dict[str, SowTopic]
    router: Any
    journal: Journal | None
    is_logged: Callable[[str], bool]
    counters: EngineCounters
    #: Highest publish-store sequence applied per publisher name (de-duplication).
    publisher_seq: dict[str, int]
    publisher_expiration_ns: int
    _publisher_active: dict[str, int]
    _next_publisher_sweep: int

    if TYPE_CHECKING:
        def _deliver_run(self, topic: str, sow: SowTopic | None, run: list[RunMessage],
                         results: list[int | BrokerError], now_ns: int) -> None: ...

        def _plain_run(self, client: Any, topic: str, messages: Sequence[PublishMessage], start: int, end: int,
                       results: list[int | BrokerError], now_ns: int, max_depth: int | None, high: int) -> bool: ...

        def _count_topic(self, topic: str, received: int, delivered: int) -> None: ...

    def _note_publisher(self, name: str, now_ns: int) -> None:
        """Mark a publisher active and, at most every quarter expiration, forget the inactive ones."""
        self._publisher_active[name] = now_ns
        if now_ns < self._next_publisher_sweep:
            return
        self._next_publisher_sweep = now_ns + self.publisher_expiration_ns // 4
        cutoff = now_ns - self.publisher_expiration_ns
        for stale in [n for n, seen in self._publisher_active.items() if seen < cutoff]:
            del self._publisher_active[stale]
            self.publisher_seq.pop(stale, None)

    def publish(self, client: Any, header: Mapping[str, Any], body: bytes, *, delta: bool = False,
                max_depth: int | None = None) -> PublishOutcome:
        """Apply one publish or delta_publish (:meth:`publish_batch` of one).

        Args:
            client: The publishing session.
            header: The command's header fields.
            body: The message body.
            delta: A ``delta_publish``: merged into the SOW record it updates.
            max_depth: The publisher's transport ``<MaxMessageDepth>``; a json/xml body nested deeper is
                refused before anything is stored or delivered. ``None``: no limit.

        Raises:
            BrokerError: what :meth:`publish_batch` answers for the message (``CommandError`` for a missing
                topic, a message that cannot be parsed or keyed or is nested deeper than ``max_depth``;
                ``StorageError`` for a failed SOW write).
        """
        message = (header.get("topic"), body, delta, header.get("seq"), header.get("sow_key"),
                   header.get("correlation_id"), header.get("expiration"))
        result = self.publish_batch(client, [message], max_depth)[0]
        if isinstance(result, BrokerError):
            raise result
        return PublishOutcome(max(result, 0), duplicate=result == DUPLICATE)

    def publish_batch(self, client: Any, messages: Sequence[PublishMessage],
                      max_depth: int | None = None) -> list[int | BrokerError]:
        """Apply a client's publishes (:data:`PublishMessage` each, in order) in one engine step.

        Consecutive messages to the same topic form a run: one journal append (:meth:`JournalWriter.append_many`,
        held while the SOW is written), one storage write for the run's SOW upserts, then the fan-out of each
        message in order. A message published after another to the same key sees it (previous record, delta
        merge, out-of-focus notices). A message that fails alone (bad JSON, no key, not new) is answered alone;
        a failed storage write fails the run's messages and journals none of them. Nothing here awaits, so the
        journal append and the fan-out are one step for bookmark replays (:mod:`broker.server.replay`).

        Args:
            client: The publishing session.
            messages: The header fields and body of each message (:data:`PublishMessage`).
            max_depth: The publisher's transport ``<MaxMessageDepth>`` (``None``: no limit).

        Returns:
            Per message: its journal sequence (0 when its topic is not logged), :data:`DUPLICATE` for a re-sent
            publish applied before, or the :class:`BrokerError` that refused it.
        """
        results: list[int | BrokerError] = [0] * len(messages)
        now_ns = time.time_ns()
        start, count = 0, len(messages)
        while start < count:
            topic = messages[start][0]
            end = start + 1
            while end < count and messages[end][0] == topic:
                end += 1
            if not topic:
                for i in range(start, end):
                    results[i] = CommandError("invalid topic", "publish without a topic")
            else:
                self._publish_run(client, topic, messages, start, end, results, now_ns, max_depth)
            start = end
        return results

    def _publish_run(self, client: Any, topic: str, messages: Sequence[PublishMessage],
                     start: int, end: int, results: list[int | BrokerError], now_ns: int,
                     max_depth: int | None) -> None:
        """Apply ``messages[start:end]``, all to ``topic`` (see :meth:`publish_batch`), into ``results``."""
        sow = self.sow_topics.get(topic)
        journal = self.journal
        logged = journal is not None and self.is_logged(topic)
        full = logged and getattr(journal, "disk_full", False)
        name = client.publisher_key  # the de-duplication key: client name (and identity, when authenticated)
        # The highest s applied or journaled: a later message at or below it is a re-send (de-duplication).
        high = 0
        if name:
            high = self.publisher_seq.get(name, 0)
            dedup = getattr(journal, "dedup", None)
            if dedup is not None:
                high = max(high, dedup.highest_hash(client.name_hash))
        if sow is None and not logged and self._plain_run(client, topic, messages, start, end, results, now_ns,
                                                           max_depth, high):
            return  # every subscription takes every message whole: one pass (broker/engine/fanout.py)
        run: list[RunMessage] = []
        if sow is not None:
            mt = sow.message_type
            parse = mt.parse
            key_for = sow.key_for
            # The content key generator called directly (SowTopic.key_for's own call saved per message).
            generate = sow.key_generator.generate if sow.key_generator is not None else None
            get = sow.get
            default_expiration = sow.default_expiration
            latest: dict[str, SowRecord] = {}  # key -> its record written earlier in this run
            # With no subscription or paginated window on the topic, the fan-out reads no replaced record: an
            # update's stored value then stays undecoded (previous is STORED), its expiration peeked at. Nothing
            # here awaits, so no subscription can come between this and the fan-out.
            router = self.router
            bare = not router.candidates(topic) and not router.windows.covers(topic)
            if bare and not full and _keyed_scan is not None and self._keyed_run(
                    client, topic, sow, messages, start, end, results, now_ns, max_depth, high, logged):
                return
            stored_value = sow.storage.get
        else:
            mt = client.message_type
        received = 0
        for i in range(start, end):
            _topic, body, delta, seq, user_key, x, expiration = messages[i]
            if seq and name and seq <= high:
                results[i] = DUPLICATE
                continue
            if full:  # refused whole: nothing applied
                results[i] = CommandError(JOURNAL_FULL_REASON, journal_full_detail(journal))
                continue
            received += 1
            x = x or ""
            try:
                if sow is None:
                    run.append(RunMessage(i, body, mt.lazy(body, max_depth=max_depth), None, None, seq or 0, x, 0,
                                        delta, None))
                    if seq and seq > high:
                        high = seq
                    continue
                msg = parse(body, keyed=True, max_depth=max_depth)
                key = generate(msg) if generate is not None else key_for(msg, user_key)
                kb = key.encode()
                previous = latest.get(key)
                expired = None
                if previous is None:
                    if bare and not delta:
                        value = stored_value(kb)
                        if value is not None:
                            previous = STORED
                            until = _peek_expiry(value, EXPIRY_OFFSET)[0]
                            if until and until <= now_ns:
                                expired = SowRecord.decode(key, value)  # its holders get the oof first
                                previous = None
                    else:
                        previous = get(key, kb)
                        if previous is not None and previous.expire_at_ns and previous.expire_at_ns <= now_ns:
                            expired = previous  # not swept yet: its holders get the oof before this message
                            previous = None
                if delta and previous is not None:
                    body = mt.merge(previous.data, body)
                    msg = parse(body, keyed=True)
                expire_at = 0
                if default_expiration is not None:  # before journaling: a bad value refuses the message
                    lifetime = (_parse_expiration(expiration) if expiration not in (None, "")
                                else default_expiration)
                    if lifetime:
                        expire_at = now_ns + int(lifetime * 1e9)
            except BrokerError as exc:
                results[i] = exc
                continue
            one = RunMessage(i, body, msg, key, previous, seq or 0, x, expire_at, delta, expired, kb)
            run.append(one)
            latest[key] = one.record = SowRecord(key, body, now_ns + i, 0, expire_at, "", x)
            if seq and seq > high:
                high = seq
        self.counters.messages_received += received
        if not run:
            return
        first = 0
        if logged:
            first = self._journal_run(client, topic, mt.name, run, results, now_ns, held=sow is not None)
            if not run:
                return
            prefix = f"{journal.instance_hash}|"  # type: ignore[union-attr]
            seq = first
            for one in run:
                one.sequence = seq
                one.bm = f"{prefix}{seq}|"
                if one.record is not None:
                    one.record.sequence = seq
                    one.record.bookmark = one.bm
                seq += 1
        if sow is not None:
            # The stored values, and the keys that had no record (an expired one not swept yet still has one).
            records: list[SowRecord] = []
            puts: list[tuple[bytes, bytes]] = []
            inserts = new_keys = 0
            for one in run:
                record = one.record
                records.append(record)  # type: ignore[arg-type]
                value = record_value(record) if record_value is not None else None  # the compiled encoding
                puts.append((one.kb, record.encode() if value is None else value))  # type: ignore[union-attr]
                if one.previous is None:
                    inserts += 1
                    new_keys += one.expired is None
            if logged:
                fault_point("sow-before-write", len(run))  # the run's journal records appended (held), SOW not written
            try:
                sow.upsert_many(records, inserts, new_keys=new_keys, puts=puts)
            except BaseException as exc:
                if logged:
                    journal.retract(first)  # type: ignore[union-attr]
                if not isinstance(exc, BrokerError):
                    raise
                for one in run:
                    results[one.index] = exc
                return
            if logged:
                journal.release(first)  # type: ignore[union-attr]
                fault_point("sow-after-write", len(run))  # applied to the SOW, the journal records not yet durable
        top = max(one.seq for one in run)
        if top and name:  # only once applied: a publish that failed may be sent again
            if top > self.publisher_seq.get(name, 0):
                self.publisher_seq[name] = top
            if self.publisher_expiration_ns:
                self._note_publisher(name, now_ns)
        self._deliver_run(topic, sow, run, results, now_ns)

    def _keyed_run(self, client: Any, topic: str, sow: SowTopic, messages: Sequence[PublishMessage], start: int,
                   end: int, results: list[int | BrokerError], now_ns: int, max_depth: int | None, high: int,
                   logged: bool) -> bool:
        """:meth:`_publish_run` for the usual ingest, compiled: plain publishes of JSON objects to a SOW topic with
        the ``default`` key of top-level names, a complete or warm record cache, no expiration or history, and no
        subscription or paginated window on the topic (the fan-out has nothing to do but count). One pass
        (:func:`broker.speedups.publish.keyed_scan`) works out each message's key, whether it replaces a record
        and its journal entry without a ``RunMessage``, ``SowRecord`` or parsed message; the journal append, the
        SOW write and the commit are the same as :meth:`_publish_run`'s. Returns False, having changed nothing,
        when the topic or any message of the run needs the Python loop (which then applies the whole run)."""
        storage = sow.storage
        generator = sow.key_generator
        mt = sow.message_type
        if (type(storage) is not CachedStorage or sow.default_expiration is not None or sow.history is not None
                or generator is None or type(mt) is not JsonMessageType or type(messages) is not list):
            return False
        recipe_of = getattr(generator, "top_level_recipe", None)
        recipe = recipe_of() if recipe_of is not None else None
        if recipe is None:
            return False
        name = client.publisher_key
        scan = _keyed_scan(messages, start, end, -1 if max_depth is None else max_depth, recipe[0], recipe[1],
                           storage.held, storage.complete, high, bool(name), now_ns, _PUBLISH)
        if scan is None:
            return False
        indices, entries, xs, duplicates, received, inserts, new_keys, hits, absent, top = scan
        first = 0
        journal: Any = self.journal
        if entries and logged:
            try:
                first = journal.append_many(topic, entries, publisher_hash=client.name_hash, message_type=mt.name,
                                            held=True)
            except BrokerError:
                return False  # nothing appended: the Python loop answers each message (one may be refused alone)
        storage.count_reads(hits, absent)
        for i in duplicates:
            results[i] = DUPLICATE
        self.counters.messages_received += received
        if not entries:
            return True
        puts = _stored_values(entries, xs, first, f"{journal.instance_hash}|" if logged else "")
        if logged:
            fault_point("sow-before-write", len(entries))  # the run's journal records appended (held), SOW not written
        try:
            sow.upsert_values(puts, inserts, new_keys)
        except BaseException as exc:
            if logged:
                journal.retract(first)
            if not isinstance(exc, BrokerError):
                raise
            for i in indices:
                results[i] = exc
            return True
        if logged:
            journal.release(first)
            fault_point("sow-after-write", len(entries))  # applied to the SOW, the journal records not yet durable
        if top and name:  # only once applied: a publish that failed may be sent again
            if top > self.publisher_seq.get(name, 0):
                self.publisher_seq[name] = top
            if self.publisher_expiration_ns:
                self._note_publisher(name, now_ns)
        sequence = first
        for i in indices:
            results[i] = sequence
            if logged:
                sequence += 1
        # What the fan-out does for a run on a topic nobody subscribes to (Engine._deliver_run): count it.
        self._count_topic(topic, len(entries), 0)
        return True

    def _journal_run(self, client: Any, topic: str, message_type: str, run: list[RunMessage],
                     results: list[int | BrokerError], now_ns: int, *, held: bool) -> int:
        """Append ``run``'s journal records (held while the SOW is written); returns the first sequence. An
        entry the journal cannot encode (a field too large) is refused alone and taken out of ``run``; any
        other journal failure refuses the whole run (``run`` is emptied)."""
        journal: Any = self.journal
        while run:
            # Each message its own timestamp (the batch's time plus its position): versions stay distinct.
            entries = [(_DELTA if one.delta else _PUBLISH, one.body, one.kb, one.seq, one.x.encode(), one.expire_at,
                        now_ns + one.index) for one in run]
            try:
                return journal.append_many(topic, entries, publisher_hash=client.name_hash, message_type=message_type,
                                           held=held)
            except BrokerError as exc:
                index = getattr(exc, "index", None)
                if index is None:
                    for one in run:
                        results[one.index] = exc
                    run.clear()
                    break
                # Refused alone, with the later messages to its key (they were merged with or compared to it).
                bad = run[index]
                for one in run[index:]:
                    if one is bad or (one.key is not None and one.key == bad.key):
                        results[one.index] = exc
                run[index:] = [one for one in run[index:] if one is not bad and (one.key is None or one.key != bad.key)]
        return 0


def _parse_expiration(value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise CommandError("invalid options", f"expiration {value!r} is not a number of seconds") from None
    if seconds < 0:
        raise CommandError("invalid options", "expiration must not be negative")
    return seconds

@dataclass(slots=True)
class RunMessage:
    """One message of a publish run on its way through :meth:`Engine.publish_batch`."""

    #: Its position in the batch (for the results).
    index: int
    body: bytes
    msg: Any
    key: str | None
    #: The record it replaces (``None``: an insert, or not a SOW topic).
    previous: SowRecord | None
    #: The publisher's ``s`` (0: none).
    seq: int
    x: str
    expire_at: int
    delta: bool
    #: The record it replaces had expired but was not swept: its holders get an ``expired`` oof first.
    expired: SowRecord | None
    #: ``key`` encoded (``b""``: not a SOW topic).
    kb: bytes = b""
    #: The SOW record written (``None``: not a SOW topic).
    record: SowRecord | None = None
    #: Its journal sequence and bookmark (0 and ``None``: not logged).
    sequence: int = 0
    bm: str | None = None
