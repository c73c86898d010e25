"""Bookmark subscriptions: replay from the transaction log, then cut over to live messages.

The subscription is registered in the same engine step that reads the journal's last sequence ``cut``:
records up to ``cut`` come from the journal, later messages are held in the subscription's replay buffer
and delivered after the replay. So the cut-over has no gap and no duplicate. Journal reads run in worker
threads, a chunk at a time, and wait for the client's outbound buffer to drain, so a slow replaying
client is paced rather than offlined.

The held live messages are bounded (:class:`HeldLive`): past a quarter of the client's MessageMemoryLimit,
or while client buffers exceed the broker-wide TotalMessageMemoryLimit, the replay drops them (each is also
in the journal) and reads on past the old cut-over to a new one fixed in one engine step (catch-up, as
AMPS does). Where the journal cannot give back what was held (a topic the journal does not record, an
out-of-focus notice, the window of a paginated historical query), the client is offlined as slow instead.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping
from functools import partial
from itertools import islice
from typing import Any, NamedTuple

import trio

from broker.engine.delivery import deliver
from broker.engine.pagination import refresh_window, window_affected
from broker.engine.queries import historical_time, parse_options
from broker.engine.router import HeldMessage, Subscription
from broker.engine.topics import TopicPattern
from broker.errors import BrokerError, CommandError, JournalError
from broker.server.replay_frames import ChunkEncoder
from broker.server.services import SessionServices
from broker.sow.record import SowRecord
from broker.txlog import Command, Record, ReplayStart, parse_bookmark
from broker.txlog.errors import JournalDamageError

log = logging.getLogger("broker.replay")

#: Records read from the journal per worker-thread call.
CHUNK = 512
#: Outbound bytes queued before the replay waits for the client to read.
WATERMARK = 2 * 1024 * 1024
#: The share of the client's MessageMemoryLimit that one replaying subscription may hold in live messages
#: (the replay itself keeps up to WATERMARK plus a chunk queued in the outbound buffer).
HELD_SHARE = 4
#: Bytes counted per held message besides its body, topic, bookmark, key and correlation id (the entry).
HELD_OVERHEAD = 64

_RATE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>x|X|[kKmMgG]?[bB])?\s*$")
_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}


class Rate:
    """A replay rate: messages/s, bytes/s, or a multiple of the original publish rate (``2x``)."""

    def __init__(self, text: str) -> None:
        m = _RATE.match(text)
        if not m or float(m["num"]) <= 0:
            raise CommandError("invalid options", f"rate={text!r}: expected e.g. rate=1000, rate=10MB or rate=2x")
        self.value = float(m["num"])
        unit = (m["unit"] or "").lower()
        self.kind = "x" if unit == "x" else ("bytes" if unit else "messages")
        self.per_byte = _UNITS.get(unit, 1)
        self._start_wall = 0.0
        self._start_ts = 0
        self._sent = 0.0

    async def pace(self, record: Record) -> None:
        """Sleep as needed before sending ``record``."""
        now = trio.current_time()
        if not self._start_wall:
            self._start_wall, self._start_ts = now, record.timestamp_ns
        if self.kind == "x":
            due = self._start_wall + (record.timestamp_ns - self._start_ts) / 1e9 / self.value
        else:
            self._sent += len(record.data) if self.kind == "bytes" else 1
            limit = self.value * (self.per_byte if self.kind == "bytes" else 1)
            due = self._start_wall + self._sent / limit
        if due > now:
            await trio.sleep(due - now)


class HeldLive(list[HeldMessage]):
    """The live messages held for one replaying subscription until its cut-over, bounded in bytes.

    The engine appends :class:`~broker.engine.router.HeldMessage` entries as to a list. Past ``bound``
    bytes, or while client buffers exceed the broker-wide TotalMessageMemoryLimit, what is held is dropped
    when the journal holds all of it (publishes on topics it records, appended to it before being routed
    here): the replay then reads on to a new cut-over (:meth:`refix`). Otherwise the client is offlined as
    slow. Held bytes count in the broker-wide budget's ``output`` (they wait to go out to the client) and
    in the ``replay_held_bytes`` gauge.

    Args:
        services: The broker's services (journal topics, budget, counters).
        session: The subscriber.
        sub_id: Its subscription, for log lines.
        catch_up: Whether the replay can read held changes back from the journal (not: a paginated
            historical window, which needs every change of the topic in order with its own).
    """

    def __init__(self, services: SessionServices, session: Any, sub_id: str, catch_up: bool = True) -> None:
        super().__init__()
        self.services = services
        self.session = session
        self.sub_id = sub_id
        self.bound = max(session.outbound.limit // HELD_SHARE, 1)
        self.catch_up = catch_up
        self.bytes = 0
        #: Whether held messages were dropped since the cut-over was fixed: the journal must be read past it.
        self.dropped = False
        #: Whether everything routed here since the cut-over was fixed can be read back from the journal.
        self.exact = True
        self.catch_ups = 0
        self._logged: dict[str, bool] = {}

    def append(self, item: HeldMessage) -> None:  # noqa: D102 - the engine's list interface
        topic = item.topic
        if self.exact:
            logged = self._logged.get(topic)
            if logged is None:
                logged = self._logged[topic] = self.services.durability.is_logged(topic)
            self.exact = self.catch_up and logged and item.reason is None
        if self.dropped:
            if not self.exact:
                self._offline(item)
            return  # in the journal: read back by the catch-up
        size = (HELD_OVERHEAD + len(item.body) + len(topic) + len(item.bm or "") + len(item.key or "")
                + len(item.x or ""))
        if self.bytes + size > self.bound or not self.services.clients.memory.fits(size):
            if self.exact:
                self._drop()  # this message too: it is in the journal
            else:
                self._offline(item)
            return
        super().append(item)
        self.bytes += size
        self.services.clients.memory.output += size
        counters = self.services.counters
        counters.replay_held_bytes += size
        if self.bytes > counters.replay_held_peak_bytes:
            counters.replay_held_peak_bytes = self.bytes

    def _drop(self) -> None:
        """Let go of what is held: the replay reads it back from the journal."""
        self.release()
        self.dropped = True
        self.catch_ups += 1
        self.services.counters.replay_catch_ups += 1
        log.debug("%s (%s): subscription %s held more than %d bytes of live messages during its replay: "
                  "dropped them, reading on from the transaction log", self.session.id, self.session.name,
                  self.sub_id, self.bound)

    def _offline(self, item: HeldMessage) -> None:
        """Offline the client as slow: what it holds cannot be read back from the journal."""
        held = self.bytes
        self.release()
        self.dropped = True  # nothing more is held: the session is going
        if self.session.closed_reason:
            return
        why = ("the paginated historical window needs every change" if not self.catch_up
               else f"topic {item.topic!r} is not recorded in the transaction log" if item.reason is None
               else "out-of-focus notices are not in the transaction log")
        self.services.counters.replay_held_offlined += 1
        log.warning("%s (%s) offlined as slow: its replaying subscription %s held %d bytes of live messages, "
                    "and the next would pass its bound of %d bytes (a quarter of MessageMemoryLimit) or the "
                    "broker-wide TotalMessageMemoryLimit, and the replay cannot read them back from the "
                    "transaction log (%s)", self.session.id, self.session.name, self.sub_id, held, self.bound, why)
        self.session.offline(held=held, held_during=f"subscription {self.sub_id} replayed the transaction log")

    def release(self) -> None:
        """Drop every held message and take its bytes out of the accounting."""
        self.clear()
        self.services.clients.memory.output -= self.bytes
        self.services.counters.replay_held_bytes -= self.bytes
        self.bytes = 0

    def refix(self) -> None:
        """The journal now holds everything dropped (the caller fixes the new cut-over in this same engine
        step): hold live messages again."""
        self.dropped = False
        self.exact = True

    def take(self) -> list[HeldMessage]:
        """What is held, in order, taken out of the accounting (the cut-over)."""
        held = list(self)
        self.release()
        return held


class Replay:
    """One running bookmark replay (pause/resume target)."""

    def __init__(self, sub: Subscription, paused: bool) -> None:
        self.sub = sub
        self.running = trio.Event()
        if not paused:
            self.running.set()
        #: Records sent so far.
        self.sent = 0
        #: The bookmark of the last record sent (``None`` before the first).
        self.last_bm: str | None = None
        #: The sequence of the last record read from the journal, sent or not (0 before the first).
        self.read_to = 0
        #: Whether the replay has sent everything durable and waits for the journal's next fsync (the rest
        #: of the replay is appended but not durable: a group commit under way, or the disk is full).
        self.waiting_for_journal = False

    def pause(self) -> None:
        """Hold the replay before the next record."""
        if self.running.is_set():
            self.running = trio.Event()

    def resume(self) -> None:
        """Continue the replay."""
        self.running.set()


def start_bookmark_subscription(services: SessionServices, session: Any, header: Mapping[str, Any],
                                acks: frozenset[str], *, delta: bool = False) -> None:
    """Register a bookmark subscription and start its replay task in the session's nursery.

    Raises:
        CommandError: no transaction log, topic not logged, bad bookmark or options.
    """
    engine = services.engine
    journal = services.durability.journal
    topic_text = header.get("topic") or ""
    pattern = TopicPattern.compile(topic_text)
    if journal is None:
        raise CommandError("invalid topic", "bookmark subscriptions need a <TransactionLog>; none is configured")
    if pattern.regex is None and not services.durability.is_logged(topic_text):
        raise CommandError(
            "invalid topic", f"topic {topic_text!r} is not recorded in the transaction log; add it to "
            "<TransactionLog><Topic> to subscribe with a bookmark"
        )
    words, pairs = parse_options(header.get("options"))
    sub_id = header.get("sub_id") or header.get("cmd_id")
    existing = replay_of(services, session, sub_id)
    if existing is not None and ("resume" in words or "pause" in words) and "replace" not in words:
        existing.resume() if "resume" in words else existing.pause()
        session.ack(header, acks, "processed", sub_id=sub_id)
        return
    start = parse_bookmark(str(header.get("bookmark")))
    if start.publisher and start.publisher != journal.instance_hash:
        choice = pairs.get("bookmark_not_found", "epoch")
        if choice == "fail":
            raise CommandError("invalid bookmark", f"bookmark {header.get('bookmark')!r} is not from this instance")
        start = ReplayStart(now=True) if choice == "now" else ReplayStart.epoch()
    rate = Rate(pairs["rate"]) if "rate" in pairs else None
    sub = engine.subscribe(session, header, kind="bookmark", delta=delta)
    if start.now:
        session.ack(header, acks, "processed", sub_id=sub.sub_id)
        session.ack(header, acks, "completed", sub_id=sub.sub_id)
        return
    # The same engine step: register, hold live messages, and fix the cut-over sequence.
    sub.replay_buffer = HeldLive(services, session, sub.sub_id)
    cut = journal.last_sequence
    replay = Replay(sub, paused="pause" in words)
    services.replays.register(session, sub.sub_id, replay)
    session.ack(header, acks, "processed", sub_id=sub.sub_id)
    session.spawn(_run_replay, services, session, header, acks, replay, start, cut, rate)


def replay_of(services: SessionServices, session: Any, sub_id: str | None) -> Replay | None:
    """The running replay of a session's subscription, if any."""
    return services.replays.get(session, sub_id)


