"""The action runtime under trio's MockClock: schedules fire at the right (wall) times without waiting, runs
never overlap (busy), failures are counted and logged and skip the later steps, If gates stop runs, options
are substituted and parsed per run, and nothing a module does escapes."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import trio
import trio.testing

from broker.actions import ActionError, Gate, RunContext, Step, Trigger
from broker.actions.runtime import ActionRuntime
from broker.config.model import Where
from broker.errors import ConfigError
from broker.options import Option, OptionSet, interval, text
from broker.plugin_config import ActionPlugins, Resolved
from broker.plugins import Registration
from broker.stats.snapshot import ActionOutcomes
from broker.testing import FakeHost
from broker_plugins.actions.triggers import ADMIN_OPTIONS, SCHEDULE_OPTIONS, OnAdmin, OnSchedule, OnShutdown

NY = ZoneInfo("America/New_York")


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


# -- building actions by hand, as resolve_plugins would ----------------------------------------------------

def ref(name: str, factory: Callable[..., Any], options: Mapping[str, str] | None = None,
        option_set: OptionSet | None = None, line: int = 1) -> Resolved:
    registration = Registration(name, factory, "test-plugin", "tests", "", option_set)
    return Resolved(registration, dict(options or {}), Where("config.xml", line, f"/AMPSConfig/Actions/x[{line}]"))


def action(on: list[Resolved], *steps: tuple[str, Resolved], line: int = 1) -> ActionPlugins:
    return ActionPlugins(tuple(on), tuple(steps), Where("config.xml", line, "/AMPSConfig/Actions/Action"))


class Record(Step):
    """Appends (host time, options, variables) to a shared list; sleeps ``Sleep`` seconds if given."""

    calls: list[tuple[dt.datetime, dict[str, Any], dict[str, str]]]

    def __init__(self, options: Mapping[str, str]) -> None:
        self.calls = RECORDED

    async def run(self, ctx: RunContext) -> str:
        self.calls.append((ctx.host.now(), dict(ctx.options), dict(ctx.variables)))
        if ctx.options.get("Sleep"):
            await trio.sleep(float(ctx.options["Sleep"]))
        if "Set" in ctx.options:
            ctx.variables["FROM_STEP"] = ctx.options["Set"]
        return f"recorded {len(self.calls)}"


class Boom(Step):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.kind = options.get("Kind", "bug")

    async def run(self, ctx: RunContext) -> str:
        if self.kind == "bug":
            raise ZeroDivisionError("division by zero in a plugin")
        raise ActionError("disk full: nothing archived")


class Answer(Gate):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.answer = options.get("Answer", "yes")

    async def check(self, ctx: RunContext) -> bool:
        if self.answer == "error":
            raise ActionError("cannot read /proc/mounts")
        return self.answer == "yes"


class Manual(Trigger):
    """A trigger the test fires by hand (keeps its fire callable)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.fire: Any = None

    async def serve(self, fire, host, *, task_status=trio.TASK_STATUS_IGNORED) -> None:  # noqa: ANN001
        self.fire = fire
        task_status.started()
        await trio.sleep_forever()


RECORDED: list[tuple[dt.datetime, dict[str, Any], dict[str, str]]] = []


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    RECORDED.clear()


def schedule(every: str, name: str = "") -> Resolved:
    options = {"Every": every, **({"Name": name} if name else {})}
    return ref("amps-action-on-schedule", OnSchedule, options, SCHEDULE_OPTIONS)


RECORD = ref("record", Record, {"Sleep": "{{SLEEP}}"},
             OptionSet(Option("Sleep", lambda value: value.strip()), Option("Set", text)))


def leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for e in group.exceptions for leaf in leaves(e)]
    return [group]


