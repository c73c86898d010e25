"""TLS for transports: the server-side ``ssl.SSLContext`` a ``tcps`` transport (or any transport type that
speaks TLS, such as a secure websocket) wraps its connections in, from the transport's ``<Certificate>``,
``<PrivateKey>``, ``<CAFile>``/``<CAPath>``, ``<VerifyClient>`` and ``<Ciphers>``.

TLS 1.2 is the minimum. With ``VerifyClient`` a client must present a certificate that chains to the CA
files and is valid now (an expired, not-yet-valid or unknown certificate fails the handshake).
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

import trio

from broker.config.model import TlsConfig
from broker.errors import ConfigError
from broker.security.plain_http import PlainHttpNotices, answer_plain_http, is_plain_http

#: Plain HTTP clients told about, per transport name (a transport's own bound on addresses).
_PLAIN_HTTP: dict[str, PlainHttpNotices] = {}

__all__ = ["handshake", "server_context"]

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
            await stream.do_handshake()
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
