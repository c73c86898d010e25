"""<Logging><Target>: the config, the handlers broker.logfiles installs, rotation, and `broker serve`."""

from __future__ import annotations

import datetime as dt
import logging
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.config import load_config
from broker.config.model import LoggingConfig, LogTargetConfig
from broker.errors import ConfigError
from broker.logfiles import (
    close_log_files,
    configure_logging,
    expand_file_name,
    log_files,
    reopen_log_files,
)
from broker.testing.process import BrokerProcess


def _load(tmp_path: Path, logging_xml: str):  # noqa: ANN202 - Config
    path = tmp_path / "config.xml"
    path.write_text(f"<AMPSConfig><Name>n</Name>{logging_xml}</AMPSConfig>")
    return load_config(path, env={})


def test_targets_load_with_ignored_parts_warned(tmp_path: Path) -> None:
    config = _load(tmp_path, """<Logging>
      <Target><Protocol>file</Protocol><FileName>logs/%Y-%m-%d-%n.log</FileName><Level>Warning</Level>
        <Levels>trace, stats</Levels><RotationThreshold>100MB</RotationThreshold></Target>
      <Target><Protocol>stdout</Protocol><Level>error</Level><IncludeErrors>00-0015</IncludeErrors></Target>
      <Target><Protocol>syslog</Protocol><Ident>x</Ident></Target>
    </Logging>""")
    assert config.logging is not None
    file_target, stdout_target = config.logging.targets
    assert (file_target.protocol, file_target.file_name, file_target.level, file_target.levels) == (
        "file", "logs/%Y-%m-%d-%n.log", "warning", ("trace", "stats"))
    assert (stdout_target.protocol, stdout_target.file_name, stdout_target.level) == ("stdout", None, "error")
    warned = {w.path.split("/")[-1].split("[")[0]: w.message for w in config.warnings}
    assert "rotated by amps-action-do-rotate-logs only" in warned["RotationThreshold"]
    assert "carry no AMPS message ids" in warned["IncludeErrors"]
    assert "Protocol 'syslog' is not supported yet; the target is ignored" in warned["Target"]
    assert len(config.warnings) == 3  # the syslog target's <Ident> is part of its one warning


def test_an_empty_logging_section_keeps_stderr_and_says_so(tmp_path: Path) -> None:
    config = _load(tmp_path, "<Logging/>")
    assert config.logging is not None and config.logging.targets == ()
    (warning,) = config.warnings
    assert "has no <Target>: the broker keeps logging to stderr" in warning.message


@pytest.mark.parametrize(("target", "message"), [
    ("<Protocol>fiel</Protocol>", "unknown log target Protocol 'fiel': use file, stdout or stderr. Did you mean 'file'?"),
    ("<Protocol>file</Protocol><Level>loud</Level>", "'loud' is not an AMPS log level"),
    ("<Protocol>file</Protocol><Levels>info,loud</Levels>", "'loud' is not an AMPS log level"),
    ("<Protocol>file</Protocol><FileName>x-%Q.log</FileName>", "%Q is not a file name token"),
    ("<Level>info</Level>", "Protocol"),
])
def test_bad_targets_are_errors(tmp_path: Path, target: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, f"<Logging><Target>{target}</Target></Logging>")
    assert any(message in issue.message for issue in info.value.issues), info.value.issues


