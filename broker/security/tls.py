"""TLS for transports: the server-side ``ssl.SSLContext`` a ``tcps`` transport (or any transport type that
speaks TLS, such as a secure websocket) wraps its connections in, from the transport's ``<Certificate>``,
``<PrivateKey>``, ``<CAFile>``/``<CAPath>``, ``<VerifyClient>`` and ``<Ciphers>``.

TLS 1.2 is the minimum. With ``VerifyClient`` a client must present a certificate that chains to the CA
files and is valid now (an expired, not-yet-valid or unknown certificate fails the handshake).

The handshake's cryptography runs off the event loop: :func:`handshake` moves the bytes on the loop and runs
each ``SSLObject.do_handshake`` step in a small pool of lower-priority threads (OpenSSL releases the GIL), so
a storm of handshakes does not stall logged-on clients. At most :data:`HANDSHAKES_PER_ADDRESS` handshakes from
one source address are in progress at a time (:class:`HandshakeBound`); more are closed at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from typing import Any

import trio

from broker.config.model import TlsConfig
from broker.errors import ConfigError
from broker.security.plain_http import PlainHttpNotices, answer_plain_http, is_plain_http
from broker.security.runtime import VerificationPool

#: Plain HTTP clients told about, per transport name (a transport's own bound on addresses).
_PLAIN_HTTP: dict[str, PlainHttpNotices] = {}

__all__ = ["HANDSHAKES_PER_ADDRESS", "HandshakeBound", "handshake", "server_context"]

#: TLS handshakes in progress from one source address at most (more are closed at once).
HANDSHAKES_PER_ADDRESS = 8
#: Handshake steps computed at the same time (threads of :data:`_POOL`).
CONCURRENT_HANDSHAKE_STEPS = max(2, min(4, os.cpu_count() or 2))
#: Bytes read from the socket at a time during a handshake.
_RECEIVE = 16384
_POOL: VerificationPool | None = None


def _pool() -> VerificationPool:
    global _POOL
    if _POOL is None:
        _POOL = VerificationPool("broker-tls", CONCURRENT_HANDSHAKE_STEPS)
    return _POOL


class HandshakeBound:
    """Handshakes in progress per source address, each at most ``limit`` (memory: one entry per address with a
    handshake in progress)."""

    def __init__(self, limit: int = HANDSHAKES_PER_ADDRESS) -> None:
        self.limit = limit
        self._running: dict[str, int] = {}
        #: Connections closed because their address had ``limit`` handshakes in progress.
        self.refused = 0

    def enter(self, host: str) -> bool:
        """Start a handshake from ``host``; ``False`` (nothing taken) when it has ``limit`` in progress."""
        running = self._running.get(host, 0)
        if running >= self.limit:
            self.refused += 1
            return False
        self._running[host] = running + 1
        return True

    def leave(self, host: str) -> None:
        """A handshake from ``host`` ended (either way)."""
        running = self._running.get(host, 0) - 1
        if running > 0:
            self._running[host] = running
        else:
            self._running.pop(host, None)

    def running(self, host: str) -> int:
        """Handshakes in progress from ``host``."""
        return self._running.get(host, 0)

log = logging.getLogger("broker.transport")


def server_context(tls: TlsConfig, owner: str) -> ssl.SSLContext:
    """The server context of ``tls``.

    Args:
        tls: The transport's TLS settings.
        owner: Names the transport in errors, e.g. ``"Transport 'secure' (file:12)"``.

    Raises:
        ConfigError: a file is missing or unreadable, the key does not match the certificate, or the cipher
            list selects nothing.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.certificate, tls.private_key)
    except FileNotFoundError as exc:
        raise ConfigError(f"{owner}: cannot read {exc.filename or tls.certificate!r}: no such file "
                          "(<Certificate>/<PrivateKey> paths are relative to the working directory)") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{owner}: cannot use <Certificate> {tls.certificate!r} with <PrivateKey> "
                          f"{tls.private_key!r}: {exc} (both PEM; the key must belong to the certificate)") from None
    if tls.ca_file or tls.ca_path:
        try:
            context.load_verify_locations(cafile=tls.ca_file, capath=tls.ca_path)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"{owner}: cannot load <CAFile>/<CAPath> ({tls.ca_file or tls.ca_path!r}): {exc}") \
                from None
    context.verify_mode = ssl.CERT_REQUIRED if tls.verify_client else ssl.CERT_NONE
    if tls.ciphers:
        try:
            context.set_ciphers(tls.ciphers)
        except ssl.SSLError as exc:
            raise ConfigError(f"{owner}: <Ciphers> {tls.ciphers!r} selects no cipher OpenSSL knows: {exc}") from None
    return context


