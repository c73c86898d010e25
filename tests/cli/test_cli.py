"""The ``broker`` command line as a user runs it (issue 2, acceptance 1 and 5)."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.testing.process import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.xml"))


def broker(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_version() -> None:
    out = broker("--version")
    assert out.returncode == 0 and out.stdout.startswith("broker ")


@pytest.mark.parametrize("config", [c for c in CONFIGS if c.name != "full.xml"], ids=lambda p: p.name)
def test_every_shipped_config_passes_check(config: Path, tmp_path: Path) -> None:
    # full.xml passes after the commands of its header: tests/cli/test_cli_full_config.py runs them.
    out = broker("check", str(config), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout and "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == [], "broker check creates nothing"


def test_full_xml_without_its_files_names_each_missing_one(tmp_path: Path) -> None:
    """The files configs/full.xml's header makes, missing: one located error each, exit 2."""
    out = broker("check", str(ROOT / "configs" / "full.xml"), cwd=tmp_path)
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    lines = (ROOT / "configs" / "full.xml").read_text().splitlines()
    named = {}
    for error in errors:
        located = re.match(r"error: (\S+full\.xml):(\d+): /AMPSConfig/\S+: <(\w+)> '([^']+)'", error)
        assert located, error
        assert f"<{located[3]}>{located[4]}</{located[3]}>" in lines[int(located[2]) - 1]
        named[located[2]] = located[4]
    assert sorted(set(named.values())) == sorted(
        f"./data/full/{name}" for name in ("tls/admin.crt", "tls/admin.key", "security/users.passwd",
                                           "tls/server.crt", "tls/server.key", "tls/ca.crt", "tls/ca.d"))
    assert len(errors) == 8  # the password file is named twice (the instance's and the Admin's)
    assert out.stderr.splitlines()[-1] == "8 error(s), 0 warning(s)."


def test_check_reports_every_error_with_file_line_and_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text(
        "<AMPSConfig>\n"
        "  <Name>x</Name>\n"
        "  <SOW>\n"
        "    <Topic><Name>a</Name><MessageType>json</MessageType>\n"
        "      <KeyDomain>d</KeyDomain></Topic>\n"
        "    <Topic><Name>b</Name><MessageType>json</MessageType><Key>/id</Key>\n"
        "      <History><Window>banana</Window></History></Topic>\n"
        "  </SOW>\n"
        "  <Transprots/>\n"
        "</AMPSConfig>\n"
    )
    out = broker("check", str(bad))
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    err = out.stderr
    assert "bad.xml:7" in err and "/AMPSConfig/SOW/Topic[2]/History/Window" in err and "banana" in err
    assert "bad.xml:9" in err and "Transports" in err  # did-you-mean
    assert "KeyDomain" in err


def test_check_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    out = broker("check", str(tmp_path / "nope.xml"))
    assert out.returncode != 0 and "nope.xml" in out.stderr and "Traceback" not in out.stderr


def test_plugins_lists_builtins_and_their_source() -> None:
    out = broker("plugins")
    assert out.returncode == 0
    for name in ("default", "chaining", "memory", "leveldb"):
        assert name in out.stdout
    assert "entry point of broker" in out.stdout


@pytest.mark.skipif(not (port_free(9007) and port_free(9008) and port_free(8085)),
                    reason="9007, 9008 or 8085 is in use on this machine")
def test_serve_quickstart_accepts_connections_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    shutil.copy(ROOT / "configs" / "quickstart.xml", tmp_path / "quickstart.xml")
    proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", "quickstart.xml"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(9007, 30, proc)
        wait_for_port(8085, 30, proc)
        with socket.create_connection(("127.0.0.1", 9007), timeout=5):
            pass
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stdout.read() if proc.stdout else ""
    assert code == 0, log
    assert "listening on" in log and "stopped" in log
    assert (tmp_path / "data" / "sow" / "orders.sow").exists()
    assert (tmp_path / "data" / "journal").is_dir()


def test_port_in_use_is_a_clear_error_without_traceback(tmp_path: Path) -> None:
    port = free_port()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port))
    blocker.listen()
    cfg = tmp_path / "c.xml"
    cfg.write_text(f"<AMPSConfig><Name>p</Name><Transports><Transport><Name>t</Name><Type>tcp</Type>"
                   f"<InetAddr>127.0.0.1:{port}</InetAddr><Protocol>amps</Protocol></Transport>"
                   f"</Transports></AMPSConfig>")
    try:
        out = broker("serve", str(cfg), timeout=30)
    finally:
        blocker.close()
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert f"127.0.0.1:{port}" in out.stderr and "in use" in out.stderr.lower()


def test_sigint_also_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "c.xml"
    cfg.write_text(f"<AMPSConfig><Name>p</Name><Transports><Transport><Name>t</Name><Type>tcp</Type>"
                   f"<InetAddr>127.0.0.1:{port}</InetAddr><Protocol>amps</Protocol></Transport>"
                   f"</Transports></AMPSConfig>")
    proc = subprocess.Popen([sys.executable, "-m", "broker", "serve", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, 30, proc)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
