"""Issue 33: `broker check` names every file a configuration reads that is missing or unreadable, and every
folder it writes into that cannot be created, as an error at the element naming it (file:line); warnings are
labelled and counted as warnings, errors as errors, in every output path (check and serve)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from broker.testing.process import free_port

pytestmark = pytest.mark.timeout(60)


def broker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


def located(stderr: str, label: str) -> list[tuple[str, int, str]]:
    """``(file, line, message)`` of each stderr line labelled ``label``."""
    found = []
    for line in stderr.splitlines():
        match = re.match(rf"{label}: (\S+?):(\d+): (.*)", line)
        if match:
            found.append((Path(match[1]).name, int(match[2]), match[3]))
    return found


def line_of(path: Path, text: str) -> int:
    (number,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return number


SECURE = """<AMPSConfig>
  <Name>files</Name>
  <Admin>
    <InetAddr>127.0.0.1:{admin}</InetAddr>
    <Certificate>tls/admin.crt</Certificate>
    <PrivateKey>tls/admin.key</PrivateKey>
  </Admin>
  <Authentication>
    <Module>password-file</Module>
    <Options><PasswordFile>security/users.passwd</PasswordFile></Options>
  </Authentication>
  <Entitlement>
    <Module>entitlement-file</Module>
    <Options><EntitlementFile>security/entitlements.toml</EntitlementFile></Options>
  </Entitlement>
  <Transports>
    <Transport>
      <Name>secure</Name>
      <Type>tcps</Type>
      <InetAddr>127.0.0.1:{port}</InetAddr>
      <Protocol>amps</Protocol>
      <Certificate>tls/server.crt</Certificate>
      <PrivateKey>tls/server.key</PrivateKey>
      <CAFile>tls/ca.crt</CAFile>
      <CAPath>tls/ca.d</CAPath>
      <VerifyClient>true</VerifyClient>
    </Transport>
  </Transports>
  <SOW>
    <Topic>
      <Name>orders</Name>
      <MessageType>json</MessageType>
      <Key>/id</Key>
      <FileName>blocked/sow/%n.sow</FileName>
    </Topic>
    <Include>more-topics.xml</Include>
  </SOW>
  <TransactionLog>
    <JournalDirectory>blocked/journal</JournalDirectory>
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
</AMPSConfig>
"""


def test_check_reports_each_missing_security_file_at_its_element(tmp_path: Path) -> None:
    config = tmp_path / "secure.xml"
    config.write_text(SECURE.format(admin=free_port(), port=free_port()))
    (tmp_path / "blocked").write_text("a file where the data folder should be\n")
    out = broker("check", "secure.xml", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    errors = located(out.stderr, "error")
    expected = {
        "tls/admin.crt": "/AMPSConfig/Admin/Certificate", "tls/admin.key": "/AMPSConfig/Admin/PrivateKey",
        "security/users.passwd": "/AMPSConfig/Authentication/Options/PasswordFile",
        "security/entitlements.toml": "/AMPSConfig/Entitlement/Options/EntitlementFile",
        "tls/server.crt": "/AMPSConfig/Transports/Transport/Certificate",
        "tls/server.key": "/AMPSConfig/Transports/Transport/PrivateKey",
        "tls/ca.crt": "/AMPSConfig/Transports/Transport/CAFile",
        "tls/ca.d": "/AMPSConfig/Transports/Transport/CAPath",
        "more-topics.xml": "/AMPSConfig/SOW/Include",
        "blocked/sow/%n.sow": "/AMPSConfig/SOW/Topic/FileName",
        "blocked/journal": "/AMPSConfig/TransactionLog/JournalDirectory",
    }
    assert len(errors) == len(expected), out.stderr
    for name, path in expected.items():
        (match,) = [e for e in errors if name.replace("%n", "orders") in e[2]]
        assert match[0] == "secure.xml" and match[1] == line_of(config, f">{name}<"), match
        assert match[2].startswith(path + ":"), match
    assert out.stderr.splitlines()[-1] == f"{len(expected)} error(s), 0 warning(s)."
    messages = " ".join(e[2] for e in errors)
    assert "broker certs DIR" in messages and "broker passwd FILE USER" in messages
    assert "is a file, not a folder" in messages


def test_check_passes_once_the_files_exist(tmp_path: Path) -> None:
    """The same configuration checks clean after `broker certs`, `broker passwd` and an entitlement file."""
    config = tmp_path / "secure.xml"
    config.write_text(SECURE.format(admin=free_port(), port=free_port()).replace(
        "<Include>more-topics.xml</Include>", "").replace("blocked/", "data/"))
    assert broker("certs", "tls", cwd=tmp_path).returncode == 0
    made = subprocess.run([sys.executable, "-m", "broker", "passwd", "security/users.passwd", "alice"],
                          input="alice-secret\n", capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert made.returncode == 0, made.stderr
    (tmp_path / "security" / "entitlements.toml").write_text('[user.alice]\nread = [".*"]\nadmin = ["*"]\n')
    out = broker("check", "secure.xml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("0 warning(s)")
    assert not (tmp_path / "data").exists(), "check creates no folder"


def test_a_key_of_another_certificate_is_an_error(tmp_path: Path) -> None:
    assert broker("certs", "tls", cwd=tmp_path).returncode == 0
    config = tmp_path / "c.xml"
    config.write_text(f"""<AMPSConfig>
  <Name>k</Name>
  <Transports>
    <Transport>
      <Name>secure</Name>
      <Type>tcps</Type>
      <InetAddr>127.0.0.1:{free_port()}</InetAddr>
      <Protocol>amps</Protocol>
      <Certificate>tls/server.crt</Certificate>
      <PrivateKey>tls/client.key</PrivateKey>
    </Transport>
  </Transports>
