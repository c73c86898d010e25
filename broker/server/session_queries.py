"""A session's query commands: ``sow`` (and ``sow_and_subscribe``), ``sow_delete``.

:class:`QueryCommands` is an object a :class:`~broker.server.session.Session` owns. A query's results are
streamed between ``group_begin`` and ``group_end`` while the session holds its live messages back
(:meth:`QuerySession.hold_live`), so a sow_and_subscribe has no gap and no reordering; large scans run in worker
threads (:mod:`broker.server.querystream`), the rest on the loop in slices; a ``sow_delete`` by filter scans a
snapshot in a thread, then deletes what still matches in steps.

Layer (see ``tests/server/test_server_layering.py``): a connection part, beside :mod:`broker.server.session`.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from functools import partial
from time import perf_counter
from typing import Any, Protocol, cast

import trio

from broker.engine.acks import JOURNAL_FULL_REASON, journal_full_detail
from broker.engine.command_options import check_command
from broker.engine.queries import QueryPlan
from broker.engine.sow_subscribe import start_sow
from broker.errors import CommandError
from broker.memo import Memo
from broker.protocol import encode_frame, encode_sow_records
from broker.server.publish_batch import PersistedAcks, PublishingClient
from broker.server.querystream import QueryClient, collect_keys, run_stoppable, stream_query
from broker.server.replay import historical_topics, prepare_historical_replay
from broker.server.services import SessionServices

#: Bytes of query results queued before streaming waits for the client to read (at most half the
#: client's outbound bound, so a large result never trips the bound of a client that reads).
QUERY_WATERMARK = 4 * 1024 * 1024
#: Event-loop time a streaming query uses before letting other clients run (it resumes right after).
QUERY_SLICE_SECONDS = 0.0005
#: The most records one ``sow`` frame of a query carries, whatever the BatchSize (a frame is encoded in one
#: step: 1,000 records take 5.5 ms).
QUERY_FRAME_RECORDS = 250
#: Records a ``sow_delete`` by filter checks and deletes in one loop step (each costs a read, a parse, the
#: filter, the delete, a journal record and its OOF notices: about 10 us).
QUERY_DELETE_STEP = 1000

#: Epoch second -> ``YYYYmmddTHHMMSS`` (UTC).
_second_text: Memo[int, str] = Memo(lambda secs: time.strftime("%Y%m%dT%H%M%S", time.gmtime(secs)), 4096)


def amps_timestamp(ns: int) -> str:
    """AMPS's timestamp form, ``20240101T000000.000000Z`` (UTC).

    Query results format one per record, and records written in the same second share the formatted
    second (a bounded cache of them), so most calls are one dict lookup and one small format.
    """
    secs, rem = divmod(ns, 1_000_000_000)
    return f"{_second_text[secs]}.{rem // 1000:06d}Z"


class QuerySession(PublishingClient, QueryClient, Protocol):
    """What the query commands need of their session (:class:`~broker.server.session.Session`)."""

    #: The session's persisted-ack order (a journaled delete's ack).
    persisted: PersistedAcks

    def hold_live(self) -> None:
        """Hold live messages back until :meth:`release_live` (results first)."""

    def release_live(self) -> None:
        """Send the live messages held, in order, once every hold is released."""

    def spawn(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` as a task of the session (a historical replay)."""


