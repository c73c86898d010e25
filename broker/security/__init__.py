"""Authentication and entitlements: the objects the broker asks "who is this?" and "may they?".

An *authentication module* (hook ``broker_register_authentication``) turns a logon's user, password (or
token) and client name into an :class:`Identity`, or refuses it with :class:`AuthenticationRefused`. An
*entitlement module* (hook ``broker_register_entitlements``) turns an identity into :class:`Grants`: may it
read, write, replay a topic, and which records of a topic it may see (a content filter). Both are chosen in
the config with AMPS's ``<Authentication>`` / ``<Entitlement>`` (``<Module>`` + ``<Options>``), for the
instance and per transport; ``docs/security.md`` is the user's guide.

Modules are called rarely and off the hot path: ``authenticate`` once per logon, in a worker thread (it may
be slow on purpose: salted slow hashes); ``grants`` once per logon on the event loop (cheap: compile and
cache per identity). The session keeps the grants and asks them per command; a topic's answers are
memoised per session.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.errors import BrokerError

__all__ = [
    "ALLOW_ALL_AUTHENTICATION",
    "ALLOW_ALL_ENTITLEMENT",
    "ADMIN_RIGHT_NAMES",
    "ALL_ADMIN_RIGHTS",
    "NO_ADMIN_RIGHTS",
    "AdminRights",
    "AuthenticationRefused",
    "Authenticator",
    "Entitlements",
    "Grants",
    "Identity",
    "LogonRequest",
]

#: AMPS's names of the built-in modules that accept every logon and entitle every command.
ALLOW_ALL_AUTHENTICATION = "amps-default-authentication-module"
ALLOW_ALL_ENTITLEMENT = "amps-default-entitlement-module"


class AuthenticationRefused(BrokerError):
    """A logon is refused. The message is for the audit log (never the password); the client only hears
    AMPS's ``authentication failure``."""


@dataclass(frozen=True)
class LogonRequest:
    """What a logon says about who it is.

    Attributes:
        user: ``user_id`` from the logon (``None`` when the client sent none).
        password: ``pw``: a password or a token (``None`` when absent). Never log it.
        client_name: ``client_name``.
        remote: The peer address (``host:port``), for modules that restrict by address.
        transport: The name of the transport the client connected through (``"admin"`` for the Admin port).
    """

    user: str | None
    password: str | None = field(default=None, repr=False)
    client_name: str | None = None
    remote: str = ""
    transport: str = ""


@dataclass(frozen=True)
class Identity:
    """Who a connection is, once its logon is accepted.

    Attributes:
        user: The authenticated user name (entitlements are looked up by it).
        groups: Groups the authentication module knows the user to be in (entitlement files may add more).
    """

    user: str
    groups: frozenset[str] = frozenset()


class Authenticator(abc.ABC):
    """An authentication module's object (what its registered factory returns)."""

    #: ``False`` only for a module that accepts everyone (the broker then warns about open transports).
    checks_credentials: bool = True

    @abc.abstractmethod
    def authenticate(self, request: LogonRequest) -> Identity:
        """Accept the logon with an identity, or refuse it.

        Called in a worker thread (it may block: slow hashes, a directory server); at most a few at a time.

        Raises:
            AuthenticationRefused: the logon is refused; the message says why, for the audit log.
        """

    def reload(self) -> str:
        """Re-read whatever the module reads from files (SIGHUP action, ``amps-action-do-reset-authentication``,
        ``/amps/administrator/authorization/authentication/reset``); returns a line for the log.

        Raises:
            BrokerError: the new files are unusable; the module keeps what it had.
        """
        return "nothing to reload"

    def knows(self, identity: Identity) -> bool:
        """Whether ``identity``, which this module accepted earlier, still exists under its current files.

        Asked after :meth:`reload` for each logged-on session: ``False`` disconnects it (a user removed from a
        password file loses its live connections at the reset, not only its next logon). Runs on the event loop,
        once per session: answer from memory. By default every identity is still known.
        """
        return True


#: The Admin rights an entitlement file names (``admin = [...]``); ``"*"`` means all four.
ADMIN_RIGHT_NAMES = ("statistics", "actions", "reset", "shutdown")


@dataclass(frozen=True)
class AdminRights:
    """What an identity may do on the Admin port (docs/security.md, Admin permissions).

    Attributes:
        statistics: Read ``/metrics``, ``/amps...``, the console and its JSON, and the action listings.
        actions: Run every administrator action (below ``/amps/administrator/actions/``) except those that shut
            the broker down.
        action_paths: Run the actions whose path (below ``/amps/administrator/actions/``) one of these
            answers ``True`` for (the entitlement file's ``admin_actions`` regexes).
        reset: Reload the password and entitlement files (``/amps/administrator/authorization/*/reset``).
        shutdown: Run an action that shuts the broker down (one with an ``amps-action-do-shutdown`` step).
    """

    statistics: bool = False
    actions: bool = False
    action_paths: tuple[Callable[[str], bool], ...] = ()
    reset: bool = False
    shutdown: bool = False

    def may_run(self, path: str) -> bool:
        """May it run the action at ``path`` (below ``/amps/administrator/actions/``; not a shutdown one)?"""
        return self.actions or any(match(path) for match in self.action_paths)

    def any(self) -> bool:
        """Whether it may do anything at all on the Admin port."""
        return self.statistics or self.actions or bool(self.action_paths) or self.reset or self.shutdown

    def names(self) -> list[str]:
        """The rights it has by name (``actions`` only when it may run every action)."""
        return [n for n in ADMIN_RIGHT_NAMES if getattr(self, n)]


#: Every Admin right: an Admin port without authentication (to loopback clients), or an entitlement module
#: that allows everything (``grants`` answers ``None``).
ALL_ADMIN_RIGHTS = AdminRights(statistics=True, actions=True, reset=True, shutdown=True)
#: No Admin right: the default of every identity an entitlement file does not grant one to.
NO_ADMIN_RIGHTS = AdminRights()


class Grants(abc.ABC):
    """What one identity may do. Answers must be pure functions of the topic (sessions memoise them)."""

    @abc.abstractmethod
    def can_read(self, topic: str) -> bool:
        """May it subscribe to / query ``topic``?"""

    @abc.abstractmethod
    def can_write(self, topic: str) -> bool:
        """May it publish to / delete from ``topic``?"""

    @abc.abstractmethod
    def can_replay(self, topic: str) -> bool:
        """May it replay ``topic`` from the transaction log (a bookmark subscription)?"""

    def read_filter(self, topic: str) -> str | None:
        """A content filter restricting which messages and SOW records of ``topic`` it sees (``None``: all)."""
        return None

    def reads_everything(self) -> bool:
        """Whether it may read every topic without a filter (then regex topics need no per-topic answer)."""
        return False

    def admin_rights(self) -> AdminRights:
        """What it may do on the Admin port; by default nothing (a module grants Admin rights explicitly)."""
        return NO_ADMIN_RIGHTS


class Entitlements(abc.ABC):
    """An entitlement module's object (what its registered factory returns)."""

    @abc.abstractmethod
    def grants(self, identity: Identity) -> Grants | None:
        """The grants of ``identity``; ``None``: everything is allowed (the session skips every check)."""

    def reload(self) -> str:
        """Re-read the module's files; returns a line for the log.

        Raises:
            BrokerError: the new files are unusable; the module keeps what it had.
        """
        return "nothing to reload"
