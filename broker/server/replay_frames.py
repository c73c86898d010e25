"""A bookmark replay's journal records turned into delivery frames in a worker thread, a chunk at a time.

The worker reads runs of records (:meth:`~broker.txlog.reader.JournalReader.runs`), keeps those the
subscription gets (published to a matching topic, passing its filter) and encodes their frames
(:class:`~broker.protocol.DeliveryRun`); the event loop then queues a whole chunk with one ``emit``. So the
loop spends a few microseconds per chunk instead of a frame encode and a queue operation per record, and the
reading, filtering and encoding (most of a replay's work) happen off the loop.

Without a filter nothing of a record is needed but its frame: the reader builds the frame straight from its
read buffer (:class:`FrameMaker`, a :data:`~broker.txlog.records.RecordMaker`), with every check of the record
made as for any read, instead of a :class:`~broker.txlog.records.Record` to encode afterwards.

The first chunk is small, so the first message leaves within milliseconds of the subscription even when the
replay is long; later ones are larger, so thread hand-offs are rare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from broker import speedups
from broker.errors import BrokerError, JournalError
from broker.protocol import DeliveryRun
from broker.txlog import Command, Record
from broker.txlog.records import CorruptRecord, decode_run

#: Records the first chunk reads: small, so the first frames go out at once.
FIRST_CHUNK_RECORDS = 64
#: Records a later chunk reads at most (matching or not: a filter that matches nothing still returns).
CHUNK_RECORDS = 8192
#: Frame bytes after which a chunk ends early (the outbound buffer's watermark is 2 MiB).
CHUNK_BYTES = 512 * 1024

_PUBLISHES = frozenset((Command.PUBLISH, Command.DELTA_PUBLISH))
_new = tuple.__new__


class Delivery(NamedTuple):
    """A journal record as a replay without a filter reads it (what :class:`FrameMaker` builds).

    Attributes:
        sequence: The record's sequence.
        timestamp_ns: When it was logged.
        frame: Its delivery frame, or ``None`` when the subscription does not get it.
    """

    sequence: int
    timestamp_ns: int
    frame: bytes | None


#: The compiled read loop (twin of :func:`~broker.txlog.records.decode_run` with a :class:`FrameMaker`), or ``None``.
_replayframes = speedups.load("replayframes")


class FrameMaker:
    """Builds a record's :class:`Delivery` from the reader's buffer (a
    :data:`~broker.txlog.records.RecordMaker`; called in the worker thread).

    Args:
        run: Encodes the frames (the subscription id and the journal's bookmark prefix).
        matches: Whether the subscription's topic pattern matches a topic.
    """

    def __init__(self, run: DeliveryRun, matches: Callable[[str], Any]) -> None:
        self._run = run
        self._frame = run.frame
        self._matches = matches
        self._topics: dict[str, bool] = {}
        self._compiled = _replayframes.FrameRun(self, Delivery, decode_run) if _replayframes is not None else None

    def __call__(self, buf: bytes, sequence: int, timestamp_ns: int, command: Command, topic: str, key_start: int,
                 key_length: int, corr_start: int, corr_length: int, end: int) -> Delivery:
        ok = self._topics.get(topic)
        if ok is None:
            ok = self._topics[topic] = bool(self._matches(topic))
        if not ok or command not in _PUBLISHES:
            return _new(Delivery, (sequence, timestamp_ns, None))
        data = corr_start + corr_length
        return _new(Delivery, (sequence, timestamp_ns, self._frame(
            topic, buf[data:end], sequence, buf[key_start : key_start + key_length], buf[corr_start:data])))

    def decode_run(self, buf: bytes, pos: int, base: int, most: int = -1
                   ) -> tuple[list[Delivery], list[int], int, CorruptRecord | None]:
        """``decode_run(buf, pos, base, most, self)``, in one compiled loop when
        :mod:`broker.speedups.replayframes` is built (the reader calls this for each read buffer)."""
        if self._compiled is not None:
            return self._compiled.run(buf, pos, base, most)
        return decode_run(buf, pos, base, most, self)

    def topic_state(self, raw: bytes) -> bytes | bool | None:
        """For the compiled loop, a topic (as stored, valid UTF-8): ``False`` when the subscription does not get
        it, the header of its frames up to the bookmark's sequence when they are plain, else ``None``."""
        topic = raw.decode()
        ok = self._topics.get(topic)
        if ok is None:
            ok = self._topics[topic] = bool(self._matches(topic))
        return self._run.head(topic) if ok else False


@dataclass(slots=True)
class Chunk:
    """What one worker-thread call read and encoded.

    Attributes:
        frames: The delivery frames, joined (empty when nothing matched).
        sent: Frames in ``frames``.
        read: Records read (0: the journal has nothing more up to the replay's end).
        last_read: The sequence of the last record read (sent or not), 0 when none was.
        last_sent: The sequence of the last record sent, 0 when none was.
        problem: The journal error that ended the read early (the frames before it are kept).
    """

    frames: bytes
    sent: int
    read: int
    last_read: int
    last_sent: int
    problem: JournalError | None


class ChunkEncoder:
    """Selects and encodes a replay's records (called in a worker thread, one call at a time).

    Args:
        sids: The subscription id.
        bookmark_prefix: The journal's ``"<publisher>|"``.
        matches: Whether the subscription's topic pattern matches a topic.
        predicate: The subscription's compiled filter, or ``None``.
        message_type: Message type name -> the type that parses it (for the filter).
    """

    def __init__(self, sids: str, bookmark_prefix: str, matches: Callable[[str], Any],
                 predicate: Callable[[Any], Any] | None, message_type: Callable[[str], Any]) -> None:
        self.run = DeliveryRun(sids, bookmark_prefix)
        self._matches = matches
        self._topics: dict[str, bool] = {}
        self._predicate = predicate
        self._message_type = message_type
        self._parsers: dict[str, Any] = {}
        self._first = True
        #: What the reader should build of each record (pass it to ``runs``): frames when there is no filter.
        self.make = FrameMaker(self.run, matches) if predicate is None else None
        #: The run being encoded, and how far.
        self._pending: list[Any] = []
        self._at = 0

    def take(self, runs: Iterator[list[Any]]) -> Chunk:
        """Read the next chunk from ``runs`` (:meth:`~broker.txlog.reader.JournalReader.runs` with
        :attr:`make`; what a chunk leaves of a run is kept for the next) and encode what the subscription
        gets."""
        limit = FIRST_CHUNK_RECORDS if self._first else CHUNK_RECORDS
        self._first = False
        direct = self.make is not None
        encode = self._encode
        parts: list[bytes] = []
        pending, at = self._pending, self._at
        read = size = last_read = last_sent = 0
        problem: JournalError | None = None
        try:
            while read < limit and size < CHUNK_BYTES:
                if at >= len(pending):
                    pending, at = next(runs, []), 0
                    if not pending:
                        break
                begin = at
                for item in pending[at : at + limit - read]:
                    at += 1
                    frame = item.frame if direct else encode(item)
                    if frame is not None:
                        parts.append(frame)
                        size += len(frame)
                        last_sent = item.sequence
                        if size >= CHUNK_BYTES:
                            break
                read += at - begin
                last_read = pending[at - 1].sequence
        except JournalError as exc:
            problem = exc
        self._pending, self._at = pending, at
        return Chunk(b"".join(parts), len(parts), read, last_read, last_sent, problem)

    def _encode(self, rec: Record) -> bytes | None:
        """The frame of a record the subscription gets, else ``None`` (with a filter)."""
        if rec.command not in _PUBLISHES:
            return None
        topic = rec.topic
        ok = self._topics.get(topic)
        if ok is None:
            ok = self._topics[topic] = bool(self._matches(topic))
        if not ok or not self._passes(rec):
            return None
        return self.run.frame(topic, rec.data, rec.sequence, rec.sow_key, rec.correlation_id)

    def _passes(self, rec: Record) -> bool:
        parser = self._parsers.get(rec.message_type)
        if parser is None:
            parser = self._parsers[rec.message_type] = self._message_type(rec.message_type)
        assert self._predicate is not None
        try:
            return bool(self._predicate(parser.parse(rec.data)))
        except BrokerError:
            return False
