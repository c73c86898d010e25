"""The benchmark harness in --quick mode (issue 8): one command produces the table and the JSON file.

Runs the real harness against a real broker (and whichever peers are installed; nothing is installed
here). Kept well under 90 s on 2 cores.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("AMPS")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_quick_run_produces_table_and_json(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--no-install", "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "broker vs peers: quick run" in out.stdout
    for wid in ("W1", "W2", "W3", "W4", "W5", "W6"):
        assert wid in out.stdout

    # Everything the run started is gone: its temporary directory was removed.
    workdir = re.search(r"in (\S+bench-\S+)", out.stdout)
    assert workdir and not Path(workdir.group(1)).exists()

    (results,) = tmp_path.glob("*-quick.json")
    assert (tmp_path / results.name.replace(".json", ".md")).read_text().count("| W") >= 6
    data = json.loads(results.read_text())
    assert data["machine"]["cores"] and data["machine"]["cpu_model"]
    assert data["versions"]["python"] and data["versions"]["broker"]
    assert {r["workload"].split()[0] for r in data["rows"]} == {"W1", "W2", "W3", "W4", "W5", "W6"}
    for row in data["rows"]:
        broker = row["broker"]
        assert not broker["note"].startswith(("n/a", "error", "incomplete")), row  # the run exits 1 then
        assert broker["value"] and broker["value"] > 0, row
        for peer in row["peers"]:
            # A peer is measured, or says why not: never a silent blank.
            assert (peer["value"] or 0) > 0 or peer["note"], peer
    # Every workload proves its result correct with at least one boolean check, and every check holds
    # (a False one also makes the run exit 1: bench/report.py failures()).
    for wid in ("W1", "W2", "W3", "W4", "W5", "W6"):
        checks = [v for r in data["rows"] if r["workload"].startswith(wid) for v in r["checks"].values()
                  if isinstance(v, bool)]
        assert checks and all(checks), (wid, [r["checks"] for r in data["rows"] if r["workload"].startswith(wid)])
    oof = [r for r in data["rows"] if r["workload"].startswith("W3") and "updates" in r["case"]]
    # One case per subscriber count (1 and 4), every subscriber exact in each.
    assert [r["broker"]["detail"]["subscribers"] for r in oof] == [1, 4]
    assert all(r["checks"]["oof_exactly_once"] is True for r in oof)
    assert all(p["exact"] for r in oof for p in r["checks"]["per_subscriber"])
    # The publisher's lateness against its schedule is reported (a late publisher is not a late broker).
    assert all(0 <= r["checks"]["publisher_late"]["p50_ms"] <= r["checks"]["publisher_late"]["max_ms"] for r in oof)
    assert all(f["value"] > 0 for f in data["limits"].values())
