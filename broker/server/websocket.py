"""The WebSocket transport's I/O: a trio stream that speaks WebSocket outside and AMPS TCP frames inside.

:class:`WebSocketStream` wraps an accepted socket stream (or a TLS stream, for ``wss``) and
:class:`~broker.protocol.websocket.WebSocketAmps` (sans-IO). A :class:`~broker.server.session.Session` reads
and writes it exactly as it does a TCP client's socket, so logon, the engine, acks, flow control,
slow-client limits and statistics are the TCP transport's. Bytes the connection holds for a message or
command still being received count against the broker-wide ``<TotalMessageMemoryLimit>``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import trio

from broker.errors import BrokerError, RemoteProtocolError
from broker.protocol._frames import LARGE_BODY
from broker.protocol.websocket import WebSocketAmps
from broker.server.sockio import TurnBudget, read_some, socket_fd, write_all

if TYPE_CHECKING:
    from broker.server.services import SessionServices

log = logging.getLogger("broker.transport")

#: Seconds a connection may take to send its WebSocket handshake (the Transport's LogonTimeout when longer).
HANDSHAKE_TIMEOUT = 10.0


class WebSocketStream(trio.abc.Stream):
    """AMPS frames over one WebSocket connection.

    Args:
        stream: The accepted connection.
        services: The broker's services (the memory budget, the protocol-error counter, message types).
        max_message_size: The Transport's ``<MaxMessageSize>``.
        remote: The peer address, for logs.
    """

    def __init__(self, stream: trio.abc.Stream, services: SessionServices, max_message_size: int, remote: str,
                 max_logon_size: int | None = None) -> None:
        self.stream = stream
        self.clients = services.clients
        self.counters = services.counters
        self.message_type = services.message_type
        self.remote = remote
        self.ws = WebSocketAmps(max_message_size)
        self._max_message_size = max_message_size
        if max_logon_size is not None and max_logon_size < max_message_size:  # lifted by logged_on()
            self.ws.limit(max_logon_size, "the Transport's <MaxLogonSize>, the largest before a logon")
        self._fd = socket_fd(stream)
        self._send_lock = trio.Lock()
        self._inbox = b""
        self._reserved = 0
        self._eof = False
        #: This connection's work per loop turn, shared with its Session (which dispatches the AMPS frames).
        self.turn = TurnBudget()
        #: The close frame's code and reason when the broker ends the connection (a Session closes its stream
        #: with trio.aclose_forcefully, so only a close sent before that reaches the client).
        self._close: tuple[int, str] = (1000, "")
        #: trio time of the last bytes received (pings and pongs included), for the Transport's IdleTimeout.
        self.last_heard = trio.current_time()

    async def handshake(self, timeout: float) -> bool:
        """Read and answer the HTTP upgrade request; ``False`` when the connection is to be closed."""
        with trio.move_on_after(timeout):
            while not self.ws.requested:
                if not await self._read_more():
                    return False
            if self.ws.message_type:
                try:
                    self.message_type(self.ws.message_type)
                except BrokerError as exc:
                    try:
                        self.ws.refuse(400, f"message type {self.ws.message_type!r}: {exc}")
                    except RemoteProtocolError as refused:
                        self._refused(refused)
                    await self._flush()
                    return False
            self.ws.accept()
            await self._flush()
            self._inbox += self.ws.amps_data()  # anything the client sent right after its request
            return True
        log.info("websocket client %s sent no handshake within %gs: closing", self.remote, timeout)
        return False

    # -- trio.abc.Stream -------------------------------------------------------------------------------------
    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while not self._inbox:
            if self._eof or not await self._read_more():
                return b""
        n = max_bytes or len(self._inbox)
        data, self._inbox = self._inbox[:n], self._inbox[n:]
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) >= LARGE_BODY:  # a large body is written as it is, never copied whole (issue 34)
            for part in self.ws.encode_large(bytes(data)):
                await self._write(part)
            return
        await self._write(self.ws.encode(bytes(data)))

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    def logged_on(self) -> None:
        """The session logged on: messages up to MaxMessageSize are read from now on (MaxLogonSize before)."""
        self.ws.limit(self._max_message_size, "the Transport's <MaxMessageSize>")

    def closing(self, reason: str, *, going_away: bool = False) -> None:
        """The Session ends the connection for ``reason`` (slow client, duplicate name, timeouts): the close
        frame says so with code 1008 (policy violation), or 1001 (going away) when ``going_away`` (the broker
        shuts down), unless a more precise code is already set."""
        if self._close[0] == 1000:
            self._close = (1001 if going_away else 1008, reason[:120])  # a close frame's reason fits in 123 bytes

    async def aclose(self) -> None:
        self._release()
        try:
            closing = self.ws.close(*self._close)
            if closing:
                # Shielded: a Session closes its stream with trio.aclose_forcefully (already cancelled), and
                # the client should still learn why (not see 1006); bounded for a client that stopped reading.
                with trio.move_on_after(0.5) as cs:
                    cs.shield = True
                    await self._write(closing)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await self.stream.aclose()

    # -- internals ------------------------------------------------------------------------------------------
    async def _read_more(self) -> bool:
        """Read once and process it; ``False`` once the connection is over (closed, or broke the rules)."""
        try:
            data = await read_some(self._fd, 65536) if self._fd is not None else bytes(await self.stream.receive_some(65536))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if data:
            self.last_heard = trio.current_time()
        self.turn.yielded()  # read_some yielded; a stream's receive_some checkpoints
        try:
            # A read of tiny WebSocket frames is thousands of them: parse a turn's budget at a time.
            self.ws.receive_data(data, self.turn.left())
            while True:
                self.turn.spend(self.ws.handled)
                if not self.ws.more:
                    break
                await self.turn.pace()
                self.ws.process(self.turn.left())
        except RemoteProtocolError as exc:
            self._refused(exc)
            await self._flush()
            self._eof = True
            return False
        await self._flush()
        self._inbox += self.ws.amps_data()
        if not self._reserve():
            self._eof = True
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._write(self.ws.close(*self._close))
            return False
        if not data or self.ws.closed:
            self._eof = True
            return bool(self._inbox)
        return True

    def _refused(self, exc: RemoteProtocolError) -> None:
        self.counters.protocol_errors += 1
        log.warning("websocket client %s broke the protocol, closing: %s", self.remote, exc)

    def _reserve(self) -> bool:
        """Count a partly received message against the broker-wide budget; ``False``: it does not fit."""
        need = self.ws.buffered
        budget = self.clients.memory
        if need > self._reserved and not self.clients.make_room(need - self._reserved):
            budget.refused_frames += 1
            self._close = (1009, "the broker's memory limit for client buffers is reached")
            log.warning("websocket client %s closed: a message of %d bytes so far does not fit the broker-wide "
                        "TotalMessageMemoryLimit of %d bytes", self.remote, need, budget.limit)
            self._release()
            return False
        budget.input += need - self._reserved
        self._reserved = need
        return True

    def _release(self) -> None:
        self.clients.memory.input -= self._reserved
        self._reserved = 0

    async def _flush(self) -> None:
        out = self.ws.data_to_send()
        if out:
            try:
                await self._write(out)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._eof = True

    async def _write(self, data: bytes | memoryview) -> None:
        if not data:
            return
        async with self._send_lock:
            if self._fd is not None:
                await write_all(self._fd, data)
            elif len(data) >= LARGE_BODY:  # wss: encrypted a slice at a time, never 50 MB in one step (issue 34)
                view = memoryview(data)
                for start in range(0, len(view), LARGE_BODY):
                    await self.stream.send_all(view[start:start + LARGE_BODY])
            else:
                await self.stream.send_all(data)


async def accept_websocket(stream: trio.abc.Stream, services: SessionServices, transport: Any, remote: str
                           ) -> WebSocketStream | None:
    """Run the handshake of a client of a websocket ``transport``; ``None``: it failed and was closed."""
    ws = WebSocketStream(stream, services, transport.max_message_size, remote,
                         getattr(transport, "max_logon_size", None))
    if await ws.handshake(max(HANDSHAKE_TIMEOUT, transport.logon_timeout)):
        return ws
    with trio.move_on_after(1) as cs:
        cs.shield = True
        await trio.aclose_forcefully(ws)
    return None
