"""Message types by name."""

from __future__ import annotations

from broker.errors import CommandError
from broker.messagetypes._base import MessageType
from broker.messagetypes._binary import BinaryMessageType
from broker.messagetypes._json import JsonMessageType
from broker.messagetypes._xml import XmlMessageType

_TYPES: dict[str, MessageType] = {
    t.name: t for t in (JsonMessageType(), XmlMessageType(), BinaryMessageType())
}


def message_type_names() -> tuple[str, ...]:
    """The names :func:`get_message_type` accepts, sorted."""
    return tuple(sorted(_TYPES))


def get_message_type(name: str) -> MessageType:
    """The shared (stateless) message type object called ``name``.

    Args:
        name: ``json``, ``xml`` or ``binary`` (case-insensitive).

    Raises:
        broker.errors.CommandError: reason ``invalid message type`` for any other name.
    """
    found = _TYPES.get(name.lower())
    if found is None:
        raise CommandError(
            "invalid message type",
            f"unknown message type {name!r}; supported: {', '.join(message_type_names())}",
        )
    return found
