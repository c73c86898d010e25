"""Do steps on real files: journal archive/compress/remove, remove/compress files, SOW and basic steps.

Each step runs as the action runtime runs it (options substituted, parsed by the module's declared
OptionSet, then ``run``), against a small fake host and real journals written by ``JournalWriter``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from broker.actions.interface import StepResult
from broker.config.model import TransactionLogConfig
from broker.plugins import Registry
from broker.testing.actions import FakeHost, StepConformance, run_step
from broker.txlog import FileState, JournalReader, JournalWriter, ReplayStart
from broker.txlog.cli import dump
from broker.txlog.files import parse_name
from broker_plugins.actions import basic, files, journal, sow

MB = 1024 * 1024
DAY = 86400.0


def _registry(*modules: Any) -> Registry:
    registry = Registry("action")
    for module in modules:
        module.broker_register_actions(registry)
    return registry


MODULES = (journal, files, sow, basic)
REGISTRY = _registry(*MODULES)
#: The plugin module registering each name.
PLUGINS = {name: module for module in MODULES for name in _registry(module).names()}


class WallClock:
    """The host's clock: now, moved ``offset`` seconds."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.offset)


def make_host(writer: JournalWriter | None = None, *, archive: bool = True, **values: Any) -> FakeHost:
    """A FakeHost on the wall clock (journal files carry real times), over ``writer``'s directories."""
    if writer is not None:
        parsed = parse_name(writer.current_path.name)
        values.update(instance_name="inst-a", journal_directory=writer.journal_directory,
                      journal_archive_directory=writer.archive_directory if archive else None,
                      writer_index=parsed[1] if parsed else None)
    return FakeHost(clock=WallClock(), **values)


async def outcome(name: str, options: Mapping[str, str], host: FakeHost | None = None,
                  variables: Mapping[str, str] | None = None) -> StepResult:
    """Run the step once through the runtime's own code (substitution, option parsing, failures)."""
    return await run_step(PLUGINS[name], name, options, variables=variables,
                          host=host if host is not None else make_host())


async def ok(name: str, options: Mapping[str, str], host: FakeHost | None = None,
             variables: Mapping[str, str] | None = None) -> str:
    """The line of a run that must succeed."""
    result = await outcome(name, options, host, variables)
    assert result.outcome == "success", result.message
    return result.message


async def failed(name: str, options: Mapping[str, str], host: FakeHost | None = None,
                 variables: Mapping[str, str] | None = None) -> str:
    """The reason of a run that must fail."""
    result = await outcome(name, options, host, variables)
    assert result.outcome == "failure", result
    return result.message


# -- journals --------------------------------------------------------------------------------------------

@pytest.fixture
def writer(tmp_path: Path) -> Iterator[JournalWriter]:
    """A writer with four sealed files (0-3), the current file 4 and a preallocated file 5."""
    config = TransactionLogConfig(journal_directory=str(tmp_path / "journal"),
                                  journal_archive_directory=str(tmp_path / "archive"),
                                  journal_size=MB, preallocated_journal_files=2)
    w = JournalWriter(config, "inst-a")
    w.open()
    for i in range(450):
        w.append("publish", "orders", json.dumps({"id": i, "pad": "x" * 10_000}).encode(), sow_key=f"k{i}")
        if i % 10 == 0:
            w.sync()
    w.sync()
    states = [f.state for f in w.files()]
    assert states == [FileState.FULL] * 4 + [FileState.CURRENT, FileState.PREALLOCATED]
    yield w
    w.close()


def _age(path: Path, days: float) -> None:
    """Make ``path`` look last written ``days`` ago."""
    when = time.time() - days * DAY
    os.utime(path, (when, when))


def _sequences(w: JournalWriter) -> list[int]:
    reader = JournalReader(w.journal_directory, w.archive_directory, instance_name="inst-a")
    return [r.sequence for r in reader.records(ReplayStart.epoch(), until_sequence=w.durable_sequence)]


def _dumped(*directories: Path) -> list[int]:
    out = io.StringIO()
    dump([d for d in directories if d.exists()], out=out, err=None)
    return [json.loads(line)["sequence"] for line in out.getvalue().splitlines()]


def _by_index(w: JournalWriter) -> dict[int, Any]:
    return {f.index: f for f in w.files()}


