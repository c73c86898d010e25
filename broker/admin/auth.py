"""HTTP basic authentication for the Admin server: an ASGI wrapper around :class:`~broker.admin.app.AdminApp`.

With an authentication module (``<Admin><Authentication>``, else the instance's ``<Authentication>``):
every request needs ``Authorization: Basic`` credentials the module accepts, except paths matching
``<AnonymousPaths>`` (e.g. ``^/metrics$`` for an open Prometheus scrape); the administrator endpoints
(``/amps/administrator/...``: actions, reloads, shutdown) always need them. Without one (AMPS's allow-all
default), statistics are open and the administrator endpoints answer loopback clients only.

Refusals are ``401`` with a ``WWW-Authenticate: Basic realm="..."`` challenge (``403`` for a non-loopback
client without an authentication module), counted in ``broker_security_refusals_total{what="admin"}`` and
written to the audit log (path, address, user; never the password). Accepted credentials are remembered
for :data:`CACHE_SECONDS` (keyed by a keyed hash, not the password) so a scrape every second does not pay a
slow hash every second.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from broker.admin.app import Receive, Scope, Send
from broker.security import AuthenticationRefused, Authenticator, LogonRequest
from broker.security.runtime import SecurityRuntime, is_loopback

__all__ = ["BasicAuth"]

ADMIN_PREFIX = "/amps/administrator"
#: Seconds accepted credentials are remembered.
CACHE_SECONDS = 60.0
#: Remembered credentials at most (a bound: the cache starts over past it).
CACHE_ENTRIES = 1024
_TEXT = b"text/plain; charset=utf-8"


class BasicAuth:
    """Wrap ``app`` with HTTP basic authentication.

    Args:
        app: The ASGI application.
        security: The broker's security runtime (authentication in worker threads, audit, counters).
        authenticator: The module that checks credentials; ``None`` or an allow-all module: none are asked
            for, and administrator endpoints are served to loopback clients only.
        realm: The realm of the challenge.
        anonymous_paths: A regex of paths served without credentials (never an administrator path).
        clock: Monotonic seconds (tests).
    """

    def __init__(self, app: Any, security: SecurityRuntime, authenticator: Authenticator | None, *,
                 realm: str = "broker", anonymous_paths: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.security = security
        self.authenticator = authenticator if authenticator is not None and authenticator.checks_credentials \
            else None
        self.challenge = f'Basic realm="{realm}", charset="UTF-8"'.encode("latin-1", "replace")
        self.anonymous = re.compile(anonymous_paths) if anonymous_paths else None
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._accepted: dict[bytes, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)  # the wrapped app's sampler, registry... (tests and the kernel use them)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point: check, then hand over to the wrapped application."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        administrative = path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")
        client = scope.get("client") or ("", 0)
        remote = f"{client[0]}:{client[1]}"
        if self.authenticator is None:
            if administrative and not is_loopback(str(client[0])):
                self.security.refused("admin", client="http", remote=remote, user=None,
                                      reason=f"{path[:200]}: an administrator endpoint from a non-loopback client "
                                             "without <Authentication>")
                await _respond(send, 403, b"Administrator endpoints answer loopback clients only unless the Admin "
                               b"server has <Authentication> (docs/security.md).\n")
                return
            await self.app(scope, receive, send)
            return
        if not administrative and self.anonymous is not None and self.anonymous.search(path):
            await self.app(scope, receive, send)
            return
        user, password = _credentials(scope)
        if user is None or password is None:
            self.security.refused("admin", client="http", remote=remote, user=None,
                                  reason=f"{path[:200]}: no credentials")
            await self._challenge(send)
            return
        if not await self._accepts(user, password, remote, path):
            await self._challenge(send)
            return
        await self.app(scope, receive, send)

    async def _accepts(self, user: str, password: str, remote: str, path: str) -> bool:
        assert self.authenticator is not None
        key = hmac.new(self._key, f"{user}\0{password}".encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        now = self._clock()
        until = self._accepted.get(key)
        if until is not None and until > now:
            return True
        try:
            await self.security.authenticate(self.authenticator, LogonRequest(
                user=user, password=password, client_name=None, remote=remote, transport="admin"))
        except AuthenticationRefused as exc:
            self.security.refused("admin", client="http", remote=remote, user=user[:64],
                                  reason=f"{path[:200]}: {str(exc)[:300]}")
            return False
        if len(self._accepted) >= CACHE_ENTRIES:
            self._accepted.clear()
        self._accepted[key] = now + CACHE_SECONDS
        return True

    async def _challenge(self, send: Send) -> None:
        await _respond(send, 401, b"Authentication required: send HTTP basic credentials of a user of the "
                       b"password file.\n", [(b"www-authenticate", self.challenge)])


def _credentials(scope: Scope) -> tuple[str | None, str | None]:
    """User and password of an ``Authorization: Basic`` header (``None``s when absent or malformed)."""
    for name, value in scope.get("headers", []):
        if name.lower() != b"authorization":
            continue
        scheme, _, encoded = value.partition(b" ")
        if scheme.lower() != b"basic" or len(encoded) > 8192:
            return None, None
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None, None
        user, sep, password = decoded.partition(":")
        return (user, password) if sep else (None, None)
    return None, None


async def _respond(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", _TEXT), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})
