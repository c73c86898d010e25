"""If gates: ``amps-action-if-file-system-usage`` and ``amps-action-if-condition``.

``amps-action-if-file-system-usage``
    ``Path`` (required) is any file or directory on the file system to watch; ``GreaterThan`` (required, a
    percentage such as ``95%``). True when the file system holding ``Path`` is more than ``GreaterThan``
    full, counting as ``df`` does: used / (used + available to unprivileged users). ``os.statvfs`` runs in
    a worker thread.

``amps-action-if-condition``
    ``Condition`` (required) is an AMPS filter, evaluated after ``{{VARIABLE}}`` substitution, as AMPS
    documents. Compare a variable's value by writing it into the condition (``'{{STATUS}}' = 'down'``,
    ``{{COUNT}} > 10``); the run's variables can also be read as fields of the message the condition is
    evaluated against (``/AMPS_TOPIC LIKE '^orders'``). True when the filter is TRUE; FALSE and NULL (an
    unknown variable, a comparison with NULL) are false. A condition that does not parse is reported at
    load time (``broker check``), or, when it holds ``{{...}}``, fails the run with the reason.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson
import trio

from broker import hookimpl
from broker.actions.interface import ActionError, Gate, RunContext
from broker.errors import FilterError
from broker.expr import compile_filter
from broker.messagetypes import get_message_type
from broker.options import Option, OptionSet, percentage, text
from broker_plugins.actions.sow import filter_expression

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["Condition", "FileSystemUsage", "file_system_usage"]

USAGE_OPTIONS = OptionSet(
    Option("Path", text, required=True, doc="A file or directory on the file system to watch"),
    Option("GreaterThan", percentage, required=True, doc="True when the file system is fuller than this, e.g. 95%"),
)

CONDITION_OPTIONS = OptionSet(
    Option("Condition", filter_expression, required=True,
           doc="An AMPS filter, after {{VARIABLE}} substitution, e.g. {{AMPS_UNIX_TIMESTAMP}} > 1700000000"),
)


def file_system_usage(path: str) -> float:
    """How full the file system holding ``path`` is, in percent (as ``df`` reports it).

    Raises:
        OSError: ``path`` does not exist or cannot be examined.
    """
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize
    return 100.0 * used / usable if usable else 0.0


class FileSystemUsage(Gate):
    """``amps-action-if-file-system-usage``: true when the file system holding ``Path`` is fuller than
    ``GreaterThan``."""

    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # parsed per run: they may hold {{VARIABLES}}

    async def check(self, ctx: RunContext) -> bool:
        """Measure the usage (in a worker thread) and compare.

        Raises:
            ActionError: ``Path`` does not exist or cannot be examined.
        """
        path: str = ctx.options["Path"]
        limit: float = ctx.options["GreaterThan"]
        try:
            used = await trio.to_thread.run_sync(file_system_usage, path)
        except OSError as exc:
            raise ActionError(f"cannot measure the file system of Path {path!r}: {exc.strerror or exc}; give an "
                              "existing file or directory on the file system to watch") from None
        over = used > limit
        ctx.log.log(logging.INFO if over else logging.DEBUG, "action %r: file system of %s is %.1f%% used (%s %g%%)", ctx.action,
                    path, used, ">" if over else "<=", limit)
        return over


class _Variables:
    """The run's variables as a message: ``/NAME`` reads variable ``NAME`` (``None`` when unknown)."""

    def __init__(self, variables: Mapping[str, str]) -> None:
        self._message = get_message_type("json").parse(orjson.dumps(dict(variables)))

    def get(self, path: str) -> object:
        return self._message.get(path)


class Condition(Gate):
    """``amps-action-if-condition``: true when the AMPS filter ``Condition`` is TRUE."""

    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # parsed per run: they may hold {{VARIABLES}}

    async def check(self, ctx: RunContext) -> bool:
        """Evaluate the substituted condition against the run's variables.

        Raises:
            ActionError: The condition does not parse (it is shown as substituted).
        """
        condition: str = ctx.options["Condition"]
        try:
            compiled = compile_filter(condition)
        except FilterError as exc:
            raise ActionError(f"Condition is not a valid AMPS filter after substitution: {exc.detail}") from None
        return compiled.evaluate(_Variables(ctx.variables)) is True


@hookimpl
def broker_register_actions(registry: Registry) -> None:
    """Register the two gates."""
    registry.add("amps-action-if-file-system-usage", FileSystemUsage, options=USAGE_OPTIONS,
                 description="True when the file system holding Path is fuller than GreaterThan")
    registry.add("amps-action-if-condition", Condition, options=CONDITION_OPTIONS,
                 description="True when the AMPS filter Condition is TRUE (after {{VARIABLE}} substitution)")
