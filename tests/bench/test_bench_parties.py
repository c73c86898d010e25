"""``python -m bench.parties W4|W5``: the CPU each party spends per message (issue 17, who limits W4 and W5).

Runs the real command on small sizes (a real broker, the official client, subscriber processes) and checks that
every message arrived and that every party's CPU is reported: the broker's replay worker thread and event loop
for W4, the publisher, the broker and each subscriber for W5.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str) -> list[dict]:
    out_json = tmp_path / "parties.json"
    out = subprocess.run([sys.executable, "-m", "bench.parties", *args, "--timeout", "120", "--json", str(out_json)],
                         cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out_json.read_text())


@pytest.mark.timeout(180)
def test_w4_parties_reports_the_broker_threads_and_the_receiving_client(tmp_path: Path) -> None:
    rows = _run(tmp_path, "W4", "-n", "20000")
    assert [r["handler"] for r in rows] == ["bench (Completion)", "count only"]
    for r in rows:
        assert r["messages"] == r["expected"] == 20000
        assert r["client_us"] > 0 and r["broker_us"] > 0
        assert len(r["broker_threads_us"]) >= 2, r  # the event loop and the replay's worker thread


@pytest.mark.timeout(180)
def test_w5_parties_reports_publisher_broker_and_each_subscriber(tmp_path: Path) -> None:
    rows = _run(tmp_path, "W5", "-n", "5000", "--subscribers", "1,2")
    assert [r["subscribers"] for r in rows] == [1, 2]
    for r in rows:
        assert r["deliveries"] == r["expected"] == 5000 * r["subscribers"]
        assert r["publisher_us"] > 0 and r["broker_us"] > 0
        assert len(r["subscriber_us"]) == r["subscribers"] and all(us > 0 for us in r["subscriber_us"])
        # Every message came in through some read and went out through some write to each subscriber.
        assert r["broker_reads_per_1k"] > 0 and r["broker_writes_per_1k"] > 0
