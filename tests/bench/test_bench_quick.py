"""The benchmark harness in --quick mode (issue 8): one command produces the table and the JSON file.

Runs the real harness against a real broker and whichever peers are installed (nothing is installed here:
``.ci/run`` installs redis-server, nats-server, mosquitto and their tools, and the ``test`` extra the peers'
Python clients). A peer that is installed must be measured, with a value and every check holding, so CI runs
the peers' code paths; one that is not installed must say so. About 40 s on 2 cores with every peer.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import install, run
from bench.workloads.fanout import WEBSOCKET_ROW

ROOT = Path(__file__).resolve().parents[2]


def installed_peers() -> set[str]:
    """The peers whose server and client tools are here (their Python clients come with the test extra): the
    run must measure them."""
    return {peer for peer, (server, tools) in run.PEER_EXECUTABLES.items()
            if all(install.find_executable(e) for e in (server, *tools))}


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
    # W3's snapshots: every subscriber got every open record (a wrong count fails the run).
    snaps = [r for r in data["rows"] if r["workload"].startswith("W3") and "snapshot" in r["case"]]
    assert len(snaps) == 2 and all(r["checks"]["snapshot_exact"] is True for r in snaps)

    # The peers: every one that is present in a row was measured and its checks hold; an installed one is
    # never skipped, so the peers' code paths run here; one that is not installed says so.
    peers = installed_peers()
    assert not data["failed_peers"]
    assert not peers & set(data["skipped"]), data["skipped"]
    for row in data["rows"]:
        for peer in row["peers"]:
            if peer["note"].startswith("skipped"):
                assert peer["system"] not in peers, (row["workload"], row["case"], peer)
                continue
            assert peer["value"] and peer["value"] > 0, (row["workload"], row["case"], peer)
            assert not peer["note"].startswith(("error", "incomplete")), (row["workload"], row["case"], peer)
            assert all(v is True for v in peer["checks"].values()), (row["workload"], row["case"], peer)
            if peer["system"] in run.PEER_EXECUTABLES:  # a real peer proves its count, not only its speed
                assert peer["checks"], (row["workload"], row["case"], peer)
    for wid, (_module, compared) in run.WORKLOADS.items():
        for name in peers & set(compared):
            measured = [p for r in data["rows"] if r["workload"].startswith(wid) for p in r["peers"]
                        if p["system"] == name and p["value"]]
            assert measured, f"{name} is installed but has no figure in {wid}"
    # The WebSocket row is measured or its skip is stated (no Node, or npm amps not installed: --no-install).
    assert any("over WebSocket" in r["case"] for r in data["rows"]) or WEBSOCKET_ROW in data["skipped"]