async def test_archive_moves_sealed_files_and_they_stay_replayable(writer: JournalWriter) -> None:
    host = make_host(writer)
    said = await ok("amps-action-do-archive-journal", {"Age": "0s"}, host)
    assert said == f"archived 4 journal files (idx 0-3) to {writer.archive_directory}"
    files = _by_index(writer)
    assert [files[i].state for i in range(4)] == [FileState.ARCHIVED] * 4
    assert files[4].state is FileState.CURRENT and files[5].state is FileState.PREALLOCATED
    assert files[4].path.parent == writer.journal_directory
    assert _sequences(writer) == list(range(1, 451))
    assert _dumped(writer.journal_directory, writer.archive_directory) == list(range(1, 451))
    # Nothing left to do: the current file and the preallocated one are never archived.
    assert (await ok("amps-action-do-archive-journal", {"Age": "0s"}, host)).startswith(
        "no journal file to archive")


async def test_compress_in_both_directories_keeps_the_log_whole(writer: JournalWriter) -> None:
    host = make_host(writer)
    before = {i: f.path.stat().st_mtime_ns for i, f in _by_index(writer).items() if i < 2}
    await ok("amps-action-do-archive-journal", {"Age": "0s"}, host)
    for f in writer.files():
        if f.index >= 2 and f.state is FileState.ARCHIVED:  # move 2 and 3 back: one plain file per directory
            f.path.rename(writer.journal_directory / f.path.name)
    said = await ok("amps-action-do-compress-journal", {"Age": "0s"}, host)
    assert said == "compressed 4 journal files (idx 0-3)"
    files = _by_index(writer)
    assert [files[i].state for i in range(4)] == [FileState.COMPRESSED] * 4
    assert [files[i].archived for i in range(4)] == [True, True, False, False]
    assert files[4].state is FileState.CURRENT and not files[4].compressed
    # The compressed copy keeps the time of the last write, so a later Age still measures from it.
    assert {i: files[i].path.stat().st_mtime_ns for i in range(2)} == before
    assert not list(writer.journal_directory.glob("*.tmp")) and not list(writer.archive_directory.glob("*.tmp"))
    assert _sequences(writer) == list(range(1, 451))
    assert _dumped(writer.journal_directory, writer.archive_directory) == list(range(1, 451))


async def test_age_is_the_time_since_the_last_write(writer: JournalWriter) -> None:
    host = make_host(writer)
    files = _by_index(writer)
    for i, days in enumerate((3.5, 2.5, 1.2, 0.2)):
        _age(files[i].path, days)
    said = await ok("amps-action-do-compress-journal", {"Age": "36h"}, host)
    assert said == "compressed 2 journal files (idx 0-1)"
    said = await ok("amps-action-do-archive-journal", {"Age": "{{AGE}}"}, host, {"AGE": "3d"})
    assert said.startswith("archived 1 journal file (idx 0) to ")
    assert (await ok("amps-action-do-remove-journal", {"Age": "4d"}, host)) == \
        "no journal file to remove (none sealed and older than 4d)"
    host.clock.offset = 2 * DAY  # two days later, by the host's clock
    assert (await ok("amps-action-do-remove-journal", {"Age": "4d"}, host)) == \
        "removed 2 journal files (idx 0-1)"


async def test_remove_stops_at_the_first_file_that_does_not_qualify(writer: JournalWriter) -> None:
    host = make_host(writer)
    files = _by_index(writer)
    for i in (0, 2, 3):
        _age(files[i].path, 10)
    _age(files[1].path, 1)  # newer than Age: files 2 and 3 must stay although they are old
    assert await ok("amps-action-do-remove-journal", {"Age": "7d"}, host) == \
        "removed 1 journal file (idx 0)"
    assert sorted(_by_index(writer)) == [1, 2, 3, 4, 5]
    left = _sequences(writer)
    assert left == list(range(left[0], 451))  # a contiguous tail
    _age(files[1].path, 10)
    assert await ok("amps-action-do-remove-journal", {"Age": "7d"}, host) == \
        "removed 3 journal files (idx 1-3)"
    files = _by_index(writer)
    assert sorted(files) == [4, 5] and files[4].state is FileState.CURRENT
    assert files[5].state is FileState.PREALLOCATED
    left = _sequences(writer)
    assert left and left[-1] == 450 and left == list(range(left[0], 451))


