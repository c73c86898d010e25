"""``password-file`` authentication and ``entitlement-file`` entitlements.

``password-file``
    Option ``PasswordFile`` (required): the file ``broker passwd FILE USER`` writes (salted scrypt hashes,
    :mod:`broker.security.passwords`). A logon needs ``user_id`` and ``pw`` matching a line; the identity is
    the user with the groups the line names.
``entitlement-file``
    Option ``EntitlementFile`` (required): a TOML file of per-user and per-group topic regexes for read,
    write and replay, with an optional filter per topic (:mod:`broker.security.entitlement_file`).

Both re-read their file on ``reload`` (SIGHUP bound to ``amps-action-do-reset-authentication`` /
``-entitlement``, or ``/amps/administrator/authorization/*/reset``); a new file that does not parse is
refused and the old rules stay.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from broker import hookimpl
from broker.options import Option, OptionSet, text
from broker.security import AuthenticationRefused, Authenticator, Identity, LogonRequest
from broker.security.entitlement_file import EntitlementFile
from broker.security.passwords import MAX_PASSWORD_BYTES, PasswordFile

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["PasswordFileAuthentication"]

log = logging.getLogger("broker.security")

PASSWORD_OPTIONS = OptionSet(
    Option("PasswordFile", text, required=True, doc="The password file (`broker passwd FILE USER` writes it)"),
)
ENTITLEMENT_OPTIONS = OptionSet(
    Option("EntitlementFile", text, required=True, doc="The TOML entitlement file"),
)


class PasswordFileAuthentication(Authenticator):
    """Logons checked against a password file."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.path = PASSWORD_OPTIONS.parse(options, owner="authentication module 'password-file'")["PasswordFile"]
        self._lock = threading.Lock()
        self._file = PasswordFile.read(self.path)
        _warn_if_readable(self.path)

    def authenticate(self, request: LogonRequest) -> Identity:
        """Accept ``user_id`` + ``pw`` when they match the file.

        Raises:
            AuthenticationRefused: no user or password, an unknown user or a wrong password.
        """
        user, password = request.user, request.password
        if not user:
            raise AuthenticationRefused("the logon has no user_id")
        if password is None or password == "":
            raise AuthenticationRefused("no password sent")
        if len(password.encode("utf-8", "surrogatepass")) > MAX_PASSWORD_BYTES:
            raise AuthenticationRefused(f"the password sent is longer than {MAX_PASSWORD_BYTES} bytes")
        with self._lock:
            current = self._file
        entry = current.check(user, password)
        if entry is None:
            # The audit line names the user already: the reason says what was wrong, and nothing that reads
            # like the secret ("wrong password 'alice'" looked as if the password were alice).
            raise AuthenticationRefused("unknown user" if user not in current.users else "wrong password")
        return Identity(entry.user, entry.groups)

    def reload(self) -> str:
        """Re-read the password file (the old one stays when the new one is unusable)."""
        new = PasswordFile.read(self.path)
        with self._lock:
            self._file = new
        _warn_if_readable(self.path)
        return f"password file {self.path}: {len(new.users)} users"

    def knows(self, identity: Identity) -> bool:
        """Whether the user is still in the password file (as last read)."""
        with self._lock:
            return identity.user in self._file.users


def _warn_if_readable(path: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the password file %s can be read by other users (mode %o): chmod 600 it", path,
                    stat.S_IMODE(mode))


def _entitlement_file(options: Mapping[str, str]) -> EntitlementFile:
    path = ENTITLEMENT_OPTIONS.parse(options, owner="entitlement module 'entitlement-file'")["EntitlementFile"]
    return EntitlementFile(path)


@hookimpl
def broker_register_authentication(registry: Registry) -> None:
    """Register ``password-file``."""
    registry.add("password-file", PasswordFileAuthentication, options=PASSWORD_OPTIONS,
                 description="user_id + pw checked against salted scrypt hashes (broker passwd)")


@hookimpl
def broker_register_entitlements(registry: Registry) -> None:
    """Register ``entitlement-file``."""
    registry.add("entitlement-file", _entitlement_file, options=ENTITLEMENT_OPTIONS,
                 description="Per user/group topic regexes for read/write/replay, optional filters (TOML)")
