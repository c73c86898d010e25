"""The broker's security modules, built once from the config: which authenticator and entitlements each
transport (and the Admin server) uses, the audit log, the refusal counters, and reloading.

Audit lines go to the ``broker.audit`` logger at warning level: one per refused logon, refused command or
refused Admin request, with client name, address, user name and reason, never a password nor anything that reads
like one (``refused logon: client feed-3 from 10.1.2.3:50114, user 'svc-feed': wrong password``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

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

__all__ = ["AUDIT", "REFUSAL_KINDS", "FailureLimiter", "RefusalCounts", "SecurityRuntime", "VerificationPool",
           "is_loopback"]

T = TypeVar("T")

AUDIT = logging.getLogger("broker.audit")
log = logging.getLogger("broker.security")

#: What ``broker_security_refusals_total{what}`` counts.
REFUSAL_KINDS = ("logon", "read", "write", "replay", "admin")
#: Password verifications (each ~50 ms and 16 MB of scrypt) run at the same time for the transports' logons,
#: and, separately, for the Admin server's basic authentication: a flood on one share cannot starve the other.
#: More wait their turn (in FIFO order, without a thread each).
CONCURRENT_LOGONS = max(1, min(4, (os.cpu_count() or 2)))
CONCURRENT_ADMIN_LOGONS = 1
#: Niceness of the verification threads (Linux: per thread), so that the event loop wins the CPU from them.
VERIFY_NICENESS = 5
#: Refused logons of one (user, source address) pair that are checked freely; past them the pair waits an
#: exponentially growing time (FAILURE_BASE_DELAY, doubling per further refusal, at most FAILURE_MAX_DELAY)
#: during which its logons are refused without checking. Other users from the same address are unaffected;
#: an accepted logon of the pair starts it over.
FREE_FAILURES = 5
FAILURE_BASE_DELAY = 1.0
FAILURE_MAX_DELAY = 60.0
#: A pair's record is forgotten this long after its last refusal.
FAILURE_FORGET = 900.0
#: (user, address) pairs remembered at most (the least recently refused is forgotten first).
FAILURE_PAIRS = 10_000
#: Longest user name kept in the limiter's key (longer ones are cut: the memory bound holds).
FAILURE_USER_CHARS = 256


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


@dataclass(slots=True)
class _Pair:
    """The refusals of one (user, address) pair."""

    refusals: int = 0
    blocked_until: float = 0.0
    last: float = 0.0


class FailureLimiter:
    """Refused logons per (user, source address), with exponential backoff.

    The first :data:`FREE_FAILURES` refusals of a pair cost nothing more; each checked refusal after them blocks
    the pair for ``FAILURE_BASE_DELAY * 2**(refusals - FREE_FAILURES)`` seconds (at most
    :data:`FAILURE_MAX_DELAY`), during which its logons are refused without hashing (and counted, so a guesser
    that keeps trying meets ever longer blocks). Only the pair is blocked: another user presenting the right
    password from the same address (a NAT, an office) logs on as usual. Memory is bounded by :data:`FAILURE_PAIRS`.

    Args:
        clock: Monotonic seconds.
        pairs: Pairs remembered at most.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, pairs: int = FAILURE_PAIRS) -> None:
        self._clock = clock
        self._pairs: OrderedDict[tuple[str, str], _Pair] = OrderedDict()  # least recently refused first
        self._limit = pairs

    @staticmethod
    def _key(user: str | None, host: str) -> tuple[str, str]:
        return ((user or "")[:FAILURE_USER_CHARS], host)

    def __len__(self) -> int:
        return len(self._pairs)

    def blocked_for(self, user: str | None, host: str) -> float:
        """Seconds ``user`` from ``host`` must still wait before a logon is checked again (0: check it)."""
        key = self._key(user, host)
        pair = self._pairs.get(key)
        if pair is None:
            return 0.0
        now = self._clock()
        if now - pair.last > FAILURE_FORGET:
            del self._pairs[key]
            return 0.0
        return max(0.0, pair.blocked_until - now)

    def refused(self, user: str | None, host: str, *, checked: bool = True) -> float:
        """Count a refused logon of ``user`` from ``host``; ``checked``: its password was verified (and found
        wrong), which may start a block; an unchecked refusal (during a block) only counts.

        Returns:
            Seconds the pair is now blocked for.
        """
        key = self._key(user, host)
        now = self._clock()
        pair = self._pairs.pop(key, None)
        if pair is None or now - pair.last > FAILURE_FORGET:
            pair = _Pair()
        self._pairs[key] = pair  # the most recent at the end
        while len(self._pairs) > self._limit:
            self._pairs.popitem(last=False)
        pair.refusals += 1
        pair.last = now
        if checked and pair.refusals >= FREE_FAILURES:
            exponent = min(pair.refusals - FREE_FAILURES, 32)
            pair.blocked_until = now + min(FAILURE_MAX_DELAY, FAILURE_BASE_DELAY * 2.0 ** exponent)
        return max(0.0, pair.blocked_until - now)

    def accepted(self, user: str | None, host: str) -> None:
        """The pair logged on: forget its refusals."""
        self._pairs.pop(self._key(user, host), None)

    def clear(self) -> None:
        """Forget every pair (the credentials were reset)."""
        self._pairs.clear()


