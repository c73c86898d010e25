"""Test an action module (a ``Do`` step, an ``If`` gate, an ``On`` trigger) the way the broker runs it.

* :class:`FakeHost`: an in-memory :class:`~broker.actions.ActionHost` that records what modules ask of it
  (SOW deletes, compactions, shutdown requests, admin paths...) and whose clock follows trio's, so a test
  under ``trio.testing.MockClock`` moves the wall clock too.
* :func:`load_action`: the registration a plugin module makes for a name, loaded as the broker loads it.
* :func:`run_step` / :func:`check_gate`: build the module with its options and run it once through the
  runtime's own code (:func:`broker.actions.runtime.run_module`): ``{{VAR}}`` substituted, options parsed by
  the declared ``OptionSet``, exceptions turned into a ``failure`` with a message. They return the
  :class:`~broker.actions.StepResult` a real run would log.
* :class:`StepConformance`, :class:`GateConformance`, :class:`TriggerConformance`: pytest base classes
  checking the contract (declared and documented options, a factory that accepts ``{{VAR}}`` values,
  results reported and failures never raised). Subclass one in a ``Test*`` class and set its attributes.

Example::

    from broker.testing import StepConformance, run_step

    class TestAppendLine(StepConformance):
        plugin = "my_package.actions"          # or the module object, or a path to a .py file
        name = "audit-append-line"
        options = {"File": "/tmp/audit.log", "Line": "{{AMPS_INSTANCE_NAME}} ran"}
        failing_options = {"File": "/nonexistent/dir/audit.log", "Line": "x"}

    async def test_it_appends(tmp_path):          # with pytest-trio
        result = await run_step("my_package.actions", "audit-append-line",
                                {"File": str(tmp_path / "a.log"), "Line": "hello {{WHO}}"},
                                variables={"WHO": "world"})
        assert result.outcome == "success"
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
import trio
import trio.testing

from broker.actions.host import check_delete_filter, match_sow_topics
from broker.actions.interface import (
    ActionError,
    AdminHandler,
    AdminRequest,
    Gate,
    RunResult,
    Step,
    StepResult,
    Trigger,
)
from broker.actions.runtime import StartedFlag, run_module
from broker.actions.variables import builtin_variables
from broker.expr import compile_filter
from broker.plugins import PluginManager, Registration

__all__ = [
    "FakeHost",
    "GateConformance",
    "StepConformance",
    "TriggerConformance",
    "check_gate",
    "load_action",
    "run_step",
]

#: The fake host's wall clock when it is made: a Monday, in UTC.
DEFAULT_START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@dataclass
class AdminRoute:
    """An admin path an ``amps-action-on-admin``-style trigger registered on a :class:`FakeHost`."""

    handler: AdminHandler
    name: str
    description: str
    required: tuple[str, ...]


@dataclass
class FakeHost:
    """An in-memory :class:`~broker.actions.ActionHost` that records every request.

    Attributes:
        instance_name: ``AMPS_INSTANCE_NAME``.
        journal_directory: What ``journal_directory`` reports (``None``: no journal).
        journal_archive_directory: Likewise.
        sow: ``topic -> message type`` of the SOW topics modules may delete from or compact.
        delete_counts: ``topic -> records`` that :meth:`delete_sow` reports deleted (default 0).
        writer_index: What :meth:`journal_writer_index` returns.
        log_files: What :meth:`rotate_logs` returns.
        start: The wall clock when the host is made (see :meth:`now`).
        clock: Replaces :meth:`now` entirely when given.
        deletes: ``(topic, message_type, filter)`` per :meth:`delete_sow` call that deleted.
        compactions: The topics compacted, in order.
        shutdown_requests: The reasons given to :meth:`request_shutdown`.
        rotations: How many times :meth:`rotate_logs` was called.
        security_reloads: The kinds given to :meth:`reload_security`, in order.
        admin: The registered admin paths (see :meth:`admin_request`).
    """

    instance_name: str = "test-broker"
    journal_directory: Path | None = None
    journal_archive_directory: Path | None = None
    sow: dict[str, str] = field(default_factory=dict)
    delete_counts: dict[str, int] = field(default_factory=dict)
    writer_index: int | None = None
    log_files: list[str] = field(default_factory=list)
    start: dt.datetime = DEFAULT_START
    clock: Callable[[], dt.datetime] | None = None
    deletes: list[tuple[str, str | None, str]] = field(default_factory=list)
    compactions: list[str] = field(default_factory=list)
    shutdown_requests: list[str] = field(default_factory=list)
    rotations: int = 0
    security_reloads: list[str] = field(default_factory=list)
    admin: dict[str, AdminRoute] = field(default_factory=dict)
    _anchor: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        try:
            self._anchor = trio.current_time()  # made in a trio run: its clock reads start now
        except RuntimeError:
            self._anchor = None  # made outside: the first now() in a run reads start

    def now(self) -> dt.datetime:
        """``start`` when the host was made (or, made outside a trio run, at the first call), then moving
        with trio's clock, so a ``MockClock`` moves it; ``start`` outside a trio run."""
        if self.clock is not None:
            return self.clock()
        try:
            current = trio.current_time()
        except RuntimeError:
            return self.start
        if self._anchor is None:
            self._anchor = current
        elapsed = dt.timedelta(seconds=current - self._anchor)  # added in UTC: elapsed time, not wall time
        return (self.start.astimezone(dt.UTC) + elapsed).astimezone(self.start.tzinfo)

    def sow_topics(self) -> Sequence[tuple[str, str]]:
        """``(topic, message type)`` from :attr:`sow`."""
        return list(self.sow.items())

    async def delete_sow(self, topic: str, message_type: str | None, filter_text: str) -> dict[str, int]:
        """Records the delete; matches topics and checks the filter as the broker does."""
        check_delete_filter(filter_text, compile_filter)
        names = match_sow_topics(topic, message_type, self.sow_topics())
        self.deletes.append((topic, message_type, filter_text))
        return {name: self.delete_counts.get(name, 0) for name in names}

    async def compact_sow(self, topic: str | None, message_type: str | None) -> list[str]:
        """Records the compaction of the matching topics (all when ``topic`` is ``None``)."""
        names = list(self.sow) if topic is None else match_sow_topics(topic, message_type, self.sow_topics())
        self.compactions.extend(names)
        return names

    def journal_writer_index(self) -> int | None:
        """:attr:`writer_index`."""
        return self.writer_index

    def request_shutdown(self, reason: str) -> None:
        """Records the request."""
        self.shutdown_requests.append(reason)

    def rotate_logs(self) -> list[str]:
        """Counts the rotation; returns :attr:`log_files`."""
        self.rotations += 1
        return list(self.log_files)

    def reload_security(self, kind: str) -> str:
        """Records the reload; returns a summary."""
        self.security_reloads.append(kind)
        return f"{kind} reloaded"

    def add_admin_action(self, path: str, handler: AdminHandler, *, name: str, description: str,
                         required: Sequence[str]) -> Callable[[], None]:
        """Records the route (:meth:`admin_request` calls it); a taken path is an ``ActionError``."""
        if path in self.admin:
            raise ActionError(f"Path {path!r} is already served by another action")
        self.admin[path] = AdminRoute(handler, name, description, tuple(required))

        def remove() -> None:
            self.admin.pop(path, None)

        return remove

    async def admin_request(self, path: str, **parameters: str) -> tuple[int, str]:
        """What ``GET /amps/administrator/actions/<path>?<parameters>`` would answer.

        Raises:
            KeyError: nothing serves ``path``.
        """
        return await self.admin[path].handler(AdminRequest(path, dict(parameters)))


