"""Issue 12: bad action options are `broker check` errors with file:line and the module, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.cli import main

CONFIG = """<AMPSConfig>
  <Name>check-actions</Name>
  <Actions>
    <Action>
      <On><Module>amps-action-on-schedule</Module><Options><Every>{every}</Every></Options></On>
      <If><Module>amps-action-if-file-system-usage</Module>
        <Options><Path>.</Path><GreaterThan>{greater}</GreaterThan></Options></If>
      <Do><Module>{module}</Module><Options><Age>{age}</Age></Options></Do>
    </Action>
  </Actions>
</AMPSConfig>
"""
GOOD = {"every": "1m", "greater": "95%", "module": "amps-action-do-archive-journal", "age": "1d"}


@pytest.mark.parametrize(("change", "line", "says"), [
    ({"age": "soon"}, 8, "amps-action-do-archive-journal"),
    ({"greater": "lots"}, 6, "amps-action-if-file-system-usage"),
    ({"every": "sometimes"}, 5, "amps-action-on-schedule"),
    ({"module": "my-missing-step"}, 8, "Unknown action 'my-missing-step'"),
    ({"module": "amps-action-do-archive-journals"}, 8, "amps-action-do-archive-journal"),
])
def test_bad_action_options_are_located_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               change: dict[str, str], line: int, says: str) -> None:
    path = tmp_path / "actions.xml"
    path.write_text(CONFIG.format(**{**GOOD, **change}))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    located = [e for e in err.splitlines() if e.startswith(f"error: {path}:{line}:")]
    assert located and says in located[0], err


def test_a_missing_required_option_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "actions.xml"
    path.write_text(CONFIG.format(**GOOD).replace("<Options><Age>1d</Age></Options>", ""))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:8:" in err and "<Age> is required" in err


def test_the_good_config_checks_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "actions.xml"
    path.write_text(CONFIG.format(**GOOD))
    assert main(["check", str(path)]) == 0
    assert "action: on amps-action-on-schedule" in capsys.readouterr().out
