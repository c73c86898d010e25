"""The password file, ``broker passwd``, the entitlement file's rules, and the security elements of the config."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import load_config
from broker.errors import ConfigError
from broker.plugin_config import resolve_plugins
from broker.plugins import build_plugin_manager
from broker.security import AuthenticationRefused, Identity, LogonRequest
from broker.security.entitlement_file import EntitlementFile, EntitlementFileError
from broker.security.passwords import PasswordFile, PasswordFileError, set_password, verify_password
from broker_plugins.security.files import PasswordFileAuthentication


def passwd(path: Path, user: str, stdin: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", "passwd", str(path), user, *extra], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_broker_passwd_reads_stdin_and_writes_salted_hashes(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "users.passwd"
    done = passwd(path, "alice", "correct horse\n", "--groups", "traders,eu")
    assert done.returncode == 0 and "added alice" in done.stdout and "correct horse" not in done.stdout
    assert passwd(path, "bob", "correct horse\n").returncode == 0
    text = path.read_text()
    assert "correct horse" not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    users = PasswordFile.read(path).users
    assert users["alice"].hash != users["bob"].hash  # salted: the same password, two hashes
    assert users["alice"].groups == frozenset({"traders", "eu"})
    assert verify_password("correct horse", users["bob"].hash) and not verify_password("wrong", users["bob"].hash)
    changed = passwd(path, "alice", "new one\n")
    assert changed.returncode == 0 and "changed the password of alice" in changed.stdout
    entry = PasswordFile.read(path).check("alice", "new one")
    assert entry is not None and entry.groups == frozenset({"traders", "eu"})  # groups kept
    assert passwd(path, "alice", "", "--delete").returncode == 0
    assert "alice" not in PasswordFile.read(path).users
    assert passwd(path, "eve", "\n").returncode == 1  # an empty password is refused
    assert passwd(path, "bad:name", "x\n").returncode == 1


@pytest.mark.parametrize(("line", "message"), [
    ("alice", "expected user:hash"),
    ("alice:md5$abc", "scrypt$N$r$p$salt$key"),
    ("alice:scrypt$3$8$1$AAAAAAAAAAA=$AAAA", "out of range"),
    ("alice:scrypt$1073741824$8$1$AAAAAAAAAAA=$AAAA", "out of range"),
])
def test_a_bad_password_file_line_is_reported_with_its_number(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "users.passwd"
    path.write_text(f"# comment\n{line}\n")
    with pytest.raises(PasswordFileError, match=f"users.passwd:2: .*{message.replace('$', '.')}"):
        PasswordFile.read(path)


def test_password_file_authentication(tmp_path: Path) -> None:
    set_password(tmp_path / "p", "alice", "pw", ["ops"])
    auth = PasswordFileAuthentication({"PasswordFile": str(tmp_path / "p")})
    assert auth.authenticate(LogonRequest("alice", "pw")) == Identity("alice", frozenset({"ops"}))
    for request in (LogonRequest("alice", "no"), LogonRequest("bob", "pw"), LogonRequest(None, "pw"),
                    LogonRequest("alice", None), LogonRequest("alice", "x" * 5000)):
        with pytest.raises(AuthenticationRefused):
            auth.authenticate(request)
    set_password(tmp_path / "p", "bob", "pw2")
    with pytest.raises(AuthenticationRefused):
        auth.authenticate(LogonRequest("bob", "pw2"))
    assert "2 users" in auth.reload()
    assert auth.authenticate(LogonRequest("bob", "pw2")).user == "bob"
    (tmp_path / "p").write_text("garbage\n")
    with pytest.raises(PasswordFileError):
        auth.reload()
    assert auth.authenticate(LogonRequest("bob", "pw2")).user == "bob"  # the old file stays in force


RULES = """
[user."*"]
read = ["public\\\\..*"]

[user.carol]
read = [".*"]

[group.desk]
members = ["dan"]
read = ["orders", "quotes"]
write = ["orders"]
replay = ["orders"]
filter = { orders = "/region = 'EU'" }

[group.apac]
read = ["orders"]
filter = { "ord.*" = "/region = 'APAC'" }

