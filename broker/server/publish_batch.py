"""A session's writes and their acks: the publish paths, and the order of its persisted acks.

A :class:`~broker.server.session.Session` owns one :class:`Publisher` and one :class:`PersistedAcks` (composed,
not inherited: each holds its own state and reaches the session only through :class:`PublishingClient`).

Which publish path runs when (this table is the rule; :meth:`broker.protocol.Connection.next_publishes` and the
session's reader apply it frame by frame):

==================================  =========================================================================
path                                runs for
==================================  =========================================================================
batch (:meth:`Publisher.publish_batch` ->  ``p``/``publish``/``delta_publish`` of a logged-on client asking for no
:meth:`Engine.publish_batch`)       ack or only those in :data:`BATCH_ACKS`, without ``options``, to a topic
                                    outside ``/AMPS/``: every such frame of one socket read, in one engine step
one at a time (:meth:`Publisher.publish`  any other publish: acks the batch does not answer (received, parsed,
-> :meth:`Engine.publish`)           stats), options, or an ``/AMPS/`` topic (refused there, once per command)
==================================  =========================================================================

Inside :meth:`Engine.publish_batch` the engine picks its own compiled runs (a plain run, a keyed run, a scan
run: :mod:`broker.engine.publish`); each gives what the general loop gives (tests/server/test_server_*_run.py).
Both paths answer processed acks per message; persisted acks go through :class:`PersistedAcks`, conflated per
batch, once the journal is durable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from broker import speedups
from broker.config.model import DEFAULT_SEQUENCE_JUMP_LIMIT
from broker.engine.acks import PERSISTED_ONLY, ack_header, requested_acks
from broker.engine.command_options import check_command
from broker.engine.delivery import Client
from broker.engine.publish import DUPLICATE, PublishMessage
from broker.errors import BrokerError, CommandError
from broker.protocol import Header, encode_frame
from broker.server.durability import AckTarget, Durability

if TYPE_CHECKING:
    from broker.server.services import SessionServices

#: Commands :meth:`Publisher.publish_batch` applies directly, when they ask for no ack or only those in
#: :data:`BATCH_ACKS` (the ``a`` text as sent).
PLAIN_PUBLISH = frozenset({"p", "publish", "delta_publish"})
BATCH_ACKS = frozenset({"", "processed", "persisted", "processed,persisted", "persisted,processed"})
_NO_ACKS: frozenset[str] = frozenset()


def _batch_messages_python(frames: list[Any], entitled: Callable[[str, Any], object] | None,
                           check_sequence: Callable[[Any, int], None], messages: list[PublishMessage],
                           accepted: list[Header], refused: dict[int, BrokerError]) -> bool:
    """Each frame's :data:`PublishMessage` into ``messages`` and its header into ``accepted``, or the error that
    refuses it before the engine (``entitled``, the entitlement check, ``None``: everything allowed; a sequence
    jump, :meth:`Publisher.check_sequence` against the highest ``s`` accepted so far in this batch, which the
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


class PublishingClient(Client, Protocol):
    """What the publish path needs of its session (:class:`~broker.server.session.Session`): the engine's
    :class:`~broker.engine.delivery.Client`, its publisher identity, its acks and its failure answers."""

    #: Whether its de-duplication key includes a proved identity.
    identity_keyed: bool
    #: Commands received (a batch counts each frame).
    messages_in: int

    def ack(self, request: Mapping[str, Any], acks: frozenset[str], ack_type: str, *,
            reason: str | None = None, now: bool = False, **extras: Any) -> None:
        """Send the ``ack_type`` ack of ``request`` if asked for."""

    def entitled(self, command: str, header: Mapping[str, Any]) -> Mapping[str, Any]:
        """Check ``command`` against the identity's grants (raises ``not entitled``)."""

    def answer_failure(self, header: Mapping[str, Any], acks: frozenset[str], command: str,
                       exc: BrokerError) -> None:
        """Count, log and answer a failed command."""


class PersistedAcks:
    """One client's persisted acks, in order: no ack for a later ``s`` goes out before the journal is durable past
    every record an earlier one waits for (the client's publish store discards every message up to the ``s`` of
    any persisted ack, failed or not).

    Args:
        client: Who the acks go to.
        durability: The journal and its syncer.
    """

    def __init__(self, client: AckTarget, durability: Durability) -> None:
        self._client = client
        self._durability = durability
        #: The journal sequence this client's latest persisted ack waits for.
        self.waits_for = 0

    def ack_after(self, sequence: int, header: Any) -> None:
        """The persisted ack of ``header`` once the journal is durable past ``sequence`` and past every record
        this client's earlier persisted acks wait for; at once when that is already so."""
        journal = self._durability.journal
        if journal is not None:
            if sequence > self.waits_for:
                self.waits_for = sequence
            if journal.durable_sequence < self.waits_for:
                self._durability.after_durable(self.waits_for, self._client, header)
                return
        self._client.ack(header, PERSISTED_ONLY, "persisted", s=header.get("seq"))

    def ack_command(self, sequence: int, header: Mapping[str, Any], acks: frozenset[str], *,
                    duplicate: bool = False) -> None:
        """The persisted ack of a journaled command, once its record is durable (at once when not journaled).

        A duplicate (a re-send after reconnect) may be of a record that is appended but not durable yet (the
        journal's disk is full, or a group commit is under way): its ack waits for everything appended.
        """
        journal = self._durability.journal
        if duplicate and journal is not None and journal.durable_sequence < journal.last_sequence:
            sequence = journal.last_sequence
        elif duplicate:
            sequence = 0
        if journal is not None and (sequence or self.waits_for > journal.durable_sequence):
            self.ack_after(sequence, header)
        else:
            self._client.ack(header, acks, "persisted", s=header.get("seq"))

    def ack_failure(self, header: Mapping[str, Any], acks: frozenset[str], reason: str, *, at_once: bool) -> None:
        """The failed persisted ack of a command: after this client's earlier messages are durable (the next
        sync), unless ``at_once`` (a refusal because the journal or the storage cannot be written: those can
        last, and the publisher must learn of them while they do)."""
        journal = self._durability.journal
        if not at_once and journal is not None and journal.durable_sequence < self.waits_for:
            self._durability.after_durable(self.waits_for, self._client, header, reason)
        else:
            self._client.ack(header, acks, "persisted", reason=reason, now=True, s=header.get("seq"))


class Publisher:
    """A session's publishes: the batch path and the one-at-a-time path (the table in the module docstring).

    Args:
        client: The session (the engine sees it as the publishing client).
        services: The broker's services (engine, journal, counters, config).
        persisted: The session's persisted-ack order.
        max_depth: The Transport's ``<MaxMessageDepth>``.
    """

    def __init__(self, client: PublishingClient, services: SessionServices, persisted: PersistedAcks,
                 max_depth: int) -> None:
        self._client = client
        self._engine = services.engine
        self._durability = services.durability
        self._counters = services.counters
        txlog = services.config.transaction_log
        #: ``<PublisherSequenceJumpLimit>`` (0: no limit).
        self._jump_limit = txlog.sequence_jump_limit if txlog is not None else DEFAULT_SEQUENCE_JUMP_LIMIT
        self._persisted = persisted
        self._max_depth = max_depth
        # Bound once: called per message.
        self._emit = client.emit
        self._answer_failure = client.answer_failure
        self._ack_after = persisted.ack_after

    def publish_batch(self, frames: list[Any]) -> None:
        """Publishes and delta publishes of one socket read, by a logged-on client, asking for no ack or only
        processed and persisted ones: what the one-at-a-time path would do for each, in one engine step
        (:meth:`Engine.publish_batch`) and without the coroutine.

        Processed acks go out per message once the batch is applied; persisted acks are conflated (AMPS
        allows it: the client's publish store discards every message up to the ``s`` acknowledged): one for
        the highest ``s`` of the batch, once the journal is durable past every record of the batch (and past
        whatever this client still waits for). A message refused alone is answered alone.
        """
        client = self._client
        client.messages_in += len(frames)
        messages: list[PublishMessage] = []
        accepted: list[Header] = []
        # Refused before the engine (entitlement, sequence jump), by position in the batch: answered in order
        # with the others below, so that no persisted ack overtakes an earlier message's (see answer_failure).
        refused: dict[int, BrokerError] = {}
        acked = _batch_messages(frames, client.entitled if client.grants is not None else None, self.check_sequence,
                                messages, accepted, refused)
        results = self._engine.publish_batch(client, messages, self._max_depth) if messages else []
        answer_failure = self._answer_failure
        if not acked and not refused:  # no acks to answer (W5's publisher): only failures, answered alone
            for i in _failures(results):  # a Header reads as a Mapping; a failure's result is its error
                answer_failure(cast("Mapping[str, Any]", accepted[i]), _NO_ACKS, accepted[i].command or "",
                               cast(BrokerError, results[i]))
            return
        pairs: Any = zip(accepted, results, strict=True)
        if refused:  # back in the order the frames came
            applied = iter(pairs)
            pairs = [(frame.header, refused[n]) if n in refused else next(applied) for n, frame in enumerate(frames)]
        waiting = 0  # the journal sequence the batch's persisted ack waits for
        last: Header | None = None  # the header of the highest s acknowledged as persisted
        journal = self._durability.journal
        emit = self._emit
        ack_after = self._ack_after
        for header, result in pairs:
            a = header.ack_type
            if result.__class__ is not int:
                if last is not None and a and "persisted" in requested_acks(header):
                    # The successes before it first: its failed persisted ack waits for them (see answer_failure).
                    ack_after(waiting, last)
                    last = None
                answer_failure(header, requested_acks(header) if a else _NO_ACKS, header.command, result)
                continue
            if not a:
                continue
            acks = requested_acks(header)
            if "processed" in acks:
                emit(encode_frame(ack_header(header, "processed")))
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
                    ack_after(result, header)  # its own ack: a handler waits on its cid
                elif last is None or (header.seq or 0) >= (last.seq or 0):
                    last = header
        if last is not None:
            ack_after(waiting, last)

    def check_sequence(self, seq: Any, batch_high: int = 0) -> None:
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
        limit = self._jump_limit
        if not limit:
            return
        client = self._client
        last = self._engine.publisher_seq.get(client.publisher_key)
        journal = self._durability.journal
        if journal is not None and journal.dedup.is_known_hash(client.name_hash):
            dedup = journal.dedup
            logged = max(dedup.appended_hash(client.name_hash), dedup.last_persisted_hash(client.name_hash))
            last = logged if last is None else max(last, logged)
        if batch_high:
            last = batch_high if last is None else max(last, batch_high)
        if last is None:
            if client.identity_keyed or seq <= limit or is_store_clock_sequence(seq):
                return
            self._counters.sequence_jumps_refused += 1
            raise CommandError(
                "invalid sequence",
                f"publish sequence {seq} is the first of client name {client.name!r} and more than {limit} above "
                "zero; on an open transport a new publisher starts at most that far from zero (or at a "
                "publish-store sequence of the current time, as the official clients number them), so that "
                "no client can make another's later publishes look like duplicates. Number publishes from 1, "
                "or raise <PublisherSequenceJumpLimit> (0: no limit) if the broker lost the journal a "
                "publish store still counts on")
        if seq - last > limit:
            self._counters.sequence_jumps_refused += 1
            raise CommandError(
                "invalid sequence",
                f"publish sequence {seq} is more than {limit} above this publisher's last one ({last}); "
                "a publish store numbers publishes consecutively, so this is another client using the name "
                f"{client.name!r}, or a store that was reset (raise <PublisherSequenceJumpLimit> or wait for "
                "<InactiveClientAckExpiration> if that is intended)")

    def publish(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        """A publish that asked for acks the batch path does not answer (received, parsed...), or that carries
        options or an ``/AMPS/`` topic (refused here, once per command: the batch path never sees them)."""
        check_command(header.get("command") or "publish", header)
        seq = header.get("seq")
        if seq:
            self.check_sequence(seq)
        outcome = self._engine.publish(self._client, header, body, delta=header.get("command") == "delta_publish",
                                       max_depth=self._max_depth)
        self._client.ack(header, acks, "processed")
        if "persisted" in acks:
            self._persisted.ack_command(outcome.sequence, header, acks, duplicate=outcome.duplicate)


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
