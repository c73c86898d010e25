"""Server processes the harness starts: the broker and its peers, each on a free loopback port.

Every server runs in its own process group inside a temporary directory and is stopped with SIGTERM,
then SIGKILL for the whole group, so nothing outlives the run even when a workload fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.meter import Meter
from broker.testing.process import free_port, free_ports

BENCH_CONFIG = Path(__file__).parent / "configs" / "bench.xml"


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM if the harness dies, even by SIGKILL (Linux only).

    Servers run in their own process group (so a Ctrl-C does not hit them before the harness stops
    them in order); this is what still ends them when the harness itself is killed.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ServerProcess:
    """A server subprocess listening on ``127.0.0.1:port``.

    Args:
        name: ``broker``, ``redis``, ``nats`` or ``mosquitto`` (also the log file's name).
        argv: The command line.
        port: The port it listens on (checked before :meth:`start` returns).
        workdir: Its working directory (logs and data go there).
        env: Extra environment variables.
    """

    def __init__(self, name: str, argv: list[str], port: int, workdir: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.workdir = workdir
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{name}.log"
        #: The broker's websocket transport port (W5 over WebSocket); 0 for the peers.
        self.ws_port = 0
        #: The broker's bench-secure transport (authentication and entitlements on); 0 for other servers.
        self.secure_port = 0

    @property
    def pid(self) -> int:
        """The server's process id (it must be running)."""
        assert self.proc is not None
        return self.proc.pid

    def meter(self) -> Meter:
        """A CPU/memory meter on the server process."""
        return Meter(self.pid)

    def start(self, timeout: float = 30.0) -> ServerProcess:
        """Start and wait until the port accepts connections.

        Raises:
            RuntimeError: the server exited or did not listen in time (with the end of its log).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, **self.env},
                                         start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"{self.name} exited with code {code} before listening:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.name} did not listen on {self.port} in {timeout}s:\n"
                                       f"{self.log_tail()}") from None
                time.sleep(0.05)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        # Anything the server left in its group (none of ours fork, but be sure).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode


def broker_server(workdir: Path, *, profile_to: Path | None = None, config: Path = BENCH_CONFIG) -> ServerProcess:
    """The broker serving a copy of ``bench/configs/bench.xml`` in ``workdir``.

    Args:
        workdir: Where the config copy, the SOW files and the journal go.
        profile_to: When set, run the broker under pyinstrument and save its session file here.
        config: The config template (``${BENCH_PORT}``, ``${BENCH_WS_PORT}`` and ``${BENCH_SECURE_PORT}`` are
            set to free ports).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    copy = workdir / "bench.xml"
    shutil.copyfile(config, copy)
    port, ws_port, secure_port = free_ports(3)
    serve = ["-m", "broker", "serve", str(copy)]
    if profile_to is not None:
        argv = [sys.executable, "-m", "pyinstrument", "-r", "pyisession",
                "--outfile", str(profile_to), *serve]
    else:
        argv = [sys.executable, *serve]
    write_security_files(workdir)
    env = {"BENCH_PORT": str(port), "BENCH_WS_PORT": str(ws_port), "BENCH_SECURE_PORT": str(secure_port),
           "PYTHONUNBUFFERED": "1"}
    server = ServerProcess("broker", argv, port, workdir, env)
    server.ws_port = ws_port
    server.secure_port = secure_port
    return server


#: The user of the bench-secure transport (W1 and W5 with security on).
SECURE_USER, SECURE_PASSWORD = "bench", "bench-secret"
#: Its entitlements: every bench topic, and a filter on each that every bench document passes (so the
#: figures differ by the cost of checking, not by what is delivered).
SECURE_ENTITLEMENTS = """[user.bench]
read = ["bench-.*"]
write = ["bench-.*"]
replay = ["bench-.*"]
filter = { "bench-.*" = "/qty >= 0" }
"""


def write_security_files(workdir: Path) -> None:
    """``users.passwd`` and ``entitlements.toml`` for the bench-secure transport, in ``workdir``."""
    from broker.security.passwords import set_password

    set_password(workdir / "users.passwd", SECURE_USER, SECURE_PASSWORD)
    (workdir / "entitlements.toml").write_text(SECURE_ENTITLEMENTS)


def redis_server(exe: str, workdir: Path) -> ServerProcess:
    """Redis with an append-only file, fsynced every second (``CONFIG SET appendfsync always`` for W6)."""
    port = free_port()
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--daemonize", "no",
            "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--protected-mode", "no",
            "--logfile", ""]
    return ServerProcess("redis", argv, port, workdir)


def nats_server(exe: str, workdir: Path) -> ServerProcess:
    """nats-server with JetStream, its file store in ``workdir``."""
    port = free_port()
    argv = [exe, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(workdir / "jetstream")]
    return ServerProcess("nats", argv, port, workdir)


def mosquitto_server(exe: str, workdir: Path) -> ServerProcess:
    """Mosquitto on one loopback listener, anonymous, no persistence, no queue limit."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                    "max_queued_messages 0\nlog_dest stdout\n")
    return ServerProcess("mosquitto", [exe, "-c", str(conf)], port, workdir)
