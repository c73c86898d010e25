"""The harness fails (exit status 1, reasons on stderr) when any broker figure errors (issue 14: an
error became "n/a" and CI stayed green)."""

from __future__ import annotations

import signal
import sys
import types
from pathlib import Path

import pytest

from bench import run
from bench.figures import Figure, Row
from bench.report import failures


def test_failures_name_every_broker_row_without_a_figure() -> None:
    rows = [
        Row("W1", "ok", Figure("broker", 10.0), [Figure("redis", None, note="skipped: not installed")]),
        Row("W2", "peer failed", Figure("broker", 10.0), [Figure("nats", None, note="error: Timeout")]),
        Row("W3", "crashed", Figure("broker", None, note="error: TimeoutError")),
        Row("W4", "refused", Figure("broker", None, note="n/a (not implemented)")),
        Row("W5", "lost", Figure("broker", 9.0, note="incomplete: 9/10 delivered")),
        Row("W6", "checked", Figure("broker", 5.0), checks={"oof_exactly_once": False, "other": True}),
    ]
    assert failures(rows) == [
        "W3 crashed: error: TimeoutError",
        "W4 refused: n/a (not implemented)",
        "W5 lost: incomplete: 9/10 delivered",
        "W6 checked: check failed: oof_exactly_once",
    ]


def _raise(ctx: object) -> list[Row]:
    raise ConnectionError("the broker closed the connection")


def _refused(ctx: object) -> list[Row]:
    # What W4 reported when the broker answered its bookmark subscription with an error.
    return [Row("W3", "refused", Figure("broker", None, note="n/a (not implemented)"))]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("workload", "reason"), [
    (_raise, "W3 (failed): error: ConnectionError"),
    (_refused, "W3 refused: n/a (not implemented)"),
])
def test_quick_run_exits_1_when_a_workload_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], workload, reason: str) -> None:
    pytest.importorskip("AMPS")
    failing = types.ModuleType("bench_failing_workload")
    failing.run = workload  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench_failing_workload", failing)
    monkeypatch.setitem(run.WORKLOADS, "W3", ("bench_failing_workload", ()))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = run.main(["--quick", "--no-install", "--no-peers", "--only", "W3", "--results-dir", str(tmp_path)])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 1
    assert f"FAILED: {reason}" in capsys.readouterr().err
