"""If gates: file-system usage (real statvfs and a faked one) and AMPS-filter conditions over variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from broker.actions.interface import ActionError, RunContext
from broker.plugins import Registry
from broker.testing.actions import FakeHost, GateConformance, check_gate
from broker_plugins.actions import gates

REGISTRY = Registry("action")
gates.broker_register_actions(REGISTRY)


async def check(name: str, options: Mapping[str, str], variables: Mapping[str, str] | None = None) -> bool:
    """Check the gate once as a run does (substitution, option parsing); it must answer."""
    result = await check_gate(gates, name, options, variables=variables, host=FakeHost())
    assert result.outcome in ("success", "false"), result.message
    return result.outcome == "success"


async def failure(name: str, options: Mapping[str, str], variables: Mapping[str, str] | None = None) -> str:
    """The reason of a check that must fail the run."""
    result = await check_gate(gates, name, options, variables=variables, host=FakeHost())
    assert result.outcome == "failure", result
    return result.message


class _Stat:
    f_frsize = 4096
    f_blocks = 1000
    f_bfree = 100  # 900 blocks used
    f_bavail = 50  # 50 of the free blocks are reserved for root: df shows 900 / 950


async def test_usage_is_computed_as_df_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "statvfs", lambda path: _Stat())
    assert gates.file_system_usage("/anywhere") == pytest.approx(100 * 900 / 950)
    assert await check("amps-action-if-file-system-usage", {"Path": "/x", "GreaterThan": "94%"})
    assert not await check("amps-action-if-file-system-usage", {"Path": "/x", "GreaterThan": "95%"})


async def test_usage_of_a_real_file_system(tmp_path: Path) -> None:
    used = gates.file_system_usage(str(tmp_path))
    assert 0.0 <= used <= 100.0
    assert await check("amps-action-if-file-system-usage", {"Path": str(tmp_path), "GreaterThan": "0%"}) \
        is (used > 0.0)
    assert not await check("amps-action-if-file-system-usage", {"Path": str(tmp_path), "GreaterThan": "100%"})


async def test_usage_of_a_missing_path_fails_with_what_to_do(tmp_path: Path) -> None:
    reason = await failure("amps-action-if-file-system-usage", {"Path": str(tmp_path / "missing"),
                                                                "GreaterThan": "9%"})
    assert reason.startswith(f"cannot measure the file system of Path '{tmp_path / 'missing'}': No such file")
    assert "give an existing file or directory" in reason


def test_usage_options_are_checked() -> None:
    declared = REGISTRY.registration("amps-action-if-file-system-usage").options
    assert declared.problems({"Path": ".", "GreaterThan": "lots"}) == [
        "option <GreaterThan>: 'lots' is not a percentage (write e.g. 95%)"]
    assert declared.problems({"Path": "."}) == [
        "option <GreaterThan> is required (True when the file system is fuller than this, e.g. 95%)"]


@pytest.mark.parametrize(("condition", "variables", "expected"), [
    ("{{LAST_SEEN}} > 1700000000", {"LAST_SEEN": "1800000000"}, True),
    ("{{LAST_SEEN}} > 1700000000", {"LAST_SEEN": "1600000000"}, False),
    ("{{AMPS_UNIX_TIMESTAMP}} > 1700000000", {}, True),  # the fake host's clock is in 2024
    ("'{{STATUS}}' = 'down'", {"STATUS": "down"}, True),
    ("'{{STATUS}}' IN ('up', 'starting')", {"STATUS": "down"}, False),
    # Variables are also fields of the message the condition is evaluated against.
    ("/COUNT > 10 AND /AMPS_TOPIC LIKE '^orders'", {"COUNT": "12", "AMPS_TOPIC": "orders-eu"}, True),
    ("/COUNT > 10", {"COUNT": "9"}, False),
    ("/UNKNOWN = 'x'", {}, False),  # NULL is not true
    ("/UNKNOWN IS NULL", {}, True),
    ("1 = 1", {}, True),
])
async def test_condition(condition: str, variables: dict[str, str], expected: bool) -> None:
    assert await check("amps-action-if-condition", {"Condition": condition}, variables) is expected


async def test_a_bad_condition_is_a_clear_error() -> None:
    declared = REGISTRY.registration("amps-action-if-condition").options
    (problem,) = declared.problems({"Condition": "/a = "})
    assert problem.startswith("option <Condition>: is not a valid filter: expected a value")
    assert declared.problems({"Condition": "{{X}} > 3"}, templates=True) == []
    # Substituted into something that does not parse: the run fails, naming the option.
    reason = await failure("amps-action-if-condition", {"Condition": "{{X}} > 3"}, {"X": "'a"})
    assert reason.startswith("amps-action-if-condition: option <Condition>: is not a valid filter")


async def test_condition_rejects_text_that_does_not_compile_when_unparsed() -> None:
    gate = gates.Condition({})
    ctx = RunContext(action="a", module="amps-action-if-condition", options={"Condition": "/a = "},
                     variables={}, host=None)  # type: ignore[arg-type]
    with pytest.raises(ActionError, match="Condition is not a valid AMPS filter after substitution"):
        await gate.check(ctx)


class TestFileSystemUsageConformance(GateConformance):
    plugin = gates
    name = "amps-action-if-file-system-usage"
    options = {"Path": ".", "GreaterThan": "100%"}
    expected = False  # no file system is more than 100% full


class TestConditionConformance(GateConformance):
    plugin = gates
    name = "amps-action-if-condition"
    options = {"Condition": "'{{AMPS_INSTANCE_NAME}}' = 'test-broker'"}
    expected = True
