"""The switch between compiled modules and their pure-Python fallbacks (broker/speedups)."""

from __future__ import annotations

import pytest

from broker import speedups


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
