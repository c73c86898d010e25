"""Every key generator test runs twice: with the compiled default key (broker/speedups/publish.pyx) and with
the pure-Python code it is the twin of."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import broker_plugins.keygen.default as default_keygen


@pytest.fixture(params=["compiled", "python"], autouse=True)
def key_implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``compiled``: the compiled key when built (skipped otherwise); ``python``: the fallback forced."""
    if request.param == "python":
        monkeypatch.setattr(default_keygen, "_compiled_key", None)
    elif default_keygen._compiled_key is None:
        pytest.skip("broker.speedups.publish is not built (or BROKER_PURE_PYTHON is set)")
    yield request.param