def test_file_name_tokens() -> None:
    when = dt.datetime(2024, 3, 9, 1, 2, 3)
    assert expand_file_name("%Y-%m-%dT%H%M%S.log", when) == "2024-03-09T010203.log"
    assert expand_file_name("logs/%F/%a-%j-%n.log", when, 12) == "logs/2024-03-09/Sat-069-00012.log"
    assert expand_file_name("100%%-%n", when) == "100%-00000"


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger of the test's own (the root logger is pytest's), cleaned up afterwards."""
    log = logging.getLogger("test.logfiles")
    log.propagate = False
    yield log
    close_log_files(log)
    log.handlers.clear()


def _target(tmp_path: Path, mask: str, **values: object) -> LoggingConfig:
    return LoggingConfig(targets=(LogTargetConfig(protocol="file", file_name=str(tmp_path / mask),
                                                  **values),))  # type: ignore[arg-type]


def test_a_file_target_writes_amps_shaped_lines_at_its_levels(tmp_path: Path, logger: logging.Logger) -> None:
    (path,) = configure_logging(_target(tmp_path, "logs/a/%Y/broker.log", level="warning", levels=("stats",)),
                                "info", logger=logger)
    assert Path(path).parent.is_dir() and path.startswith(str(tmp_path / "logs" / "a"))
    logger.info("not written")
    logger.warning("a warning")
    logger.log(15, "a stats line")
    logger.debug("not written either")
    lines = Path(path).read_text().splitlines()
    assert len(lines) == 2
    stamp, rest = lines[0].split(" ", 1)
    assert dt.datetime.fromisoformat(stamp).tzinfo is not None
    assert rest == "[MainThread] warning: test.logfiles: a warning"
    assert lines[1].endswith("stats: test.logfiles: a stats line")
    assert log_files() == [path]


def test_the_default_level_is_the_command_lines(tmp_path: Path, logger: logging.Logger) -> None:
    (path,) = configure_logging(_target(tmp_path, "b.log"), "debug", logger=logger)
    logger.debug("python debug")
    assert "trace: test.logfiles: python debug" in Path(path).read_text()


def test_reopen_opens_the_name_the_mask_gives_now(tmp_path: Path, logger: logging.Logger) -> None:
    configure_logging(LoggingConfig(targets=(
        LogTargetConfig(protocol="file", file_name=str(tmp_path / "seq-%n.log")),
        LogTargetConfig(protocol="file", file_name=str(tmp_path / "same.log")),
    )), "info", logger=logger)
    logger.info("one")
    assert reopen_log_files() == [str(tmp_path / "seq-00001.log"), str(tmp_path / "same.log")]
    logger.info("two")
    assert "one" in (tmp_path / "seq-00000.log").read_text()
    assert "two" in (tmp_path / "seq-00001.log").read_text()
    assert "one" not in (tmp_path / "seq-00001.log").read_text()
    same = (tmp_path / "same.log").read_text()  # the same name: appended, nothing lost
    assert same.index("one") < same.index("two")


def test_reopen_failure_keeps_the_old_file(tmp_path: Path, logger: logging.Logger) -> None:
    blocker = tmp_path / "dir"
    configure_logging(_target(tmp_path, "dir/%n.log"), "info", logger=logger)
    (blocker / "00001.log").mkdir()  # the next name cannot be opened as a file
    with pytest.raises(OSError):
        reopen_log_files()
    logger.info("still here")
    assert "still here" in (blocker / "00000.log").read_text()


def test_no_targets_changes_nothing(logger: logging.Logger) -> None:
    logger.addHandler(logging.NullHandler())
    # pytest >= 9.2 attaches its own capture handlers to non-propagating loggers: compare with what was there.
    before = list(logger.handlers)
    assert configure_logging(None, "info", logger=logger) == []
    assert configure_logging(LoggingConfig(), "info", logger=logger) == []
    assert logger.handlers == before
    assert reopen_log_files() == []


def test_broker_serve_logs_to_the_configured_file(tmp_path: Path) -> None:
    proc = BrokerProcess.from_xml(tmp_path, extra="""<Logging><Target><Protocol>file</Protocol>
        <FileName>logs/%Y/broker-%n.log</FileName><Level>info</Level></Target></Logging>""").start()
    try:
        (path,) = (tmp_path / "logs").glob("*/broker-00000.log")  # the %Y directory was created
        _wait_for_text(path, "ready (instance test-broker;")
        assert "] info: broker: broker " in path.read_text()
    finally:
        assert proc.stop() == 0
    assert "ready" not in proc.log()  # the file target replaced stderr
    assert "broker stopped" in path.read_text()


def test_rotate_logs_on_a_signal_opens_the_next_file(tmp_path: Path) -> None:
    proc = BrokerProcess.from_xml(tmp_path, extra="""
        <Logging><Target><Protocol>file</Protocol><FileName>logs/broker-%n.log</FileName></Target></Logging>
        <Actions><Action>
          <On><Module>amps-action-on-signal</Module><Options><Signal>SIGUSR1</Signal></Options></On>
          <Do><Module>amps-action-do-rotate-logs</Module></Do>
          <Do><Module>amps-action-do-echo-message</Module><Options><Message>rotated</Message></Options></Do>
        </Action></Actions>""").start()
    first, second = tmp_path / "logs" / "broker-00000.log", tmp_path / "logs" / "broker-00001.log"
    try:
        _wait_for_text(first, "ready (instance test-broker;")
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGUSR1)
        _wait_for_text(second, "rotated")
    finally:
        assert proc.stop() == 0
    assert "rotated" not in first.read_text()
    assert "broker stopped" in second.read_text()


def _wait_for_text(path: Path, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.05)
