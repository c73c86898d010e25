"""SOW query results streamed from a worker thread, so a long query never holds the event loop (issue 17).

A query over a million records costs seconds of Python: the scan, the filter, an OrderBy sort and the
encoding of every record. All of it runs in a worker thread over the plan's storage snapshots
(:meth:`broker.engine.queries.QueryPlan.rows`), which turns the results into whole ``sow`` frames (bytes,
formatted straight from the stored values by :class:`broker.sow.record.WireRecords`) and hands them to the
loop in chunks through a memory channel with a small buffer. The loop only queues those bytes on the client's
outbound buffer, so other clients' publishes, acks and heartbeats wait at most for the thread to release the
GIL, not for the query. A client that reads slowly fills its outbound buffer to the watermark; the loop then
stops taking chunks, the channel fills and the thread blocks: the scan goes at the client's pace.

A query that only fetches a few keys (:data:`LOOP_LOOKUPS`) is encoded on the loop the same way: less work
than a thread hand-off, and never queued behind long scans. Queries whose records are tested against loop
state (the difference a replacing subscription sends) or already folded in memory (aggregation) stream on the
loop in slices instead (``QueryCommands._sow_on_loop`` in :mod:`broker.server.session_queries`).

Bounds: at most :data:`QUERY_THREADS` queries scan at once (a :class:`trio.CapacityLimiter` per broker run;
more wait their turn), each holding at most :data:`CHUNKS_AHEAD` chunks of about :data:`CHUNK_BYTES` beyond
the outbound watermark. Cancellation (the client disconnects, the broker stops): the thread sees the stop
flag at the next pause of the scan (every few hundred records read) or fails to hand over its next chunk, and
returns; the caller closes the snapshots once it has.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Protocol, TypeVar, cast

import trio

from broker.engine.queries import PAUSE, QueryPlan, Row
from broker.errors import LocalProtocolError
from broker.protocol import encode_header, encode_sow_parts
from broker.server.outbound import Outbound
from broker.sow.record import WireRecords

log = logging.getLogger("broker.query")

T = TypeVar("T")

#: Queries whose scans run at once; more wait for a turn. Python threads share one core's worth of
#: interpreter (the GIL), so more would only take more turns from the event loop.
QUERY_THREADS = 2
#: Bytes of frames the thread gathers before handing them to the loop (one loop wakeup each).
CHUNK_BYTES = 256 * 1024
#: Chunks that may wait in the channel for the loop: the thread runs this far ahead of the client.
CHUNKS_AHEAD = 2
#: A query fetching at most this many keys (``sow_keys``, a filter pinning the key, a page of a paginated
#: subscription) runs on the loop: a few hundred microseconds, less than a thread hand-off.
LOOP_LOOKUPS = 100

class QueryClient(Protocol):
    """What a streamed query needs of its client (:class:`~broker.server.session.Session`)."""

    id: str
    name: str

    @property
    def outbound(self) -> Outbound:
        """Its outbound buffer (streaming waits below the watermark)."""

    def emit(self, frame: bytes, *, messages: int = 0, now: bool = False) -> None:
        """Queue frames for the client."""


_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("query_limiter")


def query_limiter() -> trio.CapacityLimiter:
    """The broker run's limit on query threads (:data:`QUERY_THREADS`)."""
    try:
        return _limiter.get()
    except LookupError:
        limiter = trio.CapacityLimiter(QUERY_THREADS)
        _limiter.set(limiter)
        return limiter


