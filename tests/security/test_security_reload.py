"""SIGHUP bound to amps-action-do-reset-authentication/-entitlement re-reads the files: a new password works,
a client whose entitlements changed is disconnected (and cannot subscribe again), others stay. And the
start-up warning about a transport listening beyond loopback without authentication."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import AMPS
import pytest

from broker.security.passwords import set_password
from broker.testing.process import BrokerProcess, free_port
from tests.security.conftest import ENTITLEMENTS, SECURE, USERS, uri

pytestmark = pytest.mark.timeout(60)

ON_SIGHUP = """<Actions><Action>
  <On><Module>amps-action-on-signal</Module><Options><Signal>SIGHUP</Signal></Options></On>
  <Do><Module>amps-action-do-reset-authentication</Module></Do>
  <Do><Module>amps-action-do-reset-entitlement</Module></Do>
</Action></Actions>"""


def wait_until(predicate, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_sighup_reloads_passwords_and_entitlements(tmp_path: Path) -> None:
    for user, password in USERS.items():
        set_password(tmp_path / "users.passwd", user, password)
    (tmp_path / "entitlements.toml").write_text(ENTITLEMENTS)
    with BrokerProcess.from_xml(tmp_path, extra=SECURE + ON_SIGHUP,
                                sow="<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>"
                                    "<Durability>transient</Durability></Topic>") as proc:
        reader = AMPS.Client("reader-1")
        reader.connect(uri(proc, "reader"))
        reader.logon(5000)
        reader.subscribe(lambda m: None, "orders", timeout=5000)
        alice = AMPS.Client("alice-1")
        alice.connect(uri(proc, "alice"))
        alice.logon(5000)
        gone: list[str] = []
        reader.add_connection_state_listener(lambda state: gone.append(state))

        set_password(tmp_path / "users.passwd", "reader", "rotated")
        (tmp_path / "entitlements.toml").write_text(ENTITLEMENTS.replace('[user.reader]\nread = ["orders"]',
                                                                          '[user.reader]\nread = ["quotes"]'))
        proc.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "client(s) whose entitlements changed were disconnected" in proc.log(), "the reload")
        assert proc.proc.poll() is None  # SIGHUP is bound: it reloaded instead of stopping the broker
        wait_until(lambda: "reader-1 (127.0.0.1" in proc.log() and "its entitlements changed" in proc.log(),
                   "the reader's disconnection")
        alice.publish_flush(5000)  # alice's entitlements did not change: still connected

        old = AMPS.Client("reader-2")
        old.connect(uri(proc, "reader"))
        with pytest.raises(AMPS.AuthenticationException):
            old.logon(5000)
        old.close()
        new = AMPS.Client("reader-3")
        new.connect(uri(proc, "reader", "rotated"))
        new.logon(5000)
        with pytest.raises(AMPS.NotEntitledException):
            new.subscribe(lambda m: None, "orders", timeout=5000)
        new.subscribe(lambda m: None, "quotes", timeout=5000)
        for c in (new, alice, reader):
            c.close()

        (tmp_path / "entitlements.toml").write_text("[user.reader\n")  # broken: the old rules stay
        proc.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "not valid TOML" in proc.log(), "the refused reload")
        again = AMPS.Client("reader-4")
        again.connect(uri(proc, "reader", "rotated"))
        again.logon(5000)
        again.subscribe(lambda m: None, "quotes", timeout=5000)
        again.close()


def test_an_open_transport_beyond_loopback_is_warned_about(tmp_path: Path) -> None:
    port = free_port()
    extra = (f"<Transports><Transport><Name>wide</Name><Type>tcp</Type><InetAddr>0.0.0.0:{port}</InetAddr>"
             "<Protocol>amps</Protocol></Transport></Transports>")
    with BrokerProcess.from_xml(tmp_path, extra=extra) as proc:
        log = proc.log()
    assert f"transport wide listens on 0.0.0.0:{port} without authentication" in log
    assert "transport amps-tcp listens" not in log  # loopback: no warning