</AMPSConfig>
""")
    out = broker("check", "c.xml", cwd=tmp_path)
    assert out.returncode == 2
    (error,) = located(out.stderr, "error")
    assert error[1] == line_of(config, "<Certificate>") and "cannot be used with <PrivateKey>" in error[2]


WARNED = """<AMPSConfig>
  <Name>w</Name>
  <Transports>
    <Transport>
      <Name>plain</Name>
      <Type>tcp</Type>
      <InetAddr>127.0.0.1:{port}</InetAddr>
      <Protocol>amps</Protocol>
      <Certificate>ignored.crt</Certificate>
    </Transport>
  </Transports>
  {extra}
</AMPSConfig>
"""
BAD = ("<SOW><Topic><Name>t</Name><MessageType>json</MessageType><Durability>transient</Durability>"
       "<Expiration>banana</Expiration></Topic></SOW>")


def test_warnings_are_labelled_and_counted_as_warnings(tmp_path: Path) -> None:
    config = tmp_path / "w.xml"
    config.write_text(WARNED.format(port=free_port(), extra=""))
    ok = broker("check", "w.xml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    (warning,) = located(ok.stderr, "warning")
    assert warning[1] == line_of(config, "<Certificate>") and "is ignored" in warning[2]
    assert "error" not in ok.stderr
    assert ok.stdout.rstrip().endswith("1 warning(s)")

    config.write_text(WARNED.format(port=free_port(), extra=BAD))
    for command in ("check", "serve"):  # the same report whichever command loads the config
        out = broker(command, "w.xml", cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        (warning,) = located(out.stderr, "warning")
        (error,) = located(out.stderr, "error")
        assert warning[1] == line_of(config, "<Certificate>")
        assert error[1] == line_of(config, "banana") and "banana" in error[2]
        assert not any(line.startswith("error: ") and "warning" in line for line in out.stderr.splitlines())
        last = out.stderr.splitlines()[-1]
        assert last.startswith("1 error(s), 1 warning(s)"), last


def test_a_plugin_error_keeps_the_configs_warnings(tmp_path: Path) -> None:
    """An unknown module (found when plugins resolve, after loading) is counted with the loader's warnings."""
    config = tmp_path / "w.xml"
    config.write_text(WARNED.format(port=free_port(), extra="<SOW><Topic><Name>t</Name><MessageType>json"
                                    "</MessageType><Key>/id</Key><Durability>transient</Durability><KeyGenerator>"
                                    "<Module>no-such-module</Module></KeyGenerator></Topic></SOW>"))
    out = broker("check", "w.xml", cwd=tmp_path)
    assert out.returncode == 2
    assert len(located(out.stderr, "warning")) == 1 and len(located(out.stderr, "error")) == 1, out.stderr
    assert out.stderr.splitlines()[-1] == "1 error(s), 1 warning(s)."
