"""Security reload: re-read the authentication or entitlement modules' files while the broker runs.

Asked for by SIGHUP actions, the Admin server (``/amps/administrator/authorization/<kind>/reset``) and action
modules (:meth:`broker.actions.host.BrokerHost.reload_security`). After an entitlement reload, each logged-on
client whose grants changed is disconnected, so its subscriptions are placed again under the new rules (none
keeps a filter it is no longer held to). After an authentication reload, each logged-on client whose identity
the module no longer knows (a user removed from the password file) is disconnected.

Layer (see ``tests/server/test_server_layering.py``): a service; it knows sessions only as :class:`Entitled`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from broker.security.runtime import SecurityRuntime
from broker.server.counters import BrokerCounters

log = logging.getLogger("broker")


class Entitled(Protocol):
    """What a reload needs of a connected client (:class:`~broker.server.session.Session`)."""

    def grants_changed(self) -> bool:
        """Whether its identity's grants under the reloaded rules differ from those it logged on with."""

    def identity_removed(self) -> bool:
        """Whether its identity is gone from the reloaded authentication files."""

    def close(self, reason: str) -> bool:
        """Disconnect it with ``reason``; whether this call closed it."""


class SecurityReload:
    """Reloads the security modules and disconnects the clients whose entitlements changed.

    Args:
        security: The authentication and entitlement modules.
        sessions: The connected clients (iterated afresh at each reload).
        counters: Where ``entitlement_change_disconnects`` is counted.
    """

    def __init__(self, security: SecurityRuntime, sessions: Iterable[Entitled], counters: BrokerCounters) -> None:
        self._security = security
        self._sessions = sessions
        self._counters = counters

    def reload(self, kind: str) -> str:
        """Re-read the files of the ``authentication`` or ``entitlement`` modules; returns a summary.

        Raises:
            BrokerError: a new file is unusable; its module keeps the old rules.
        """
        lines = self._security.reload(kind)
        closed = 0
        for session in list(self._sessions):
            if kind == "entitlement" and session.grants_changed():
                closed += 1
                if session.close("its entitlements changed"):
                    self._counters.entitlement_change_disconnects += 1
            elif kind == "authentication" and session.identity_removed():
                closed += 1
                session.close("its user was removed from the authentication files")
        summary = "; ".join(lines) or f"no {kind} module reads files"
        if closed and kind == "entitlement":
            summary += f"; {closed} client(s) whose entitlements changed were disconnected"
        elif closed:
            summary += f"; {closed} client(s) whose user was removed were disconnected"
        log.info("%s reloaded: %s", kind, summary)
        return summary

    async def reset(self, kind: str) -> str:
        """The Admin server's ``authorization/<kind>/reset``: :meth:`reload`."""
        return self.reload(kind)
