"""What every workload gets: sizes, the running servers, the peers' tools and the measured limits."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.figures import Figure
from bench.servers import ServerProcess
from bench.sizes import Sizes


class WorkloadTimeout(Exception):
    """A workload ran past its time bound."""


@dataclass
class Context:
    """The run's shared state, handed to each workload.

    Attributes:
        sizes: Counts and bounds.
        workdir: The run's temporary directory.
        broker: The broker under test (``None`` if it failed to start).
        peers: Running peer servers by name (``redis``, ``nats``, ``mosquitto``).
        tools: Peer client executables by name (``redis-benchmark``, ``mosquitto_pub``...); ``None`` when missing.
        nats_py: Whether nats-py can be imported.
        limits: Machine limits measured in this run, by name.
        skipped: Why each peer that is not installed or not selected is absent (the table's notes say so; not a
            failure).
        failed: Why each peer that is installed but did not start is absent: its figures are ``error:`` figures,
            which fail the run.
        log: Notes printed under the table.
        leveldb_sync: W1's LevelDB sync writes: ``off`` (the default topic), ``on`` (a topic with
            ``<sync>true</sync>``) or ``both`` (one row each, same broker, same run).
        allow_install: Whether missing tools may be installed (``--no-install``: no).
    """

    sizes: Sizes
    workdir: Path
    broker: ServerProcess | None = None
    peers: dict[str, ServerProcess] = field(default_factory=dict)
    tools: dict[str, str | None] = field(default_factory=dict)
    nats_py: bool = False
    limits: dict[str, Figure] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    leveldb_sync: str = "off"
    deadline: float = 0.0
    #: Whether the run may install what it misses (``--no-install`` says no: npm is not run either).
    allow_install: bool = True

    @property
    def uri(self) -> str:
        """The broker's AMPS URI (JSON)."""
        assert self.broker is not None
        return f"tcp://127.0.0.1:{self.broker.port}/amps/json"

    @property
    def secure_uri(self) -> str:
        """The URI of the broker's bench-secure transport (password file, entitlement file), with credentials."""
        from bench.servers import SECURE_PASSWORD, SECURE_USER

        assert self.broker is not None
        return f"tcp://{SECURE_USER}:{SECURE_PASSWORD}@127.0.0.1:{self.broker.secure_port}/amps/json"

    def start_clock(self) -> None:
        """Start the current workload's time bound."""
        self.deadline = time.monotonic() + self.sizes.workload_timeout

    def left(self, at_least: float = 1.0) -> float:
        """Seconds left before the workload's bound (at least ``at_least``, for client timeouts).

        Raises:
            WorkloadTimeout: the bound has passed.
        """
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WorkloadTimeout(f"workload exceeded {self.sizes.workload_timeout:.0f}s")
        return max(at_least, left)

    def peer(self, name: str) -> ServerProcess | None:
        """A running peer, or ``None``."""
        return self.peers.get(name)

    def absent(self, system: str, unit: str = "", higher_is_better: bool = True, *, missing: str = "") -> Figure:
        """A figure for a peer that is not running, saying why.

        Args:
            system: The peer.
            unit: The figure's unit.
            higher_is_better: The figure's direction.
            missing: A client tool of the peer that is not installed (``redis-benchmark``...), when that and
                not the server is why.

        Returns:
            An ``error:`` figure when the peer is installed but did not start (:attr:`failed`: a failure of the
            run), else a ``skipped:`` figure saying why (not installed, or not selected).
        """
        if system in self.failed:
            return Figure(system, None, unit, higher_is_better, note=f"error: {self.failed[system]}")
        why = self.skipped.get(system) or (f"{missing} not installed" if missing else "not available")
        return Figure(system, None, unit, higher_is_better, note=f"skipped: {why}")