def result_frames(rows: Iterator[Row | None], outer: Mapping[str, Any], batch_size: int,
                  stopped: threading.Event, chunk_bytes: int = CHUNK_BYTES) -> Iterator[list[bytes]]:
    """The ``sow`` frames of ``rows``, ``batch_size`` records each (fewer in the last one, and where the topic
    changes), gathered into chunks of about ``chunk_bytes``. Runs in the worker thread.

    Args:
        rows: :meth:`QueryPlan.rows` (its pauses are where ``stopped`` is checked).
        outer: The outer header of every frame (``batch_size`` is set per frame).
        batch_size: The most records per frame (the query's BatchSize).
        stopped: Set by the loop when nobody wants the rest; the frames end at the next pause.
        chunk_bytes: Bytes of frames per chunk.
    """
    headers: dict[int, bytes] = {}
    encoders: dict[str, WireRecords] = {}
    batch: list[Row] = []
    encoder: WireRecords | None = None
    current: Any = None  # the topic of the rows in ``batch``
    chunk: list[bytes] = []
    size = 0

    def frame() -> bytes:
        assert encoder is not None
        n = len(batch)
        header = headers.get(n)
        if header is None:
            if outer.get("query_id") is None:
                raise LocalProtocolError("a sow batch needs query_id: the client routes sow frames by it, not by cid")
            header = headers[n] = encode_header({"c": "sow", **outer, "batch_size": n})
        parts: list[bytes] = []
        encoder.add(parts, batch)
        batch.clear()
        return encode_sow_parts(header, parts)

    append = batch.append
    for item in rows:
        if item is PAUSE:
            if stopped.is_set():
                return
            continue
        if item[0] is not current:
            topic = current = item[0]
            if batch and encoder is not None and encoder.topic != topic.name:
                chunk.append(f := frame())
                size += len(f)
            encoder = encoders.get(topic.name) or encoders.setdefault(topic.name, WireRecords(topic.name))
        append(item)
        if len(batch) >= batch_size:
            chunk.append(f := frame())
            size += len(f)
            if size >= chunk_bytes:
                yield chunk
                chunk, size = [], 0
                if stopped.is_set():
                    return
    if batch:
        chunk.append(frame())
    if chunk:
        yield chunk


async def stream_query(session: QueryClient, plan: QueryPlan, outer: Mapping[str, Any], batch_size: int,
                       watermark: int) -> None:
    """Send ``plan``'s results to ``session`` as ``sow`` frames built in a worker thread (see the module
    docstring); returns once the last frame is queued. The caller closes the plan.

    Args:
        session: The client.
        plan: The query (its snapshots are read by the thread only until this returns).
        outer: The outer header of the frames.
        batch_size: The most records per frame.
        watermark: Outbound bytes above which the loop waits for the client to read.
    """
    # On the loop: counts the query in the topics' statistics. A generator (closed below); the plan declares an
    # Iterator.
    rows = cast("Generator[Row | None, None, None]", plan.rows())
    lookups = plan.lookup_count()
    if lookups is not None and lookups <= LOOP_LOOKUPS:
        # A few keys fetched: less work than a thread hand-off, and no wait behind long scans for a turn.
        for chunk in result_frames(rows, outer, batch_size, threading.Event()):
            for data in chunk:
                session.emit(data, now=True)
        return
    send, receive = trio.open_memory_channel[list[bytes]](CHUNKS_AHEAD)
    stopped = threading.Event()
    token = trio.lowlevel.current_trio_token()

    def produce() -> None:
        try:
            for chunk in result_frames(rows, outer, batch_size, stopped):
                trio.from_thread.run(send.send, chunk, trio_token=token)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.RunFinishedError):
            pass  # the loop stopped reading: the query was cancelled
        finally:
            rows.close()

    async def run() -> None:
        try:
            await trio.to_thread.run_sync(produce, limiter=query_limiter())
        finally:
            send.close()

    outbound = session.outbound
    finished = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            try:
                with receive:
                    async for chunk in receive:
                        for data in chunk:  # the client's bound holds frame by frame
                            if outbound.size > watermark:
                                await outbound.wait_below(watermark // 2)
                            session.emit(data, now=True)
            finally:
                stopped.set()  # cancelled or failed: the thread stops at its next pause
        finished = True
    finally:
        if not finished:  # the nursery waited for the thread: it has ended
            log.info("%s (%s): query %s stopped after %d matching records: cancelled or failed", session.id,
                     session.name, outer.get("query_id"), plan.matched)


async def run_stoppable(fn: Callable[[threading.Event], T]) -> T:
    """``fn(stopped)`` in a query thread (one of :data:`QUERY_THREADS`); ``stopped`` is set when the caller is
    cancelled, and ``fn`` should then return soon. Returns only once the thread has, so whatever ``fn`` reads
    (a snapshot) can be released after it.
    """
    stopped = threading.Event()

    async def watch() -> None:
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        result = await trio.to_thread.run_sync(fn, stopped, limiter=query_limiter())
        nursery.cancel_scope.cancel()
    return result


def collect_keys(candidates: Iterator[str | None], stopped: threading.Event) -> list[str]:
    """The keys of ``candidates`` (``None`` marks a pause of the scan, where ``stopped`` is checked)."""
    keys: list[str] = []
    append = keys.append
    for key in candidates:
        if key is None:
            if stopped.is_set():
                break
        else:
            append(key)
    return keys
