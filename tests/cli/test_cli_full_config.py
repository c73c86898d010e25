"""Issue 33, acceptance 4: configs/full.xml serves after the commands its header documents (and
docs/security.md repeats). In a temporary working directory holding a copy of configs/, the test runs those
commands as a user would (`broker certs`, `broker passwd`, `broker check`), starts `broker serve
configs/full.xml`, connects with the official AMPS client over TCP and over tcps (with the client
certificate `broker certs` made), reads the Admin port over HTTPS, and stops the broker with SIGTERM."""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import AMPS
import pytest
from lxml import etree

from broker.testing.process import BrokerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
FULL = ROOT / "configs" / "full.xml"
SECURITY_DOC = ROOT / "docs" / "security.md"

pytestmark = pytest.mark.timeout(120)


def documented_commands() -> list[str]:
    """The command lines of full.xml's header comment (indented lines starting with `broker` or `printf`)."""
    header = FULL.read_text().split("-->", 1)[0]
    return [line.strip() for line in header.splitlines() if re.match(r"^ {4}(broker|printf) ", line)]


def run_shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` in bash, as a user types it, with this interpreter's ``broker`` first on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_header_documents_one_sequence_and_security_md_shows_it() -> None:
    commands = documented_commands()
    assert commands[0].startswith("broker certs data/full/tls")
    assert [c for c in commands if "broker passwd" in c], "the password file is made by broker passwd"
    assert commands[-2:] == ["broker check configs/full.xml", "broker serve configs/full.xml"]
    doc = SECURITY_DOC.read_text()
    block = "```bash\n" + "\n".join(commands) + "\n```"
    assert block in doc, "docs/security.md shows the same command sequence as configs/full.xml"


def _loopback_ports(config: Path) -> dict[str, int]:
    """Rewrite every <InetAddr> of ``config`` to 127.0.0.1 and a free port (the shipped ports are fixed and
    some listen on every interface; tests listen on loopback only and run side by side); returns transport
    name (``admin`` for the Admin port) -> port."""
    tree = etree.parse(str(config))
    ports: dict[str, int] = {}
    for el in tree.iter("InetAddr"):
        owner = el.getparent()
        name = "admin" if owner.tag == "Admin" else owner.findtext("Name")
        ports[name] = free_port()
        el.text = f"127.0.0.1:{ports[name]}"
    tree.write(str(config), xml_declaration=True, encoding="UTF-8")
    return ports


def test_full_xml_serves_after_the_documented_commands(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    commands = documented_commands()
    for command in commands[:-1]:  # all but `broker serve`
        out = run_shell(command, tmp_path)
        assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"
    assert "OK" in out.stdout and "0 warning(s)" in out.stdout  # the last one run: broker check
    tls = tmp_path / "data" / "full" / "tls"

    ports = _loopback_ports(tmp_path / "configs" / "full.xml")
    assert set(ports) == {"admin", "json-tcp", "local-any", "json-tls", "js-ws", "proxied-ws"}
    assert commands[-1] == "broker serve configs/full.xml"
    broker = BrokerProcess(Path("configs/full.xml"), ports["json-tcp"], ports["admin"], cwd=tmp_path)
    broker.start(timeout=60)
    try:
        # TCP, with a user of the password file.
        plain = AMPS.Client("full-tcp")
        plain.connect(f"tcp://alice:alice-secret@127.0.0.1:{ports['json-tcp']}/amps/json")
        plain.logon(5000)
        plain.publish("orders", json.dumps({"id": 1, "qty": 10}))
        plain.publish_flush(5000)

        # tcps, verifying the server certificate (SAN localhost) against the test CA, with the client
        # certificate the transport's VerifyClient requires.
        AMPS.ssl_init()
        context = AMPS.ssl_get_context()
        context.load_verify_locations(str(tls / "ca.crt"))
        context.load_cert_chain(str(tls / "client.crt"), str(tls / "client.key"))
        AMPS.ssl_set_verify(True)
        secure = AMPS.Client("full-tls")
        secure.connect(f"tcps://admin:admin-secret@localhost:{ports['json-tls']}/amps/json")
        secure.logon(5000)
        rows = [json.loads(m.get_data()) for m in secure.sow("orders", timeout=5000) if m.get_command() == "sow"]
        assert rows == [{"id": 1, "qty": 10}]
        secure.close()
        plain.close()

        # The Admin port serves HTTPS with admin.crt: /metrics is anonymous, the administrator needs a user.
        trusted = ssl.create_default_context(cafile=str(tls / "ca.crt"))
        base = f"https://localhost:{ports['admin']}"
        with urllib.request.urlopen(f"{base}/metrics", context=trusted, timeout=10) as answer:
            assert answer.status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/amps/administrator", context=trusted, timeout=10)
        assert refused.value.code == 401
    finally:
        AMPS.ssl_set_verify(False)  # the client's TLS settings are global: leave them as other tests expect
        code = broker.stop(timeout=30)
    log = broker.log()
    assert code == 0, log
    assert "Traceback" not in log
    deadline = time.monotonic() + 5
    while not (tmp_path / "data" / "full" / "sow" / "orders.sow").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "data" / "full" / "journal").is_dir()
