"""The broker's security modules, built once from the config: which authenticator and entitlements each
transport (and the Admin server) uses, the audit log, the refusal counters, and reloading.

Audit lines go to the ``broker.audit`` logger at warning level: one per refused logon, refused command or
refused Admin request, with client name, address, user name and reason, never a password nor anything that reads
like one (``refused logon: client feed-3 from 10.1.2.3:50114, user 'svc-feed': wrong password``).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from broker.errors import BrokerError, ConfigError
from broker.security import (
    AuthenticationRefused,
    Authenticator,
    Entitlements,
    Identity,
    LogonRequest,
)
from broker.stats.snapshot import SecurityRefusals

if TYPE_CHECKING:
    from broker.config.model import Config
    from broker.plugin_config import Resolved, SecurityPlugins

__all__ = ["AUDIT", "REFUSAL_KINDS", "RefusalCounts", "SecurityRuntime", "is_loopback"]

AUDIT = logging.getLogger("broker.audit")
log = logging.getLogger("broker.security")

#: What ``broker_security_refusals_total{what}`` counts.
REFUSAL_KINDS = ("logon", "read", "write", "replay", "admin")
#: Logons verified at the same time (each may cost ~50 ms and 16 MB of scrypt); more wait their turn.
CONCURRENT_LOGONS = 4
#: Refused logons from one host within FAILURE_WINDOW seconds after which its logons are refused without
#: checking (no hashing: a password-guessing host cannot take the verification threads from everyone else).
FAILURE_LIMIT = 100
FAILURE_WINDOW = 60.0
#: Hosts whose refusals are remembered at most (the record starts over past it).
FAILURE_HOSTS = 10_000


@dataclass(slots=True)
class RefusalCounts:
    """Refusals by what was refused, counted as they happen; :meth:`snapshot` is the statistics value."""

    logon: int = 0
    read: int = 0
    write: int = 0
    replay: int = 0
    admin: int = 0

    def add(self, what: str) -> None:
        """Count one refusal of ``what`` (one of :data:`REFUSAL_KINDS`).

        Raises:
            ValueError: ``what`` is not a refusal kind.
        """
        match what:
            case "logon":
                self.logon += 1
            case "read":
                self.read += 1
            case "write":
                self.write += 1
            case "replay":
                self.replay += 1
            case "admin":
                self.admin += 1
            case _:
                raise ValueError(f"unknown refusal kind {what!r}; one of {', '.join(REFUSAL_KINDS)}")

    def snapshot(self) -> SecurityRefusals:
        """The counts now, as the statistics snapshot holds them."""
        return SecurityRefusals(logon=self.logon, read=self.read, write=self.write, replay=self.replay,
                                admin=self.admin)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a listening address) reaches only this machine."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SecurityRuntime:
    """The modules of one broker.

    Args:
        config: The configuration (transport names and addresses, for the warnings).
        chosen: The resolved module choices (:class:`broker.plugin_config.SecurityPlugins`).

    Raises:
        ConfigError: a module refused its options or could not read its file.
    """

    def __init__(self, config: Config, chosen: SecurityPlugins, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: Host -> times of its recent refused logons.
        self._failures: dict[str, deque[float]] = {}
        self._objects: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}
        self.authentication: Authenticator = self._build("authentication", chosen.authentication)
        self.entitlement: Entitlements = self._build("entitlement", chosen.entitlement)
        self.transports: dict[str, tuple[Authenticator, Entitlements]] = {
            name: (self._build("authentication", a), self._build("entitlement", e))
            for name, (a, e) in chosen.transports.items()
        }
        self.admin: Authenticator | None = (self._build("authentication", chosen.admin)
                                            if chosen.admin is not None else None)
        self.refusals = RefusalCounts()
        self.limiter = trio.CapacityLimiter(CONCURRENT_LOGONS)
        for t in config.transports:
            auth = self.transports.get(t.name, (self.authentication, None))[0]
            if not auth.checks_credentials and not is_loopback(t.host):
                log.warning("transport %s listens on %s:%s without authentication: anyone who can reach it may "
                            "log on as anyone, publish to every topic and read every SOW. Add "
                            "<Authentication> (docs/security.md), or listen on 127.0.0.1 only",
                            t.name, t.host or "0.0.0.0", t.port)
            elif auth.checks_credentials and t.tls is None and not is_loopback(t.host):
                log.warning("transport %s listens on %s:%s with authentication but without TLS: passwords cross "
                            "the network in clear text. Use <Type>tcps</Type> (docs/security.md)",
                            t.name, t.host or "0.0.0.0", t.port)
        if config.admin is not None and (self.admin is None or not self.admin.checks_credentials) \
                and not is_loopback(config.admin.host):
            log.warning("the Admin server listens on %s:%s without authentication: anyone who can reach it may "
                        "read statistics (administrator endpoints answer loopback clients only). Add "
                        "<Authentication> to <Admin> (docs/security.md)", config.admin.host, config.admin.port)

    def _build(self, kind: str, chosen: Resolved) -> Any:
        key = (kind, chosen.name, tuple(sorted(chosen.options.items())))
        if key not in self._objects:
            try:
                self._objects[key] = chosen.factory(dict(chosen.options))
            except BrokerError as exc:
                raise ConfigError(f"{chosen.where}: {kind} module {chosen.name!r} cannot start: {exc}") from None
            log.info("%s module %s%s", kind, chosen.name,
                     f" ({', '.join(f'{k}={v}' for k, v in sorted(chosen.options.items()))})"
                     if chosen.options else "")
        return self._objects[key]

    # -- per transport -------------------------------------------------------------------------------
    def for_transport(self, name: str) -> tuple[Authenticator, Entitlements]:
        """The authenticator and entitlements of transport ``name`` (the instance's when it has none)."""
        return self.transports.get(name, (self.authentication, self.entitlement))

    @property
    def open(self) -> bool:
        """Whether every transport accepts every logon with no restriction (the fast default)."""
        return all(not a.checks_credentials for a, _e in self.transports.values())

    async def authenticate(self, authenticator: Authenticator, request: LogonRequest) -> Identity:
        """Run ``authenticator`` in a worker thread (a few at a time).

        Raises:
            AuthenticationRefused: refused by the module, or the module failed (logged with its traceback:
                a broken module refuses rather than lets anyone in).
        """
        if not authenticator.checks_credentials:
            return authenticator.authenticate(request)  # allow-all: no thread
        try:
            return await trio.to_thread.run_sync(authenticator.authenticate, request, limiter=self.limiter)
        except AuthenticationRefused:
            raise
        except Exception as exc:
            log.exception("authentication module %s failed on a logon", type(authenticator).__name__)
            # Only the type: a module's exception text may quote what it was given (the password, say).
            raise AuthenticationRefused(f"the authentication module failed ({type(exc).__name__}; the broker log "
                                        "has its traceback)") from None

    def too_many_failures(self, host: str) -> bool:
        """Whether ``host`` had :data:`FAILURE_LIMIT` refused logons within the last :data:`FAILURE_WINDOW`
        seconds (its logons are then refused without checking until the window moves on)."""
        times = self._failures.get(host)
        if not times:
            return False
        horizon = self._clock() - FAILURE_WINDOW
        while times and times[0] < horizon:
            times.popleft()
        return len(times) >= FAILURE_LIMIT

    def logon_failed(self, host: str) -> None:
        """Remember a refused logon from ``host``."""
        if host not in self._failures and len(self._failures) >= FAILURE_HOSTS:
            self._failures.clear()
        times = self._failures.setdefault(host, deque(maxlen=FAILURE_LIMIT))
        times.append(self._clock())

    # -- audit ---------------------------------------------------------------------------------------
    def refused(self, what: str, *, client: str, remote: str, user: str | None, reason: str) -> None:
        """Count a refusal and write its audit line.

        Args:
            what: One of :data:`REFUSAL_KINDS`.
            client: The client name (``http`` for the Admin server).
            remote: The client's address.
            user: The user name as sent (quoted in the line; ``None`` or empty: ``(none)``). Never a password.
            reason: Why, in words that carry no secret (``wrong password``, not the password).
        """
        self.refusals.add(what)
        AUDIT.warning("refused %s: client %s from %s, user %s: %s", what, client or "-", remote or "?",
                      repr(user) if user else "(none)", reason)

    def count_refusal(self, what: str) -> None:
        """Count a refusal without an audit line (the caller rate-limits its audit lines)."""
        self.refusals.add(what)

    def statistics(self) -> SecurityRefusals:
        """Refusals by kind (``broker_security_refusals_total``)."""
        return self.refusals.snapshot()

    # -- reloading -----------------------------------------------------------------------------------
    def reload(self, kind: str) -> list[str]:
        """Re-read the files of every module of ``kind`` (``authentication`` or ``entitlement``).

        Returns:
            One line per module, for the log and the action's result.

        Raises:
            BrokerError: a module's new file is unusable (that module keeps its old rules; the others reload).
        """
        done: list[str] = []
        errors: list[str] = []
        for (k, name, _opts), module in self._objects.items():
            if k != kind:
                continue
            try:
                done.append(f"{name}: {module.reload()}")
            except BrokerError as exc:
                errors.append(f"{name}: {exc} (the old rules stay)")
        for line in done:
            log.info("reloaded %s module %s", kind, line)
        if errors:
            raise BrokerError("; ".join(errors))
        return done
