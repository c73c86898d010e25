"""Fixtures for the Admin server tests: a synthetic statistics source, a running Admin server, an HTTP
client over real sockets, and a real Prometheus server (the Debian ``prometheus`` binary) to scrape it.

The ``prometheus`` fixture is meant for reuse (e.g. an end-to-end scrape of a real broker): it returns a
launcher ``start(targets) -> PrometheusServer``; every server it starts is killed at teardown.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.admin import StatisticsSampler, serve_admin
from broker.stats import Histogram, empty_snapshot
from broker.stats.histogram import DEFAULT_FSYNC_BUCKETS
from broker.stats.snapshot import (
    ActionStats,
    BrokerSnapshot,
    ClientStats,
    JournalFiles,
    JournalStats,
    SowTopicStats,
    SubscriptionCounts,
    TopicFlow,
)

# ------------------------------------------------------------------------------------------------
# A synthetic statistics source
# ------------------------------------------------------------------------------------------------

#: How much each counter grows per call of the synthetic source (unless frozen).
DELTAS = {
    "messages_received": 7,
    "messages_delivered": 11,
    "bytes_in": 1000,
    "bytes_out": 2500,
    "client_disconnects": 1,
    "slow_client_disconnects": 0,
    "protocol_errors": 2,
    "commands_failed": 3,
}


class SyntheticSource:
    """A ``statistics()`` stand-in whose values change on every call (unless frozen).

    Every snapshot it returns is kept in ``served``, so a test can compare what a scrape saw with what the
    source handed out. ``current`` is the snapshot the next call returns (``advance`` first, unless frozen);
    a test replaces it (``dataclasses.replace``) to set up what it checks.
    """

    def __init__(self, *, with_journal: bool = True) -> None:
        self.frozen = False
        self.served: list[BrokerSnapshot] = []
        self.latency = Histogram()
        self.fsync = Histogram(DEFAULT_FSYNC_BUCKETS)
        self.fail_next = False
        snap = empty_snapshot("synthetic", "9.9.9", "/etc/broker/config.xml")
        self.current: BrokerSnapshot = replace(
            snap,
            instance=replace(snap.instance, start_time=time.time() - 3725.5),  # up 1 h 2 min 5.5 s
            topics={"orders": TopicFlow(), "_other": TopicFlow()},
            sow={"orders": SowTopicStats(), "/prices/fx": SowTopicStats()},
            actions={"archive-journals": ActionStats()},
            journal=JournalStats(files=JournalFiles(active=1), bytes=0, last_sequence=0, durable_sequence=0,
                                 fsync=self.fsync.snapshot()) if with_journal else None,
        )
        self.step = 0

    def advance(self) -> None:
        """Move every counter by its known delta and change the gauges."""
        self.step += 1
        s = self.current
        counters = replace(s.counters, **{key: getattr(s.counters, key) + delta for key, delta in DELTAS.items()})
        orders, other = s.topics["orders"], s.topics["_other"]
        topics = {
            "orders": TopicFlow(orders.messages_received + 3, orders.messages_delivered + 5),
            "_other": TopicFlow(other.messages_received + 4, other.messages_delivered + 6),
        }
        sow = {}
        for topic, t in s.sow.items():
            inserts = t.inserts + (2 if topic == "orders" else 1)
            sow[topic] = replace(t, inserts=inserts, updates=t.updates + 1, queries=t.queries + 1,
                                 records=inserts - t.deletes)
        clients = tuple(
            ClientStats(id=f"c{i}", client_name=f"client-{i}", remote=f"127.0.0.1:{40000 + i}",
                        connected_at=1_700_000_000.0 + i, messages_in=10 * self.step, messages_out=20 * self.step,
                        bytes_in=100 * self.step, bytes_out=200 * self.step, subscriptions=1, queued_bytes=64 * i)
            for i in range(1, 1 + self.step % 3 + 1)
        )
        self.latency.observe(0.0003)
        self.latency.observe(0.02 * self.step)
        action = s.actions["archive-journals"]
        outcome = ("success", "failure", "busy")[self.step % 3]
        outcomes = replace(action.outcomes, **{outcome: getattr(action.outcomes, outcome) + 1})
        action = ActionStats(
            runs=outcomes.success + outcomes.failure + outcomes.skipped, failures=outcomes.failure,
            outcomes=outcomes, last_run_start=1_700_000_000.0 + self.step, last_run_duration=0.25 * self.step,
            running=self.step % 2 == 1, trigger_failures=action.trigger_failures,
        )
        journal = s.journal
        if journal is not None:
            self.fsync.observe(0.002)
            last = journal.last_sequence + DELTAS["messages_received"]
            journal = replace(journal, fsync=self.fsync.snapshot(), last_sequence=last, durable_sequence=last - 1,
                              records_appended=journal.records_appended + DELTAS["messages_received"],
                              bytes=journal.bytes + 4096)
        self.current = replace(
            s, counters=counters, topics=topics, sow=sow, oof=replace(s.oof, match=s.oof.match + 1),
            subscriptions=SubscriptionCounts(subscribe=self.step, sow_and_subscribe=2, bookmark=1, delta=0),
            clients=clients, latency=self.latency.snapshot(), actions={"archive-journals": action}, journal=journal,
        )

    def __call__(self) -> BrokerSnapshot:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("synthetic statistics failure")
        if not self.frozen:
            self.advance()
        snap = self.current
        self.served.append(snap)
        return snap


@pytest.fixture
def source() -> SyntheticSource:
    """A fresh synthetic statistics source (with a journal)."""
    return SyntheticSource()


@pytest.fixture
def make_source() -> Callable[..., SyntheticSource]:
    """The :class:`SyntheticSource` class, for tests that need a custom one."""
    return SyntheticSource


@pytest.fixture
def sampler(source: SyntheticSource) -> StatisticsSampler:
    """A sampler over ``source`` that samples only when a test says so (``await sampler.sample()``), so
    what a request sees is deterministic; the first request takes the first sample."""
    return StatisticsSampler(source, interval=math.inf)


@pytest.fixture
async def admin_port(nursery: trio.Nursery, source: SyntheticSource, sampler: StatisticsSampler) -> int:
    """An Admin server on 127.0.0.1 (OS-chosen port) over ``source``, serving ``sampler``'s samples;
    stopped with the test."""
    return await nursery.start(partial(serve_admin, sampler=sampler), "127.0.0.1", 0, source)


# ------------------------------------------------------------------------------------------------
# HTTP over real sockets (urllib in a worker thread; no extra dependency)
# ------------------------------------------------------------------------------------------------


@dataclass
class Response:
    """One HTTP response."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def _fetch(url: str, method: str, headers: dict[str, str], data: bytes | None, timeout: float) -> Response:
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return Response(reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read())
    except urllib.error.HTTPError as error:
        return Response(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())


