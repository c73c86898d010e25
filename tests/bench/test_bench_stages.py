"""``python -m bench.profiling --stages``: the per-stage cost of one publish (issue 17).

Runs the real command on a small workload (a real broker, the official client, persisted acks, one
subscriber) and checks that every stage of the publish path was found in the profile: a renamed function
would otherwise leave its row at zero and move its cost into "rest" without anyone noticing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_stages_command_finds_every_stage(tmp_path: Path) -> None:
    out_json = tmp_path / "stages.json"
    out = subprocess.run(
        [sys.executable, "-m", "bench.profiling", "--stages", "-n", "2000", "--json", str(out_json)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "| decode (frames, header) |" in out.stdout
    result = json.loads(out_json.read_text())
    assert result["plain"]["delivered"] == 2000 and result["plain"]["unpersisted"] == 0
    assert result["profiled"]["delivered"] == 2000
    stages = result["us_per_publish"]
    for stage in ("decode (frames, header)", "parse (message body)", "key (SOW key from the message)",
                  "storage read (previous record)", "journal (append + release)", "storage write (SOW upsert)",
                  "fan-out (match + queue delivery)", "ack (persisted ack queued)"):
        assert stages[stage] > 0, (stage, stages)
    # The stages are parts of the loop's busy time, never more than it.
    assert sum(stages.values()) <= result["busy_us_per_publish"] * 1.001
    assert result["plain_loop_us_per_publish"] > 0