class QueryCommands:
    """The query commands of one session.

    Args:
        session: The session (the engine's client, whose output the results go to).
        services: The broker's services (engine, journal).
    """

    def __init__(self, session: QuerySession, services: SessionServices) -> None:
        self._session = session
        self._services = services
        self._engine = services.engine
        self._durability = services.durability

    async def sow(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        """``sow``, ``sow_and_subscribe``, ``sow_and_delta_subscribe``: the query's results between group_begin and
        group_end, live messages held meanwhile, then the subscription (and a historical one's replay)."""
        session = self._session
        command = header.get("command") or "sow"
        check_command(command, header)
        subscribe = command in ("sow_and_subscribe", "sow_and_delta_subscribe")
        delta = command == "sow_and_delta_subscribe"
        query_id = header.get("query_id") or header.get("cmd_id") or header.get("sub_id")
        historical = historical_topics(self._services, header) if subscribe else None
        has_sow = self._engine.has_sow(header.get("topic") or "")
        if not has_sow and not subscribe:
            raise CommandError("invalid topic", f"topic {header.get('topic')!r} has no SOW")
        # Plan the query and register the subscription in one engine step: atomic (a replace plans
        # only the difference; a paginated subscription, its window).
        start = start_sow(self._engine, session, header, subscribe=subscribe, delta=delta)
        plan, batch_size, sub = start.plan, start.batch_size, start.sub
        begin_replay = cancel_replay = None
        if historical is not None and sub is not None:  # the same engine step: hold live, fix the cut-over
            begin_replay, cancel_replay = prepare_historical_replay(self._services, session, header, acks, sub, historical)
        session.hold_live()
        start.send_oofs(session, self._engine.counters.oof)  # held: after the results, before later live messages
        returned = 0
        try:
            prepare = getattr(plan, "prepare", None)
            if prepare is not None:  # an aggregated query: folded in a worker thread before any reply
                await trio.to_thread.run_sync(prepare)
            extras = {"query_id": query_id}
            if sub is not None:
                extras["sub_id"] = sub.sub_id
            session.ack(header, acks, "processed", now=True, **extras)
            session.emit(encode_frame({"c": "group_begin", "cid": header.get("cmd_id"), "query_id": query_id}), now=True)
            outer = {"cid": header.get("cmd_id"), "t": header.get("topic"), "query_id": query_id}
            watermark = min(QUERY_WATERMARK, session.outbound.limit // 2)
            if isinstance(plan, QueryPlan):
                # Scanned, sorted and encoded in a worker thread; the loop only queues the frames. This
                # client's live messages stay held until group_end; its later commands wait for this one.
                await stream_query(session, plan, outer, batch_size, watermark)
                returned = plan.returned
            else:
                returned = await self._sow_on_loop(plan, outer, batch_size, watermark)
            session.emit(encode_frame({"c": "group_end", "cid": header.get("cmd_id"), "query_id": query_id}), now=True)
            if begin_replay is not None:
                begin_replay()
                begin_replay = cancel_replay = None
            if not subscribe:
                session.ack(header, acks, "completed", now=True, query_id=query_id,
                         records_returned=returned, topic_matches=plan.matched)
            session.ack(header, acks, "stats", now=True, query_id=query_id,
                     records_returned=returned, topic_matches=plan.matched)
        finally:
            plan.close()
            if cancel_replay is not None:
                cancel_replay()
            session.release_live()

    async def _sow_on_loop(self, plan: Any, outer: dict[str, Any], batch_size: int, watermark: int) -> int:
        """Stream a query whose records are tested against loop state (a replacing subscription's difference)
        or already in memory (an aggregated query) on the event loop, in slices of QUERY_SLICE_SECONDS: between
        them other clients run (the scan and sort pause every few hundred records, see QueryPlan.steps).
        Returns the records sent."""
        session = self._session
        outer = {"c": "sow", **outer}
        batch: list[tuple[str, str, str, str, str, bytes]] = []
        returned = 0
        steps = plan.steps() if hasattr(plan, "steps") else plan.records()
        # BatchSize is the most records a frame may carry (any count up to it works with the official
        # client): frames of at most QUERY_FRAME_RECORDS keep one frame's encoding to about a millisecond.
        batch_size = min(batch_size, QUERY_FRAME_RECORDS)
        slice_end = perf_counter() + QUERY_SLICE_SECONDS
        for item in steps:
            if item is not None:
                topic, rec, _msg = item
                batch.append((topic.name, rec.key, rec.bookmark, amps_timestamp(rec.timestamp_ns),
                              rec.correlation_id, rec.data))
                returned += 1
                if len(batch) >= batch_size:
                    # BatchSize in the outer header: the records in this frame (seed 002, table 7.2).
                    session.emit(encode_sow_records({**outer, "batch_size": len(batch)}, batch), now=True)
                    batch = []
                    if session.outbound.size > watermark:
                        await session.outbound.wait_below(watermark // 2)
                        slice_end = perf_counter() + QUERY_SLICE_SECONDS
            if perf_counter() >= slice_end:
                await trio.sleep(0)
                slice_end = perf_counter() + QUERY_SLICE_SECONDS
        if batch:
            session.emit(encode_sow_records({**outer, "batch_size": len(batch)}, batch), now=True)
        return returned

    async def sow_delete(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        """``sow_delete`` by keys, by data or by filter; journaled deletes are acknowledged as persisted once durable."""
        session = self._session
        check_command("sow_delete", header)
        if header.get("bookmark"):
            # A queue acknowledgement (Client.ack, which asks for no ack): queues are not supported.
            reason = ("header field bookmark is not supported by sow_delete: it acknowledges queue messages, and "
                      "message queues are not supported; delete by filter, sow_keys or data")
            raise CommandError(reason, reason)
        journal = self._durability.journal
        logged = journal is not None and self._durability.is_logged(header.get("topic") or "")
        if logged and self._durability.disk_full:
            raise CommandError(JOURNAL_FULL_REASON, journal_full_detail(journal))
        before = journal.last_sequence if logged and journal is not None else 0
        if not header.get("sow_keys") and not body:
            matches, deleted = await self._delete_by_filter(header, logged)
        else:
            matches, deleted = self._engine.sow_delete(session, header, body)
        session.ack(header, acks, "processed")
        session.ack(header, acks, "stats", matches=matches, records_deleted=deleted, topic_matches=matches)
        if "persisted" in acks:
            # Journaled deletes are acknowledged as persisted once their records are durable.
            after = journal.last_sequence if logged and journal is not None else 0
            session.persisted.ack_command(after if after > before else 0, header, acks)

    async def _delete_by_filter(self, header: Mapping[str, Any], logged: bool) -> tuple[int, int]:
        """A ``sow_delete`` by filter: the scan over a snapshot in a query thread (other clients run meanwhile;
        this client's later commands wait), then the records that still match deleted on the loop, in steps of
        QUERY_DELETE_STEP keys (each step checks and deletes atomically). Returns (matches, records deleted)."""
        topic, text = header.get("topic") or "", header.get("filter")
        # A generator (closed below); the engine declares an Iterator.
        candidates = cast("Generator[str | None, None, None]", self._engine.delete_candidates(topic, text))
        try:
            keys = await run_stoppable(partial(collect_keys, candidates))
        finally:
            candidates.close()  # on the loop: releases the snapshot if the scan stopped early
        matches = deleted = 0
        for start in range(0, len(keys), QUERY_DELETE_STEP):
            if logged and self._durability.disk_full:  # it may have filled while the scan ran
                raise CommandError(JOURNAL_FULL_REASON, journal_full_detail(self._durability.journal))
            m, d = self._engine.delete_still_matching(topic, text, keys[start:start + QUERY_DELETE_STEP])
            matches, deleted = matches + m, deleted + d
            if start + QUERY_DELETE_STEP < len(keys):
                await trio.sleep(0)  # other clients run between the steps
        return matches, deleted
