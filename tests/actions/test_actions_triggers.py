"""The built-in triggers (plugins/actions/triggers.py): options, signals delivered to this process, startup
order, and the trigger conformance suite run on each of them."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

import pytest
import trio
import trio.testing

import broker_plugins.actions.triggers as triggers
from broker.actions import ActionError, RunResult
from broker.options import OptionError
from broker.plugins import build_plugin_manager
from broker.testing import FakeHost, TriggerConformance
from broker_plugins.actions.triggers import OnAdmin, OnSchedule, OnSignal, OnStartup, signal_name


class TestScheduleConformance(TriggerConformance):
    plugin = triggers
    name = "amps-action-on-schedule"
    options = {"Every": "10s", "Name": "tick"}
    fires_within = 10.5


class TestDailyScheduleConformance(TriggerConformance):
    plugin = triggers
    name = "amps-action-on-schedule"
    options = {"Every": "Monday at 00:05Z"}  # FakeHost's clock starts on Monday 2024-01-01 00:00 UTC
    fires_within = 301


class TestStartupConformance(TriggerConformance):
    plugin = triggers
    name = "amps-action-on-startup"
    fires_within = 0


class TestShutdownConformance(TriggerConformance):
    plugin = triggers
    name = "amps-action-on-shutdown"


class TestSignalConformance(TriggerConformance):
    plugin = triggers
    name = "amps-action-on-signal"
    options = {"Signal": "SIGUSR2"}


class TestAdminConformance(TriggerConformance):
    plugin = triggers
    name = "amps-action-on-admin"
    options = {"Path": "archive", "RequiredParameter": "AGE,WHO", "Name": "Archive", "Description": "d"}


def test_the_five_triggers_are_registered_through_the_entry_point() -> None:
    pm = build_plugin_manager()
    registered = {r.name: r.plugin for r in pm.actions if r.name.startswith("amps-action-on-")}
    assert {name: plugin for name, plugin in registered.items() if plugin == "actions-triggers"} == {
        name: "actions-triggers" for name in ("amps-action-on-schedule", "amps-action-on-startup",
                                              "amps-action-on-shutdown", "amps-action-on-signal",
                                              "amps-action-on-admin")
    }


@pytest.mark.parametrize(("text", "says"), [
    ("SIGKILL", "SIGKILL cannot be caught by any process"),
    ("sigstop", "SIGSTOP cannot be caught by any process"),
    ("SIGTERM", "SIGTERM always stops the broker cleanly (the on-shutdown actions run first), so it cannot be "
                "bound; to run steps when the broker stops use amps-action-on-shutdown"),
    ("INT", "SIGINT always stops the broker cleanly"),
    ("SIGSEGV", "'SIGSEGV' is not a signal an action can bind on this system; use one of SIGHUP, SIGUSR1"),
    ("10", "'10' is not a signal"),
])  # fmt: skip
def test_signals_that_cannot_be_bound_say_why(text: str, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        signal_name(text)
    assert says in str(caught.value)


def test_signal_names_are_canonical() -> None:
    assert [signal_name(s) for s in ("SIGUSR1", "usr2", " SigHup ")] == ["SIGUSR1", "SIGUSR2", "SIGHUP"]


@pytest.mark.parametrize(("factory", "options", "says"), [
    (OnSchedule, {}, "option <Every> is required"),
    (OnSchedule, {"Every": "Sat at 11:00"}, "'Sat' is not a weekday (did you mean Saturday?)"),
    (OnSignal, {"Signal": "SIGKILL"}, "option <Signal>: SIGKILL cannot be caught"),
    (OnAdmin, {"Path": "a/b"}, "option <Path>: 'a/b' cannot be served: write one path segment"),
    (OnAdmin, {}, "option <Path> is required"),
    (OnStartup, {"Every": "1s"}, "unknown option <Every> (accepted: Name)"),
])  # fmt: skip
def test_bad_options_are_refused_by_the_factory(factory: type, options: Mapping[str, str], says: str) -> None:
    with pytest.raises(OptionError) as caught:
        factory(options)
    assert says in str(caught.value)


def recorder() -> tuple[list[dict[str, str]], object]:
    fired: list[dict[str, str]] = []

    async def fire(variables: Mapping[str, str]) -> RunResult:
        fired.append(dict(variables))
        return RunResult("a", "success")

    return fired, fire


async def test_a_signal_runs_the_action_with_its_name() -> None:
    fired, fire = recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(OnSignal({"Signal": "SIGUSR1"}).serve, fire, FakeHost())
        os.kill(os.getpid(), signal.SIGUSR1)
        with trio.fail_after(5):
            while not fired:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert fired == [{"AMPS_SIGNAL": "SIGUSR1"}]


async def test_one_action_per_signal() -> None:
    _fired, fire = recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(OnSignal({"Signal": "SIGUSR2", "Name": "first"}).serve, fire, FakeHost())
        with pytest.raises(ActionError, match="SIGUSR2 is already bound by action 'first': one action per signal"):
            await OnSignal({"Signal": "SIGUSR2"}).serve(fire, FakeHost())
        nursery.cancel_scope.cancel()
    # Released when the first stops: it can be bound again.
    async with trio.open_nursery() as nursery:
        await nursery.start(OnSignal({"Signal": "SIGUSR2"}).serve, fire, FakeHost())
        nursery.cancel_scope.cancel()


async def test_startup_runs_before_reporting_started() -> None:
    fired, fire = recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(OnStartup({}).serve, fire, FakeHost())
        assert fired == [{}]  # already ran when start() returned
        nursery.cancel_scope.cancel()


async def test_a_daily_schedule_rechecks_the_wall_clock(autojump_clock: trio.testing.MockClock) -> None:
    """The wall clock jumps forward an hour (an NTP step) while the trigger waits: it fires within a minute
    of the new wall time rather than an hour late."""
    import datetime as dt

    jump = [dt.timedelta(0)]
    steady = FakeHost()
    host = FakeHost(clock=lambda: steady.now() + jump[0])
    fired, fire = recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(OnSchedule({"Every": "02:00Z"}).serve, fire, host)  # due in 2 h
        await trio.sleep(30 * 60)
        jump[0] = dt.timedelta(hours=1)  # wall clock now 01:30
        await trio.sleep(31 * 60)  # wall 02:01; trio time 61 min
        assert len(fired) == 1
        nursery.cancel_scope.cancel()


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)