async def _run_replay(services: SessionServices, session: Any, header: Mapping[str, Any], acks: frozenset[str],
                      replay: Replay, start: ReplayStart, cut: int, rate: Rate | None,
                      historical: HistoricalReplay | HistoricalPages | None = None) -> None:
    """Replay up to ``cut`` then cut over to live; a journal problem ends this subscription, never the client.

    ``historical``: the replay continues a historical SOW query (sow_and_subscribe with a timestamp), which
    decides record by record what the subscriber gets (publishes after the query's time, out-of-focus notices).

    What is already durable is replayed at once: records appended after the last fsync (more of them
    while the journal's disk is full) are waited for only when the replay reaches them.
    """
    sub = replay.sub
    journal = services.durability.journal
    assert journal is not None
    services.replays.started()
    began = time.monotonic()
    encoder = None
    if historical is None and rate is None:  # every record is a plain delivery: encode chunks off the loop
        encoder = ChunkEncoder(sub.sub_id, f"{journal.instance_hash}|", sub.topic.matches, sub.filter,
                               services.message_type)
    try:
        position = start
        while True:
            until = min(cut, journal.durable_sequence)
            if encoder is not None:
                records: Iterator[Any] = await trio.to_thread.run_sync(
                    partial(journal.reader().runs, position, until_sequence=until, make=encoder.make))
            else:
                records = await trio.to_thread.run_sync(partial(journal.replay, position, until_sequence=until))
            try:
                if encoder is not None:
                    going = await _send_encoded(services, session, replay, records, encoder)
                else:
                    going = await _send_records(services, session, replay, records, rate, historical)
                if not going:
                    return  # unsubscribed (or replaced) during the replay
            finally:
                close = getattr(records, "close", None)
                if close is not None:
                    close()
            if until >= cut:
                held_live = sub.replay_buffer
                if not isinstance(held_live, HeldLive) or not held_live.dropped:
                    break
                # Catch-up: live messages were dropped (each is in the journal, after the old cut-over). In one
                # engine step fix a new cut-over and hold live messages again; read on to it.
                cut = journal.last_sequence
                held_live.refix()
                if replay.read_to:
                    position = ReplayStart.after(replay.read_to)
                continue
            # The rest of the replay is not on disk yet (the journal's disk is full, or a group commit is
            # under way): wait for it, then read on from where this pass stopped.
            replay.waiting_for_journal = True
            await services.durability.wait_durable()
            replay.waiting_for_journal = False
            if replay.read_to:
                position = ReplayStart.after(replay.read_to)
        # Cut over: the live messages held since registration, in order, then live delivery.
        held_live, sub.replay_buffer = sub.replay_buffer, None
        held = held_live.take() if isinstance(held_live, HeldLive) else list(held_live or [])
        if isinstance(historical, HistoricalPages):
            historical.finish(held)  # the same engine step: the private window joins the live ones
            held = []
        for item in held:
            if item.reason:  # an out-of-focus notice held with the live messages (a historical sow_and_subscribe)
                deliver(session, item.topic, sub.sub_id, item.body, item.bm, item.key, item.x, command="oof",
                        reason=item.reason)
                continue
            deliver(session, item.topic, sub.sub_id, item.body, item.bm, item.key, item.x)
            replay.last_bm = item.bm or replay.last_bm
        session.ack(header, acks, "completed", sub_id=sub.sub_id)
        if "persisted" in acks:
            session.ack(header, acks, "persisted", sub_id=sub.sub_id, bm=replay.last_bm or journal.bookmark(cut))
        log.info("%s replayed %d messages for %s/%s in %.3fs (then %d held live; %d catch-ups past the "
                 "cut-over)", session.id, replay.sent, session.name, sub.sub_id, time.monotonic() - began, len(held),
                 held_live.catch_ups if isinstance(held_live, HeldLive) else 0)
    except (JournalError, OSError) as exc:
        _replay_failed(services, session, header, acks, sub, exc, replay.sent, replay.last_bm)
    finally:
        if isinstance(sub.replay_buffer, HeldLive):
            sub.replay_buffer.release()
        sub.replay_buffer = None
        services.replays.unregister(session, sub.sub_id)
        services.replays.finished()
        if historical is not None:
            historical.close()


