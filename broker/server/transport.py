"""TCP transports: listen on a Transport's InetAddr and run a session per connection (AMPS over TCP, or
over WebSocket for ``<Protocol>websocket</Protocol>``: :mod:`broker.server.websocket`). ``tcps`` transports
wrap each connection in TLS first (:mod:`broker.security.tls`), whatever the protocol: a websocket transport
of Type tcps serves ``wss://``."""

from __future__ import annotations

import errno
import logging
from typing import Any

import trio

from broker.config.model import TransportConfig
from broker.errors import ConfigError
from broker.server.services import SessionServices
from broker.server.session import Session
from broker.server.websocket import WebSocketStream, accept_websocket

log = logging.getLogger("broker.transport")


async def serve_transport(
    transport: TransportConfig, services: SessionServices, connections: trio.Nursery | None = None, *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
) -> None:
    """Listen on ``transport`` and serve clients until cancelled; reports the bound addresses.

    Each connection runs in ``connections`` (default: this task's own nursery), so cancelling this task stops
    accepting while the connections go on (the kernel drains them).

    Raises:
        ConfigError: the address cannot be bound (in use, not permitted), naming the transport.
    """
    host = None if transport.host in ("", "0.0.0.0", "*") else transport.host
    try:
        listeners = await trio.open_tcp_listeners(transport.port, host=host)
    except OSError as exc:
        hint = " Is another broker running, or change the port in InetAddr." if exc.errno == errno.EADDRINUSE else ""
        raise ConfigError(
            f"Transport {transport.name!r} ({transport.where}): cannot listen on "
            f"{transport.host}:{transport.port}: {exc.strerror}.{hint}"
        ) from None
    addresses = [listener.socket.getsockname()[:2] for listener in listeners]
    context = None
    if transport.tls is not None:
        from broker.security.tls import HandshakeBound, handshake, server_context

        context = server_context(transport.tls, f"Transport {transport.name!r} ({transport.where})")
        handshakes = HandshakeBound()
    for addr in addresses:
        log.info("Transport %s listening on %s:%s (%s%s)", transport.name, addr[0], addr[1], transport.protocol,
                 ", TLS" if context is not None else "")

    async def handle(stream: trio.SocketStream) -> None:
        try:
            peer = stream.socket.getpeername()
            remote = f"{peer[0]}:{peer[1]}"
        except OSError:
            remote = "?"
        session_stream: trio.abc.Stream = stream
        ws: WebSocketStream | None = None
        if context is not None:
            host = remote.rpartition(":")[0]
            if not handshakes.enter(host):
                if handshakes.refused % 1000 == 1:  # a storm logs a line now and then, not one per connection
                    log.warning("TLS connection from %s on transport %s closed: %d handshakes from that address "
                                "are in progress already (%d such connections closed)", remote, transport.name,
                                handshakes.limit, handshakes.refused)
                await trio.aclose_forcefully(stream)
                return
            try:
                secure = trio.SSLStream(stream, context, server_side=True)
                ok = await handshake(secure, remote, transport.name, transport.logon_timeout)
            finally:
                handshakes.leave(host)
            if not ok:
                return
            session_stream = secure
        if transport.protocol == "websocket":
            ws = await accept_websocket(session_stream, services, transport, remote)
            if ws is None:
                return
            session_stream = ws
        try:
            session = Session(session_stream, services, transport, remote)
            if ws is not None and ws.ws.message_type and transport.message_type is None:
                session.message_type = services.message_type(ws.ws.message_type)  # the URI's /amps/json
            await session.run()
        except Exception:  # a bug in one session must not take down the listener or other clients
            services.counters.protocol_errors += 1
            log.exception("session from %s failed", remote)

    task_status.started(addresses)
    await trio.serve_listeners(handle, listeners, handler_nursery=connections)
