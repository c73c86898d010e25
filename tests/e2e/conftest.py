"""Fixtures for end-to-end tests: a real broker subprocess and official AMPS clients over real TCP."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import AMPS
import pytest

from broker.testing.process import BrokerProcess

SOW_ORDERS = """
<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <FileName>./sow/%n.sow</FileName></Topic>
"""


class Collector:
    """A message handler that records messages and lets a test wait for them."""

    def __init__(self) -> None:
        self.messages: list = []
        self._cv = threading.Condition()

    def __call__(self, message) -> None:  # noqa: ANN001 - AMPS.Message
        record = {
            "command": message.get_command(),
            "topic": message.get_topic(),
            "data": message.get_data(),
            "sub_id": message.get_sub_id(),
            "sow_key": message.get_sow_key(),
            "bookmark": message.get_bookmark(),
            "reason": message.get_reason(),
            "correlation_id": message.get_correlation_id(),
            "ack_type": message.get_ack_type(),
        }
        with self._cv:
            self.messages.append(record)
            self._cv.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0, command: str | None = None) -> list:
        """Wait until ``count`` messages (of ``command``, if given) arrived; returns them."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                got = [m for m in self.messages if command is None or m["command"] == command]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    return got
                self._cv.wait(left)

    def data(self, command: str | None = "publish") -> list[str]:
        """Data of the received messages of ``command``."""
        with self._cv:
            return [m["data"] for m in self.messages if command is None or m["command"] == command]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers from config fragments; all are stopped at the end."""
    started: list[BrokerProcess] = []

    def make(**sections: str) -> BrokerProcess:
        proc = BrokerProcess.from_xml(tmp_path, **sections).start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    """A broker with a LevelDB SOW topic ``orders`` keyed on /id."""
    return broker_factory(sow=SOW_ORDERS)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker like ``broker`` (a LevelDB SOW topic ``orders`` keyed on /id) for a module's tests that need
    no fresh one: tests on it use their own topics (or only get refusals) and read no broker-wide counter, so
    they pass in any order. Each xdist worker running tests of the module starts its own."""
    with BrokerProcess.from_xml(tmp_path_factory.mktemp("shared-broker"), sow=SOW_ORDERS) as proc:
        yield proc


@pytest.fixture
def own_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (``t-<test name>``): what a test on a shared broker publishes there
    reaches no other test's subscription."""
    return "t-" + re.sub(r"\W", "_", request.node.name)


@pytest.fixture
def client_factory() -> Iterator[Callable[..., object]]:
    """Connected, logged-on official AMPS clients; disconnected at the end."""
    clients: list = []

    def make(uri: str, name: str | None = None):
        client = AMPS.Client(name or f"test-client-{len(clients)}-{time.monotonic_ns()}")
        client.connect(uri)
        client.logon(5000)
        clients.append(client)
        return client

    yield make
    for c in clients:
        with contextlib.suppress(Exception):  # already disconnected
            c.close()


@pytest.fixture
def collector() -> Collector:
    return Collector()


@pytest.fixture
def make_collector() -> Callable[[], Collector]:
    return Collector
