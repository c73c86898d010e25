"""The action object interface: what an ``On`` trigger, an ``If`` gate and a ``Do`` step implement.

An ``<Action>`` is one or more triggers, then gates and steps in file order::

    <Action>
      <On><Module>amps-action-on-schedule</Module><Options><Every>02:30</Every></Options></On>
      <If><Module>amps-action-if-file-system-usage</Module><Options>...</Options></If>
      <Do><Module>amps-action-do-archive-journal</Module><Options><Age>1d</Age></Options></Do>
    </Action>

Every module is a plugin: ``broker_register_actions(registry)`` adds ``registry.add(name, factory,
options=OptionSet(...))``. The factory is called once, when the broker starts, with the module's options as
text (``Mapping[str, str]``: ``<Modules>`` options overlaid by the ones under ``On``/``If``/``Do``; values
holding ``{{VAR}}`` are left as written). It returns a :class:`Trigger`, a :class:`Gate` or a :class:`Step`.

A run: a trigger calls ``await fire(variables)``. The runtime (:mod:`broker.actions.runtime`) skips the run if
the same action is still running (two runs of one action never overlap), otherwise, for each gate and step in
order, substitutes ``{{VAR}}`` in its options (the trigger's variables plus ``AMPS_INSTANCE_NAME``,
``AMPS_DATETIME``, ``AMPS_UNIX_TIMESTAMP``; an undefined variable expands to the empty string, as in AMPS,
and is logged; see :mod:`broker.actions.variables`), parses them with the module's declared :class:`OptionSet` and
calls it with a :class:`RunContext`. A gate that answers ``False`` skips the rest of the run; a step that
raises fails the run: it is logged with the action's name and the step, counted, and the later steps are
skipped. The broker keeps serving either way.

Everything a module may ask of the broker goes through :class:`ActionHost` (``ctx.host``): plugins never
reach into the kernel.
"""

from __future__ import annotations

import abc
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import trio

from broker.errors import BrokerError

__all__ = [
    "ActionError",
    "ActionHost",
    "AdminRequest",
    "Fire",
    "Gate",
    "RunContext",
    "RunResult",
    "Step",
    "StepResult",
    "Trigger",
]


class ActionError(BrokerError):
    """A gate or step could not do its work; the message says what and why (it is logged and answered)."""

    reason = "action failed"


@dataclass(frozen=True)
class StepResult:
    """What one gate or step did.

    Attributes:
        module: The module name (``amps-action-do-archive-journal``).
        kind: ``"if"`` or ``"do"``.
        outcome: ``"success"``, ``"failure"``, ``"false"`` (a gate that stopped the run) or ``"skipped"``.
        message: One line: what was done, or why it failed.
    """

    module: str
    kind: str
    outcome: str
    message: str = ""


@dataclass(frozen=True)
class RunResult:
    """What one run of an action did.

    Attributes:
        action: The action's name.
        outcome: ``"success"`` (every step ran), ``"failure"`` (a step failed), ``"skipped"`` (a gate said no)
            or ``"busy"`` (the action was still running: this run did not happen).
        steps: Each gate and step reached, in order.
        duration: Seconds the run took.
    """

    action: str
    outcome: str
    steps: tuple[StepResult, ...] = ()
    duration: float = 0.0

    def summary(self) -> str:
        """Human-readable lines: the outcome, then one line per gate or step."""
        lines = [f"action {self.action!r}: {self.outcome} ({self.duration:.3f}s)"]
        lines += [f"  {s.kind} {s.module}: {s.outcome}{': ' + s.message if s.message else ''}" for s in self.steps]
        return "\n".join(lines)


#: How a trigger starts a run: ``await fire(variables)``; the variables are substituted into ``{{NAME}}``.
Fire = Callable[[Mapping[str, str]], Awaitable[RunResult]]


@dataclass(frozen=True)
class AdminRequest:
    """A REST request to ``/amps/administrator/actions/<path>`` as an ``amps-action-on-admin`` trigger sees it.

    Attributes:
        path: The ``<path>`` part.
        parameters: The query parameters (last value wins), names as sent.
    """

    path: str
    parameters: Mapping[str, str]


#: Answers an admin request: ``(HTTP status, body text)``.
AdminHandler = Callable[[AdminRequest], Awaitable[tuple[int, str]]]


