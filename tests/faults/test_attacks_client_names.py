"""A client name belongs to the identity that holds it (issue 34).

Measured before the fix (2026-12-01): with authentication on, user ``pub`` logging on under the client name
``alice`` was using disconnected alice and took over her de-duplication state: pub's publish with s=999,000
was acked, alice's logon then reported ``…|999000|`` and her next publishes (s=6-10) were acked persisted and
dropped (the journal held 5 of 10). On an open broker a name never seen before accepted s=10^15 as its first
sequence, with the same effect on the publisher that later used the name.

Now: with authentication, a logon under a name another user holds (or held within the de-duplication window)
is refused with ``name in use`` (the official client raises NameInUseException) and audited; with
``<AllowClientNameTakeover>`` the takeover happens, but de-duplication is keyed by identity and client name, so
nothing of the owner's is lost. On an open transport a publisher's first sequence is held to the jump limit,
counted from zero.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import AMPS
import pytest

from broker.protocol import Connection
from broker.security.passwords import set_password
from broker.testing.process import BrokerProcess
from tests.e2e.raw_amps import Raw

USERS = {"alice": "alice-pw", "pub": "pub-pw", "auditor": "auditor-pw"}
ENTITLEMENTS = """
[user.alice]
read = ["orders"]
write = ["orders"]

[user.pub]
read = ["orders"]
write = ["orders"]

[user.auditor]
read = ["orders"]
replay = ["orders"]
"""
SECURE = """
<Authentication><Module>password-file</Module><Options><PasswordFile>users.passwd</PasswordFile></Options>
</Authentication>
<Entitlement><Module>entitlement-file</Module><Options><EntitlementFile>entitlements.toml</EntitlementFile>
</Options></Entitlement>
"""
NAME = "feed-1"


class RawUser(Raw):
    """A raw connection logged on with a user and password (``logon`` holds the logon ack)."""

    def __init__(self, port: int, name: str, user: str, password: str) -> None:  # noqa: D107
        import socket

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10.0)
        self.conn = Connection()
        self.send({"c": "logon", "cid": "L", "client_name": name, "user_id": user, "pw": password,
                   "a": "processed", "mt": "json"})
        self.logon = self.ack("L", "processed")

    def last_persisted(self) -> int:
        """The sequence the logon ack reports as persisted for this publisher (``bm`` is ``<hash>|<s>|``)."""
        return int(self.logon["bookmark"].split("|")[1])


def _journal(directory: Path) -> str:
    return (f"<JournalDirectory>{directory / 'journal'}</JournalDirectory><FlushInterval>10ms</FlushInterval>"
            "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>")


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers (with a journal on ``orders``; ``secure``: password and entitlement files; ``extra``:
    more instance elements); all stopped at the end."""
    started: list[BrokerProcess] = []

    def make(*, secure: bool, extra: str = "") -> BrokerProcess:
        if secure:
            for user, password in USERS.items():
                set_password(tmp_path / "users.passwd", user, password)
            (tmp_path / "entitlements.toml").write_text(ENTITLEMENTS)
        proc = BrokerProcess.from_xml(tmp_path, transaction_log=_journal(tmp_path),
                                      extra=(SECURE if secure else "") + extra).start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


def _replayed(broker: BrokerProcess, count: int, user: str | None = "auditor") -> list[dict]:
    """The ``orders`` messages of a bookmark replay from the start of the journal (as ``user``; ``None``: no
    credentials), once ``count`` arrived (or 10 s passed) and nothing more came for a moment."""
    client = AMPS.Client(f"replay-{time.monotonic_ns()}")
    credentials = f"{user}:{USERS[user]}@" if user else ""
    client.connect(f"tcp://{credentials}127.0.0.1:{broker.port}/amps/json")
    client.logon(5000)
    got: list[dict] = []
    enough = threading.Event()

    def on_message(message: AMPS.Message) -> None:
        if message.get_command() in ("p", "publish"):
            got.append(json.loads(message.get_data()))
            if len(got) >= count:
                enough.set()

    try:
        client.bookmark_subscribe(on_message, "orders", "0", timeout=5000)
        enough.wait(10)
        time.sleep(0.3)  # nothing more arrives (a duplicate, a poison)
    finally:
        client.close()
    return list(got)


def _wait_for(broker: BrokerProcess, text: str) -> str:
    deadline = time.monotonic() + 5
    while text not in broker.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    return broker.log()


def test_another_users_logon_under_a_held_name_is_refused_and_audited(make_broker) -> None:
    broker = make_broker(secure=True)
    alice = RawUser(broker.port, NAME, "alice", USERS["alice"])
    assert alice.logon["status"] == "success"
    for s in range(1, 6):
        assert alice.publish(s, json.dumps({"n": s, "by": "alice"}))["status"] == "success"

    # The official client: the logon fails with the reason it knows for a name in use.
    impostor = AMPS.Client(NAME)
    impostor.connect(f"tcp://pub:{USERS['pub']}@127.0.0.1:{broker.port}/amps/json")
    with pytest.raises(AMPS.NameInUseException):
        impostor.logon(5000)
    impostor.close()
    # Raw frames: the refused logon leaves nothing to publish with.
    raw = RawUser(broker.port, NAME, "pub", USERS["pub"])
    assert (raw.logon["status"], raw.logon.get("reason")) == ("failure", "name in use")
    raw.send({"c": "p", "t": "orders", "cid": "poison", "s": 999_000, "a": "persisted"}, b'{"n":"poison"}')
    refused = raw.ack("poison")
    assert refused["status"] == "failure", refused
    raw.close()

    # Alice was not disconnected and loses nothing: her own numbering goes on.
    for s in range(6, 11):
        assert alice.publish(s, json.dumps({"n": s, "by": "alice"}))["status"] == "success"
    alice.close()
    again = RawUser(broker.port, NAME, "alice", USERS["alice"])
    assert again.logon["status"] == "success" and again.last_persisted() == 10
    again.close()

    assert [m["n"] for m in _replayed(broker, 10)] == list(range(1, 11))
    log = _wait_for(broker, "user 'pub'")
    assert f"refused logon: client {NAME} from 127.0.0.1:" in log
    assert f"user 'pub': client name '{NAME}' belongs to user 'alice'" in log