def _lower_priority() -> None:
    """Lower the calling thread's scheduling priority (Linux nice is per thread; elsewhere nothing)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), VERIFY_NICENESS)


class VerificationPool:
    """A few dedicated threads, at a lower priority than the event loop, that verify passwords.

    At most ``threads`` verifications run; more wait in FIFO order on a trio limiter (no thread, no queue in the
    executor, cancellable). With a ``key`` (the client's address), one key holds at most ``threads`` places in
    that queue, so a flood from one address leaves others waiting behind a few of its verifications, not all of
    them. The threads are the pool's own (not trio's shared cache), so lowering their priority touches nothing
    else.

    Args:
        name: Thread name prefix.
        threads: Verifications at the same time.
    """

    def __init__(self, name: str, threads: int) -> None:
        self.name = name
        self.threads = threads
        self._limiter: trio.CapacityLimiter | None = None
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=name, initializer=_lower_priority)
        #: Key -> (its bound on places in the queue, tasks holding or waiting for one); gone when none do.
        self._keys: dict[str, tuple[trio.Semaphore, list[int]]] = {}

    @property
    def limiter(self) -> trio.CapacityLimiter:
        """The limiter verifications wait on (created in the running trio loop)."""
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self.threads)
        return self._limiter

    @property
    def busy(self) -> int:
        """Verifications running now."""
        return 0 if self._limiter is None else int(self._limiter.borrowed_tokens)

    async def run(self, fn: Callable[..., T], *args: Any, key: str | None = None) -> T:
        """Run ``fn(*args)`` in one of the pool's threads and return its result (or raise its exception).

        A cancelled caller stops waiting; a verification already running finishes in its thread (a slot is not
        given back before it does, so the bound holds). ``key``: see the class.
        """
        if key is None:
            return await self._run(fn, *args)
        entry = self._keys.get(key)
        if entry is None:
            entry = self._keys[key] = (trio.Semaphore(self.threads), [0])
        entry[1][0] += 1
        try:
            async with entry[0]:
                return await self._run(fn, *args)
        finally:
            entry[1][0] -= 1
            if not entry[1][0]:
                del self._keys[key]

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        async with self.limiter:
            token = trio.lowlevel.current_trio_token()
            done = trio.Event()

            def wake(_future: Future[T]) -> None:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(done.set)

            future = self._executor.submit(fn, *args)
            future.add_done_callback(wake)
            with trio.CancelScope(shield=True):  # keep the slot until the thread is free again
                await done.wait()
            return future.result()

    def shutdown(self) -> None:
        """Let the threads end (they are daemon-like: nothing waits for them)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


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
        #: Refused logons per (user, address): the transports' and the Admin server's.
        self.failures = FailureLimiter(clock)
        #: Bumped by every authentication reset: credentials remembered under an older value are void.
        self.credentials_generation = 0
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
        self.pool = VerificationPool("broker-verify", CONCURRENT_LOGONS)
        self.admin_pool = VerificationPool("broker-verify-admin", CONCURRENT_ADMIN_LOGONS)
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

    async def authenticate(self, authenticator: Authenticator, request: LogonRequest, *,
                           admin: bool = False) -> Identity:
        """Run ``authenticator`` in a verification thread (a few at a time; ``admin``: in the Admin server's own
        share, so that neither a transport logon flood nor an Admin guessing flood holds up the other).

        Raises:
            AuthenticationRefused: refused by the module, or the module failed (logged with its traceback:
                a broken module refuses rather than lets anyone in).
        """
        if not authenticator.checks_credentials:
            return authenticator.authenticate(request)  # allow-all: no thread
        try:
            return await (self.admin_pool if admin else self.pool).run(
                authenticator.authenticate, request, key=(request.remote or "").rpartition(":")[0])
        except AuthenticationRefused:
            raise
        except Exception as exc:
            log.exception("authentication module %s failed on a logon", type(authenticator).__name__)
            # Only the type: a module's exception text may quote what it was given (the password, say).
            raise AuthenticationRefused(f"the authentication module failed ({type(exc).__name__}; the broker log "
                                        "has its traceback)") from None

    def blocked_for(self, user: str | None, host: str) -> float:
        """Seconds before a logon of ``user`` from ``host`` is checked again (0: check it now); see
        :class:`FailureLimiter`."""
        return self.failures.blocked_for(user, host)

    def logon_refused(self, user: str | None, host: str, *, checked: bool = True) -> float:
        """Remember a refused logon of ``user`` from ``host``; returns the seconds the pair is blocked for."""
        return self.failures.refused(user, host, checked=checked)

    def logon_accepted(self, user: str | None, host: str) -> None:
        """``user`` logged on from ``host``: its earlier refusals are forgotten."""
        self.failures.accepted(user, host)

    def close(self) -> None:
        """Let the verification threads end (the broker is stopping)."""
        self.pool.shutdown()
        self.admin_pool.shutdown()

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
        if kind == "authentication":
            # Revocation is immediate: nothing accepted under the old files is remembered (the Admin server's
            # credential cache checks this number), and the refusal record starts over with the new passwords.
            self.credentials_generation += 1
            self.failures.clear()
        if errors:
            raise BrokerError("; ".join(errors))
        return done