# -- loading and running ---------------------------------------------------------------------------------

def load_action(plugin: ModuleType | str | Path, name: str) -> Registration:
    """The registration ``plugin`` makes for ``name``, loaded as the broker loads plugins.

    Args:
        plugin: The plugin module, its dotted name, or a ``.py`` file (as ``<Modules><Library>`` takes).
        name: The name it registers (``<Module>name</Module>``).

    Raises:
        PluginError: the plugin does not load, or registers no action ``name``.
    """
    pm = PluginManager(entry_points=False)
    if isinstance(plugin, ModuleType):
        pm.register(plugin, name="plugin-under-test", source="broker.testing")
    elif str(plugin).endswith(".py"):
        pm.load_module("plugin-under-test", str(plugin))
    else:
        pm.register(importlib.import_module(str(plugin)), name="plugin-under-test", source="broker.testing")
    pm.collect()
    return pm.actions.registration(name)


def build_action(registration: Registration, options: Mapping[str, str]) -> Any:
    """Check ``options`` as ``broker check`` does (``{{VAR}}`` values accepted), then call the factory.

    Raises:
        OptionError: an option is unknown, missing or does not parse.
    """
    if registration.options is not None:
        registration.options.check(options, owner=f"action {registration.name!r}", templates=True)
    return registration.factory(dict(options))