def test_a_takeover_allowed_by_the_config_cannot_drop_the_owners_publishes(make_broker) -> None:
    broker = make_broker(secure=True, extra="<AllowClientNameTakeover>true</AllowClientNameTakeover>")
    alice = RawUser(broker.port, NAME, "alice", USERS["alice"])
    for s in range(1, 6):
        assert alice.publish(s, json.dumps({"n": s, "by": "alice"}))["status"] == "success"

    pub = RawUser(broker.port, NAME, "pub", USERS["pub"])
    assert pub.logon["status"] == "success" and pub.last_persisted() == 0  # alice's state is not pub's
    assert list(alice.frames()) == [], "alice was not disconnected by the takeover"
    assert pub.publish(999_000, '{"n":"pub","by":"pub"}')["status"] == "success"
    pub.close()

    alice = RawUser(broker.port, NAME, "alice", USERS["alice"])
    assert alice.last_persisted() == 5  # not 999000
    for s in range(6, 11):
        assert alice.publish(s, json.dumps({"n": s, "by": "alice"}))["status"] == "success"
    alice.close()

    got = _replayed(broker, 11)
    assert [m["n"] for m in got if m["by"] == "alice"] == list(range(1, 11))
    assert [m["n"] for m in got if m["by"] == "pub"] == ["pub"]
    assert "took the name over from user 'alice'" in _wait_for(broker, "took the name over")


def test_the_same_user_reconnecting_keeps_its_sequence(make_broker) -> None:
    """An official client with a publish store, as alice, twice under one name: the second logon is told what
    the first persisted, and nothing is applied twice."""
    broker = make_broker(secure=True)
    uri = f"tcp://alice:{USERS['alice']}@127.0.0.1:{broker.port}/amps/json"
    store = AMPS.MemoryPublishStore()
    for run in range(2):
        client = AMPS.Client(NAME)
        client.set_publish_store(store)
        client.connect(uri)
        client.logon(5000)  # the second logon takes the name over from nobody: it is alice's
        for n in range(5):
            client.publish("orders", json.dumps({"n": run * 5 + n, "by": "alice"}))
        client.publish_flush(5000)
        client.close()
    again = RawUser(broker.port, NAME, "alice", USERS["alice"])
    assert again.last_persisted() == store.get_last_persisted() > 0
    again.close()
    assert sorted(m["n"] for m in _replayed(broker, 10)) == list(range(10))


def test_a_name_stays_its_users_across_a_restart(make_broker) -> None:
    """The holders are saved at a clean stop next to the journal: after the restart pub is still refused, and
    alice's logon reports her own last sequence."""
    broker = make_broker(secure=True)
    alice = RawUser(broker.port, NAME, "alice", USERS["alice"])
    for s in range(1, 6):
        assert alice.publish(s, json.dumps({"n": s, "by": "alice"}))["status"] == "success"
    alice.close()
    broker.stop()
    broker.start()

    pub = RawUser(broker.port, NAME, "pub", USERS["pub"])
    assert (pub.logon["status"], pub.logon.get("reason")) == ("failure", "name in use")
    pub.close()
    alice = RawUser(broker.port, NAME, "alice", USERS["alice"])
    assert alice.logon["status"] == "success" and alice.last_persisted() == 5
    for s in range(6, 11):
        assert alice.publish(s, json.dumps({"n": s, "by": "alice"}))["status"] == "success"
    alice.close()
    assert [m["n"] for m in _replayed(broker, 10)] == list(range(1, 11))


def test_an_open_broker_holds_a_new_publishers_first_sequence_to_the_jump_limit(make_broker) -> None:
    broker = make_broker(secure=False)
    squatter = Raw(broker.port, NAME)
    refused = squatter.publish(10**15, '{"n":"poison"}')
    assert (refused["status"], refused["reason"]) == ("failure", "invalid sequence")
    squatter.close()
    assert "is the first of client name 'feed-1' and more than 1000000 above zero" in broker.log()

    victim = Raw(broker.port, NAME)
    for s in range(1, 6):
        assert victim.publish(s, json.dumps({"n": s, "by": "victim"}))["status"] == "success"
    victim.close()
    assert [m["n"] for m in _replayed(broker, 5, user=None)] == [1, 2, 3, 4, 5]


def test_broker_check_validates_the_takeover_setting(tmp_path: Path) -> None:
    config = BrokerProcess.from_xml(tmp_path, extra="<AllowClientNameTakeover>perhaps</AllowClientNameTakeover>")
    checked = subprocess.run([sys.executable, "-m", "broker", "check", str(config.config_path)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode != 0
    assert "AllowClientNameTakeover" in checked.stdout + checked.stderr
    config = BrokerProcess.from_xml(tmp_path, extra="<AllowClientNameTakeover>true</AllowClientNameTakeover>")
    checked = subprocess.run([sys.executable, "-m", "broker", "check", str(config.config_path)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
