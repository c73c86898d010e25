"""TCP transports: listen on a Transport's InetAddr and run a session per connection."""

from __future__ import annotations

import errno
import logging
from typing import TYPE_CHECKING, Any

import trio

from broker.config.model import TransportConfig
from broker.errors import ConfigError

if TYPE_CHECKING:
    from broker.server.kernel import Broker

log = logging.getLogger("broker.transport")


async def serve_transport(
    transport: TransportConfig, broker: Broker, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
) -> None:
    """Listen on ``transport`` and serve clients until cancelled; reports the bound addresses.

    Raises:
        ConfigError: the address cannot be bound (in use, not permitted), naming the transport.
    """
    from broker.server.session import Session

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
    for addr in addresses:
        log.info("Transport %s listening on %s:%s (%s)", transport.name, addr[0], addr[1], transport.protocol)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            peer = stream.socket.getpeername()
            remote = f"{peer[0]}:{peer[1]}"
        except OSError:
            remote = "?"
        try:
            await Session(stream, broker, transport, remote).run()
        except Exception:  # a bug in one session must not take down the listener or other clients
            broker.counters["protocol_errors"] += 1
            log.exception("session from %s failed", remote)

    task_status.started(addresses)
    await trio.serve_listeners(handle, listeners)