async def _send_encoded(services: SessionServices, session: Any, replay: Replay, runs: Iterator[list[Record]],
                        encoder: ChunkEncoder) -> bool:
    """Send the records of ``runs`` encoded a chunk at a time in a worker thread; ``False`` when the subscription
    went away."""
    sub = replay.sub
    journal = services.durability.journal
    assert journal is not None
    router = services.engine.router
    outbound = session.outbound
    while True:
        chunk = await trio.to_thread.run_sync(encoder.take, runs)
        if not chunk.read and chunk.problem is None:
            return True
        if router.get(session, sub.sub_id) is not sub:
            return False
        replay.read_to = chunk.last_read or replay.read_to
        if chunk.sent:
            if not replay.running.is_set():
                await replay.running.wait()
                if router.get(session, sub.sub_id) is not sub:
                    return False
            session.emit(chunk.frames, messages=chunk.sent)
            replay.sent += chunk.sent
            replay.last_bm = journal.bookmark(chunk.last_sent)
        if chunk.problem is not None:
            raise chunk.problem  # after the good records read before it were sent
        if outbound.size > WATERMARK:
            await outbound.wait_below(WATERMARK // 2)


async def _send_records(services: SessionServices, session: Any, replay: Replay, records: Iterator[Record], rate: Rate | None,
                        historical: HistoricalReplay | HistoricalPages | None) -> bool:
    """Send ``records`` one at a time (paced, or decided by a historical query); ``False`` when the subscription
    went away."""
    sub = replay.sub
    journal = services.durability.journal
    assert journal is not None
    parsers: dict[str, Any] = {}
    while True:
        chunk, problem = await trio.to_thread.run_sync(_take, records)
        if not chunk and problem is None:
            return True
        if services.engine.router.get(session, sub.sub_id) is not sub:
            return False
        for rec in chunk:
            replay.read_to = rec.sequence
            oof: Step | None = None
            if historical is not None:
                step = historical.decide(rec)
                if step is None:
                    continue
                oof = step if step.oof_reason else None
            elif rec.command not in (Command.PUBLISH, Command.DELTA_PUBLISH) or not sub.topic.matches(rec.topic):
                continue
            elif sub.filter is not None:
                try:
                    if not sub.filter(_parser(services, parsers, rec.message_type).parse(rec.data)):
                        continue
                except BrokerError:
                    continue
            if not replay.running.is_set():
                await replay.running.wait()
            if rate is not None:
                await rate.pace(rec)
            if services.engine.router.get(session, sub.sub_id) is not sub:
                return False
            replay.last_bm = journal.bookmark(rec.sequence)
            if oof is not None:
                deliver(session, rec.topic, sub.sub_id, oof.last_data, replay.last_bm, rec.sow_key.decode() or None,
                        None, command="oof", reason=oof.oof_reason)
                services.engine.counters.oof.add(oof.oof_reason)
                continue
            deliver(session, rec.topic, sub.sub_id, rec.data, replay.last_bm,
                    rec.sow_key.decode() or None, rec.correlation_id.decode() or None)
            replay.sent += 1
        if problem is not None:
            raise problem  # after the good records read before it were sent
        if session.outbound.size > WATERMARK:
            await session.outbound.wait_below(WATERMARK // 2)


def _parser(services: SessionServices, parsers: dict[str, Any], message_type: str) -> Any:
    mt = parsers.get(message_type)
    if mt is None:
        mt = parsers[message_type] = services.message_type(message_type)
    return mt


class Step(NamedTuple):
    """What a historical replay sends for one journal record (:meth:`HistoricalReplay.decide`)."""

    #: ``""``: the record goes out as a publish; else the reason of the out-of-focus notice sent instead.
    oof_reason: str
    #: The notice's data: the record's last state in focus (empty for a publish).
    last_data: bytes


#: Send the record as a publish.
PUBLISH = Step("", b"")


class HistoricalReplay:
    """What a historical sow_and_subscribe replays after its snapshot: the journal records of its topics logged
    after each topic's snapshot time, and, for a subscription with ``oof``, an out-of-focus notice for a record
    that was in its scope (as of the snapshot, or made so by the replay) and leaves it (an update that no longer
    matches, a delete, an expiration).

    Args:
        sub: The subscription.
        bounds: Topic -> the snapshot's time ``E`` (ns): records logged at or before it are in the snapshot.
        snapshots: Topic -> a historical snapshot as of ``E``, read for a key's state before the replay
            touched it (closed by :meth:`close`).
        message_types: Topic -> its message type.
    """

    def __init__(self, sub: Subscription, bounds: dict[str, int], snapshots: dict[str, Any],
                 message_types: dict[str, Any]) -> None:
        self.sub = sub
        self.bounds = bounds
        self.snapshots = snapshots
        self.message_types = message_types
        #: (topic, key) -> the data of its in-scope state, or None when out of scope.
        self.focus: dict[tuple[str, str], bytes | None] = {}

    def _matches(self, topic: str, data: bytes) -> bool:
        flt = self.sub.filter
        if flt is None:
            return True
        try:
            return bool(flt(self.message_types[topic].parse(data)))
        except BrokerError:
            return False

    def _in_focus(self, topic: str, key: str) -> bytes | None:
        slot = (topic, key)
        if slot in self.focus:
            return self.focus[slot]
        value = self.snapshots[topic].get(key.encode())
        data = None
        if value is not None:
            data = SowRecord.split(value)[1]
            if not self._matches(topic, data):
                data = None
        return data

    def decide(self, rec: Record) -> Step | None:
        """For one journal record: ``None`` (nothing to send), :data:`PUBLISH` (send it as a publish), or a
        :class:`Step` with the out-of-focus reason and the last data in focus (send an out-of-focus notice)."""
        bound = self.bounds.get(rec.topic)
        if bound is None or rec.timestamp_ns <= bound:
            return None
        publish = rec.command in (Command.PUBLISH, Command.DELTA_PUBLISH)
        if not self.sub.oof:  # only out-of-focus notices need to know what was in scope
            return PUBLISH if publish and self._matches(rec.topic, rec.data) else None
        key = rec.sow_key.decode()
        slot = (rec.topic, key)
        if publish:
            if self._matches(rec.topic, rec.data):
                self.focus[slot] = rec.data
                return PUBLISH
            was = self._in_focus(rec.topic, key)
            self.focus[slot] = None
            return Step("match", was) if was is not None else None
        was = self._in_focus(rec.topic, key)
        self.focus[slot] = None
        if was is None:
            return None
        return Step("expired" if rec.command == Command.EXPIRE else "deleted", was)

    def close(self) -> None:
        """Release the snapshots."""
        for snap in self.snapshots.values():
            snap.close()


def _take(records: Iterator[Record]) -> tuple[list[Record], JournalError | None]:
    """Up to ``CHUNK`` records, and the error that ended the read early (the records before it are kept)."""
    chunk: list[Record] = []
    try:
        chunk.extend(islice(records, CHUNK))
    except JournalError as exc:
        return chunk, exc
    return chunk, None


#: The AMPS reason of a failed replay (the official client maps it to ReplayFailedException).
REPLAY_FAILED = "txn replay failed"


def describe_damage(exc: BaseException) -> str:
    """What a client is told about a replay that met damage: where, which records, and what to do."""
    where = []
    path = getattr(exc, "path", None) or getattr(exc, "file", None)
    if path:
        where.append(f"file {path}")
    offset = getattr(exc, "offset", None)
    if offset is not None:
        where.append(f"offset {offset}")
    first, last = getattr(exc, "first_sequence", None), getattr(exc, "last_sequence", None)
    if first is not None or last is not None:
        where.append(f"sequences {first if first is not None else '?'}-{last if last is not None else '?'}")
    located = f" ({', '.join(where)})" if where else ""
    return (f"{REPLAY_FAILED}: the transaction log is damaged{located}: {exc}. The records from there on cannot "
            "be replayed; subscribe again from a bookmark after the damage, or restore the journal file "
            "(or set the damaged-record policy to skip) and subscribe again")


def _replay_failed(services: SessionServices, session: Any, header: Mapping[str, Any], acks: frozenset[str],
                   sub: Subscription, exc: BaseException, sent: int, last_bm: str | None) -> None:
    """Tell the client its replay failed, end that subscription, count and log it; the connection stays."""
    text = describe_damage(exc) if isinstance(exc, JournalDamageError) else f"{REPLAY_FAILED}: {exc}"
    services.counters.replay_failures += 1
    log.error("%s (%s): replay for subscription %s on %r failed after %d messages: %s", session.id, session.name,
              sub.sub_id, header.get("topic"), sent, text)
    still = services.engine.router.get(session, sub.sub_id) is sub
    if still:
        services.engine.unsubscribe(session, sub.sub_id)
        # An out-of-focus notice routed to the subscription's handler (the client hands `oof` with `sids` to it
        # whether or not the subscription asked for OOF), with the reason; then the completed ack as a failure.
        deliver(session, header.get("topic") or "", sub.sub_id, b"", last_bm, None, None,
                command="oof", reason=text)
        session.ack(header, acks, "completed", sub_id=sub.sub_id, reason=REPLAY_FAILED)


def historical_topics(services: SessionServices, header: Mapping[str, Any]) -> list[Any] | None:
    """The SOW topics a sow_and_subscribe starts from a point in time, or ``None`` for a plain one.

    Seed 000: a sow_and_subscribe with a timestamp bookmark on a topic with ``<History>`` returns the SOW as of
    that time, then replays the transaction log from there, then goes live. Without History on any topic it
    matches, it is a plain sow_and_subscribe (the bookmark is ignored).

    Raises:
        CommandError: a topic with History that the transaction log does not record; a paginated subscription.
    """
    as_of = historical_time(header)
    if as_of is None:
        return None
    pattern = TopicPattern.compile(header.get("topic") or "")
    topics = [t for name, t in services.engine.sow_topics.items() if t.history is not None and pattern.matches(name)]
    if not topics:
        return None
    unlogged = [t.name for t in topics if services.durability.journal is None or not services.durability.is_logged(t.name)]
    if unlogged:
        raise CommandError(
            "invalid topic", f"a historical sow_and_subscribe replays the transaction log after its snapshot, but "
            f"topic {unlogged[0]!r} is not recorded in it: add it to <TransactionLog><Topic>, or subscribe without "
            "a timestamp bookmark")
    return topics


def prepare_historical_replay(services: SessionServices, session: Any, header: Mapping[str, Any], acks: frozenset[str],
                              sub: Subscription, topics: list[Any]) -> tuple[Any, Any]:
    """In the engine step that took the query's snapshot and registered ``sub``: hold its live messages and fix
    the cut-over sequence. Returns ``(begin, cancel)``: ``begin()`` starts the replay (after group_end);
    ``cancel()`` releases everything when the query failed before it."""
    journal = services.durability.journal
    assert journal is not None
    as_of = historical_time(header)
    assert as_of is not None
    now = time.time_ns()
    window = sub.extra.get("historical_window")
    sub.replay_buffer = HeldLive(services, session, sub.sub_id, catch_up=window is None)
    cut = journal.last_sequence
    bounds = {t.name: t.history.as_of_bound(as_of) for t in topics}
    snapshots = {t.name: t.history.snapshot(as_of, now, count=False) for t in topics}
    window = sub.extra.pop("historical_window", None)
    historical: HistoricalReplay | HistoricalPages
    if window is not None:  # paginated: one topic (start_sow refuses more)
        topic = topics[0]
        historical = HistoricalPages(services, sub, topic, window, bounds[topic.name], snapshots[topic.name])
        sub.capture_all = True
    else:
        historical = HistoricalReplay(sub, bounds, snapshots, {t.name: t.message_type for t in topics})
    replay = Replay(sub, paused=False)
    services.replays.register(session, sub.sub_id, replay)
    start = ReplayStart.since(min(bounds.values()) + 1)

    def begin() -> None:
        session.spawn(_run_replay, services, session, header, acks, replay, start, cut, None, historical)

    def cancel() -> None:  # the query failed before group_end: no replay
        if isinstance(sub.replay_buffer, HeldLive):
            sub.replay_buffer.release()
        sub.replay_buffer = None
        services.replays.unregister(session, sub.sub_id)
        historical.close()

    return begin, cancel


class HistoricalPages:
    """The replay of a paginated sow_and_subscribe from a point in time.

    Its window (``top_n`` records after ``skip_n``, in OrderBy then SowKey order) starts over the historical
    snapshot in a private result set. Each journal record after the snapshot's time moves it as a live change
    moves a live window (:func:`broker.engine.pagination.refresh_window`: the changed record published, records
    pushed out ``oof``, records pulled in published), reading states from the replayed changes over the
    snapshot. Meanwhile the engine holds every change of the topic for the subscription
    (:attr:`~broker.engine.router.Subscription.capture_all`); :meth:`finish` applies those, then, in the same
    engine step, opens a live window, sends any difference, and makes the subscription an ordinary paginated
    one.
    """

    def __init__(self, services: SessionServices, sub: Subscription, topic: Any, window: Any, bound: int, snapshot: Any) -> None:
        self.services = services
        self.sub = sub
        self.topic = topic
        self.window = window
        self.bound = bound
        self.snapshot = snapshot
        #: SowKey -> its state after the replayed changes (None: deleted).
        self.state: dict[str, SowRecord | None] = {}

    def lookup(self, key: str) -> SowRecord | None:
        """A record's state at the replay's position."""
        if key in self.state:
            return self.state[key]
        value = self.snapshot.get(key.encode())
        return None if value is None else SowRecord.decode(key, value)

    def apply(self, key: str, record: SowRecord | None, reason: str = "match") -> None:
        """One change of the topic: move the private window and deliver what changed for it."""
        previous = self.lookup(key)
        self.state[key] = record
        message = self.topic.message_type.lazy(record.data) if record is not None else None
        moved = self.window.results.move(key, message)
        if moved is None or not window_affected(self.window, *moved):
            return
        refresh_window(self.window, self.topic, key, previous, record, self.services.engine.counters.oof, reason,
                       self.lookup)

    def decide(self, rec: Record) -> None:
        """Apply one journal record (the window delivers itself: nothing for the caller to send)."""
        if rec.topic != self.topic.name or rec.timestamp_ns <= self.bound:
            return None
        key = rec.sow_key.decode()
        if rec.command in (Command.PUBLISH, Command.DELTA_PUBLISH):
            journal = self.services.durability.journal
            self.apply(key, SowRecord(key, rec.data, rec.timestamp_ns, rec.sequence, getattr(rec, "expiration_ns", 0),
                                      journal.bookmark(rec.sequence) if journal is not None else "",
                                      rec.correlation_id.decode()))
        else:
            self.apply(key, None, "expired" if rec.command == Command.EXPIRE else "deleted")
        return None

    def finish(self, held: list[HeldMessage]) -> None:
        """Apply the changes held since the snapshot's engine step, then join the live windows (synchronous)."""
        name = self.topic.name
        for item in held:
            if item.topic != name:
                continue
            key = item.key or ""
            if item.reason:
                self.apply(key, None, item.reason)
            else:
                self.apply(key, SowRecord(key, item.body, 0, 0, 0, item.bm or "", item.x or ""))
        sub = self.sub
        sub.capture_all = False
        engine = self.services.engine
        if engine.router.get(sub.client, sub.sub_id) is not sub:
            return
        results = self.window.results
        with self.topic.storage.snapshot() as snap:
            live = engine.router.windows.open(
                topic=self.topic, snapshot=snap, now_ns=time.time_ns(), predicate=sub.filter,
                filter_text=sub.filter_text, order_by=results.order_by, top_n=self.window.top_n,
                skip_n=self.window.skip_n)
        mine, theirs = set(self.window.keys), set(live.keys)
        client = sub.client
        if sub.oof:  # the private window followed every change, so these differ only on ties: reconcile
            for k in self.window.keys:
                if k not in theirs and (gone := self.lookup(k)) is not None:
                    deliver(client, name, sub.sub_id, gone.data, gone.bookmark or None, k,
                            gone.correlation_id or None, command="oof", reason="match")
        for k in live.keys:
            if k not in mine and (rec := self.topic.get(k)) is not None:
                deliver(client, name, sub.sub_id, rec.data, rec.bookmark or None, k, rec.correlation_id or None)
        live.sub = sub
        engine.router.paginate(sub, live)

    def close(self) -> None:
        """Release the snapshot; the subscription no longer needs every change held."""
        self.sub.capture_all = False
        self.snapshot.close()
