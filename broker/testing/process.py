"""Run a real broker in a subprocess for end-to-end tests (ours and plugin authors').

Example::

    with BrokerProcess.from_xml(tmp_path, sow_topics='<Topic>...</Topic>') as b:
        client = AMPS.Client("t"); client.connect(b.uri); client.logon()
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from types import TracebackType

#: Where a Python child started by these helpers keeps its bytecode when this interpreter writes none (the
#: user's cache directory: not a shared temporary one where another user could plant bytecode).
PYCACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "broker" / "test-pycache"


def keep_child_bytecode(env: MutableMapping[str, str]) -> None:
    """Let the Python children started with ``env`` keep their bytecode, outside the source tree.

    Under ``PYTHONDONTWRITEBYTECODE`` every ``python -m broker`` child compiles the whole package from
    source at every start: about a third of a broker start's CPU. Here the variable is replaced by
    ``PYTHONPYCACHEPREFIX`` (:data:`PYCACHE`): the first child writes its bytecode there, not next to the
    sources, and the later ones read it. An explicit ``PYTHONPYCACHEPREFIX`` is left as it is; without
    ``PYTHONDONTWRITEBYTECODE`` nothing changes.
    """
    if env.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in env:
        del env["PYTHONDONTWRITEBYTECODE"]
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that were free a moment ago (held open together while they
    are picked: ports picked one after another can repeat)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for_port(port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until something accepts connections on ``port``.

    Raises:
        RuntimeError: the process exited, or the port did not open in time.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with code {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.01)  # a refused connect costs microseconds: poll often, start sooner
    raise RuntimeError(f"nothing listened on port {port} within {timeout}s")


def config_xml(
    *,
    port: int,
    admin_port: int | None = None,
    name: str = "test-broker",
    sow: str = "",
    transaction_log: str = "",
    modules: str = "",
    extra: str = "",
    transport_extra: str = "",
    websocket_port: int | None = None,
    websocket_extra: str = "",
) -> str:
    """A config with one amps TCP transport on ``port`` (and a websocket transport on ``websocket_port``)
    and the given sections (XML fragments)."""
    admin = f"<Admin><InetAddr>127.0.0.1:{admin_port}</InetAddr><Interval>1s</Interval></Admin>" if admin_port else ""
    websocket = (f"<Transport><Name>amps-ws</Name><Type>tcp</Type><InetAddr>127.0.0.1:{websocket_port}</InetAddr>"
                 f"<Protocol>websocket</Protocol>{websocket_extra}</Transport>") if websocket_port else ""
    return f"""<AMPSConfig>
  <Name>{name}</Name>
  {admin}
  <Transports>
    <Transport><Name>amps-tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:{port}</InetAddr>
      <Protocol>amps</Protocol>{transport_extra}</Transport>
    {websocket}
  </Transports>
  {f"<Modules>{modules}</Modules>" if modules else ""}
  {f"<SOW>{sow}</SOW>" if sow else ""}
  {f"<TransactionLog>{transaction_log}</TransactionLog>" if transaction_log else ""}
  {extra}
</AMPSConfig>
"""


class BrokerProcess:
    """A ``broker serve`` subprocess.

    Args:
        config_path: The config file to serve.
        port: The transport port in that config.
        admin_port: The Admin port, if any.
        cwd: The working directory (relative paths in the config resolve from it).
    """

    def __init__(self, config_path: Path, port: int, admin_port: int | None = None, cwd: Path | None = None,
                 websocket_port: int | None = None) -> None:
        self.config_path = Path(config_path)
        self.port = port
        self.admin_port = admin_port
        self.websocket_port = websocket_port
        self.cwd = cwd or self.config_path.parent
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.cwd / f"broker-{port}.log"

    @classmethod
    def from_xml(cls, directory: Path, *, admin: bool = False, websocket: bool = False, **sections: str
                 ) -> BrokerProcess:
        """Write a config (see :func:`config_xml`) into ``directory`` and prepare to serve it (with a
        websocket transport too when ``websocket``)."""
        port, admin_free, websocket_free = free_ports(3)
        admin_port = admin_free if admin else None
        websocket_port = websocket_free if websocket else None
        path = Path(directory) / f"broker-{port}.xml"
        path.write_text(config_xml(port=port, admin_port=admin_port, websocket_port=websocket_port, **sections))
        return cls(path, port, admin_port, cwd=Path(directory), websocket_port=websocket_port)

    @property
    def uri(self) -> str:
        """The AMPS URI of the JSON transport."""
        return f"tcp://127.0.0.1:{self.port}/amps/json"

    @property
    def ws_uri(self) -> str:
        """The URI of the websocket transport (the JavaScript client's)."""
        return f"ws://127.0.0.1:{self.websocket_port}/amps/json"

    def start(self, timeout: float = 30.0, env: Mapping[str, str] | None = None) -> BrokerProcess:
        """Start and wait until the transport (and Admin) accept connections.

        Args:
            timeout: How long to wait for the ports.
            env: Variables set for this run on top of ``os.environ`` (e.g. ``{"BROKER_FAULT": point}``, see
                :mod:`broker.faults`).
        """
        run_env = {**os.environ, **(env or {})}
        keep_child_bytecode(run_env)
        run_env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "broker", "serve", str(self.config_path)],
                cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT, env=run_env,
            )
        try:
            wait_for_port(self.port, timeout, self.proc)
            if self.admin_port:
                wait_for_port(self.admin_port, timeout, self.proc)
            if self.websocket_port:
                wait_for_port(self.websocket_port, timeout, self.proc)
            for port in self._other_transport_ports():
                wait_for_port(port, timeout, self.proc)
        except RuntimeError as exc:
            self.kill()
            raise RuntimeError(f"{exc}\n--- broker log ---\n{self.log()}") from None
        return self

    def _other_transport_ports(self) -> list[int]:
        """The ports of the config's other transports (a tcps one a test added, say): start() waits for these
        too, so a test never connects before its transport listens."""
        try:
            from lxml import etree

            # A relative config path is the broker's, from its working directory (not this process's).
            root = etree.parse(str(self.cwd / self.config_path)).getroot()
        except Exception:  # noqa: BLE001 - a config this helper cannot read: wait for the known ports only
            return []
        known = {self.port, self.admin_port, self.websocket_port}
        ports: list[int] = []
        for element in root.iterfind("./Transports/Transport/InetAddr"):
            _, _, tail = (element.text or "").strip().rpartition(":")
            if tail.isdigit() and int(tail) not in known:
                ports.append(int(tail))
        return ports

    def log(self) -> str:
        """What the broker wrote to stdout/stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit code (``-9`` if it had to be killed after ``timeout`` seconds).

        The broker drains its clients for up to ``<ShutdownTimeout>`` (10 s by default) before it closes the
        journal and the stores: on a loaded machine that can pass 15 s, and a test asserting a clean exit
        must not see a kill it caused itself.
        """
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the process to end by itself (e.g. a fault point's SIGKILL:
        ``-9``); returns its exit code, or ``None`` if it is still running (it is left running)."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL (a crash) and wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> BrokerProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
