"""Fixtures for the configuration tests: write files into a temporary directory and load them."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from broker.config import ConfigError, load_config
from broker.errors import ConfigIssue


def _dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """``write(name, text)``: write a dedented file (line 1 = first line written) under ``tmp_path``."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dedent(text), encoding="utf-8")
        return path

    return _write


@pytest.fixture
def errors_of() -> Callable[..., list[ConfigIssue]]:
    """``errors_of(path, env=None)``: the errors of a configuration that must not load."""

    def _errors_of(path: Path, env: Mapping[str, str] | None = None) -> list[ConfigIssue]:
        with pytest.raises(ConfigError) as info:
            load_config(path, env=env or {})
        return [i for i in info.value.issues if i.severity == "error"]

    return _errors_of
