"""bench.attacks --quick: every row runs against a real broker and gives both distributions and their ratio."""

from __future__ import annotations

import math

import pytest

from bench.attacks import main, run  # noqa: E402 - after the skip: the harness imports AMPS when run


def test_quick_attack_rows_measure_a_bystander_quiet_and_attacked() -> None:
    rows = run(0.3, quick=True)
    assert [row.name for row in rows] == ["publish-50mb", "publish-50mb-filtered", "publish-50mb-sow",
                                          "publish-50mb-ws", "publish-50mb-tls", "replay-50mb", "logon-60mb",
                                          "ws-fragments", "admin-flood",
                                          "logon-flood", "admin-guess", "tls-handshakes"]
    for row in rows:
        assert row.quiet and row.attacked and row.attacks >= 1, row.line()
        assert math.isfinite(row.ratio) and row.ratio > 0, row.line()
        assert "ratio" in row.line()
    outcomes = {row.name: row.outcomes for row in rows}
    assert set(outcomes["admin-flood"]) <= {"200", "503", "unfinished"} and outcomes["admin-flood"].get("200")
    assert not outcomes["admin-flood"].get("unfinished"), outcomes["admin-flood"]
    assert outcomes["logon-flood"].get("failure"), outcomes["logon-flood"]  # wrong passwords are refused
    assert outcomes["admin-guess"] and set(outcomes["admin-guess"]) <= {"401", "429", "503"}, outcomes["admin-guess"]
    assert outcomes["tls-handshakes"].get("handshake"), outcomes["tls-handshakes"]


def test_the_command_line_runs_one_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--seconds", "0.2", "--row", "logon-60mb"]) == 0
    out = capsys.readouterr().out
    assert "logon-60mb" in out and "publish-50mb" not in out