async def serve_for(runtime: ActionRuntime, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


# -- schedules ------------------------------------------------------------------------------------------------

async def test_a_daily_schedule_fires_at_local_times_across_the_spring_change(autojump_clock) -> None:
    host = FakeHost(start=dt.datetime(2024, 3, 8, 12, 0, tzinfo=NY))  # Friday noon, New York
    runtime = ActionRuntime([action([schedule("02:30", "nightly")], ("do", ref("record", Record)))], host)
    began = trio.current_time()
    await serve_for(runtime, 4 * 86400)
    fired = [when.astimezone(NY) for when, _o, _v in RECORDED]
    assert [(w.month, w.day, w.hour, w.minute, w.utcoffset()) for w in fired] == [
        (3, 9, 2, 30, dt.timedelta(hours=-5)),
        (3, 10, 3, 0, dt.timedelta(hours=-4)),  # 02:30 did not exist: fired as the clocks jumped
        (3, 11, 2, 30, dt.timedelta(hours=-4)),
        (3, 12, 2, 30, dt.timedelta(hours=-4)),
    ]
    assert trio.current_time() - began == 4 * 86400  # mock seconds: nothing waited on the wall clock
    stats = runtime.statistics()["nightly"]
    assert stats.runs == 4 and stats.outcomes.success == 4
    assert stats.last_run_start == fired[-1].timestamp()


async def test_a_timer_fires_every_interval_from_the_start(autojump_clock) -> None:
    runtime = ActionRuntime([action([schedule("10s")], ("do", ref("record", Record)))], FakeHost())
    await serve_for(runtime, 35)
    start = FakeHost.start
    assert [(when - start).total_seconds() for when, _o, _v in RECORDED] == [10.0, 20.0, 30.0]
    assert runtime.names == ["action-1"]


async def test_an_overlapping_fire_is_busy_counted_and_logged(autojump_clock, caplog) -> None:
    caplog.set_level(logging.INFO, "broker.actions")
    slow = ref("record", Record, {"Sleep": "25"})
    runtime = ActionRuntime([action([schedule("10s", "slow")], ("do", slow))], FakeHost())
    # Each run takes 25 s: runs at 10..35 and 40..65; the fires at 20, 30 and 50 come while one still runs.
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await trio.sleep(54.5)
        assert runtime.statistics()["slow"].running is True
        assert runtime.statistics()["slow"].outcomes == ActionOutcomes(success=1, failure=0, skipped=0, busy=3)
        nursery.cancel_scope.cancel()
    stats = runtime.statistics()["slow"]
    assert stats.running is False
    assert stats.outcomes == ActionOutcomes(success=1, failure=1, skipped=0, busy=3)  # cancelled at shutdown
    assert stats.runs == 2 and stats.last_run_duration == 14.5
    busy = [r.getMessage() for r in caplog.records if "busy" in r.getMessage()]
    assert busy == ["action 'slow' is still running (for 10.0s); this run is skipped (busy)",
                    "action 'slow' is still running (for 20.0s); this run is skipped (busy)",
                    "action 'slow' is still running (for 10.0s); this run is skipped (busy)"]


# -- runs: failures, gates, options, variables --------------------------------------------------------------

async def test_a_failing_step_fails_the_run_later_steps_are_skipped_and_it_is_logged(caplog) -> None:
    caplog.set_level(logging.INFO, "broker.actions")
    manual = ref("manual", Manual, {"Name": "archive"})
    runtime = ActionRuntime([action([manual], ("do", ref("record", Record)), ("do", ref("boom", Boom, line=7)),
                                    ("do", ref("record", Record)))], FakeHost())
    result = await runtime.fire("archive")
    assert result.outcome == "failure"
    assert [(s.module, s.outcome) for s in result.steps] == [("record", "success"), ("boom", "failure"),
                                                             ("record", "skipped")]
    assert result.steps[1].message == "ZeroDivisionError: division by zero in a plugin"
    assert len(RECORDED) == 1
    stats = runtime.statistics()["archive"]
    assert (stats.runs, stats.failures, stats.outcomes.failure) == (1, 1, 1)
    error = next(r for r in caplog.records if r.levelno == logging.ERROR)
    assert error.getMessage() == ("action 'archive' failed at do boom (config.xml:7: /AMPSConfig/Actions/x[7]): "
                                  "ZeroDivisionError: division by zero in a plugin")
    assert error.exc_info is not None  # a plugin bug: the traceback is logged
    # An ActionError is the step telling the user what went wrong: no traceback.
    caplog.clear()
    runtime = ActionRuntime([action([manual], ("do", ref("boom", Boom, {"Kind": "expected"})))], FakeHost())
    result = await runtime.fire("archive")
    assert result.steps[0].message == "disk full: nothing archived"
    assert next(r for r in caplog.records if r.levelno == logging.ERROR).exc_info is None


async def test_if_gates_stop_or_continue_a_run() -> None:
    manual = ref("manual", Manual)

    def build(answer: str) -> ActionRuntime:
        return ActionRuntime([action([manual], ("do", ref("record", Record)),
                                     ("if", ref("gate", Answer, {"Answer": answer})),
                                     ("do", ref("record", Record)))], FakeHost())

    no = await build("no").fire("action-1")
    assert no.outcome == "skipped" and [s.outcome for s in no.steps] == ["success", "false", "skipped"]
    assert len(RECORDED) == 1  # the step before the gate ran, the one after did not
    yes = await build("yes").fire("action-1")
    assert yes.outcome == "success" and [s.outcome for s in yes.steps] == ["success", "success", "success"]
    broken = await build("error").fire("action-1")
    assert broken.outcome == "failure" and broken.steps[1].message == "cannot read /proc/mounts"
    runtime = build("no")
    await runtime.fire("action-1")
    assert runtime.statistics()["action-1"].outcomes == ActionOutcomes(success=0, failure=0, skipped=1, busy=0)


async def test_options_are_substituted_then_parsed_for_each_run(autojump_clock, caplog) -> None:
    declared = OptionSet(Option("Age", interval, required=True), Option("Set", text))
    runtime = ActionRuntime([action([ref("manual", Manual, {"Name": "a"})],
                                    ("do", ref("record", Record, {"Age": "{{AGE}}", "Set": "{{AMPS_INSTANCE_NAME}}!"},
                                               declared, line=3)),
                                    ("do", ref("record", Record, {"Seen": "{{FROM_STEP}} {{AGE}}"})))],
                            FakeHost(instance_name="ops-1"))
    ok = await runtime.fire("a", {"AGE": "12h"})
    assert ok.outcome == "success"
    (_t1, first, variables), (_t2, second, _v2) = RECORDED
    assert first == {"Age": 43200.0, "Set": "ops-1!"}  # parsed by the declared OptionSet
    assert second == {"Seen": "ops-1! 12h"}  # undeclared: text; a variable set by the previous step
    assert variables["AMPS_INSTANCE_NAME"] == "ops-1" and variables["AGE"] == "12h"
    assert variables["AMPS_DATETIME"] == "20240101T000000.000000Z" and variables["AMPS_UNIX_TIMESTAMP"] == "1704067200"
    bad = await runtime.fire("a", {"AGE": "LastThursday"})
    assert bad.outcome == "failure" and bad.steps[0].message.startswith("record: option <Age>: 'LastThursday'")
    missing = await runtime.fire("a")  # AGE undefined: expands to "" (AMPS), logged, and then fails to parse
    assert missing.outcome == "failure" and "option <Age>" in missing.steps[0].message
    assert any("{{AGE}} not defined in this run; expanded to an empty string" in r.getMessage()
               for r in caplog.records)


async def test_trigger_variables_cannot_override_the_builtins() -> None:
    runtime = ActionRuntime([action([ref("manual", Manual)], ("do", ref("record", Record)))], FakeHost())
    await runtime.fire("action-1", {"AMPS_INSTANCE_NAME": "spoofed", "X": "1"})
    assert RECORDED[0][2]["AMPS_INSTANCE_NAME"] == "test-broker" and RECORDED[0][2]["X"] == "1"


# -- construction -----------------------------------------------------------------------------------------------

def test_factory_errors_are_config_errors_with_file_and_line() -> None:
    def refuses(options: Mapping[str, str]) -> Step:
        raise ValueError("Colour must be red or blue")

    with pytest.raises(ConfigError) as caught:
        ActionRuntime([action([ref("manual", Manual)], ("do", ref("paint", refuses, line=12)),
                              ("if", ref("record", Record, line=13)))], FakeHost())
    assert [str(i) for i in caught.value.issues] == [
        "config.xml:12: /AMPSConfig/Actions/x[12]: action module 'paint' refused its options: ValueError: Colour "
        "must be red or blue",
        "config.xml:13: /AMPSConfig/Actions/x[13]: action module 'record' returned 'Record'; an <If> module must "
        "return a broker.actions.Gate (is the module in the right element?)",
    ]


def test_names_come_from_the_first_on_and_are_unique() -> None:
    manual = ref("manual", Manual)
    named = ref("manual", Manual, {"Name": "nightly"})
    do = ("do", ref("record", Record))
    runtime = ActionRuntime([action([manual], do), action([named, manual], do), action([manual, named], do),
                             action([named], do)], FakeHost())
    assert runtime.names == ["action-1", "nightly", "action-3", "nightly#4"]


async def test_a_trigger_failing_to_start_stops_start_up_and_one_failing_later_is_counted(caplog) -> None:
    class Broken(Trigger):
        def __init__(self, options: Mapping[str, str]) -> None:
            self.later = options.get("Later") == "yes"

        async def serve(self, fire, host, *, task_status=trio.TASK_STATUS_IGNORED) -> None:  # noqa: ANN001
            if self.later:
                task_status.started()
                await trio.sleep(1)
            raise OSError("port 80 is taken")

    early = ActionRuntime([action([ref("broken", Broken, line=4)], ("do", ref("record", Record)))], FakeHost())
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await nursery.start(early.serve)
    errors = leaves(caught.value)
    assert len(errors) == 1 and isinstance(errors[0], ActionError)
    assert str(errors[0]) == ("action 'action-1' (config.xml:4: /AMPSConfig/Actions/x[4]): broken could not start: "
                              "OSError: port 80 is taken")
    later = ActionRuntime([action([ref("broken", Broken, {"Later": "yes"})], ("do", ref("record", Record))),
                           action([ref("manual", Manual)], ("do", ref("record", Record)))], FakeHost())
    async with trio.open_nursery() as nursery:
        await nursery.start(later.serve)
        await trio.sleep(2)
        assert (await later.fire("action-2")).outcome == "success"  # the rest keeps working
        nursery.cancel_scope.cancel()
    assert later.statistics()["action-1"].trigger_failures == 1
    assert any("trigger broken failed and no longer fires: OSError: port 80 is taken" in r.getMessage()
               for r in caplog.records)


async def test_shutdown_runs_on_shutdown_actions_in_file_order_once() -> None:
    order: list[str] = []

    class Note(Step):
        def __init__(self, options: Mapping[str, str]) -> None:
            self.text = options["Text"]

        async def run(self, ctx: RunContext) -> str:
            order.append(self.text)
            return self.text

    on_shutdown = ref("amps-action-on-shutdown", OnShutdown)
    runtime = ActionRuntime([action([on_shutdown], ("do", ref("note", Note, {"Text": "first"}))),
                             action([ref("manual", Manual)], ("do", ref("note", Note, {"Text": "never"}))),
                             action([on_shutdown], ("do", ref("note", Note, {"Text": "second"})))], FakeHost())
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        assert order == []
        await runtime.shutdown()
        await runtime.shutdown()
        nursery.cancel_scope.cancel()
    assert order == ["first", "second"]


async def test_admin_trigger_answers_with_the_run(autojump_clock) -> None:
    host = FakeHost()
    admin = ref("amps-action-on-admin", OnAdmin, {"Path": "archive", "RequiredParameter": "AGE",
                                                  "Name": "Archive", "Description": "archive old journals"},
                ADMIN_OPTIONS)
    runtime = ActionRuntime([action([admin], ("do", RECORD), ("do", ref("boom", Boom)))], host)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        route = host.admin["archive"]
        assert (route.name, route.description, route.required) == ("Archive", "archive old journals", ("AGE",))
        status, text = await host.admin_request("archive", age="1d")
        assert status == 400 and text.startswith("action 'Archive' needs the query parameter AGE (parameter names "
                                                 "are case-sensitive: 'age' was sent): request /amps/administrator"
                                                 "/actions/archive?AGE=<value>. Nothing was run.")
        assert RECORDED == []

        async def slow() -> None:
            assert (await host.admin_request("archive", AGE="1d", SLEEP="5"))[0] == 500

        nursery.start_soon(slow)
        await trio.sleep(1)
        status, text = await host.admin_request("archive", AGE="1d")
        assert (status, text) == (409, "action 'Archive': busy (0.000s)")
        await trio.sleep(5)
        status, text = await host.admin_request("archive", AGE="2d")
        assert status == 500 and "do boom: failure: ZeroDivisionError" in text and "do record: success" in text
        assert RECORDED[-1][2]["AGE"] == "2d"
        nursery.cancel_scope.cancel()
    assert "archive" not in host.admin  # unregistered when the trigger stops
