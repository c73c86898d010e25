"""Built-in triggers (``<On>``): schedule, startup, shutdown, signal, admin REST request.

=============================  ===========================================================================
``amps-action-on-schedule``    ``Every`` (required; see :mod:`broker.actions.schedule`), ``Name``. Waits with
                               ``trio.sleep`` against ``host.now()``, so trio's ``MockClock`` drives it in
                               tests. A run still going when the next one is due makes that one ``busy``.
``amps-action-on-startup``     Runs once, as the last step of start-up (after every transport listens);
                               start-up actions run one after another, in file order.
``amps-action-on-shutdown``    Runs once, as the first step of shutdown (clients are still connected, the
                               journal is still open); shutdown actions run in file order.
``amps-action-on-signal``      ``Signal`` (required): ``SIGHUP``, ``SIGUSR1``, ``SIGUSR2``, ``SIGQUIT``...
                               Adds ``AMPS_SIGNAL`` (the signal's name). ``SIGKILL`` and ``SIGSTOP`` cannot
                               be caught; ``SIGTERM`` and ``SIGINT`` always stop the broker cleanly (running
                               the on-shutdown actions first), so they cannot be bound. Binding ``SIGHUP``
                               replaces its default (a clean shutdown). One action per signal.
``amps-action-on-admin``       ``Path`` (required, one path segment), ``RequiredParameter`` (repeatable),
                               ``Name``, ``Description``: ``GET /amps/administrator/actions/<Path>?A=b``
                               runs the action with the query parameters as variables and answers the
                               run's summary: 200 (success, or an ``If`` said no), 500 (a step failed),
                               409 (still running from an earlier request), 400 (a required parameter is
                               missing or empty, or a parameter's value does not parse as the option it
                               fills expects, e.g. ``AGE=banana`` for an interval; nothing runs).
=============================  ===========================================================================
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import trio

from broker import hookimpl
from broker.actions.host import admin_path
from broker.actions.interface import ActionError, ActionHost, AdminRequest, Fire, RunResult, Trigger
from broker.actions.schedule import next_fire, parse_schedule
from broker.errors import ParameterError
from broker.options import Option, OptionSet, text

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["OnAdmin", "OnSchedule", "OnShutdown", "OnSignal", "OnStartup", "signal_name"]

log = logging.getLogger("broker.actions")

#: Signals an action may bind (where the system has them): the ones a process can catch and that carry no
#: meaning of their own to the broker or to Python (no SIGSEGV, SIGCHLD, SIGPIPE...).
BINDABLE_SIGNALS = ("SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT", "SIGALRM", "SIGWINCH", "SIGCONT", "SIGTSTP",
                    "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGPWR")

_REFUSED = {
    "SIGKILL": "cannot be caught by any process",
    "SIGSTOP": "cannot be caught by any process",
    "SIGTERM": "always stops the broker cleanly (the on-shutdown actions run first), so it cannot be bound; "
               "to run steps when the broker stops use amps-action-on-shutdown",
    "SIGINT": "always stops the broker cleanly (the on-shutdown actions run first), so it cannot be bound; "
              "to run steps when the broker stops use amps-action-on-shutdown",
}


def signal_name(value: str) -> str:
    """A signal an action may bind, by name (``SIGUSR1``; ``usr1`` is accepted too): its canonical name.

    Raises:
        ValueError: not a signal, not one of this system's, or one that cannot be bound (and why).
    """
    word = value.strip().upper()
    if not word.startswith("SIG"):
        word = "SIG" + word
    if word in _REFUSED:
        raise ValueError(f"{word} {_REFUSED[word]}")
    usable = [name for name in BINDABLE_SIGNALS if hasattr(signal, name)]
    if word not in usable:
        raise ValueError(f"{value.strip()!r} is not a signal an action can bind on this system; use one of "
                         f"{', '.join(usable)}")
    return word


SCHEDULE_OPTIONS = OptionSet(
    Option("Every", parse_schedule, required=True,
           doc="when to run: an interval (10s, 4h), a daily time (02:30, 02:30Z for UTC) or a weekly time "
               "(Saturday at 00:30)"),
    Option("Name", text, doc="the action's name in logs and statistics (default: action-<n>)"),
)
SIGNAL_OPTIONS = OptionSet(
    Option("Signal", signal_name, required=True, doc="the signal that runs the action, e.g. SIGUSR1 or SIGHUP"),
    Option("Name", text, doc="the action's name in logs and statistics (default: action-<n>)"),
)
ADMIN_OPTIONS = OptionSet(
    Option("Path", admin_path, required=True,
           doc="served at /amps/administrator/actions/<Path> (one path segment, no '/')"),
    Option("RequiredParameter", text, default=(), repeatable=True,
           doc="a query parameter the request must carry (repeat the element for several)"),
    Option("Name", text, doc="the action's name in the listing, logs and statistics (default: action-<n>)"),
    Option("Description", text, default="", doc="one line for the /amps/administrator listing"),
)
NAME_ONLY = OptionSet(
    Option("Name", text, doc="the action's name in logs and statistics (default: action-<n>)"),
)


class OnSchedule(Trigger):
    """``amps-action-on-schedule``: runs the action on a timer, daily or weekly (see the module docstring)."""

    #: The longest single wait, in seconds: a wall-clock change (an NTP step, a suspended machine) is noticed
    #: within this long, so a daily run is never late by more.
    RECHECK_SECONDS = 60.0

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = SCHEDULE_OPTIONS.parse(options, owner="amps-action-on-schedule")
        self.schedule = opts["Every"]
        self.name = opts["Name"] or "unknown"

    async def serve(self, fire: Fire, host: ActionHost, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fire on schedule until cancelled; each run is a child of this trigger's nursery."""
        schedule = self.schedule
        async with trio.open_nursery() as runs:
            task_status.started()
            if schedule.interval is not None:
                log.info("schedule %r: %s", self.name, schedule.describe())
                while True:
                    await trio.sleep(schedule.interval)
                    runs.start_soon(fire, {})
            else:
                due = next_fire(schedule, host.now())
                log.info("schedule %r: %s; next run at %s", self.name, schedule.describe(), due.isoformat())
                while True:
                    wait = due.timestamp() - host.now().timestamp()  # instants: wall-clock arithmetic misleads
                    if wait > 0:
                        await trio.sleep(min(wait, self.RECHECK_SECONDS))
                        continue
                    runs.start_soon(fire, {})
                    due = next_fire(schedule, host.now())
                    log.debug("schedule %r: next run at %s", self.name, due.isoformat())


