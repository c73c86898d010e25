"""``load_config(path, check_files=True)`` (what ``broker check`` runs): the files a configuration reads and
the folders it writes into, checked from the working directory, each problem at its element."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.config import ConfigError, load_config
from broker.errors import ConfigIssue
from broker.security.passwords import set_password

Write = Callable[[str, str], Path]


def file_errors(path: Path) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        load_config(path, env={}, check_files=True)
    return [i for i in info.value.issues if i.severity == "error"]


TLS = """\
<AMPSConfig>
  <Name>t</Name>
  <Transports>
    <Transport>
      <Name>secure</Name>
      <Type>tcps</Type>
      <InetAddr>127.0.0.1:19443</InetAddr>
      <Protocol>amps</Protocol>
      <Certificate>{cert}</Certificate>
      <PrivateKey>{key}</PrivateKey>
      <CAPath>{capath}</CAPath>
    </Transport>
  </Transports>
</AMPSConfig>
"""


def test_files_are_checked_only_when_asked(write: Write) -> None:
    path = write("c.xml", TLS.format(cert="none.crt", key="none.key", capath="none.d"))
    assert load_config(path, env={}).transports[0].tls is not None  # serve checks when it loads them
    assert len(file_errors(path)) == 3


def test_relative_paths_resolve_from_the_working_directory(write: Write, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.security.testca import make_test_pki

    run = tmp_path / "run"
    make_test_pki(run / "tls")
    path = write("conf/c.xml", TLS.format(cert="tls/server.crt", key="tls/server.key", capath="tls/ca.d"))
    monkeypatch.chdir(run)
    assert load_config(path, env={}, check_files=True).transports[0].tls is not None
    monkeypatch.chdir(tmp_path)  # where the files are not
    errors = file_errors(path)
    assert [(e.line, e.path.rsplit("/", 1)[1]) for e in errors] == [(9, "Certificate"), (10, "PrivateKey"),
                                                                    (11, "CAPath")]
    assert all(f"working directory, {tmp_path}" in e.message for e in errors)


def test_a_folder_for_a_file_and_a_file_for_a_folder(write: Write, tmp_path: Path) -> None:
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("x")
    path = write("c.xml", TLS.format(cert=tmp_path / "a-folder", key=tmp_path / "a-folder",
                                     capath=tmp_path / "a-file"))
    errors = file_errors(path)
    assert [e.message.split("' ", 1)[1] for e in errors] == [
        "is a folder, not a file: `broker certs DIR` makes a test CA with server, admin and client certificates "
        "(docs/security.md)"] * 2 + [
        "is a file, not a folder: `broker certs DIR` makes a test CA with server, admin and client certificates "
        "(docs/security.md); a CAPath folder holds CA certificates named by subject hash (c_rehash)"]
    assert "relative paths" not in errors[0].message  # absolute paths need no note


def test_tls_elements_of_a_tcp_transport_are_not_checked(write: Write) -> None:
    path = write("c.xml", TLS.format(cert="none.crt", key="none.key", capath="none.d").replace(
        "<Type>tcps</Type>", "<Type>tcp</Type>"))
    config = load_config(path, env={}, check_files=True)
    assert len(config.warnings) == 3  # ignored, as the validator says


SECURITY = """\
<AMPSConfig>
  <Name>s</Name>
  <Transports>
    <Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:19007</InetAddr><Protocol>amps</Protocol>
    </Transport>
  </Transports>
  <Authentication>
    <Module>password-file</Module>
    <Options>
      <PasswordFile>users.passwd</PasswordFile>
    </Options>
  </Authentication>
  <Entitlement>
    <Module>entitlement-file</Module>
    <Options>
      <EntitlementFile>entitlements.toml</EntitlementFile>
    </Options>
  </Entitlement>
