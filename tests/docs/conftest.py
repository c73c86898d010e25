"""Fixtures for running the documentation's snippets: the quickstart broker and the npm ``amps`` client."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.testing.process import BrokerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
#: The ports the docs and configs/ use; each snippet's copy of them is moved to free ports on 127.0.0.1.
DOC_PORTS = (9007, 9008, 8085, 9443, 9100, 9101)


def free_ports() -> dict[int, int]:
    """A free loopback port for each of :data:`DOC_PORTS`."""
    return {port: free_port() for port in DOC_PORTS}


def rewrite_ports(text: str, ports: dict[int, int]) -> str:
    """``text`` with every documented port number replaced by its stand-in."""
    return re.sub(r"\b(" + "|".join(str(p) for p in ports) + r")\b", lambda m: str(ports[int(m.group(1))]), text)


def copy_configs(dest: Path, ports: dict[int, int]) -> Path:
    """Copy ``configs/`` into ``dest`` with every ``<InetAddr>`` on loopback and its port moved (so that
    ``broker serve configs/quickstart.xml`` run from ``dest`` serves on free ports, on 127.0.0.1 only)."""
    target = dest / "configs"
    shutil.copytree(ROOT / "configs", target)
    addr = re.compile(r"<InetAddr>(?:[\w.]*:)?(\d+)</InetAddr>")
    for path in target.rglob("*.xml"):
        text = path.read_text()
        path.write_text(addr.sub(lambda m: f"<InetAddr>127.0.0.1:{ports.get(int(m.group(1)), int(m.group(1)))}"
                                           "</InetAddr>", text))
    return target


def snippet_dir(base: Path, ports: dict[int, int]) -> Path:
    """A working directory for one snippet: a copy of ``configs/`` (ports moved), ``docs/`` linked."""
    base.mkdir(parents=True, exist_ok=True)
    copy_configs(base, ports)
    (base / "docs").symlink_to(ROOT / "docs", target_is_directory=True)
    return base


class QuickstartBroker:
    """``broker serve configs/quickstart.xml`` in a temporary directory, its ports moved to ``ports``."""

    def __init__(self, proc: BrokerProcess, ports: dict[int, int]) -> None:
        self.proc = proc
        self.ports = ports


@pytest.fixture(scope="module")
def quickstart_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuickstartBroker]:
    """One quickstart broker shared by the module's snippets that need one."""
    ports = free_ports()
    home = snippet_dir(tmp_path_factory.mktemp("quickstart"), ports)
    proc = BrokerProcess(home / "configs" / "quickstart.xml", ports[9007], ports[8085], cwd=home,
                         websocket_port=ports[9008]).start()
    yield QuickstartBroker(proc, ports)
    code = proc.stop()
    assert code == 0, f"the quickstart broker exited with {code} on SIGTERM:\n{proc.log()[-3000:]}"