[group.all-orders]
read = ["orders"]
"""


def test_entitlement_rules_combine_per_identity(tmp_path: Path) -> None:
    (tmp_path / "e.toml").write_text(RULES)
    rules = EntitlementFile(tmp_path / "e.toml")
    dan = rules.grants(Identity("dan"))  # a member by the file
    assert dan.can_read("orders") and dan.can_read("quotes") and dan.can_read("public.news")
    assert not dan.can_read("orders2") and not dan.can_read("xorders")  # whole-name matches
    assert dan.can_write("orders") and not dan.can_write("quotes")
    assert dan.can_replay("orders") and not dan.can_replay("quotes")
    assert dan.read_filter("orders") == "/region = 'EU'" and dan.read_filter("quotes") is None
    assert not dan.reads_everything()
    both = rules.grants(Identity("erin", frozenset({"desk", "apac"})))  # groups from the password file
    assert both.read_filter("orders") == "(/region = 'APAC') OR (/region = 'EU')"  # groups in name order
    unfiltered = rules.grants(Identity("fay", frozenset({"desk", "all-orders"})))
    assert unfiltered.read_filter("orders") is None  # one entry without a filter: everything
    nobody = rules.grants(Identity("nobody"))
    assert nobody.can_read("public.x") and not nobody.can_read("orders") and not nobody.can_write("public.x")
    assert rules.grants(Identity("carol")).reads_everything()
    assert rules.grants(Identity("dan")) == EntitlementFile(tmp_path / "e.toml").grants(Identity("dan"))


@pytest.mark.parametrize(("text", "message"), [
    ("[users.a]\nread=[]", "unknown table"),
    ("[user.a]\nread='orders'", "read must be a list"),
    ("[user.a]\nread=['(']", "topic pattern"),
    ("[user.a]\nread=['a']\nfilter={a='/x = '}", "does not compile"),
    ("[user.a]\nwrites=['a']", "unknown key"),
    ("[user.a\n", "not valid TOML"),
])
def test_a_bad_entitlement_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "e.toml").write_text(text)
    with pytest.raises(EntitlementFileError, match=message):
        EntitlementFile(tmp_path / "e.toml")


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.xml"
    path.write_text(f"<AMPSConfig><Name>t</Name>{body}</AMPSConfig>")
    return path


@pytest.mark.parametrize(("body", "message"), [
    ("<Transports><Transport><Name>s</Name><Type>tcps</Type><InetAddr>9443</InetAddr><Protocol>amps</Protocol>"
     "<PrivateKey>k.pem</PrivateKey></Transport></Transports>", "has no <Certificate>"),
    ("<Transports><Transport><Name>s</Name><Type>tcps</Type><InetAddr>9443</InetAddr><Protocol>amps</Protocol>"
     "<Certificate>c</Certificate><PrivateKey>k</PrivateKey><VerifyClient>true</VerifyClient></Transport>"
     "</Transports>", "no <CAFile> or <CAPath>"),
    ("<Admin><InetAddr>8085</InetAddr><WWWAuthenticate>Negotiate</WWWAuthenticate></Admin>",
     "only HTTP basic authentication"),
    ("<Admin><InetAddr>8085</InetAddr><AnonymousPaths>(</AnonymousPaths></Admin>", "not a regular expression"),
])
def test_security_config_errors(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_config(tmp_path, body))


def test_modules_and_options_are_checked_at_check_time(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "<Authentication><Module>ldap</Module></Authentication>"
                                           "<Entitlement><Module>entitlement-file</Module></Entitlement>"))
    with pytest.raises(ConfigError) as caught:
        resolve_plugins(config, build_plugin_manager())
    text = str(caught.value)
    assert "Unknown authentication module 'ldap'" in text and "password-file" in text
    assert "option <EntitlementFile> is required" in text


def test_a_tcp_transport_with_tls_elements_warns(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "<Transports><Transport><Name>p</Name><Type>tcp</Type>"
                                           "<InetAddr>9007</InetAddr><Protocol>amps</Protocol>"
                                           "<Certificate>c.pem</Certificate></Transport></Transports>"))
    assert any("<Type>tcps</Type>" in w.message for w in config.warnings)
    assert config.transports[0].tls is None


async def test_the_reset_steps_reload_through_the_host() -> None:
    from broker.testing.actions import FakeHost, run_step

    host = FakeHost()
    for kind in ("authentication", "entitlement"):
        result = await run_step("broker_plugins.security.reset", f"amps-action-do-reset-{kind}", {}, host=host)
        assert (result.outcome, result.message) == ("success", f"{kind} reloaded")
    assert host.security_reloads == ["authentication", "entitlement"]


def test_passwords_in_clear_text_beyond_loopback_are_warned_about(tmp_path: Path, caplog) -> None:
    from broker.security.runtime import SecurityRuntime

    set_password(tmp_path / "p", "alice", "pw")
    config = load_config(_config(tmp_path, f"""
        <Authentication><Module>password-file</Module><Options><PasswordFile>{tmp_path / 'p'}</PasswordFile>
        </Options></Authentication>
        <Transports>
          <Transport><Name>wide</Name><Type>tcp</Type><InetAddr>9007</InetAddr><Protocol>amps</Protocol></Transport>
          <Transport><Name>local</Name><Type>tcp</Type><InetAddr>127.0.0.1:9008</InetAddr><Protocol>amps</Protocol>
          </Transport>
        </Transports>"""))
    with caplog.at_level("WARNING", logger="broker.security"):
        SecurityRuntime(config, resolve_plugins(config, build_plugin_manager()).security)
    warned = [r.getMessage() for r in caplog.records]
    assert any("transport wide listens on 0.0.0.0:9007 with authentication but without TLS" in m for m in warned)
    assert not any("transport local" in m for m in warned)


def test_admin_https_needs_both_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="add <PrivateKey> to serve HTTPS"):
        load_config(_config(tmp_path, "<Admin><InetAddr>8085</InetAddr><Certificate>c.pem</Certificate></Admin>"))
    config = load_config(_config(tmp_path, "<Admin><InetAddr>8085</InetAddr><Certificate>c.pem</Certificate>"
                                           "<PrivateKey>k.pem</PrivateKey></Admin>"))
    assert (config.admin.certificate, config.admin.private_key) == ("c.pem", "k.pem")


def test_refused_logons_back_off_per_user_and_address(tmp_path: Path) -> None:
    from broker.security.runtime import FAILURE_BASE_DELAY, FAILURE_MAX_DELAY, FREE_FAILURES, SecurityRuntime

    now = [1000.0]
    config = load_config(_config(tmp_path, ""))
    security = SecurityRuntime(config, resolve_plugins(config, build_plugin_manager()).security,
                               clock=lambda: now[0])
    for _ in range(FREE_FAILURES - 1):
        assert security.logon_refused("bob", "10.0.0.9") == 0
    assert security.logon_refused("bob", "10.0.0.9") == FAILURE_BASE_DELAY
    assert security.blocked_for("bob", "10.0.0.9") == FAILURE_BASE_DELAY
    # Only the pair: another user from the address, and the user from another address, are checked.
    assert security.blocked_for("carol", "10.0.0.9") == 0 and security.blocked_for("bob", "10.0.0.10") == 0
    for _ in range(10):  # refused unchecked while blocked: counted, the block does not move
        security.logon_refused("bob", "10.0.0.9", checked=False)
    assert security.blocked_for("bob", "10.0.0.9") == FAILURE_BASE_DELAY
    now[0] += FAILURE_BASE_DELAY
    assert security.blocked_for("bob", "10.0.0.9") == 0
    assert security.logon_refused("bob", "10.0.0.9") == FAILURE_MAX_DELAY  # doubled per refusal, capped
    security.logon_accepted("bob", "10.0.0.9")
    assert security.blocked_for("bob", "10.0.0.9") == 0


def test_the_limiter_memory_is_bounded() -> None:
    from broker.security.runtime import FailureLimiter

    limiter = FailureLimiter(lambda: 0.0, pairs=100)
    for i in range(1000):
        limiter.refused(f"user-{i}", "10.0.0.9")
    assert len(limiter) == 100
