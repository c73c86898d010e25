"""Which AMPS command options and topics the broker honours, and the refusal of every other one.

AMPS commands carry options in ``o`` (``oof,replace,top_n=5``). The broker answers each option of
subscribe, delta_subscribe, sow, sow_and_subscribe, sow_and_delta_subscribe, sow_delete and publish in one
of two ways: it does what AMPS documents (listed in :data:`SUPPORTED`), or it refuses the command with
``invalid options`` (the official client raises ``InvalidOptionsException("invalid options '<options>'")``),
and the broker's log names the option and why. Nothing is accepted and ignored. The table in
``docs/protocol.md`` ("Command options") lists the same, and a test checks the two agree.

Topics under ``/AMPS/`` are AMPS's event topics (ClientStatus, SOWStats...): the broker does not publish them
yet, so every command on one is refused with ``invalid topic``.

:func:`check_command` runs once per command, before the engine sees it; a publisher's usual publishes (no
options, an ordinary topic) never reach it (see ``broker.server.session``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from broker.engine.queries import parse_options
from broker.errors import CommandError
from broker.protocol.constants import RESERVED_TOPIC_PREFIX, is_reserved_topic

__all__ = [
    "INVALID_OPTIONS",
    "QUERY_ONLY_FIELDS",
    "RESERVED_TOPIC_PREFIX",
    "SUPPORTED",
    "check_command",
    "is_reserved_topic",
    "option_problem",
]

#: The failure reason of a refused option (the official client raises InvalidOptionsException).
INVALID_OPTIONS = "invalid options"

_SUBSCRIBE = frozenset({"subscribe", "delta_subscribe"})
_SOW_AND_SUBSCRIBE = frozenset({"sow_and_subscribe", "sow_and_delta_subscribe"})
_DELTA = frozenset({"delta_subscribe", "sow_and_delta_subscribe"})
_QUERIES = frozenset({"sow"}) | _SOW_AND_SUBSCRIBE
_PUBLISHES = frozenset({"publish", "delta_publish"})
#: The commands whose options are checked here.
COMMANDS = ("subscribe", "delta_subscribe", "sow", "sow_and_subscribe", "sow_and_delta_subscribe", "sow_delete",
            "publish", "delta_publish")

#: Option -> the commands it works on. ``bookmark`` marks options that only a bookmark subscription
#: (subscribe or delta_subscribe with a ``bookmark``) takes.
SUPPORTED: Mapping[str, frozenset[str]] = MappingProxyType({
    "replace": _SUBSCRIBE | _SOW_AND_SUBSCRIBE,
    "oof": _SUBSCRIBE | _SOW_AND_SUBSCRIBE,
    "no_empties": _DELTA,
    "send_keys": _DELTA,
    "top_n": _QUERIES,
    "skip_n": _QUERIES,
    "grouping": frozenset({"sow"}),
    "projection": frozenset({"sow"}),
    "pause": _SUBSCRIBE,
    "resume": _SUBSCRIBE,
    "rate": _SUBSCRIBE,
    "bookmark_not_found": _SUBSCRIBE,
    "live": _SUBSCRIBE,
})
#: Options that only a bookmark subscription takes.
BOOKMARK_ONLY = frozenset({"pause", "resume", "rate", "bookmark_not_found", "live"})
#: Options written ``name=value``; every other option is a bare word.
VALUED = frozenset({"top_n", "skip_n", "grouping", "projection", "rate", "bookmark_not_found", "conflation",
                    "conflation_key", "select", "max_backlog", "rate_max_gap"})
#: ``bookmark_not_found`` values.
BOOKMARK_NOT_FOUND = ("now", "epoch", "fail")

#: AMPS options the broker does not implement, with why (the log line and docs/protocol.md say it).
NOT_IMPLEMENTED: Mapping[str, str] = MappingProxyType({
    "conflation": "conflated subscriptions are not built yet; subscribe without conflation",
    "conflation_key": "conflated subscriptions are not built yet; subscribe without conflation",
    "select": "select (a subset of each message's fields) is not built yet; read the whole message",
    "timestamp": "deliveries do not carry a timestamp yet; subscribe without timestamp",
    "no_sowkey": "deliveries always carry their SowKey; subscribe without no_sowkey",
    "fully_durable": "there is no replication to wait for; a bookmark subscription without it gets every "
                     "message once it is in the transaction log",
    "rate_max_gap": "a replay rate has no gap limit here; use rate alone",
    "max_backlog": "message queues are not supported",
    "cancel": "message queues are not supported",
    "expire": "a sow_delete here deletes (OOF reason deleted); expiring records on demand is not supported",
})

#: Header fields that shape a SOW query's results (canonical name, key on the wire, the commands that take it):
#: refused on the other commands.
QUERY_ONLY_FIELDS = (("top_n", "top_n", _QUERIES), ("skip_n", "skip_n", _QUERIES), ("order_by", "orderby", _QUERIES),
                     ("sow_keys", "sow_keys", _QUERIES | {"sow_delete"}))


#: Header fields of AMPS's command reference (older versions) that the broker does not implement: refused on every
#: command but a publish, naming what to use instead. The codec keeps them aside (``Header.extra``).
UNSUPPORTED_FIELDS: Mapping[str, str] = MappingProxyType({
    "data_only": "deliveries always carry their header",
    "send_empty": "use the no_empties option of a delta subscription",
    "send_oof": "use the oof option",
    "send_keys": "use the send_keys option of a delta subscription",
    "send_subscription_ids": "deliveries always carry their subscription ids (sids)",
    "max_msgs": "a subscription has no message limit; unsubscribe instead",
})


def option_problem(command: str, name: str, value: str | None, *, bookmark: bool = False) -> str | None:
    """Why ``command`` cannot take option ``name`` (``value``: its text after ``=``, ``None`` for a bare
    word), or ``None`` when the broker does what AMPS documents for it.

    Args:
        command: The command (``p`` is ``publish``).
        name: The option's name.
        value: Its value, or ``None`` when it was given without ``=``.
        bookmark: The command is a bookmark subscription (a subscribe with a ``bookmark``, or a pause/resume
            of a running one).
    """
    why = NOT_IMPLEMENTED.get(name)
    if why is not None:
        return why
    commands = SUPPORTED.get(name)
    if commands is None:
        return "not an AMPS option for this command (check the spelling)"
    if command not in commands:
        return f"{command} does not take it (it applies to {', '.join(sorted(commands))})"
    if name in BOOKMARK_ONLY and not bookmark:
        return f"{name} applies to bookmark subscriptions only (a {command} with a bookmark)"
    if name in VALUED:
        if value is None or not value:
            return f"{name} needs a value ({name}=...)"
        if name == "bookmark_not_found" and value not in BOOKMARK_NOT_FOUND:
            return f"bookmark_not_found={value!r}: expected one of {', '.join(BOOKMARK_NOT_FOUND)}"
    elif value is not None:
        return f"{name} takes no value (write {name}, not {name}={value})"
    return None


def check_command(command: str, header: Mapping[str, Any], *, bookmark: bool = False) -> None:
    """Refuse a command whose topic is an ``/AMPS/`` event topic, or that carries an option (or a query-only
    header field) the broker does not honour for it. Runs once per command.

    Args:
        command: The command (``p`` is ``publish``).
        header: Its decoded header.
        bookmark: See :func:`option_problem`.

    Raises:
        CommandError: ``invalid topic`` for ``/AMPS/...``; ``invalid options`` naming the option; a reason
            naming the header field for ``top_n``, ``skip_n``, ``orderby`` or ``sow_keys`` on a command that
            runs no query, and for the fields of :data:`UNSUPPORTED_FIELDS`, except on a publish (the official
            client raises CommandException with that text).
    """
    topic = header.get("topic")
    # A publish names a topic (``^/AMPS/x`` is an ordinary name); the other commands may give a regular expression.
    if isinstance(topic, str) and (topic.startswith(RESERVED_TOPIC_PREFIX) if command in _PUBLISHES
                                   else is_reserved_topic(topic)):
        raise CommandError("invalid topic", f"{topic!r} is one of AMPS's /AMPS/ event topics (ClientStatus, "
                           "SOWStats...), which this broker does not publish yet")
    text = header.get("options")
    if text:
        words, pairs = parse_options(str(text))
        for name in sorted(words):
            why = option_problem(command, name, None, bookmark=bookmark)
            if why is not None:
                raise CommandError(INVALID_OPTIONS, f"option {name!r} refused: {why}")
        for name, value in sorted(pairs.items()):
            why = option_problem(command, name, value, bookmark=bookmark)
            if why is not None:
                raise CommandError(INVALID_OPTIONS, f"option {name}={value!r} refused: {why}")
    if command in _PUBLISHES:  # a publish's other fields are read on the batch path, not checked
        return
    extra = getattr(header, "extra", None)
    if extra:
        for key in sorted(extra):
            why = UNSUPPORTED_FIELDS.get(key)
            if why is not None:
                reason = f"header field {key} is not supported by {command}: {why}"
                raise CommandError(reason, reason)
    if command not in _QUERIES:
        for field, key, takes in QUERY_ONLY_FIELDS:
            if command not in takes and header.get(field) is not None:
                reason = (f"header field {key} is not supported by {command}: it shapes sow query results; "
                          "use a sow or sow_and_subscribe")
                raise CommandError(reason, reason)
