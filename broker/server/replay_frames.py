"""A bookmark replay's journal records turned into delivery frames in a worker thread, a chunk at a time.

The worker reads runs of records (:meth:`~broker.txlog.reader.JournalReader.runs`), keeps those the subscription gets (published to a matching topic, passing its
filter) and encodes their frames into one buffer (:class:`~broker.protocol.DeliveryRun`); the event loop
then queues the whole chunk with one ``emit``. So the loop spends a few microseconds per chunk instead of a
frame encode and a queue operation per record, and the reading, filtering and encoding (most of a replay's
work) happen off the loop. The first chunk is small, so the first message leaves within milliseconds of the
subscription even when the replay is long; later ones are larger, so thread hand-offs are rare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError, JournalError
from broker.protocol import DeliveryRun
from broker.txlog import Command, Record

#: Records the first chunk reads: small, so the first frames go out at once.
FIRST_CHUNK_RECORDS = 64
#: Records a later chunk reads at most (matching or not: a filter that matches nothing still returns).
CHUNK_RECORDS = 8192
#: Frame bytes after which a chunk ends early (the outbound buffer's watermark is 2 MiB).
CHUNK_BYTES = 512 * 1024

_PUBLISHES = frozenset((Command.PUBLISH, Command.DELTA_PUBLISH))


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
        #: The run being encoded, and how far.
        self._pending: list[Record] = []
        self._at = 0

    def take(self, runs: Iterator[list[Record]]) -> Chunk:
        """Read the next chunk from ``runs`` (:meth:`~broker.txlog.reader.JournalReader.runs`; what a chunk
        leaves of a run is kept for the next) and encode what the subscription gets."""
        limit = FIRST_CHUNK_RECORDS if self._first else CHUNK_RECORDS
        self._first = False
        run = self.run
        add = run.add
        topics = self._topics
        predicate = self._predicate
        publishes = _PUBLISHES
        pending, at = self._pending, self._at
        read = last_read = last_sent = 0
        problem: JournalError | None = None
        try:
            while read < limit and run.bytes < CHUNK_BYTES:
                if at >= len(pending):
                    pending, at = next(runs, []), 0
                    if not pending:
                        break
                for rec in pending[at : at + limit - read]:
                    at += 1
                    read += 1
                    last_read = rec.sequence
                    if rec.command in publishes:
                        topic = rec.topic
                        ok = topics.get(topic)
                        if ok is None:
                            ok = topics[topic] = bool(self._matches(topic))
                        if ok and (predicate is None or self._passes(rec)):
                            add(topic, rec.data, last_read, rec.sow_key, rec.correlation_id)
                            last_sent = last_read
                            if run.bytes >= CHUNK_BYTES:
                                break
        except JournalError as exc:
            problem = exc
        self._pending, self._at = pending, at
        sent = run.count
        return Chunk(run.take(), sent, read, last_read, last_sent, problem)

    def _passes(self, rec: Record) -> bool:
        parser = self._parsers.get(rec.message_type)
        if parser is None:
            parser = self._parsers[rec.message_type] = self._message_type(rec.message_type)
        assert self._predicate is not None
        try:
            return bool(self._predicate(parser.parse(rec.data)))
        except BrokerError:
            return False
