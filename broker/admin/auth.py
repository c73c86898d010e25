"""HTTP basic authentication and Admin permissions for the Admin server: an ASGI wrapper around :class:`~broker.admin.app.AdminApp`.

With an authentication module (``<Admin><Authentication>``, else the instance's ``<Authentication>``):
every request needs ``Authorization: Basic`` credentials the module accepts, except paths matching
``<AnonymousPaths>`` (e.g. ``^/metrics$`` for an open Prometheus scrape); the administrator endpoints
(``/amps/administrator/...``: actions, reloads, shutdown) always need them. Without one (AMPS's allow-all
default), statistics are open and the administrator endpoints answer loopback clients only.

Refusals are ``401`` with a ``WWW-Authenticate: Basic realm="..."`` challenge (``403`` for a non-loopback
client without an authentication module), counted in ``broker_security_refusals_total{what="admin"}`` and
written to the audit log (path, address, user; never the password). Accepted credentials are remembered
for :data:`CACHE_SECONDS` (keyed by a keyed hash, not the password) so a scrape every second does not pay a
slow hash every second; an authentication reset (SIGHUP action, the reset endpoint) forgets them all at once,
so a deleted user or a changed password is refused from the next request on.

Refused credentials go through the same limiter as transport logons (per user and client address, with
exponential backoff: :class:`~broker.security.runtime.FailureLimiter`), and are verified in the Admin server's
own share of verification threads, so guessing on one port does not slow logons on the other.

Authorisation (docs/security.md, Admin permissions): once authenticated, the identity's
:class:`~broker.security.AdminRights` come from the instance's entitlement module (``grants(identity)
.admin_rights()``; a module that allows everything, ``grants`` answering ``None``, gives every right). Each
path needs the right :meth:`AdminApp.requirement <broker.admin.app.AdminApp.requirement>` names; a request
without it is answered ``403``, audited and counted like the other refusals, and never reaches the
application (no action runs). The rights are left in the scope for the console. Without an authentication
module nothing changes: statistics are open and loopback clients have every right.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from broker.admin.app import RIGHTS_SCOPE_KEY, USER_SCOPE_KEY, Receive, Scope, Send, allows
from broker.security import (
    ALL_ADMIN_RIGHTS,
    AdminRights,
    AuthenticationRefused,
    Authenticator,
    Identity,
    LogonRequest,
)
from broker.security.entitlement_file import EntitlementFile
from broker.security.runtime import SecurityRuntime, is_loopback

__all__ = ["BasicAuth"]

log = logging.getLogger("broker.security")

ADMIN_PREFIX = "/amps/administrator"
#: Seconds accepted credentials are remembered.
CACHE_SECONDS = 60.0
#: Remembered credentials at most (a bound: the cache starts over past it).
CACHE_ENTRIES = 1024
_TEXT = b"text/plain; charset=utf-8"
#: A client with no credentials where none are asked for (a non-loopback client of an Admin port without
#: authentication, an <AnonymousPaths> path): statistics only.
_STATISTICS_ONLY = AdminRights(statistics=True)
_NO_RIGHTS = AdminRights()


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
        #: Keyed hash of user and password -> the identity the module accepted them as (for its Admin rights).
        self._identities: dict[bytes, Identity] = {}
        entitlement = security.entitlement
        if self.authenticator is not None and isinstance(entitlement, EntitlementFile) \
                and not entitlement.grants_admin():
            log.warning("the Admin server checks credentials but no table of the entitlement file %s grants an "
                        "Admin right, so every request but <AnonymousPaths> is refused (403): add admin = "
                        '["*"] to an administrator\'s table (docs/security.md, Admin permissions)', entitlement.path)
        #: Keyed hash of user and password -> (expiry, the security runtime's credentials generation).
        self._accepted: dict[bytes, tuple[float, int]] = {}

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
            loopback = is_loopback(str(client[0]))
            scope[RIGHTS_SCOPE_KEY] = ALL_ADMIN_RIGHTS if loopback else _STATISTICS_ONLY
            if administrative and not loopback:
                self.security.refused("admin", client="http", remote=remote, user=None,
                                      reason=f"{path[:200]}: an administrator endpoint from a non-loopback client "
                                             "without <Authentication>")
                await _respond(send, 403, b"Administrator endpoints answer loopback clients only unless the Admin "
                               b"server has <Authentication> (docs/security.md).\n")
                return
            await self.app(scope, receive, send)
            return
        if not administrative and self.anonymous is not None and self.anonymous.search(path):
            scope[RIGHTS_SCOPE_KEY] = _STATISTICS_ONLY
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
        rights = self._rights(user, password)
        need = self.app.requirement(path)
        if need is not None and not allows(rights, need):
            right, detail = need
            what = f"the {right} right" if right != "action" else f"the right to run action {detail!r}"
            self.security.refused("admin", client="http", remote=remote, user=user[:64],
                                  reason=f"{path[:200]}: not entitled ({what})")
            await _respond(send, 403, f"Not entitled: {user} lacks {what} on the Admin port; an entitlement file "
                           "table grants it with admin = [...] or admin_actions = [...] (docs/security.md, Admin "
                           "permissions).\n".encode())
            return
        scope[RIGHTS_SCOPE_KEY] = rights
        scope[USER_SCOPE_KEY] = user
        await self.app(scope, receive, send)

    def _rights(self, user: str, password: str) -> AdminRights:
        """The Admin rights of the identity these (accepted) credentials logged on as; none when unknown."""
        identity = self._identities.get(self._cache_key(user, password))
        if identity is None:
            return _NO_RIGHTS
        grants = self.security.entitlement.grants(identity)
        return ALL_ADMIN_RIGHTS if grants is None else grants.admin_rights()

    def _cache_key(self, user: str, password: str) -> bytes:
        return hmac.new(self._key, f"{user}\0{password}".encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    async def _accepts(self, user: str, password: str, remote: str, path: str) -> bool:
        assert self.authenticator is not None
        key = hmac.new(self._key, f"{user}\0{password}".encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        now = self._clock()
        generation = self.security.credentials_generation
        remembered = self._accepted.get(key)
        if remembered is not None:
            if remembered[0] > now and remembered[1] == generation:
                return True
            del self._accepted[key]
            self._identities.pop(key, None)
        host = remote.rpartition(":")[0]
        wait = self.security.blocked_for(user, host)
        if wait > 0:
            self.security.logon_refused(user, host, checked=False)
            self.security.refused("admin", client="http", remote=remote, user=user[:64],
                                  reason=f"{path[:200]}: too many refused requests for this user from {host}; "
                                         f"refused without checking for {wait:.0f}s more")
            return False
        try:
            identity = await self.security.authenticate(self.authenticator, LogonRequest(
                user=user, password=password, client_name=None, remote=remote, transport="admin"), admin=True)
        except AuthenticationRefused as exc:
            self.security.logon_refused(user, host)
            self.security.refused("admin", client="http", remote=remote, user=user[:64],
                                  reason=f"{path[:200]}: {str(exc)[:300]}")
            return False
        self.security.logon_accepted(user, host)
        if self.security.credentials_generation != generation:
            return await self._accepts(user, password, remote, path)  # reset meanwhile: check against the new file
        if len(self._accepted) >= CACHE_ENTRIES:
            self._accepted.clear()
        if len(self._identities) >= CACHE_ENTRIES:
            self._identities.clear()
        self._identities[key] = identity
        self._accepted[key] = (now + CACHE_SECONDS, generation)
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
