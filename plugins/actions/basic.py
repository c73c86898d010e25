"""Basic steps: ``amps-action-do-echo-message``, ``-nothing``, ``-shutdown`` and ``-rotate-logs``.

``echo-message``
    Logs ``Message`` (required; ``{{VARIABLES}}`` substituted) to the ``broker.actions`` logger at ``Level``
    (an AMPS level, default ``info``), so it reaches every log target of that level.
``nothing``
    Does nothing (bind a signal to it to ignore the signal, as in AMPS).
``shutdown``
    Begins a clean shutdown of the broker, as SIGTERM does.
``rotate-logs``
    Closes every log file and opens the file its ``FileName`` mask names now (a new file when the mask's
    time tokens or ``%n`` give a new name). When the broker logs to no file, the result says so: that is
    not a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import trio

from broker import hookimpl
from broker.actions.interface import ActionError, RunContext, Step
from broker.config.log_targets import AMPS_LEVELS, python_level
from broker.options import Option, OptionSet, choice, text

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["EchoMessage", "Nothing", "RotateLogs", "Shutdown"]

ECHO_OPTIONS = OptionSet(
    Option("Message", text, required=True, doc="The text to log; {{VARIABLES}} are substituted"),
    Option("Level", choice(*(name for name in AMPS_LEVELS if name not in ("debug", "none"))), default="info",
           doc="AMPS log level of the message"),
)


class _NoOptions(Step):
    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # declared empty: the registry rejects any option


class EchoMessage(Step):
    """``amps-action-do-echo-message``: log a message."""

    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # parsed per run: they may hold {{VARIABLES}}

    async def run(self, ctx: RunContext) -> str:
        """Log ``Message`` at ``Level``; returns the message."""
        message: str = ctx.options["Message"]
        level: str = ctx.options["Level"] or "info"
        ctx.log.log(python_level(level), "%s", message)
        return f"logged at {level}: {message}"


class Nothing(_NoOptions):
    """``amps-action-do-nothing``."""

    async def run(self, ctx: RunContext) -> str:
        """Do nothing."""
        return "did nothing"


class Shutdown(_NoOptions):
    """``amps-action-do-shutdown``: a clean shutdown, as SIGTERM."""

    async def run(self, ctx: RunContext) -> str:
        """Ask the broker to shut down (it does so once the run ends)."""
        ctx.host.request_shutdown(f"action {ctx.action!r}")
        return "shutdown requested"


class RotateLogs(_NoOptions):
    """``amps-action-do-rotate-logs``: reopen the log files under their masks' current names."""

    async def run(self, ctx: RunContext) -> str:
        """Reopen the log files (in a worker thread).

        Raises:
            ActionError: A new log file cannot be opened (the broker keeps writing the old one).
        """
        try:
            paths = await trio.to_thread.run_sync(ctx.host.rotate_logs)
        except OSError as exc:
            raise ActionError(f"cannot open the next log file: {exc}; the broker keeps logging to the current "
                              "one (check the directory of <Logging><Target><FileName>)") from None
        if not paths:
            return ("no log file to rotate: the broker logs to no file (add <Logging><Target><Protocol>file"
                    "</Protocol><FileName>...</FileName></Target></Logging>)")
        return f"now logging to {', '.join(paths)}"


@hookimpl
def broker_register_actions(registry: Registry) -> None:
    """Register the basic steps."""
    registry.add("amps-action-do-echo-message", EchoMessage, options=ECHO_OPTIONS,
                 description="Log Message at Level (default info)")
    registry.add("amps-action-do-nothing", Nothing, options=OptionSet(), description="Do nothing")
    registry.add("amps-action-do-shutdown", Shutdown, options=OptionSet(),
                 description="Shut the broker down cleanly, as SIGTERM")
    registry.add("amps-action-do-rotate-logs", RotateLogs, options=OptionSet(),
                 description="Close the log files and open the names their FileName masks give now")
