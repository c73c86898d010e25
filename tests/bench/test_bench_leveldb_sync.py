"""``python -m bench --leveldb-sync both``: W1 with LevelDB sync writes off and on, in one run (issue 20)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import load_config
from broker.plugin_config import resolve_plugins
from broker.plugins import build_plugin_manager

ROOT = Path(__file__).resolve().parents[2]


def test_the_sync_topic_is_leveldb_with_sync_on() -> None:
    config = load_config(ROOT / "bench" / "configs" / "bench.xml", env={"BENCH_PORT": "9999", "BENCH_WS_PORT": "9998",
                                                                        "BENCH_SECURE_PORT": "9997"})
    topics = resolve_plugins(config, build_plugin_manager()).topics
    assert (topics["bench-ingest-sync"].storage.name, dict(topics["bench-ingest-sync"].storage.options)) == \
        ("leveldb", {"sync": "true"})
    assert (topics["bench-ingest"].storage.name, dict(topics["bench-ingest"].storage.options)) == ("leveldb", {})


@pytest.mark.timeout(200)
def test_w1_reports_sync_off_and_on_in_one_run(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "W1", "--no-peers", "--no-install", "--scale", "0.2",
         "--leveldb-sync", "both", "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    (results,) = tmp_path.glob("*-quick-x0.2-leveldb-sync-both.json")
    rows = json.loads(results.read_text())["rows"]
    assert [r["case"] for r in rows] == ["1,000 upserts, 1,000 keys, leveldb sync=false",
                                         "1,000 upserts, 1,000 keys, leveldb sync=true",
                                         "1,000 upserts, 1,000 keys, authentication + entitlement filter (vs off)"]
    off, on, secure = rows
    # The security row (issue 18): ingested through the bench-secure transport, next to security off.
    assert secure["broker"]["system"] == "broker, auth + entitlements" and secure["broker"]["value"] > 0
    assert secure["peers"][0]["system"] == "broker, security off" and secure["peers"][0]["value"] > 0
    rows = [off, on]
    for row in rows:
        assert row["broker"]["value"] > 0
        assert row["checks"]["sow_records_after"] == row["checks"]["sow_records_expected"] == 1000
    assert on["limit"]["system"] == "fsync" and on["peers"] == []
    assert on["checks"]["rate_vs_sync_off"] == round(on["broker"]["value"] / off["broker"]["value"], 3)
