"""``amps-default-authentication-module`` and ``amps-default-entitlement-module``: accept every logon and
entitle every command, as AMPS's defaults do. The broker warns at start-up about every transport that listens
beyond loopback with them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from broker import hookimpl
from broker.options import OptionSet
from broker.security import (
    ALLOW_ALL_AUTHENTICATION,
    ALLOW_ALL_ENTITLEMENT,
    Authenticator,
    Entitlements,
    Grants,
    Identity,
    LogonRequest,
)

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["AllowAllAuthentication", "AllowAllEntitlements"]


class AllowAllAuthentication(Authenticator):
    """Every logon is accepted; the identity is the logon's ``user_id`` (else its client name)."""

    checks_credentials = False

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        del options

    def authenticate(self, request: LogonRequest) -> Identity:
        """Accept, naming the identity after ``user_id`` or the client name."""
        return Identity(request.user or request.client_name or "")


class AllowAllEntitlements(Entitlements):
    """Everything is allowed (the session skips every check)."""

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        del options

    def grants(self, identity: Identity) -> Grants | None:
        """``None``: no restriction."""
        return None


@hookimpl
def broker_register_authentication(registry: Registry) -> None:
    """Register the allow-all authentication module under AMPS's name."""
    registry.add(ALLOW_ALL_AUTHENTICATION, AllowAllAuthentication, options=OptionSet(),
                 description="Accept every logon (the default; warned about beyond loopback)")


@hookimpl
def broker_register_entitlements(registry: Registry) -> None:
    """Register the allow-all entitlement module under AMPS's name."""
    registry.add(ALLOW_ALL_ENTITLEMENT, AllowAllEntitlements, options=OptionSet(),
                 description="Entitle every command (the default)")
