"""The session's publish path: the publishes of one socket read applied in one engine step, and their acks.

:class:`PublishBatch` is the part of :class:`broker.server.session.Session` (which inherits it) that takes
the publish and delta_publish frames of one read (:data:`PLAIN_PUBLISH` asking for no ack or only those in
:data:`BATCH_ACKS`), checks entitlements and publish-store sequences, hands them to
:meth:`Engine.publish_batch <broker.engine.publish.PublishSteps.publish_batch>` and answers processed acks
per message and persisted acks conflated per batch, once the journal is durable. Publishes asking for other
acks go one at a time through :meth:`PublishBatch._publish`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from broker import speedups
from broker.config.model import DEFAULT_SEQUENCE_JUMP_LIMIT
from broker.engine.acks import PERSISTED_ONLY, ack_header, requested_acks
from broker.engine.command_options import check_command
from broker.engine.publish import DUPLICATE, PublishMessage
from broker.errors import BrokerError, CommandError
from broker.protocol import Header, encode_frame

if TYPE_CHECKING:
    from broker.engine.engine import Engine
    from broker.server.counters import BrokerCounters
    from broker.server.durability import Durability
    from broker.server.services import SessionServices

#: Commands :meth:`PublishBatch._publish_batch` applies directly, when they ask for no ack or only those in
#: :data:`BATCH_ACKS` (the ``a`` text as sent).
PLAIN_PUBLISH = frozenset({"p", "publish", "delta_publish"})
BATCH_ACKS = frozenset({"", "processed", "persisted", "processed,persisted", "persisted,processed"})
_NO_ACKS: frozenset[str] = frozenset()


def _batch_messages_python(frames: list[Any], entitled: Callable[[str, Header], Any] | None,
                           check_sequence: Callable[[Any, int], None], messages: list[PublishMessage],
                           accepted: list[Header], refused: dict[int, BrokerError]) -> bool:
    """Each frame's :data:`PublishMessage` into ``messages`` and its header into ``accepted``, or the error that
    refuses it before the engine (``entitled``, the entitlement check, ``None``: everything allowed; a sequence
    jump, :meth:`PublishBatch._check_sequence` against the highest ``s`` accepted so far in this batch, which the
    engine has not seen) into ``refused`` by position. Returns whether an accepted header asks for an ack.
    (Twin of :func:`broker.speedups.batchfields.batch_messages`.)"""
    high = 0
    acked = False
    for position, frame in enumerate(frames):
        header = frame.header
        command = header.command
        seq = header.seq
        if entitled is not None or seq:
            try:
                if entitled is not None:
                    entitled(command, header)
                if seq:
                    if not (seq <= high + 1 and high):  # one past the last: within any jump limit
                        check_sequence(seq, high)
                    if seq > high:
                        high = seq
            except BrokerError as exc:
                refused[position] = exc
                continue
        messages.append((header.topic, frame.body, command == "delta_publish", seq, header.sow_key,
                         header.correlation_id, header.expiration))
        accepted.append(header)
        if not acked and header.ack_type:
            acked = True
    return acked


def _failures_python(results: list[Any]) -> list[int]:
    """The positions of ``results`` that are not ``int`` (the engine's refusals); twin of
    :func:`broker.speedups.batchfields.failures`."""
    return [i for i, result in enumerate(results) if result.__class__ is not int]


_compiled = speedups.load("batchfields")
_batch_messages = _compiled.batch_messages if _compiled is not None else _batch_messages_python
_failures = _compiled.failures if _compiled is not None else _failures_python


class PublishBatch:
    """Publishing, for :class:`broker.server.session.Session` (which inherits it and holds the state named here)."""

    services: SessionServices
    durability: Durability
    counters: BrokerCounters
    engine: Engine
    transport: Any
    grants: Any
    name: str
    name_hash: int
    publisher_key: str
    identity_keyed: bool
    messages_in: int
    _persist_after: int

    if TYPE_CHECKING:
        def emit(self, frame: bytes, *, messages: int = 0, now: bool = False) -> None: ...

        def ack(self, request: Mapping[str, Any], acks: frozenset[str], ack_type: str, *,
                reason: str | None = None, now: bool = False, **extras: Any) -> None: ...

        def _entitled(self, command: str, header: Mapping[str, Any]) -> Mapping[str, Any]: ...

        def _failed(self, header: Mapping[str, Any], acks: frozenset[str], command: str, exc: BrokerError) -> None: ...

    def _publish_batch(self, frames: list[Any]) -> None:
        """Publishes and delta publishes of one socket read, by a logged-on client, asking for no ack or only
        processed and persisted ones: what :meth:`_dispatch` would do for each, in one engine step
        (:meth:`Engine.publish_batch`) and without the coroutine.

        Processed acks go out per message once the batch is applied; persisted acks are conflated (AMPS
        allows it: the client's publish store discards every message up to the ``s`` acknowledged): one for
        the highest ``s`` of the batch, once the journal is durable past every record of the batch (and past
        whatever this client still waits for). A message refused alone is answered alone, as today.
        """
        self.messages_in += len(frames)
        messages: list[PublishMessage] = []
        accepted: list[Header] = []
        # Refused before the engine (entitlement, sequence jump), by position in the batch: answered in order
        # with the others below, so that no persisted ack overtakes an earlier message's (see _failed).
        refused: dict[int, BrokerError] = {}
        acked = _batch_messages(frames, self._entitled if self.grants is not None else None, self._check_sequence,
                                messages, accepted, refused)
        results = self.engine.publish_batch(self, messages, self.transport.max_message_depth) if messages else []
        if not acked and not refused:  # no acks to answer (W5's publisher): only failures, answered alone
            for i in _failures(results):
                self._failed(accepted[i], _NO_ACKS, accepted[i].command, results[i])  # type: ignore[arg-type]
            return
        pairs: Any = zip(accepted, results, strict=True)
        if refused:  # back in the order the frames came
            applied = iter(pairs)
            pairs = [(frame.header, refused[n]) if n in refused else next(applied) for n, frame in enumerate(frames)]
        waiting = 0  # the journal sequence the batch's persisted ack waits for
        last: Header | None = None  # the header of the highest s acknowledged as persisted
        journal = self.durability.journal
        for header, result in pairs:
            a = header.ack_type
            if result.__class__ is not int:
                if last is not None and a and "persisted" in requested_acks(header):
                    # The successes before it first: its failed persisted ack waits for them (see _failed).
                    self._persisted_ack(waiting, last)
                    last = None
                self._failed(header, requested_acks(header) if a else _NO_ACKS, header.command, result)
                continue
            if not a:
                continue
            acks = requested_acks(header)
            if "processed" in acks:
                self.emit(encode_frame(ack_header(header, "processed")))
            if "persisted" in acks:
                if result == DUPLICATE:
                    # A re-send of a record that may be appended but not durable yet: wait for everything.
                    if journal is not None and journal.durable_sequence < journal.last_sequence:
                        result = journal.last_sequence
                    else:
                        result = 0
                if result > waiting:
                    waiting = result
                if header.cmd_id is not None:
                    self._persisted_ack(result, header)  # its own ack: a handler waits on its cid
                elif last is None or (header.seq or 0) >= (last.seq or 0):
                    last = header
        if last is not None:
            self._persisted_ack(waiting, last)

    def _persisted_ack(self, sequence: int, header: Any) -> None:
        """The persisted ack of ``header`` once the journal is durable past ``sequence`` and past every record
        this client's earlier persisted acks wait for (a later ``s`` acknowledged first would discard earlier
        messages from the client's store too soon); at once when that is already so."""
        journal = self.durability.journal
        if journal is not None:
            if sequence > self._persist_after:
                self._persist_after = sequence
            if journal.durable_sequence < self._persist_after:
                self.durability.after_durable(self._persist_after, self, header)
                return
        self.ack(header, PERSISTED_ONLY, "persisted", s=header.get("seq"))

    def _check_sequence(self, seq: Any, batch_high: int = 0) -> None:
        """Refuse a publish whose ``s`` jumps far ahead of its publisher's last one.

        De-duplication treats every later ``s`` at or below the highest seen as a re-send, so one publish
        with a huge ``s`` (a client logged on under another's name) would make the real publisher's later
        publishes be acknowledged and dropped. This holds for every publish: the last ``s`` is the highest
        the journal knows for the publisher (logged topics, across restarts) or the highest the engine
        applied in this run (every topic).

        A publisher known to neither starts from zero on an open transport: its first ``s`` may be at most
        the limit, or the official clients' publish-store numbering (milliseconds since the epoch times a
        million, :func:`is_store_clock_sequence`). An authenticated publisher's state is its own (keyed by
        identity and client name): it may start anywhere.

        Args:
            seq: The publish's ``s``.
            batch_high: The highest ``s`` of this publisher accepted earlier in the same batch (not applied yet).

        Raises:
            CommandError: the jump exceeds ``<TransactionLog><PublisherSequenceJumpLimit>`` (its default
                without a transaction log).
        """
        if not isinstance(seq, int):
            return
        txlog = self.services.config.transaction_log
        limit = txlog.sequence_jump_limit if txlog is not None else DEFAULT_SEQUENCE_JUMP_LIMIT
        if not limit:
            return
        last = self.engine.publisher_seq.get(self.publisher_key)
        journal = self.durability.journal
        if journal is not None and journal.dedup.is_known_hash(self.name_hash):
            dedup = journal.dedup
            logged = max(dedup.appended_hash(self.name_hash), dedup.last_persisted_hash(self.name_hash))
            last = logged if last is None else max(last, logged)
        if batch_high:
            last = batch_high if last is None else max(last, batch_high)
        if last is None:
            if self.identity_keyed or seq <= limit or is_store_clock_sequence(seq):
                return
            self.counters.sequence_jumps_refused += 1
            raise CommandError(
                "invalid sequence",
                f"publish sequence {seq} is the first of client name {self.name!r} and more than {limit} above "
                "zero; on an open transport a new publisher starts at most that far from zero (or at a "
                "publish-store sequence of the current time, as the official clients number them), so that "
                "no client can make another's later publishes look like duplicates. Number publishes from 1, "
                "or raise <PublisherSequenceJumpLimit> (0: no limit) if the broker lost the journal a "
                "publish store still counts on")
        if seq - last > limit:
            self.counters.sequence_jumps_refused += 1
            raise CommandError(
                "invalid sequence",
                f"publish sequence {seq} is more than {limit} above this publisher's last one ({last}); "
                "a publish store numbers publishes consecutively, so this is another client using the name "
                f"{self.name!r}, or a store that was reset (raise <PublisherSequenceJumpLimit> or wait for "
                "<InactiveClientAckExpiration> if that is intended)")

    def _publish(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        """A publish that asked for acks the batch path does not answer (received, parsed...), or that carries
        options or an ``/AMPS/`` topic (refused here, once per command: the batch path never sees them)."""
        check_command(header.get("command") or "publish", header)
        seq = header.get("seq")
        if seq:
            self._check_sequence(seq)
        outcome = self.engine.publish(self, header, body, delta=header.get("command") == "delta_publish",
                                      max_depth=self.transport.max_message_depth)
        self.ack(header, acks, "processed")
        if "persisted" in acks:
            self._persisted_after(outcome.sequence, header, acks, duplicate=outcome.duplicate)

    def _persisted_after(self, sequence: int, header: Mapping[str, Any], acks: frozenset[str], *,
                         duplicate: bool = False) -> None:
        """The persisted ack of a journaled command, once its record is durable (at once when not journaled).

        A duplicate (a re-send after reconnect) may be of a record that is appended but not durable yet (the
        journal's disk is full, or a group commit is under way): its ack waits for everything appended.
        """
        journal = self.durability.journal
        if duplicate and journal is not None and journal.durable_sequence < journal.last_sequence:
            sequence = journal.last_sequence
        elif duplicate:
            sequence = 0
        if journal is not None and (sequence or self._persist_after > journal.durable_sequence):
            self._persisted_ack(sequence, header)
        else:
            self.ack(header, acks, "persisted", s=header.get("seq"))


#: The official clients number a publish store from (milliseconds since the epoch) x 1,000,000 + 1.
STORE_SEQUENCE_PER_MS = 1_000_000
#: The earliest clock a publish-store sequence may carry: 2001-09-09 (10^12 ms), before any store in use.
STORE_CLOCK_EARLIEST_MS = 10**12
#: How far ahead of the broker's clock a publish-store sequence may be (the client's clock may run ahead).
STORE_CLOCK_AHEAD_MS = 24 * 3600 * 1000


def is_store_clock_sequence(seq: int, now: float | None = None) -> bool:
    """Whether ``seq`` looks like an official client's publish-store sequence: its clock part (``seq`` divided
    by a million, in milliseconds since the epoch) between 2001 and a day past the broker's clock.

    Args:
        seq: A publish's ``s``.
        now: Seconds since the epoch (the system clock when omitted).
    """
    now_ms = int((time.time() if now is None else now) * 1000)
    return STORE_CLOCK_EARLIEST_MS <= seq // STORE_SEQUENCE_PER_MS <= now_ms + STORE_CLOCK_AHEAD_MS
