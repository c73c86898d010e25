"""A third-party action step: ``audit-append-line`` appends a line to a file each time its action runs.

Load it without installing anything (a relative ``Library`` resolves from the config's directory)::

    <Modules>
        <Module><Name>audit</Name><Library>custom_action.py</Library></Module>
    </Modules>
    <Actions>
        <Action>
            <On>
                <Module>amps-action-on-admin</Module>
                <Options><Path>audit</Path><RequiredParameter>WHO</RequiredParameter></Options>
            </On>
            <Do>
                <Module>audit-append-line</Module>
                <Options>
                    <File>./audit.log</File>
                    <Line>{{AMPS_DATETIME}} {{WHO}} audited {{AMPS_INSTANCE_NAME}}</Line>
                </Options>
            </Do>
        </Action>
    </Actions>

``GET /amps/administrator/actions/audit?WHO=alice`` then appends ``20261124T011500.000000Z alice audited
<instance>`` to ``./audit.log``. ``tests/actions/test_actions_docs_example.py`` runs it through
``broker.testing`` and ``tests/e2e/test_e2e_actions_triggers.py`` loads it into a real broker.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from broker import hookimpl
from broker.actions import ActionError, RunContext, Step
from broker.options import Option, OptionSet, size, text

#: What the step accepts. ``broker check`` checks every use against it (unknown, missing, unparsable
#: options, with file and line); values holding ``{{VARIABLES}}`` are checked when the action runs.
OPTIONS = OptionSet(
    Option("File", text, required=True, doc="the file to append to (created if missing)"),
    Option("Line", text, required=True, doc="the line to append; {{VARIABLES}} are substituted"),
    Option("MaxBytes", size, default=1024 * 1024, doc="refuse to grow the file past this size"),
)


class AppendLine(Step):
    """``audit-append-line``: append ``Line`` to ``File``."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Called once at start-up with the options as text. They may hold {{VARIABLES}}, known only when the
        # action runs, so the typed values are read from ctx.options in run().
        del options

    async def run(self, ctx: RunContext) -> str:
        """Append the line; the returned text is logged and shown to a REST caller.

        Raises:
            ActionError: the file is full or cannot be written (the run fails with this message).
        """
        path = trio.Path(ctx.options["File"])
        line = ctx.options["Line"].replace("\n", " ") + "\n"
        limit = ctx.options["MaxBytes"]

        def append() -> int:  # blocking file I/O: run in a worker thread, never on the event loop
            try:
                with open(path, "a", encoding="utf-8") as f:
                    if f.tell() + len(line.encode()) > limit:
                        raise ActionError(f"{path} would grow past MaxBytes ({limit} bytes): rotate or remove it")
                    f.write(line)
                    return f.tell()
            except OSError as exc:
                raise ActionError(f"cannot append to {path}: {exc.strerror}; check that its directory exists "
                                  "and that the broker may write there") from exc

        total = await trio.to_thread.run_sync(append)
        ctx.log.debug("action %r appended to %s", ctx.action, path)
        return f"appended {len(line)} bytes to {path} (now {total} bytes)"


@hookimpl
def broker_register_actions(registry) -> None:  # noqa: ANN001 - broker.plugins.Registry
    """Register the step under the name configs use in ``<Do><Module>``."""
    registry.add("audit-append-line", AppendLine, options=OPTIONS,
                 description="appends Line to File ({{VARIABLES}} substituted)")
