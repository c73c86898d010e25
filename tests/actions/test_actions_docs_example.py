"""docs/examples/custom_action.py through broker.testing, as a plugin author tests a step (the broker loads
it end to end in tests/e2e/test_e2e_actions_triggers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.options import OptionError
from broker.testing import FakeHost, StepConformance, load_action, run_step

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "custom_action.py"


class TestAppendLineConformance(StepConformance):
    plugin = EXAMPLE
    name = "audit-append-line"
    options = {"File": "set per test by _log_in_tmp_path", "Line": "{{AMPS_INSTANCE_NAME}} ran"}
    failing_options = {"File": "/nonexistent-dir/audit.log", "Line": "x"}

    @pytest.fixture(autouse=True)
    def _log_in_tmp_path(self, tmp_path: Path) -> None:
        """Each test appends to a file of its own (two runs at once never share one)."""
        self.options = {**self.options, "File": str(tmp_path / "audit.log")}  # type: ignore[misc]


async def test_appends_the_substituted_line(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    options = {"File": str(log), "Line": "{{AMPS_DATETIME}} {{WHO}} audited {{AMPS_INSTANCE_NAME}}"}
    host = FakeHost(instance_name="ops-1")
    first = await run_step(EXAMPLE, "audit-append-line", options, variables={"WHO": "alice"}, host=host)
    second = await run_step(EXAMPLE, "audit-append-line", options, variables={"WHO": "bob"}, host=host)
    assert (first.outcome, second.outcome) == ("success", "success")
    assert first.message == f"appended 44 bytes to {log} (now 44 bytes)"
    # FakeHost's clock starts at 2024-01-01T00:00Z; AMPS_DATETIME is its AMPS form.
    lines = log.read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["alice audited ops-1", "bob audited ops-1"]
    assert lines[0].startswith("20240101T0000") and lines[0].split(" ")[0].endswith("Z")


async def test_failures_are_results_with_messages(tmp_path: Path) -> None:
    full = await run_step(EXAMPLE, "audit-append-line",
                          {"File": str(tmp_path / "a.log"), "Line": "x" * 20, "MaxBytes": "10"})
    assert full.outcome == "failure"
    assert full.message == f"{tmp_path / 'a.log'} would grow past MaxBytes (10 bytes): rotate or remove it"
    missing = await run_step(EXAMPLE, "audit-append-line", {"File": str(tmp_path / "no" / "a.log"), "Line": "x"})
    assert missing.outcome == "failure" and "check that its directory exists" in missing.message
    # A value that only fails once its variable is substituted fails the run, naming the option.
    bad = await run_step(EXAMPLE, "audit-append-line",
                         {"File": str(tmp_path / "b.log"), "Line": "x", "MaxBytes": "{{LIMIT}}"},
                         variables={"LIMIT": "lots"})
    assert bad.outcome == "failure" and "option <MaxBytes>" in bad.message and "'lots'" in bad.message


def test_options_are_checked_as_broker_check_does() -> None:
    registration = load_action(EXAMPLE, "audit-append-line")
    assert registration.options is not None
    assert registration.options.problems({"File": "f"}) == [
        "option <Line> is required (the line to append; {{VARIABLES}} are substituted)"
    ]
    with pytest.raises(OptionError, match="unknown option <Colour>"):
        load_action(EXAMPLE, "audit-append-line").options.check({"File": "f", "Line": "l", "Colour": "red"},
                                                                 owner="x")
