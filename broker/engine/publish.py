"""The publish steps: de-duplication, parse, key, journal, SOW write and fan-out, in runs of one topic.

:class:`Publishing` is an object the engine owns (:attr:`broker.engine.engine.Engine.publishing`;
:meth:`Engine.publish_batch <broker.engine.engine.Engine.publish_batch>` hands it every publish). A batch of one
client's publishes (:data:`PublishMessage` each, read by the session from one socket read) is cut into runs of
one topic (:meth:`Publishing.publish_batch`), and each run is applied and delivered, in order, by one of four
paths. :meth:`Publishing._publish_run` is the one place that chooses, in this order:

========= ====================================================== ============================================
path      runs when                                              what it does
========= ====================================================== ============================================
plain     no SOW, not journaled, and every subscription on the    one pass over the run, no object per message
          topic takes every message whole (no filter, delta or   (:func:`plain_items`, compiled where built),
          replay in progress): :meth:`.FanOut.whole_targets`     then :meth:`.FanOut.deliver_whole`
keyed     a SOW topic nobody reads from (no subscription or      :func:`broker.speedups.publish.keyed_scan`:
          paginated window: :meth:`.FanOut.idle`), journal not   keys and journal entries without a
          full, JSON, :class:`~broker.sow.cache.CachedStorage`,  ``RunMessage``; journal append, SOW write,
          no expiration or history, a key generator with a       counted as delivered to nobody. It declines
          :meth:`~broker.sow.keys.KeyGenerator.top_level_recipe` (having changed nothing) when a message needs
          and the compiled module built                          the Python loop: then *general* runs
general   everything else; its fan-out is :meth:`.FanOut.        parse, key, journal, SOW write per
whole-run deliver_run`'s whole-run branch when every              :class:`RunMessage`; then each client takes
          subscription takes every message whole, no window and  the run in one step
          no expired record sends between the messages
general   the rest (filters, deltas, oof, windows, replays,      per message and subscription
per       expired records)                                       (:meth:`.FanOut._fan_out`)
message
========= ====================================================== ============================================

The *keyed* path also needs the batch as a ``list`` (the session's are). All four give the same results,
deliveries, counters and journal (tests/server/test_server_plain_run.py and test_server_keyed_run.py compare the
first two with *general*, tests/engine/test_engine_composition.py the last two).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker import speedups
from broker.engine.acks import JOURNAL_FULL_REASON, journal_full_detail
from broker.engine.run_message import RunMessage
from broker.errors import BrokerError, CommandError
from broker.faults import fault_point
from broker.messagetypes import JsonMessageType
from broker.sow.cache import CachedStorage
from broker.sow.deferred import DEFER_MIN, DeferredValue, StoredValue, stored_expiry, stored_record
from broker.sow.record import EXPIRY_OFFSET, RECORD_EXPIRY, SowRecord, record_value
from broker.txlog.records import Command

if TYPE_CHECKING:
    from broker.engine.counters import EngineCounters
    from broker.engine.delivery import Client
    from broker.engine.fanout import FanOut, Targets, WholeItem
    from broker.engine.journal import Journal
    from broker.engine.publishers import Publishers
    from broker.messagetypes import Message
    from broker.sow.keys import KeyRecipe
    from broker.sow.topic import SowTopic

_compiled = speedups.load("publish")
#: The compiled keyed run's two passes (:meth:`Publishing._keyed_run`); ``None``: the Python loop does every run.
_keyed_scan = _compiled.keyed_scan if _compiled is not None else None
_stored_values = _compiled.stored_values if _compiled is not None else None


@dataclass
class PublishOutcome:
    """What :meth:`Engine.publish` did (the batch path answers with plain sequences)."""

    sequence: int = 0
    duplicate: bool = False


#: :meth:`Engine.publish_batch`'s answer for a re-sent publish (its ``s`` was applied before): not applied again.
DUPLICATE = -1
#: A publish's ``expiration`` header field as the session read it (seconds; ``None`` or ``""``: the topic's).
Expiration = str | int | float | None
#: One message for :meth:`Engine.publish_batch`, its header fields read once by the session: ``(topic, body,
#: delta, s, sow_key, correlation_id, expiration)`` (``delta``: a ``delta_publish``; absent fields ``None``).
PublishMessage = tuple[str | None, bytes, bool, int | None, str | None, str | None, Expiration]
_PUBLISH = int(Command.PUBLISH)
_DELTA = int(Command.DELTA_PUBLISH)
_peek_expiry = RECORD_EXPIRY.unpack_from


class Publishing:
    """Applies publishes for one engine and hands what it applied to the fan-out.

    Args:
        sow_topics: The engine's SOW topics by name.
        journal: The transaction log, or ``None``.
        is_logged: Whether a topic is recorded in the transaction log.
        counters: The engine's totals (messages received).
        publishers: The engine's table of each publisher's highest applied ``s``.
        fanout: Delivers each applied run.
    """

    def __init__(self, *, sow_topics: Mapping[str, SowTopic], journal: Journal | None,
                 is_logged: Callable[[str], bool], counters: EngineCounters, publishers: Publishers,
                 fanout: FanOut) -> None:
        self._sow_topics = sow_topics
        self._journal = journal
        self._is_logged = is_logged
        self._counters = counters
        self._publishers = publishers
        self._fanout = fanout

    def publish(self, client: Client, header: Mapping[str, Any], body: bytes, *, delta: bool = False,
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

    def publish_batch(self, client: Client, messages: Sequence[PublishMessage],
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

    def _publish_run(self, client: Client, topic: str, messages: Sequence[PublishMessage],
                     start: int, end: int, results: list[int | BrokerError], now_ns: int,
                     max_depth: int | None) -> None:
        """Apply ``messages[start:end]``, all to ``topic`` (see :meth:`publish_batch`), into ``results``, by the
        first of the paths in the module docstring's table that takes the run: the only place that chooses."""
        sow = self._sow_topics.get(topic)
        journal = self._journal
        logged = journal is not None and self._is_logged(topic)
        full = logged and journal is not None and journal.disk_full
        # The highest s applied or journaled: a later message at or below it is a re-send (de-duplication).
        high = self._publishers.highest(client)
        if sow is None:
            if not logged:
                targets = self._fanout.whole_targets(topic)
                if targets is not None:
                    self._plain_run(client, topic, targets, messages, start, end, results, now_ns, max_depth, high)
                    return
        elif not full and type(messages) is list and self._fanout.idle(topic):
            recipe = _keyed_recipe(sow)
            if recipe is not None and self._keyed_run(client, topic, sow, recipe, messages, start, end, results,
                                                      now_ns, max_depth, high, logged):
                return
        self._general_run(client, topic, sow, messages, start, end, results, now_ns, max_depth, high, logged, full)

    def _general_run(self, client: Client, topic: str, sow: SowTopic | None, messages: Sequence[PublishMessage],
                     start: int, end: int, results: list[int | BrokerError], now_ns: int, max_depth: int | None,
                     high: int, logged: bool, full: bool) -> None:
        """The *general* path of :meth:`_publish_run` (module docstring): a :class:`RunMessage` per message
        (parsed, keyed, merged), the run's journal append and SOW write, then :meth:`.FanOut.deliver_run`."""
        name = client.publisher_key  # the de-duplication key: client name (and identity, when authenticated)
        journal = self._journal
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
            # An update's replaced record stays a stored value, its expiration peeked at, until the fan-out reads
            # it (RunMessage.previous): one that delivers every message whole reads none.
            # A large record's value is read as stored (DeferredValue: not joined here, broker/sow/deferred.py).
            stored_value = getattr(sow.storage, "get_stored", sow.storage.get)
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
                expired = stored = None
                if previous is None:
                    if not delta:
                        stored = stored_value(kb)
                        if stored is not None:
                            until = (_peek_expiry(stored, EXPIRY_OFFSET)[0] if type(stored) is bytes
                                     else stored_expiry(stored))
                            if until and until <= now_ns:
                                expired = stored_record(key, stored)  # its holders get the oof first
                                stored = None
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
                    lifetime = (default_expiration if expiration is None or expiration == ""
                                else _parse_expiration(expiration))
                    if lifetime:
                        expire_at = now_ns + int(lifetime * 1e9)
            except BrokerError as exc:
                results[i] = exc
                continue
            one = RunMessage(i, body, msg, key, previous, seq or 0, x, expire_at, delta, expired, kb, stored=stored)
            run.append(one)
            latest[key] = one.record = SowRecord(key, body, now_ns + i, 0, expire_at, "", x)
            if seq and seq > high:
                high = seq
        self._counters.messages_received += received
        if not run:
            return
        first = 0
        if logged:
            assert journal is not None
            first = self._journal_run(journal, client, topic, mt.name, run, results, now_ns, held=sow is not None)
            if not run:
                return
            prefix = f"{journal.instance_hash}|"
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
            puts: list[tuple[bytes, StoredValue]] = []
            inserts = new_keys = 0
            # A large record of a logged topic is stored as its parts, joined by the storage's thread (a 50 MB
            # copy is 25-40 ms of the loop on a busy machine): broker/sow/deferred.py.
            defer = logged and sow.history is None
            for one in run:
                record = one.record
                assert record is not None  # every message of a SOW topic's run has its record
                records.append(record)
                value: StoredValue | None = None
                if defer and len(record.data) > DEFER_MIN:
                    value = DeferredValue.of(record)
                if value is None and record_value is not None:
                    value = record_value(record)  # the compiled encoding
                puts.append((one.kb, record.encode() if value is None else value))
                if not one.replaces:
                    inserts += 1
                    new_keys += one.expired is None
            if logged:
                fault_point("sow-before-write", len(run))  # the run's journal records appended (held), SOW not written
            try:
                sow.upsert_many(records, inserts, new_keys=new_keys, puts=puts, logged=logged)
            except BaseException as exc:
                if journal is not None and logged:
                    journal.retract(first)
                if not isinstance(exc, BrokerError):
                    raise
                for one in run:
                    results[one.index] = exc
                return
            if journal is not None and logged:
                journal.release(first)
                fault_point("sow-after-write", len(run))  # applied to the SOW, the journal records not yet durable
        top = max(one.seq for one in run)
        if top and name:  # only once applied: a publish that failed may be sent again
            self._publishers.applied(name, top, now_ns)
        self._fanout.deliver_run(topic, sow, run, results, now_ns)

    def _plain_run(self, client: Client, topic: str, targets: Targets, messages: Sequence[PublishMessage],
                   start: int, end: int, results: list[int | BrokerError], now_ns: int, max_depth: int | None,
                   high: int) -> None:
        """The *plain* path of :meth:`_publish_run` (module docstring): apply and deliver a run to a topic without
        SOW or journal that ``targets`` take whole, without a ``RunMessage`` or a parsed message per publish (only
        the depth check of ``lazy`` is kept). ``high``: the publisher's highest ``s`` applied before."""
        mt, name = client.message_type, client.publisher_key
        items, received, high, top = plain_items(messages, start, end, results, high, bool(name), DUPLICATE,
                                                 mt.lazy if max_depth is not None else None, max_depth,
                                                 type(mt) is JsonMessageType)
        self._counters.messages_received += received
        if not items:
            return
        if top and name:  # only once applied: a publish that failed may be sent again
            self._publishers.applied(name, top, now_ns)
        self._fanout.deliver_whole(topic, items, targets, now_ns)

    def _keyed_run(self, client: Client, topic: str, sow: SowTopic, recipe: KeyRecipe,
                   messages: list[PublishMessage], start: int, end: int, results: list[int | BrokerError], now_ns: int,
                   max_depth: int | None, high: int, logged: bool) -> bool:
        """The *keyed* path of :meth:`_publish_run` (module docstring), for the usual ingest, compiled: plain
        publishes of JSON objects to a SOW topic nobody reads from (:func:`_keyed_recipe` says which topics). One
        pass (:func:`broker.speedups.publish.keyed_scan`) works out each message's key, whether it replaces a
        record and its journal entry without a ``RunMessage``, ``SowRecord`` or parsed message; the journal
        append, the SOW write and the commit are the same as :meth:`_general_run`'s. Returns False, having
        changed nothing, when any message of the run needs the Python loop (which then applies the whole run)."""
        assert _keyed_scan is not None and _stored_values is not None  # _keyed_recipe: None without them
        storage = sow.storage
        assert isinstance(storage, CachedStorage)  # _keyed_recipe: None for any other storage
        mt = sow.message_type
        name = client.publisher_key
        scan = _keyed_scan(messages, start, end, -1 if max_depth is None else max_depth, recipe[0], recipe[1],
                           storage.held, storage.complete, high, bool(name), now_ns, _PUBLISH)
        if scan is None:
            return False
        indices, entries, xs, duplicates, received, inserts, new_keys, hits, absent, top = scan
        first = 0
        journal = self._journal
        if entries and journal is not None and logged:
            try:
                first = journal.append_many(topic, entries, publisher_hash=client.name_hash, message_type=mt.name,
                                            held=True)
            except BrokerError:
                return False  # nothing appended: the Python loop answers each message (one may be refused alone)
        storage.count_reads(hits, absent)
        for i in duplicates:
            results[i] = DUPLICATE
        self._counters.messages_received += received
        if not entries:
            return True
        prefix = f"{journal.instance_hash}|" if journal is not None and logged else ""
        puts: list[tuple[bytes, StoredValue]] | None = None
        if logged and len(entries) == 1 and len(entries[0][1]) > DEFER_MIN:  # a large publish (one per read)
            puts = _deferred_put(entries[0], xs[0], first, prefix)
        if puts is None:
            puts = _stored_values(entries, xs, first, prefix)
        if logged:
            fault_point("sow-before-write", len(entries))  # the run's journal records appended (held), SOW not written
        try:
            sow.upsert_values(puts, inserts, new_keys, logged=logged)
        except BaseException as exc:
            if journal is not None and logged:
                journal.retract(first)
            if not isinstance(exc, BrokerError):
                raise
            for i in indices:
                results[i] = exc
            return True
        if journal is not None and logged:
            journal.release(first)
            fault_point("sow-after-write", len(entries))  # applied to the SOW, the journal records not yet durable
        if top and name:  # only once applied: a publish that failed may be sent again
            self._publishers.applied(name, top, now_ns)
        sequence = first
        for i in indices:
            results[i] = sequence
            if logged:
                sequence += 1
        # What the fan-out does for a run on a topic nobody reads from (FanOut.deliver_run): count it.
        self._fanout.count_topic(topic, len(entries), 0)
        return True

    def _journal_run(self, journal: Journal, client: Client, topic: str, message_type: str, run: list[RunMessage],
                     results: list[int | BrokerError], now_ns: int, *, held: bool) -> int:
        """Append ``run``'s journal records (held while the SOW is written); returns the first sequence. An
        entry the journal cannot encode (a field too large) is refused alone and taken out of ``run``; any
        other journal failure refuses the whole run (``run`` is emptied)."""
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