class OnStartup(Trigger):
    """``amps-action-on-startup``: runs the action once, as the last step of start-up."""

    def __init__(self, options: Mapping[str, str]) -> None:
        NAME_ONLY.check(options, owner="amps-action-on-startup")

    async def serve(self, fire: Fire, host: ActionHost, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the action, then report started (start-up actions run one after another, in file order)."""
        await fire({})
        task_status.started()


class OnShutdown(Trigger):
    """``amps-action-on-shutdown``: runs the action once, as the first step of shutdown."""

    def __init__(self, options: Mapping[str, str]) -> None:
        NAME_ONLY.check(options, owner="amps-action-on-shutdown")

    async def serve(self, fire: Fire, host: ActionHost, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Nothing to wait for."""
        task_status.started()

    async def shutdown(self, fire: Fire, host: ActionHost) -> None:
        """Run the action (the broker waits for it, up to its shutdown deadline)."""
        await fire({})


class OnSignal(Trigger):
    """``amps-action-on-signal``: runs the action each time the process receives ``Signal``."""

    #: Signal number -> who binds it, across the process (a signal has one handler per process).
    _bound: ClassVar[dict[int, str]] = {}

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = SIGNAL_OPTIONS.parse(options, owner="amps-action-on-signal")
        self.signal_name: str = opts["Signal"]
        self.label = f"action {opts['Name']!r}" if opts["Name"] else "another action"

    async def serve(self, fire: Fire, host: ActionHost, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Receive the signal until cancelled; each run is a child of this trigger's nursery.

        Raises:
            ActionError: another action already binds this signal, or the broker is not running in the main
                thread (signals can only be received there).
        """
        signum = int(getattr(signal, self.signal_name))
        if signum in self._bound:
            raise ActionError(f"{self.signal_name} is already bound by {self._bound[signum]}: one action per "
                              "signal; put the steps of both in one <Action>")
        self._bound[signum] = self.label
        started = False
        try:
            with trio.open_signal_receiver(signum) as received:
                async with trio.open_nursery() as runs:
                    task_status.started()
                    started = True
                    async for _ in received:
                        log.info("received %s: running its action", self.signal_name)
                        runs.start_soon(fire, {"AMPS_SIGNAL": self.signal_name})
        except RuntimeError as exc:
            if started:
                raise
            raise ActionError(f"cannot receive {self.signal_name}: {exc} (signals are only received when the "
                              "broker runs in the process's main thread)") from exc
        finally:
            del self._bound[signum]


class OnAdmin(Trigger):
    """``amps-action-on-admin``: runs the action on ``GET /amps/administrator/actions/<Path>``."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = ADMIN_OPTIONS.parse(options, owner="amps-action-on-admin")
        self.path: str = opts["Path"]
        self.required: tuple[str, ...] = tuple(opts["RequiredParameter"])
        self.name: str = opts["Name"] or self.path
        self.description: str = opts["Description"]

    async def serve(self, fire: Fire, host: ActionHost, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the path until cancelled. A run belongs to this trigger's nursery, not to the HTTP request, so
        a client that hangs up does not cancel it half way.

        Raises:
            ActionError: another action serves the same path.
        """
        async with trio.open_nursery() as runs:

            async def answer(request: AdminRequest) -> tuple[int, str]:
                refused = self.refusal(request)
                if refused:
                    return 400, refused
                check = getattr(fire, "check", None)  # the runtime's fire has it (broker.actions.runtime.Firing)
                if check is not None:
                    try:
                        check(request.parameters)
                    except ParameterError as exc:
                        return 400, str(exc)
                done = trio.Event()
                results: list[RunResult] = []

                async def run() -> None:
                    try:
                        results.append(await fire(dict(request.parameters)))
                    finally:
                        done.set()

                runs.start_soon(run)
                await done.wait()
                if not results:  # the run was cancelled: the broker is stopping
                    return 503, f"action {self.name!r} was stopped: the broker is shutting down"
                result = results[0]
                return {"success": 200, "skipped": 200, "busy": 409}.get(result.outcome, 500), result.summary()

            remove = host.add_admin_action(self.path, answer, name=self.name, description=self.description,
                                           required=self.required)
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                remove()

    def refusal(self, request: AdminRequest) -> str:
        """Why ``request`` cannot run the action (a required parameter missing or empty), or ``""``."""
        missing = [name for name in self.required if not request.parameters.get(name, "").strip()]
        if not missing:
            return ""
        example = "&".join(f"{name}=<value>" for name in self.required)
        hint = ""
        near = [sent for sent in request.parameters for name in missing
                if sent.lower() == name.lower() and sent != name]
        if near:
            hint = f" (parameter names are case-sensitive: {near[0]!r} was sent)"
        plural = "s" if len(missing) > 1 else ""
        return (f"action {self.name!r} needs the query parameter{plural} {', '.join(missing)}{hint}: request "
                f"/amps/administrator/actions/{self.path}?{example}. Nothing was run.")


@hookimpl
def broker_register_actions(registry: Registry) -> None:
    """Register the five built-in triggers."""
    registry.add("amps-action-on-schedule", OnSchedule, options=SCHEDULE_OPTIONS,
                 description="runs the action on a timer (Every=10s), daily (02:30) or weekly (Saturday at 00:30)")
    registry.add("amps-action-on-startup", OnStartup, options=NAME_ONLY,
                 description="runs the action once, as the last step of start-up")
    registry.add("amps-action-on-shutdown", OnShutdown, options=NAME_ONLY,
                 description="runs the action once, as the first step of shutdown")
    registry.add("amps-action-on-signal", OnSignal, options=SIGNAL_OPTIONS,
                 description="runs the action when the process receives Signal (SIGUSR1, SIGHUP...)")
    registry.add("amps-action-on-admin", OnAdmin, options=ADMIN_OPTIONS,
                 description="runs the action on GET /amps/administrator/actions/<Path> of the Admin server")