async def test_remove_across_archive_and_compression_leaves_a_tail(writer: JournalWriter) -> None:
    host = make_host(writer)
    await ok("amps-action-do-archive-journal", {"Age": "0s"}, host)
    await ok("amps-action-do-compress-journal", {"Age": "0s"}, host)
    files = _by_index(writer)
    for i in range(4):
        _age(files[i].path, 10 - i)
    assert await ok("amps-action-do-remove-journal", {"Age": "8d"}, host) == \
        "removed 3 journal files (idx 0-2)"
    left = _dumped(writer.journal_directory, writer.archive_directory)
    assert left == list(range(left[0], 451)) and left[0] > 1


async def test_files_under_replay_are_left_for_a_later_run(writer: JournalWriter) -> None:
    host = make_host(writer)
    replay = JournalReader(writer.journal_directory, writer.archive_directory, instance_name="inst-a").records(
        ReplayStart.epoch(), until_sequence=writer.durable_sequence)
    first = next(replay)  # the replay is reading file 0
    assert first.sequence == 1
    said = await ok("amps-action-do-remove-journal", {"Age": "0s"}, host)
    assert said == "1 journal file (idx 0) may still be read by a replay and are left for a later run"
    said = await ok("amps-action-do-compress-journal", {"Age": "0s"}, host)
    assert said == "4 journal files (idx 0-3) may still be read by a replay and are left for a later run"
    assert [f.state for f in writer.files()][:4] == [FileState.FULL] * 4
    assert [r.sequence for r in replay] == list(range(2, 451))  # the replay ends (and releases the files)
    assert await ok("amps-action-do-remove-journal", {"Age": "0s"}, host) == \
        "removed 4 journal files (idx 0-3)"


async def test_the_writers_file_is_never_touched(writer: JournalWriter) -> None:
    host = make_host(writer)
    host.writer_index = 2  # as if the writer were still on file 2: it and later files are never touched
    assert await ok("amps-action-do-remove-journal", {"Age": "0s"}, host) == \
        "removed 2 journal files (idx 0-1)"
    assert sorted(_by_index(writer)) == [2, 3, 4, 5]


async def test_a_copy_left_by_a_crash_is_removed_too(writer: JournalWriter) -> None:
    host = make_host(writer)
    original = _by_index(writer)[0].path
    kept = original.read_bytes()
    await ok("amps-action-do-compress-journal", {"Age": "0s"}, host)
    original.write_bytes(kept)  # as if killed between the rename of the .zst and the unlink
    assert await ok("amps-action-do-remove-journal", {"Age": "0s"}, host) == \
        "removed 4 journal files (idx 0-3)"
    assert sorted(_by_index(writer)) == [4, 5]
    assert not list(writer.journal_directory.glob("*.0000000000.journal*"))


async def test_journal_steps_say_what_to_configure(writer: JournalWriter) -> None:
    assert "configure <TransactionLog>" in await failed("amps-action-do-remove-journal", {"Age": "1d"})
    assert "add <JournalArchiveDirectory> to <TransactionLog>" in await failed(
        "amps-action-do-archive-journal", {"Age": "1d"}, make_host(writer, archive=False))
    problems = REGISTRY.registration("amps-action-do-archive-journal").options.problems({"Age": "soon"})
    assert problems and "option <Age>" in problems[0]



async def test_a_bad_age_at_run_time_fails_naming_the_option(writer: JournalWriter) -> None:
    before = sorted(_by_index(writer))
    for step in ("archive", "compress", "remove"):
        reason = await failed(f"amps-action-do-{step}-journal", {"Age": "{{AGE}}"}, make_host(writer),
                              {"AGE": "banana"})
        assert "option <Age>: 'banana' is not an interval" in reason, reason
    assert sorted(_by_index(writer)) == before  # nothing was touched


# -- files -----------------------------------------------------------------------------------------------

