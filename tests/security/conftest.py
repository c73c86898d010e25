"""Fixtures for the security tests: a password file, an entitlement file, and brokers that use them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.security.passwords import set_password
from broker.testing.process import BrokerProcess

#: Users of the shared password file and their passwords.
USERS = {"alice": "alice-pw", "reader": "reader-pw", "eu": "eu-pw", "admin": "admin-pw"}

ENTITLEMENTS = """
[user.alice]
read = [".*"]
write = ["orders", "events"]
replay = ["orders", "events"]

[user.reader]
read = ["orders"]

[group.europe]
members = ["eu"]
read = ["orders"]
replay = ["orders"]
filter = { orders = "/region = 'EU'" }

[user.admin]
read = [".*"]
write = [".*"]
replay = [".*"]
admin = ["*"]
"""

SECURE = """
<Authentication><Module>password-file</Module><Options><PasswordFile>users.passwd</PasswordFile></Options>
</Authentication>
<Entitlement><Module>entitlement-file</Module><Options><EntitlementFile>entitlements.toml</EntitlementFile>
</Options></Entitlement>
"""

ORDERS = """
<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key><Durability>transient</Durability></Topic>
"""


@pytest.fixture(scope="module")
def security_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``users.passwd`` (``USERS``) and ``entitlements.toml`` (``ENTITLEMENTS``)."""
    directory = tmp_path_factory.mktemp("security")
    for user, password in USERS.items():
        set_password(directory / "users.passwd", user, password)
    (directory / "entitlements.toml").write_text(ENTITLEMENTS)
    return directory


@pytest.fixture(scope="module")
def secure_broker(security_dir: Path) -> Iterator[BrokerProcess]:
    """One broker for the module: password file, entitlement file, the orders SOW, a journal, an Admin port
    with basic authentication."""
    journal = (security_dir / "journal").as_posix()
    proc = BrokerProcess.from_xml(
        security_dir, admin=True, sow=ORDERS,
        transaction_log=f"<JournalDirectory>{journal}</JournalDirectory>"
                        "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>",
        extra=SECURE,
    ).start()
    yield proc
    proc.stop()


def uri(proc: BrokerProcess, user: str, password: str | None = None) -> str:
    """The JSON URI of ``proc`` with credentials."""
    secret = USERS.get(user, "") if password is None else password
    return f"tcp://{user}:{secret}@127.0.0.1:{proc.port}/amps/json"