def _deferred_put(entry: tuple[Any, ...], x: str, sequence: int, prefix: str) -> list[tuple[bytes, StoredValue]] | None:
    """The put of a keyed run's only entry as a :class:`DeferredValue` (the stored value ``_stored_values`` makes,
    joined by the storage's thread); ``None`` when a field is not the usual type or size."""
    bookmark = f"{prefix}{sequence}|" if sequence else ""
    value = DeferredValue.of(SowRecord("", entry[1], entry[6], sequence, 0, bookmark, x))
    return None if value is None else [(entry[2], value)]


def _keyed_recipe(sow: SowTopic) -> KeyRecipe | None:
    """The recipe of ``sow``'s content keys when the *keyed* path can apply a run to it (module docstring): the
    compiled module built, JSON, a :class:`~broker.sow.cache.CachedStorage`, no expiration or
    history, and a key generator that declares
    :meth:`~broker.sow.keys.KeyGenerator.top_level_recipe`; ``None`` otherwise."""
    generator = sow.key_generator
    if (_keyed_scan is None or generator is None or type(sow.storage) is not CachedStorage
            or sow.default_expiration is not None or sow.history is not None
            or type(sow.message_type) is not JsonMessageType):
        return None
    return generator.top_level_recipe()


def _plain_items(messages: Sequence[PublishMessage], start: int, end: int, results: list[int | BrokerError],
                 high: int, named: bool, duplicate: int, lazy: Callable[..., Message] | None, max_depth: int | None,
                 json_bodies: bool) -> tuple[list[WholeItem], int, int, int]:
    """The delivery items of a plain-topic run (``(body, None, None, x)`` each), the messages received, the
    publisher's highest ``s`` and the run's highest ``s`` (:meth:`Publishing._plain_run`; twin
    :mod:`broker.speedups.plainrun`, which leaves ``lazy`` out for a JSON body within the depth bound).

    A message whose ``s`` is at most ``high`` (when the publisher is ``named``) is a re-send: ``duplicate`` in
    ``results``; ``lazy`` (the depth check, ``None``: none) refuses a body with its error in ``results``.
    """
    items: list[WholeItem] = []
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


def _parse_expiration(value: str | int | float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise CommandError("invalid options", f"expiration {value!r} is not a number of seconds") from None
    if seconds < 0:
        raise CommandError("invalid options", "expiration must not be negative")
    return seconds