@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``logs/a.log`` .. ``logs/e.log``, last written 5.5, 4.5, 3.5, 2.5 and 1.5 days ago; the cwd is
    tmp_path."""
    monkeypatch.chdir(tmp_path)
    directory = tmp_path / "logs"
    directory.mkdir()
    for days, name in zip((5.5, 4.5, 3.5, 2.5, 1.5), "abcde", strict=True):
        path = directory / f"{name}.log"
        path.write_text(f"log {name}\n" * 1000)
        _age(path, days)
    (directory / "notes.txt").write_text("not a log")
    (directory / "sub.log").mkdir()  # a directory is never touched
    return directory


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_remove_files_by_age(logs: Path) -> None:
    host = make_host()
    said = await ok("amps-action-do-remove-files", {"Pattern": "./logs/*.log", "Age": "3d"}, host)
    assert said == "removed 3 files matching './logs/*.log' last written more than 3d ago"
    assert _names(logs) == ["d.log", "e.log", "notes.txt", "sub.log"]


async def test_remove_files_keep_and_count(logs: Path) -> None:
    host = make_host()
    options = {"Pattern": "logs/?.log", "Age": "0s", "Keep": "2", "Count": "2"}
    said = await ok("amps-action-do-remove-files", options, host)
    assert said == ("removed 2 files matching 'logs/?.log' last written more than 0s ago (2 newest kept; "
                    "1 file more beyond Count, left for the next run)")
    assert _names(logs) == ["c.log", "d.log", "e.log", "notes.txt", "sub.log"]  # oldest first
    await ok("amps-action-do-remove-files", options, host)
    assert _names(logs) == ["d.log", "e.log", "notes.txt", "sub.log"]
    said = await ok("amps-action-do-remove-files", options, host)
    assert said.startswith("no file matching 'logs/?.log' to remove") and "2 newest kept" in said


async def test_compress_files_gzips_atomically(logs: Path) -> None:
    host = make_host()
    content = (logs / "a.log").read_bytes()
    mtime = (logs / "a.log").stat().st_mtime_ns
    said = await ok("amps-action-do-compress-files", {"Pattern": "logs/*", "Age": "4d"}, host)
    assert said == "compressed 2 files matching 'logs/*' last written more than 4d ago"
    assert _names(logs) == ["a.log.gz", "b.log.gz", "c.log", "d.log", "e.log", "notes.txt", "sub.log"]
    assert gzip.decompress((logs / "a.log.gz").read_bytes()) == content
    assert (logs / "a.log.gz").stat().st_mtime_ns == mtime
    said = await ok("amps-action-do-compress-files", {"Pattern": "logs/*", "Age": "4d"}, host)
    assert said.startswith("no file matching") and "2 files already compressed" in said


async def test_a_failed_compression_keeps_the_original(logs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fsrc: Any, fdst: Any, length: int = 0) -> None:
        fdst.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.shutil, "copyfileobj", broken)
    reason = await failed("amps-action-do-compress-files", {"Pattern": "logs/a.log", "Age": "0s"})
    assert "compressed 0 files" in reason and "cannot compress logs/a.log: No space left on device" in reason
    assert _names(logs) == ["a.log", "b.log", "c.log", "d.log", "e.log", "notes.txt", "sub.log"]


async def test_a_pattern_matching_a_journal_is_refused(logs: Path) -> None:
    (logs / "inst.0000000000.journal").write_bytes(b"x")
    _age(logs / "inst.0000000000.journal", 9)
    reason = await failed("amps-action-do-remove-files", {"Pattern": "logs/*", "Age": "0s"})
    assert "matches journal files (logs/inst.0000000000.journal): refused, nothing was removed" in reason
    assert len(_names(logs)) == 8  # nothing was removed
    (logs / "inst.0000000000.journal").rename(logs / "inst.0000000000.journal.zst")
    assert "refused" in await failed("amps-action-do-compress-files", {"Pattern": "logs/*.zst", "Age": "0s"})


async def test_files_open_in_the_broker_are_left_alone(logs: Path) -> None:
    with open(logs / "a.log", "a"):
        said = await ok("amps-action-do-remove-files", {"Pattern": "logs/*.log", "Age": "4d"})
    assert said == ("removed 1 file matching 'logs/*.log' last written more than 4d ago (1 file open in the "
                    "broker, left alone: logs/a.log)")
    assert (logs / "a.log").exists() and not (logs / "b.log").exists()


async def test_a_bad_age_for_files_fails_naming_the_option(logs: Path) -> None:
    reason = await failed("amps-action-do-remove-files", {"Pattern": "logs/*", "Age": "{{AGE}}"}, None,
                          {"AGE": "7 days"})
    assert "option <Age>: '7 days' has an unknown unit 'days'" in reason
    assert len(_names(logs)) == 7


async def test_file_options_are_checked() -> None:
    declared = REGISTRY.registration("amps-action-do-remove-files").options
    assert declared.problems({"Age": "1d"}) == [
        "option <Pattern> is required (Shell glob of the files, e.g. ./logs/*.log (no recursion))"]
    assert "option <Keep>: -1 is less than 0" in declared.problems({"Pattern": "x", "Age": "1d", "Keep": "-1"})
    assert "option <Count>: 0 is less than 1" in declared.problems({"Pattern": "x", "Age": "1d", "Count": "0"})
    assert any("names a directory" in p for p in declared.problems({"Pattern": "./logs/", "Age": "1d"}))


# -- SOW -------------------------------------------------------------------------------------------------

async def test_delete_sow_passes_the_substituted_filter() -> None:
    host = make_host(sow={"orders": "json", "orders-eu": "json", "trades": "json"}, delete_counts={"orders": 3})
    host.clock = lambda: dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)  # the run's AMPS_UNIX_TIMESTAMP
    options = {"Topic": "^orders", "Filter": "/status = 'closed' AND /ts < {{AMPS_UNIX_TIMESTAMP}} - 86400"}
    said = await ok("amps-action-do-delete-sow", options, host)
    assert host.deletes == [("^orders", None, "/status = 'closed' AND /ts < 1700000000 - 86400")]
    assert said == ("deleted 3 records matching \"/status = 'closed' AND /ts < 1700000000 - 86400\" "
                    "(orders 3)")
    host.delete_counts = {}
    said = await ok("amps-action-do-delete-sow", {"Topic": "orders", "MessageType": "json", "Filter": "/x = 1"},
                    host)
    assert host.deletes[-1] == ("orders", "json", "/x = 1")
    assert said == "deleted no record: none matched '/x = 1' in orders"
    # What the host refuses fails the run with its reason.
    assert "no SOW topic matches Topic 'nope'" in await failed(
        "amps-action-do-delete-sow", {"Topic": "nope", "Filter": "/x = 1"}, host)


def test_sow_options_are_checked_at_load_time() -> None:
    declared = REGISTRY.registration("amps-action-do-delete-sow").options
    (problem,) = declared.problems({"Topic": "orders", "Filter": "/status = "})
    assert problem.startswith("option <Filter>: is not a valid filter: expected a value")
    (problem,) = declared.problems({"Topic": "orders(", "Filter": "/a = 1"})
    assert "is not a valid regular expression" in problem
    assert declared.problems({"Topic": "orders", "Filter": "/ts < {{CUTOFF}}"}, templates=True) == []


async def test_compact_sow_topic_and_message_type_both_or_neither() -> None:
    factory = REGISTRY.registration("amps-action-do-compact-sow").factory
    with pytest.raises(Exception, match="give both <Topic> and <MessageType>"):
        factory({"Topic": "orders"})
    host = make_host(sow={"orders": "json", "trades": "json"})
    assert await ok("amps-action-do-compact-sow", {}, host) == "compacted 2 SOW topics: orders, trades"
    assert await ok("amps-action-do-compact-sow", {"Topic": "^tr", "MessageType": "json"}, host) == \
        "compacted 1 SOW topic: trades"
    assert host.compactions == ["orders", "trades", "trades"]
    assert "no SOW topic of MessageType 'json' matches Topic 'x'" in await failed(
        "amps-action-do-compact-sow", {"Topic": "x", "MessageType": "json"}, host)
    assert await failed("amps-action-do-compact-sow", {}, make_host()) == "there is no SOW topic to compact"


# -- basic -----------------------------------------------------------------------------------------------

async def test_echo_message_logs_at_the_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="broker.actions")
    said = await ok("amps-action-do-echo-message", {"Message": "{{AMPS_INSTANCE_NAME}} is {{STATE}}"},
                    make_host(instance_name="inst-a"), {"STATE": "up"})
    assert said == "logged at info: inst-a is up"
    said = await ok("amps-action-do-echo-message", {"Message": "disk full", "Level": "Critical"})
    assert said == "logged at critical: disk full"
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("broker.actions", logging.INFO, "inst-a is up"), ("broker.actions", logging.CRITICAL, "disk full")]
    problems = REGISTRY.registration("amps-action-do-echo-message").options.problems(
        {"Message": "x", "Level": "loud"})
    assert problems and "option <Level>: 'loud' is not one of developer, trace" in problems[0]


async def test_nothing_shutdown_and_rotate_logs() -> None:
    host = make_host()
    assert await ok("amps-action-do-nothing", {}, host) == "did nothing"
    assert await ok("amps-action-do-shutdown", {}, host) == "shutdown requested"
    assert host.shutdown_requests == ["action 'test-action'"]
    said = await ok("amps-action-do-rotate-logs", {}, host)
    assert said.startswith("no log file to rotate: the broker logs to no file (add <Logging><Target>")
    host.log_files = ["logs/b.log"]
    assert await ok("amps-action-do-rotate-logs", {}, host) == "now logging to logs/b.log"
    assert host.rotations == 2
    assert REGISTRY.registration("amps-action-do-rotate-logs").options.problems({"Path": "x"}) == [
        "unknown option <Path> (accepted: none)"]


# -- the documented recipe -------------------------------------------------------------------------------

def test_the_retention_recipe_in_the_docs_loads(tmp_path: Path) -> None:
    from broker.config import load_config
    from broker.plugin_config import resolve_plugins
    from broker.plugins import build_plugin_manager

    docs = (Path(__file__).resolve().parents[2] / "docs" / "txlog.md").read_text()
    section = docs.split("## Journal retention (actions)", 1)[1]
    block = section.split("```xml", 1)[1].split("```", 1)[0]
    path = tmp_path / "retention.xml"
    path.write_text(f"""<AMPSConfig><Name>n</Name>
        <TransactionLog><JournalDirectory>./data/journal</JournalDirectory>
          <JournalArchiveDirectory>./data/archive</JournalArchiveDirectory></TransactionLog>
        {block}</AMPSConfig>""")
    config = load_config(path, env={})
    resolved = resolve_plugins(config, build_plugin_manager())
    assert config.warnings == () and list(resolved.warnings) == []
    assert [[ref.module for _kind, ref in action.steps] for action in config.actions] == [
        ["amps-action-do-archive-journal", "amps-action-do-compress-journal", "amps-action-do-remove-journal"],
        ["amps-action-if-file-system-usage", "amps-action-do-echo-message", "amps-action-do-shutdown"]]


# -- the contract every step keeps (broker.testing's conformance suite) ---------------------------------

class TestArchiveJournalConformance(StepConformance):
    plugin = journal
    name = "amps-action-do-archive-journal"
    options = {"Age": "1d"}
    failing_options = {"Age": "{{UNDEFINED}}"}  # expands to nothing: not an interval

    def make_host(self) -> FakeHost:  # directories without journals: nothing to do, nothing created
        return make_host(journal_directory=Path("no-such-journal"), journal_archive_directory=Path("no-such-a"))


class TestCompressJournalConformance(TestArchiveJournalConformance):
    name = "amps-action-do-compress-journal"


class TestRemoveJournalConformance(TestArchiveJournalConformance):
    name = "amps-action-do-remove-journal"


class TestRemoveFilesConformance(StepConformance):
    plugin = files
    name = "amps-action-do-remove-files"
    options = {"Pattern": "./no-such-directory/*.log", "Age": "7d", "Keep": "2", "Count": "10"}
    failing_options = {"Pattern": "./no-such-directory/*.log", "Age": "{{UNDEFINED}}"}

    def make_host(self) -> FakeHost:
        return make_host()


class TestCompressFilesConformance(TestRemoveFilesConformance):
    name = "amps-action-do-compress-files"


class TestDeleteSowConformance(StepConformance):
    plugin = sow
    name = "amps-action-do-delete-sow"
    options = {"Topic": "orders", "MessageType": "json", "Filter": "/status = 'closed'"}
    failing_options = {"Topic": "no-such-topic", "Filter": "/status = 'closed'"}

    def make_host(self) -> FakeHost:
        return make_host(sow={"orders": "json"})


class TestCompactSowConformance(TestDeleteSowConformance):
    name = "amps-action-do-compact-sow"
    options = {"Topic": "orders", "MessageType": "json"}
    failing_options = {"Topic": "no-such-topic", "MessageType": "json"}


class TestEchoMessageConformance(StepConformance):
    plugin = basic
    name = "amps-action-do-echo-message"
    options = {"Message": "{{AMPS_INSTANCE_NAME}} says hello", "Level": "warning"}
    failing_options = {"Message": "x", "Level": "{{UNDEFINED}}"}


class TestNothingConformance(StepConformance):
    plugin = basic
    name = "amps-action-do-nothing"


class TestShutdownConformance(StepConformance):
    plugin = basic
    name = "amps-action-do-shutdown"


class TestRotateLogsConformance(StepConformance):
    plugin = basic
    name = "amps-action-do-rotate-logs"