</AMPSConfig>
"""


def test_password_and_entitlement_files_must_parse(write: Write, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write("c.xml", SECURITY)
    (tmp_path / "users.passwd").write_text("alice has no hash\n")
    (tmp_path / "entitlements.toml").write_text("[user.alice\n")
    errors = file_errors(path)
    assert [(e.line, e.path) for e in errors] == [
        (10, "/AMPSConfig/Authentication/Options/PasswordFile"),
        (16, "/AMPSConfig/Entitlement/Options/EntitlementFile")]
    assert "users.passwd:1: expected user:hash" in errors[0].message
    assert "entitlements.toml" in errors[1].message
    set_password(tmp_path / "users.passwd.new", "alice", "secret")
    os.replace(tmp_path / "users.passwd.new", tmp_path / "users.passwd")
    (tmp_path / "entitlements.toml").write_text('[user.alice]\nread = [".*"]\n')
    assert load_config(path, env={}, check_files=True).authentication.module == "password-file"


FOLDERS = """\
<AMPSConfig>
  <Name>f</Name>
  <Transports>
    <Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:19007</InetAddr><Protocol>amps</Protocol>
    </Transport>
  </Transports>
  <Logging>
    <Target>
      <Protocol>file</Protocol>
      <FileName>{root}/logs/%Y/broker-%n.log</FileName>
    </Target>
  </Logging>
  <SOW>
    <Topic>
      <Name>kept</Name>
      <MessageType>json</MessageType>
      <FileName>{root}/sow/%n.sow</FileName>
      <KeyGenerator>
        <Module>chaining</Module>
        <Options>
          <Primary>/id</Primary>
          <Key>/parent</Key>
          <FileName>{root}/chains/kept.chain</FileName>
        </Options>
      </KeyGenerator>
    </Topic>
    <Topic>
      <Name>passing</Name>
      <MessageType>json</MessageType>
      <Key>/id</Key>
      <Durability>transient</Durability>
      <FileName>{root}/transient/%n.sow</FileName>
    </Topic>
  </SOW>
  <TransactionLog>
    <JournalDirectory>{root}/journal</JournalDirectory>
    <JournalArchiveDirectory>{root}/archive/old</JournalArchiveDirectory>
  </TransactionLog>
</AMPSConfig>
"""


def test_folders_that_cannot_be_created(write: Write, tmp_path: Path) -> None:
    fine = tmp_path / "fine"
    path = write("fine.xml", FOLDERS.format(root=fine))
    load_config(path, env={}, check_files=True)
    assert not fine.exists(), "checking creates nothing"

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the data folder should be")
    errors = file_errors(write("blocked.xml", FOLDERS.format(root=blocked)))
    assert [e.line for e in errors] == [10, 17, 23, 36, 37]  # not the transient topic's FileName (31)
    assert all(f"{blocked} is a file, not a folder" in e.message for e in errors)
    assert "the folder of <FileName>" in errors[1].message and "sow/kept.sow" in errors[1].message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_folder_without_write_permission(write: Write, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        errors = file_errors(write("c.xml", FOLDERS.format(root=locked)))
        assert len(errors) == 5 and all("not writable" in e.message for e in errors)
    finally:
        locked.chmod(0o700)


def test_an_included_files_element_is_reported_in_that_file(write: Write) -> None:
    write("transports.xml", """\
        <Transport>
          <Name>secure</Name>
          <Type>tcps</Type>
          <InetAddr>127.0.0.1:19443</InetAddr>
          <Protocol>amps</Protocol>
          <Certificate>missing.crt</Certificate>
          <PrivateKey>missing.key</PrivateKey>
        </Transport>
        """)
    path = write("main.xml", """\
        <AMPSConfig>
          <Name>i</Name>
          <Transports>
            <Include>transports.xml</Include>
          </Transports>
        </AMPSConfig>
        """)
    errors = file_errors(path)
    assert [(Path(e.file).name, e.line) for e in errors] == [("transports.xml", 6), ("transports.xml", 7)]
