"""SOW steps: ``amps-action-do-delete-sow`` and ``amps-action-do-compact-sow``.

``delete-sow`` deletes the records of the SOW topics matching ``Topic`` (a name or a regular expression)
and ``Filter`` exactly as a client's ``sow_delete`` does: the deletes are journaled and every subscriber
whose filter matched a deleted record gets an OOF with reason ``deleted``. A typical filter removes stale
records: ``/status = 'closed' AND LAST_UPDATED() < ({{AMPS_UNIX_TIMESTAMP}} - 86400)`` (``{{...}}`` is
substituted when the action runs). ``MessageType`` narrows the topics to one message type; AMPS requires
it, the broker accepts its absence (every message type).

``compact-sow`` compacts the storage of the topics named by ``Topic`` and ``MessageType`` (both, or neither
for every SOW topic), in a worker thread.

Filters and topic expressions without ``{{...}}`` are checked when the config is loaded (``broker check``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from broker import hookimpl
from broker.actions.interface import ActionError, RunContext, Step
from broker.errors import FilterError
from broker.expr import compile_filter
from broker.options import Option, OptionError, OptionSet, text

if TYPE_CHECKING:
    from broker.plugins import Registry

__all__ = ["CompactSow", "DeleteSow", "filter_expression", "topic_expression"]


def filter_expression(value: str) -> str:
    """An AMPS content filter (``/status = 'closed'``), checked by compiling it."""
    filter_text = text(value)
    try:
        compile_filter(filter_text)
    except FilterError as exc:
        raise ValueError(f"is not a valid filter: {exc.detail}") from None
    return filter_text


def topic_expression(value: str) -> str:
    """A topic name or regular expression."""
    topic = text(value)
    try:
        re.compile(topic)
    except re.error as exc:
        raise ValueError(f"{topic!r} is not a valid regular expression ({exc}); escape special "
                         "characters to match them literally") from None
    return topic


DELETE_OPTIONS = OptionSet(
    Option("Topic", topic_expression, required=True, doc="SOW topic name or regular expression"),
    Option("MessageType", text, doc="Only topics of this message type (default: any)"),
    Option("Filter", filter_expression, required=True,
           doc="AMPS filter of the records to delete, e.g. /status = 'closed'"),
)

COMPACT_OPTIONS = OptionSet(
    Option("Topic", topic_expression, doc="SOW topic name or regular expression (with MessageType)"),
    Option("MessageType", text, doc="Message type of the topics (with Topic)"),
)


def _records(count: int) -> str:
    return f"{count} record{'' if count == 1 else 's'}"


class DeleteSow(Step):
    """``amps-action-do-delete-sow``: delete matching SOW records, with OOF ``deleted`` to subscribers."""

    def __init__(self, options: Mapping[str, str]) -> None:
        del options  # parsed per run: they may hold {{VARIABLES}}

    async def run(self, ctx: RunContext) -> str:
        """Delete the records; the line gives the count per topic.

        Raises:
            ActionError: No SOW topic matches, or the filter cannot be evaluated.
        """
        topic: str = ctx.options["Topic"]
        message_type: str | None = ctx.options["MessageType"]
        filter_text: str = ctx.options["Filter"]
        counts = await ctx.host.delete_sow(topic, message_type, filter_text)
        total = sum(counts.values())
        if not total:
            return f"deleted no record: none matched {filter_text!r} in {', '.join(counts) or topic}"
        per_topic = ", ".join(f"{name} {n}" for name, n in counts.items() if n)
        return f"deleted {_records(total)} matching {filter_text!r} ({per_topic})"


class CompactSow(Step):
    """``amps-action-do-compact-sow``: compact the storage of SOW topics.

    Raises:
        OptionError: Only one of ``Topic`` and ``MessageType`` is given (at start-up).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        if ("Topic" in options) != ("MessageType" in options):
            raise OptionError("amps-action-do-compact-sow: give both <Topic> and <MessageType> (one topic "
                              "or pattern) or neither (every SOW topic)")

    async def run(self, ctx: RunContext) -> str:
        """Compact; the line names the topics.

        Raises:
            ActionError: No SOW topic matches.
        """
        topic: str | None = ctx.options["Topic"]
        message_type: str | None = ctx.options["MessageType"]
        compacted = await ctx.host.compact_sow(topic, message_type)
        if not compacted:
            raise ActionError(f"no SOW topic matches {topic!r} with message type {message_type!r}"
                              if topic else "there is no SOW topic to compact")
        return f"compacted {len(compacted)} SOW topic{'' if len(compacted) == 1 else 's'}: {', '.join(compacted)}"


@hookimpl
def broker_register_actions(registry: Registry) -> None:
    """Register the two SOW steps."""
    registry.add("amps-action-do-delete-sow", DeleteSow, options=DELETE_OPTIONS,
                 description="Delete the SOW records of Topic matching Filter (subscribers get OOF deleted)")
    registry.add("amps-action-do-compact-sow", CompactSow, options=COMPACT_OPTIONS,
                 description="Compact the storage of the Topic/MessageType SOW topics (or of all)")