async def http_request(
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    timeout: float = 10.0,
) -> Response:
    """Send one request and read the whole response (without following redirects' bodies)."""
    return await trio.to_thread.run_sync(_fetch, url, method, headers or {}, data, timeout)


@pytest.fixture
def http() -> Callable[..., Any]:
    """``await http(url, method=..., headers=..., data=...) -> Response``."""
    return http_request


# ------------------------------------------------------------------------------------------------
# A real Prometheus server
# ------------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PrometheusServer:
    """A running ``prometheus`` process and helpers to query its HTTP API."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    targets: list[str] = field(default_factory=list)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    async def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (raises on an API error)."""
        query = urllib.parse.urlencode(params)
        reply = await http_request(f"{self.url}/api/v1/{path}" + (f"?{query}" if query else ""), timeout=5)
        document = reply.json()
        if document.get("status") != "success":
            raise AssertionError(f"Prometheus API {path} failed: {document}")
        return document["data"]

    async def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until Prometheus answers ``/-/ready``."""
        with trio.move_on_after(timeout):
            while True:
                if self.process.poll() is not None:
                    raise AssertionError(
                        f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}"
                    )
                try:
                    if (await http_request(f"{self.url}/-/ready", timeout=2)).status == 200:
                        return
                except OSError:
                    pass
                await trio.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {timeout} s:\n{self.log_tail()}")

    async def wait_targets_up(self, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until every scrape target reports ``health == "up"``; returns the active targets."""
        await self.wait_ready(timeout)
        active: list[dict[str, Any]] = []
        with trio.move_on_after(timeout):
            while True:
                active = (await self.api("targets"))["activeTargets"]
                if active and all(t["health"] == "up" for t in active):
                    return active
                await trio.sleep(0.25)
        raise AssertionError(f"targets not up within {timeout} s: {active}\n{self.log_tail()}")

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; returns the ``result`` vector."""
        return (await self.api("query", query=expr))["result"]

    async def wait_for_value(self, expr: str, expected: float, timeout: float = 20.0) -> float:
        """Poll ``expr`` until its single value equals ``expected``; returns it (raises on timeout)."""
        seen: list[Any] = []
        with trio.move_on_after(timeout):
            while True:
                result = await self.query(expr)
                seen = [r["value"][1] for r in result]
                if len(result) == 1 and float(result[0]["value"][1]) == expected:
                    return float(result[0]["value"][1])
                await trio.sleep(0.25)
        raise AssertionError(f"{expr} never became {expected} within {timeout} s; last seen {seen}")


def _prometheus_binary() -> str | None:
    return os.environ.get("BROKER_PROMETHEUS_BIN") or shutil.which("prometheus")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    """Launcher for real Prometheus servers: ``start(["127.0.0.1:8085"], metrics_path="/metrics",
    basic_auth=("user", "password"))``.

    Skips the test when no ``prometheus`` binary is installed (CI installs Debian's ``prometheus``
    package; ``BROKER_PROMETHEUS_BIN`` overrides the path). Servers scrape every second, keep their
    TSDB under ``tmp_path`` and are killed at teardown.
    """
    binary = _prometheus_binary()
    if binary is None:
        pytest.skip("the prometheus binary is not installed (apt-get install prometheus; CI installs it)")
    started: list[PrometheusServer] = []

    def start(targets: list[str], *, metrics_path: str = "/metrics",
              basic_auth: tuple[str, str] | None = None) -> PrometheusServer:
        n = len(started)
        config = tmp_path / f"prometheus-{n}.yml"
        auth = ""
        if basic_auth is not None:
            auth = (f"    basic_auth:\n      username: {json.dumps(basic_auth[0])}\n"
                    f"      password: {json.dumps(basic_auth[1])}\n")
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: broker\n"
            f"    metrics_path: {json.dumps(metrics_path)}\n"
            f"{auth}"
            f"    static_configs:\n      - targets: {json.dumps(targets)}\n"
        )
        port = free_port()
        log_path = tmp_path / f"prometheus-{n}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / f'tsdb-{n}'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        server = PrometheusServer(f"http://127.0.0.1:{port}", process, log_path, list(targets))
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.terminate()
            try:
                server.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(timeout=5)
