"""The harness fails (exit status 1, reasons on stderr) when any figure that was measured errors, comes back
incomplete or fails its check, the broker's or a started peer's (issue 14: an error became "n/a" and CI stayed
green). A peer that is not installed or not selected is a skip the table states, not a failure."""

from __future__ import annotations

import signal
import sys
import types
from pathlib import Path

import pytest

from bench import install, run
from bench.context import Context
from bench.figures import Figure, Row
from bench.report import failures
from bench.sizes import QUICK
from bench.workloads import replay


def test_failures_name_every_figure_without_a_value_and_every_failed_check() -> None:
    rows = [
        Row("W1", "ok", Figure("broker", 10.0), [Figure("redis", None, note="skipped: redis-server not installed"),
                                                 Figure("nats", 5.0, checks={"values_exact": True})]),
        Row("W2", "peer failed", Figure("broker", 10.0), [Figure("nats", None, note="error: TimeoutError")]),
        Row("W2", "peer wrong", Figure("broker", 10.0), [Figure("redis", 8.0, checks={"records_exact": False})]),
        Row("W3", "crashed", Figure("broker", None, note="error: TimeoutError")),
        Row("W4", "refused", Figure("broker", None, note="error: TimeoutError (bookmark subscription refused)")),
        Row("W5", "lost", Figure("broker", 9.0, note="incomplete: 9/10 delivered")),
        Row("W5", "peer lost", Figure("broker", 9.0),
            [Figure("mosquitto", None, note="incomplete: 9/10 delivered", checks={"complete": False})]),
        Row("W6", "checked", Figure("broker", 5.0), checks={"oof_exactly_once": False, "other": True}),
    ]
    assert failures(rows) == [
        "W2 peer failed: nats: error: TimeoutError",
        "W2 peer wrong: check failed: redis records_exact",
        "W3 crashed: error: TimeoutError",
        "W4 refused: error: TimeoutError (bookmark subscription refused)",
        "W5 lost: incomplete: 9/10 delivered",
        "W5 peer lost: mosquitto: incomplete: 9/10 delivered",
        "W5 peer lost: check failed: mosquitto complete",
        "W6 checked: check failed: oof_exactly_once",
    ]


def test_a_peer_that_failed_its_check_is_not_compared() -> None:
    row = Row("W2", "c", Figure("broker", 10.0, "ms", higher_is_better=False),
              [Figure("redis", 1.0, "ms", higher_is_better=False, checks={"records_exact": False}),
               Figure("nats", 20.0, "ms", higher_is_better=False, checks={"records_exact": True})])
    assert row.best_peer().system == "nats"


def test_a_refused_bookmark_subscription_is_an_error_naming_the_exception(tmp_path: Path) -> None:
    class Refusing:
        def bookmark_subscribe(self, *args: object, **kwargs: object) -> str:
            raise TimeoutError("no ack within 5000 ms")

    exc = replay.bookmark_refusal(Refusing())
    assert isinstance(exc, TimeoutError)
    ctx = Context(sizes=QUICK, workdir=tmp_path)
    figures = replay.refused_figures(ctx, exc)
    assert len(figures) == len(replay.CASES)
    assert all(f.value is None and f.note.startswith("error: TimeoutError") for f in figures)
    assert len(failures([Row("W4", case, f) for case, f in zip(replay.CASES, figures, strict=True)])) == 3
    assert "no ack within 5000 ms" in ctx.log[-1]


def test_a_peer_installed_but_not_started_fails_and_one_not_installed_is_skipped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nats-server and mosquitto are "installed" (their server does not start); redis is not installed.
    found = {"nats-server": "/usr/sbin/nats-server", "mosquitto": "/usr/sbin/mosquitto",
             "mosquitto_pub": "/usr/bin/mosquitto_pub", "mosquitto_sub": "/usr/bin/mosquitto_sub"}
    monkeypatch.setattr(install, "ensure_debian",
                        lambda names, allowed, log: {n: found.get(n) for n in names})

    class NoStart:
        def __init__(self, exe: str, workdir: Path) -> None:
            pass

        def start(self) -> None:
            raise RuntimeError("nats exited with code 1 before it listened\nlog tail...")

    monkeypatch.setitem(run.STARTERS, "nats", NoStart)
    monkeypatch.setitem(run.STARTERS, "mosquitto", NoStart)
    ctx = Context(sizes=QUICK, workdir=tmp_path, nats_py=True)
    run.start_peers(ctx, {"redis", "nats", "mosquitto"}, allow_install=False, install_log=[])
    assert ctx.peers == {}
    assert set(ctx.failed) == {"nats", "mosquitto"} and "did not start" in ctx.failed["nats"]
    assert "redis" in ctx.skipped and "redis" not in ctx.failed
    rows = [Row("W5", "1 pub -> 1 sub", Figure("broker", 1.0), [ctx.absent("nats"), ctx.absent("mosquitto")]),
            Row("W1", "ingest", Figure("broker", 1.0), [ctx.absent("redis")])]
    assert failures(rows) == [
        "W5 1 pub -> 1 sub: nats: error: nats-server did not start (nats exited with code 1 before it listened)",
        "W5 1 pub -> 1 sub: mosquitto: error: mosquitto did not start (nats exited with code 1 before it listened)",
    ]


def _raise(ctx: object) -> list[Row]:
    raise ConnectionError("the broker closed the connection")


def _refused(ctx: object) -> list[Row]:
    # What W4 reports when the broker answers its bookmark subscription with an error.
    return [Row("W3", "refused", Figure("broker", None, note="error: RuntimeError (bookmark subscription refused)"))]


def _peer_error(ctx: object) -> list[Row]:
    return [Row("W3", "peer", Figure("broker", 10.0), [Figure("nats", None, note="error: TimeoutError")])]


def _peer_check_failed(ctx: object) -> list[Row]:
    return [Row("W3", "peer", Figure("broker", 10.0), [Figure("redis", 5.0, checks={"records_exact": False})])]


def _peer_skipped(ctx: object) -> list[Row]:
    return [Row("W3", "peer", Figure("broker", 10.0, checks={"exact": True}),
                [Figure("redis", None, note="skipped: redis-server not installed")])]


def _main_with(workload: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """``run.main`` (quick, no peers started) with W3 replaced by ``workload``."""
    fake = types.ModuleType("bench_fake_workload")
    fake.run = workload  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench_fake_workload", fake)
    monkeypatch.setitem(run.WORKLOADS, "W3", ("bench_fake_workload", ()))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        return run.main(["--quick", "--no-install", "--no-peers", "--only", "W3", "--results-dir", str(tmp_path)])
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("workload", "reason"), [
    (_raise, "W3 (failed): error: ConnectionError"),
    (_refused, "W3 refused: error: RuntimeError (bookmark subscription refused)"),
    (_peer_error, "W3 peer: nats: error: TimeoutError"),
    (_peer_check_failed, "W3 peer: check failed: redis records_exact"),
])
def test_quick_run_exits_1_when_a_figure_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], workload, reason: str) -> None:
    assert _main_with(workload, tmp_path, monkeypatch) == 1
    assert f"FAILED: {reason}" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_quick_run_exits_0_when_a_peer_is_only_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _main_with(_peer_skipped, tmp_path, monkeypatch) == 0
    assert "FAILED" not in capsys.readouterr().err
