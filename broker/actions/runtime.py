"""The action runtime: builds every ``<Action>``'s modules once, serves its triggers, runs its steps.

Lifecycle (the kernel drives it):

1. ``ActionRuntime(resolved.actions, host)`` calls every ``On``/``If``/``Do`` factory once, with the
   module's options as text. A factory that raises, or returns the wrong kind of object, is a
   :class:`~broker.errors.ConfigError` naming the element's file and line: the broker does not start.
2. ``await nursery.start(runtime.serve)`` once the transports listen: every trigger's ``serve`` becomes a
   child of the runtime's nursery, started in file order (so ``amps-action-on-startup`` actions run in
   file order, as the last step of start-up).
3. ``await runtime.shutdown()`` when the broker begins to stop, while clients are still connected and
   before the journal closes: each trigger's ``shutdown`` is awaited in file order (this is where
   ``amps-action-on-shutdown`` actions run). Then the kernel cancels the nursery.

A run (:meth:`ActionRuntime.fire`, or the ``fire`` callable a trigger is handed):

* never overlaps another run of the same action: a fire while it runs returns outcome ``busy`` at once
  (logged as a warning and counted);
* starts its variables from the trigger's, overlaid by ``AMPS_INSTANCE_NAME``, ``AMPS_DATETIME`` and
  ``AMPS_UNIX_TIMESTAMP`` (:mod:`broker.actions.variables`); one dict is shared by the run's gates and steps,
  so a step may add variables for the steps after it;
* runs the gates and steps in file order, each with its options substituted then parsed by the module's
  declared ``OptionSet`` (a value that does not parse fails the step, naming the option);
* stops at a gate that answers ``False`` (outcome ``skipped``) or a step that fails (outcome ``failure``:
  logged at error level with the action's name and the step's module, a traceback for anything but
  :class:`~broker.errors.BrokerError`); the steps after it are reported ``skipped``;
* never raises: a module's exception is the run's failure, and the broker keeps serving.

Before a run, a trigger that takes parameters (``amps-action-on-admin``'s query parameters) may call
``fire.check(parameters)``: every option of the action's gates and steps that uses a parameter is substituted
and parsed as the run would, and a value that does not parse raises :class:`~broker.errors.ParameterError`
naming the parameter and what the option expects, so the request is refused (HTTP 400) before anything runs.
An option that also uses a variable an earlier step sets is left to the run. :meth:`ActionRuntime.describe`
lists the actions (triggers with their options, gates and steps, the variables they use) for
``GET /amps/administrator/actions``.

A trigger whose ``serve`` raises before it reports ``task_status.started()`` stops start-up with a
:class:`~broker.actions.interface.ActionError`; one that raises later is logged, counted
(``trigger_failures``) and no longer fires, while the rest of the broker keeps running.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from broker.actions.interface import (
    ActionError,
    ActionHost,
    Gate,
    RunContext,
    RunResult,
    Step,
    StepResult,
    Trigger,
)
from broker.actions.variables import BUILTIN_VARIABLES, builtin_variables, names_in, substitute
from broker.errors import BrokerError, ConfigError, ConfigIssue, ParameterError
from broker.options import OptionSet
from broker.stats.snapshot import ActionOutcomes, ActionStats

__all__ = ["OUTCOMES", "ActionDescription", "ActionRuntime", "Firing", "StartedFlag", "run_module"]

log = logging.getLogger("broker.actions")

#: Every outcome a run can have, in the order statistics list them.
OUTCOMES = ("success", "failure", "skipped", "busy")

_KINDS: dict[str, tuple[type, str]] = {
    "on": (Trigger, "an <On> module must return a broker.actions.Trigger"),
    "if": (Gate, "an <If> module must return a broker.actions.Gate"),
    "do": (Step, "a <Do> module must return a broker.actions.Step"),
}


@dataclass
class _Module:
    """One ``On``/``If``/``Do`` of an action: its registration and the object its factory returned."""

    kind: str
    name: str
    obj: Any
    options: Mapping[str, str]
    option_set: OptionSet | None
    where: str


@dataclass
class _Action:
    """One ``<Action>`` and what the runtime knows of it."""

    name: str
    where: str
    triggers: list[_Module]
    steps: list[_Module]
    fire: Callable[..., Any] = field(init=False, repr=False)
    running_since: float | None = None  # trio time
    outcomes: ActionOutcomes = ActionOutcomes()  # frozen: each count replaces it
    last_start: float | None = None  # epoch seconds
    last_duration: float | None = None
    trigger_failures: int = 0


@dataclass(frozen=True)
class ActionDescription:
    """One configured action, as ``GET /amps/administrator/actions`` lists it.

    Attributes:
        name: The action's name (its first ``On``'s ``Name``, else ``action-<n>``).
        where: The ``<Action>`` element's file and line.
        triggers: Each ``On``: its module name under ``"Module"`` and its options as written.
        steps: Each ``If``/``Do`` as ``"if <module>"`` or ``"do <module>"``, in order.
        variables: The ``{{NAME}}`` variables its gates and steps use, built-in ones left out, in first-use
            order (a REST request's query parameters fill them; one not sent expands to ``""``).
    """

    name: str
    where: str
    triggers: tuple[Mapping[str, str], ...]
    steps: tuple[str, ...]
    variables: tuple[str, ...]


class Firing:
    """An action's ``fire``: ``await fire(variables)`` runs it; :meth:`check` vets a request's parameters first.

    Args:
        runtime: The runtime that runs it.
        action: The action.
    """

    def __init__(self, runtime: ActionRuntime, action: _Action) -> None:
        self._runtime = runtime
        self._action = action

    def __repr__(self) -> str:
        return f"fire[{self._action.name}]"

    async def __call__(self, variables: Mapping[str, str] | None = None) -> RunResult:
        """Run the action now (see :meth:`ActionRuntime.fire`)."""
        return await self._runtime._run(self._action, variables or {})

    def check(self, parameters: Mapping[str, str]) -> None:
        """Parse every option that uses one of ``parameters`` as the run would; runs nothing.

        Raises:
            ParameterError: a parameter makes an option unparsable; the message names the parameter, the option
                and what it expects.
        """
        self._runtime._check_parameters(self._action, parameters)


async def run_module(kind: str, name: str, obj: Gate | Step, options: Mapping[str, str],
                     option_set: OptionSet | None, *, action: str, variables: MutableMapping[str, str],
                     host: ActionHost, logger: logging.Logger = log) -> tuple[StepResult, BaseException | None]:
    """Run one gate or step as a run does: substitute, parse, call, turn any exception into a failure.

    :mod:`broker.testing.actions` calls this too, so a plugin's tests see exactly what the broker does.

    Args:
        kind: ``"if"`` or ``"do"``.
        name: The module name.
        obj: What the module's factory returned.
        options: The module's options as text (``{{VAR}}`` not yet substituted).
        option_set: The options the module declared, or ``None`` (then it gets the substituted text).
        action: The action's name.
        variables: The run's variables (shared by its gates and steps).
        host: The broker.
        logger: Where undefined variables are reported.

    Returns:
        What happened, and the exception that failed the module when it was not a
        :class:`~broker.errors.BrokerError` (its traceback is worth logging), else ``None``.
    """
    missing: list[str] = []
    text = {key: substitute(value, variables, missing) for key, value in options.items()}
    if missing:
        names = ", ".join(sorted({f"{{{{{m}}}}}" for m in missing}))
        logger.warning("action %r: %s %s: %s not defined in this run; expanded to an empty string",
                       action, kind, name, names)
    try:
        parsed: Mapping[str, Any] = option_set.parse(text, owner=name) if option_set is not None else text
    except BrokerError as exc:
        return StepResult(name, kind, "failure", str(exc)), None
    ctx = RunContext(action=action, module=name, options=parsed, variables=variables, host=host, log=logger)
    try:
        if kind == "if":
            assert isinstance(obj, Gate)
            passed = await obj.check(ctx)
            return StepResult(name, kind, "success" if passed else "false",
                              "" if passed else "condition not met"), None
        assert isinstance(obj, Step)
        said = await obj.run(ctx)
        return StepResult(name, kind, "success", "" if said is None else str(said)), None
    except Exception as exc:  # a plugin's bug fails the run, never the broker
        return StepResult(name, kind, "failure", describe(exc)), None if isinstance(exc, BrokerError) else exc


def _known(name: str, context: Mapping[str, str]) -> bool:
    """Whether ``{{name}}`` has a value before the run starts (a parameter, a built-in, ``AMPS_BYTE_XX``)."""
    return name in context or (name.startswith("AMPS_BYTE_") and len(name) == len("AMPS_BYTE_XX"))


def describe(exc: BaseException) -> str:
    """One line for the user: a :class:`~broker.errors.BrokerError`'s message as written, anything else
    (a plugin's bug) with its type (``KeyError: 'File'``)."""
    return str(exc) if isinstance(exc, BrokerError) else f"{type(exc).__name__}: {exc}"


def _counted(outcomes: ActionOutcomes, outcome: str) -> ActionOutcomes:
    """``outcomes`` with one more run of ``outcome`` (``success``, ``failure`` or ``skipped``)."""
    match outcome:
        case "success":
            return replace(outcomes, success=outcomes.success + 1)
        case "failure":
            return replace(outcomes, failure=outcomes.failure + 1)
        case "skipped":
            return replace(outcomes, skipped=outcomes.skipped + 1)
    raise ValueError(f"a run's outcome is success, failure or skipped, not {outcome!r}")


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


class StartedFlag:
    """Wraps a trigger's ``task_status`` to learn whether it reported ``started()`` (``.started_``)."""

    def __init__(self, inner: trio.TaskStatus[None]) -> None:
        self._inner = inner
        self.started_ = False

    def started(self, value: None = None) -> None:
        """Report started (once)."""
        self.started_ = True
        self._inner.started(value)


class ActionRuntime:
    """Runs the config's actions.

    Args:
        actions: ``resolve_plugins(config, plugins).actions``.
        host: What modules may ask of the broker.
        logger: Where runs are reported (``broker.actions``).

    Raises:
        ConfigError: a factory raised, or returned an object of the wrong kind; every such problem, each
            with the element's file and line.
    """

    def __init__(self, actions: Sequence[Any], host: ActionHost, *, logger: logging.Logger = log) -> None:
        self.host = host
        self.log = logger
        self._actions: list[_Action] = []
        self._shut_down = False
        issues: list[ConfigIssue] = []
        names: set[str] = set()
        for n, plugins in enumerate(actions, 1):
            triggers = [self._build("on", r, issues) for r in plugins.on]
            steps = [self._build(kind, r, issues) for kind, r in plugins.steps]
            name = self._name(n, triggers, names)
            if any(m is None for m in (*triggers, *steps)):
                continue
            action = _Action(name, str(plugins.where), [m for m in triggers if m], [m for m in steps if m])
            action.fire = self._fire_for(action)
            self._actions.append(action)
        if issues:
            raise ConfigError(issues)

    # -- construction --------------------------------------------------------------------------------
    @staticmethod
    def _build(kind: str, resolved: Any, issues: list[ConfigIssue]) -> _Module | None:
        where = resolved.where
        expected, what = _KINDS[kind]
        try:
            obj = resolved.factory(dict(resolved.options))
        except Exception as exc:
            issues.append(ConfigIssue(where.file, where.line, where.path,
                                      f"action module {resolved.name!r} refused its options: {describe(exc)}"))
            return None
        if not isinstance(obj, expected):
            issues.append(ConfigIssue(where.file, where.line, where.path,
                                      f"action module {resolved.name!r} returned {type(obj).__name__!r}; "
                                      f"{what} (is the module in the right element?)"))
            return None
        return _Module(kind, resolved.name, obj, dict(resolved.options), resolved.registration.options,
                       str(where))

    @staticmethod
    def _name(n: int, triggers: list[_Module | None], taken: set[str]) -> str:
        """The first ``On``'s ``Name``, else ``action-<n>``; made unique with ``#<n>`` when taken."""
        name = ""
        if triggers and triggers[0] is not None:
            name = triggers[0].options.get("Name", "").strip()
        name = name or f"action-{n}"
        if name in taken:
            name = f"{name}#{n}"
        taken.add(name)
        return name

    def _fire_for(self, action: _Action) -> Firing:
        return Firing(self, action)

    def _check_parameters(self, action: _Action, parameters: Mapping[str, str]) -> None:
        """Raise :class:`ParameterError` when a parameter makes one of ``action``'s options unparsable."""
        context = {**parameters, **builtin_variables(self.host.instance_name, self.host.now())}
        for module in action.steps:
            if module.option_set is None:
                continue
            declared = {option.name: option for option in module.option_set}
            for key, raw in module.options.items():
                option = declared.get(key)
                used = names_in(raw)
                sent = [name for name in dict.fromkeys(used) if name in parameters and name not in BUILTIN_VARIABLES]
                if option is None or not sent or not all(_known(name, context) for name in used):
                    continue  # no parameter in it, or a variable an earlier step sets: the run parses it
                value = substitute(raw, context)
                try:
                    option.parse_text(value)
                except ValueError as exc:
                    given = ", ".join(f"{name}={parameters[name]!r}" for name in sent)
                    about = f" ({option.doc.rstrip('.')})" if option.doc else ""
                    raise ParameterError(sent[0], (
                        f"action {action.name!r}: query parameter {given} does not fit option <{key}>{about} of "
                        f"{module.kind} {module.name}: {exc}. Nothing was run; send a value the option accepts."
                    )) from None

    def describe(self) -> list[ActionDescription]:
        """Every configured action, in file order (for ``GET /amps/administrator/actions``)."""
        described: list[ActionDescription] = []
        for action in self._actions:
            used = [name for module in action.steps for raw in module.options.values() for name in names_in(raw)]
            described.append(ActionDescription(
                name=action.name,
                where=action.where,
                triggers=tuple({"Module": t.name, **t.options} for t in action.triggers),
                steps=tuple(f"{m.kind} {m.name}" for m in action.steps),
                variables=tuple(name for name in dict.fromkeys(used)
                                if name not in BUILTIN_VARIABLES and not name.startswith("AMPS_BYTE_")),
            ))
        return described

    # -- public ----------------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The actions' names, in file order."""
        return [a.name for a in self._actions]

    def __len__(self) -> int:
        return len(self._actions)

    async def fire(self, action: str, variables: Mapping[str, str] | None = None) -> RunResult:
        """Run the action named ``action`` now, as its triggers would.

        Raises:
            ActionError: no action has that name.
        """
        for candidate in self._actions:
            if candidate.name == action:
                return await candidate.fire(variables)
        raise ActionError(f"no action is named {action!r}; configured: {', '.join(self.names) or 'none'}")

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve every trigger until cancelled (returns at once when no action has a trigger that waits).

        Triggers start in file order; this reports ``started`` when each has.

        Raises:
            ActionError: a trigger failed before it started (a busy signal, a taken admin path...).
        """
        async with trio.open_nursery() as nursery:
            for action in self._actions:
                for trigger in action.triggers:
                    await nursery.start(self._serve_trigger, action, trigger)
            task_status.started()

    async def shutdown(self) -> None:
        """Give each trigger its ``shutdown`` call, in file order (``amps-action-on-shutdown`` runs here).

        Idempotent: a second call does nothing. Never raises a module's error.
        """
        if self._shut_down:
            return
        self._shut_down = True
        for action in self._actions:
            for trigger in action.triggers:
                try:
                    await trigger.obj.shutdown(action.fire, self.host)
                except Exception as exc:
                    self.log.error("action %r: trigger %s failed at shutdown: %s", action.name, trigger.name,
                                   exc, exc_info=not isinstance(exc, BrokerError))

    def statistics(self) -> dict[str, ActionStats]:
        """Per action (by name): runs (success + failure + skipped), failures, runs by outcome (``busy``
        included), the last run's start (epoch seconds) and duration (seconds), whether it is running, and its
        trigger failures (:class:`~broker.stats.snapshot.ActionStats`)."""
        stats: dict[str, ActionStats] = {}
        for a in self._actions:
            o = a.outcomes
            stats[a.name] = ActionStats(
                runs=o.success + o.failure + o.skipped,
                failures=o.failure,
                outcomes=o,
                last_run_start=a.last_start,
                last_run_duration=a.last_duration,
                running=a.running_since is not None,
                trigger_failures=a.trigger_failures,
            )
        return stats

    # -- running ---------------------------------------------------------------------------------------
    async def _serve_trigger(self, action: _Action, trigger: _Module, *,
                             task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        status = StartedFlag(task_status)
        try:
            await trigger.obj.serve(action.fire, self.host, task_status=status)
        except Exception as exc:
            causes = _leaves(exc)
            why = "; ".join(describe(e) for e in causes)
            if not status.started_:
                raise ActionError(f"action {action.name!r} ({trigger.where}): {trigger.name} could not start: "
                                  f"{why}") from exc
            action.trigger_failures += 1
            self.log.error("action %r: trigger %s failed and no longer fires: %s", action.name, trigger.name,
                           why, exc_info=not all(isinstance(e, BrokerError) for e in causes))
            return
        if not status.started_:  # a trigger with nothing to wait for may just return
            status.started()

    async def _run(self, action: _Action, variables: Mapping[str, str]) -> RunResult:
        if action.running_since is not None:
            action.outcomes = replace(action.outcomes, busy=action.outcomes.busy + 1)
            self.log.warning("action %r is still running (for %.1fs); this run is skipped (busy)", action.name,
                             trio.current_time() - action.running_since)
            return RunResult(action.name, "busy")
        began = action.running_since = trio.current_time()
        results: list[StepResult] = []
        outcome = "success"
        try:
            now = self.host.now()
            action.last_start = now.timestamp()
            context: dict[str, str] = {**variables, **builtin_variables(self.host.instance_name, now)}
            for module in action.steps:
                if outcome != "success":
                    results.append(StepResult(module.name, module.kind, "skipped"))
                    continue
                result, crash = await run_module(module.kind, module.name, module.obj, module.options,
                                                 module.option_set, action=action.name, variables=context,
                                                 host=self.host, logger=self.log)
                results.append(result)
                if result.outcome == "failure":
                    outcome = "failure"
                    self.log.error("action %r failed at %s %s (%s): %s", action.name, module.kind, module.name,
                                   module.where, result.message, exc_info=crash)
                elif result.outcome == "false":
                    outcome = "skipped"
        except BaseException:  # cancelled mid-run (the broker is stopping), or a host bug: count it, let it go
            outcome = "failure"
            results.append(StepResult("(run)", "do", "failure", "cancelled: the broker is stopping"))
            raise
        finally:
            action.running_since = None
            action.last_duration = trio.current_time() - began
            action.outcomes = _counted(action.outcomes, outcome)
        run = RunResult(action.name, outcome, tuple(results), action.last_duration)
        if outcome == "success":
            self.log.info("%s", run.summary())
        else:
            self.log.log(logging.DEBUG if outcome == "skipped" else logging.WARNING, "%s", run.summary())
        return run
