"""Plain HTTP sent to a TLS port: told once per client address, and answered in plain text.

A browser or ``curl`` pointed at ``http://`` of the https Admin port (or at a tcps transport) sends a plain HTTP
request where a TLS ClientHello belongs. OpenSSL recognises it (reason ``HTTP_REQUEST``) and the handshake
fails, as before; on top of that the broker logs one warning per client address that names the port's scheme
and what to use instead, and answers the client ``400 Bad Request`` in plain text saying the same, so neither
side is left with a connection closed without a word.

Bounds: at most :data:`REMEMBERED_ADDRESSES` client addresses are remembered per port (the oldest is forgotten
first, so a scan of many addresses cannot grow memory, and an address forgotten that way may be told again);
the answer waits at most :data:`DRAIN_SECONDS` and reads at most :data:`DRAIN_BYTES` of the rest of the request
before closing (closing with unread bytes would reset the connection before the client reads the answer).
"""

from __future__ import annotations

import logging
import ssl

import trio

__all__ = ["DRAIN_BYTES", "DRAIN_SECONDS", "REMEMBERED_ADDRESSES", "PlainHttpNotices", "answer_plain_http",
           "is_plain_http"]

log = logging.getLogger("broker.security")

#: Client addresses told about per port at most; past it the oldest is forgotten.
REMEMBERED_ADDRESSES = 1024
#: Seconds the 400 answer waits for the client to finish sending before the connection is closed.
DRAIN_SECONDS = 1.0
#: Bytes of the request read (and dropped) at most after the answer.
DRAIN_BYTES = 64 * 1024


def is_plain_http(exc: BaseException) -> bool:
    """Whether a failed TLS handshake (``trio.BrokenResourceError`` from ``SSLStream.do_handshake``) was plain
    HTTP: OpenSSL's ``HTTP_REQUEST`` reason, anywhere in the exception's causes."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) and seen.reason == "HTTP_REQUEST":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class PlainHttpNotices:
    """Logs "<address> sent plain HTTP to <port>" once per client address (bounded; see the module doc).

    Args:
        port_name: What the port is, for the line: ``"the https Admin port 8085"``.
        advice: What to use instead: ``"use https://127.0.0.1:8085/"``.
        limit: Addresses remembered at most.
    """

    def __init__(self, port_name: str, advice: str, *, limit: int = REMEMBERED_ADDRESSES) -> None:
        self.port_name = port_name
        self.advice = advice
        self.limit = limit
        self._told: dict[str, None] = {}  # insertion-ordered: the first key is the oldest
        #: Plain HTTP connections seen (told or not).
        self.seen = 0

    def note(self, address: str, advice: str | None = None) -> bool:
        """Count a plain HTTP connection from ``address`` and log it unless that address was told already.

        Args:
            address: The client's host (no port: one line per machine, not per connection).
            advice: What to use instead, when it depends on the connection (the address it reached).

        Returns:
            Whether a line was logged.
        """
        self.seen += 1
        if address in self._told:
            return False
        if len(self._told) >= self.limit:
            del self._told[next(iter(self._told))]
        self._told[address] = None
        log.warning("%s sent plain HTTP to %s; %s (told once per client address)", address or "?", self.port_name,
                    advice or self.advice)
        return True


def url_host(host: str) -> str:
    """``host`` as written in a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host else host


async def answer_plain_http(transport: trio.SocketStream, message: str) -> None:
    """Send a plain-text ``400 Bad Request`` carrying ``message`` on the raw connection, then close it (after
    reading what the client still sends, within the module's bounds). Never raises for a peer that is gone."""
    body = (message.rstrip("\n") + "\n").encode("utf-8", "replace")
    head = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n")
    try:
        with trio.move_on_after(DRAIN_SECONDS):
            await transport.send_all(head + body)
            await transport.send_eof()
            drained = 0
            while drained < DRAIN_BYTES:
                data = await transport.receive_some(16384)
                if not data:
                    break
                drained += len(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(transport)
