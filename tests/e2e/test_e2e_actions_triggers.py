"""Action triggers in a real ``broker serve`` process (issue 12): startup, shutdown (SIGTERM, exit 0, its SOW
delete journaled before the journal closes), signals, schedules, a step asking for a shutdown, and a
third-party step loaded from ``<Modules>`` (docs/examples/custom_action.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.testing.process import BrokerProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "custom_action.py"

#: Test steps of our own, loaded through <Modules> like a third party's (no dependency on the built-in steps).
STEPS = Path(__file__).resolve().parents[1] / "actions" / "steps_plugin.py"
MODULES = f"<Module><Name>test-steps</Name><Library>{STEPS}</Library></Module>"


def write(file: str, line: str) -> str:
    return f"<Do><Module>test-write-line</Module><Options><File>{file}</File><Line>{line}</Line></Options></Do>"


def on(module: str, **options: str) -> str:
    opts = "".join(f"<{k}>{v}</{k}>" for k, v in options.items())
    return f"<On><Module>amps-action-on-{module}</Module><Options>{opts}</Options></On>"


def actions(*bodies: str) -> str:
    return "<Actions>" + "".join(f"<Action>{b}</Action>" for b in bodies) + "</Actions>"


@pytest.fixture
def make_broker(broker_factory: Callable[..., BrokerProcess]) -> Callable[..., BrokerProcess]:
    def make(extra: str, **sections: str) -> BrokerProcess:
        modules = MODULES + sections.pop("modules", "")
        return broker_factory(modules=modules, extra=extra, **sections)

    return make


def wait_until(check: Callable[[], object], timeout: float = 15.0, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def exit_code(proc: BrokerProcess, timeout: float = 15.0) -> int:
    assert proc.proc is not None
    try:
        return proc.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the broker did not exit\n{proc.log()}") from None


def test_startup_and_shutdown_actions_run_and_sigterm_exits_zero(make_broker, tmp_path: Path) -> None:
    out = tmp_path / "events.txt"
    proc = make_broker(actions(on("startup", Name="hello") + write("events.txt", "up {{AMPS_INSTANCE_NAME}}"),
                               on("shutdown", Name="bye") + write("events.txt", "down")))
    wait_until(lambda: lines(out) == ["up test-broker"], what="the startup action")
    wait_until(lambda: "ready" in proc.log(), what="the ready line")  # logged after the startup actions
    log = proc.log()
    assert log.index("listening on") < log.index("action 'hello': success") < log.index("ready")
    assert proc.stop() == 0
    assert lines(out) == ["up test-broker", "down"]
    log = proc.log()
    assert log.index("received SIGTERM, shutting down") < log.index("action 'bye': success") \
        < log.index("broker stopped")


SOW = """<Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key>
  <Durability>transient</Durability></Topic>"""
TXLOG = """<JournalDirectory>./journal</JournalDirectory>
  <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>"""


def test_a_shutdown_action_deletes_sow_records_before_the_journal_closes(make_broker, client_factory) -> None:
    """The transient SOW is rebuilt from the journal at start-up: the closed orders deleted by the shutdown
    action stay gone only if the deletes reached the journal before it closed."""
    delete = ("<Do><Module>test-delete-sow</Module><Options><Topic>orders</Topic>"
              "<Filter>/status = 'closed'</Filter></Options></Do>")
    proc = make_broker(actions(on("shutdown", Name="purge") + delete), sow=SOW, transaction_log=TXLOG)
    client = client_factory(proc.uri)
    for i, status in enumerate(["open", "closed", "open", "closed", "closed"]):
        client.publish("orders", json.dumps({"id": i, "status": status}))
    client.publish_flush(5000)
    assert proc.stop() == 0
    assert "action 'purge': success" in proc.log() and "deleted {'orders': 3}" in proc.log()
    proc.start()
    again = client_factory(proc.uri)
    ids = sorted(json.loads(m.get_data())["id"] for m in again.sow("orders", timeout=5000)
                 if m.get_command() == "sow")
    assert ids == [0, 2]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_signal_actions_and_a_bound_sighup_does_not_stop_the_broker(make_broker, client_factory,
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "signals.txt"
    proc = make_broker(actions(on("signal", Signal="SIGUSR1") + write("signals.txt", "got {{AMPS_SIGNAL}}"),
                               on("signal", Signal="SIGHUP", Name="hangup") + write("signals.txt", "hup")))
    assert proc.proc is not None
    wait_until(lambda: "ready" in proc.log(), what="ready")
    proc.proc.send_signal(signal.SIGUSR1)
    wait_until(lambda: lines(out) == ["got SIGUSR1"], what="the SIGUSR1 action")
    proc.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: lines(out) == ["got SIGUSR1", "hup"], what="the SIGHUP action")
    time.sleep(0.3)
    assert proc.proc.poll() is None  # SIGHUP is bound: it ran the action instead of stopping the broker
    client_factory(proc.uri).publish("t", '{"still": "serving"}')
    assert proc.stop() == 0


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_an_unbound_sighup_is_a_clean_shutdown(make_broker, tmp_path: Path) -> None:
    proc = make_broker(actions(on("shutdown") + write("events.txt", "down")))
    assert proc.proc is not None
    wait_until(lambda: "ready" in proc.log(), what="ready")
    proc.proc.send_signal(signal.SIGHUP)
    assert exit_code(proc) == 0
    assert lines(tmp_path / "events.txt") == ["down"]
    assert "received SIGHUP, shutting down" in proc.log()


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
def test_a_second_sigterm_stops_waiting_for_the_shutdown_actions(make_broker, tmp_path: Path) -> None:
    nap = "<Do><Module>test-nap</Module><Options><Seconds>600</Seconds></Options></Do>"
    proc = make_broker(actions(on("shutdown", Name="slow") + write("events.txt", "down") + nap))
    assert proc.proc is not None
    wait_until(lambda: "ready" in proc.log(), what="ready")
    proc.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: lines(tmp_path / "events.txt") == ["down"], what="the shutdown action")
    began = time.monotonic()
    proc.proc.send_signal(signal.SIGTERM)
    assert exit_code(proc, timeout=10) == 0
    assert time.monotonic() - began < 5
    assert "received SIGTERM again: not waiting for the on-shutdown actions" in proc.log()


def test_a_schedule_fires_repeatedly(make_broker, tmp_path: Path) -> None:
    out = tmp_path / "ticks.txt"
    make_broker(actions(on("schedule", Every="1s", Name="tick") + write("ticks.txt", "{{AMPS_UNIX_TIMESTAMP}}")))
    ticks = wait_until(lambda: len(lines(out)) >= 3 and lines(out), timeout=10, what="three ticks")
    seconds = [int(t) for t in ticks]
    assert seconds == sorted(seconds) and seconds[-1] - seconds[0] >= 1
    assert abs(seconds[-1] - time.time()) < 5


def test_a_step_can_stop_the_broker_cleanly(make_broker, tmp_path: Path) -> None:
    stop = "<Do><Module>test-stop</Module><Options><Reason>disk above 95%</Reason></Options></Do>"
    proc = make_broker(actions(on("schedule", Every="1s", Name="guard") + stop,
                               on("shutdown") + write("events.txt", "down")))
    assert exit_code(proc) == 0
    assert lines(tmp_path / "events.txt") == ["down"]
    log = proc.log()
    assert log.index("shutdown requested (disk above 95%), shutting down") < log.index("broker stopped")


def test_a_third_party_step_from_modules_runs(make_broker, tmp_path: Path) -> None:
    """docs/examples/custom_action.py, loaded by <Modules> as a .py file (copied next to the config)."""
    shutil.copy(EXAMPLE, tmp_path / "custom_action.py")
    step = ("<Do><Module>audit-append-line</Module><Options><File>audit.log</File>"
            "<Line>{{AMPS_INSTANCE_NAME}} started</Line></Options></Do>")
    proc = make_broker(actions(on("startup", Name="audit") + step),
                       modules="<Module><Name>audit</Name><Library>custom_action.py</Library></Module>")
    wait_until(lambda: lines(tmp_path / "audit.log") == ["test-broker started"], what="the audit line")
    # The step writes the file first and logs its outcome after: wait for the line too.
    wait_until(lambda: "do audit-append-line: success: appended 20 bytes to audit.log (now 20 bytes)" in proc.log(),
               what="the step's log line")


def test_a_trigger_that_cannot_start_stops_start_up_with_a_clear_error(tmp_path: Path) -> None:
    twice = on("signal", Signal="SIGUSR2") + write("x", "x")
    proc = BrokerProcess.from_xml(tmp_path, modules=MODULES, extra=actions(twice, twice))
    result = subprocess.run([sys.executable, "-m", "broker", "serve", str(proc.config_path)], cwd=tmp_path,
                            env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "error: action 'action-2'" in result.stderr
    assert "SIGUSR2 is already bound by another action: one action per signal" in result.stderr
    assert "Traceback" not in result.stderr

