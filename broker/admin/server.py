"""Run the Admin HTTP server (hypercorn's trio worker) as a child of the caller's nursery.

Lifecycle, hypercorn-style: we bind the listening socket ourselves (so a busy port is a clear
:class:`~broker.errors.ConfigError` and port 0 reports the port the OS chose), hand it to hypercorn,
and report the bound port through ``task_status``. Cancelling the caller's scope closes the listener and
every connection; ``shutdown_trigger`` returning instead stops accepting and lets in-flight requests
finish within ``graceful_timeout``.

The accept loop is ours (:func:`_serve`: hypercorn's trio worker loop over our listener, each connection still
served by hypercorn's ``TCPServer``), for two reasons:

* at most :data:`MAX_CONNECTIONS` connections are served at once; past that, the listener stops accepting and
  new connections wait in the kernel's listen backlog (a client sees a slower answer, never a refusal) until
  one closes. Every served connection costs the event loop some Python per request (hypercorn's h11 parsing,
  its tasks, the ASGI call), and trio runs every ready task once per loop turn: with 1,000 connections ready
  at once a logged-on client's message waited 0.17-0.19 s behind them; with the bound it waits behind at
  most :data:`MAX_CONNECTIONS` (tests/faults/test_attacks_admin.py, ``python -m bench.attacks --row
  admin-flood``).
* one client address holds at most :data:`MAX_CONNECTIONS_PER_ADDRESS` of them; a connection past that waits
  its address's turn without holding a slot (a browser's or a test's burst of requests is served in turn),
  and past :data:`MAX_WAITING_PER_ADDRESS` more it is answered ``503`` (plain HTTP; closed without a word over
  TLS) and closed, so the other addresses keep a way in.
* with HTTPS, a plain ``http://`` request to the https port is seen: it is logged once per client address and
  answered with a plain-text 400 saying to use ``https://`` (:mod:`broker.security.plain_http`), where
  hypercorn alone closes it without a word.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Event, Updated

# hypercorn's own pieces of its trio worker loop, for _serve (tests/security/test_security_plain_http.py and
# tests/admin/test_admin_security.py serve HTTPS through them: an incompatible hypercorn fails there).
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, wrap_app

from broker.admin.app import AdminAction, AdminApp
from broker.admin.auth import BasicAuth
from broker.admin.console import ConsoleView
from broker.admin.sampler import SnapshotSource, StatisticsSampler
from broker.errors import ConfigError
from broker.security import Authenticator
from broker.security.plain_http import PlainHttpNotices, answer_plain_http, is_plain_http, url_host
from broker.security.runtime import SecurityRuntime

if TYPE_CHECKING:
    from broker.actions.runtime import ActionDescription

__all__ = ["serve_admin"]

log = logging.getLogger(__name__)

#: Bounds on what a client of the Admin server may hold (documented in docs/metrics.md): a request head
#: (request line and headers) larger than MAX_REQUEST_HEAD_BYTES is refused by h11; a connection that sends
#: nothing for READ_TIMEOUT_SECONDS is closed. Request bodies are never read.
READ_TIMEOUT_SECONDS = 30.0
KEEP_ALIVE_TIMEOUT_SECONDS = 5.0
MAX_REQUEST_HEAD_BYTES = 16 * 1024
GRACEFUL_TIMEOUT_SECONDS = 2.0
#: Admin connections served at once (per Admin port); more wait in the listen backlog until one closes.
MAX_CONNECTIONS = 16
#: Of those, connections from one client address (so one address cannot hold every slot); more from it wait
#: for its turn without holding a slot...
MAX_CONNECTIONS_PER_ADDRESS = 8
#: ...up to this many; past that they are answered 503 and closed at once.
MAX_WAITING_PER_ADDRESS = 64
#: How long a refused connection waits for the client to read the 503 before it is closed.
REFUSAL_LINGER_SECONDS = 1.0
#: The listen backlog: connections the kernel holds while MAX_CONNECTIONS are served (more are dropped by
#: the kernel and retried by the client's TCP).
LISTEN_BACKLOG = 1024


async def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = await trio.socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        raise ConfigError(
            f"Admin: cannot resolve InetAddr host {host!r} ({exc}). Use an IP address or a resolvable name "
            "in <Admin><InetAddr>."
        ) from exc
    family, type_, proto, _, address = infos[0]
    sock = socket.socket(family, type_, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"Admin: cannot listen on {host}:{port} ({exc.strerror or exc}). Choose a free port in "
            "<Admin><InetAddr>, or stop the process that holds this one."
        ) from exc
    return sock


def _check_certificate(certfile: str, keyfile: str, ciphers: str | None) -> None:
    """Load the HTTPS certificate once before serving, so a bad file is a clear ConfigError at start-up.

    Raises:
        ConfigError: a file is missing or unreadable, the key does not match, or the cipher list is bad.
    """
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certfile, keyfile)
        if ciphers:
            context.set_ciphers(ciphers)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"Admin: cannot serve HTTPS with <Certificate> {certfile!r} and <PrivateKey> {keyfile!r}"
                          f"{f' and <Ciphers> {ciphers!r}' if ciphers else ''}: {exc}") from None


async def serve_admin(
    host: str,
    port: int,
    source: SnapshotSource,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    admin_actions: dict[str, AdminAction] | None = None,
    interval: float = 10.0,
    access_log: bool = False,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    clock: Callable[[], float] = time.time,
    sampler: StatisticsSampler | None = None,
    console: ConsoleView | None = None,
    security: SecurityRuntime | None = None,
    authenticator: Authenticator | None = None,
    realm: str = "broker",
    anonymous_paths: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    ciphers: str | None = None,
    actions_catalog: Callable[[], Sequence[ActionDescription]] | None = None,
) -> None:
    """Serve ``/metrics``, ``/amps...`` and ``/amps/administrator/...`` until cancelled.

    Use as ``port = await nursery.start(serve_admin, "0.0.0.0", 8085, stats.sample)`` (a :class:`~broker.server.statistics_assembly.StatisticsAssembly`).

    Args:
        host: Address to listen on (``""`` or ``"0.0.0.0"`` for all IPv4, ``"::"`` for IPv6).
        port: Port to listen on; 0 lets the OS choose (the chosen port is reported).
        source: Returns the broker's statistics (or an awaitable of them); sampled once per ``interval``
            on the trio thread, never per request.
        task_status: Receives the bound port once the server accepts connections.
        admin_actions: Administrator actions by path below ``/amps/administrator/`` (used by reference).
        interval: AMPS ``Admin/Interval`` seconds: how often statistics are sampled and the averaging
            window of ``*_per_sec`` statistics.
        access_log: Log each request to the ``broker.admin.access`` logger (off by default).
        shutdown_trigger: When this returns, stop gracefully (in-flight requests get
            ``GRACEFUL_TIMEOUT_SECONDS``) and return.
        clock: Returns the current epoch time.
        sampler: Serve from this sampler instead of one over ``source`` (the caller runs it; tests use it
            to "sample now").
        console: The web console's view (see :mod:`broker.admin.console`).
        security: The broker's security runtime; with it, requests go through HTTP basic authentication
            (:mod:`broker.admin.auth`) against ``authenticator``.
        authenticator: The module checking credentials (``None``: no credentials asked; administrator
            endpoints answer loopback clients only).
        realm: The realm of the ``WWW-Authenticate`` challenge.
        anonymous_paths: A regex of paths served without credentials (never the administrator ones).
        certfile: With ``keyfile``: serve HTTPS with this certificate chain (PEM).
        keyfile: The certificate's private key (PEM).
        ciphers: The OpenSSL cipher list for HTTPS.
        actions_catalog: Every configured action (``ActionRuntime.describe``), for the
            ``/amps/administrator/actions`` index.

    Raises:
        ConfigError: The address cannot be resolved or bound.
    """
    app = AdminApp(source, admin_actions=admin_actions, interval=interval, clock=clock, sampler=sampler,
                   console=console, actions_catalog=actions_catalog)
    served: Any = app
    if security is not None:
        served = BasicAuth(app, security, authenticator, realm=realm, anonymous_paths=anonymous_paths)
    if certfile is not None and keyfile is not None:
        _check_certificate(certfile, keyfile, ciphers)
    sock = await _bind(host, port)
    bound_port: int = sock.getsockname()[1]
    tls = certfile is not None and keyfile is not None

    config = HypercornConfig()
    config.backlog = LISTEN_BACKLOG
    config.accesslog = logging.getLogger("broker.admin.access") if access_log else None
    # A Logger (not "-") keeps hypercorn from installing its own stderr handler: our logging config rules.
    config.errorlog = logging.getLogger("broker.admin.http")
    config.read_timeout = int(READ_TIMEOUT_SECONDS)
    config.keep_alive_timeout = KEEP_ALIVE_TIMEOUT_SECONDS
    config.h11_max_incomplete_size = MAX_REQUEST_HEAD_BYTES
    config.graceful_timeout = GRACEFUL_TIMEOUT_SECONDS
    config.include_server_header = False
    if tls:
        config.certfile, config.keyfile = certfile, keyfile  # hypercorn's SSL context (ALPN, TLS 1.2+)
        if ciphers:
            config.ciphers = ciphers

    async with trio.open_nursery() as nursery:
        if sampler is None:
            nursery.start_soon(app.sampler.run)

        async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            listener: trio.abc.Listener[Any]
            if tls:
                shown = url_host(host if host not in ("", "0.0.0.0", "::") else "127.0.0.1")
                notices = PlainHttpNotices(f"the https Admin port {bound_port}", f"use https://{shown}:{bound_port}/")
                context = config.create_ssl_context()
                assert context is not None, "TLS is configured"
                listener = _TLSListener(_listening(sock, config), context, notices)
            else:
                listener = trio.SocketListener(trio.socket.from_stdlib_socket(_listening(sock, config)))
            await _serve(served, config, _BoundedListener(listener, MAX_CONNECTIONS),
                         shutdown_trigger=shutdown_trigger, task_status=task_status)
            nursery.cancel_scope.cancel()  # stopped gracefully: the sampler stops with it

        await nursery.start(serve)
        task_status.started(bound_port)


class _TLSConnection(trio.abc.Stream):
    """A TLS server connection as hypercorn's ``TCPServer`` uses one (an ``SSLStream``: ``do_handshake``,
    ``selected_alpn_protocol``, ``transport_stream``), whose handshake tells a plain HTTP client what to do.

    Args:
        transport: The accepted TCP connection.
        context: The server's SSL context.
        notices: Where plain HTTP clients are logged (once per address).
    """

    def __init__(self, transport: trio.SocketStream, context: ssl.SSLContext, notices: PlainHttpNotices) -> None:
        self.transport_stream = transport
        self._tls = trio.SSLStream(transport, context, server_side=True, https_compatible=True)
        self._notices = notices

    async def do_handshake(self) -> None:
        """The TLS handshake; plain HTTP instead is logged (once per address), answered with a plain-text 400
        and closed.

        Raises:
            trio.BrokenResourceError: the handshake failed (hypercorn then drops the connection).
        """
        try:
            await self._tls.do_handshake()
        except trio.BrokenResourceError as exc:
            if not is_plain_http(exc):
                await trio.aclose_forcefully(self.transport_stream)
                raise
            local = self.transport_stream.socket.getsockname()
            use = f"use https://{url_host(str(local[0]))}:{local[1]}/"
            self._notices.note(str(self.transport_stream.socket.getpeername()[0]), use)
            await answer_plain_http(self.transport_stream, f"This is the https Admin port of the broker: {use}")
            raise

    def selected_alpn_protocol(self) -> str | None:
        """The protocol ALPN chose (``http/1.1`` or ``h2``), as ``SSLStream`` answers."""
        return self._tls.selected_alpn_protocol()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._tls.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._tls.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._tls.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._tls.aclose()


class _TLSListener(trio.abc.Listener[_TLSConnection]):
    """Accepts TCP connections and wraps each in a :class:`_TLSConnection` (the handshake runs later, in the
    connection's own task, as with ``trio.SSLListener``)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, notices: PlainHttpNotices) -> None:
        self._listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        self._context = context
        self._notices = notices

    async def accept(self) -> _TLSConnection:
        return _TLSConnection(await self._listener.accept(), self._context, self._notices)

    async def aclose(self) -> None:
        await self._listener.aclose()


def _listening(sock: socket.socket, config: HypercornConfig) -> socket.socket:
    sock.setblocking(False)
    sock.listen(config.backlog)
    return sock


class _BoundedListener(trio.abc.Listener[Any]):
    """Accepts a connection only while fewer than ``limit`` accepted ones are open: past that, ``accept`` waits
    (new connections stay in the kernel's listen backlog) until a connection's handler calls :meth:`release`.

    Args:
        listener: The listener to accept from (plain or TLS).
        limit: Connections served at once.
    """

    def __init__(self, listener: trio.abc.Listener[Any], limit: int) -> None:
        self._listener = listener
        self._slots = trio.Semaphore(limit)
        #: When each address's refusal was last logged (this server's own: two brokers in a process log apart).
        self.refusals_logged: dict[str, float] = {}

    async def accept(self) -> Any:
        await self._slots.acquire()
        try:
            return await self._listener.accept()
        except BaseException:
            self._slots.release()
            raise

    def release(self) -> None:
        """A connection accepted by this listener is closed (or waits without a slot): accept another."""
        self._slots.release()

    async def reacquire(self) -> None:
        """Take a slot again for a connection that gave its slot back while it waited."""
        await self._slots.acquire()

    async def aclose(self) -> None:
        await self._listener.aclose()


class _ClosingTCPServer(TCPServer):
    """hypercorn's ``TCPServer``, except that a connection the client closed ends as soon as its request is
    answered: hypercorn's own keeps it (and so its Admin connection slot) until the keep-alive timeout."""

    _client_gone = False

    async def _read_data(self) -> None:
        await super()._read_data()
        self._client_gone = True
        await self.idle_task.stop()

    async def protocol_send(self, event: Event) -> None:
        if self._client_gone and isinstance(event, Updated) and event.idle:
            await self.idle_task.stop()  # nothing more can come: no keep-alive wait
            return
        await super().protocol_send(event)


def _peer_address(stream: Any) -> str:
    """The client address of an accepted plain or TLS stream (``""`` when it is already gone)."""
    transport = getattr(stream, "transport_stream", stream)
    try:
        return str(transport.socket.getpeername()[0])
    except OSError:
        return ""


REFUSAL_LOG_SECONDS = 60.0


async def _refuse(stream: Any, address: str, logged: dict[str, float]) -> None:
    """Answer a connection past :data:`MAX_CONNECTIONS_PER_ADDRESS` with a plain-text 503 (nothing over TLS:
    no handshake is spent on it) and give the client a moment to read it; ``logged``: when each address's
    refusal was last logged."""
    now = time.monotonic()
    if now - logged.get(address, -REFUSAL_LOG_SECONDS) >= REFUSAL_LOG_SECONDS:
        if len(logged) > 1024:
            logged.clear()
        logged[address] = now
        log.warning("Admin: refusing connections from %s past %d at once (logged once a minute per address); "
                    "close idle ones or reuse connections (HTTP keep-alive).", address, MAX_CONNECTIONS_PER_ADDRESS)
    if isinstance(stream, _TLSConnection):
        return
    body = (f"Too many connections from {address} to the Admin port (at most {MAX_CONNECTIONS_PER_ADDRESS}); "
            "close idle ones or reuse one, and retry.\n").encode()
    head = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: 1\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n")
    with trio.move_on_after(REFUSAL_LINGER_SECONDS):
        try:
            await stream.send_all(head + body)
            await stream.send_eof()
            await stream.receive_some(MAX_REQUEST_HEAD_BYTES)  # the request, read so the close is not a reset
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


async def _serve(app: Any, config: HypercornConfig, listener: _BoundedListener, *,
                 shutdown_trigger: Callable[[], Awaitable[object]] | None,
                 task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve HTTP(S) from ``listener`` as ``hypercorn.trio.serve`` does (its worker loop, its per-connection
    ``TCPServer``), each connection holding one of the listener's slots until it is closed. The ASGI lifespan
    protocol is not run: the Admin app has nothing to start or stop.
    """
    worker = WorkerContext(None)
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")

    held: dict[str, int] = {}  # connections open per address (served and waiting)
    turns: dict[str, trio.Semaphore] = {}  # per address: MAX_CONNECTIONS_PER_ADDRESS served at once

    async def handle(stream: Any) -> None:
        address = _peer_address(stream)
        held[address] = held.get(address, 0) + 1
        turn = turns.setdefault(address, trio.Semaphore(MAX_CONNECTIONS_PER_ADDRESS))
        slot = True
        try:
            if held[address] > MAX_CONNECTIONS_PER_ADDRESS + MAX_WAITING_PER_ADDRESS:
                await _refuse(stream, address, listener.refusals_logged)
                return
            if turn.value == 0:  # the address's share is in use: wait for its turn without a slot of the port
                listener.release()
                slot = False
                await turn.acquire()
                try:
                    await listener.reacquire()
                except BaseException:
                    turn.release()
                    raise
                slot = True
            else:
                turn.acquire_nowait()
            try:
                await _ClosingTCPServer(wrapped, config, worker, ConnectionState({}), stream)
            finally:
                turn.release()
        finally:
            held[address] -= 1
            if not held[address]:
                del held[address]
                del turns[address]
            if slot:
                listener.release()
            await trio.aclose_forcefully(stream)  # also after a failed or timed-out TLS handshake

    async with trio.open_nursery() as server_nursery:
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                if shutdown_trigger is not None:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                nursery.start_soon(raise_shutdown, worker.terminate.wait)
                nursery.start_soon(partial(trio.serve_listeners, handle, [listener], handler_nursery=server_nursery))
                await trio.sleep_forever()
        except BaseExceptionGroup as error:
            _, others = error.split(ShutdownError)
            if others is not None:
                raise others from None
        finally:
            await worker.terminated.set()
            server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
