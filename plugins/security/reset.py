"""``amps-action-do-reset-authentication`` and ``amps-action-do-reset-entitlement``: re-read the files of the
authentication (password file) or entitlement modules, as AMPS's reset actions re-initialise its modules.

Bind them to SIGHUP to reload on ``kill -HUP``::

    <Action>
      <On><Module>amps-action-on-signal</Module><Options><Signal>SIGHUP</Signal></Options></On>
      <Do><Module>amps-action-do-reset-authentication</Module></Do>
      <Do><Module>amps-action-do-reset-entitlement</Module></Do>
    </Action>

A new file that does not parse fails the step (logged) and the old rules stay. After an entitlement reset,
clients whose entitlements changed are disconnected so that they subscribe again under the new rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from broker import hookimpl
from broker.actions.interface import ActionError, RunContext, Step
from broker.errors import BrokerError
from broker.options import OptionSet

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["ResetAuthentication", "ResetEntitlement"]


class _Reset(Step):
    kind = ""

    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # declared empty

    async def run(self, ctx: RunContext) -> str:
        """Reload the modules of this kind.

        Raises:
            ActionError: a new file is unusable (the old rules stay).
        """
        try:
            return ctx.host.reload_security(self.kind)
        except BrokerError as exc:
            raise ActionError(f"{self.kind} not reloaded: {exc}") from None


class ResetAuthentication(_Reset):
    """``amps-action-do-reset-authentication``: re-read the password files."""

    kind = "authentication"


class ResetEntitlement(_Reset):
    """``amps-action-do-reset-entitlement``: re-read the entitlement files."""

    kind = "entitlement"


@hookimpl
def broker_register_actions(registry: Registry) -> None:
    """Register the reset steps."""
    registry.add("amps-action-do-reset-authentication", ResetAuthentication, options=OptionSet(),
                 description="Re-read the authentication modules' files (password files)")
    registry.add("amps-action-do-reset-entitlement", ResetEntitlement, options=OptionSet(),
                 description="Re-read the entitlement files; clients whose entitlements changed are disconnected")
