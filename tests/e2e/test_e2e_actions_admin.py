"""REST actions on a real broker's Admin port (issue 12): query parameters become variables, a missing
RequiredParameter is a 400 naming it, the listing shows Name and Description, a failing step is a 500,
counted on /metrics and logged while the broker keeps serving the official client, and an overlapping
request is a 409."""

from __future__ import annotations

import json
import shutil
import threading
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

STEPS = Path(__file__).resolve().parents[1] / "actions" / "steps_plugin.py"

ACTIONS = """<Actions>
  <Action>
    <On><Module>amps-action-on-admin</Module>
      <Options><Path>audit</Path><RequiredParameter>WHO</RequiredParameter><Name>Audit</Name>
        <Description>Append WHO to audit.log</Description></Options></On>
    <Do><Module>audit-append-line</Module>
      <Options><File>audit.log</File><Line>{{WHO}} audited {{AMPS_INSTANCE_NAME}} ({{Note}})</Line></Options></Do>
  </Action>
  <Action>
    <On><Module>amps-action-on-admin</Module><Options><Path>explode</Path><Name>Exploder</Name></Options></On>
    <Do><Module>test-explode</Module></Do>
    <Do><Module>audit-append-line</Module><Options><File>audit.log</File><Line>never</Line></Options></Do>
  </Action>
  <Action>
    <On><Module>amps-action-on-admin</Module><Options><Path>nap</Path></Options></On>
    <Do><Module>test-nap</Module><Options><Seconds>{{S}}</Seconds></Options></Do>
  </Action>
</Actions>"""

MODULES = f"""<Module><Name>audit</Name><Library>custom_action.py</Library></Module>
<Module><Name>test-steps</Name><Library>{STEPS}</Library></Module>"""


@pytest.fixture
def admin_broker(tmp_path: Path, broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    shutil.copy(EXAMPLE, tmp_path / "custom_action.py")
    proc = broker_factory(admin=True, modules=MODULES, extra=ACTIONS)
    # The REST actions are registered as the last step of start-up, just after the ports open.
    deadline = time.monotonic() + 15
    while "/actions/nap" not in get(proc, "/amps/administrator")[1]:
        assert time.monotonic() < deadline, proc.log()
        time.sleep(0.05)
    return proc


def get(proc: BrokerProcess, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.admin_port}{path}", timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def metrics(proc: BrokerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = fresh_get(proc.admin_port, "/metrics")[1].decode()  # a statistics sample taken after the call
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def runs(found: dict, action: str, outcome: str) -> float:
    return found.get(("broker_action_runs_total", (("action", action), ("outcome", outcome))), 0.0)


def test_query_parameters_become_variables_and_the_listing_names_each_action(admin_broker, tmp_path) -> None:
    status, listing = get(admin_broker, "/amps/administrator")
    assert status == 200
    assert "/amps/administrator/actions/audit  Audit: Append WHO to audit.log (required parameters: WHO)" in \
        listing.splitlines()
    assert "/amps/administrator/actions/explode  Exploder" in listing.splitlines()
    status, body = get(admin_broker, "/amps/administrator/actions/audit?WHO=alice&Note=first%20run")
    assert status == 200, body
    assert body.startswith("action 'Audit': success")
    assert "do audit-append-line: success: appended" in body
    assert (tmp_path / "audit.log").read_text() == "alice audited test-broker (first run)\n"
    found = metrics(admin_broker)
    assert runs(found, "Audit", "success") == 1
    assert found[("broker_action_last_run_timestamp_seconds", (("action", "Audit"),))] == pytest.approx(
        time.time(), abs=30)


def test_a_missing_required_parameter_is_refused_and_nothing_runs(admin_broker, tmp_path) -> None:
    for query in ("", "?who=alice", "?WHO="):
        status, body = get(admin_broker, f"/amps/administrator/actions/audit{query}")
        assert status == 400
        assert "action 'Audit' needs the query parameter WHO" in body
        assert "request /amps/administrator/actions/audit?WHO=<value>. Nothing was run." in body
    assert "case-sensitive: 'who' was sent" in get(admin_broker, "/amps/administrator/actions/audit?who=a")[1]
    assert not (tmp_path / "audit.log").exists()
    assert runs(metrics(admin_broker), "Audit", "success") == 0
    assert get(admin_broker, "/amps/administrator/actions/nope")[0] == 404


def test_a_failing_step_is_a_500_counted_and_logged_and_the_broker_keeps_serving(admin_broker, client_factory,
                                                                                 collector, tmp_path) -> None:
    client = client_factory(admin_broker.uri)
    client.subscribe(collector, "ticks")
    status, body = get(admin_broker, "/amps/administrator/actions/explode")
    assert status == 500
    assert body.splitlines() == ["action 'Exploder': failure (" + body.split("(", 1)[1].split(")")[0] + ")",
                                 "  do test-explode: failure: RuntimeError: the disk caught fire",
                                 "  do audit-append-line: skipped"]
    assert not (tmp_path / "audit.log").exists()  # the step after the failure did not run
    found = metrics(admin_broker)
    assert runs(found, "Exploder", "failure") == 1
    assert found[("broker_action_failures_total", (("action", "Exploder"),))] == 1
    log = admin_broker.log()
    assert "ERROR" in log and "action 'Exploder' failed at do test-explode" in log
    assert "RuntimeError: the disk caught fire" in log and "Traceback" in log
    # Still serving: publish and receive through the official client, and the action can run again.
    client.publish("ticks", json.dumps({"n": 1}))
    assert collector.wait_for(1, command="publish")
    assert get(admin_broker, "/amps/administrator/actions/explode")[0] == 500
    assert runs(metrics(admin_broker), "Exploder", "failure") == 2
    tree = json.loads(fresh_get(admin_broker.admin_port, "/amps/instance/actions.json")[1])["amps"]["instance"]["actions"]
    exploder = next(a for a in tree if a["id"] == "Exploder")
    assert (exploder["runs"], exploder["failures"], exploder["running"]) == ("2", "2", "false")


def test_an_overlapping_request_is_busy(admin_broker) -> None:
    first: list[tuple[int, str]] = []
    slow = threading.Thread(target=lambda: first.append(get(admin_broker, "/amps/administrator/actions/nap?S=2")))
    slow.start()
    deadline = time.monotonic() + 10
    while metrics(admin_broker).get(("broker_action_running", (("action", "action-3"),))) != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    status, body = get(admin_broker, "/amps/administrator/actions/nap?S=0")
    assert (status, body) == (409, "action 'action-3': busy (0.000s)\n")
    slow.join(10)
    assert first == [(200, first[0][1])] and "do test-nap: success: slept 2s" in first[0][1]
    found = metrics(admin_broker)
    assert runs(found, "action-3", "busy") == 1 and runs(found, "action-3", "success") == 1
    assert found[("broker_action_last_run_duration_seconds", (("action", "action-3"),))] >= 2
    assert "action 'action-3' is still running" in admin_broker.log()
