"""Example security modules (docs/plugins.md): a static-token authenticator and read-only entitlements.

Load them with ``<Modules><Module><Name>examples</Name><Library>docs/examples/security_modules.py</Library>``
and name them in ``<Authentication>`` / ``<Entitlement>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker import hookimpl
from broker.options import Option, OptionSet
from broker.security import AuthenticationRefused, Authenticator, Entitlements, Grants, Identity, LogonRequest

if TYPE_CHECKING:
    from broker.plugins import Registry


class TokenAuthentication(Authenticator):
    def __init__(self, options):
        self.token = options["Token"]

    def authenticate(self, request: LogonRequest) -> Identity:
        if request.password != self.token:
            raise AuthenticationRefused(f"bad token for {request.user!r}")
        return Identity(request.user or "service")


@hookimpl
def broker_register_authentication(registry: Registry) -> None:
    registry.add("static-token", TokenAuthentication, options=OptionSet(Option("Token", required=True)))


class ReadOnly(Grants):
    def can_read(self, topic):
        return True

    def can_write(self, topic):
        return False

    def can_replay(self, topic):
        return False

    def reads_everything(self):
        return True


class ReadOnlyEntitlements(Entitlements):
    def __init__(self, options):
        pass

    def grants(self, identity: Identity):
        return ReadOnly()


@hookimpl
def broker_register_entitlements(registry: Registry) -> None:
    registry.add("read-only", ReadOnlyEntitlements)