async def _run_once(kind: str, plugin: ModuleType | str | Path, name: str, options: Mapping[str, str] | None,
                    variables: Mapping[str, str] | None, host: Any, action: str) -> StepResult:
    registration = load_action(plugin, name)
    obj = build_action(registration, options or {})
    expected = Gate if kind == "if" else Step
    if not isinstance(obj, expected):
        raise TypeError(f"{name!r} built a {type(obj).__name__}, not a {expected.__name__}")
    host = host if host is not None else FakeHost()
    context = {**(variables or {}), **builtin_variables(host.instance_name, host.now())}
    result, _crash = await run_module(kind, registration.name, obj, dict(options or {}), registration.options,
                                      action=action, variables=context, host=host)
    return result


async def run_step(plugin: ModuleType | str | Path, name: str, options: Mapping[str, str] | None = None, *,
                   variables: Mapping[str, str] | None = None, host: Any = None,
                   action: str = "test-action") -> StepResult:
    """Build the ``Do`` step ``name`` of ``plugin`` with ``options`` and run it once, as a run does.

    Args:
        plugin: See :func:`load_action`.
        name: The registered name.
        options: Option text as written in the config (``{{VAR}}`` allowed).
        variables: The trigger's variables (the built-ins are added).
        host: The host (default: a new :class:`FakeHost`).
        action: The action name the step sees.

    Returns:
        ``outcome`` ``success`` (with the step's line) or ``failure`` (with the reason).

    Raises:
        OptionError: the options would not pass ``broker check``.
    """
    return await _run_once("do", plugin, name, options, variables, host, action)


async def check_gate(plugin: ModuleType | str | Path, name: str, options: Mapping[str, str] | None = None, *,
                     variables: Mapping[str, str] | None = None, host: Any = None,
                     action: str = "test-action") -> StepResult:
    """Like :func:`run_step` for an ``If`` gate: ``outcome`` is ``success`` (true), ``false`` or ``failure``."""
    return await _run_once("if", plugin, name, options, variables, host, action)


# -- conformance suites -------------------------------------------------------------------------------------

class _ModuleConformance:
    """Checks shared by steps, gates and triggers: declared, documented options and a tolerant factory."""

    #: The plugin: its module, dotted name, or ``.py`` file.
    plugin: ClassVar[ModuleType | str | Path]
    #: The registered name.
    name: ClassVar[str]
    #: Options a working instance is configured with.
    options: ClassVar[Mapping[str, str]] = {}

    def registration(self) -> Registration:
        return load_action(self.plugin, self.name)

    def test_options_are_declared_and_documented(self) -> None:
        declared = self.registration().options
        assert declared is not None, (f"{self.name}: pass options=OptionSet(...) to registry.add so `broker "
                                      "check` can check its uses")
        undocumented = [o.name for o in declared if not o.doc.strip()]
        assert not undocumented, f"{self.name}: give these options a doc: {undocumented}"
        assert not declared.problems(self.options, templates=True), declared.problems(self.options)

    def test_unknown_and_missing_options_are_refused(self) -> None:
        declared = self.registration().options
        assert declared is not None
        if not declared.open:
            assert any("NoSuchOption" in p for p in declared.problems({**self.options, "NoSuchOption": "x"}))
        for option in declared:
            if option.required:
                rest = {k: v for k, v in self.options.items() if k != option.name}
                assert any(option.name in p for p in declared.problems(rest, templates=True)), option.name


class _RunConformance(_ModuleConformance):
    """Checks shared by steps and gates, whose options are substituted for each run."""

    def test_the_factory_accepts_variables_in_any_option(self) -> None:
        """The factory runs once at start-up, before any variable is known: values holding ``{{VAR}}`` must be
        kept for run time (parse them in ``run``/``check`` from ``ctx.options``), not rejected."""
        registration = self.registration()
        for key in self.options:
            build_action(registration, {**self.options, key: "{{SOME_VARIABLE}}"})