class ActionHost(Protocol):
    """What action modules may ask of the broker (``ctx.host``, and the ``host`` a trigger is served with).

    Blocking work (file copies, compression, compaction) is done off the event loop by the host or by the
    module with ``trio.to_thread.run_sync``.
    """

    #: The instance ``<Name>``.
    instance_name: str
    #: The ``<TransactionLog>`` directories and the file-name form of the instance (``None`` without a journal).
    journal_directory: Path | None
    journal_archive_directory: Path | None

    def now(self) -> dt.datetime:
        """The wall-clock time, timezone-aware (local zone). Tests drive it with trio's clock."""

    def sow_topics(self) -> Sequence[tuple[str, str]]:
        """``(topic, message type)`` of every SOW topic."""

    async def delete_sow(self, topic: str, message_type: str | None, filter_text: str) -> dict[str, int]:
        """Delete the records of SOW topics matching ``topic`` (a name or regex) and ``filter_text``, exactly as
        a client's ``sow_delete`` does (journaled, OOF ``deleted`` to subscribers). Returns topic -> deleted.

        Raises:
            ActionError: no SOW topic matches, or the filter is bad.
        """

    async def compact_sow(self, topic: str | None, message_type: str | None) -> list[str]:
        """Compact the storage of the matching SOW topics (every topic when ``topic`` is ``None``), in a worker
        thread. Returns the topics compacted."""

    def journal_writer_index(self) -> int | None:
        """The index of the journal file being written (``None`` without a journal)."""

    def request_shutdown(self, reason: str) -> None:
        """Begin a clean shutdown of the broker (as SIGTERM does)."""

    def rotate_logs(self) -> list[str]:
        """Close and reopen the log files the broker writes; returns their paths (empty: no log file)."""

    def reload_security(self, kind: str) -> str:
        """Re-read the files of the ``authentication`` or ``entitlement`` modules; returns a summary.

        Raises:
            BrokerError: a new file is unusable (its module keeps the old rules).
        """

    def add_admin_action(self, path: str, handler: AdminHandler, *, name: str, description: str,
                         required: Sequence[str]) -> Callable[[], None]:
        """Serve ``GET /amps/administrator/actions/<path>`` with ``handler``; returns a function removing it.

        Raises:
            ActionError: the path is taken by another action.
        """


@dataclass
class RunContext:
    """What a gate or step gets for one run.

    Attributes:
        action: The action's name (its ``Name`` option, else ``action-<n>`` in file order).
        module: The module name of the gate or step being run.
        options: The options with ``{{VAR}}`` substituted, parsed by the module's declared ``OptionSet`` (text
            values when the module declared none).
        variables: The run's variables (the trigger's plus ``AMPS_INSTANCE_NAME``, ``AMPS_DATETIME``,
            ``AMPS_UNIX_TIMESTAMP``). One mapping is shared by the run's gates and steps: a step may add
            variables for the ones after it (``ctx.variables["PRICE"] = "12"``), as AMPS's context does.
        host: The broker.
        log: The logger to report on (``broker.actions``).
    """

    action: str
    module: str
    options: Mapping[str, Any]
    variables: MutableMapping[str, str]
    host: ActionHost
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("broker.actions"))


class Trigger(abc.ABC):
    """An ``On`` module: decides when the action runs."""

    @abc.abstractmethod
    async def serve(self, fire: Fire, host: ActionHost, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled, calling ``await fire(variables)`` whenever the action should run.

        Started in the broker's nursery once every transport listens (so a startup trigger fires "as the
        last step of start-up"); call ``task_status.started()`` once ready. Cancelled at shutdown, after
        :meth:`shutdown` (when the broker is cancelled from outside rather than stopped by a signal or a
        shutdown request, :meth:`shutdown` is called after the cancellation).
        """

    async def shutdown(self, fire: Fire, host: ActionHost) -> None:  # noqa: B027 - optional
        """Called once when the broker begins to shut down, before the journal closes. Does nothing unless
        overridden (``amps-action-on-shutdown`` fires here)."""


class Gate(abc.ABC):
    """An ``If`` module: whether the steps after it run."""

    @abc.abstractmethod
    async def check(self, ctx: RunContext) -> bool:
        """``True`` to go on with the steps after this gate, ``False`` to end the run (outcome ``skipped``).

        Raises:
            ActionError: the condition cannot be evaluated (the run fails).
        """


class Step(abc.ABC):
    """A ``Do`` module: one step of an action."""

    @abc.abstractmethod
    async def run(self, ctx: RunContext) -> str:
        """Do the work; return one line saying what was done (it is logged and shown to a REST caller).

        Raises:
            ActionError: the step failed; the message says what and why. Any other exception fails the step
                the same way (with its traceback logged).
        """
