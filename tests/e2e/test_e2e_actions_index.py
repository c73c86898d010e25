"""Issue 33, on a real ``broker serve``: ``GET /amps/administrator/actions`` is a JSON index of the configured
actions (the REST ones with their required and optional parameters, and every action with its triggers and
steps), and a REST action's parameter whose value does not parse as the option it fills (``AGE=banana`` for
an interval) is a 400 naming the parameter and what is expected, with none of the action's steps run."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.testing.admin import fresh_get
from broker.testing.process import BrokerProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "custom_action.py"

TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <JournalArchiveDirectory>./archive</JournalArchiveDirectory>
  <FlushInterval>10ms</FlushInterval>
  <Topic><Name>events</Name><MessageType>json</MessageType></Topic>"""
# The first step needs no conversion of AGE (text); the second parses it as an interval: a bad AGE must stop
# the request before the first step appends its line.
ACTIONS = """<Actions>
  <Action>
    <On><Module>amps-action-on-admin</Module>
      <Options><Path>archive_journals</Path><RequiredParameter>AGE</RequiredParameter>
        <Name>Archive journals</Name><Description>Archive journals older than AGE</Description></Options></On>
    <Do><Module>audit-append-line</Module>
      <Options><File>audit.log</File><Line>archive older than {{AGE}} ({{Note}})</Line></Options></Do>
    <Do><Module>amps-action-do-archive-journal</Module><Options><Age>{{AGE}}</Age></Options></Do>
  </Action>
  <Action>
    <On><Module>amps-action-on-schedule</Module><Options><Every>1h</Every><Name>hourly</Name></Options></On>
    <Do><Module>amps-action-do-archive-journal</Module><Options><Age>1d</Age></Options></Do>
  </Action>
</Actions>"""
MODULES = "<Module><Name>audit</Name><Library>custom_action.py</Library></Module>"


@pytest.fixture
def actions_broker(tmp_path: Path, broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    shutil.copy(EXAMPLE, tmp_path / "custom_action.py")
    proc = broker_factory(admin=True, transaction_log=TXLOG, modules=MODULES, extra=ACTIONS)
    deadline = time.monotonic() + 15  # REST actions are registered as the last step of start-up
    while "archive_journals" not in get(proc, "/amps/administrator")[2]:
        assert time.monotonic() < deadline, proc.log()
        time.sleep(0.05)
    return proc


def get(proc: BrokerProcess, path: str) -> tuple[int, str, str]:
    """``(status, content type, body)`` of a real HTTP GET to the broker's Admin port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.admin_port}{path}", timeout=30) as reply:
            return reply.status, reply.headers["content-type"], reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["content-type"], error.read().decode()


def runs(proc: BrokerProcess, action: str) -> dict[str, float]:
    text = fresh_get(proc.admin_port, "/metrics")[1].decode()
    return {s.labels["outcome"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "broker_action_runs_total" and s.labels.get("action") == action}


def test_the_index_lists_rest_and_configured_actions_as_json(actions_broker: BrokerProcess) -> None:
    status, content_type, body = get(actions_broker, "/amps/administrator/actions")
    assert status == 200, body
    assert content_type == "application/json"
    index = json.loads(body)
    assert index["rest"] == [{
        "path": "/amps/administrator/actions/archive_journals",
        "name": "Archive journals",
        "description": "Archive journals older than AGE",
        "action": "Archive journals",
        "required": ["AGE"],
        "optional": [{"name": "Note", "default": ""}],
    }]
    assert [a["name"] for a in index["actions"]] == ["Archive journals", "hourly"]
    hourly = index["actions"][1]
    assert hourly["triggers"] == [{"Module": "amps-action-on-schedule", "Every": "1h", "Name": "hourly"}]
    assert hourly["steps"] == ["do amps-action-do-archive-journal"] and hourly["variables"] == []
    assert index["actions"][0]["steps"] == ["do audit-append-line", "do amps-action-do-archive-journal"]
    assert index["actions"][0]["variables"] == ["AGE", "Note"]
    assert get(actions_broker, "/amps/administrator/actions/")[2] == body  # a trailing slash is the same
    listing = get(actions_broker, "/amps/administrator")[2].splitlines()
    assert listing[0] == "/amps/administrator/actions  Index of the configured actions (JSON)"


def test_a_bad_parameter_value_is_a_400_naming_it_and_nothing_runs(actions_broker: BrokerProcess,
                                                                   tmp_path: Path) -> None:
    status, content_type, body = get(actions_broker, "/amps/administrator/actions/archive_journals?AGE=banana")
    assert status == 400, body
    assert content_type.startswith("text/plain")
    assert "AGE='banana'" in body and "<Age>" in body and "amps-action-do-archive-journal" in body
    assert "is not an interval (expected e.g. 10m" in body and "Nothing was run" in body
    assert not (tmp_path / "audit.log").exists()  # the first step, which AGE=banana would not stop, did not run
    assert sum(runs(actions_broker, "Archive journals").values()) == 0  # refused, not a failed run

    status, _type, body = get(actions_broker, "/amps/administrator/actions/archive_journals?AGE=0s&Note=ok")
    assert status == 200, body
    assert (tmp_path / "audit.log").read_text() == "archive older than 0s (ok)\n"
    assert runs(actions_broker, "Archive journals")["success"] == 1