async def handshake(stream: trio.SSLStream[Any], remote: str, transport: str, timeout: float) -> bool:
    """Complete the TLS handshake of a new connection within ``timeout`` seconds (0: no limit).

    Returns:
        Whether it succeeded; a failure (a plain TCP client, a refused certificate, a stall) is logged and
        the connection is closed. Other clients are not affected.
    """
    with trio.move_on_after(timeout if timeout > 0 else float("inf")) as scope:
        try:
            await _handshake_off_loop(stream, remote.rpartition(":")[0])
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            if is_plain_http(exc):
                await _tell_plain_http(stream, remote, transport)
                return False
            cause = exc.__cause__ or exc
            detail = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or cause
            log.warning("TLS handshake from %s on transport %s failed: %s", remote, transport, detail)
    if scope.cancelled_caught:
        log.warning("TLS handshake from %s on transport %s did not finish within %gs", remote, transport, timeout)
    await trio.aclose_forcefully(stream)
    return False


def _step(ssl_object: ssl.SSLObject) -> bool:
    """One ``do_handshake`` step (in a pool thread): ``True`` when the handshake is complete, ``False`` when it
    needs more bytes from the peer."""
    try:
        ssl_object.do_handshake()
    except ssl.SSLWantReadError:
        return False
    return True


async def _handshake_off_loop(stream: trio.SSLStream[Any], host: str) -> None:
    """Complete ``stream``'s server handshake with the CPU work in :data:`_POOL`'s threads.

    trio's SSLStream would run ``do_handshake`` (certificate signing, key exchange, client certificate checks)
    on the event loop. Here the loop only moves bytes between the socket and the stream's memory BIOs; the
    steps run in a thread, one at a time per connection, a few per source address ``host`` in the queue at a
    time. Then the stream is marked as handshaken and used as usual. Should trio's internals differ from what
    this expects, the handshake runs on the loop as before.

    Raises:
        trio.BrokenResourceError: the handshake failed (the ``ssl.SSLError`` as its cause) or the peer left.
    """
    ssl_object = getattr(stream, "_ssl_object", None)
    incoming, outgoing = getattr(stream, "_incoming", None), getattr(stream, "_outgoing", None)
    once: Any = getattr(stream, "_handshook", None)  # trio's private handshake latch, checked just below
    if not (isinstance(ssl_object, ssl.SSLObject) and isinstance(incoming, ssl.MemoryBIO)
            and isinstance(outgoing, ssl.MemoryBIO) and hasattr(once, "started")
            and isinstance(getattr(once, "_done", None), trio.Event)) or once.started:
        await stream.do_handshake()
        return
    raw = stream.transport_stream
    pool = _pool()
    once.started = True  # nobody else may start trio's own handshake meanwhile
    try:
        while True:
            try:
                complete = await pool.run(_step, ssl_object, key=host)
            except ssl.SSLError as exc:
                alert = outgoing.read()
                if exc.reason != "HTTP_REQUEST":  # a plain HTTP client is answered in HTTP instead
                    await _send_alert(raw, alert)
                raise trio.BrokenResourceError(exc) from exc
            pending = outgoing.read()
            if pending:
                await raw.send_all(pending)
            if complete:
                break
            data = await raw.receive_some(_RECEIVE)
            if data:
                incoming.write(data)
            else:
                incoming.write_eof()
    except BaseException:
        stream._state = getattr(type(stream._state), "BROKEN", stream._state)
        raise
    once._done.set()


async def _send_alert(raw: trio.abc.Stream, alert: bytes) -> None:
    """Tell the peer why its handshake failed (the TLS alert OpenSSL wrote), if it still listens."""
    if not alert:
        return
    with trio.move_on_after(1):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await raw.send_all(alert)


async def _tell_plain_http(stream: trio.SSLStream[Any], remote: str, transport: str) -> None:
    """A plain HTTP request reached the TLS transport ``transport``: log it once per client address and answer a
    plain-text 400 saying to connect with TLS (see :mod:`broker.security.plain_http`)."""
    raw = stream.transport_stream
    try:
        port = raw.socket.getsockname()[1]
    except OSError:
        port = "?"
    notices = _PLAIN_HTTP.get(transport)
    if notices is None:
        notices = _PLAIN_HTTP[transport] = PlainHttpNotices(
            f"the TLS transport {transport} (port {port})",
            "connect with TLS: tcps:// for AMPS clients, wss:// for websocket ones")
    notices.note(remote.rpartition(":")[0] or remote)
    await answer_plain_http(raw, f"This port (transport {transport}) speaks AMPS over TLS, not plain HTTP: connect "
                                 "with TLS (tcps:// for AMPS clients, wss:// for websocket ones).")
