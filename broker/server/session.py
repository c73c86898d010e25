"""One connected client: logon, command dispatch, acks, query streaming, heartbeats.

The reader task decodes frames (sans-IO :mod:`broker.protocol`) and applies each command in order; the
writer task drains the bounded outbound buffer. An error in one command answers that command and the
connection carries on; a broken byte stream closes this connection only.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from time import perf_counter
from typing import Any, cast

import trio

from broker.engine.acks import (
    JOURNAL_FULL_REASON,
    ack_header,
    requested_acks,
)
from broker.engine.command_options import INVALID_OPTIONS, check_command
from broker.engine.topics import is_regex_topic
from broker.errors import BrokerError, CommandError, NotAmpsError, ProtocolError, StorageError
from broker.protocol import CLOSED, NEED_DATA, Connection, encode_frame
from broker.protocol._connection import LargeFrame
from broker.protocol.constants import RESERVED_TOPIC_PREFIX
from broker.security import AuthenticationRefused, Identity, LogonRequest
from broker.server.outbound import Flusher, LargeBody, Outbound, SlowClient
from broker.server.publish_batch import BATCH_ACKS, PLAIN_PUBLISH, PersistedAcks, Publisher
from broker.server.replay import start_bookmark_subscription
from broker.server.services import SessionServices
from broker.server.session_queries import QueryCommands
from broker.server.sockio import SocketInput, TurnBudget
from broker.server.statistics_assembly import client_row
from broker.stats.snapshot import ClientStats
from broker.txlog.bookmarks import client_name_hash
from broker.txlog.dedup import publisher_key

log = logging.getLogger("broker.session")

#: The most bytes one socket read takes (its frames are applied together).
READ_SIZE = 65536
#: How long the writes a publisher's publishes cause (deliveries, acks) may be held while its socket keeps holding
#: more input at once: the publishes of each further read are applied as they come (one storage write and one
#: journal append per read, as always), and everything they reached is written together when the socket is empty
#: or this time is up. A streaming publisher's reads hold a few messages each, and writing after every read cost
#: every subscriber a write system call and a wake-up per few messages. A read holding a single publish starts no
#: hold (a paced publisher's reads do: reading on would only find the socket empty), and a lone message is never
#: held. See docs/bench.md, "Writes held while a publisher streams".
HOLD_WRITES_SECONDS = 0.0005
class Session:
    """A client connection.

    Args:
        stream: The connected socket stream.
        services: What of its broker the connection uses (:class:`~broker.server.services.SessionServices`).
        transport: The transport configuration the client connected through.
        remote: The peer address for logs and statistics.
    """

    def __init__(self, stream: trio.abc.Stream, services: SessionServices, transport: Any, remote: str) -> None:
        self.id = f"client-{next(services.ids)}"
        self.stream = stream
        self.services = services
        self.engine = services.engine
        self.durability = services.durability
        self.clients = services.clients
        self.counters = services.counters
        self.security = services.security
        self.transport = transport
        self.remote = remote
        # Before logon only a small frame is read (<MaxLogonSize>): a peer that has not proved who it is does not get
        # to make the broker buffer and parse megabytes; the reader lifts the bound once the client logged on.
        self._logon_bound = min(getattr(transport, "max_logon_size", transport.max_message_size),
                                transport.max_message_size)
        self.conn = Connection(max_frame_size=self._logon_bound, max_name="the Transport's <MaxLogonSize> (the "
                               "largest frame accepted before a logon)" if self._logon_bound < transport.max_message_size
                               else "the Transport's <MaxMessageSize>", large_frames=True)
        #: This connection's work per loop turn (a websocket stream's own, shared: it parses the WebSocket frames).
        self.turn: TurnBudget = getattr(stream, "turn", None) or TurnBudget()
        self.outbound = Outbound(transport.client_buffer, services.clients.memory)
        #: Bytes of the broker-wide budget reserved for the frame being received.
        self._reserved_in = 0
        self.name = ""
        self.name_hash = 0
        #: The de-duplication key (:func:`publisher_key`: the client name, and the user when authenticated);
        #: ``name_hash`` is its hash, which the journal records carry.
        self.publisher_key = ""
        #: Whether the key includes a proved identity (the logon was authenticated).
        self.identity_keyed = False
        self.logged_on = False
        self.message_type = services.message_type(transport.message_type or "json")
        self.connected_at = time.time()
        self.messages_in = 0
        self.messages_out = 0
        self.bytes_in = 0
        #: The client's socket as the reader reads it (``None`` until it starts, and on other streams: TLS, tests').
        self.input: SocketInput | None = None
        self._held: list[bytes | LargeBody] | None = None
        #: Bytes in ``_held``: they count against the outbound bound like queued bytes.
        self._held_bytes = 0
        self._hold_depth = 0
        self._last_heard = trio.current_time()
        self._heartbeat_interval: float | None = None
        self._nursery: trio.Nursery | None = None
        self.closed_reason = ""
        #: The transport's authentication and entitlement modules.
        self._authenticator, self._entitlements = services.security.for_transport(transport.name)
        #: Who the logon proved to be (``None`` before a successful logon).
        self.identity: Identity | None = None
        #: What the identity may do; ``None``: everything (no check on any command).
        self.grants: Any = None
        self.logons_refused = 0
        #: Refused commands by kind, for audit-line rate limiting.
        self._refused: dict[str, int] = {}
        #: The broker is shutting down (:meth:`drain`): no more commands are read.
        self._draining = False
        #: The reader waits for input (no command of this client is under way).
        self._reading = False
        #: The drain's last step is under way (:meth:`_finish_draining`).
        self._finishing = False
        #: This client's persisted acks, in order, and its publish paths (objects it owns).
        self.persisted = PersistedAcks(self, services.durability)
        self.publisher = Publisher(self, services, self.persisted, transport.max_message_depth)
        self._publish_batch = self.publisher.publish_batch  # bound once: called per read
        self.queries = QueryCommands(self, services)

    # -- outbound ------------------------------------------------------------------------------------
    def emit(self, frame: bytes | LargeBody, *, messages: int = 0, now: bool = False) -> None:
        """Queue encoded frames for this client: the one way out of the session.

        Everything a client is sent comes through here: the engine's deliveries (formatted by
        :mod:`broker.engine.delivery`, ``messages`` of them in ``frame``), query results, replayed
        messages, acks (:meth:`ack`) and heartbeats. ``messages`` counts toward the client's messages out.

        While a query streams its results, live messages are held back until it ends (no gap, no
        reordering); ``now`` puts the frame ahead of them (the query's results, its acks and group
        frames). A client past its outbound bound is offlined as slow; past the broker-wide budget, the
        largest consumers are shed.
        """
        self.messages_out += messages
        if self._held is not None and not now:
            self._hold(frame)
            return
        outbound = self.outbound
        if outbound.put(frame):
            if outbound.overflowed:
                self.offline()
            elif outbound.budget.over:
                self.clients.shed_consumers()

    def oof_entitled(self, topic: str, body: bytes, reason: str | None) -> tuple[bytes, str | None]:
        """An out-of-focus notice whose new state is outside this identity's entitlement filter goes out
        without the data and with reason ``entitlement`` (AMPS's), so the state it may not see never leaks
        (asked by :func:`broker.engine.delivery.deliver` when the client has entitlements)."""
        text = self.grants.read_filter(topic)
        if text is None:
            return body, reason
        try:
            predicate = self.engine.compile_filter(text)
            ok = predicate is None or bool(predicate(self.message_type_of(topic).parse(body)))
        except BrokerError:
            ok = False
        return (body, reason) if ok else (b"", "entitlement")

    def message_type_of(self, topic: str) -> Any:
        """The message type of ``topic``: its SOW topic's, else the session's."""
        sow = self.engine.sow_topics.get(topic)
        return sow.message_type if sow is not None else self.message_type

    def _hold(self, frame: bytes | LargeBody) -> None:
        """Keep a live message back until the query streaming now ends (no gap, no reordering).

        Held bytes count against the client's outbound bound: a client that cannot take a snapshot
        and the updates published meanwhile within its MessageMemoryLimit is offlined as slow, rather
        than holding an unbounded backlog in the broker.
        """
        assert self._held is not None
        self._held.append(frame)
        self._held_bytes += len(frame)
        if self._held_bytes + self.outbound.size > self.outbound.limit:
            self.offline(held=self._held_bytes)

    def hold_live(self) -> None:
        """Hold live messages back (:meth:`emit` without ``now``) until :meth:`release_live`: a query streams its
        results first. Holds nest."""
        if self._held is None:
            self._held = []
        self._hold_depth += 1

    def release_live(self) -> None:
        """End a hold; once every hold ended, send what was held, in order."""
        self._hold_depth -= 1
        if self._hold_depth == 0:
            held, self._held = self._held, None
            self._held_bytes = 0
            for frame in held or ():
                self.emit(frame, now=True)

    def spawn(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` as a task of this session (ends with the connection)."""
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    def offline(self, held: int = 0, total: int = 0, held_during: str = "a query streamed") -> None:
        """Disconnect a slow client: its outbound bound was exceeded, or (``total``) the broker-wide
        ``<TotalMessageMemoryLimit>`` was and it is the largest consumer. ``held`` bytes of live messages
        were held meanwhile, ``held_during`` what (for the log line)."""
        if not self.closed_reason:
            self.closed_reason = "slow client"
            self.counters.slow_client_disconnects += 1
            if total:
                log.warning("%s (%s) disconnected: the largest consumer (%d bytes queued) while client buffers "
                            "exceeded the broker-wide TotalMessageMemoryLimit of %d bytes", self.id, self.name,
                            self.outbound.held, total)
            else:
                log.warning("%s (%s) disconnected: outbound buffer exceeded %d bytes%s", self.id, self.name,
                            self.outbound.limit,
                            f" ({held} bytes of them live messages held while {held_during})" if held else "")
            self.outbound.discard()
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()

    def ack(self, request: Mapping[str, Any], acks: frozenset[str], ack_type: str, *,
            reason: str | None = None, now: bool = False, **extras: Any) -> None:
        """:meth:`emit` the ``ack_type`` ack if the request asked for it."""
        if ack_type in acks:
            self.emit(encode_frame(ack_header(request, ack_type, reason=reason, **extras)), now=now)

    # -- lifecycle -----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the client until it disconnects, breaks the protocol, or is offlined."""
        self.clients.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                if self.transport.logon_timeout > 0:
                    nursery.start_soon(self._logon_deadline, self.transport.logon_timeout)
                if self.transport.idle_timeout > 0:
                    nursery.start_soon(self._idle_deadline, self.transport.idle_timeout)
                await self._reader()
                if self._draining and not self.closed_reason:
                    await self._finish_draining()
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.clients.remove(self, logged_on=self.logged_on)  # its name its user's for the de-duplication window
            self.engine.disconnect(self)
            self.counters.client_disconnects += 1
            self.counters.bytes_out_closed += self.outbound.bytes_out  # totals never go down
            self.outbound.discard()
            self.clients.memory.input -= self._reserved_in
            self._reserved_in = 0
            closing = getattr(self.stream, "closing", None)
            if closing is not None and self.closed_reason:
                closing(self.closed_reason, going_away=self._draining)
            with trio.move_on_after(1) as cs:
                cs.shield = True
                if self._draining:
                    await self._half_close()
                await trio.aclose_forcefully(self.stream)
            log.info("%s %s (%s) disconnected%s", self.id, self.name or "-", self.remote,
                     f": {self.closed_reason}" if self.closed_reason else "")

    def drain(self) -> None:
        """The broker is shutting down: read no more commands. Those under way finish; then (in :meth:`run`) the
        persisted acks this client waits for go out with the next journal sync, what is queued is written, and
        the connection closes with the reason :data:`SHUTDOWN_REASON` (a WebSocket client gets it in the close
        frame; a TCP client sees the end of the stream after its last ack). Called again until it closed."""
        self._draining = True
        if not self._reading or self.outbound.held:
            return  # a command is under way (the reader stops after it), or the writer may be waiting on the socket
        if self.input is not None:
            # A plain socket: wake the reader (ClosedResourceError; nothing read is lost), run() finishes.
            trio.lowlevel.notify_closing(self.input.fd)
        elif not self._finishing and self._nursery is not None:
            # A WebSocket or TLS stream reads through its own layer, which would take a woken read for the peer
            # gone: finish beside the waiting reader (close() then cancels it).
            self._nursery.start_soon(self._finish_draining)

    async def _finish_draining(self) -> None:
        """After the last command of a draining session: its persisted acks, its queue, then close."""
        self._finishing = True
        await self.durability.wait_durable()  # the syncer sends the acks waiting for these records first
        while self.outbound.held and not self.outbound.closed:
            await self.outbound.wait_below(0)
            if self.outbound.held:
                await trio.sleep(0.005)  # the last batch is being written
        self.close(SHUTDOWN_REASON)

    async def _half_close(self) -> None:
        """End a drained TCP connection cleanly: the end of the stream after everything written, then what the
        client still sends is read and dropped until it closes too (a close with unread input would reset the
        connection, and the client could lose the acks in flight)."""
        sock = getattr(self.stream, "socket", None)
        if sock is None:
            return
        try:
            sock.shutdown(socket.SHUT_WR)
            while await self.stream.receive_some(READ_SIZE):
                pass
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def close(self, reason: str) -> bool:
        """Disconnect this client (its tasks are cancelled; ``run`` cleans up), giving ``reason`` in the log.

        Returns:
            Whether this call closed it (``False``: it was closing already), so a caller counts each
            disconnect once under its own :class:`~broker.server.counters.BrokerCounters` field.
        """
        if self.closed_reason:
            return False
        self.closed_reason = reason
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        return True

    async def _logon_deadline(self, seconds: float) -> None:
        """Close the connection if it has not logged on ``seconds`` after connecting (``<LogonTimeout>``)."""
        await trio.sleep(seconds)
        if not self.logged_on:
            log.warning("%s (%s) closed: no logon within %gs of connecting (the Transport's <LogonTimeout>)",
                        self.id, self.remote, seconds)
            if self.close(f"no logon within {seconds:g}s"):
                self.counters.logon_timeouts += 1

    async def _idle_deadline(self, seconds: float) -> None:
        """Close the connection once nothing arrived from it for ``seconds`` (``<IdleTimeout>``).

        Any byte counts, heartbeats included: a client that heartbeats more often than this stays. On a
        websocket transport a WebSocket ping or pong counts too (the stream's ``last_heard``).
        """
        while True:
            quiet = trio.current_time() - max(self._last_heard, getattr(self.stream, "last_heard", 0.0))
            if quiet >= seconds:
                log.warning("%s %s (%s) closed: nothing received for %gs (the Transport's <IdleTimeout>)",
                            self.id, self.name or "-", self.remote, seconds)
                if self.close(f"idle for {seconds:g}s"):
                    self.counters.idle_timeouts += 1
                return
            await trio.sleep(seconds - quiet)

    async def _writer(self) -> None:
        try:
            await self.outbound.write_to(self.stream)
        except SlowClient:
            self.offline()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()

    async def _reader(self) -> None:
        source = self.input = SocketInput.of(self.stream, READ_SIZE)
        flusher = Flusher.current() if source is not None else None
        while True:
            if self._draining:
                return
            self._reading = True
            try:
                data = await (source.read() if source is not None else self.stream.receive_some(READ_SIZE))
                if source is not None:
                    self.turn.yielded()  # SocketInput.read always yields
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            finally:
                self._reading = False
            if not data:
                return
            self._count_input(data)
            hold_end = 0.0  # writes are held (HOLD_WRITES_SECONDS) until then, while reads find more input
            run = 0  # publishes applied since this read: a streaming client's input is gathered (SocketInput.ran)
            plain: Any = None  # the last header found to take the batch path (a publisher's frames share one)
            # The publishes of one read are applied together (Engine.publish_batch), before the next other
            # command: a client's commands stay in order.
            batch: list[Any] = []
            conn = self.conn
            try:
                conn.receive_data(data)
                while True:
                    if self.logged_on:
                        # A publisher's usual frames (remembered headers taking the batch path), all of the read
                        # in one call; the frame that ends the run (or a first one) comes from next_event below.
                        plain = conn.next_publishes(batch, plain, PLAIN_PUBLISH, BATCH_ACKS)
                    frame = conn.next_event()
                    if frame is NEED_DATA:
                        if batch:
                            # Held (written below, once the socket is empty) unless one publish came alone: a
                            # paced publisher, nothing to gather writes over.
                            hold = flusher is not None and (hold_end > 0 or len(batch) > 1)
                            self._apply_batch(batch, flusher, hold=hold)
                            if hold:
                                hold_end = hold_end or perf_counter() + HOLD_WRITES_SECONDS
                            run += len(batch)
                            batch = []
                        if not self._reserve_input():
                            return
                        if hold_end:
                            assert source is not None and flusher is not None  # writes are held on sockets only
                            more = source.read_waiting() if perf_counter() < hold_end else b""
                            if more:
                                self._count_input(more)
                                conn.receive_data(more)
                                continue
                            hold_end = 0.0
                            flusher.flush()
                        if source is not None:  # a publisher waiting for acks is not kept waiting for more input
                            source.ran(run if plain is None or not plain.ack_type else 0)
                        break
                    if frame is CLOSED:
                        return
                    if isinstance(frame, LargeFrame):  # its body joined in a worker thread (bytes.join releases the GIL)
                        frame = await trio.to_thread.run_sync(frame.join)
                    header = frame.header
                    if header is plain or (header.command in PLAIN_PUBLISH and self.logged_on and (
                            header.ack_type or "") in BATCH_ACKS and header.options is None
                            and not (header.topic or "").startswith(RESERVED_TOPIC_PREFIX)):
                        plain = header
                        batch.append(frame)  # the hot path, without awaiting
                        continue
                    if batch:
                        self._apply_batch(batch, flusher)
                        run += len(batch)
                        batch = []
                    elif hold_end:  # what earlier reads' publishes reached goes out before this command runs
                        assert flusher is not None
                        flusher.flush()
                    hold_end = 0.0
                    await self._dispatch(cast("Mapping[str, Any]", header), bytes(frame.body))  # a Header reads as one
                    if self._logon_bound and self.logged_on:
                        self._logon_bound = 0
                        conn.limit(self.transport.max_message_size, "the Transport's <MaxMessageSize>")
                        if (lift := getattr(self.stream, "logged_on", None)) is not None:
                            lift()  # a websocket stream's own bound on messages
                    if self.turn.spend():  # thousands of small commands in one read: let other clients run
                        await self.turn.pace()
            except NotAmpsError as exc:
                self.counters.protocol_errors += 1
                self.closed_reason = "not an AMPS client"
                log.warning("%s (%s) closed: %s; %s", self.id, self.remote, exc, self.services.websocket_hint())
                return
            except ProtocolError as exc:
                self.counters.protocol_errors += 1
                self.closed_reason = f"protocol error: {exc}"
                log.warning("%s (%s) sent a broken frame, closing: %s", self.id, self.remote, exc)
                return
            finally:
                if batch:  # the frames before a broken one, or before the end of the stream
                    self._apply_batch(batch, flusher)
                elif hold_end:
                    assert flusher is not None
                    flusher.flush()

    def _count_input(self, data: bytes | bytearray) -> None:
        self.bytes_in += len(data)
        self.counters.bytes_in += len(data)
        self._last_heard = trio.current_time()

    def _apply_batch(self, batch: list[Any], flusher: Flusher | None, *, hold: bool = False) -> None:
        """:meth:`_publish_batch`, then the outbound buffers it reached (acks, deliveries) written by this task
        at once: one round of the :class:`Flusher` without waking it.

        Args:
            hold: Leave the writing to the caller's ``flusher.flush()``: it reads on what the socket already holds
                and applies it first, without yielding (HOLD_WRITES_SECONDS).
        """
        if flusher is None:
            self._publish_batch(batch)
            return
        flusher.deferred = True
        try:
            self._publish_batch(batch)
        finally:
            flusher.deferred = False
            if not hold:
                flusher.flush()

    def _reserve_input(self) -> bool:
        """Count the frame being received against the broker-wide budget; ``False``: it does not fit and
        the connection is to be closed (refused before its payload is buffered)."""
        need = self.conn.pending_frame_size()
        reserved = self._reserved_in
        if need == reserved:
            return True
        budget = self.clients.memory
        # Only a logged-on client's frame may shed consumers to make room: before logon a peer could declare
        # frame after frame (reserved at their declared size) and push others out without sending a payload.
        if need > reserved and not (self.clients.make_room(need - reserved) if self.logged_on
                                    else budget.fits(need - reserved)):
            budget.refused_frames += 1
            self.closed_reason = (f"a frame of {need} bytes does not fit the broker-wide TotalMessageMemoryLimit "
                                  f"of {budget.limit} bytes")
            log.warning("%s (%s) closed: it started a frame of %d bytes while client buffers hold %d of the "
                        "broker-wide TotalMessageMemoryLimit of %d bytes", self.id, self.remote, need,
                        budget.input + budget.output, budget.limit)
            return False
        budget.input += need - reserved
        self._reserved_in = need
        return True

    # -- dispatch ------------------------------------------------------------------------------------
    async def _dispatch(self, header: Mapping[str, Any], body: bytes) -> None:
        command = header.get("command") or ""
        acks = requested_acks(header)
        self.messages_in += 1
        self.ack(header, acks, "received")
        try:
            if command == "logon":
                await self._logon(header, acks)
                return
            if not self.logged_on:
                raise CommandError("logon required", f"{command!r} before logon")
            handler = _HANDLERS.get(command)
            awaited = _AWAITING_HANDLERS.get(command) if handler is None else None
            if handler is None and awaited is None:
                raise CommandError("invalid command", f"unknown command {command!r}")
            if self.grants is not None:
                header = self.entitled(command, header)
            self.ack(header, acks, "parsed")
            text = header.get("filter")
            if text and self.engine.needs_compiling(text):
                # A long filter compiles in a worker thread; this client's later commands wait for this
                # one (the reader awaits each dispatch), so its acks and results stay in order.
                compiled = await trio.to_thread.run_sync(self.engine.compile_uncached, text,
                                                         limiter=self.services.filter_compile_limiter)
                self.engine.keep_filter(text, compiled)
            if handler is not None:
                handler(self, header, body, acks)
            else:
                assert awaited is not None
                await awaited(self, header, body, acks)
        except BrokerError as exc:
            self.answer_failure(header, acks, command, exc)

    def answer_failure(self, header: Mapping[str, Any], acks: frozenset[str], command: str, exc: BrokerError) -> None:
        """Count and log a failed command, and answer with the failure acks it asked for.

        Every failure answers the processed ack and the persisted one (with the publish-store ``s``, so the
        client's store hands the message to its failed-write handler) and the stats ack that were asked for.
        The failed persisted ack waits until this client's earlier messages are durable (the client's store
        discards every message up to that ``s``), except for a refusal because the journal or the storage
        cannot be written (a full disk), which is answered at once.
        Publishes refused because the journal or the SOW storage cannot be written are counted by reason
        and logged in summary (:class:`~broker.server.refusal_log.RefusalLog`), not one line each: a publish storm must not become a
        log storm.
        """
        self.counters.commands_failed += 1
        refused = REFUSED_REASONS.get(exc.reason) if command in PLAIN_PUBLISH or command == "sow_delete" else None
        if refused is not None:
            if refused == "journal":
                self.counters.publishes_refused_journal += 1
            else:
                self.counters.publishes_refused_storage += 1
            self.services.refusals.refused(refused, self.id, self.name, command, exc)
        elif command in PLAIN_PUBLISH and exc.reason in _CHECKED_REASONS:
            # A publisher sending options or to an /AMPS/ topic is refused per message: summarised, not a log storm.
            self.services.refusals.refused("checked", self.id, self.name, command, exc)
        elif isinstance(exc, CommandError):
            log.info("%s (%s): %s failed: %s", self.id, self.name, command or "command", exc.detail)
        else:
            log.error("%s (%s): %s failed: %s", self.id, self.name, command or "command", exc)
        if "processed" in acks:
            self.ack(header, acks, "processed", reason=exc.reason, now=True)
        if "persisted" in acks:
            # After this client's earlier messages are durable, unless the journal or the storage cannot be written.
            self.persisted.ack_failure(header, acks, exc.reason, at_once=refused is not None)
        if "stats" in acks:
            self.ack(header, acks, "stats", reason=exc.reason, now=True)

    # -- security ------------------------------------------------------------------------------------
    def entitled(self, command: str, header: Mapping[str, Any]) -> Mapping[str, Any]:
        """Check ``command`` against the identity's grants; returns the header to run it with (a read of a
        topic with an entitlement filter gets that filter ANDed with its own).

        Raises:
            CommandError: ``not entitled`` (the official client raises NotEntitledException).
        """
        grants = self.grants
        topic = header.get("topic")
        if not isinstance(topic, str) or not topic:
            return header  # the handler reports the missing topic
        if command in _WRITES:
            if not grants.can_write(topic):
                self._refuse("write", topic, f"{command} to {topic!r}")
            return header
        if command not in _READS:
            return header
        bookmark = header.get("bookmark")
        # A bookmark other than "now" reads the past: a journal replay, or a historical SOW query.
        if bookmark and str(bookmark) != _BOOKMARK_NOW and (is_regex_topic(topic) or not grants.can_replay(topic)):
            self._refuse("replay", topic, f"{command} of {topic!r} from bookmark {str(bookmark)[:64]!r}")
        if is_regex_topic(topic):
            # A plain subscription to a regex reaches only the topics the identity reads without a filter
            # (_readable_unfiltered guards it); a query or replay over a regex needs read on everything.
            plain = command in ("subscribe", "delta_subscribe") and not bookmark and not self.services.replays.get(
                self, header.get("sub_id"))
            if not grants.reads_everything() and not plain:
                self._refuse("read", topic, f"{command} of the regular expression {topic!r} (an identity with "
                             "per-topic entitlements queries topics by name)")
            return header
        if not grants.can_read(topic):
            self._refuse("read", topic, f"{command} of {topic!r}")
        allowed = grants.read_filter(topic)
        if allowed is None:
            return header
        own = header.get("filter")
        if own:
            if not isinstance(own, str):
                raise CommandError("bad filter", f"the filter is {type(own).__name__}, not text")
            self.engine.compile_filter(own)  # a filter must stand on its own before it is combined
            combined = f"({allowed}) AND ({own})"
        else:
            combined = allowed
        replace = getattr(header, "replace", None)
        return replace(filter=combined) if replace is not None else {**header, "filter": combined}

    def _readable_unfiltered(self, topic: str) -> bool:
        """Whether a regex subscription may deliver ``topic``: readable, and without an entitlement filter
        (a filtered topic is subscribed to by name, where its filter applies)."""
        grants = self.grants
        return grants is None or (grants.can_read(topic) and grants.read_filter(topic) is None)

    def _refuse(self, what: str, topic: str, detail: str) -> None:
        """Audit and refuse a command (the audit line is rate-limited per client and kind).

        Raises:
            CommandError: always, ``not entitled``.
        """
        count = self._refused[what] = self._refused.get(what, 0) + 1
        security = self.security
        if count <= 10 or count % 1000 == 0:
            more = f" ({count} such refusals on this connection)" if count > 10 else ""
            security.refused(what, client=self.name, remote=self.remote,
                             user=self.identity.user if self.identity else None, reason=f"{detail}{more}")
        else:
            security.count_refusal(what)
        raise CommandError("not entitled", f"{self.identity.user if self.identity else '-'} may not {detail}")

    async def _logon(self, header: Mapping[str, Any], acks: frozenset[str]) -> None:
        request = LogonRequest(
            user=_text_field(header.get("user_id")), password=_text_field(header.get("password")),
            client_name=_text_field(header.get("client_name")), remote=self.remote, transport=self.transport.name)
        checked = self._authenticator.checks_credentials  # False: refused without verifying the password
        try:
            for name, value in (("user_id", header.get("user_id")), ("pw", header.get("password")),
                                ("client_name", header.get("client_name"))):
                if value is not None and not isinstance(value, str):
                    raise AuthenticationRefused(f"{name} is a {type(value).__name__}, not text")
            if request.client_name is not None and len(request.client_name) > MAX_CLIENT_NAME:
                raise AuthenticationRefused(f"client_name is longer than {MAX_CLIENT_NAME} characters")
            if request.client_name is not None and "\x00" in request.client_name:
                raise AuthenticationRefused("client_name contains a NUL character")
            host = self.remote.rpartition(":")[0]
            security = self.security
            if checked and (wait := security.blocked_for(request.user, host)) > 0:
                checked = False
                raise AuthenticationRefused(f"too many refused logons for this user from {host}; refused without "
                                            f"checking for {wait:.0f}s more (other users are not affected)")
            identity = await security.authenticate(self._authenticator, request)
            grants = self._entitlements.grants(identity)
        except AuthenticationRefused as exc:
            if self._authenticator.checks_credentials:
                self.security.logon_refused(request.user, self.remote.rpartition(":")[0], checked=checked)
            if self._logon_refused(header, acks, request, str(exc)):
                await self._flush_and_close()
            return
        if self._authenticator.checks_credentials:
            self.security.logon_accepted(request.user, self.remote.rpartition(":")[0])
        if taken := self._name_taken(header.get("client_name") or self.id, identity):
            if self._logon_refused(header, acks, request, taken, failure=NAME_IN_USE):
                await self._flush_and_close()
            return
        self.identity = identity
        self.grants = grants
        self._accept_logon(header, acks)

    def _name_taken(self, name: str, identity: Identity) -> str:
        """Why this logon may not use its client name (another authenticated user holds it, or held it within
        the de-duplication window: the name's publishes and bookmarks are theirs); empty when it may, or when
        ``<AllowClientNameTakeover>`` allows a takeover."""
        if not self._authenticator.checks_credentials or self.services.config.allow_client_name_takeover:
            return ""
        holder = self.clients.names.owner(name, identity.user)
        if holder is None:
            return ""
        return (f"client name {name!r} belongs to user {holder!r} (connected, or within the de-duplication "
                "window <InactiveClientAckExpiration>); use another client name, or set "
                "<AllowClientNameTakeover>true</AllowClientNameTakeover> to let another user take it over")

    def _logon_refused(self, header: Mapping[str, Any], acks: frozenset[str], request: LogonRequest,
                       reason: str, *, failure: str = "") -> bool:
        """Answer a refused logon with AMPS's failure: ``failure`` (the client raises NameInUseException for
        :data:`NAME_IN_USE`), else :data:`AUTHENTICATION_FAILURE` (AuthenticationException).

        Returns:
            Whether the session must now be closed (:meth:`_flush_and_close`, so the failure ack goes out
            first): one that was logged on, or one after :data:`MAX_LOGON_ATTEMPTS` refusals.
        """
        self.logons_refused += 1
        shown_user = request.user if request.user is None or len(request.user) <= 64 else request.user[:64] + "..."
        shown_name = (request.client_name or "")[:64]
        self.security.refused("logon", client=shown_name, remote=self.remote, user=shown_user,
                                     reason=reason[:300])
        self.counters.commands_failed += 1
        self.ack(header, acks | {"processed"}, "processed", reason=failure or AUTHENTICATION_FAILURE, now=True)
        return self.logged_on or self.logons_refused >= MAX_LOGON_ATTEMPTS

    async def _flush_and_close(self) -> None:
        """Close after a refused logon, once its failure ack is written (at most :data:`FAILURE_ACK_FLUSH`
        seconds: a client that does not read does not hold the connection open)."""
        reason = "logon refused" if self.logged_on else f"{self.logons_refused} logons refused"
        with trio.move_on_after(FAILURE_ACK_FLUSH):
            while self.outbound.held and not self.outbound.closed:
                await self.outbound.wait_below(0)
                if self.outbound.held:
                    await trio.sleep(0.005)  # the last batch is being written
        if self.close(reason):
            self.counters.logons_refused_disconnects += 1

    def _accept_logon(self, header: Mapping[str, Any], acks: frozenset[str]) -> None:
        names = self.clients.names
        if self.logged_on:  # logging on again, maybe under another name
            names.release(self.name, self)
        previous_name = self.name if self.logged_on else None
        self.name = header.get("client_name") or self.id
        # De-duplication is keyed by identity and client name: another user's sequence numbers under this
        # name never make this one's publishes look like re-sends (an open transport proves no identity).
        user = self.identity.user if self.identity is not None and self._authenticator.checks_credentials \
            else None
        self.identity_keyed = user is not None
        self.publisher_key = publisher_key(self.name, user)
        self.name_hash = client_name_hash(self.publisher_key)
        if user is not None and self.durability.journal is not None:
            # A journal written before identities were keyed: the name's entry becomes this identity's.
            self.durability.journal.dedup.adopt(client_name_hash(self.name), self.name_hash)
        holder = names.owner(self.name, user)
        names.claim(self.name, user, self)
        mt = header.get("message_type")
        if mt and self.transport.message_type is None:
            self.message_type = self.services.message_type(mt)
        self.logged_on = True
        previous = self.clients.logged_on(self, previous_name)
        if previous is not None:
            # AMPS's behaviour: the newest logon wins; two clients under one name would share its
            # de-duplication and bookmark state.
            log.warning("%s (%s) logged on as %s, already used by %s (%s): disconnecting %s%s", self.id,
                        self.remote, self.name, previous.id, previous.remote, previous.id,
                        f" (user {user!r} took the name over from user {holder!r}: <AllowClientNameTakeover> "
                        "is true)" if holder is not None else "")
            if previous.close(f"client name {self.name!r} logged on again by {self.id} ({self.remote})"):
                self.counters.duplicate_name_disconnects += 1
        last = self._last_persisted()
        self.ack(header, acks | {"processed"}, "processed", version=self.services.version,
                 client_name=self.name, user_id=header.get("user_id"), bm=f"{self.name_hash}|{last}|")
        log.info("%s logged on as %s from %s", self.id, self.name, self.remote)

    def _publish(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        self.publisher.publish(header, body, acks)

    def _subscribe(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        command = header.get("command") or "subscribe"
        delta = command == "delta_subscribe"
        bookmarked = bool(header.get("bookmark") or self.services.replays.get(self, header.get("sub_id")))
        check_command(command, header, bookmark=bookmarked)
        if bookmarked:
            start_bookmark_subscription(self.services, self, header, acks, delta=delta)
            return
        guard = self._readable_unfiltered if self.grants is not None and not self.grants.reads_everything() else None
        sub = self.engine.subscribe(self, header, kind="delta" if delta else "subscribe", delta=delta,
                                    topic_guard=guard)
        self.ack(header, acks, "processed", sub_id=sub.sub_id)

    def _unsubscribe(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        self.engine.unsubscribe(self, header.get("sub_id"))
        self.ack(header, acks, "processed")

    async def _sow(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        await self.queries.sow(header, body, acks)

    async def _sow_delete(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        await self.queries.sow_delete(header, body, acks)

    def _heartbeat(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        options = str(header.get("options") or "")
        if options.startswith("start"):
            _, _, interval = options.partition(",")
            try:
                seconds = float(interval)
            except ValueError:
                raise CommandError("invalid options", f"heartbeat interval {interval!r}") from None
            if seconds <= 0:
                raise CommandError("invalid options", "heartbeat interval must be positive")
            first = self._heartbeat_interval is None
            self._heartbeat_interval = seconds
            if first and self._nursery is not None:
                self._nursery.start_soon(self._heartbeats)
        self.ack(header, acks, "processed")

    async def _heartbeats(self) -> None:
        while self._heartbeat_interval:
            interval = self._heartbeat_interval
            await trio.sleep(interval)
            if trio.current_time() - self._last_heard > 2 * interval + 1:
                self.closed_reason = f"no heartbeat for {2 * interval:g}s"
                assert self._nursery is not None
                self._nursery.cancel_scope.cancel()
                return
            self.emit(encode_frame({"c": "heartbeat"}))

    async def _flush(self, header: Mapping[str, Any], body: bytes, acks: frozenset[str]) -> None:
        if "persisted" in acks:
            await self.durability.wait_durable()
            self.ack(header, acks, "persisted")
        self.ack(header, acks, "processed")

    def statistics(self) -> ClientStats:
        """This client's counters (its row of the statistics snapshot, :mod:`broker.stats.snapshot`)."""
        return client_row(self, sum(1 for s in self.engine.router.subscriptions() if s.client is self))

    def grants_changed(self) -> bool:
        """Whether this logged-on identity's grants under the entitlement module's current rules differ from
        those it logged on with (after a reload, :mod:`broker.server.security_reload`)."""
        if self.identity is None:
            return False
        return bool(self._entitlements.grants(self.identity) != self.grants)

    def identity_removed(self) -> bool:
        """Whether this logged-on identity is gone from the authentication module's current files (after a
        reload, :mod:`broker.server.security_reload`)."""
        return self.identity is not None and not self._authenticator.knows(self.identity)

    def _last_persisted(self) -> int:
        """The highest publish-store sequence persisted for this publisher (for the logon ack): what this run
        applied, or what the journal holds."""
        return max(self.engine.publisher_seq.get(self.publisher_key, 0),
                   self.durability.last_persisted_hash(self.name_hash))


#: Commands that need the write entitlement of their topic, and those that need read.
_WRITES = frozenset({"p", "publish", "delta_publish", "sow_delete"})
_READS = frozenset({"subscribe", "delta_subscribe", "sow", "sow_and_subscribe", "sow_and_delta_subscribe"})
#: The bookmark that means "from now on": no replay.
_BOOKMARK_NOW = "0|1|"
#: The failure reason of a refused logon (``AMPS.Reason``'s; the client raises AuthenticationException).
AUTHENTICATION_FAILURE = "authentication failure"
#: The failure reason of a logon under a client name another user holds (the client raises NameInUseException).
NAME_IN_USE = "name in use"
#: Refused logons after which a connection is closed.
MAX_LOGON_ATTEMPTS = 3
#: Seconds a refused logon's failure ack may take to be written before the connection is closed anyway.
FAILURE_ACK_FLUSH = 2.0
#: Why a draining session is closed (its log line; a WebSocket client's close frame).
SHUTDOWN_REASON = "the broker is shutting down"
#: The longest client name accepted at logon.
MAX_CLIENT_NAME = 1024


def _text_field(value: Any) -> str | None:
    return value if isinstance(value, str) else None


#: Failure reasons that mean "not written, nothing applied": what could not be written (the
#: ``publishes_refused_*`` counter and the summary log line of each).
REFUSED_REASONS = {JOURNAL_FULL_REASON: "journal", StorageError.reason: "storage"}
#: Reasons of publishes refused by :func:`~broker.engine.command_options.check_command` (logged in summary too).
_CHECKED_REASONS = frozenset({INVALID_OPTIONS, "invalid topic"})

#: Command handlers that never await: called directly.
_HANDLERS: dict[str, Callable[[Session, Mapping[str, Any], bytes, frozenset[str]], None]] = {
    "p": Session._publish,
    "publish": Session._publish,
    "delta_publish": Session._publish,
    "subscribe": Session._subscribe,
    "delta_subscribe": Session._subscribe,
    "unsubscribe": Session._unsubscribe,
    "heartbeat": Session._heartbeat,
}
#: Command handlers that may await (a streamed query, a scan in slices, a flush).
_AWAITING_HANDLERS: dict[str, Callable[[Session, Mapping[str, Any], bytes, frozenset[str]],
                                       Awaitable[None]]] = {
    "sow": Session._sow,
    "sow_and_subscribe": Session._sow,
    "sow_and_delta_subscribe": Session._sow,
    "sow_delete": Session._sow_delete,
    "flush": Session._flush,
}
