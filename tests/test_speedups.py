"""The switch between compiled modules and their pure-Python fallbacks (broker/speedups)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker import speedups
from broker.testing.process import BrokerProcess


def test_a_module_that_was_not_built_falls_back_to_python() -> None:
    assert speedups.load("no_such_module") is None
    assert speedups.loaded()["no_such_module"] is False


@pytest.mark.parametrize("value", ["1", "yes", "true"])
def test_broker_pure_python_turns_every_compiled_module_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(speedups.PURE_PYTHON_ENV, value)
    assert speedups.pure_python()
    assert speedups.load("no_such_module") is None


@pytest.mark.parametrize("value", ["", "0", "no"])
def test_compiled_modules_are_used_unless_asked_otherwise(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(speedups.PURE_PYTHON_ENV, value)
    assert not speedups.pure_python()


@pytest.mark.parametrize("pure", [True, False])
def test_the_ready_line_says_which_code_runs(tmp_path: Path, pure: bool) -> None:
    broker = BrokerProcess.from_xml(tmp_path)
    broker.start(env={speedups.PURE_PYTHON_ENV: "1" if pure else "0"})
    try:
        deadline = time.monotonic() + 30
        while "ready" not in broker.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        ready = next(line for line in broker.log().splitlines() if " ready (" in line)
    finally:
        broker.stop()
    if pure:
        assert "pure Python: BROKER_PURE_PYTHON is set" in ready
    else:
        assert "compiled: " in ready