class StepConformance(_RunConformance):
    """The contract of a ``Do`` step. Set ``plugin``, ``name``, ``options`` (a working configuration) and,
    to check that failures are reported rather than raised, ``failing_options``."""

    #: The trigger's variables for the runs.
    variables: ClassVar[Mapping[str, str]] = {}
    #: Options with which a run must fail (``None``: not checked).
    failing_options: ClassVar[Mapping[str, str] | None] = None

    def make_host(self) -> Any:
        """The host the runs use (override to give a :class:`FakeHost` SOW topics, directories...)."""
        return FakeHost()

    def test_builds_a_step(self) -> None:
        assert isinstance(build_action(self.registration(), self.options), Step)

    def test_a_run_succeeds_and_says_what_it_did(self) -> None:
        result = trio.run(self._run, self.options)
        assert result.outcome == "success", result.message
        assert isinstance(result.message, str) and result.message.strip(), "return one line saying what was done"

    def test_a_failure_is_reported_not_raised(self) -> None:
        if self.failing_options is None:
            pytest.skip("set failing_options to check how the step fails")
        result = trio.run(self._run, self.failing_options)
        assert result.outcome == "failure" and result.message.strip(), result

    async def _run(self, options: Mapping[str, str]) -> StepResult:
        return await run_step(self.plugin, self.name, options, variables=self.variables, host=self.make_host())


class GateConformance(_RunConformance):
    """The contract of an ``If`` gate. Set ``plugin``, ``name``, ``options`` and ``expected`` (what the gate
    answers with ``options`` on :meth:`make_host`'s host)."""

    variables: ClassVar[Mapping[str, str]] = {}
    expected: ClassVar[bool] = True

    def make_host(self) -> Any:
        """The host the checks use."""
        return FakeHost()

    def test_builds_a_gate(self) -> None:
        assert isinstance(build_action(self.registration(), self.options), Gate)

    def test_answers(self) -> None:
        result = trio.run(self._check)
        assert result.outcome == ("success" if self.expected else "false"), result

    async def _check(self) -> StepResult:
        return await check_gate(self.plugin, self.name, self.options, variables=self.variables,
                                host=self.make_host())


class TriggerConformance(_ModuleConformance):
    """The contract of an ``On`` trigger: it reports ``started`` and stops when cancelled. Set ``plugin``,
    ``name``, ``options``; set ``fires_within`` (seconds of trio's mock clock) to also check it fires."""

    fires_within: ClassVar[float | None] = None

    def make_host(self) -> Any:
        """The host the trigger is served with."""
        return FakeHost()

    def test_builds_a_trigger(self) -> None:
        assert isinstance(build_action(self.registration(), self.options), Trigger)

    def test_starts_then_stops_when_cancelled(self) -> None:
        fired = trio.run(self._serve, clock=trio.testing.MockClock(autojump_threshold=0))
        if self.fires_within is not None:
            assert fired, f"{self.name} did not fire within {self.fires_within}s"

    async def _serve(self) -> list[Mapping[str, str]]:
        trigger = build_action(self.registration(), self.options)
        fired: list[Mapping[str, str]] = []

        async def fire(variables: Mapping[str, str]) -> RunResult:
            fired.append(dict(variables))
            return RunResult(self.name, "success")

        # Mock seconds: started() must come without waiting on the wall clock.
        with trio.fail_after(60 + (self.fires_within or 0)):
            async with trio.open_nursery() as nursery:
                await nursery.start(_serve_trigger, trigger, fire, self.make_host())
                await trio.sleep(self.fires_within or 0)
                nursery.cancel_scope.cancel()
        await trigger.shutdown(fire, self.make_host())
        return fired


async def _serve_trigger(trigger: Trigger, fire: Callable[[Mapping[str, str]], Awaitable[RunResult]], host: Any,
                         *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    status = StartedFlag(task_status)  # as the runtime serves it: a trigger may return without waiting
    await trigger.serve(fire, host, task_status=status)
    if not status.started_:
        status.started()
