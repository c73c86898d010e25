"""The real broker samples its statistics once per ``<Admin><Interval>`` (issue 14: the setting was ignored),
and the kernel's sliced client rows equal what each session reports."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.server.statistics_assembly import client_row
from broker.stats.snapshot import ClientStats
from broker.testing.admin import fresh_get
from broker.testing.process import BrokerProcess

pytestmark = pytest.mark.timeout(60)


def test_the_broker_samples_per_admin_interval(tmp_path: Path) -> None:
    broker = BrokerProcess.from_xml(tmp_path, admin=True).start()  # <Interval>1s</Interval>
    try:
        first, _ = fresh_get(broker.admin_port, "/amps/instance/statistics.json")
        time.sleep(2.5)
        headers, body = fresh_get(broker.admin_port, "/amps/instance/statistics.json")
        grown = int(headers["x-statistics-sample"]) - int(first["x-statistics-sample"])
        assert 2 <= grown <= 5, f"{grown} samples in about 3 s with a 1 s interval"
        assert json.loads(body)["amps"]["instance"]["statistics"]["interval"] == "1000"
    finally:
        broker.stop()


def test_a_client_row_carries_what_the_session_counted() -> None:
    # Session.statistics() and the Admin server's sliced sample both build rows with client_row (the sample
    # counts every client's subscriptions in one pass and hands the count in).
    session = SimpleNamespace(id="c1", name="alice", remote="127.0.0.1:1", connected_at=1.0, messages_in=2,
                              messages_out=3, bytes_in=4, outbound=SimpleNamespace(bytes_out=5, size=6))
    assert client_row(session, 2) == ClientStats(id="c1", client_name="alice", remote="127.0.0.1:1",
                                                 connected_at=1.0, messages_in=2, messages_out=3, bytes_in=4,
                                                 bytes_out=5, subscriptions=2, queued_bytes=6)
